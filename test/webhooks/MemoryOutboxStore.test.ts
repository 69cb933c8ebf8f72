import { Layer } from "effect"
import { makeMemoryOutboxStore } from "../../src/webhooks/MemoryOutboxStore.js"
import { outboxStoreContract } from "./OutboxStore.contract.js"

outboxStoreContract("memory", Layer.empty, makeMemoryOutboxStore)
