import { Effect, Logger, LogLevel } from "effect"
import { describe, expect, it } from "vitest"
import { jsonLogger, redact } from "../../src/observability/Logging.js"

const SECRET = "whsec_3Vhr/WDpPXByTxUDBzOAQl4JTHcGTdt9cxXQzptHfig="
const BEARER = "cgk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcd"

/** Runs `effect` with the JSON logger writing into an array, and returns the parsed lines. */
const captureLogs = async (effect: Effect.Effect<unknown>) => {
  const lines: Array<string> = []
  await Effect.runPromise(
    effect.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, jsonLogger((line) => lines.push(line)))), Logger.withMinimumLogLevel(LogLevel.Trace))
  )
  return lines
}

describe("JSON logs", () => {
  it("one JSON object per line with time, level and msg", async () => {
    const lines = await captureLogs(Effect.logInfo("callgate listening", { address: "http://127.0.0.1:8080" }))
    expect(lines).toHaveLength(1)
    const record = JSON.parse(lines[0]!)
    expect(record).toEqual({ time: expect.any(String), level: "info", msg: "callgate listening", address: "http://127.0.0.1:8080" })
    expect(new Date(record.time).toISOString()).toBe(record.time)
  })

  it("redacts secrets and Authorization by key name, at any depth, and by value in text", async () => {
    const lines = await captureLogs(
      Effect.logWarning(`delivery to hook failed; signed with ${SECRET}; sent Authorization: Bearer ${BEARER}`, {
        webhookSecret: SECRET,
        errorFallbackWebhookSecret: SECRET,
        headers: { Authorization: `Bearer ${BEARER}`, "content-type": "application/json", "X-Twilio-Signature": "abc=" },
        nested: { deeper: [{ apiKey: BEARER, password: "hunter2", token: "t0k3n", note: `key ${SECRET}` }] },
        TELNYX_API_KEY: "KEY0123",
        cookie: "session=1"
      }).pipe(Effect.annotateLogs({ authorization: `Bearer ${BEARER}`, agentId: "agent_1" }))
    )
    expect(lines).toHaveLength(1)
    const line = lines[0]!
    for (const leaked of [SECRET, SECRET.slice(6), BEARER, "hunter2", "t0k3n", "KEY0123", "session=1", "abc="]) {
      expect(line).not.toContain(leaked)
    }
    const record = JSON.parse(line)
    expect(record.msg).toBe("delivery to hook failed; signed with [redacted]; sent Authorization: [redacted]")
    expect(record.webhookSecret).toBe("[redacted]")
    expect(record.errorFallbackWebhookSecret).toBe("[redacted]")
    expect(record.headers).toEqual({ Authorization: "[redacted]", "content-type": "application/json", "X-Twilio-Signature": "[redacted]" })
    expect(record.nested.deeper[0]).toEqual({ apiKey: "[redacted]", password: "[redacted]", token: "[redacted]", note: "key [redacted]" })
    expect(record.authorization).toBe("[redacted]")
    expect(record.agentId).toBe("agent_1") // everything else is kept
  })

  it("redacts secrets inside a logged error and its cause", async () => {
    const lines = await captureLogs(
      Effect.logError("request failed", new Error(`upstream said ${SECRET}`)).pipe(
        Effect.zipRight(Effect.fail(new Error(`Bearer ${BEARER} rejected`)).pipe(Effect.catchAllCause((cause) => Effect.logError("call failed", cause))))
      )
    )
    expect(lines).toHaveLength(2)
    for (const line of lines) {
      expect(line).not.toContain(SECRET)
      expect(line).not.toContain(BEARER)
    }
    expect(JSON.parse(lines[1]!).cause).toContain("[redacted]")
  })

  it("redact leaves ordinary values alone", () => {
    expect(redact({ name: "support line", count: 3, list: ["a", null], ok: true })).toEqual({
      name: "support line",
      count: 3,
      list: ["a", null],
      ok: true
    })
  })
})
