import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { agentMediaScanner } from "../../src/frames/AgentDialect.js"
import { parseJson } from "../../src/frames/FrameDecoding.js"
import { isCallerTrack } from "../../src/frames/MediaFields.js"
import { makeMediaScanner } from "../../src/frames/MediaScanner.js"
import { telnyxMediaScanner } from "../../src/frames/TelnyxFrames.js"
import { twilioInboundEncoder, twilioMediaScanner, twilioOutboundEncoder } from "../../src/frames/TwilioFrames.js"
import { type Dialect, dialects, frames } from "./mediaFrameArbitraries.js"

/**
 * The media fast path against the full parse: for every generated frame the scanner recognises,
 * JSON.parse + the schema guard must accept it too and read the same payload, track and stream
 * id (and chunk); every frame it does not recognise takes the full parse, which is the code path
 * that was there before (mediaFrameArbitraries.ts says what is generated).
 */

const RUNS = 12_000

/** What the full parse reads from a media frame, or undefined when it is not one. */
const fullParse = (dialect: Dialect, text: string) => {
  const raw = parseJson(text)
  if (!dialect.guard(raw)) return undefined
  const frame = raw as Record<string, any>
  return {
    payload: frame.media.payload as string,
    track: frame.media.track as string | undefined,
    stream: dialect.streamField === undefined ? undefined : (frame[dialect.streamField] as string | undefined),
    chunk: frame.media.chunk as string | number | undefined
  }
}


describe("media scanner vs the full parse", () => {
  for (const dialect of dialects) {
    it(`${dialect.name}: every recognised frame reads exactly as the full parse reads it (${RUNS} frames)`, () => {
      let recognised = 0
      let fallback = 0
      let fallbackMedia = 0
      fc.assert(
        fc.property(frames(dialect), (text) => {
          const full = fullParse(dialect, text)
          if (!dialect.scanner.scan(text)) {
            fallback++
            if (full !== undefined) fallbackMedia++
            return
          }
          recognised++
          const scanned = dialect.scanner.result
          expect(full, text.slice(0, 200)).toBeDefined()
          expect(scanned.payload(text)).toBe(full!.payload)
          expect(scanned.isCallerTrack(text)).toBe(isCallerTrack(full!.track))
          if (dialect.hasTrack) expect(text.slice(scanned.trackStart, scanned.trackEnd)).toBe(full!.track)
          if (dialect.streamField !== undefined) {
            expect(scanned.hasStream).toBe(true)
            expect(text.slice(scanned.streamStart, scanned.streamEnd)).toBe(full!.stream)
            for (const expected of [full!.stream!, `${full!.stream}x`, full!.stream!.slice(1), ""]) {
              expect(scanned.isStream(text, expected)).toBe(full!.stream === expected)
            }
          }
          if (dialect.hasChunk) expect(scanned.chunk).toBe(Number(full!.chunk))
        }),
        { numRuns: RUNS, seed: 16_016, endOnFailure: true }
      )
      // Every branch was exercised: recognised frames, fallbacks, and media frames that only the full parse accepts.
      expect(recognised).toBeGreaterThan(RUNS / 10)
      expect(fallback).toBeGreaterThan(RUNS / 10)
      expect(fallbackMedia).toBeGreaterThan(RUNS / 50)
    })
  }

  it("recognises the frames callgate and its simulators write", () => {
    const payload = Buffer.alloc(160, 0x7f).toString("base64")
    const toAgent = twilioInboundEncoder("MZabc").media(7, 6, 120, payload)
    expect(twilioMediaScanner.scan(toAgent)).toBe(true)
    expect(twilioMediaScanner.result.payload(toAgent)).toBe(payload)
    expect(twilioMediaScanner.result.isStream(toAgent, "MZabc")).toBe(true)
    const toTwilio = twilioOutboundEncoder("MZabc").media(payload)
    expect(agentMediaScanner.scan(toTwilio)).toBe(true)
    expect(agentMediaScanner.result.payload(toTwilio)).toBe(payload)
    const telnyx = `{"event":"media","sequence_number":"4","media":{"track":"inbound","chunk":"0002","timestamp":"5","payload":"${payload}"},"stream_id":"32DE0DEA-53CB"}`
    expect(telnyxMediaScanner.scan(telnyx)).toBe(true)
    expect(telnyxMediaScanner.result.chunk).toBe(2)
  })

  it("refuses templates whose fields are not JSON string contents", () => {
    expect(() => makeMediaScanner(`{"n":<digits:skip>,"p":"<payload:payload>"}`)).toThrow(/between quotes/)
    expect(() => makeMediaScanner(`{"n":"<digits:skip>"}`)).toThrow(/no payload/)
  })
})
