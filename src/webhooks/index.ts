/**
 * `callgate/webhooks`: what a receiver of callgate's webhooks needs to check that a request came
 * from callgate. Depends on node:crypto only.
 *
 *     import { verifySignature } from "callgate/webhooks"
 *     const ok = verifySignature({
 *       secret: process.env.CALLGATE_WEBHOOK_SECRET!,
 *       signature: req.headers["x-service-signature"],
 *       timestamp: req.headers["x-service-timestamp"],
 *       rawBody // the exact bytes received, before JSON.parse
 *     })
 *     if (!ok) return res.writeHead(401).end()
 */
export {
  ATTEMPT_HEADER,
  DEFAULT_TOLERANCE_SECONDS,
  DELIVERY_ID_HEADER,
  type HeaderValue,
  type RawBody,
  SIGNATURE_HEADER,
  signPayload,
  TIMESTAMP_HEADER,
  type VerifyOptions,
  verifySignature
} from "./Signing.js"
export type { SessionEndedEvent } from "./SessionEndedEvent.js"
