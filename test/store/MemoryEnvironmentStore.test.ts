import { MemoryEnvironmentStoreLive } from "../../src/environments/MemoryEnvironmentStore.js"
import { environmentStoreContract } from "./EnvironmentStore.contract.js"

environmentStoreContract("memory", MemoryEnvironmentStoreLive)
