import { MemoryInstanceStoreLive } from "../../src/fleet/MemoryInstanceStore.js"
import { instanceStoreContract } from "./InstanceStore.contract.js"

instanceStoreContract("memory", MemoryInstanceStoreLive)
