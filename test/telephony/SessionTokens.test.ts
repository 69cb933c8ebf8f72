import { Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { SessionTokens, TOKEN_TTL_MS } from "../../src/telephony/SessionTokens.js"
import { makeTestApp, type TestApp } from "../support/testApp.js"

/**
 * A session token expires TOKEN_TTL (5 minutes) after it was issued, on the service's Clock: the
 * production graph on the TestClock, moved to a millisecond before the expiry and then to it.
 */
describe("SessionTokens on the TestClock", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory", {}, { clock: "test" })
  })
  afterAll(() => t.close())

  it("verifies until a millisecond before TOKEN_TTL has passed, never after", async () => {
    const tokens = await t.runtime.runPromise(SessionTokens)
    const token = tokens.issue({ kind: "twilio", agentId: "agent_1", environmentId: "env_1", callId: "CA1", direction: "inbound" })
    expect(Option.isSome(tokens.verify(token))).toBe(true)
    await t.adjustClock(`${TOKEN_TTL_MS - 1} millis`)
    expect(Option.map(tokens.verify(token), (claims) => claims.callId)).toEqual(Option.some("CA1"))
    await t.adjustClock("1 millis")
    expect(tokens.verify(token)).toEqual(Option.none())
  })
})
