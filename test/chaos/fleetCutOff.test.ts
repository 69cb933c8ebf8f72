import { afterEach, describe, expect, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { entryUrl, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import { EntryPaths } from "../../src/kernel/EntryPaths.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import type { GatewayProcess } from "../support/gatewayProcess.js"
import { freePort, type RedisServer, startRedisServer } from "../support/redisServer.js"
import { startTcpProxy, type TcpProxy } from "../support/tcpProxy.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { sleep, startFleetInstance } from "../faults/faultRig.js"

/**
 * An instance of a two-instance fleet cut off from Redis (its own TCP proxy drops every packet):
 * it stops taking new calls before the fleet counts it gone, not after (docs/reliability.md,
 * "Fencing"). Its `/readyz` says the fleet registry has not taken its refresh while the other
 * instance still lists it, and every voice webhook it answers from the cut on is refused (503)
 * or sends the stream to the other instance, never to itself.
 */

describe("an instance cut off from Redis in a two-instance fleet (INSTANCE_TTL 10 s)", () => {
  let redis: RedisServer | undefined
  let proxy: TcpProxy | undefined
  let twilio: FakeTwilio | undefined
  const gateways: Array<GatewayProcess> = []
  const agents: Array<SilentAgent> = []

  afterEach(async () => {
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(gateways.splice(0).map((gateway) => gateway.stop("SIGKILL")))
    await twilio?.close()
    await proxy?.close()
    await redis?.stop()
    redis = proxy = twilio = undefined
  })

  it("refuses new calls (503, or the stream to the other instance) and says not ready before the other instance stops listing it", async () => {
    redis = await startRedisServer()
    proxy = await startTcpProxy({ host: "127.0.0.1", port: redis.port })
    const fake = (twilio = await startFakeTwilio())
    const prefix = `${uniqueId("cutoff")}:`
    const start = async (name: string, redisUrl: string) => {
      const port = await freePort()
      const gateway = await startFleetInstance({
        name,
        prefix,
        redisUrl,
        publicUrl: `http://127.0.0.1:${port}`,
        twilio: fake,
        env: { PORT: String(port), INSTANCE_TTL: "10s" }
      })
      gateways.push(gateway)
      return gateway
    }
    const [cut, other] = await Promise.all([start("cut", proxy.url), start("other", redis.url)])
    const idOf = (gateway: GatewayProcess) => gateway.env.INSTANCE_ID!
    const agentId = uniqueId("agent")
    const created = await fetch(`${other.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "cut off" })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    agents.push(await startSilentAgent({ gatewayUrl: other.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, capacity: 4 }))
    await agents[0]!.ready(60_000)

    const listed = async () => {
      const response = await fetch(`${other.baseUrl}/v1/instances`, { headers: adminAuth })
      return ((await response.json()) as { data: { instances: Array<{ id: string }> } }).data.instances.map((entry) => entry.id)
    }
    expect(await listed()).toContain(idOf(cut))

    const voiceWebhook = async () => {
      const url = entryUrl(cut.baseUrl, EntryPaths.twilioVoice, agentId, environmentId)
      const params = { CallSid: twilioSid("CA"), AccountSid: twilioSid("AC"), From: "+15550001111", To: "+15550002222", Direction: "inbound" }
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilioSignature(fake.authToken, url, params) },
        body: new URLSearchParams(params).toString(),
        signal: AbortSignal.timeout(30_000)
      })
      const markup = await res.text()
      const stream = /<Stream url="ws:\/\/127\.0\.0\.1:(\d+)\//.exec(markup)
      return { status: res.status, streamPort: stream === null ? undefined : Number(stream[1]) }
    }

    proxy.set("blackhole")
    const cutAt = Date.now()
    // Until the other instance stops listing it: its /readyz, what the other lists, and webhooks to it.
    let notReadyAt = -1
    let notReadyListed = false
    let goneAt = -1
    const answers: Array<{ status: number; streamPort: number | undefined }> = []
    const webhooks = (async () => {
      while (goneAt < 0) {
        answers.push(await voiceWebhook())
        await sleep(200)
      }
    })()
    while (goneAt < 0 && Date.now() - cutAt < 60_000) {
      const ready = await fetch(`${cut.baseUrl}/readyz`, { signal: AbortSignal.timeout(10_000) })
      const body = (await ready.json()) as { reason?: string }
      const ids = await listed()
      if (notReadyAt < 0 && ready.status === 503 && body.reason?.includes("registry has not taken") === true) {
        notReadyAt = Date.now() - cutAt
        notReadyListed = ids.includes(idOf(cut))
      }
      if (!ids.includes(idOf(cut))) goneAt = Date.now() - cutAt
      else await sleep(100)
    }
    await webhooks
    const refused = answers.filter((a) => a.status === 503).length
    const elsewhere = answers.filter((a) => a.status === 200 && a.streamPort === other.port).length
    const here = answers.filter((a) => a.status === 200 && a.streamPort === cut.port).length
    console.log(
      `cut off from Redis: /readyz "registry has not taken this instance's refresh" ${notReadyAt} ms after the cut (still listed by the other: ${notReadyListed}), ` +
        `the other stopped listing it at ${goneAt} ms; ${answers.length} voice webhooks to it meanwhile: ${refused} x 503, ${elsewhere} streamed to the other, ${here} to itself`
    )
    expect(goneAt).toBeGreaterThan(0)
    expect(notReadyAt).toBeGreaterThan(0)
    expect(notReadyListed).toBe(true)
    expect(notReadyAt).toBeLessThan(goneAt)
    expect(here).toBe(0)
    expect(refused + elsewhere).toBe(answers.length)
  }, 240_000)
})
