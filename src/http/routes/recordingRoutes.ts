import { Effect } from "effect"
import { Recordings } from "../../recording/Recordings.js"
import { SessionParams } from "../../sessions/SessionSchema.js"
import { apiRoute, type RawResponse } from "../ApiRoute.js"

const path = "/v1/agents/:agentId/sessions/:sessionId/recording"

const headerOf = (value: string | ReadonlyArray<string> | undefined) => (typeof value === "string" ? value : undefined)

/** A call's recording (docs/recording.md, "Access"): the WAV, whole or by Range, and its deletion. */
export const recordingRoutes = [
  apiRoute({
    method: "GET",
    path,
    summary: "Download the call's recording (two-channel WAV: caller left, agent right); Range requests answer 206",
    tag: "sessions",
    auth: "agent",
    params: SessionParams,
    produces: { contentType: "audio/wav", description: "The recording, or the requested byte range of it" },
    handler: ({ params, headers }) =>
      Effect.flatMap(Recordings, (recordings) => recordings.read(params.agentId, params.sessionId, headerOf(headers.range))).pipe(
        Effect.map((download): RawResponse => {
          const common = { "content-type": "audio/wav", "accept-ranges": "bytes", "cache-control": "private, no-store" }
          if (download.range === undefined) {
            return { status: 200, headers: { ...common, "content-length": String(download.size) }, body: download.body }
          }
          const { start, end } = download.range
          return {
            status: 206,
            headers: { ...common, "content-length": String(end - start + 1), "content-range": `bytes ${start}-${end}/${download.size}` },
            body: download.body
          }
        }),
        Effect.catchTag("RangeNotSatisfiable", (error) =>
          Effect.succeed<RawResponse>({ status: 416, headers: { "content-range": `bytes */${error.size}`, "accept-ranges": "bytes" }, body: undefined })
        )
      )
  }),
  apiRoute({
    method: "DELETE",
    path,
    summary: "Delete the call's recording",
    tag: "sessions",
    auth: "agent",
    params: SessionParams,
    successStatus: 204,
    handler: ({ params }) => Effect.flatMap(Recordings, (recordings) => recordings.remove(params.agentId, params.sessionId))
  })
]
