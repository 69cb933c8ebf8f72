import { ConfigError, ConfigProvider, Effect, Exit, Layer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AppConfig, describeConfigError } from "../../src/config/AppConfig.js"
import { environmentsUrl } from "../http/client.js"
import { ADMIN_KEY, makeTestApp, type TestApp, uniqueId } from "../support/testApp.js"

/** nginx's address on the compose network (deploy/docker-compose.yml) stands for the proxy here. */
const PROXY = "172.28.0.10"
const limits = { AUTH_FAILURES_PER_MINUTE: "2", RATE_LIMIT_PER_MINUTE: "3" }

/** A request as it reaches callgate: from TCP peer `peer`, with the X-Forwarded-For the proxy (or the client) wrote. */
/** A key callgate never issued: refused, counted against the client's address. */
const BAD_KEY = "cg_invalid_probe"

const request = (t: TestApp, peer: string, forwardedFor: string | undefined, url: string, key?: string) =>
  t.app.inject({
    method: "GET",
    url,
    remoteAddress: peer,
    headers: { ...(forwardedFor === undefined ? {} : { "x-forwarded-for": forwardedFor }), ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) }
  })

/** Fails authentication from (peer, X-Forwarded-For) until the address is throttled; the number of 401s seen. */
const failUntilThrottled = async (t: TestApp, peer: string, forwardedFor: (i: number) => string | undefined) => {
  const url = environmentsUrl(uniqueId("agent"))
  for (let i = 0; i < 10; i++) {
    const answer = await request(t, peer, forwardedFor(i), url, `cg_invalid_${uniqueId("k")}`)
    if (answer.statusCode === 429) return i
    expect(answer.statusCode).toBe(401)
  }
  throw new Error("never throttled")
}

describe("TRUSTED_PROXIES: the per-address limits key on the client behind a trusted proxy", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory", { ...limits, TRUSTED_PROXIES: `${PROXY}, 10.1.0.0/16` })
  })
  afterAll(() => t.close())

  it("two clients behind the proxy are throttled separately: one throttled, the other not; a valid key gets in from both", async () => {
    expect(await failUntilThrottled(t, PROXY, () => "203.0.113.1")).toBe(2)
    expect((await request(t, PROXY, "203.0.113.1", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(429)
    expect((await request(t, PROXY, "203.0.113.2", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(401)
    // Valid credentials are never throttled by the address's failures.
    expect((await request(t, PROXY, "203.0.113.1", environmentsUrl("a_1"), ADMIN_KEY)).statusCode).toBe(200)
    // A proxy in a trusted CIDR counts too.
    expect((await request(t, "10.1.2.3", "203.0.113.1", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(429)
  })

  it("the per-address rate limit (public /v1 paths) counts each client behind the proxy apart", async () => {
    for (let i = 0; i < 3; i++) expect((await request(t, PROXY, "203.0.113.3", "/v1/openapi.json")).statusCode).toBe(200)
    expect((await request(t, PROXY, "203.0.113.3", "/v1/openapi.json")).statusCode).toBe(429)
    expect((await request(t, PROXY, "203.0.113.4", "/v1/openapi.json")).statusCode).toBe(200)
  })

  it("a client cannot escape by forging the header: the proxy appends its peer, and the nearest untrusted address counts", async () => {
    // nginx's $proxy_add_x_forwarded_for: whatever the client sent, then the client's own address.
    expect(await failUntilThrottled(t, PROXY, (i) => `198.18.${i}.1, 203.0.113.5`)).toBe(2)
  })

  it("an untrusted peer's X-Forwarded-For is ignored: it is throttled on its own address whatever it claims", async () => {
    expect(await failUntilThrottled(t, "198.51.100.60", (i) => `203.0.113.${100 + i}`)).toBe(2)
    expect((await request(t, "198.51.100.60", "203.0.113.200", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(429)
  })
})

describe("without TRUSTED_PROXIES the header is ignored", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory", limits)
  })
  afterAll(() => t.close())

  it("every client of one peer shares its budget, whatever X-Forwarded-For says", async () => {
    expect(await failUntilThrottled(t, PROXY, (i) => `203.0.113.${10 + i}`)).toBe(2)
    expect((await request(t, PROXY, "203.0.113.99", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(429)
    expect((await request(t, PROXY, undefined, environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(429)
    expect((await request(t, "198.51.100.61", "203.0.113.99", environmentsUrl("a_1"), BAD_KEY)).statusCode).toBe(401)
  })
})

describe("TRUSTED_PROXIES validation", () => {
  const load = (value: string) =>
    Effect.runPromiseExit(
      AppConfig.pipe(
        Effect.provide(AppConfig.Default),
        Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["ADMIN_API_KEY", ADMIN_KEY], ["TRUSTED_PROXIES", value]]))))
      )
    )

  it.each([
    ["", []],
    ["172.28.0.10", ["172.28.0.10"]],
    [" 10.0.0.0/8 , ::1, fd00::/8 ", ["10.0.0.0/8", "::1", "fd00::/8"]]
  ])("%j is read as %j", async (value, expected) => {
    const exit = await load(value)
    expect(Exit.isSuccess(exit) && exit.value.trustedProxies).toEqual(expected)
  })

  it.each(["nginx", "10.0.0.300", "10.0.0.0/33", "::1/129", "10.0.0.0/8/1", "10.0.0.0/x", "*"])("%j is refused with a line naming TRUSTED_PROXIES", async (value) => {
    const exit = await load(value)
    if (Exit.isSuccess(exit)) throw new Error(`${value} accepted`)
    const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
    expect(describeConfigError(failure as ConfigError.ConfigError)).toMatch(/^invalid configuration: TRUSTED_PROXIES: expected comma-separated IP addresses or CIDRs/)
  })
})
