import { Effect, Either, Runtime, Schema } from "effect"
import type { FastifyInstance } from "fastify"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { OutboundCalls } from "../../calls/OutboundCalls.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { CallParams, PlaceCallBody } from "../../calls/OutboundCallWire.js"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { EnvironmentParams, ResourceId } from "../../environments/EnvironmentSchema.js"
import { Session } from "../../sessions/SessionSchema.js"
import { verifyTwilioWebhook } from "../../telephony/CarrierSignatures.js"
import { formParams } from "../../telephony/entry/CallAdmission.js"
import { apiRoute } from "../ApiRoute.js"

const base = "/v1/agents/:agentId/environments/:environmentId/calls"

export const callRoutes = [
  apiRoute({
    method: "POST",
    path: base,
    summary: "Place an outbound call: the agent gets it once answered (201 with the session, queued)",
    tag: "calls",
    auth: "agent",
    params: EnvironmentParams,
    body: PlaceCallBody,
    response: Session,
    successStatus: 201,
    handler: ({ params, body }) => Effect.flatMap(OutboundCalls, (calls) => calls.place(params.agentId, params.environmentId, body))
  }),
  apiRoute({
    method: "DELETE",
    path: `${base}/:sessionId`,
    summary: "Cancel an outbound call not answered yet, or hang up a live call; answers the session",
    tag: "calls",
    auth: "agent",
    params: CallParams,
    response: Session,
    handler: ({ params }) =>
      Effect.flatMap(OutboundCalls, (calls) => calls.cancel(params.agentId, params.environmentId, params.sessionId))
  })
]

const StatusQuery = Schema.Struct({ sessionId: ResourceId }, { key: Schema.String, value: Schema.Unknown })
const StatusForm = Schema.Struct({ CallSid: Schema.String, CallStatus: Schema.String }, { key: Schema.String, value: Schema.Unknown })
const AmdForm = Schema.Struct(
  { CallSid: Schema.String, AnsweredBy: Schema.String.pipe(Schema.maxLength(64)) },
  { key: Schema.String, value: Schema.Unknown }
)

/**
 * `POST /telephony/twilio/status?sessionId=..` and `POST /telephony/twilio/amd?sessionId=..`:
 * Twilio's status callbacks and asynchronous AMD verdicts for the calls callgate placed (X-Twilio-Signature checked when TWILIO_AUTH_TOKEN is set). Answers 204; 401 for a bad
 * signature, 400 for a request that is not a status callback. Unauthenticated like the other
 * carrier webhooks, so it has their small body limit and their throttle of failed signatures
 * (docs/security.md, "HTTP limits", "Authentication throttling").
 */
export const registerOutboundCallbackRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<OutboundCalls | AppConfig | PublicUrl | AuthThrottle>) => {
  const run = Runtime.runPromise(runtime)
  const config = Runtime.runSync(runtime)(AppConfig)
  const publicUrl = Runtime.runSync(runtime)(PublicUrl)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)
  /** A signed Twilio callback about a call callgate placed: 401 (or 429) unsigned, 400 malformed, else 204 once handled. */
  const callback = <F>(
    path: string,
    what: string,
    schema: Schema.Schema<F, any>,
    handle: (calls: OutboundCalls, sessionId: string, form: F) => Effect.Effect<void>
  ) =>
    app.post(path, { bodyLimit: config.carrierWebhookBodyLimitBytes }, async (request, reply) => {
      const params = formParams(request.body)
      if (!verifyTwilioWebhook({ publicUrl: publicUrl.current(), twilioAuthToken: config.twilioAuthToken }, request.url, request.headers, params)) {
        // Past AUTH_FAILURES_PER_MINUTE a bad signature is answered 429, unlogged; a signed callback always goes through.
        const wait = throttle.refused(request.ip)
        if (wait !== undefined) return reply.code(429).header("retry-after", String(wait)).send()
        await run(Effect.logWarning(`twilio ${what} refused: bad X-Twilio-Signature`))
        return reply.code(401).send()
      }
      const query = Schema.decodeUnknownEither(StatusQuery)(request.query)
      const form = Schema.decodeUnknownEither(schema)(params)
      if (Either.isLeft(query) || Either.isLeft(form)) return reply.code(400).send()
      await run(
        Effect.flatMap(OutboundCalls, (calls) => handle(calls, query.right.sessionId, form.right)).pipe(
          Effect.catchAllCause((cause) => Effect.logError(`twilio ${what} failed`, cause))
        )
      )
      return reply.code(204).send()
    })
  callback(EntryPaths.twilioStatus, "status callback", StatusForm, (calls, sessionId, form) => calls.twilioStatus(sessionId, form.CallSid, form.CallStatus))
  // The asynchronous answering-machine verdict (AsyncAmdStatusCallback) of a call placed with machineDetection.
  callback(EntryPaths.twilioAmd, "AMD callback", AmdForm, (calls, sessionId, form) => calls.twilioAmd(sessionId, form.CallSid, form.AnsweredBy))
}
