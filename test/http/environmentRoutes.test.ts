import { Effect, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { nowIso } from "../../src/kernel/Time.js"
import { makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createEnvironment, environmentsUrl, environmentUrl, expectError } from "./client.js"

const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/

describe.each<StoreKind>(["memory", "redis"])("environment routes (%s store)", (kind) => {
  let t: TestApp
  beforeAll(async () => {
    // On the TestClock: createdAt and updatedAt are the times the test sets (docs/design.md, "One clock").
    t = await makeTestApp(kind, {}, { clock: "test" })
  })
  afterAll(() => t.close())
  const clockNow = () => t.runtime.runPromise(nowIso)

  /** The secrets as the signing code sees them: what "the old secret stops verifying" is about. */
  const currentSecrets = (agentId: string, environmentId: string) =>
    t.runtime.runPromise(
      Effect.map(
        Effect.flatMap(Environments, (envs) => envs.resolve(agentId, environmentId)),
        (resolved) => ({
          webhookSecret: Option.getOrNull(resolved.webhookSecret),
          errorFallbackWebhookSecret: Option.getOrNull(resolved.errorFallbackWebhookSecret)
        })
      )
    )

  describe("POST /v1/agents/{agentId}/environments", () => {
    it("creates an environment with the spec's defaults and answers 201 {data}, created and updated at the Clock's time", async () => {
      const agentId = uniqueId("agent")
      const now = await clockNow()
      const answer = await call(t.app, "POST", environmentsUrl(agentId), { body: { name: "support line" } })
      expect(answer.status).toBe(201)
      expect(Object.keys(answer.json)).toEqual(["data"])
      const env = answer.json.data
      expect(env).toEqual({
        id: expect.stringMatching(/^[A-Za-z0-9_-]{1,64}$/),
        agentId,
        name: "support line",
        createdAt: now,
        updatedAt: now,
        webhookUrl: null,
        webhookSecretLast4: null,
        webhookSignatureScheme: "service",
        agentAudioFormat: "carrier",
        telnyxStreamCodec: "PCMU",
        errorFallbackType: "disabled",
        errorFallbackValue: null,
        errorFallbackTimeout: 0,
        errorFallbackOccurrenceThreshold: 5,
        errorFallbackTimeWindow: 300,
        errorFallbackWebhookSecret: null,
        errorFallbackShedNewCalls: true,
        transferFailedMessage: null,
        agentUrl: null,
        agentFailoverTimeout: 5,
        maxConcurrentOutboundCalls: 10,
        maxConcurrentCalls: null,
        recording: "off"
      })
    })

    it("accepts the whole configuration at creation, generating the secrets it implies", async () => {
      const env = await createEnvironment(t.app, uniqueId("agent"), {
        webhookUrl: "https://hooks.example.com/events",
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue",
        errorFallbackTimeout: 8,
        errorFallbackOccurrenceThreshold: 2,
        errorFallbackTimeWindow: 120,
        agentUrl: "wss://agent.example.com/media"
      })
      expect(env.webhookSecret).toMatch(SECRET)
      expect(env.webhookSecretLast4).toBe(env.webhookSecret.slice(-4))
      expect(env.errorFallbackWebhookSecret).toMatch(SECRET)
      expect(env.errorFallbackWebhookSecret).not.toBe(env.webhookSecret)
      expect(env).toMatchObject({
        webhookUrl: "https://hooks.example.com/events",
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue",
        errorFallbackTimeout: 8,
        errorFallbackOccurrenceThreshold: 2,
        errorFallbackTimeWindow: 120,
        agentUrl: "wss://agent.example.com/media"
      })
    })
  })

  describe("GET /v1/agents/{agentId}/environments", () => {
    it("lists the agent's environments oldest first, never another agent's", async () => {
      const agentId = uniqueId("agent")
      const names = ["first", "second", "third"]
      const created = []
      for (const name of names) {
        created.push(await createEnvironment(t.app, agentId, { name }))
        await t.adjustClock("1 millis") // distinct createdAt milliseconds
      }
      await createEnvironment(t.app, uniqueId("agent"), { name: "someone else's" })
      const answer = await call(t.app, "GET", environmentsUrl(agentId))
      expect(answer.status).toBe(200)
      expect(answer.json.data.map((env: { name: string }) => env.name)).toEqual(names)
      expect(answer.json.data.map((env: { id: string }) => env.id)).toEqual(created.map((env) => env.id))
    })

    it("answers an empty list for an agent with no environments", async () => {
      const answer = await call(t.app, "GET", environmentsUrl(uniqueId("agent")))
      expect(answer.status).toBe(200)
      expect(answer.json).toEqual({ data: [] })
    })

    it("never shows a webhook secret, only its last four characters", async () => {
      const agentId = uniqueId("agent")
      const env = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/events" })
      const answer = await call(t.app, "GET", environmentsUrl(agentId))
      expect(answer.json.data[0]).not.toHaveProperty("webhookSecret")
      expect(answer.json.data[0].webhookSecretLast4).toBe(env.webhookSecret.slice(-4))
      expect(answer.text).not.toContain(env.webhookSecret)
    })
  })

  describe("GET /v1/agents/{agentId}/environments/{environmentId}", () => {
    it("returns the environment, with webhookSecretLast4 and no webhookSecret", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/events" })
      const answer = await call(t.app, "GET", environmentUrl(agentId, created.id))
      expect(answer.status).toBe(200)
      const { webhookSecret, ...shown } = created
      expect(answer.json).toEqual({ data: shown })
      expect(answer.text).not.toContain(webhookSecret)
    })

    it("answers 404 NOT_FOUND for an unknown id and for another agent's environment", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId)
      expectError(await call(t.app, "GET", environmentUrl(agentId, uniqueId("env"))), 404, "NOT_FOUND")
      expectError(await call(t.app, "GET", environmentUrl(uniqueId("agent"), created.id)), 404, "NOT_FOUND")
    })
  })

  describe("PATCH /v1/agents/{agentId}/environments/{environmentId}", () => {
    it("changes only the fields sent and moves updatedAt to the Clock's time, never createdAt", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      await t.adjustClock("1 second")
      const answer = await call(t.app, "PATCH", environmentUrl(agentId, created.id), {
        body: { name: "renamed", errorFallbackTimeout: 4 }
      })
      expect(answer.status).toBe(200)
      expect(answer.json.data).toEqual({ ...created, name: "renamed", errorFallbackTimeout: 4, updatedAt: await clockNow() })
      expect(Date.parse(answer.json.data.updatedAt) - Date.parse(created.updatedAt)).toBe(1_000)
      expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json).toEqual(answer.json)
    })

    it("maxConcurrentCalls: a whole number from 1 to 100000, or null for no limit", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId)
      const limited = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { maxConcurrentCalls: 5 } })
      expect(limited.status).toBe(200)
      expect(limited.json.data.maxConcurrentCalls).toBe(5)
      expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data.maxConcurrentCalls).toBe(5)
      for (const bad of [0, 2.5, 100_001, "5"]) {
        const problem = expectError(await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { maxConcurrentCalls: bad } }), 400, "VALIDATION_FAILED")
        expect(problem.details.map((d) => d.field)).toContain("maxConcurrentCalls")
      }
      const unlimited = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { maxConcurrentCalls: null } })
      expect(unlimited.json.data.maxConcurrentCalls).toBeNull()
    })

    it("webhookSignatureScheme is service, standard or both; stored and returned; anything else is 400", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookSignatureScheme: "both" })
      expect(created.webhookSignatureScheme).toBe("both")
      const answer = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookSignatureScheme: "standard" } })
      expect(answer.status).toBe(200)
      expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data.webhookSignatureScheme).toBe("standard")
      const refused = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookSignatureScheme: "svix" } })
      expect(refused.status).toBe(400)
      expect(refused.json.error.details).toEqual([{ field: "webhookSignatureScheme", message: "must be one of service, standard, both" }])
    })

    it("telnyxStreamCodec is PCMU by default, PCMA, L16;rate=8000, L16;rate=16000 or G722; stored and returned; anything else is 400", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { telnyxStreamCodec: "PCMA" })
      expect(created.telnyxStreamCodec).toBe("PCMA")
      for (const codec of ["L16;rate=8000", "L16;rate=16000", "G722", "PCMU"]) {
        const answer = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { telnyxStreamCodec: codec } })
        expect(answer.status).toBe(200)
        expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data.telnyxStreamCodec).toBe(codec)
      }
      for (const wrong of ["L16", "pcma", "OPUS", 8000]) {
        const refused = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { telnyxStreamCodec: wrong } })
        expectError(refused, 400, "VALIDATION_FAILED")
        expect(refused.json.error.details).toEqual([{ field: "telnyxStreamCodec", message: "must be one of PCMU, PCMA, L16;rate=8000, L16;rate=16000, G722" }])
      }
    })

    it("recording: off by default, on and off again; any other value is refused", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId)
      expect(created.recording).toBe("off")
      const on = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { recording: "on" } })
      expect(on.json.data.recording).toBe("on")
      expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data.recording).toBe("on")
      const off = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { recording: "off" } })
      expect(off.json.data.recording).toBe("off")
      const refused = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { recording: true } })
      expectError(refused, 400, "VALIDATION_FAILED")
      expect(refused.json.error.details).toEqual([{ field: "recording", message: "must be one of off, on" }])
    })

    it("setting webhookUrl generates webhookSecret once, shown only in that response", async () => {
      const agentId = uniqueId("agent")
      const { id } = await createEnvironment(t.app, agentId)
      const first = await call(t.app, "PATCH", environmentUrl(agentId, id), { body: { webhookUrl: "https://hooks.example.com/a" } })
      expect(first.status).toBe(200)
      const secret = first.json.data.webhookSecret
      expect(secret).toMatch(SECRET)
      expect(first.json.data.webhookSecretLast4).toBe(secret.slice(-4))
      expect((await currentSecrets(agentId, id)).webhookSecret).toBe(secret)

      // A new URL keeps the secret and does not show it again.
      const second = await call(t.app, "PATCH", environmentUrl(agentId, id), { body: { webhookUrl: "https://hooks.example.com/b" } })
      expect(second.json.data).not.toHaveProperty("webhookSecret")
      expect(second.json.data).toMatchObject({ webhookUrl: "https://hooks.example.com/b", webhookSecretLast4: secret.slice(-4) })
      expect((await currentSecrets(agentId, id)).webhookSecret).toBe(secret)

      const read = await call(t.app, "GET", environmentUrl(agentId, id))
      expect(read.json.data).not.toHaveProperty("webhookSecret")
      expect(read.json.data.webhookSecretLast4).toBe(secret.slice(-4))
      expect(read.text).not.toContain(secret)
    })

    it("webhookUrl null with webhookSecret null removes the webhook; a later URL gets a new secret", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/a" })
      const removed = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookUrl: null, webhookSecret: null } })
      expect(removed.status).toBe(200)
      expect(removed.json.data).toMatchObject({ webhookUrl: null, webhookSecretLast4: null })
      expect(removed.json.data).not.toHaveProperty("webhookSecret")
      expect((await currentSecrets(agentId, created.id)).webhookSecret).toBeNull()

      const again = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookUrl: "https://hooks.example.com/a" } })
      expect(again.json.data.webhookSecret).toMatch(SECRET)
      expect(again.json.data.webhookSecret).not.toBe(created.webhookSecret)
    })

    it("webhookSecret null alone clears the secret; the next URL change generates a new one", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/a" })
      const cleared = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookSecret: null } })
      expect(cleared.json.data).toMatchObject({ webhookUrl: "https://hooks.example.com/a", webhookSecretLast4: null })
      expect((await currentSecrets(agentId, created.id)).webhookSecret).toBeNull()
      const renewed = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { webhookUrl: "https://hooks.example.com/b" } })
      expect(renewed.json.data.webhookSecret).toMatch(SECRET)
      expect(renewed.json.data.webhookSecret).not.toBe(created.webhookSecret)
    })

    it("switching the fallback type to webhook generates errorFallbackWebhookSecret, kept across later switches", async () => {
      const agentId = uniqueId("agent")
      const { id } = await createEnvironment(t.app, agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      const toWebhook = await call(t.app, "PATCH", environmentUrl(agentId, id), {
        body: { errorFallbackType: "webhook", errorFallbackValue: "https://fallback.example.com/rescue" }
      })
      expect(toWebhook.status).toBe(200)
      const secret = toWebhook.json.data.errorFallbackWebhookSecret
      expect(secret).toMatch(SECRET)
      // Returned on the environment (docs/design.md, "Decisions the interface left open"), every time.
      expect((await call(t.app, "GET", environmentUrl(agentId, id))).json.data.errorFallbackWebhookSecret).toBe(secret)

      await call(t.app, "PATCH", environmentUrl(agentId, id), { body: { errorFallbackType: "phone", errorFallbackValue: "+14155550101" } })
      const back = await call(t.app, "PATCH", environmentUrl(agentId, id), {
        body: { errorFallbackType: "webhook", errorFallbackValue: "https://fallback.example.com/rescue" }
      })
      expect(back.json.data.errorFallbackWebhookSecret).toBe(secret)
    })

    it("errorFallbackWebhookSecret null clears it, so fallback requests go unsigned", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, {
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue"
      })
      expect(created.errorFallbackWebhookSecret).toMatch(SECRET)
      const cleared = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { errorFallbackWebhookSecret: null } })
      expect(cleared.status).toBe(200)
      expect(cleared.json.data).toMatchObject({ errorFallbackType: "webhook", errorFallbackWebhookSecret: null })
      expect((await currentSecrets(agentId, created.id)).errorFallbackWebhookSecret).toBeNull()
      expect((await call(t.app, "GET", environmentUrl(agentId, created.id))).json.data.errorFallbackWebhookSecret).toBeNull()
    })

    it("disabling the fallback clears its value", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      const disabled = await call(t.app, "PATCH", environmentUrl(agentId, created.id), { body: { errorFallbackType: "disabled" } })
      expect(disabled.json.data).toMatchObject({ errorFallbackType: "disabled", errorFallbackValue: null })
    })

    it("answers 404 for an unknown environment", async () => {
      expectError(await call(t.app, "PATCH", environmentUrl(uniqueId("agent"), uniqueId("env")), { body: { name: "x" } }), 404, "NOT_FOUND")
    })
  })

  describe("DELETE /v1/agents/{agentId}/environments/{environmentId}", () => {
    it("answers 204 with no body, after which the environment is gone", async () => {
      const agentId = uniqueId("agent")
      const kept = await createEnvironment(t.app, agentId, { name: "kept" })
      const gone = await createEnvironment(t.app, agentId, { name: "gone" })
      const answer = await call(t.app, "DELETE", environmentUrl(agentId, gone.id))
      expect(answer.status).toBe(204)
      expect(answer.text).toBe("")
      expectError(await call(t.app, "GET", environmentUrl(agentId, gone.id)), 404, "NOT_FOUND")
      expect((await call(t.app, "GET", environmentsUrl(agentId))).json.data.map((env: { id: string }) => env.id)).toEqual([kept.id])
      expectError(await call(t.app, "DELETE", environmentUrl(agentId, gone.id)), 404, "NOT_FOUND")
    })
  })

  describe("POST .../regenerate-webhook-secret", () => {
    it("returns a new webhookSecret; the old one is gone at once", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/events" })
      const answer = await call(t.app, "POST", `${environmentUrl(agentId, created.id)}/regenerate-webhook-secret`)
      expect(answer.status).toBe(200)
      expect(answer.json).toEqual({ data: { webhookSecret: expect.stringMatching(SECRET) } })
      const fresh = answer.json.data.webhookSecret
      expect(fresh).not.toBe(created.webhookSecret)
      expect((await currentSecrets(agentId, created.id)).webhookSecret).toBe(fresh)
      const read = await call(t.app, "GET", environmentUrl(agentId, created.id))
      expect(read.json.data.webhookSecretLast4).toBe(fresh.slice(-4))
      expect(read.text).not.toContain(created.webhookSecret)
    })

    it("accepts an empty JSON body (curl -H 'content-type: application/json')", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/events" })
      const answer = await call(t.app, "POST", `${environmentUrl(agentId, created.id)}/regenerate-webhook-secret`, {
        payload: "",
        contentType: "application/json"
      })
      expect(answer.status).toBe(200)
    })

    it("answers 404 for an unknown environment", async () => {
      const url = `${environmentUrl(uniqueId("agent"), uniqueId("env"))}/regenerate-webhook-secret`
      expectError(await call(t.app, "POST", url), 404, "NOT_FOUND")
    })
  })

  describe("POST .../regenerate-error-fallback-webhook-secret", () => {
    it("returns a new errorFallbackWebhookSecret; the old one stops verifying at once", async () => {
      const agentId = uniqueId("agent")
      const created = await createEnvironment(t.app, agentId, {
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue"
      })
      const answer = await call(t.app, "POST", `${environmentUrl(agentId, created.id)}/regenerate-error-fallback-webhook-secret`)
      expect(answer.status).toBe(200)
      expect(answer.json).toEqual({ data: { errorFallbackWebhookSecret: expect.stringMatching(SECRET) } })
      const fresh = answer.json.data.errorFallbackWebhookSecret
      expect(fresh).not.toBe(created.errorFallbackWebhookSecret)
      expect((await currentSecrets(agentId, created.id)).errorFallbackWebhookSecret).toBe(fresh)
      const read = await call(t.app, "GET", environmentUrl(agentId, created.id))
      expect(read.json.data.errorFallbackWebhookSecret).toBe(fresh)
      expect(read.text).not.toContain(created.errorFallbackWebhookSecret)
    })

    it("answers 404 for an unknown environment", async () => {
      const url = `${environmentUrl(uniqueId("agent"), uniqueId("env"))}/regenerate-error-fallback-webhook-secret`
      expectError(await call(t.app, "POST", url), 404, "NOT_FOUND")
    })
  })

  describe("POST .../clone", () => {
    it("copies the configuration into a new environment with new secrets, never the source's", async () => {
      const agentId = uniqueId("agent")
      const source = await createEnvironment(t.app, agentId, {
        name: "production",
        webhookUrl: "https://hooks.example.com/events",
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue",
        errorFallbackTimeout: 6,
        errorFallbackOccurrenceThreshold: 3,
        errorFallbackTimeWindow: 600,
        agentUrl: "wss://agent.example.com/media"
      })
      await t.adjustClock("1 millis") // the clone is created after its source
      const answer = await call(t.app, "POST", `${environmentUrl(agentId, source.id)}/clone`, { body: { name: "staging" } })
      expect(answer.status).toBe(201)
      const clone = answer.json.data
      expect(clone.id).not.toBe(source.id)
      expect(clone.createdAt).toBe(await clockNow())
      expect(clone).toMatchObject({
        agentId,
        name: "staging",
        webhookUrl: source.webhookUrl,
        errorFallbackType: "webhook",
        errorFallbackValue: source.errorFallbackValue,
        errorFallbackTimeout: 6,
        errorFallbackOccurrenceThreshold: 3,
        errorFallbackTimeWindow: 600,
        agentUrl: source.agentUrl
      })
      expect(clone.webhookSecret).toMatch(SECRET)
      expect(clone.webhookSecret).not.toBe(source.webhookSecret)
      expect(clone.webhookSecretLast4).toBe(clone.webhookSecret.slice(-4))
      expect(clone.errorFallbackWebhookSecret).toMatch(SECRET)
      expect(clone.errorFallbackWebhookSecret).not.toBe(source.errorFallbackWebhookSecret)
      expect(await currentSecrets(agentId, clone.id)).toEqual({
        webhookSecret: clone.webhookSecret,
        errorFallbackWebhookSecret: clone.errorFallbackWebhookSecret
      })
      // The source is untouched.
      expect(await currentSecrets(agentId, source.id)).toEqual({
        webhookSecret: source.webhookSecret,
        errorFallbackWebhookSecret: source.errorFallbackWebhookSecret
      })
      const listed = (await call(t.app, "GET", environmentsUrl(agentId))).json.data.map((env: { id: string }) => env.id)
      expect(listed).toEqual([source.id, clone.id])
    })

    it("names the clone after its source by default and gives no secrets where the source had none", async () => {
      const agentId = uniqueId("agent")
      const source = await createEnvironment(t.app, agentId, { name: "production" })
      const answer = await call(t.app, "POST", `${environmentUrl(agentId, source.id)}/clone`)
      expect(answer.status).toBe(201)
      expect(answer.json.data).toMatchObject({
        name: "production (copy)",
        webhookSecretLast4: null,
        errorFallbackWebhookSecret: null
      })
      expect(answer.json.data).not.toHaveProperty("webhookSecret")
    })

    it("keeps the default name within the 200 characters a name may have", async () => {
      const agentId = uniqueId("agent")
      const source = await createEnvironment(t.app, agentId, { name: "n".repeat(200) })
      const clone = (await call(t.app, "POST", `${environmentUrl(agentId, source.id)}/clone`)).json.data
      expect(clone.name).toBe(`${"n".repeat(193)} (copy)`)
      const renamed = await call(t.app, "PATCH", environmentUrl(agentId, clone.id), { body: { name: clone.name } })
      expect(renamed.status).toBe(200)
    })

    it("answers 404 for an unknown source", async () => {
      expectError(await call(t.app, "POST", `${environmentUrl(uniqueId("agent"), uniqueId("env"))}/clone`), 404, "NOT_FOUND")
    })
  })
})
