import { Effect, Option } from "effect"
import { Environments } from "../../../src/environments/Environments.js"
import { type SessionClaims, SessionTokens } from "../../../src/telephony/SessionTokens.js"
import { makeTestApp, type StoreKind, type TestApp, type TestAppOptions, uniqueId } from "../../support/testApp.js"

export const PUBLIC_URL = "https://callgate.test"
export const XML = '<?xml version="1.0" encoding="UTF-8"?>'

export interface EntryTestApp extends TestApp {
  readonly agentId: string
  readonly environmentId: string
  /** The claims of a token the app issued, or undefined when it does not verify. */
  readonly claimsOf: (token: string) => Promise<SessionClaims | undefined>
}

/** The app (not listening) with PUBLIC_URL set and one environment to call into. */
export const makeEntryTestApp = async (env: Record<string, string>, kind: StoreKind = "memory", options: TestAppOptions = {}): Promise<EntryTestApp> => {
  const t = await makeTestApp(kind, { PUBLIC_URL, ...env }, options)
  const agentId = uniqueId("agent")
  const created = await t.runtime.runPromise(Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "production" })))
  return {
    ...t,
    agentId,
    environmentId: created.id,
    claimsOf: (token) => t.runtime.runPromise(Effect.map(SessionTokens, (tokens) => Option.getOrUndefined(tokens.verify(token))))
  }
}

/** The value of `<Parameter name="token">` or of the stream URL's token query parameter. */
export const tokenIn = (xml: string): string => {
  const match = /name="token" value="([^"]+)"/.exec(xml) ?? /token=([^"&]+)/.exec(xml)
  if (!match) throw new Error(`no token in ${xml}`)
  return decodeURIComponent(match[1]!)
}

export const formBody = (fields: Record<string, string>) => new URLSearchParams(fields).toString()
