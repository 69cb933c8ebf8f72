/**
 * The signing scheme lives in its own package, `@callgate/webhooks` (packages/webhooks), which
 * receivers install to verify requests; callgate signs with the very same code.
 */
export * from "../../packages/webhooks/src/index.js"
