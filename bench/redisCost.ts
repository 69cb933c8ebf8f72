/**
 * What one Redis carries (docs/scaling.md, "Sizing Redis"): one callgate on a redis-server of its
 * own, with the carrier and agent simulators of the relay measurement (Twilio calls, dial-in
 * agents that answer every turn) and an HTTPS receiver for session.ended, so every call costs
 * what it costs in production: placement, token, session record, turns, end, outbox, delivery.
 * Redis's own counters are read before and after each phase: `INFO commandstats` (every command
 * Redis ran, those inside Lua scripts included, by name) and `INFO cpu` (used_cpu_sys +
 * used_cpu_user of the redis-server process).
 *
 * - idle: no call, for `idleSeconds`, first with the warm-up's 5 agent sockets, then with the
 *   pool the calls need (`steadyCalls` + 2): what the instance costs Redis by itself (registry
 *   refresh, health PINGs, the delivery worker) and what each idle dial-in agent socket adds (the
 *   registry republishes every idle socket), per second. Subtracted below, by the idle sockets.
 * - steady: `steadyCalls` calls up and talking, measured over `steadySeconds`: per call-second.
 * - set-ups: `setups` calls, in batches of `steadyCalls`, placed (at `perSecond`) and hung up at
 *   once, until every session is ended, its session.ended delivered and its agent socket
 *   reopened: per call set-up (and ending). The calls were up for a few seconds meanwhile: those
 *   call-seconds, at the steady phase's rate, are subtracted with the idle costs.
 * - with `replica`: a replica is attached (REDIS_WAIT_REPLICAS=auto now waits for it on the
 *   writes whose loss loses data), then idle and set-ups again: what a replica adds on the primary.
 */
import { readFileSync } from "node:fs"
import { createServer } from "node:https"
import { fileURLToPath } from "node:url"
import { Redis } from "ioredis"
import { sleep, startRedis } from "./benchProcess.js"
import { RelayRig, type RelayLoadOptions, rigSystemOf } from "./relayLoad.js"
import { createBenchEnvironment, startGateway } from "./systemUnderTest.js"

export interface RedisCostOptions {
  readonly setups: number
  readonly perSecond: number
  readonly steadyCalls: number
  readonly steadySeconds: number
  readonly idleSeconds: number
  /** Then attach a replica and measure the set-ups again: what REDIS_WAIT_REPLICAS=auto adds. */
  readonly replica?: boolean
  readonly build?: string | undefined
  readonly log?: (line: string) => void
}

/** Commands by name (`evalsha`, `hset`, `client|setname`) per unit, largest first. */
export type CommandRates = ReadonlyArray<{ readonly command: string; readonly perUnit: number }>

export interface RedisCostFigures {
  readonly redisVersion: string
  /** The instance's own cost with no call and no idle agent socket, per second. */
  readonly idle: IdleFigures
  /** What one idle dial-in agent socket adds a second (the registry republishes every idle socket), measured with `pool` sockets. */
  readonly idleAgentSocket: { readonly pool: number; readonly commandsPerSecond: number; readonly cpuMsPerSecond: number }
  readonly steady: {
    readonly calls: number
    readonly seconds: number
    /** Every command Redis ran (inside scripts too) per second of one call. */
    readonly commandsPerCallSecond: number
    /** Script runs (EVALSHA/EVAL) per call-second: each is one round trip for several of the commands above. */
    readonly scriptsPerCallSecond: number
    readonly cpuMsPerCallSecond: number
    /**
     * The same from the commands, at the set-up phase's Redis CPU per command: a cross-check where
     * the calls' own CPU is lost in the idle instance's (a few ms a second, which varies on a busy machine).
     */
    readonly cpuMsPerCallSecondFromCommands: number
    readonly byCommand: CommandRates
  }
  readonly setups: SetupFigures
  /**
   * The set-ups again with a replica attached (REDIS_WAIT_REPLICAS=auto waits for it): the
   * primary's commands and CPU, its replication stream included; idle measured again with it.
   */
  readonly withReplica?: { readonly idle: IdleFigures; readonly setups: SetupFigures }
  /**
   * Arithmetic on one fully busy Redis core (1000 ms of CPU per second), before any headroom;
   * calls at the larger of the two per call-second CPU figures.
   */
  readonly oneCore: { readonly setupsPerSecond: number; readonly concurrentCalls: number }
}

export interface IdleFigures {
  readonly seconds: number
  readonly commandsPerSecond: number
  readonly cpuMsPerSecond: number
}

export interface SetupFigures {
  readonly calls: number
    readonly failed: number
    readonly seconds: number
    /** Call-seconds the set-up phase's calls were up (estimated from the ramp), whose steady cost is subtracted. */
    readonly callSeconds: number
    readonly commandsPerSetup: number
    readonly scriptsPerSetup: number
    readonly cpuMsPerSetup: number
    readonly byCommand: CommandRates
    readonly delivered: number
}

interface Snapshot {
  readonly at: number
  readonly commands: ReadonlyMap<string, number>
  readonly cpuSeconds: number
}

const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits

/** `cmdstat_hset:calls=12,usec=...` lines, by command; our own INFO left out. */
export const parseCommandStats = (text: string): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== "info") counts.set(match[1]!, Number(match[2]))
  }
  return counts
}

export const parseCpuSeconds = (text: string): number => {
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, "m").exec(text)?.[1] ?? Number.NaN)
  return field("used_cpu_sys") + field("used_cpu_user")
}

const snapshot = async (redis: Redis): Promise<Snapshot> => {
  const [commands, cpu] = await Promise.all([redis.info("commandstats"), redis.info("cpu")])
  return { at: performance.now(), commands: parseCommandStats(commands), cpuSeconds: parseCpuSeconds(cpu) }
}

interface Delta {
  readonly seconds: number
  readonly commands: Map<string, number>
  readonly cpuMs: number
}

const between = (before: Snapshot, after: Snapshot): Delta => {
  const commands = new Map<string, number>()
  for (const [command, calls] of after.commands) {
    const delta = calls - (before.commands.get(command) ?? 0)
    if (delta > 0) commands.set(command, delta)
  }
  return { seconds: (after.at - before.at) / 1000, commands, cpuMs: (after.cpuSeconds - before.cpuSeconds) * 1000 }
}

/** `delta` less `rate` (per second, per command) times `seconds`, divided by `units`. */
const per = (delta: Delta, units: number, subtract: ReadonlyArray<{ readonly rate: Delta; readonly times: number }> = []) => {
  const names = new Set([...delta.commands.keys()])
  const byCommand = new Map<string, number>()
  for (const name of names) {
    const less = subtract.reduce((sum, { rate, times }) => sum + (rate.commands.get(name) ?? 0) * times, 0)
    byCommand.set(name, Math.max(0, ((delta.commands.get(name) ?? 0) - less) / units))
  }
  const cpuMs = Math.max(0, (delta.cpuMs - subtract.reduce((sum, { rate, times }) => sum + rate.cpuMs * times, 0)) / units)
  return { byCommand, cpuMs }
}

/** Per second of `delta`. */
const rate = (delta: Delta): Delta => ({
  seconds: 1,
  commands: new Map([...delta.commands].map(([name, calls]) => [name, calls / delta.seconds])),
  cpuMs: delta.cpuMs / delta.seconds
})

const total = (byCommand: ReadonlyMap<string, number>) => [...byCommand.values()].reduce((a, b) => a + b, 0)
const scripts = (byCommand: ReadonlyMap<string, number>) =>
  [...byCommand].filter(([name]) => /^(evalsha|eval|evalsha_ro|eval_ro|fcall)$/.test(name)).reduce((sum, [, n]) => sum + n, 0)
const listed = (byCommand: ReadonlyMap<string, number>, digits: number): CommandRates =>
  [...byCommand]
    .map(([command, perUnit]) => ({ command, perUnit: round(perUnit, digits) }))
    .filter(({ perUnit }) => perUnit > 0)
    .sort((a, b) => b.perUnit - a.perUnit)

const idleFigures = (perSecond: Delta, seconds: number): IdleFigures => ({
  seconds,
  commandsPerSecond: round(total(perSecond.commands), 1),
  cpuMsPerSecond: round(perSecond.cpuMs, 3)
})

/** `a - b`, command by command (never below 0), and CPU. */
const difference = (a: Delta, b: Delta): Delta => ({
  seconds: 1,
  commands: new Map([...a.commands].map(([name, n]) => [name, Math.max(0, n - (b.commands.get(name) ?? 0))])),
  cpuMs: Math.max(0, a.cpuMs - b.cpuMs)
})

const scaled = (a: Delta, by: number): Delta => ({
  seconds: 1,
  commands: new Map([...a.commands].map(([name, n]) => [name, n * by])),
  cpuMs: a.cpuMs * by
})

/** The agent sockets RelayRig.warmUp opens. */
const WARM_UP_SOCKETS = 5

/** An HTTPS receiver for session.ended (the test CA's certificate), counting what arrives. */
const startReceiver = async () => {
  const tls = (name: string) => readFileSync(fileURLToPath(new URL(`../test/fixtures/tls/${name}`, import.meta.url)))
  let received = 0
  const server = createServer({ key: tls("server-key.pem"), cert: tls("server.pem") }, (req, res) => {
    req.resume()
    req.on("end", () => {
      received++
      res.writeHead(200).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `https://127.0.0.1:${(server.address() as { port: number }).port}/events`,
    caFile: fileURLToPath(new URL("../test/fixtures/tls/ca.pem", import.meta.url)),
    received: () => received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

const waitUntil = async (check: () => Promise<boolean> | boolean, what: string, timeoutMs = 120_000) => {
  const deadline = performance.now() + timeoutMs
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

export const runRedisCostBench = async (options: RedisCostOptions): Promise<RedisCostFigures> => {
  const log = options.log ?? (() => {})
  const redisServer = await startRedis()
  const redis = new Redis(redisServer.url, { lazyConnect: false, maxRetriesPerRequest: 1 })
  const receiver = await startReceiver()
  const spareAgents = 2
  let rig: RelayRig | undefined
  let replica: Awaited<ReturnType<typeof startRedis>> | undefined
  try {
    const gateway = await startGateway({
      build: options.build,
      inspect: true,
      env: {
        REDIS_URL: redisServer.url,
        SECRETS_KEY: "ab".repeat(32),
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
        WEBHOOK_CA_FILE: receiver.caFile,
        LOG_LEVEL: "warn"
      }
    })
    const agentId = "bench_agent"
    const { environmentId, apiKey } = await createBenchEnvironment(gateway, agentId, { webhookUrl: receiver.url }).catch(async (error) => {
      await gateway.stop()
      throw error
    })
    rig = await RelayRig.around("redis", rigSystemOf("callgate", gateway), {
      carrierTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId },
      agentTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey },
      spareAgents
    })
    const relayOptions: RelayLoadOptions = {
      systems: ["gateway"],
      steps: [options.steadyCalls],
      stepSeconds: options.steadySeconds,
      rampPerSecond: options.perSecond,
      build: options.build,
      log
    }
    await rig.warmUp(relayOptions)
    const redisVersion = /^redis_version:(\S+)/m.exec(await redis.info("server"))?.[1] ?? "unknown"
    /**
     * Every call of a phase ended: at least `expected` session.ended arrived (the calls that
     * opened), then none for 2 s (a set-up that failed on a busy machine may have ended a session
     * too), and `sockets` agent sockets are open and idle again. Nothing here asks callgate (its
     * /metrics reads Redis): the phase's counts are the calls' alone.
     */
    const endsDelivered = async (expected: number, sockets: number) => {
      await waitUntil(() => receiver.received() >= expected, `${expected} session.ended deliveries (${receiver.received()} arrived)`)
      let seen = receiver.received()
      let quietSince = performance.now()
      await waitUntil(() => {
        if (receiver.received() !== seen) [seen, quietSince] = [receiver.received(), performance.now()]
        return performance.now() - quietSince >= 2000
      }, "the deliveries to stop")
      await rig!.offerAgents(sockets)
    }

    /** What the instance costs Redis with no call, per second (its idle agent sockets are published every refresh). */
    const measureIdle = async () => {
      // A registry refresh (every 2 s) publishes the sockets as they are now.
      await sleep(2500)
      log(`redis: idle ${options.idleSeconds} s`)
      const before = await snapshot(redis)
      await sleep(options.idleSeconds * 1000)
      return rate(between(before, await snapshot(redis)))
    }
    // Idle with the warm-up's few agent sockets, then with the pool the calls need: the instance's
    // own cost, and each idle agent socket's (the registry republishes every idle socket).
    const few = WARM_UP_SOCKETS
    await endsDelivered(receiver.received(), few)
    const idleFew = await measureIdle()
    const pool = options.steadyCalls + spareAgents
    await rig.offerAgents(pool)
    const idlePool = await measureIdle()
    const perSocket = scaled(difference(idlePool, idleFew), 1 / (pool - few))
    const instance = difference(idleFew, scaled(perSocket, few))

    // Steady: calls up and talking, per call-second; the pool's other sockets idle meanwhile.
    log(`redis: ${options.steadyCalls} calls for ${options.steadySeconds} s`)
    const deliveredBefore = receiver.received()
    const steadyGrown = await rig.load(options.steadyCalls, { ...relayOptions, settleSeconds: 3 })
    const steadyBefore = await snapshot(redis)
    await sleep(options.steadySeconds * 1000)
    const steadyDelta = between(steadyBefore, await snapshot(redis))
    await rig.unload()
    await endsDelivered(deliveredBefore + steadyGrown.open, pool)
    const steadyPer = per(steadyDelta, Math.max(1, steadyGrown.open) * steadyDelta.seconds, [
      { rate: instance, times: steadyDelta.seconds },
      { rate: perSocket, times: Math.max(0, pool - steadyGrown.open) * steadyDelta.seconds }
    ])
    const perCallSecond: Delta = { seconds: 1, commands: steadyPer.byCommand, cpuMs: steadyPer.cpuMs }

    /**
     * Set-ups in batches of the pool's size: placed, hung up at once, ended and delivered, agent
     * sockets back; less the instance's own cost, the idle sockets' and the calls' call-seconds.
     */
    const measureSetups = async (instanceRate: Delta) => {
      log(`redis: ${options.setups} call set-ups at ${options.perSecond} a second, ${options.steadyCalls} at a time`)
      const before = await snapshot(redis)
      const deliveredAtStart = receiver.received()
      let open = 0
      let failed = 0
      let callSeconds = 0
      for (let placed = 0; placed < options.setups; placed += options.steadyCalls) {
        const batch = Math.min(options.steadyCalls, options.setups - placed)
        const delivered = receiver.received()
        const placing = performance.now()
        const grown = await rig!.load(batch, { ...relayOptions, settleSeconds: 0.5 })
        const placedSeconds = (performance.now() - placing) / 1000
        await rig!.unload()
        // Placed evenly over the ramp and all hung up after it: half the ramp each, on average.
        callSeconds += grown.open * ((placedSeconds - 0.5) * 0.5 + 0.5)
        open += grown.open
        failed += grown.failed
        await endsDelivered(delivered + grown.open, pool)
      }
      const delta = between(before, await snapshot(redis))
      const each = per(delta, Math.max(1, open), [
        { rate: instanceRate, times: delta.seconds },
        { rate: perSocket, times: Math.max(0, pool * delta.seconds - callSeconds) },
        { rate: perCallSecond, times: callSeconds }
      ])
      const figures: SetupFigures = {
        calls: open,
        failed,
        seconds: round(delta.seconds, 1),
        callSeconds: round(callSeconds),
        commandsPerSetup: round(total(each.byCommand), 1),
        scriptsPerSetup: round(scripts(each.byCommand), 1),
        cpuMsPerSetup: round(each.cpuMs, 3),
        byCommand: listed(each.byCommand, 2),
        delivered: receiver.received() - deliveredAtStart
      }
      return { figures, cpuMs: each.cpuMs, each }
    }
    const setups = await measureSetups(instance)

    let withReplica: RedisCostFigures["withReplica"]
    if (options.replica === true) {
      replica = await startRedis({ replicaOf: redisServer.port })
      const replicaClient = new Redis(replica.url, { maxRetriesPerRequest: 1 })
      await waitUntil(async () => /master_link_status:up/.test(await replicaClient.info("replication")), "the replica in sync", 60_000)
      replicaClient.disconnect()
      // `auto` re-reads ROLE at most once a second: from now on the protected writes wait for the replica.
      const idleWith = await measureIdle()
      const instanceWith = difference(idleWith, scaled(perSocket, pool))
      const again = await measureSetups(instanceWith)
      withReplica = { idle: idleFigures(instanceWith, options.idleSeconds), setups: again.figures }
    }

    const perCommandMs = setups.cpuMs / Math.max(1e-9, total(setups.each.byCommand))
    const fromCommands = total(steadyPer.byCommand) * perCommandMs
    // The larger of the two: the rule built on it errs on the safe side.
    const callSecondMs = Math.max(steadyPer.cpuMs, fromCommands)
    const figures: RedisCostFigures = {
      redisVersion,
      idle: idleFigures(instance, options.idleSeconds),
      idleAgentSocket: {
        pool,
        commandsPerSecond: round(total(perSocket.commands), 3),
        cpuMsPerSecond: round(perSocket.cpuMs, 4)
      },
      steady: {
        calls: steadyGrown.open,
        seconds: round(steadyDelta.seconds, 1),
        commandsPerCallSecond: round(total(steadyPer.byCommand), 3),
        scriptsPerCallSecond: round(scripts(steadyPer.byCommand), 3),
        cpuMsPerCallSecond: round(steadyPer.cpuMs, 4),
        cpuMsPerCallSecondFromCommands: round(fromCommands, 4),
        byCommand: listed(steadyPer.byCommand, 3)
      },
      setups: setups.figures,
      ...(withReplica !== undefined ? { withReplica } : {}),
      oneCore: {
        setupsPerSecond: Math.round(1000 / Math.max(setups.cpuMs, 1e-6)),
        concurrentCalls: Math.round(1000 / Math.max(callSecondMs, 1e-6))
      }
    }
    log(
      `redis: per call set-up ${figures.setups.commandsPerSetup} commands (${figures.setups.scriptsPerSetup} scripts), ${figures.setups.cpuMsPerSetup} ms Redis CPU; ` +
        `per call-second ${figures.steady.commandsPerCallSecond} commands, ${figures.steady.cpuMsPerCallSecond} ms; idle ${figures.idle.commandsPerSecond} commands/s, ${figures.idle.cpuMsPerSecond} ms/s` +
        (withReplica !== undefined
          ? `; with a replica: per call set-up ${withReplica.setups.commandsPerSetup} commands, ${withReplica.setups.cpuMsPerSetup} ms, idle ${withReplica.idle.cpuMsPerSecond} ms/s`
          : "")
    )
    return figures
  } finally {
    await rig?.unload().catch(() => undefined)
    await rig?.stop().catch(() => undefined)
    redis.disconnect()
    replica?.stop()
    redisServer.stop()
    await receiver.close()
  }
}
