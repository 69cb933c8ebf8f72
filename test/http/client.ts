import { expect } from "vitest"
import type { FastifyInstance } from "fastify"
import { ADMIN_KEY } from "../support/testApp.js"

export interface CallOptions {
  /** The bearer key; the admin key unless given, no Authorization header when null. */
  readonly key?: string | null
  /** Sent as JSON. */
  readonly body?: unknown
  /** Sent as is (malformed JSON, oversized bodies), with `contentType`. */
  readonly payload?: string | Buffer
  readonly contentType?: string
  readonly headers?: Record<string, string>
}

export interface Answer {
  readonly status: number
  readonly json: any
  readonly headers: Record<string, unknown>
  readonly text: string
}

/** One request through `app.inject`, answered with its status and parsed body. */
export const call = async (app: FastifyInstance, method: string, url: string, options: CallOptions = {}): Promise<Answer> => {
  const key = options.key === undefined ? ADMIN_KEY : options.key
  const headers: Record<string, string> = { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...options.headers }
  let payload: string | Buffer | undefined
  if (options.payload !== undefined) {
    payload = options.payload
    if (options.contentType !== undefined) headers["content-type"] = options.contentType
  } else if (options.body !== undefined) {
    payload = JSON.stringify(options.body)
    headers["content-type"] = options.contentType ?? "application/json"
  }
  const res = await app.inject({ method: method as "GET", url, headers, ...(payload !== undefined ? { payload } : {}) })
  let json: unknown = undefined
  try {
    json = res.body.length > 0 ? JSON.parse(res.body) : undefined
  } catch {
    json = undefined
  }
  return { status: res.statusCode, json, headers: res.headers, text: res.body }
}

/** Asserts the error envelope `{"error": {"code", "message", "details"}}` and returns the error. */
export const expectError = (answer: Answer, status: number, code: string) => {
  expect({ status: answer.status, code: answer.json?.error?.code }).toEqual({ status, code })
  expect(Object.keys(answer.json)).toEqual(["error"])
  expect(Object.keys(answer.json.error).sort()).toEqual(["code", "details", "message"])
  expect(typeof answer.json.error.message).toBe("string")
  expect(answer.json.error.message.length).toBeGreaterThan(0)
  expect(Array.isArray(answer.json.error.details)).toBe(true)
  return answer.json.error as { code: string; message: string; details: Array<{ field: string; message: string }> }
}

/** Asserts a 400 that names `field` in its details and its message. */
export const expectFieldError = (answer: Answer, field: string) => {
  const error = expectError(answer, 400, "VALIDATION_FAILED")
  expect(error.details.map((detail) => detail.field)).toContain(field)
  for (const detail of error.details) expect(Object.keys(detail).sort()).toEqual(["field", "message"])
  expect(error.message).toContain(error.details[0]!.field)
  return error
}

export const environmentsUrl = (agentId: string) => `/v1/agents/${agentId}/environments`
export const environmentUrl = (agentId: string, environmentId: string) => `${environmentsUrl(agentId)}/${environmentId}`

/** Creates an environment as admin and returns its view (the 201 body's data). */
export const createEnvironment = async (app: FastifyInstance, agentId: string, body: Record<string, unknown> = {}) => {
  const answer = await call(app, "POST", environmentsUrl(agentId), { body: { name: "support line", ...body } })
  expect(answer.status).toBe(201)
  return answer.json.data as Record<string, any>
}

/** Creates a key scoped to `agentIds` and returns the key as shown once. */
export const createScopedKey = async (app: FastifyInstance, agentIds: ReadonlyArray<string>) => {
  const answer = await call(app, "POST", "/v1/api-keys", { body: { name: "scoped", agentIds } })
  expect(answer.status).toBe(201)
  return answer.json.data.key as string
}
