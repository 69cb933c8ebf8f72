import { runMain } from "@effect/platform-node/NodeRuntime"
import { Cause, ConfigError, Effect, Layer, Option } from "effect"
import { describeConfigError } from "./config/AppConfig.js"
import { appLayer } from "./layers.js"

/**
 * Runs the app until SIGINT/SIGTERM (NodeRuntime.runMain interrupts it then, so every scoped
 * resource (HTTP server, live calls, Redis) closes in reverse order of acquisition, and exits).
 * Bad configuration is one line on stderr and exit code 1; another failure to start is reported
 * in full, also with exit code 1.
 */
const program = Layer.launch(appLayer).pipe(
  Effect.tapErrorCause((cause) =>
    Effect.sync(() => {
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure) && ConfigError.isConfigError(failure.value)) {
        process.stderr.write(`callgate: ${describeConfigError(failure.value)}\n`)
      } else if (!Cause.isInterruptedOnly(cause)) {
        process.stderr.write(`callgate: failed to start: ${Cause.pretty(cause)}\n`)
      }
    })
  )
)

runMain(program, { disableErrorReporting: true, disablePrettyLogger: true })
