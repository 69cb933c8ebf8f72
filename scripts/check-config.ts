/**
 * Reads and validates the configuration exactly as the gateway does at start-up, without starting
 * anything: `npm start` runs it before a build so a configuration error shows in about a second.
 * Exit 0 when valid; otherwise one line on stderr naming the variable, exit 1.
 */
import { Cause, ConfigError, Effect, Exit, Option } from "effect"
import { AppConfig, describeConfigError } from "../src/config/AppConfig.js"

const exit = await Effect.runPromiseExit(Effect.provide(AppConfig, AppConfig.Default))
if (Exit.isFailure(exit)) {
  const failure = Cause.failureOption(exit.cause)
  process.stderr.write(
    `callgate: ${Option.isSome(failure) && ConfigError.isConfigError(failure.value) ? describeConfigError(failure.value) : Cause.pretty(exit.cause)}\n`
  )
  process.exit(1)
}
