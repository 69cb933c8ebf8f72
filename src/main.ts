import { Cause, ConfigError, Effect, Exit, Fiber, Layer, Option } from "effect"
import { describeConfigError } from "./config/AppConfig.js"
import { appLayer } from "./layers.js"

/**
 * Runs the app until SIGINT/SIGTERM, then interrupts it so every scoped resource (HTTP server,
 * live calls, Redis) closes in reverse order of acquisition. Bad configuration is one line on
 * stderr and exit code 1.
 */
const runMain = <E>(program: Effect.Effect<never, E>) => {
  const fiber = Effect.runFork(program)
  const stop = () => Effect.runFork(Fiber.interrupt(fiber))
  process.once("SIGINT", stop)
  process.once("SIGTERM", stop)
  fiber.addObserver((exit) => {
    if (Exit.isSuccess(exit) || Cause.isInterruptedOnly(exit.cause)) process.exit(0)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure) && ConfigError.isConfigError(failure.value)) {
      process.stderr.write(`callgate: ${describeConfigError(failure.value)}\n`)
    } else {
      process.stderr.write(`callgate: failed to start: ${Cause.pretty(exit.cause)}\n`)
    }
    process.exit(1)
  })
}

runMain(Layer.launch(appLayer))
