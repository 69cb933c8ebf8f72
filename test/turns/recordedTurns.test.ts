import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { GOLDEN, runAll } from "./recordedTurns.js"

/**
 * Turn detection on the recordings is pinned: the agent-side VAD runs only while an answer may be
 * due, and an energy gate calls a settled quiet line silence without the VAD (docs/turns-and-breaker.md);
 * no later change may move a single turn, answer, latency or detection time on these conversations
 * unless the change to turn detection is intended and the golden file is regenerated with it.
 */
describe("turn detection on the recorded conversations", () => {
  it("reports exactly what the golden file holds", async () => {
    const golden = JSON.parse(readFileSync(GOLDEN, "utf8")) as Record<string, Array<string>>
    const now = await runAll()
    expect(Object.keys(now)).toEqual(Object.keys(golden))
    for (const name of Object.keys(golden)) expect(now[name], name).toEqual(golden[name])
    // The conversations do exercise turns, answers and overlaps.
    const all = Object.values(golden).flat()
    expect(all.filter((line) => line.includes("answered")).length).toBeGreaterThan(20)
    expect(all.filter((line) => line.includes("latency 0")).length).toBeGreaterThan(3)
  })
})
