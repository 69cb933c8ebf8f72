import { randomBytes } from "node:crypto"
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { hostname } from "node:os"
import { join } from "node:path"
import { DateTime, Effect, Option } from "effect"
import { AppConfig } from "./AppConfig.js"

const VALID = /^[A-Za-z0-9_.-]{1,64}$/

/** `<host name>-<6 random characters>`, the host name cut to what an instance id may hold. */
export const generateInstanceId = (host: string = hostname()): string => {
  const base = host.replace(/[^A-Za-z0-9_.-]/g, "-").slice(0, 50) || "callgate"
  return `${base}-${randomBytes(6).toString("base64url").replace(/[^A-Za-z0-9]/g, "x").slice(0, 6)}`
}

/**
 * Reads the id kept in `DATA_DIR/instance-id`, or generates one and keeps it there (written to a
 * temporary file and renamed, so a crash never leaves half an id).
 */
export const persistedInstanceId = (dataDir: string): string => {
  const file = join(dataDir, "instance-id")
  try {
    const kept = readFileSync(file, "utf8").trim()
    if (VALID.test(kept)) return kept
  } catch {
    // not generated yet
  }
  const id = generateInstanceId()
  mkdirSync(dataDir, { recursive: true })
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`
  writeFileSync(temporary, `${id}\n`)
  renameSync(temporary, file)
  // Two processes starting on one DATA_DIR at once: both keep whichever id was renamed last.
  return readFileSync(file, "utf8").trim()
}

/**
 * Who this process is in the store (docs/reliability.md, "Instance id and session ownership"): INSTANCE_ID, or (on Redis)
 * the id generated once and kept in DATA_DIR, so a restarted instance finds the sessions its
 * previous run owned; on the embedded store, a fresh id per run. `startedAt` is when this run began: sessions of this id created before it are the previous
 * run's.
 */
export class InstanceIdentity extends Effect.Service<InstanceIdentity>()("callgate/InstanceIdentity", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    // The embedded store does not outlive the process, so neither need its id.
    const instanceId = Option.isSome(config.instanceId)
      ? config.instanceId.value
      : Option.isNone(config.redisUrl)
        ? generateInstanceId()
        : yield* Effect.try(() => persistedInstanceId(config.dataDir)).pipe(
          Effect.orDieWith((cause) => new Error(`DATA_DIR: cannot keep the generated instance id in ${config.dataDir}: ${String(cause)}`))
        )
    // From the Clock (DateTime.now), like every time in src/ (docs/design.md, "One clock").
    return { instanceId, startedAt: DateTime.toDateUtc(yield* DateTime.now) } as const
  })
}) {}
