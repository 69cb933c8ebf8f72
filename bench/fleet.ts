/**
 * The fleet figure (docs/benchmarks.md, "The fleet figure"): how well callgate scales across
 * instances. One callgate instance, then two, each pinned to its own core (`taskset -c`), on one
 * private redis-server, behind Debian's nginx running deploy/nginx/callgate.conf (bench/nginx.ts).
 * Agents dial in through nginx's one address (nginx spreads them); the load generator places
 * calls through it as a carrier does (voice webhook, then the media stream at the instance the
 * TwiML names). Each fleet is ramped like the relay (relayLoad.ts: same simulators, same pass
 * criterion); the two-instance grid lies around twice what one instance sustained.
 *
 *   efficiency = calls sustained by 2 instances / (2 x calls sustained by 1 instance)
 *
 * held against 0.9 unless the load generator was the limit of either ramp (fleetScaling.ts).
 */
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { allowedCpus, childPidsOf, freePort, requireTaskset, sleep, startRedis } from "./benchProcess.js"
import {
  coreLayout,
  type CoreLayout,
  fleetGrid,
  type FleetVerdict,
  fleetVerdict,
  type Limiter,
  limiterOf,
  scalingEfficiency
} from "./fleetScaling.js"
import { type Nginx, startFleetNginx } from "./nginx.js"
import { type RelayLoadOptions, RelayRig, type RemeasureBudget, rigSystemOfMany, type StepFigures, summarize, type SystemFigures, takeStep } from "./relayLoad.js"
import { adminApi, createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"

/** The larger fleet. */
const INSTANCES = 2

export interface FleetBenchOptions {
  /** The one-instance grid (concurrent calls). */
  readonly oneInstanceSteps: ReadonlyArray<number>
  /** The two-instance grid, as multiples of twice what one instance sustained. */
  readonly fleetFactors: ReadonlyArray<number>
  readonly stepSeconds: number
  readonly settleSeconds?: number
  readonly fullRamp?: boolean
  /** The compiled tree (build.ts); default: the sources through tsx. */
  readonly build?: string
  readonly log?: (line: string) => void
}

export interface FleetMeasurement {
  readonly instances: number
  /** The core each instance ran on. */
  readonly instanceCores: ReadonlyArray<number>
  /** The ramp, its steps as the relay's (system CPU: the instances' sum; `processes`: each instance, nginx, Redis). */
  readonly ramp: SystemFigures | { readonly error: string }
  readonly limiter: Limiter
}

export interface FleetBenchFigures {
  readonly layout: Omit<CoreLayout, "instanceCores"> & { readonly cores: number; readonly nginxWorkers: number | "auto" }
  readonly one: FleetMeasurement
  readonly two: FleetMeasurement
  /** Calls sustained by one instance (c1) and by two (c2). */
  readonly c1: number | null
  readonly c2: number | null
  /** c2 / (2 x c1). */
  readonly efficiency: number | null
  readonly verdict: FleetVerdict
}

const isRamp = (ramp: FleetMeasurement["ramp"]): ramp is SystemFigures => !("error" in ramp)

const instanceId = (i: number) => `callgate-${i + 1}`

interface Fleet {
  readonly nginx: Nginx
  readonly gateways: ReadonlyArray<RunningGateway>
  readonly adminKey: string
  readonly stop: () => Promise<void>
}

/** `count` instances on `redisUrl` behind nginx, each on its core; resolves once the registry lists them all. */
const startFleet = async (count: number, layout: CoreLayout, nginxWorkers: number | "auto", redisUrl: string, build: string | undefined): Promise<Fleet> => {
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()))
  const nginx = await startFleetNginx(ports, { workerProcesses: nginxWorkers, ...(layout.generatorCpus ? { cpus: layout.generatorCpus } : {}) })
  // What every instance of a fleet shares (docs/scaling.md): the admin key, the store's prefix, SECRETS_KEY.
  const adminKey = `bench-admin-${randomBytes(12).toString("hex")}`
  const shared = {
    FLEET_URL: nginx.baseUrl,
    REDIS_URL: redisUrl,
    REDIS_KEY_PREFIX: `bench-fleet-${count}-${randomBytes(4).toString("hex")}:`,
    SECRETS_KEY: randomBytes(32).toString("hex")
  }
  const dataDirs = ports.map(() => mkdtempSync(join(tmpdir(), "callgate-bench-fleet-")))
  const started = await Promise.allSettled(
    ports.map((port, i) =>
      startGateway({
        build,
        inspect: true,
        port,
        adminKey,
        cpus: String(layout.instanceCores[i]),
        env: { ...shared, INSTANCE_ID: instanceId(i), PUBLIC_URL: `${nginx.baseUrl}/i/${instanceId(i)}`, DATA_DIR: dataDirs[i]! }
      })
    )
  )
  const gateways = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []))
  const stop = async () => {
    await Promise.all(gateways.map((gateway) => gateway.stop()))
    await nginx.stop()
    for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
  }
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected")
  if (failed !== undefined) {
    await stop()
    throw failed.reason as Error
  }
  return { nginx, gateways, adminKey, stop }
}

/** Dial-in agents each instance holds idle, as the registry lists them. */
const idleAgentsPerInstance = async (api: { baseUrl: string; adminKey: string }) => {
  const listed = await adminApi<{ instances: ReadonlyArray<{ id: string; idleAgents: ReadonlyArray<{ idle: number }> }> }>(api, "GET", "/v1/instances")
  return Object.fromEntries(listed.instances.map((entry) => [entry.id, entry.idleAgents.reduce((sum, e) => sum + e.idle, 0)]))
}

const measureFleet = async (
  count: number,
  steps: ReadonlyArray<number>,
  layout: CoreLayout,
  nginxWorkers: number | "auto",
  redis: { readonly url: string; readonly pid: number },
  options: FleetBenchOptions,
  budget: RemeasureBudget
): Promise<SystemFigures> => {
  const log = options.log ?? (() => {})
  const name = `fleet of ${count}`
  const fleet = await startFleet(count, layout, nginxWorkers, redis.url, options.build)
  const api = { baseUrl: fleet.nginx.baseUrl, adminKey: fleet.adminKey }
  let rig: RelayRig
  try {
    const deadline = Date.now() + 30_000
    while (Object.keys(await idleAgentsPerInstance(api)).length < count) {
      if (Date.now() > deadline) throw new Error(`the registry did not list ${count} instances within 30 s`)
      await sleep(200)
    }
    const agentId = "bench_agent"
    const { environmentId, apiKey } = await createBenchEnvironment(api, agentId)
    rig = await RelayRig.around(
      name,
      rigSystemOfMany(
        fleet.gateways.map((system, i) => ({ name: instanceId(i), system })),
        [
          { name: "nginx", role: "helper", pids: () => [fleet.nginx.pid, ...childPidsOf(fleet.nginx.pid)] },
          { name: "redis", role: "helper", pids: () => [redis.pid] }
        ],
        fleet.stop
      ),
      {
        carrierTarget: { mode: "gateway", gatewayUrl: fleet.nginx.baseUrl, agentId, environmentId },
        agentTarget: { mode: "gateway", gatewayUrl: fleet.nginx.baseUrl, agentId, environmentId, apiKey },
        spareAgents: 2 * count,
        ...(layout.generatorCpus ? { generatorCpus: layout.generatorCpus } : {})
      }
    )
  } catch (error) {
    await fleet.stop()
    throw error
  }
  const measured: Array<StepFigures> = []
  let stopped: string | undefined
  const relayOptions: RelayLoadOptions = { systems: [], steps, stepSeconds: options.stepSeconds, settleSeconds: options.settleSeconds ?? 3, log }
  try {
    const idle = await rig.warmUp(relayOptions)
    log(`${name}: warmed up; idle RSS ${Math.round(idle.rssBytes / 2 ** 20)} MB over ${count} instance(s); idle agents per instance as the registry lists them now ${JSON.stringify(await idleAgentsPerInstance(api))}`)
    for (const calls of steps) {
      try {
        const { step, end } = await takeStep(rig, calls, relayOptions, budget)
        measured.push(step)
        const cpu = (step.processes ?? []).map((p) => `${p.name} ${p.cpuPercent} %`).join(", ")
        log(`${name} ${calls} calls: CPU ${cpu}; machine ${step.machineCpuPercent} % of one core`)
        if (end !== undefined && options.fullRamp !== true) {
          stopped = end
          break
        }
      } catch (error) {
        stopped = `${calls} calls: ${(error as Error).message.split("\n")[0]}`
        log(`${name} ${calls} calls: ERROR ${(error as Error).message}\n${rig.describeSystem()}`)
        break
      }
    }
  } catch (error) {
    stopped = `warm-up failed: ${(error as Error).message.split("\n")[0]}`
    log(`${name}: warm-up failed: ${(error as Error).message}`)
  } finally {
    await rig.stop().catch(() => undefined)
  }
  return summarize("fleet", rig.idle?.rssBytes, measured, stopped)
}

/** One instance, then two, on one Redis behind one nginx configuration: the fleet figure. */
export const runFleetBench = async (options: FleetBenchOptions): Promise<FleetBenchFigures> => {
  const log = options.log ?? (() => {})
  requireTaskset()
  const allowed = allowedCpus()
  const layout = coreLayout(allowed, INSTANCES)
  const generatorCores = layout.generatorCpus?.split(",").length
  // As deployed (worker_processes auto), unless nginx has cores of its own: one worker per core of those.
  const nginxWorkers = generatorCores ?? "auto"
  log(`fleet: ${layout.note}`)
  const redis = await startRedis(layout.generatorCpus ? { cpus: layout.generatorCpus } : {})
  const budget: RemeasureBudget = { used: 0 }
  const measure = async (count: number, steps: ReadonlyArray<number>): Promise<FleetMeasurement> => {
    const cores = layout.instanceCores.slice(0, count)
    try {
      const ramp = await measureFleet(count, steps, layout, nginxWorkers, redis, options, budget)
      const limiter = limiterOf(ramp, allowed.length, layout.sharesCores)
      log(`fleet of ${count}: sustained ${ramp.sustainedCalls ?? "none"}; limit: ${limiter.kind} (${limiter.reason})`)
      return { instances: count, instanceCores: cores, ramp, limiter }
    } catch (error) {
      log(`fleet of ${count}: FAILED: ${(error as Error).message}`)
      return {
        instances: count,
        instanceCores: cores,
        ramp: { error: (error as Error).message },
        limiter: { kind: "undetermined", atCalls: null, reason: "the measurement failed" }
      }
    }
  }
  try {
    const one = await measure(1, options.oneInstanceSteps)
    const c1 = isRamp(one.ramp) ? one.ramp.sustainedCalls : null
    const two = await measure(INSTANCES, fleetGrid(c1, INSTANCES, options.fleetFactors, options.oneInstanceSteps))
    const c2 = isRamp(two.ramp) ? two.ramp.sustainedCalls : null
    const efficiency = scalingEfficiency(c1, c2, INSTANCES)
    const failed = [one, two].find((m) => !isRamp(m.ramp))
    const verdict: FleetVerdict =
      failed !== undefined
        ? { judged: false, met: null, text: `not judged: the fleet of ${failed.instances} could not be measured` }
        : fleetVerdict(efficiency, [one.limiter, two.limiter], layout.sharesCores)
    const { instanceCores: _, ...rest } = layout
    return { layout: { ...rest, cores: allowed.length, nginxWorkers }, one, two, c1, c2, efficiency, verdict }
  } finally {
    redis.stop()
  }
}
