import fc from "fast-check"
import { Either } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AgentConnection } from "../../src/agent/AgentConnection.js"
import type { AgentEvents } from "../../src/kernel/CallLegs.js"
import { classifyFallbackAnswer, MAX_FALLBACK_BODY_BYTES } from "../../src/fallback/FallbackWebhook.js"
import { translateTwiml } from "../../src/twiml/TwimlCallControl.js"
import { ADMIN_KEY, makeTestApp, type TestApp, uniqueId } from "../support/testApp.js"
import { createEnvironment, environmentsUrl, environmentUrl } from "../http/client.js"
import { caseCounter, DOCUMENTED_CLOSE_CODES, framesFrom, recordingSocket, RUNS } from "./fuzzSupport.js"

const check = (ok: boolean, what: string) => {
  if (!ok) throw new Error(what)
}

/** fc.assert in batches that yield to the event loop; returns the number of cases run. */
const runBatched = async <T>(property: fc.IPropertyWithHooks<T> | fc.IAsyncPropertyWithHooks<T>, counter: ReturnType<typeof caseCounter>, batch = 500) => {
  for (let done = 0; done < RUNS; done += batch) {
    await fc.assert(property as any, { numRuns: Math.min(batch, RUNS - done), seed: 7000 + done })
    await new Promise((resolve) => setImmediate(resolve))
  }
  return counter.report()
}

const PAYLOAD = "f/8A/w=="
const agentMessages = [
  { event: "media", streamSid: "MZ1", media: { payload: PAYLOAD } },
  { event: "mark", streamSid: "MZ1", mark: { name: "m1" } },
  { event: "clear", streamSid: "MZ1" },
  { event: "hangup" },
  { event: "transfer", transfer: { to: "+14155550100" } },
  { event: "error", error: { message: "boom" } }
]

describe("fuzz: parsers", () => {
  it(`the agent dialect: ${RUNS} cases, no throw escapes, a refusal is agent_protocol_error with a documented close code`, async () => {
    const counter = caseCounter("agent dialect")
    const property = fc.property(fc.array(framesFrom(agentMessages), { minLength: 1, maxLength: 3 }), (messages) => {
      counter.count()
      const recording = recordingSocket()
      const failures: Array<string> = []
      const events: AgentEvents = {
        agentMedia: () => {},
        agentMark: () => {},
        agentClear: () => {},
        agentHangup: () => {},
        agentTransfer: () => {},
        agentFailed: (fault) => void failures.push(fault.kind),
        agentClosed: () => {}
      }
      const connection = new AgentConnection(recording.socket)
      connection.begin(
        { sessionId: "ses_1", agentId: "a", environmentId: "e", from: "+1", to: "+2", direction: "inbound", provider: "twilio", streamSid: "MZ1" },
        events
      )
      for (const message of messages) connection.onText(message)
      const closed = recording.closed()
      if (closed !== undefined) {
        check(DOCUMENTED_CLOSE_CODES.has(closed.code), `undocumented close code ${closed.code}`)
        check(closed.reason.startsWith("agent: "), `reason without its dialect: ${closed.reason}`)
        check(failures.includes("agent_protocol_error"), `refusal reported as ${failures.join(",")}`)
      }
      for (const kind of failures) check(kind === "agent_protocol_error" || kind === "agent_error", kind)
    })
    expect(await runBatched(property, counter)).toBeGreaterThanOrEqual(10_000)
  }, 120_000)

  const xmlish = fc.oneof(
    fc.string({ maxLength: 300 }),
    fc.constantFrom(
      "<Response><Say>Sorry</Say><Hangup/></Response>",
      '<?xml version="1.0"?><Response><Dial>+14155550100</Dial></Response>',
      "<Response><Play>https://x.example/a.mp3</Play></Response>",
      '<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><Response><Say>&b;</Say></Response>',
      "<Response><Pause length=\"99999\"/></Response>",
      "<Response>",
      "<a><b></a></b>",
      "<Other/>"
    ),
    fc
      .tuple(fc.constantFrom("Response", "Say", "Dial", "Hangup", "Pause", "Play", "Redirect", "x"), fc.string({ maxLength: 50 }), fc.string({ maxLength: 20 }))
      .map(([tag, text, attr]) => `<Response><${tag} a="${attr}">${text}</${tag}></Response>`)
  )

  it(`the fallback webhook's answer (classification and TwiML for Call Control): ${RUNS} cases, no throw, one documented outcome`, async () => {
    const counter = caseCounter("fallback answer")
    const outcomes = new Map<string, number>()
    const property = fc.property(fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 200, max: 299 }) }, { weight: 1, arbitrary: fc.integer({ min: 100, max: 599 }) }), xmlish, fc.boolean(), (status, body, truncated) => {
      counter.count()
      const answer = classifyFallbackAnswer({ status, body, truncated })
      outcomes.set(answer._tag, (outcomes.get(answer._tag) ?? 0) + 1)
      check(["Markup", "Unexpected", "Failed"].includes(answer._tag), answer._tag)
      if (status < 200 || status > 299) check(answer._tag === "Failed", "non-2xx must be Failed")
      if (answer._tag === "Markup") {
        check(!truncated && body.length <= MAX_FALLBACK_BODY_BYTES, "markup from a truncated body")
        const translated = translateTwiml(answer.twiml)
        if (Either.isLeft(translated)) check(translated.left._tag === "UnsupportedTwiml", "translation error")
      }
    })
    expect(await runBatched(property, counter)).toBeGreaterThanOrEqual(10_000)
    console.log(`  fallback answer outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`)
  }, 120_000)
})

describe("fuzz: HTTP entry points (through the app, as a client reaches them)", () => {
  let t: TestApp
  let agentId: string
  let environmentId: string
  beforeAll(async () => {
    t = await makeTestApp("memory", { RATE_LIMIT_PER_MINUTE: "0", AUTH_FAILURES_PER_MINUTE: "0" })
    agentId = uniqueId("agent")
    environmentId = (await createEnvironment(t.app, agentId)).id
  })
  afterAll(() => t.close())

  const formValue = fc.oneof(
    fc.string({ maxLength: 40 }),
    fc.constantFrom("CA0123456789abcdef0123456789abcdef", "+14155550100", "inbound", "outbound-api", "", "%", "%zz", "a=b&c", "\u0000", "\ud800")
  )
  const formField = fc.oneof(fc.constantFrom("CallSid", "AccountSid", "From", "To", "Direction", "__proto__", "constructor"), fc.string({ maxLength: 12 }))
  const formBody = fc.oneof(
    fc.dictionary(formField, formValue, { maxKeys: 6 }).map((fields) => new URLSearchParams(Object.entries(fields)).toString()),
    fc.string({ maxLength: 300 })
  )
  const queryString = fc.oneof(
    fc.constant(`agentId=${"A"}&environmentId=${"E"}`),
    fc.dictionary(fc.constantFrom("agentId", "environmentId", "x", "agentId[]", "__proto__"), fc.string({ maxLength: 70 }), { maxKeys: 3 }).map((q) => new URLSearchParams(Object.entries(q)).toString()),
    fc.string({ maxLength: 100 }).map((text) => encodeURI(text).replace(/#/g, "%23"))
  )

  it(`the carrier entry forms (Twilio voice, Telnyx TeXML, Telnyx Call Control): ${RUNS} cases, never a 5xx, always TwiML or the JSON envelope`, async () => {
    const counter = caseCounter("carrier entry forms")
    const statuses = new Map<number, number>()
    const property = fc.asyncProperty(
      fc.constantFrom("/telephony/twilio/voice", "/telephony/telnyx/texml", "/telephony/telnyx/call-control"),
      formBody,
      queryString,
      fc.json({ maxDepth: 4 }),
      fc.boolean(),
      async (path, form, query, json, useKnownEnvironment) => {
        counter.count()
        const q = useKnownEnvironment ? `agentId=${agentId}&environmentId=${environmentId}` : query
        const isJson = path.endsWith("call-control")
        const answer = await t.app.inject({
          method: "POST",
          url: `${path}?${q}`,
          payload: isJson ? json : form,
          headers: { "content-type": isJson ? "application/json" : "application/x-www-form-urlencoded" }
        })
        statuses.set(answer.statusCode, (statuses.get(answer.statusCode) ?? 0) + 1)
        check(answer.statusCode < 500, `${path} answered ${answer.statusCode}: ${answer.body.slice(0, 200)}`)
        const type = String(answer.headers["content-type"] ?? "")
        check(type.startsWith("text/xml") || type.startsWith("application/json"), `content type ${type}`)
        if (type.startsWith("text/xml")) check(answer.body.includes("<Response>"), "TwiML without <Response>")
      }
    )
    expect(await runBatched(property, counter, 250)).toBeGreaterThanOrEqual(10_000)
    console.log(`  entry form statuses: ${JSON.stringify(Object.fromEntries(statuses))}`)
  }, 240_000)

  const patchField = fc.constantFrom(
    "name",
    "webhookUrl",
    "webhookSecret",
    "errorFallbackType",
    "errorFallbackValue",
    "errorFallbackTimeout",
    "errorFallbackOccurrenceThreshold",
    "errorFallbackTimeWindow",
    "errorFallbackWebhookSecret",
    "agentUrl",
    "__proto__",
    "extra"
  )
  const patchValue = fc.oneof(
    fc.jsonValue({ maxDepth: 2 }),
    fc.constantFrom("https://hooks.example.com/x", "wss://agent.example.com/m", "ws://127.0.0.1:1/", "https://169.254.169.254/", "webhook", "phone", "disabled", "+14155550100", 0, 30, 301, null)
  )
  const v1Request = fc.oneof(
    fc.record({
      method: fc.constantFrom("PATCH", "POST"),
      body: fc.oneof(fc.dictionary(patchField, patchValue, { maxKeys: 4 }).map((o) => JSON.stringify(o)), fc.json({ maxDepth: 3 }), fc.string({ maxLength: 80 })),
      query: fc.constant("")
    }),
    fc.record({
      method: fc.constant("GET"),
      body: fc.constant(undefined),
      query: fc.oneof(
        fc.dictionary(fc.constantFrom("limit", "cursor", "status", "from", "to", "x", "limit[]"), fc.oneof(fc.string({ maxLength: 30 }), fc.integer().map(String)), { maxKeys: 3 }).map(
          (q) => new URLSearchParams(Object.entries(q)).toString()
        ),
        fc.string({ maxLength: 60 }).map((text) => encodeURI(text).replace(/#/g, "%23"))
      )
    })
  )

  it(`/v1 bodies and query strings: ${RUNS} cases, never a 5xx, every refusal the documented error envelope`, async () => {
    const counter = caseCounter("/v1 bodies and query strings")
    const statuses = new Map<number, number>()
    const property = fc.asyncProperty(v1Request, fc.constantFrom("environment", "environments", "sessions", "deliveries"), async (request, target) => {
      counter.count()
      const url =
        request.method === "PATCH" || target === "environment"
          ? environmentUrl(agentId, environmentId)
          : request.method === "POST" || target === "environments"
            ? environmentsUrl(agentId)
            : target === "sessions"
              ? `/v1/agents/${agentId}/sessions`
              : `${environmentUrl(agentId, environmentId)}/webhook-deliveries`
      const method = request.method === "POST" ? "POST" : request.method === "PATCH" ? "PATCH" : "GET"
      const answer = await t.app.inject({
        method,
        url: request.query === "" ? url : `${url}?${request.query}`,
        headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(request.body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(request.body !== undefined ? { payload: request.body } : {})
      })
      statuses.set(answer.statusCode, (statuses.get(answer.statusCode) ?? 0) + 1)
      check(answer.statusCode < 500, `${method} ${url} answered ${answer.statusCode}: ${answer.body.slice(0, 300)}`)
      const json = answer.json() as any
      if (answer.statusCode >= 400) {
        check(typeof json?.error?.code === "string" && typeof json.error.message === "string" && Array.isArray(json.error.details), `envelope: ${answer.body.slice(0, 200)}`)
        if (answer.statusCode === 400) check(["VALIDATION_FAILED", "MALFORMED_JSON"].includes(json.error.code), json.error.code)
      } else check(json !== null && typeof json === "object" && "data" in json, "success without data")
    })
    expect(await runBatched(property, counter, 250)).toBeGreaterThanOrEqual(10_000)
    console.log(`  /v1 statuses: ${JSON.stringify(Object.fromEntries(statuses))}`)
  }, 240_000)
})
