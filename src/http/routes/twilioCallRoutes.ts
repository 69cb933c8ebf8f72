import { Cause, Effect, Exit, Option, Runtime, Schema } from "effect"
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { CallControl, type CallControlRequest } from "../../calls/CallControl.js"
import { CallUpdateForm, TWILIO_API_VERSION, TwilioErrors, TwilioRestError } from "../../calls/TwilioCallWire.js"
import { AppConfig } from "../../config/AppConfig.js"

export const TWILIO_CALL_PATH = "/2010-04-01/Accounts/:accountSid/Calls/:callFile"

/** `Authorization: Basic base64(user:password)`, as the Twilio SDKs send it. */
const basicAuth = (request: FastifyRequest): { username?: string; password?: string } => {
  const header = request.headers.authorization
  const match = typeof header === "string" ? /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header) : null
  if (match === null) return {}
  const decoded = Buffer.from(match[1]!, "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  return colon < 0 ? {} : { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) }
}

const decodeForm = Schema.decodeUnknownOption(CallUpdateForm)

/** Twilio's API takes form bodies only (the SDKs send nothing else). */
const isForm = (contentType: string) => /^application\/x-www-form-urlencoded\s*(;|$)/i.test(contentType)

const pathOf = (request: FastifyRequest) => request.url.split("?")[0]!

/** Whether `url` is the Twilio-compatible API's, whose every answer is Twilio's JSON. */
export const isTwilioApiUrl = (url: string) => url === `/${TWILIO_API_VERSION}` || url.startsWith(`/${TWILIO_API_VERSION}/`) || url.startsWith(`/${TWILIO_API_VERSION}?`)

/** Sends a Twilio error JSON with its HTTP status. */
export const sendTwilioError = (reply: FastifyReply, error: TwilioRestError) =>
  reply.code(error.status).type("application/json; charset=utf-8").send(error.toBody())

/** What the HTTP edge refused before the route ran (body limit, charset, ...), as Twilio's error JSON. */
const twilioErrorOf = (error: FastifyError, request: FastifyRequest, bodyLimit: number): TwilioRestError => {
  switch (error.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return TwilioErrors.tooLarge(bodyLimit)
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
    case "CHARSET_NOT_UTF8":
      return TwilioErrors.unsupportedMediaType()
    default:
      if (error.statusCode === 404) return TwilioErrors.notFound(pathOf(request))
      if (error.statusCode === 429) return TwilioErrors.tooManyRequests()
      if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
        return TwilioErrors.badRequest("the request could not be read")
      }
      return TwilioErrors.internal()
  }
}

/**
 * The Twilio-compatible call-control API (docs/calls.md, "Controlling a call from the agent"):
 * `GET|POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` with HTTP basic auth. A thin
 * adapter over CallControl; answers are Twilio's Call resource JSON or Twilio's error JSON. Every
 * answer under `/2010-04-01` is Twilio's shape, refusals of the HTTP edge included (an unknown
 * path 404 20404, a body over HTTP_BODY_LIMIT_BYTES 413 20413, not a UTF-8 form 415 20415), so a
 * Twilio SDK raises its usual exception for each.
 */
export const registerTwilioCallRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<CallControl | AuthThrottle | AppConfig>) => {
  const run = Runtime.runPromiseExit(runtime)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)
  const config = Runtime.runSync(runtime)(AppConfig)


  const answer = async (reply: FastifyReply, effect: Effect.Effect<unknown, TwilioRestError, CallControl>) => {
    const exit = await run(effect)
    if (Exit.isSuccess(exit)) return reply.code(200).send(exit.value)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure) && failure.value instanceof TwilioRestError) {
      // A refused key counts against the client's address (docs/security.md, "Authentication throttling").
      // Past AUTH_FAILURES_PER_MINUTE it is answered 429; valid credentials always go through.
      if (failure.value.status === 401) {
        const wait = throttle.refused(reply.request.ip)
        if (wait !== undefined) return reply.code(429).header("retry-after", String(wait)).send(TwilioErrors.tooManyRequests().toBody())
      }
      return sendTwilioError(reply, failure.value)
    }
    await run(Effect.logError("call-control request failed", exit.cause))
    return sendTwilioError(reply, TwilioErrors.internal())
  }

  const requestOf = (request: FastifyRequest): Option.Option<CallControlRequest> => {
    const { accountSid, callFile } = request.params as { accountSid: string; callFile: string }
    if (!callFile.endsWith(".json")) return Option.none()
    return Option.some({ accountSid, callSid: callFile.slice(0, -".json".length), ...basicAuth(request) } as CallControlRequest)
  }

  // A scope of its own: its error and not-found handlers answer Twilio's JSON, not /v1's envelope.
  void app.register(
    async (scope) => {
      scope.setErrorHandler((error: FastifyError, request, reply) => {
        const twilioError = twilioErrorOf(error, request, config.httpBodyLimitBytes)
        if (twilioError.status >= 500) void run(Effect.logError("call-control request failed", { url: pathOf(request) }, error))
        return sendTwilioError(reply, twilioError)
      })
      scope.setNotFoundHandler((request, reply) => sendTwilioError(reply, TwilioErrors.notFound(pathOf(request))))
      // Before the body is read: only forms are taken (an empty body needs no content type).
      scope.addHook("onRequest", (request, reply, done) => {
        const type = request.headers["content-type"]
        if (request.method === "POST" && type !== undefined && !isForm(type)) return void sendTwilioError(reply, TwilioErrors.unsupportedMediaType())
        done()
      })

      scope.route({
        method: ["GET", "POST"],
        url: TWILIO_CALL_PATH.slice(`/${TWILIO_API_VERSION}`.length),
        handler: (request, reply) => {
          const parsed = requestOf(request)
          if (Option.isNone(parsed)) return sendTwilioError(reply, TwilioErrors.notFound(pathOf(request)))
          if (request.method === "GET") return answer(reply, Effect.flatMap(CallControl, (control) => control.get(parsed.value)))
          const form = decodeForm(request.body ?? {})
          if (Option.isNone(form)) return answer(reply, Effect.fail(TwilioErrors.nothingToDo()))
          return answer(reply, Effect.flatMap(CallControl, (control) => control.update(parsed.value, form.value)))
        }
      })
    },
    { prefix: `/${TWILIO_API_VERSION}` }
  )
}
