import { describe, expect, it } from "vitest"
import { makeBarrier } from "../../bench/relayLoad.js"
import { ratioInterval } from "../../bench/versus.js"

describe("versus figures", () => {
  it("the windows' ratio interval holds their geometric mean and widens with their spread", () => {
    expect(ratioInterval([1.02])).toBeUndefined()
    const [lo, hi] = ratioInterval([1.0, 1.04])!
    expect(lo).toBeLessThan(1.02)
    expect(hi).toBeGreaterThan(1.02)
    // Identical windows: no spread, the interval is the ratio itself.
    expect(ratioInterval([1.03, 1.03, 1.03])).toEqual([1.03, 1.03])
    const tight = ratioInterval([0.99, 1.01, 1.0, 1.02, 0.98, 1.0])!
    const loose = ratioInterval([0.9, 1.1, 1.0, 1.12, 0.88, 1.0])!
    expect(tight[0]).toBeLessThan(1)
    expect(tight[1]).toBeGreaterThan(1)
    expect(loose[1] - loose[0]).toBeGreaterThan(tight[1] - tight[0])
    // A clear difference: the interval leaves 1 out.
    expect(ratioInterval([1.05, 1.06, 1.04, 1.05, 1.06, 1.04])![0]).toBeGreaterThan(1)
  })

  it("a barrier lets no party past until all arrived, round after round", async () => {
    const together = makeBarrier(2)
    const passed: Array<string> = []
    const first = together().then(() => passed.push("a"))
    await Promise.resolve()
    expect(passed).toEqual([])
    await Promise.all([first, together().then(() => passed.push("b"))])
    expect(passed.sort()).toEqual(["a", "b"])
    const again = together().then(() => passed.push("a2"))
    await Promise.resolve()
    expect(passed).toHaveLength(2)
    await Promise.all([again, together()])
    expect(passed).toContain("a2")
  })
})
