import { describe, expect, it } from "vitest"
import { parseCommandStats, parseCpuSeconds, type RedisCostFigures } from "../../bench/redisCost.js"
import { type BenchResults, renderMarkdown } from "../../bench/report.js"

/** What redis-server 7 answers to INFO commandstats / INFO cpu (abridged). */
const COMMANDSTATS = [
  "# Commandstats",
  "cmdstat_hset:calls=30,usec=120,usec_per_call=4.00,rejected_calls=0,failed_calls=0",
  "cmdstat_evalsha:calls=5,usec=400,usec_per_call=80.00,rejected_calls=0,failed_calls=0",
  "cmdstat_client|setname:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0",
  "cmdstat_info:calls=9,usec=900,usec_per_call=100.00,rejected_calls=0,failed_calls=0",
  ""
].join("\r\n")

const CPU = ["# CPU", "used_cpu_sys:1.250000", "used_cpu_user:0.500000", "used_cpu_sys_children:0.000000", "used_cpu_sys_main_thread:1.240000", ""].join("\r\n")

describe("the redis bench part", () => {
  it("reads every command Redis ran by name (subcommands too), leaving out its own INFO readings", () => {
    expect(parseCommandStats(COMMANDSTATS)).toEqual(
      new Map([
        ["hset", 30],
        ["evalsha", 5],
        ["client|setname", 2]
      ])
    )
  })

  it("reads Redis CPU as used_cpu_sys + used_cpu_user, not the main thread's or the children's", () => {
    expect(parseCpuSeconds(CPU)).toBeCloseTo(1.75, 6)
  })

  it("reports commands and Redis CPU per call set-up and per call-second", () => {
    const redis: RedisCostFigures = {
      redisVersion: "7.0.15",
      idle: { seconds: 10, commandsPerSecond: 36, cpuMsPerSecond: 1.9 },
      idleAgentSocket: { pool: 62, commandsPerSecond: 0.5, cpuMsPerSecond: 0.01 },
      steady: { calls: 60, seconds: 15, commandsPerCallSecond: 3.3, scriptsPerCallSecond: 0.6, cpuMsPerCallSecond: 0.07, cpuMsPerCallSecondFromCommands: 0.02, byCommand: [{ command: "zadd", perUnit: 1.2 }] },
      setups: {
        calls: 120,
        failed: 0,
        seconds: 12,
        callSeconds: 480,
        commandsPerSetup: 98,
        scriptsPerSetup: 5,
        cpuMsPerSetup: 0.66,
        byCommand: [
          { command: "hset", perUnit: 30 },
          { command: "evalsha", perUnit: 5 }
        ],
        delivered: 120
      },
      oneCore: { setupsPerSecond: 1515, concurrentCalls: 14286 }
    }
    const text = renderMarkdown({
      startedAt: "2026-11-26T23:00:00.000Z",
      durationSeconds: 60,
      machine: { cores: 2, cpuModel: "test", node: "v20", platform: "linux x64", memoryGb: 4, loadAverage: { atStart: 1, atEnd: 1 } },
      settings: { steps: [], stepSeconds: 15, parts: ["redis"], quick: false, profile: false, runtime: "tsx", source: "test" },
      redis
    } satisfies BenchResults)
    expect(text).toContain("## What one Redis carries")
    expect(text).toContain("| per call set-up (and ending) | 120 placed, 120 session.ended | 98 | 5 | 0.66 |")
    expect(text).toContain("| per call-second | 60 for 15 s | 3.3 | 0.6 | 0.07 (from the commands: 0.02) |")
    expect(text).toContain("Per set-up, by command: hset 30, evalsha 5.")
    expect(text).toContain("1515 call set-ups a second, or 14286 concurrent calls")
  })
})
