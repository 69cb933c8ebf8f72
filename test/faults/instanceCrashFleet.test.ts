import { afterEach, describe, expect, inject, it } from "vitest"
import { SilentAgent } from "../../examples/agents/silent-agent.js"
import { type RedirectAnswer, telnyxCallControlId, twilioSid } from "../../sim/CallEntry.js"
import { readStamp } from "../../sim/FrameStamp.js"
import type { SimCall } from "../../sim/SimCall.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { idleOf, listInstances } from "../fleet/fleetSuite.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { type FakeTwilio, type RecordedRequest, startFakeTwilio } from "../support/fakeTwilio.js"
import type { GatewayProcess } from "../support/gatewayProcess.js"
import { type Nginx, startFleetNginx } from "../../bench/nginx.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { framesLost, recordCallerStamps, startFleetInstance, until } from "./faultRig.js"

/**
 * An instance of a fleet dies with live calls (docs/reliability.md, "Instance loss"): two callgate
 * processes on one Redis behind a real nginx (deploy/nginx/callgate.conf), INSTANCE_TTL 5 s, 40
 * live calls spread evenly over both (20 Twilio, 10 Telnyx TeXML, 10 Telnyx Call Control), each
 * with stamped audio both ways. One instance is SIGKILLed. The carriers are played as they behave:
 * a Twilio or TeXML call whose stream ended follows its `<Redirect>` (to the fleet's address, so
 * the survivor answers); a Call Control call's stream end is a signed `streaming.stopped` webhook
 * carrying the session id as client_state. Every caller of the dead instance is rescued exactly
 * once (by the redirect's answer, the survivor's reaction to streaming.stopped, or the survivor's
 * registry sweep through the REST API: whichever claims the session first), the survivor's calls
 * lose no frame either way, all 40 sessions end, and exactly 40 session.ended arrive.
 *
 * The kill-to-rescue time of each caller is printed (not asserted: the machine's load decides it).
 */

const FALLBACK_NUMBER = "+14155550177"
const INSTANCES = ["callgate-1", "callgate-2"] as const
const KILLED = "callgate-2"
/** Calls per kind; placement spreads each environment's calls over its agents, half on each instance. */
const KINDS = [
  ["twilio", 20],
  ["texml", 10],
  ["callControl", 10]
] as const
type Kind = (typeof KINDS)[number][0]

interface Placed {
  readonly index: number
  readonly kind: Kind
  /** CallSid (Twilio, TeXML) or call_control_id. */
  readonly callId: string
  readonly call: SimCall
  /** Call Control: the streaming.stopped webhook was posted, with the answer's status. */
  streamingStopped?: Promise<number>
}

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

describe("an instance of a fleet behind nginx is killed with 40 live calls", () => {
  let twilio: FakeTwilio | undefined
  let telnyx: FakeTelnyx | undefined
  let receiver: Receiver | undefined
  let nginx: Nginx | undefined
  const gateways: Array<GatewayProcess> = []
  const agents: Array<SilentAgent> = []
  const calls: Array<SimCall> = []

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup().catch(() => undefined)))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(gateways.splice(0).map((gateway) => gateway.stop("SIGKILL")))
    await nginx?.stop()
    await twilio?.close()
    await telnyx?.close()
    await receiver?.close()
    twilio = telnyx = receiver = nginx = undefined
  })

  it("SIGKILL one of two: each of its callers rescued exactly once, 0 frames lost on the survivor's calls, 40 terminal sessions, exactly 40 session.ended", async () => {
    const fakeTwilio = (twilio = await startFakeTwilio())
    const fakeTelnyx = (telnyx = await startFakeTelnyx())
    const hooks = (receiver = await startReceiver())
    const ports = await Promise.all(INSTANCES.map(() => freePort()))
    const lb = (nginx = await startFleetNginx(ports))
    const base = lb.baseUrl
    const prefix = `${uniqueId("crash")}:`
    const started = await Promise.all(
      INSTANCES.map((id, i) =>
        startFleetInstance({
          name: id,
          instanceId: id,
          prefix,
          redisUrl: inject("redisUrl"),
          publicUrl: `${base}/i/${id}`,
          twilio: fakeTwilio,
          env: {
            PORT: String(ports[i]),
            FLEET_URL: base,
            ...fakeTelnyx.env,
            INSTANCE_TTL: "5s",
            WEBHOOK_RETRY_SCHEDULE: "1s,1s,2s,5s,5s,5s",
            // 40 agents and 40 callers live in the test process: a missed pong on a busy machine
            // would cut a call for a reason this test is not about.
            AGENT_PING_INTERVAL: "120s"
          }
        })
      )
    )
    gateways.push(...started)
    const byId = new Map(INSTANCES.map((id, i) => [id, started[i]!]))

    // One environment per kind, so placement puts exactly half of each kind on each instance.
    const agentId = uniqueId("agent")
    const environments = new Map<Kind, string>()
    for (const [kind] of KINDS) {
      const created = await fetch(`${base}/v1/agents/${agentId}/environments`, {
        method: "POST",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ name: kind, webhookUrl: hooks.url("/events"), errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
      })
      expect(created.status).toBe(201)
      environments.set(kind, ((await created.json()) as { data: { id: string } }).data.id)
    }

    // Agents dial in through nginx, pinned to each instance by its /i/{id}/ route; each streams
    // stamped silence to its caller. Caller frames carry the call's index in their stamps.
    const callerToAgent = new Map<number, Array<number>>()
    for (const id of INSTANCES) {
      for (const [kind, count] of KINDS) {
        const agent = new SilentAgent({
          gatewayUrl: `${base}/i/${id}`,
          agentId,
          environmentId: environments.get(kind)!,
          apiKey: ADMIN_KEY,
          capacity: count / 2,
          stream: "silence",
          stampFrames: true
        })
        recordCallerStamps(agent, callerToAgent)
        agents.push(await agent.start())
      }
    }
    await until(
      async () => idleOf(await listInstances(base), agentId),
      (idle) => INSTANCES.every((id) => idle[id] === 20),
      "the registry to show 20 idle agents on each instance"
    )

    const agentToCaller = new Map<number, Array<number>>()
    /** What each call's <Redirect> was answered, once the carrier (the simulator) followed it. */
    const redirectAnswers = new Map<number, RedirectAnswer>()
    const listen = (index: number, call: SimCall) => {
      calls.push(call)
      void call.redirected?.then((answer) => answer !== undefined && redirectAnswers.set(index, answer))
      const seqs: Array<number> = []
      agentToCaller.set(index, seqs)
      call.on("agentMedia", ({ payload }) => {
        const stamp = readStamp(payload)
        if (stamp !== undefined) seqs.push(stamp.seq)
      })
      return call
    }
    const callControlUrl = (environmentId: string) =>
      `${base}/telephony/telnyx/call-control?${new URLSearchParams({ agentId, environmentId }).toString()}`
    /** Telnyx's part: a signed Call Control webhook, to the fleet's address. */
    const postCallControl = async (environmentId: string, eventType: string, payload: Record<string, unknown>) => {
      const body = fakeTelnyx.callControlEvent(eventType, payload)
      const response = await fetch(callControlUrl(environmentId), {
        method: "POST",
        headers: { "content-type": "application/json", ...fakeTelnyx.signWebhook(body) },
        body
      })
      await response.text()
      return response.status
    }

    const place = async (index: number, kind: Kind): Promise<Placed> => {
      const environmentId = environments.get(kind)!
      const from = `+1555${String(2_000_000 + index).padStart(7, "0")}`
      if (kind === "twilio") {
        const callSid = twilioSid("CA")
        const call = await placeTwilioCall({
          gatewayUrl: base,
          agentId,
          environmentId,
          callSid,
          accountSid: fakeTwilio.accountSid,
          from,
          authToken: fakeTwilio.authToken,
          followRedirect: true,
          stampCallId: index
        })
        return { index, kind, callId: callSid, call: listen(index, call) }
      }
      if (kind === "texml") {
        const callSid = telnyxCallControlId()
        const call = await placeTelnyxTexmlCall({
          gatewayUrl: base,
          agentId,
          environmentId,
          callSid,
          from,
          webhookHeaders: (body) => fakeTelnyx.signWebhook(body),
          followRedirect: true,
          stampCallId: index
        })
        return { index, kind, callId: callSid, call: listen(index, call) }
      }
      // Call Control: call.initiated; callgate answers with the stream (and client_state) through
      // the REST API; Telnyx opens that stream, and tells of its end with streaming.stopped.
      const callControlId = telnyxCallControlId()
      const connectionId = "1684641123236054244"
      expect(await postCallControl(environmentId, "call.initiated", { call_control_id: callControlId, connection_id: connectionId, from, to: "+15550100002", direction: "incoming" })).toBe(200)
      const [answer] = await fakeTelnyx.waitFor(() => fakeTelnyx.commands(callControlId, "answer").length > 0, 30_000).then(() => fakeTelnyx.commands(callControlId, "answer"))
      const command = answer!.json as { stream_url: string; stream_auth_token: string; client_state: string }
      const call = await connectTelnyxStream({
        url: command.stream_url,
        streamAuthToken: command.stream_auth_token,
        callControlId,
        clientState: command.client_state,
        from,
        stampCallId: index
      })
      const placed: Placed = { index, kind, callId: callControlId, call: listen(index, call) }
      placed.streamingStopped = call.closed.then(() =>
        postCallControl(environmentId, "streaming.stopped", {
          call_control_id: callControlId,
          connection_id: connectionId,
          client_state: command.client_state,
          stream_url: command.stream_url
        })
      )
      return placed
    }

    const placed: Array<Placed> = []
    let index = 0
    for (const [kind, count] of KINDS) {
      for (let i = 0; i < count; i++) placed.push(await place(++index, kind))
    }
    const sessions = async () => {
      const response = await fetch(`${base}/v1/agents/${agentId}/sessions?limit=100`, { headers: adminAuth })
      return ((await response.json()) as { data: { sessions: Array<any> } }).data.sessions
    }
    await until(sessions, (all) => all.length === 40 && all.every((s) => s.status === "active"), "40 active sessions", 120_000)
    await until(
      () => placed.filter(({ index }) => (callerToAgent.get(index)?.length ?? 0) > 0 && (agentToCaller.get(index)?.length ?? 0) > 0).length,
      (n) => n === 40,
      "audio both ways on every call"
    )
    const instanceOf = new Map((await sessions()).map((s) => [s.callId as string, s.instanceId as string]))
    const doomed = placed.filter((p) => instanceOf.get(p.callId) === KILLED)
    const survivors = placed.filter((p) => instanceOf.get(p.callId) !== KILLED)
    // Each kind is half on each instance: every rescue path has callers to rescue.
    const doomedKinds = Object.fromEntries(KINDS.map(([kind, count]) => [kind, [doomed.filter((p) => p.kind === kind).length, count / 2]]))
    for (const [kind, [got, want]] of Object.entries(doomedKinds)) expect({ kind, calls: got }).toEqual({ kind, calls: want })
    // No call needed the carrier's REST API so far (Call Control's answer aside).
    expect(fakeTwilio.callUpdates().length + fakeTelnyx.texmlUpdates().length).toBe(0)

    // The kill.
    const atKill = new Map(survivors.map((p) => [p.index, { callerToAgent: callerToAgent.get(p.index)!.length, agentToCaller: agentToCaller.get(p.index)!.length }]))
    await byId.get(KILLED)!.stop("SIGKILL")
    const killedAt = Date.now()

    // Each rescue of a caller, wherever it came from, with when it reached the carrier.
    const restRescues = (p: Placed): ReadonlyArray<RecordedRequest> =>
      p.kind === "twilio"
        ? fakeTwilio.callUpdates(p.callId)
        : p.kind === "texml"
          ? fakeTelnyx.texmlUpdates(p.callId)
          : fakeTelnyx.commands(p.callId).filter((r) => !r.path.endsWith("/actions/answer"))
    /** The redirect's answer when it was the fallback (a bare hang-up is not: the session had ended, or another path rescued it). */
    const redirectRescue = (p: Placed) => {
      const answer = redirectAnswers.get(p.index)
      return answer !== undefined && answer.status === 200 && !/^<\?xml[^>]*\?><Response><Hangup\/><\/Response>$/.test(answer.markup) ? answer : undefined
    }
    // The fallback reached every doomed caller: a redirect answered with it, or a REST request.
    // (What is waited on: the callers not rescued yet, so a timeout names them.)
    await until(
      () => doomed.filter((p) => redirectRescue(p) === undefined && restRescues(p).length === 0).map((p) => `${p.kind} ${p.callId}`),
      (left) => left.length === 0,
      "a rescue of every caller of the killed instance",
      240_000
    )
    // Every doomed session ended instance_lost with its fallback recorded: each claim's winner has
    // finished its rescue, and every other claimant lost the compare-and-set (no rescue).
    // (What is waited on: the killed instance's sessions not ended yet, so a timeout names them.)
    await until(
      async () => {
        const all = await sessions()
        return doomed
          .map((p) => ({ kind: p.kind, callId: p.callId, session: all.find((s) => s.callId === p.callId) }))
          .filter(({ session }) => session === undefined || session.status === "active" || session.fallback === null)
          .map(({ kind, session }) => ({ kind, id: session?.id, status: session?.status, endReason: session?.endReason, fallback: session?.fallback, instanceId: session?.instanceId }))
      },
      (left) => left.length === 0,
      "the killed instance's sessions ended with their fallback",
      240_000
    )
    // Every carrier request the kill caused has been answered (the redirects, the streaming.stopped webhooks).
    await Promise.all(doomed.map((p) => p.call.redirected ?? p.streamingStopped))

    const survivorLog = byId.get(INSTANCES.find((id) => id !== KILLED)!)!.stdout()
      .split("\n")
      .filter((line) => line.includes("rescued a Call Control call whose stream stopped"))
    const timings: Array<{ index: number; kind: Kind; via: string; ms: number }> = []
    for (const p of doomed) {
      // The carrier's <Redirect> names the fleet's address: a live instance answered it.
      if (p.kind !== "callControl") expect({ call: p.index, redirect: redirectAnswers.get(p.index)?.status }).toEqual({ call: p.index, redirect: 200 })
      else expect({ call: p.index, streamingStopped: await p.streamingStopped }).toEqual({ call: p.index, streamingStopped: 200 })
      const viaRedirect = redirectRescue(p)
      const rest = restRescues(p)
      // Exactly one rescue per caller, by whichever path claimed the session.
      expect({ call: p.index, rescues: (viaRedirect === undefined ? 0 : 1) + rest.length }).toEqual({ call: p.index, rescues: 1 })
      if (viaRedirect !== undefined) {
        expect(viaRedirect.markup).toContain(`${FALLBACK_NUMBER}</Dial>`)
        timings.push({ index: p.index, kind: p.kind, via: "redirect", ms: viaRedirect.answeredAt - killedAt })
      } else {
        expect(rest[0]!.rawBody).toContain(p.kind === "callControl" ? JSON.stringify(FALLBACK_NUMBER).slice(1, -1) : encodeURIComponent(FALLBACK_NUMBER))
        const onStreamingStopped = p.kind === "callControl" && survivorLog.some((line) => line.includes(p.callId))
        timings.push({ index: p.index, kind: p.kind, via: onStreamingStopped ? "streaming.stopped" : "registry sweep", ms: rest[0]!.receivedAt - killedAt })
      }
    }
    const ms = timings.map((t) => t.ms)
    console.log(
      `kill-to-fallback over ${timings.length} callers: p50 ${percentile(ms, 50)} ms, max ${Math.max(...ms)} ms; ` +
        `by path: ${[...new Set(timings.map((t) => `${t.kind} via ${t.via}`))].map((path) => `${path} x${timings.filter((t) => `${t.kind} via ${t.via}` === path).length}`).join(", ")}\n` +
        timings.map((t) => `  call ${t.index} (${t.kind}, ${t.via}): ${t.ms} ms`).join("\n")
    )

    // The survivor's calls carried on: audio kept flowing both ways after the kill.
    await until(
      () =>
        survivors.filter(
          (p) =>
            callerToAgent.get(p.index)!.length >= atKill.get(p.index)!.callerToAgent + 50 &&
            agentToCaller.get(p.index)!.length >= atKill.get(p.index)!.agentToCaller + 50
        ).length,
      (n) => n === survivors.length,
      "a second more of audio both ways on every call of the survivor"
    )
    for (const p of survivors) expect(p.call.isOpen).toBe(true)
    // Their callers hang up (Telnyx then reports the Call Control streams stopped: nothing to rescue).
    await Promise.all(survivors.map((p) => p.call.hangup()))
    const ended = await until(sessions, (all) => all.length === 40 && all.every((s) => s.status !== "active"), "40 terminal sessions", 120_000)
    const byCall = new Map(ended.map((s) => [s.callId as string, s]))
    for (const p of doomed) {
      expect(byCall.get(p.callId)).toMatchObject({
        status: "failed",
        endReason: "instance_lost",
        instanceId: KILLED,
        fallback: { trigger: "instance_lost", type: "phone", outcome: "transferred" }
      })
    }
    for (const p of survivors) expect(byCall.get(p.callId)).toMatchObject({ status: "completed", endReason: "caller_hangup", fallback: null })
    await Promise.all(survivors.map((p) => p.streamingStopped))
    // 0 frames lost both ways on the survivor's calls: every caller frame sent reached the agent;
    // the agent's frames reached the caller without a gap.
    await until(
      () => survivors.filter((p) => framesLost(callerToAgent.get(p.index), p.call.stats.framesSent) === 0).length,
      (n) => n === survivors.length,
      "every caller frame of the survivor's calls at its agent"
    )
    for (const p of survivors) {
      const seqs = agentToCaller.get(p.index)!
      expect({ call: p.index, lost: framesLost(seqs, Math.max(...seqs)) }).toEqual({ call: p.index, lost: 0 })
    }

    // Exactly 40 session.ended: every delivery is delivered (none left to retry), one event per session.
    const environmentIds = [...environments.values()]
    await until(
      async () => {
        const lists = await Promise.all(
          environmentIds.map(async (environmentId) => {
            const response = await fetch(`${base}/v1/agents/${agentId}/environments/${environmentId}/webhook-deliveries?limit=100`, { headers: adminAuth })
            return ((await response.json()) as { data: { deliveries: Array<{ state: string }> } }).data.deliveries
          })
        )
        return lists.flat().map((d) => d.state)
      },
      (states) => states.length === 40 && states.every((state) => state === "delivered"),
      "40 deliveries delivered",
      120_000
    )
    const events = hooks.requests.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) => e.event === "session.ended")
    const ids = events.map((e) => e.sessionId as string)
    expect(new Set(ids).size).toBe(ids.length)
    expect(new Set(ids)).toEqual(new Set(ended.map((s) => s.id)))
    const eventOf = new Map(events.map((e) => [e.callId as string, e]))
    for (const p of doomed) expect(eventOf.get(p.callId)).toMatchObject({ status: "failed", endReason: "instance_lost" })
    for (const p of survivors) expect(eventOf.get(p.callId)).toMatchObject({ status: "completed" })
    // The survivor's calls needed no rescue (their streaming.stopped found the session ended).
    for (const p of survivors) expect(restRescues(p)).toEqual([])
  }, 900_000)
})
