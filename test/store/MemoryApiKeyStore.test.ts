import { MemoryApiKeyStoreLive } from "../../src/apikeys/MemoryApiKeyStore.js"
import { apiKeyStoreContract } from "./ApiKeyStore.contract.js"

apiKeyStoreContract("memory", MemoryApiKeyStoreLive)
