import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
import type { Session } from "../../src/sessions/SessionSchema.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { adminAuth, makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { sampleSession } from "./SessionStore.contract.js"

describe.each<StoreKind>(["memory", "redis"])("session routes (%s store)", (kind) => {
  let t: TestApp
  const agentId = uniqueId("agent")
  const sessions: Array<Session> = []
  beforeAll(async () => {
    t = await makeTestApp(kind)
    const base = Date.now() - 60_000
    const plan: Array<[string, Session["status"]]> = [
      ["env_a", "completed"],
      ["env_b", "failed"],
      ["env_a", "timeout"],
      ["env_a", "completed"],
      ["env_b", "active"]
    ]
    for (const [n, [environmentId, status]] of plan.entries()) {
      const session = sampleSession(agentId, { environmentId, status, createdAt: new Date(base + n * 1000).toISOString() })
      sessions.push(session)
      await t.runtime.runPromise(Effect.flatMap(Sessions, (s) => s.record(session)))
    }
  })
  afterAll(() => t.close())

  const get = (url: string, headers: Record<string, string> = adminAuth) => t.app.inject({ method: "GET", url, headers })
  const newestFirst = () => [...sessions].reverse()

  it("lists the agent's sessions newest first", async () => {
    const res = await get(`/v1/agents/${agentId}/sessions`)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ data: { sessions: newestFirst(), nextCursor: null } })
  })

  it("pages with limit and cursor", async () => {
    const seen: Array<string> = []
    let url = `/v1/agents/${agentId}/sessions?limit=2`
    for (let page = 0; page < 5; page++) {
      const body = (await get(url)).json()
      seen.push(...body.data.sessions.map((s: Session) => s.id))
      if (body.data.nextCursor === null) break
      url = `/v1/agents/${agentId}/sessions?limit=2&cursor=${encodeURIComponent(body.data.nextCursor)}`
    }
    expect(seen).toEqual(newestFirst().map((s) => s.id))
  })

  it("filters by environment and status", async () => {
    const ids = async (query: string) => (await get(`/v1/agents/${agentId}/sessions?${query}`)).json().data.sessions.map((s: Session) => s.id)
    expect(await ids("environmentId=env_a")).toEqual(newestFirst().filter((s) => s.environmentId === "env_a").map((s) => s.id))
    expect(await ids("status=completed")).toEqual(newestFirst().filter((s) => s.status === "completed").map((s) => s.id))
    expect(await ids("environmentId=env_b&status=active")).toEqual([sessions[4]!.id])
  })

  it("refuses bad query parameters with the field named", async () => {
    for (const query of ["limit=0", "limit=101", "limit=abc", "status=paused", "environmentId=a%7Bb", "cursor=garbage", "unknown=1"]) {
      const res = await get(`/v1/agents/${agentId}/sessions?${query}`)
      expect(res.statusCode, query).toBe(400)
      expect(res.json().error.code).toBe("VALIDATION_FAILED")
    }
    expect((await get(`/v1/agents/${agentId}/sessions?cursor=garbage`)).json().error.details[0].field).toBe("cursor")
  })

  it("gets one session, 404 for an unknown one or another agent's", async () => {
    const res = await get(`/v1/agents/${agentId}/sessions/${sessions[0]!.id}`)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ data: sessions[0] })
    const missing = await get(`/v1/agents/${agentId}/sessions/ses_missing`)
    expect(missing.statusCode).toBe(404)
    expect(missing.json().error.code).toBe("NOT_FOUND")
    expect((await get(`/v1/agents/${uniqueId("other")}/sessions/${sessions[0]!.id}`)).statusCode).toBe(404)
  })

  it("needs a key for the agent: 401 without, 403 for another agent's, 200 with its own", async () => {
    const url = `/v1/agents/${agentId}/sessions`
    expect((await get(url, {})).statusCode).toBe(401)
    const create = (agentIds: Array<string>) =>
      t.runtime.runPromise(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "k", agentIds }))).then((k) => k.key)
    const other = await create([uniqueId("other")])
    expect((await get(url, { authorization: `Bearer ${other}` })).statusCode).toBe(403)
    const own = await create([agentId])
    expect((await get(url, { authorization: `Bearer ${own}` })).statusCode).toBe(200)
    expect((await get(`${url}/${sessions[0]!.id}`, { authorization: `Bearer ${other}` })).statusCode).toBe(403)
  })

  it("describes both routes in the OpenAPI document", async () => {
    const doc = (await get("/v1/openapi.json")).json()
    expect(doc.paths["/v1/agents/{agentId}/sessions"].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(["agentId", "environmentId", "status", "limit", "cursor"])
    )
    expect(doc.paths["/v1/agents/{agentId}/sessions/{sessionId}"].get).toBeDefined()
  })
})
