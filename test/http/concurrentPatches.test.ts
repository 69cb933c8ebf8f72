import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createEnvironment, environmentUrl } from "./client.js"

/**
 * Each group of fields is written by several of the 50 concurrent PATCHes, always with the same
 * value, so the end state is known whatever the order: a PATCH applied to a stale read would put
 * some other group back to its old value.
 */
const groups: ReadonlyArray<Record<string, unknown>> = [
  { name: "fifty at once" },
  { webhookUrl: "https://hooks.example.com/concurrent" },
  { errorFallbackTimeout: 9 },
  { errorFallbackOccurrenceThreshold: 7 },
  { errorFallbackTimeWindow: 1200 },
  { agentUrl: "wss://agent.example.com/concurrent" },
  { errorFallbackType: "phone", errorFallbackValue: "+14155550123" }
]

describe.each<StoreKind>(["memory", "redis"])("concurrent PATCHes of one environment (%s store)", (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp(kind)
  })
  afterAll(() => t.close())

  it("50 concurrent PATCHes of different fields never overwrite each other", async () => {
    const agentId = uniqueId("agent")
    const created = await createEnvironment(t.app, agentId)
    const patches = Array.from({ length: 50 }, (_, i) => groups[i % groups.length]!)
    const answers = await Promise.all(patches.map((body) => call(t.app, "PATCH", environmentUrl(agentId, created.id), { body })))
    expect(answers.map((answer) => answer.status)).toEqual(patches.map(() => 200))

    const final = (await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data
    expect(final).toMatchObject(Object.assign({}, ...groups))

    // The webhook secret was generated exactly once, by the PATCH that set the first URL, and only
    // that response showed it, even though writers retried on conflicts.
    const shown = answers.flatMap((answer) => (answer.json.data.webhookSecret ? [answer.json.data.webhookSecret as string] : []))
    expect(shown).toHaveLength(1)
    expect(final.webhookSecretLast4).toBe(shown[0]!.slice(-4))
  })
})
