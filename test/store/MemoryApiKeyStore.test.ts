import { MemoryApiKeyStoreLive } from "../../src/store/MemoryApiKeyStore.js"
import { apiKeyStoreContract } from "./ApiKeyStore.contract.js"

apiKeyStoreContract("memory", MemoryApiKeyStoreLive)
