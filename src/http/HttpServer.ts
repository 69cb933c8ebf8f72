import type { AddressInfo } from "node:net"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { PublicUrl } from "../config/PublicUrl.js"
import { startupWarnings } from "../config/StartupWarnings.js"
import { HttpApp } from "./HttpApp.js"

/**
 * Listens on HOST:PORT for the lifetime of the layer; HttpApp's finalizer closes the server. The
 * start-up log names the address actually listened on and the PUBLIC_URL carriers are told
 * (docs/api.md, "Configuration").
 */
export const HttpServerLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const { app } = yield* HttpApp
    const config = yield* AppConfig
    const publicUrl = yield* PublicUrl
    yield* Effect.promise(() => app.listen({ port: config.port, host: config.host }))
    const bound = app.server.address() as AddressInfo
    const report = publicUrl.listeningOn({ host: bound.address, port: bound.port })
    const address = `${bound.family === "IPv6" ? `[${bound.address}]` : bound.address}:${bound.port}`
    switch (report._tag) {
      case "Derived":
        yield* Effect.logInfo("callgate listening", { address, publicUrl: report.publicUrl })
        yield* Effect.logInfo(
          `PUBLIC_URL is not set: stream URLs use ${report.publicUrl}, derived from the listening address ${report.listening}; set PUBLIC_URL to the address carriers reach`
        )
        break
      case "OtherPort":
        yield* Effect.logInfo("callgate listening", { address, publicUrl: report.publicUrl })
        yield* Effect.logWarning(
          `PUBLIC_URL ${report.publicUrl} names this host on another port than the one callgate listens on (${report.listening}): carriers will be sent elsewhere unless a proxy forwards that port here`
        )
        break
      case "Configured":
        yield* Effect.logInfo("callgate listening", { address, publicUrl: report.publicUrl })
    }
    // Settings that validate but leave the deployment open, and misspelt variables (docs/security.md).
    for (const warning of startupWarnings(config, bound.address, process.env)) yield* Effect.logWarning(warning)
    yield* Effect.addFinalizer(() => Effect.logInfo("callgate stopping: closing the HTTP server"))
  })
)
