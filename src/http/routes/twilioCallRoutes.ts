import { Cause, Effect, Exit, Option, Runtime, Schema } from "effect"
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { CallControl, type CallControlRequest } from "../../calls/CallControl.js"
import { CallUpdateForm, TwilioErrors, TwilioRestError } from "../../calls/TwilioCallWire.js"

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

/**
 * The Twilio-compatible call-control API (docs/calls.md, "Controlling a call from the agent"):
 * `GET|POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` with HTTP basic auth. A thin
 * adapter over CallControl; answers are Twilio's Call resource JSON or Twilio's error JSON.
 */
export const registerTwilioCallRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<CallControl | AuthThrottle>) => {
  const run = Runtime.runPromiseExit(runtime)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)

  const answer = async (reply: FastifyReply, effect: Effect.Effect<unknown, TwilioRestError, CallControl>) => {
    const exit = await run(effect)
    if (Exit.isSuccess(exit)) return reply.code(200).send(exit.value)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure) && failure.value instanceof TwilioRestError) {
      // A refused key counts against the client's address (docs/security.md, "Authentication throttling").
      if (failure.value.status === 401) throttle.failed(reply.request.ip)
      return reply.code(failure.value.status).send(failure.value.toBody())
    }
    await run(Effect.logError("call-control request failed", exit.cause))
    const internal = new TwilioRestError({ status: 500, code: 20500, message: "Internal Server Error" })
    return reply.code(500).send(internal.toBody())
  }

  const requestOf = (request: FastifyRequest): Option.Option<CallControlRequest> => {
    const { accountSid, callFile } = request.params as { accountSid: string; callFile: string }
    if (!callFile.endsWith(".json")) return Option.none()
    return Option.some({ accountSid, callSid: callFile.slice(0, -".json".length), ...basicAuth(request) } as CallControlRequest)
  }

  app.route({
    method: ["GET", "POST"],
    url: TWILIO_CALL_PATH,
    handler: (request, reply) => {
      const wait = throttle.retryAfter(request.ip)
      if (wait !== undefined) {
        return reply.code(429).header("retry-after", String(wait)).send(new TwilioRestError({ status: 429, code: 20429, message: "Too Many Requests" }).toBody())
      }
      const parsed = requestOf(request)
      if (Option.isNone(parsed)) return answer(reply, Effect.fail(TwilioErrors.notFound(request.url.split("?")[0]!)))
      if (request.method === "GET") return answer(reply, Effect.flatMap(CallControl, (control) => control.get(parsed.value)))
      const form = decodeForm(request.body ?? {})
      if (Option.isNone(form)) return answer(reply, Effect.fail(TwilioErrors.nothingToDo()))
      return answer(reply, Effect.flatMap(CallControl, (control) => control.update(parsed.value, form.value)))
    }
  })
}
