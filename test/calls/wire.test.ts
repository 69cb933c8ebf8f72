import { describe, expect, it } from "vitest"
import { telnyxUnanswered, twilioUnanswered } from "../../src/calls/OutboundCallWire.js"
import { callResource, twilioStatusOf } from "../../src/calls/TwilioCallWire.js"
import { accountSidOf } from "../../src/kernel/TwilioIds.js"
import type { Session } from "../../src/sessions/SessionSchema.js"

const session = (change: Partial<Session> = {}): Session => ({
  id: "ses_abc",
  agentId: "agent_1",
  environmentId: "env_1",
  provider: "telnyx",
  callId: "v3:cc",
  from: "+14155550199",
  to: "+14155550142",
  direction: "outbound",
  createdAt: "2026-11-23T10:00:00.000Z",
  endedAt: null,
  status: "active",
  endReason: null,
  turns: [],
  fallback: null,
  ...change
})

describe("the Twilio-compatible wire", () => {
  it("gives each agent one Twilio-shaped account id, the same everywhere", () => {
    expect(accountSidOf("agent_1")).toMatch(/^AC[0-9a-f]{32}$/)
    expect(accountSidOf("agent_1")).toBe(accountSidOf("agent_1"))
    expect(accountSidOf("agent_2")).not.toBe(accountSidOf("agent_1"))
  })

  it("reads a session as Twilio's call status", () => {
    expect(twilioStatusOf(session({ status: "queued" }))).toBe("queued")
    expect(twilioStatusOf(session({ status: "ringing" }))).toBe("ringing")
    expect(twilioStatusOf(session())).toBe("in-progress")
    expect(twilioStatusOf(session({ status: "completed", endReason: "agent_hangup" }))).toBe("completed")
    expect(twilioStatusOf(session({ status: "timeout", endReason: "max_duration" }))).toBe("completed")
    expect(twilioStatusOf(session({ status: "failed", endReason: "agent_disconnected" }))).toBe("completed")
    expect(twilioStatusOf(session({ status: "failed", endReason: "busy" }))).toBe("busy")
    expect(twilioStatusOf(session({ status: "failed", endReason: "no_answer" }))).toBe("no-answer")
    expect(twilioStatusOf(session({ status: "failed", endReason: "canceled" }))).toBe("canceled")
    expect(twilioStatusOf(session({ status: "failed", endReason: "carrier_failed" }))).toBe("failed")
  })

  it("answers the Call resource: RFC 2822 dates, whole-second duration, outbound-api", () => {
    const resource = callResource(session({ status: "completed", endReason: "caller_hangup", endedAt: "2026-11-23T10:01:01.600Z" }), "AC1")
    expect(resource).toMatchObject({
      sid: "ses_abc",
      account_sid: "AC1",
      status: "completed",
      direction: "outbound-api",
      from: "+14155550199",
      to: "+14155550142",
      start_time: "Mon, 23 Nov 2026 10:00:00 GMT",
      end_time: "Mon, 23 Nov 2026 10:01:01 GMT",
      duration: "62",
      api_version: "2010-04-01",
      uri: "/2010-04-01/Accounts/AC1/Calls/ses_abc.json"
    })
    expect(callResource(session({ direction: "inbound" }), "AC1")).toMatchObject({ direction: "inbound", duration: null, end_time: null })
  })

  it("maps the carriers' unanswered outcomes to endReasons", () => {
    expect(["busy", "no-answer", "failed", "canceled", "completed", "ringing", "in-progress"].map(twilioUnanswered)).toEqual([
      "busy",
      "no_answer",
      "carrier_failed",
      "canceled",
      "carrier_failed",
      undefined,
      undefined
    ])
    expect(["busy", "user_busy", "timeout", "no_answer", "originator_cancel", "call_rejected", "unallocated_number", undefined].map(telnyxUnanswered)).toEqual([
      "busy",
      "busy",
      "no_answer",
      "no_answer",
      "canceled",
      "carrier_failed",
      "carrier_failed",
      "carrier_failed"
    ])
  })
})
