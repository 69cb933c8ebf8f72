import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { G722Encoder } from "../../src/audio/G722.js"
import { type AudioFormat, bytesPerMs, G722_16K, linearToAlaw, mulawToLinear, toObservedMulaw } from "../../src/kernel/AudioFormat.js"
import { GOLDEN, loadFvadOnce, runScenario, type Scenario, scenarios } from "./recordedTurns.js"

/**
 * The recorded conversations of recordedTurns.ts, converted to each format a Telnyx stream may
 * carry and read the way a call in that format is read (its frames converted to 8 kHz mu-law by
 * toObservedMulaw, once per call), must give the turns the golden file holds for mu-law.
 */
const toFormat = (mulaw: Uint8Array, format: AudioFormat): Uint8Array => {
  if (format.encoding === "audio/x-alaw") return Uint8Array.from(mulaw, (byte) => linearToAlaw(mulawToLinear(byte)))
  if (format.encoding === "audio/G722") {
    // 16 kHz by linear interpolation (each sample, then the midpoint to the next), one encoder per direction.
    const wide = new Int16Array(mulaw.length * 2)
    mulaw.forEach((byte, i) => {
      const next = i + 1 < mulaw.length ? mulawToLinear(mulaw[i + 1]!) : mulawToLinear(byte)
      wide[2 * i] = mulawToLinear(byte)
      wide[2 * i + 1] = (mulawToLinear(byte) + next) >> 1
    })
    const codes = new Uint8Array(mulaw.length)
    new G722Encoder().encode(wide, wide.length, codes)
    return codes
  }
  const repeat = format.sampleRate / 8000
  const out = Buffer.alloc(mulaw.length * 2 * repeat)
  mulaw.forEach((byte, i) => {
    for (let r = 0; r < repeat; r++) out.writeInt16BE(mulawToLinear(byte), (i * repeat + r) * 2)
  })
  return new Uint8Array(out)
}

/** The scenario as a call in `format` reaches the turn observer: 20 ms frames of that format, converted. */
const observedAs = (scenario: Scenario, format: AudioFormat): Scenario => {
  const frame = bytesPerMs(format) * 20
  const through = (mulaw: Uint8Array) => {
    // One converter per direction, as a call has (a G.722 one holds that direction's decoder).
    const convert = toObservedMulaw(format)
    const carried = toFormat(mulaw, format)
    const seen = new Uint8Array(mulaw.length)
    for (let offset = 0, out = 0; offset + frame <= carried.length; offset += frame, out += 160) seen.set(convert(carried.subarray(offset, offset + frame)), out)
    return seen
  }
  return { name: scenario.name, caller: through(scenario.caller), agent: through(scenario.agent) }
}

describe("turn detection in every stream format", () => {
  it.each<[string, AudioFormat]>([
    ["L16 8 kHz", { encoding: "audio/L16", sampleRate: 8000 }],
    ["L16 16 kHz", { encoding: "audio/L16", sampleRate: 16000 }]
  ])("%s: the same turns, answers and latencies as mu-law on the recorded conversations", async (_name, format) => {
    const golden = JSON.parse(readFileSync(GOLDEN, "utf8")) as Record<string, Array<string>>
    const fvad = await loadFvadOnce()
    for (const scenario of scenarios()) expect(runScenario(fvad, observedAs(scenario, format)), scenario.name).toEqual(golden[scenario.name])
  })

  it.each<[string, AudioFormat]>([
    ["PCMA 8 kHz (A-law requantises the mu-law recordings)", { encoding: "audio/x-alaw", sampleRate: 8000 }],
    ["G.722 16 kHz (a lossy codec over the mu-law recordings)", G722_16K]
  ])("%s: the same turns and answers; turn ends within 100 ms of mu-law's on the clean recordings", async (_name, format) => {
    const golden = JSON.parse(readFileSync(GOLDEN, "utf8")) as Record<string, Array<string>>
    const fvad = await loadFvadOnce()
    const turn = /^turn (\d+) (\w+) ended (\d+)/
    const shape = (lines: ReadonlyArray<string>) => lines.map((line) => line.replace(/ (ended|detected|answered|latency|at) \d+/g, ""))
    const farOff: Array<string> = []
    // The conversations over recorded noise are left out: requantising noise changes what the VAD
    // hears in it (one noisy conversation splits differently), which says nothing about A-law or G.722 calls.
    for (const scenario of scenarios().filter((s) => !/nois/.test(s.name))) {
      const now = runScenario(fvad, observedAs(scenario, format))
      const expected = golden[scenario.name]!
      expect(shape(now), scenario.name).toEqual(shape(expected))
      now.forEach((line, i) => {
        const a = turn.exec(line)
        const b = turn.exec(expected[i]!)
        if (a !== null && b !== null && Math.abs(Number(a[3]) - Number(b[3])) > 100) farOff.push(`${scenario.name}: ${line} (mu-law: ${expected[i]})`)
      })
    }
    expect(farOff).toEqual([])
  })
})
