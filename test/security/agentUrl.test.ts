import { createServer, type IncomingMessage, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Duration, Effect, Either } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeAgentDialer } from "../../src/websocket/WsAgentDialer.js"
import { type Gateway, startGateway, storedSession, twilioCall, until } from "../livecall/callHarness.js"
import { freePort } from "../support/redisServer.js"
import { makeTestApp, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createEnvironment, environmentUrl, expectFieldError } from "../http/client.js"

/** An HTTP listener that records every request it gets (the "internal service" an SSRF would reach). */
const startRecordingHttp = async (answer: (request: IncomingMessage) => { status: number; headers?: Record<string, string> }) => {
  const requests: Array<{ url: string; upgrade: string | undefined }> = []
  const server: Server = createServer((request, response) => {
    requests.push({ url: request.url ?? "", upgrade: request.headers.upgrade })
    const { status, headers } = answer(request)
    response.writeHead(status, headers).end("internal admin page: secret=42")
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return { port, requests, close: () => new Promise((resolve) => server.close(resolve)) }
}

describe("agentUrl and webhook URLs at configuration time", () => {
  let strict: TestApp
  let relaxed: TestApp
  beforeAll(async () => {
    strict = await makeTestApp("memory")
    relaxed = await makeTestApp("memory", { AGENT_ALLOW_PRIVATE_NETWORKS: "true", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" })
  })
  afterAll(async () => {
    await strict.close()
    await relaxed.close()
  })

  const patchOn = async (t: TestApp, body: unknown) => {
    const agentId = uniqueId("agent")
    const env = await createEnvironment(t.app, agentId)
    return call(t.app, "PATCH", environmentUrl(agentId, env.id), { body })
  }

  it.each([
    "wss://127.0.0.1:18446/",
    "wss://10.0.0.5/agent",
    "wss://172.16.3.4/",
    "wss://192.168.1.1/",
    "wss://169.254.169.254/latest/meta-data",
    "wss://169.254.10.10/",
    "wss://100.64.0.1/",
    "wss://100.100.100.200/",
    "wss://[::1]/",
    "wss://[fe80::1]/",
    "wss://[fd00:ec2::254]/",
    "wss://[::ffff:127.0.0.1]/",
    "wss://0.0.0.0/",
    "wss://localhost:6379/",
    "wss://metadata.google.internal/",
    "ws://agent.example.com/media",
    "wss://user:password@agent.example.com/media",
    "wss://agent.example.com:443@127.0.0.1/"
  ])("agentUrl %s is refused with 400 naming agentUrl", async (agentUrl) => {
    expectFieldError(await patchOn(strict, { agentUrl }), "agentUrl")
  })

  it("a public wss:// agentUrl is accepted", async () => {
    const answer = await patchOn(strict, { agentUrl: "wss://agent.example.com/media" })
    expect(answer.status).toBe(200)
    expect(answer.json.data.agentUrl).toBe("wss://agent.example.com/media")
  })

  it.each([
    ["webhookUrl", { webhookUrl: "https://10.0.0.1/hooks" }],
    ["webhookUrl", { webhookUrl: "https://[::ffff:169.254.169.254]/" }],
    ["webhookUrl", { webhookUrl: "https://localhost/hooks" }],
    ["errorFallbackValue", { errorFallbackType: "webhook", errorFallbackValue: "https://169.254.169.254/latest" }],
    ["errorFallbackValue", { errorFallbackType: "webhook", errorFallbackValue: "https://192.168.0.10/fallback" }]
  ] as const)("%s with a literal private address is refused: %j", async (field, body) => {
    const error = expectFieldError(await patchOn(strict, body), field)
    expect(error.details.find((d) => d.field === field)!.message).toMatch(/must not point to/)
  })

  it("AGENT_ALLOW_PRIVATE_NETWORKS lets ws:// and loopback through, never metadata", async () => {
    expect((await patchOn(relaxed, { agentUrl: "ws://127.0.0.1:9100/" })).status).toBe(200)
    expectFieldError(await patchOn(relaxed, { agentUrl: "wss://169.254.169.254/" }), "agentUrl")
    expectFieldError(await patchOn(relaxed, { webhookUrl: "https://metadata.google.internal/" }), "webhookUrl")
    expect((await patchOn(relaxed, { webhookUrl: "https://127.0.0.1:8443/hooks" })).status).toBe(200)
  })
})

describe("agentUrl at dial time", () => {
  const dial = (dialer: ReturnType<typeof makeAgentDialer>, url: string) =>
    Effect.runPromise(Effect.either(dialer.dial(url, Duration.seconds(5))))

  it("a name that resolves to a loopback address is refused inside the socket's lookup, before any connection", async () => {
    const internal = await startRecordingHttp(() => ({ status: 200 }))
    const resolved: Array<string> = []
    const dialer = makeAgentDialer({
      allowPrivateNetworks: false,
      resolveHost: async (hostname) => {
        resolved.push(hostname)
        return [{ address: "127.0.0.1", family: 4 }]
      }
    })
    const result = await dial(dialer, `wss://rebind.example.com:${internal.port}/internal/admin?x=1`)
    expect(Either.isLeft(result) && result.left.message).toMatch(/^agent_refused:/)
    // The resolver was asked (by the socket) and the answer refused: the listener was never reached.
    expect(resolved).toEqual(["rebind.example.com"])
    expect(internal.requests).toEqual([])
    await internal.close()
  })

  it("every resolved address is checked: one private address among public ones refuses the dial", async () => {
    const dialer = makeAgentDialer({
      allowPrivateNetworks: false,
      resolveHost: async () => [
        { address: "93.184.216.34", family: 4 },
        { address: "10.0.0.1", family: 4 }
      ]
    })
    const result = await dial(dialer, "wss://mixed.example.com/")
    expect(Either.isLeft(result) && result.left.message).toMatch(/^agent_refused:/)
  })

  it("redirects are never followed", async () => {
    const target = await startRecordingHttp(() => ({ status: 200 }))
    const redirector = await startRecordingHttp(() => ({ status: 302, headers: { location: `ws://127.0.0.1:${target.port}/internal` } }))
    const dialer = makeAgentDialer({ allowPrivateNetworks: true })
    const result = await dial(dialer, `ws://127.0.0.1:${redirector.port}/agent`)
    expect(Either.isLeft(result) && result.left.message).toMatch(/^agent_refused:/)
    expect(redirector.requests).toHaveLength(1)
    expect(target.requests).toEqual([])
    await Promise.all([target.close(), redirector.close()])
  })

  it("ws:// and literal private addresses are refused when private networks are not allowed", async () => {
    const dialer = makeAgentDialer({ allowPrivateNetworks: false })
    for (const url of ["ws://agent.example.com/", "wss://127.0.0.1:1/", "wss://[::1]:1/", "wss://169.254.169.254/"]) {
      const result = await dial(dialer, url)
      expect(Either.isLeft(result) && result.left.message, url).toMatch(/^agent_refused:/)
    }
  })
})

describe("dial failures through /v1: a fixed category, never the remote's words", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_ALLOW_PRIVATE_NETWORKS: "true", AGENT_CONNECT_TIMEOUT: "2s" } })
  })
  afterAll(() => gateway.close())

  const callSid = () => `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`

  const failedCallWith = async (agentUrl: string) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl })
    const sid = callSid()
    const carrier = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    carrier.start()
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended")
    const ended = gateway.outbox.events.find((e) => e.callId === sid)!
    const session = await storedSession(gateway, agentId, ended.sessionId)
    return { ended, session: session as any }
  }

  const metricValue = async (category: string, reason: string) => {
    const text = await (await fetch(`${gateway.httpBase}/metrics`)).text()
    const line = text.split("\n").find((l) => l.startsWith(`callgate_agent_dial_failures_total{category="${category}",reason="${reason}"}`))
    return line === undefined ? 0 : Number(line.split(" ").pop())
  }

  it("an HTTP listener answering 200 shows agent_refused, not its status or body", async () => {
    const internal = await startRecordingHttp(() => ({ status: 200 }))
    const before = await metricValue("agent_refused", "http_status")
    const { ended, session } = await failedCallWith(`ws://127.0.0.1:${internal.port}/internal/admin?x=1`)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_dial_failed" })
    const shown = JSON.stringify(session)
    expect(session.fallback.errorMessage).toMatch(/^agent_refused: /)
    expect(shown).not.toMatch(/Unexpected server response|200|secret|127\.0\.0\.1|internal/)
    expect(await metricValue("agent_refused", "http_status")).toBe(before + 1)
    await internal.close()
  })

  it("a closed port shows agent_unreachable, not ECONNREFUSED", async () => {
    const port = await freePort()
    const { session } = await failedCallWith(`ws://127.0.0.1:${port}/`)
    expect(session.fallback.errorMessage).toMatch(/^agent_unreachable: /)
    expect(JSON.stringify(session)).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|:\d{4,5}/)
    expect(await metricValue("agent_unreachable", "ECONNREFUSED")).toBeGreaterThanOrEqual(1)
  })
})
