import { MemoryEnvironmentStoreLive } from "../../src/store/MemoryEnvironmentStore.js"
import { environmentStoreContract } from "./EnvironmentStore.contract.js"

environmentStoreContract("memory", MemoryEnvironmentStoreLive)
