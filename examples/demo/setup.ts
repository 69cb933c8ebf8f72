/**
 * The demo's stage: a fake Twilio REST API, the HTTPS webhook receiver and callgate as a child
 * process, then the environment configured through /v1.
 */
import { randomBytes } from "node:crypto"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { callgateApi } from "./callgate-api.js"
import { startFakeTwilio } from "./fake-twilio.js"
import { type DemoGateway, startGateway } from "./gateway-process.js"
import { lastFour, type Narrator } from "./narrator.js"
import { AGENT_ID, FALLBACK_TWIML, RESPONSE_TIMEOUT_SECONDS } from "./scenario.js"
import { DemoFailure, freePort, type Teardown } from "./steps.js"
import { startDemoReceiver } from "./webhook-receiver.js"

const file = (path: string) => fileURLToPath(new URL(path, import.meta.url))

export interface Stage {
  readonly say: Narrator
  readonly teardown: Teardown
  /** Set once callgate is started: its last output goes into a failure message. */
  gateway?: DemoGateway
}

/** Starts the fake Twilio API, the receiver and callgate; resolves once callgate is ready. */
export const startServices = async (stage: Stage) => {
  const { say, teardown } = stage
  const accountSid = `AC${randomBytes(16).toString("hex")}`
  const authToken = randomBytes(16).toString("hex")
  const adminKey = `demo_admin_${randomBytes(16).toString("hex")}`

  const twilio = await startFakeTwilio(accountSid, authToken)
  teardown.add("the fake Twilio API", twilio.close)
  say.say("setup", `fake Twilio REST API on ${twilio.baseUrl} (callgate's TWILIO_API_BASE_URL)`)

  const receiver = await startDemoReceiver({
    key: readFileSync(file("./tls/localhost-key.pem")),
    cert: readFileSync(file("./tls/localhost.pem")),
    fallbackTwiml: FALLBACK_TWIML
  })
  teardown.add("the HTTPS receiver", receiver.close)
  say.say("setup", `HTTPS webhook receiver on ${receiver.url("/")} (demo certificate from examples/demo/tls)`)

  const port = await freePort()
  const gateway = startGateway(port, {
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    ADMIN_API_KEY: adminKey,
    TWILIO_ACCOUNT_SID: accountSid,
    TWILIO_AUTH_TOKEN: authToken,
    TWILIO_API_BASE_URL: twilio.baseUrl,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_CA_FILE: file("./tls/ca.pem"),
    LOG_LEVEL: "info"
  })
  stage.gateway = gateway
  teardown.add("callgate", async () => {
    const exit = await gateway.stop()
    if (exit.code !== 0) throw new DemoFailure(`callgate exited with code ${exit.code}${exit.signal ? ` (${exit.signal})` : ""}`)
    say.say("setup", "callgate stopped (SIGTERM, exit code 0)")
  })
  say.say("setup", `starting callgate: node --import tsx src/main.ts, embedded store, on ${gateway.baseUrl}`)
  await gateway.ready(30_000)
  say.say("setup", `callgate is ready (pid ${gateway.pid}): Twilio signatures checked, webhooks trust the demo CA`)
  return { twilio, receiver, gateway, accountSid, authToken, api: callgateApi(gateway.baseUrl, adminKey), adminKey }
}

export type Services = Awaited<ReturnType<typeof startServices>>

/** Creates the environment through /v1 and hands its secrets to the receiver. */
export const configure = async ({ say }: Stage, { api, receiver }: Services) => {
  const created = await api.createEnvironment(AGENT_ID, "demo")
  say.say("config", `POST /v1/agents/${AGENT_ID}/environments: created environment ${created.id}`)
  const env = await api.updateEnvironment(AGENT_ID, created.id, {
    webhookUrl: receiver.url("/events"),
    errorFallbackType: "webhook",
    errorFallbackValue: receiver.url("/fallback"),
    errorFallbackTimeout: RESPONSE_TIMEOUT_SECONDS,
    errorFallbackOccurrenceThreshold: 1,
    errorFallbackTimeWindow: 60
  })
  if (env.webhookSecret === undefined || env.errorFallbackWebhookSecret === null) {
    throw new DemoFailure("the PATCH response did not carry the generated secrets")
  }
  say.say(
    "config",
    `PATCH /v1/agents/${AGENT_ID}/environments/${env.id}:`,
    `webhookUrl            ${env.webhookUrl}`,
    `error fallback        ${env.errorFallbackType}, ${env.errorFallbackValue}`,
    `timeout / threshold   ${env.errorFallbackTimeout} s / ${env.errorFallbackOccurrenceThreshold} occurrence in ${env.errorFallbackTimeWindow} s`,
    `secrets (last 4 only) webhookSecret ${lastFour(env.webhookSecret)}, errorFallbackWebhookSecret ${lastFour(env.errorFallbackWebhookSecret)}`
  )
  receiver.useSecrets({ events: env.webhookSecret, fallback: env.errorFallbackWebhookSecret })
  return env.id
}
