import fc from "fast-check"
import { Effect } from "effect"
import type { FastifyInstance } from "fastify"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
import { accountSidOf } from "../../src/kernel/TwilioIds.js"
import { xmlRootName } from "../../src/twiml/TwimlDocument.js"
import { HttpApp } from "../../src/http/HttpApp.js"
import { audioFrames, dialInAgent, type Gateway, type Peer, startGateway, twilioCall, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import { caseCounter, RUNS } from "./fuzzSupport.js"

/**
 * The Twilio-compatible call-control API (docs/calls.md, "Controlling a call from the agent") and
 * call creation (`POST /v1/.../calls`, and the Calls list under `/2010-04-01`, which callgate does
 * not serve), fuzzed through the app of a listening gateway that carries a live bystander call the
 * whole time: bad forms, unknown fields, huge values, bad encodings, wrong content types, bad Sids,
 * bad credentials. Every answer under /2010-04-01 is Twilio's error JSON with the documented code;
 * every /v1 answer is the documented envelope; no 5xx; the bystander keeps every frame.
 * No case reaches the network: `Url=` values are refused before any lookup or point at 127.0.0.1:1.
 */

const BODY_LIMIT = 64 * 1024 // HTTP_BODY_LIMIT_BYTES' default
const PREFIX = "/2010-04-01"

/** Twilio codes by HTTP status (docs/calls.md, the table of problems; docs/security.md, "HTTP limits"). */
const TWILIO_CODES: Record<number, ReadonlyArray<number>> = {
  400: [20400, 21201, 21218, 21220, 12100, 11200],
  401: [20003],
  404: [20404],
  413: [20413],
  415: [20415]
}

const check = (ok: boolean, what: string) => {
  if (!ok) throw new Error(what)
}

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`

// ---- generators -----------------------------------------------------------------------------

const statusValue = fc.constantFrom("completed", "canceled", "COMPLETED", "Canceled", "in-progress", "busy", "", " completed", "completed\u0000", "ringing")
const twimlValue = fc.oneof(
  fc.constantFrom(
    "<Response><Hangup/></Response>",
    '<?xml version="1.0"?><Response><Dial>+14155550188</Dial></Response>',
    "<Response><Say>hi</Say>",
    "<Other/>",
    "not xml",
    "",
    '<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><Response><Say>&b;</Say></Response>',
    `<Response>${"<Say>a</Say>".repeat(400)}</Response>`,
    "<Response><Redirect>https://127.0.0.1:1/</Redirect></Response>"
  ),
  fc.string({ maxLength: 60 }).map((text) => `<Response><Say>${text}</Say></Response>`),
  fc.string({ maxLength: 80 })
)
/** Refused by scheme, syntax or address policy before any name is resolved, or 127.0.0.1:1 (nothing listens). */
const urlValue = fc.constantFrom(
  "http://127.0.0.1:1/twiml",
  "https://127.0.0.1:1/twiml",
  "https://10.0.0.1/twiml",
  "https://169.254.169.254/latest/meta-data",
  "https://[::1]:1/",
  "https://user:pass@127.0.0.1:1/",
  "ftp://127.0.0.1/x",
  "not a url",
  "",
  "https://",
  "javascript:alert(1)"
)
const methodValue = fc.constantFrom("POST", "GET", "post", "PUT", "", "DELETE")
const anyValue = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ maxLength: 20, unit: "binary" }),
  fc.constantFrom("", "%", "%zz", "a=b&c", "\u0000", "\ud800", "x".repeat(5000), "9".repeat(400))
)
const fieldName = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("Status", "Twiml", "Url", "Method") },
  { weight: 2, arbitrary: fc.constantFrom("To", "From", "StatusCallback", "Timeout", "__proto__", "constructor", "Status[]", "status", "") },
  { weight: 1, arbitrary: fc.string({ maxLength: 12 }) }
)
const valueFor = (name: string) =>
  name === "Status" ? statusValue : name === "Twiml" ? twimlValue : name === "Url" ? urlValue : name === "Method" ? methodValue : anyValue
const formFields = fc.array(fieldName.chain((name) => valueFor(name).map((value) => [name, value] as const)), { maxLength: 5 })

/** A body: a form (fields may repeat), raw text (bad percent-encodings), raw bytes (not UTF-8), or one over the body limit. */
const body = fc.oneof(
  { weight: 8, arbitrary: formFields.map((fields) => new URLSearchParams(fields as Array<[string, string]>).toString()) },
  { weight: 2, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.constantFrom("Status=%", "Twiml=%E0%A4%A", "Status=%zzcompleted", "%%%", "=&=&", "Status=completed&Status=busy", "Twiml=%3CResponse%3E") },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 1, arbitrary: fc.constantFrom(`Status=busy&Pad=${"x".repeat(BODY_LIMIT + 10)}`) }
)

const FORM = "application/x-www-form-urlencoded"
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant<string | undefined>(FORM) },
  {
    weight: 3,
    arbitrary: fc.constantFrom<string | undefined>(
      undefined,
      `${FORM}; charset=utf-8`,
      `${FORM}; charset=UTF-16`,
      `${FORM};charset="latin1"`,
      "application/json",
      "text/plain",
      "multipart/form-data; boundary=x",
      "text/xml",
      "application/x-www-form-urlencodedX",
      "garbage",
      ""
    )
  }
)

type Target = "unknown" | "stored" | "live" | "badSid" | "list" | "elsewhere"
const target = fc.constantFrom<Target>("unknown", "unknown", "stored", "stored", "live", "live", "live", "badSid", "list", "elsewhere")
const badSid = fc.oneof(
  fc.constantFrom("CA123", "ses_x.xml", "ses_x", "..%2F..%2Fv1%2Fagents.json", "%zz.json", "%00.json", `${"a".repeat(200)}.json`, ".json", "%2E%2Ejson", "ses_x.json.json"),
  fc.string({ maxLength: 30 }).map((text) => `${encodeURIComponent(text)}.json`),
  fc.string({ maxLength: 30 }).map((text) => encodeURIComponent(text))
)
type Auth = "valid" | "wrongKey" | "wrongUser" | "none" | "malformed" | "bearer"
const auth = fc.constantFrom<Auth>("valid", "valid", "valid", "wrongKey", "wrongUser", "none", "malformed", "bearer")

/** The /v1 call creation body: the documented fields with good and bad values, unknown fields, not JSON. */
const e164 = fc.oneof(fc.constantFrom("+14155550142", "+14155550199", "+1", "14155550142", "+1415555014212345678", "", "+1 415 555 0142"), fc.string({ maxLength: 16 }))
const placeBody = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .record(
        {
          to: e164,
          from: e164,
          provider: fc.oneof(fc.constantFrom("twilio", "telnyx", "TWILIO", "sip", ""), fc.jsonValue({ maxDepth: 1 })),
          timeoutSeconds: fc.oneof(fc.integer({ min: -10, max: 1000 }), fc.double(), fc.constantFrom("30", null)),
          metadata: fc.oneof(
            fc.dictionary(fc.string({ maxLength: 70 }), fc.oneof(fc.string({ maxLength: 10 }), fc.constant("x".repeat(600)), fc.integer()), { maxKeys: 25 }),
            fc.jsonValue({ maxDepth: 2 })
          ),
          extra: fc.jsonValue({ maxDepth: 2 }),
          __proto__: fc.jsonValue({ maxDepth: 1 })
        },
        { requiredKeys: [] }
      )
      .map((o) => JSON.stringify(o))
  },
  { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 100 }) },
  { weight: 1, arbitrary: fc.constantFrom(`{"to":"+14155550142","from":"+14155550199","pad":"${"x".repeat(BODY_LIMIT)}"}`) }
)
const placeContentType = fc.constantFrom<string | undefined>("application/json", "application/json", "application/json", "application/json; charset=utf-16", FORM, "text/plain", undefined)

// ---- the oracle -------------------------------------------------------------------------------

/** What a form body carries once parsed as the app parses it (the last of a repeated field wins). */
const fieldsOf = (payload: string | Buffer): Record<string, string> => Object.fromEntries(new URLSearchParams(Buffer.from(payload).toString("utf8")))

/** A form that would end the live call (a hang-up or a runnable document): never sent to the bystander. */
const wouldEndTheCall = (fields: Record<string, string>) =>
  fields.Status?.toLowerCase() === "completed" || (fields.Twiml !== undefined && xmlRootName(fields.Twiml) === "Response" && fields.Twiml.trim().length <= 4000)

const isForm = (type: string | undefined) => type !== undefined && /^application\/x-www-form-urlencoded\s*(;|$)/i.test(type)
const isUtf8 = (type: string | undefined) => {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(type ?? "")?.[1]?.toLowerCase()
  return charset === undefined || ["utf-8", "utf8", "us-ascii"].includes(charset)
}

describe("fuzz: call control and call creation, with a bystander call on the same process", () => {
  let gateway: Gateway
  let app: FastifyInstance
  beforeAll(async () => {
    // Failed authentications are part of the input: the throttle stays off so each case stands alone.
    gateway = await startGateway({ env: { AUTH_FAILURES_PER_MINUTE: "0" } })
    app = (await gateway.run(HttpApp)).app
  })
  afterAll(() => gateway.close())

  it(`${RUNS} generated cases: no throw escapes, every answer the documented one (Twilio's error JSON under /2010-04-01), the bystander keeps every frame`, async () => {
    // The bystander: a live call of agent A, paced like a carrier for the whole run.
    const agentA = uniqueId("agent")
    const envA = await gateway.createEnvironment(agentA)
    const agent = await dialInAgent(gateway, agentA, envA.id)
    await until(() => gateway.idleAgents(agentA, envA.id) === 1, "the agent in the pool")
    const sid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const bystander = await twilioCall(gateway, { token: gateway.issueToken({ agentId: agentA, environmentId: envA.id, kind: "twilio", callId: sid }), callSid: sid })
    bystander.start()
    await agent.waitForEvent("start")
    const liveSid: string = agent.events("start")[0].start.callSid
    const liveAccount: string = agent.events("start")[0].start.accountSid
    // Frames every 20 ms until the run is over (a silent stream would be cut by CARRIER_IDLE_TIMEOUT).
    const frames = audioFrames("caller-appointment-noisy.ulaw", 250)
    const sent: Array<string> = []
    let running = true
    const pacing = (async () => {
      while (running) {
        const frame = frames[sent.length % frames.length]!
        sent.push(frame)
        bystander.media(frame)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    })()

    // An ended call of agent B, reachable with B's scoped key; and B's account for unknown Sids.
    const agentB = uniqueId("agent")
    const envB = await gateway.createEnvironment(agentB)
    const scopedKey = (await gateway.run(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "fuzz", agentIds: [agentB] })))).key
    const agentOfB: Peer = await dialInAgent(gateway, agentB, envB.id)
    await until(() => gateway.idleAgents(agentB, envB.id) === 1, "agent B in the pool")
    const sidB = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const endedCall = await twilioCall(gateway, { token: gateway.issueToken({ agentId: agentB, environmentId: envB.id, kind: "twilio", callId: sidB }), callSid: sidB })
    endedCall.start()
    await agentOfB.waitForEvent("start")
    const storedSid: string = agentOfB.events("start")[0].start.callSid
    endedCall.stop()
    await until(() => gateway.outbox.events.some((e) => e.callId === sidB), "the ended call's session.ended")
    const accountB = accountSidOf(agentB)
    expect(liveAccount).toBe(accountSidOf(agentA))

    const counter = caseCounter("call control and call creation")
    const outcomes = new Map<string, number>()
    const tally = (key: string) => outcomes.set(key, (outcomes.get(key) ?? 0) + 1)

    const twilioCase = fc.record({ kind: fc.constant("twilio" as const), target, sid: badSid, auth, method: fc.constantFrom("POST", "POST", "POST", "GET"), contentType, body })
    const placeCase = fc.record({ kind: fc.constant("place" as const), contentType: placeContentType, body: placeBody, key: fc.constantFrom(ADMIN_KEY, "scoped", "cg_invalid") })

    const property = fc.asyncProperty(fc.oneof({ weight: 4, arbitrary: twilioCase }, { weight: 1, arbitrary: placeCase }), async (c) => {
      counter.count()
      if (c.kind === "place") {
        const answer = await app.inject({
          method: "POST",
          url: `/v1/agents/${agentB}/environments/${envB.id}/calls`,
          headers: { authorization: `Bearer ${c.key === "scoped" ? scopedKey : c.key}`, ...(c.contentType === undefined ? {} : { "content-type": c.contentType }) },
          payload: c.body
        })
        tally(`place ${answer.statusCode}`)
        check([201, 400, 401, 413, 415, 429, 502].includes(answer.statusCode), `POST /v1 calls answered ${answer.statusCode}: ${answer.body.slice(0, 200)}`)
        const json = answer.json() as any
        if (answer.statusCode >= 400) {
          check(typeof json?.error?.code === "string" && typeof json.error.message === "string" && Array.isArray(json.error.details), `envelope: ${answer.body.slice(0, 200)}`)
          const readable = c.contentType === "application/json" || c.contentType === FORM
          if (Buffer.byteLength(c.body) > BODY_LIMIT && c.key !== "cg_invalid" && readable) check(answer.statusCode === 413, `a body over the limit answered ${answer.statusCode}`)
          if (c.key === "cg_invalid") check(answer.statusCode === 401, `a bad key answered ${answer.statusCode}`)
        } else if (answer.statusCode === 201) check(json.data.status === "queued" && json.data.direction === "outbound", "201 without a queued outbound session")
        return
      }

      // A Twilio-compatible request. The live call only ever gets forms that cannot end it.
      const fields = fieldsOf(c.body)
      const aim: Target = c.target === "live" && c.method === "POST" && wouldEndTheCall(fields) ? "unknown" : c.target
      const account = aim === "live" ? liveAccount : accountB
      const key = aim === "live" ? ADMIN_KEY : scopedKey
      const path =
        aim === "live"
          ? `${PREFIX}/Accounts/${account}/Calls/${liveSid}.json`
          : aim === "stored"
            ? `${PREFIX}/Accounts/${account}/Calls/${storedSid}.json`
            : aim === "unknown"
              ? `${PREFIX}/Accounts/${account}/Calls/ses_${uniqueId("none")}.json`
              : aim === "badSid"
                ? `${PREFIX}/Accounts/${account}/Calls/${c.sid}`
                : aim === "list"
                  ? `${PREFIX}/Accounts/${account}/Calls${c.sid.endsWith(".json") ? ".json" : ""}`
                  : `${PREFIX}/${c.sid}`
      const authorization =
        c.auth === "valid"
          ? basic(account, key)
          : c.auth === "wrongKey"
            ? basic(account, "cg_not_a_key")
            : c.auth === "wrongUser"
              ? basic("AC00000000000000000000000000000000", key)
              : c.auth === "malformed"
                ? "Basic !!!not-base64"
                : c.auth === "bearer"
                  ? `Bearer ${key}`
                  : undefined
      const sendsBody = c.method === "POST"
      const answer = await app.inject({
        method: c.method as "GET" | "POST",
        url: path,
        headers: {
          ...(authorization === undefined ? {} : { authorization }),
          ...(sendsBody && c.contentType !== undefined ? { "content-type": c.contentType } : {})
        },
        ...(sendsBody ? { payload: c.body } : {})
      })
      tally(`${aim} ${answer.statusCode}`)
      const what = `${c.method} ${path.slice(0, 120)} (${c.contentType}, ${Buffer.byteLength(c.body)} bytes) answered ${answer.statusCode}: ${answer.body.slice(0, 200)}`
      check(answer.statusCode < 500, what)
      check(String(answer.headers["content-type"] ?? "").startsWith("application/json"), `content type ${answer.headers["content-type"]}: ${what}`)
      const json = answer.json() as any
      if (answer.statusCode >= 400) {
        // Twilio's error JSON, with a documented code for the status.
        check(Object.keys(json).sort().join(",") === "code,message,more_info,status", `not Twilio's error JSON: ${what}`)
        check(json.status === answer.statusCode && typeof json.message === "string", `status field: ${what}`)
        check((TWILIO_CODES[answer.statusCode] ?? []).includes(json.code), `undocumented code ${json.code}: ${what}`)
        check(json.more_info === `https://www.twilio.com/docs/errors/${json.code}`, `more_info: ${what}`)
      } else {
        check(answer.statusCode === 200 && (aim === "live" || aim === "stored") && c.auth === "valid", `success: ${what}`)
        check(json.sid === (aim === "live" ? liveSid : storedSid) && json.account_sid === account, `the call resource: ${what}`)
      }

      // The documented answer where the request alone decides it.
      const matched = aim === "live" || aim === "stored" || aim === "unknown"
      if (!matched) {
        if (aim === "list" || aim === "elsewhere") check([400, 404, 413, 415].includes(answer.statusCode), `unserved path: ${what}`)
        return
      }
      if (sendsBody && c.contentType !== undefined && !isForm(c.contentType)) return check(json.code === 20415, `a ${c.contentType} body: ${what}`)
      // The size is known before the charset is read: a big body in another charset may get either refusal.
      const big = Buffer.byteLength(c.body) > BODY_LIMIT
      if (sendsBody && !isUtf8(c.contentType)) return check(json.code === 20415 || (big && json.code === 20413), `a non-UTF-8 charset: ${what}`)
      if (sendsBody && c.contentType === undefined && Buffer.byteLength(c.body) > 0) return check(json.code === 20415, `a body without a content type: ${what}`)
      if (sendsBody && Buffer.byteLength(c.body) > BODY_LIMIT) return check(json.code === 20413, `a body over the limit: ${what}`)
      if (c.auth !== "valid") return check(json.code === 20003 && answer.statusCode === 401, `bad credentials: ${what}`)
      if (aim === "unknown") return check(json.code === 20404, `an unknown call: ${what}`)
      if (c.method === "GET") return check(answer.statusCode === 200, `a GET: ${what}`)
      const status = fields.Status?.toLowerCase()
      if (status !== undefined && status !== "completed" && status !== "canceled") return check(json.code === 21218, `Status=${fields.Status}: ${what}`)
      if (aim === "stored") return check(json.code === 21220, `an ended call: ${what}`)
      // The live call, with a form that cannot end it.
      if (status === "canceled" && fields.Twiml === undefined && fields.Url === undefined) return check(answer.statusCode === 200, `canceled on an answered call: ${what}`)
      if (fields.Twiml !== undefined) return check(json.code === 12100, `a document that cannot run: ${what}`)
      if (fields.Url !== undefined) return check(json.code === 11200, `a Url that cannot be fetched: ${what}`)
      check(json.code === 21201, `nothing to do: ${what}`)
    })

    for (let done = 0; done < RUNS; done += 250) {
      await fc.assert(property, { numRuns: Math.min(250, RUNS - done), seed: 15_000 + done })
      // The bystander is still live after every batch.
      check(gateway.registry.live(liveSid)._tag === "Some", `the bystander's call ended after ${done + 250} cases`)
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(counter.report()).toBeGreaterThanOrEqual(10_000)
    console.log(`  call control outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`)

    running = false
    await pacing
    await agent.waitForEvent("media", sent.length, 15_000)
    expect(agent.events("media").map((m) => m.media.payload)).toEqual(sent)
    expect(agent.closed).toBeUndefined()
    expect(gateway.outbox.events.some((e) => e.callId === sid)).toBe(false)
    console.log(`fuzz: the bystander call kept ${sent.length}/${sent.length} frames in order, and stayed live`)
    bystander.stop()
  }, 600_000)
})
