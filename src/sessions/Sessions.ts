import { Data, Effect, Option, Schema } from "effect"
import type { AnsweredBy, MachineVerdict } from "../kernel/CallLegs.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { isE164 } from "../environments/EnvironmentSchema.js"
import type { FallbackRecord } from "../fallback/FallbackRecord.js"
import type { TurnRecord } from "../turns/TurnRecord.js"
import type { SessionEndedEvent } from "../webhooks/SessionEndedEvent.js"
import { DEFAULT_PAGE_SIZE, isOpenStatus, type PendingTransfer, type Session, type SessionListQuery, type SessionStatus } from "./SessionSchema.js"
import { type SessionCursor, type SessionRef, SessionStore } from "./SessionStore.js"

export class SessionNotFound extends Data.TaggedError("SessionNotFound")<{
  readonly agentId: string
  readonly sessionId: string
}> {}

/** A `cursor` query parameter that callgate did not hand out. */
export class InvalidSessionCursor extends Data.TaggedError("InvalidSessionCursor")<{}> {}

const CursorJson = Schema.parseJson(Schema.Struct({ t: Schema.Number, i: Schema.String }))
const decodeCursor = Schema.decodeUnknownOption(CursorJson)

export const encodeCursor = (cursor: SessionCursor): string =>
  Buffer.from(JSON.stringify({ t: cursor.createdAtMs, i: cursor.id })).toString("base64url")

const parseCursor = (text: string): Option.Option<SessionCursor> =>
  decodeCursor(Buffer.from(text, "base64url").toString("utf8")).pipe(Option.map(({ i, t }) => ({ createdAtMs: t, id: i })))

export interface SessionEnd {
  readonly status: Exclude<SessionStatus, "queued" | "ringing" | "active">
  readonly endReason: string
  readonly endedAt: Date
  readonly fallback?: FallbackRecord | undefined
  /** A transfer the ending left ringing (TransferOutcomes): session.ended waits for its outcome. */
  readonly pendingTransfer?: PendingTransfer | undefined
  /** The turns the session's observer saw, when it had one. */
  readonly turns?: ReadonlyArray<TurnRecord> | undefined
}

/**
 * The session.ended payload (docs/webhooks.md, "The request"): the agent's number is the one called on inbound calls
 * and the caller id on outbound ones; numbers that are not E.164 (SIP URIs, client ids) are left
 * out rather than sent malformed. `duration` is whole seconds, rounded, as a string.
 */
export const sessionEndedEvent = (session: Session): SessionEndedEvent => {
  const agentNumber = session.direction === "inbound" ? session.to : session.from
  const clientNumber = session.direction === "inbound" ? session.from : session.to
  const ended = session.endedAt === null ? undefined : Date.parse(session.endedAt)
  const duration = ended === undefined ? undefined : Math.max(0, Math.round((ended - Date.parse(session.createdAt)) / 1000))
  return {
    event: "session.ended",
    sessionId: session.id,
    agentId: session.agentId,
    environmentId: session.environmentId,
    status: session.status,
    createdAt: session.createdAt,
    ...(agentNumber !== null && isE164(agentNumber) ? { agentPhoneNumber: agentNumber } : {}),
    ...(clientNumber !== null && isE164(clientNumber) ? { clientPhoneNumber: clientNumber } : {}),
    ...(duration !== undefined ? { duration: String(duration) } : {}),
    direction: session.direction,
    provider: session.provider,
    callId: session.callId,
    ...(session.endReason !== null ? { endReason: session.endReason } : {}),
    ...(session.recording !== undefined ? { recording: session.recording } : {}),
    ...(session.answeredBy !== undefined ? { answeredBy: session.answeredBy } : {}),
    ...(session.transfers !== undefined && session.transfers.length > 0 ? { transfers: session.transfers } : {}),
    ...(session.agentFailovers !== undefined ? { agentFailovers: session.agentFailovers } : {})
  }
}

/** Sessions as the rest of callgate sees them: recorded at start, closed once, read by /v1. */
export class Sessions extends Effect.Service<Sessions>()("callgate/Sessions", {
  effect: Effect.gen(function* () {
    const store = yield* SessionStore

    const get = (agentId: string, sessionId: string) =>
      store.get(agentId, sessionId).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.fail(new SessionNotFound({ agentId, sessionId })),
            onSome: Effect.succeed
          })
        )
      )

    return {
      record: (session: Session) => store.insert(session),
      /** Closes an open session (placed or live); a session already closed keeps its first ending. */
      finish: (agentId: string, sessionId: string, end: SessionEnd) =>
        store.update(agentId, sessionId, (current) =>
          !isOpenStatus(current.status)
            ? current
            : {
                ...current,
                status: end.status,
                endReason: end.endReason,
                endedAt: end.endedAt.toISOString(),
                fallback: end.fallback === undefined ? current.fallback : end.fallback,
                turns: end.turns === undefined ? current.turns : end.turns
              }
        ),
      /** For the turn tracker and the fallback: a pure change applied without losing concurrent ones. */
      update: (agentId: string, sessionId: string, change: (current: Session) => Session) => store.update(agentId, sessionId, change),
      /** The sessions an instance still owns (docs/reliability.md): after it stopped, its orphans. */
      ownedBy: (instanceId: string) => store.ownedBy(instanceId),
      disown: (instanceId: string, ref: SessionRef) => store.disown(instanceId, ref),
      get,
      list: (agentId: string, query: SessionListQuery) =>
        Effect.gen(function* () {
          let after: SessionCursor | undefined
          if (query.cursor !== undefined) {
            const parsed = parseCursor(query.cursor)
            if (Option.isNone(parsed)) return yield* Effect.fail(new InvalidSessionCursor())
            after = parsed.value
          }
          const page = yield* store.list(agentId, {
            environmentId: query.environmentId,
            status: query.status,
            limit: query.limit ?? DEFAULT_PAGE_SIZE,
            after
          })
          return { sessions: page.items, nextCursor: Option.getOrNull(Option.map(page.next, encodeCursor)) }
        })
    } as const
  })
}) {}

/** The stored record of a session that has just opened (status active). */
export const recordOf = (info: SessionInfo, instanceId?: string): Session => ({
  id: info.sessionId,
  agentId: info.agentId,
  environmentId: info.environmentId,
  provider: info.provider,
  callId: info.call.callId,
  from: info.from,
  to: info.to,
  direction: info.direction,
  createdAt: info.createdAt.toISOString(),
  endedAt: null,
  status: "active",
  endReason: null,
  turns: [],
  fallback: null,
  ...(info.metadata !== undefined ? { metadata: { ...info.metadata } } : {}),
  ...(instanceId !== undefined ? { instanceId } : {}),
  callKind: info.call.kind,
  ...(info.call.accountSid !== undefined ? { accountSid: info.call.accountSid } : {}),
  ...verdictFields(info.answeredBy),
  ...(info.streamRef !== undefined ? { streamRef: info.streamRef } : {})
})

/** The session record's fields for a machine-detection verdict. */
export const verdictFields = (verdict: MachineVerdict | undefined): { answeredBy?: AnsweredBy; answeredByDetail?: string } =>
  verdict === undefined ? {} : { answeredBy: verdict.answeredBy, answeredByDetail: verdict.detail }
