import { Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { HttpApp } from "./HttpApp.js"

/** Listens on HOST:PORT for the lifetime of the layer; HttpApp's finalizer closes the server. */
export const HttpServerLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const { app } = yield* HttpApp
    const config = yield* AppConfig
    const address = yield* Effect.promise(() => app.listen({ port: config.port, host: config.host }))
    yield* Effect.logInfo("callgate listening", { address, publicUrl: config.publicUrl })
    yield* Effect.addFinalizer(() => Effect.logInfo("callgate stopping: closing the HTTP server"))
  })
)
