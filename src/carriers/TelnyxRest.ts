import { randomUUID } from "node:crypto"
import { Duration, Effect, Option, Redacted } from "effect"
import Telnyx, { APIConnectionTimeoutError, APIError } from "telnyx"
import { AppConfig } from "../config/AppConfig.js"
import { type CallRef, CarrierError } from "../kernel/Carrier.js"
import { Metrics } from "../observability/Metrics.js"
import {
  carrierInstruments,
  type ClassifiedFailure,
  classifyNetworkFailure,
  classifyStatus,
  clip,
  runCarrierRequest,
  runCarrierRequestFor
} from "./CarrierRequest.js"

/** Telnyx's "Call has already ended" (HTTP 422). */
const CALL_ENDED_CODES = new Set(["90018"])
const CALL_ENDED_TEXT = /already ended|no longer active|call is not active|has ended/i

const classifyTelnyxFailure = (error: unknown): ClassifiedFailure => {
  if (error instanceof APIConnectionTimeoutError) return classifyNetworkFailure(error, true)
  if (!(error instanceof APIError) || error.status === undefined) return classifyNetworkFailure(error)
  const status = error.status
  const errors = (error.error as { errors?: ReadonlyArray<{ code?: unknown; title?: unknown; detail?: unknown }> } | undefined)?.errors
  const first = Array.isArray(errors) ? errors[0] : undefined
  const detail = first
    ? `${first.code !== undefined ? `error ${String(first.code)}: ` : ""}${clip(first.title)}${first.detail !== undefined ? ` (${clip(first.detail)})` : ""}`
    : `HTTP ${status}`
  const ended =
    status === 404 ||
    (status === 422 &&
      (errors ?? []).some((e) => CALL_ENDED_CODES.has(String(e.code)) || CALL_ENDED_TEXT.test(`${String(e.title)} ${String(e.detail)}`)))
  return ended ? { kind: "ended", status, detail } : classifyStatus(status, detail)
}

/**
 * Telnyx REST through the telnyx SDK, pointed at TELNYX_API_BASE_URL, with the shared carrier
 * request policy (CarrierRequest.ts). Call Control commands carry a command_id, which Telnyx
 * deduplicates, so they are safe to repeat; TeXML call updates are not.
 */
export class TelnyxRest extends Effect.Service<TelnyxRest>()("callgate/TelnyxRest", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const instruments = carrierInstruments((yield* Metrics).registry)
    const client = Option.map(
      config.telnyxApiKey,
      (apiKey) =>
        new Telnyx({
          apiKey: Redacted.value(apiKey),
          publicKey: null,
          clientID: null,
          clientSecret: null,
          baseURL: config.telnyxApiBaseUrl,
          // Retries are ours (CarrierRequest), so every attempt is counted and bounded.
          maxRetries: 0,
          timeout: Duration.toMillis(config.carrierRequestTimeout),
          logLevel: "off"
        })
    )
    if (Option.isNone(client)) yield* Effect.logInfo("Telnyx REST is disabled: TELNYX_API_KEY is not set")

    /** One request whose answer is not needed; `callId` labels the logs. */
    const request = <A>(operation: string, callId: string, idempotent: boolean, send: (sdk: Telnyx, signal: AbortSignal) => Promise<A>) =>
      Option.match(client, {
        onNone: () =>
          Effect.fail(new CarrierError({ provider: "telnyx", operation, detail: "not configured: TELNYX_API_KEY is not set", retryable: false })),
        onSome: (sdk) =>
          runCarrierRequest(instruments, {
            provider: "telnyx",
            operation,
            callId,
            idempotent,
            attempt: Effect.tryPromise({ try: (signal) => send(sdk, signal), catch: classifyTelnyxFailure })
          })
      })

    /** A request whose answer is needed (dial); the command_id in the body makes a repeat harmless. */
    const requestFor = <A>(operation: string, callId: string, send: (sdk: Telnyx, signal: AbortSignal) => Promise<A>): Effect.Effect<A, CarrierError> =>
      Option.match(client, {
        onNone: () =>
          Effect.fail(new CarrierError({ provider: "telnyx", operation, detail: "not configured: TELNYX_API_KEY is not set", retryable: false })),
        onSome: (sdk) =>
          runCarrierRequestFor(instruments, {
            provider: "telnyx",
            operation,
            callId,
            idempotent: true,
            attempt: Effect.tryPromise({ try: (signal) => send(sdk, signal), catch: classifyTelnyxFailure })
          })
      })

    /** One Call Control command; the command_id makes a repeated attempt a no-op at Telnyx. */
    const command = (
      operation: string,
      callControlId: string,
      send: (actions: Telnyx["calls"]["actions"], commandId: string, signal: AbortSignal) => Promise<unknown>
    ) => {
      const commandId = randomUUID()
      return request(operation, callControlId, true, (sdk, signal) => send(sdk.calls.actions, commandId, signal))
    }

    /** A TeXML call update (Status or Texml); never repeated after an ambiguous failure. */
    const texmlUpdate = (operation: string, call: CallRef, params: { Status?: string; Texml?: string }, idempotent: boolean) =>
      call.accountSid === undefined || call.accountSid === ""
        ? Effect.fail(new CarrierError({ provider: "telnyx", operation, detail: "the TeXML call has no account id", retryable: false }))
        : request(operation, call.callId, idempotent, (sdk, signal) =>
            sdk.texml.accounts.calls.update(call.callId, { account_sid: call.accountSid!, ...params }, { signal })
          )

    const hangup = (callControlId: string) =>
      command("hangup", callControlId, (actions, command_id, signal) => actions.hangup(callControlId, { command_id }, { signal }))

    /** `webhookUrl`: where the new leg's webhooks go (call.answered, call.bridged, call.hangup: docs/fallback.md, "Transfer outcomes"). */
    const transfer = (callControlId: string, to: string, from?: string, timeoutSecs?: number, webhookUrl?: string) =>
      command("transfer", callControlId, (actions, command_id, signal) =>
        actions.transfer(
          callControlId,
          {
            to,
            ...(from !== undefined ? { from } : {}),
            ...(timeoutSecs !== undefined ? { timeout_secs: timeoutSecs } : {}),
            ...(webhookUrl !== undefined ? { webhook_url: webhookUrl, webhook_url_method: "POST" as const } : {}),
            command_id
          },
          { signal }
        )
      )

    return { client, request, requestFor, command, texmlUpdate, hangup, transfer } as const
  })
}) {}
