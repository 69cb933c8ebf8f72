import { type Duration, Effect, Either, Exit, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AddressRefusal, classifyAddress, classifyHostname } from "../../src/egress/AddressPolicy.js"
import { makeSafeHttpClient, type ResolvedAddress, type SafeHttpOptions } from "../../src/webhooks/SafeHttpClient.js"
import { freePort } from "../support/redisServer.js"
import { type Receiver, type Reply, startReceiver, TEST_CA } from "./httpsReceiver.js"

/** One sample (or more) for every refused range, with the refusal expected. */
const refused: ReadonlyArray<readonly [string, AddressRefusal]> = [
  ["127.0.0.1", "loopback"],
  ["127.255.255.254", "loopback"],
  ["::1", "loopback"],
  ["10.0.0.1", "private"],
  ["10.255.255.255", "private"],
  ["172.16.0.1", "private"],
  ["172.31.255.255", "private"],
  ["192.168.1.1", "private"],
  ["169.254.0.1", "link-local"],
  ["169.254.10.20", "link-local"],
  ["fe80::1", "link-local"],
  ["febf::1", "link-local"],
  ["100.64.0.1", "cgnat"],
  ["100.127.255.255", "cgnat"],
  ["100.100.100.200", "cgnat"],
  ["0.0.0.0", "unspecified"],
  ["0.1.2.3", "unspecified"],
  ["::", "unspecified"],
  ["224.0.0.1", "multicast"],
  ["239.255.255.250", "multicast"],
  ["ff02::1", "multicast"],
  ["ff05::1:3", "multicast"],
  ["::ffff:10.0.0.1", "private"],
  ["::ffff:127.0.0.1", "loopback"],
  ["::ffff:169.254.169.254", "metadata"],
  ["::ffff:a9fe:a9fe", "metadata"],
  ["::ffff:192.168.0.1", "private"],
  ["64:ff9b::10.0.0.1", "private"],
  ["2002:c0a8:101::1", "private"],
  ["fc00::1", "private"],
  ["fd12:3456:789a::1", "private"],
  ["fec0::1", "private"],
  ["169.254.169.254", "metadata"],
  ["fd00:ec2::254", "metadata"],
  ["255.255.255.255", "reserved"],
  ["240.0.0.1", "reserved"],
  ["192.0.2.10", "reserved"],
  ["198.18.0.1", "reserved"],
  ["2001:db8::1", "reserved"],
  ["::127.0.0.1", "reserved"]
]

const publicAddresses = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "169.253.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2a00:1450:4001::200e"]

describe("AddressPolicy", () => {
  it.each(refused)("refuses %s as %s", (address, refusal) => {
    expect(classifyAddress(address)).toBe(refusal)
  })

  it.each(publicAddresses)("allows the public address %s", (address) => {
    expect(classifyAddress(address)).toBeUndefined()
  })

  it("refuses anything that is not an IP address", () => {
    expect(classifyAddress("not-an-ip")).toBe("reserved")
    expect(classifyAddress("1.2.3")).toBe("reserved")
  })

  it("refuses metadata and localhost names before any lookup", () => {
    expect(classifyHostname("metadata.google.internal")).toBe("metadata")
    expect(classifyHostname("METADATA.GOOGLE.INTERNAL.")).toBe("metadata")
    expect(classifyHostname("localhost")).toBe("loopback")
    expect(classifyHostname("api.localhost")).toBe("loopback")
    expect(classifyHostname("hooks.example.com")).toBeUndefined()
  })
})

describe("SafeHttpClient", () => {
  let receiver: Receiver
  let redirectTarget: Receiver
  let scope: Scope.CloseableScope
  const lookups: Array<string> = []
  /** receiver.test is the test receiver; target.test resolves to whatever `answer` holds. */
  let answer: ReadonlyArray<ResolvedAddress> = []
  const resolveHost = async (hostname: string): Promise<ReadonlyArray<ResolvedAddress>> => {
    lookups.push(hostname)
    if (hostname === "receiver.test") return [{ address: "127.0.0.1", family: 4 }]
    if (hostname === "target.test") return answer
    return []
  }
  const make = (options: Partial<SafeHttpOptions>) =>
    Effect.runPromise(Scope.extend(makeSafeHttpClient({ allowPrivateNetworks: false, ca: TEST_CA, resolveHost, ...options }), scope))
  let strict: Effect.Effect.Success<ReturnType<typeof makeSafeHttpClient>>
  let open: Effect.Effect.Success<ReturnType<typeof makeSafeHttpClient>>

  beforeAll(async () => {
    scope = Effect.runSync(Scope.make())
    redirectTarget = await startReceiver()
    receiver = await startReceiver((request): Reply => {
      switch (request.path) {
        case "/slow":
          return { status: 200, delayMs: 2000 }
        case "/hang":
          return "hang"
        case "/big":
          return { status: 200, body: Buffer.alloc(200_000, 0x61) }
        case "/redirect":
          return { status: 302, headers: { location: redirectTarget.url("/moved") } }
        case "/twiml":
          return { status: 200, headers: { "content-type": "text/xml" }, body: "<Response><Say>hi</Say></Response>" }
        default:
          return { status: 200, body: "ok" }
      }
    })
    strict = await make({})
    open = await make({ allowPrivateNetworks: true })
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await receiver.close()
    await redirectTarget.close()
  })

  const post = (client: typeof strict, url: string, timeout: Duration.DurationInput = "2 seconds", maxResponseBytes?: number) =>
    Effect.runPromise(
      Effect.either(
        client.post(url, { body: '{"a":1}', headers: { "content-type": "application/json", "x-test": "yes" }, timeout, ...(maxResponseBytes ? { maxResponseBytes } : {}) })
      )
    )

  const expectRefused = async (client: typeof strict, url: string) => {
    const before = receiver.requests.length
    const result = await post(client, url)
    expect(Either.isLeft(result) && result.left.kind, url).toBe("refused-address")
    expect(receiver.requests.length).toBe(before)
  }

  it.each(refused)("refuses a hostname that resolves to %s (%s), without sending anything", async (address) => {
    answer = [{ address, family: address.includes(":") ? 6 : 4 }]
    await expectRefused(strict, `https://target.test:${receiver.port}/hook`)
  })

  it("refuses a hostname when any one of its addresses is refused", async () => {
    answer = [
      { address: "93.184.216.34", family: 4 },
      { address: "10.1.2.3", family: 4 }
    ]
    await expectRefused(strict, `https://target.test:${receiver.port}/hook`)
  })

  it.each([
    "https://127.0.0.1:PORT/hook",
    "https://[::1]:PORT/hook",
    "https://[::ffff:127.0.0.1]:PORT/hook",
    "https://10.0.0.1/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://[fd00:ec2::254]/",
    "https://localhost:PORT/hook",
    "https://localhost.:PORT/hook",
    "https://2130706433:PORT/hook",
    "https://0x7f.0.0.1:PORT/hook",
    "https://017700000001:PORT/hook",
    "https://metadata.google.internal/computeMetadata/v1/"
  ])("refuses the IP literal or special name in %s", async (url) => {
    await expectRefused(strict, url.replace("PORT", String(receiver.port)))
  })

  it("refuses cloud metadata even when private networks are allowed", async () => {
    await expectRefused(open, "https://169.254.169.254/latest/meta-data")
    await expectRefused(open, "https://metadata.google.internal/")
    answer = [{ address: "fd00:ec2::254", family: 6 }]
    await expectRefused(open, `https://target.test:${receiver.port}/hook`)
  })

  it("refuses http://, credentials in the URL and garbage", async () => {
    for (const url of [`http://127.0.0.1:${receiver.port}/hook`, `https://user:pw@127.0.0.1:${receiver.port}/`, "not a url"]) {
      const result = await post(open, url)
      expect(Either.isLeft(result) && result.left.kind, url).toBe("invalid-url")
    }
  })

  it("with private networks allowed, posts headers and body and returns the response", async () => {
    const result = await post(open, receiver.url("/twiml"))
    expect(Either.isRight(result)).toBe(true)
    if (Either.isLeft(result)) return
    expect(result.right.status).toBe(200)
    expect(result.right.headers["content-type"]).toBe("text/xml")
    expect(result.right.body.toString()).toBe("<Response><Say>hi</Say></Response>")
    const request = receiver.requests.at(-1)!
    expect(request.method).toBe("POST")
    expect(request.headers["x-test"]).toBe("yes")
    expect(request.body.toString()).toBe('{"a":1}')
  })

  it("connects to the address its own lookup checked (one resolution per connection) and verifies TLS for the name", async () => {
    lookups.length = 0
    const result = await post(open, `https://receiver.test:${receiver.port}/named`)
    expect(Either.isRight(result) && result.right.status).toBe(200)
    expect(lookups).toEqual(["receiver.test"])
  })

  it("verifies certificates: without the test CA the receiver is not trusted", async () => {
    const untrusting = await make({ allowPrivateNetworks: true, ca: undefined })
    const result = await post(untrusting, receiver.url())
    expect(Either.isLeft(result) && result.left.kind).toBe("connection")
  })

  it("reuses keep-alive connections", async () => {
    const client = await make({ allowPrivateNetworks: true })
    const before = receiver.connections()
    for (let i = 0; i < 4; i++) {
      expect(Either.isRight(await post(client, receiver.url("/reuse")))).toBe(true)
      // Let the client see the response end and put the socket back in its pool.
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    expect(receiver.connections() - before).toBe(1)
    const used = new Set(receiver.requests.filter((r) => r.path === "/reuse").map((r) => r.connection))
    expect(used.size).toBe(1)
  })

  it("never follows redirects", async () => {
    const result = await post(open, receiver.url("/redirect"))
    expect(Either.isRight(result) && result.right.status).toBe(302)
    expect(redirectTarget.requests).toHaveLength(0)
  })

  it("times out a slow receiver and one that never answers", async () => {
    for (const path of ["/slow", "/hang"]) {
      // Against a request the slow receiver answers after 2 s: the 300 ms timeout ends this one first.
      const settled: Array<string> = []
      const patient = post(open, receiver.url("/slow"), "10 seconds").then((r) => (settled.push("patient"), r))
      const result = await post(open, receiver.url(path), "300 millis").then((r) => (settled.push(path), r))
      expect(Either.isLeft(result) && result.left.kind, path).toBe("timeout")
      const patientResult = await patient
      expect(Either.isRight(patientResult) && patientResult.right.status).toBe(200)
      expect(settled).toEqual([path, "patient"])
    }
  })

  it("reports a refused connection as a connection error", async () => {
    const port = await freePort()
    const result = await post(open, `https://127.0.0.1:${port}/hook`)
    expect(Either.isLeft(result) && result.left.kind).toBe("connection")
    expect(Either.isLeft(result) && result.left.detail).toContain("ECONNREFUSED")
  })

  it("keeps only the first maxResponseBytes of a body (64 KiB by default)", async () => {
    const small = await post(open, receiver.url("/big"), "2 seconds", 1000)
    expect(Either.isRight(small) && [small.right.body.length, small.right.truncated]).toEqual([1000, true])
    const byDefault = await post(open, receiver.url("/big"))
    expect(Either.isRight(byDefault) && [byDefault.right.body.length, byDefault.right.truncated]).toEqual([65536, true])
    const whole = await post(open, receiver.url("/twiml"))
    expect(Either.isRight(whole) && whole.right.truncated).toBe(false)
  })
})
