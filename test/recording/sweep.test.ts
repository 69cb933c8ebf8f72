import { existsSync, mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Recordings } from "../../src/recording/Recordings.js"
import { HEADER_BYTES, PROVISIONAL_SIZE, parseWav, wavHeader } from "../../src/recording/Wav.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"

/**
 * The recordings sweep (docs/recording.md, "Retention" and "What a crash loses"), on the production
 * wiring over a RECORDINGS_DIR prepared beforehand: recordings past RECORDINGS_RETENTION_DAYS are
 * deleted; a recording another instance left unfinished a minute ago or more is finished (the
 * survivor's path); one still being written by another instance is left alone. The same holds for
 * each part of a call that moved between instances, and the parts are served joined.
 */
describe("the recordings sweep", () => {
  let gateway: Gateway
  const dir = mkdtempSync(join(tmpdir(), "callgate-recordings-"))
  const agentId = uniqueId("agent")
  const day = 86_400_000

  const lay = (sessionId: string, meta: Record<string, unknown>, audioBytes: number, header = wavHeader(PROVISIONAL_SIZE), part?: string, first = 0) => {
    mkdirSync(join(dir, agentId, ...(part === undefined ? [] : [`${sessionId}.parts`])), { recursive: true })
    const stem = part === undefined ? sessionId : `${sessionId}.parts/${part}`
    const wav = join(dir, agentId, `${stem}.wav`)
    const audio = Buffer.alloc(audioBytes)
    for (let i = 0; i < audioBytes / 2; i++) audio.writeInt16LE(first + ((i * 37) % 2000), i * 2)
    writeFileSync(wav, Buffer.concat([header, audio]))
    writeFileSync(
      join(dir, agentId, `${stem}.json`),
      JSON.stringify({ sessionId, agentId, environmentId: "env_x", pauses: [], durationMs: null, ...(part !== undefined ? { part } : {}), ...meta })
    )
    return wav
  }

  const old = lay("ses_old", { instanceId: "elsewhere", startedAt: new Date(Date.now() - 3 * day).toISOString(), state: "complete", durationMs: 10 }, 320, wavHeader(320))
  const fresh = lay("ses_fresh", { instanceId: "elsewhere", startedAt: new Date().toISOString(), state: "complete", durationMs: 10 }, 320, wavHeader(320))
  // Left "recording" by a lost instance: its file has not changed for two minutes; 1002 bytes of audio (a partial sample frame at the end).
  const abandoned = lay("ses_abandoned", { instanceId: "elsewhere", startedAt: new Date().toISOString(), state: "recording", pauses: [{ startMs: 10, endMs: null }] }, 1002)
  utimesSync(abandoned, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
  // The same, of an L16 call at 16 kHz: the header the recording began with names its rate.
  const wide = lay("ses_wide", { instanceId: "elsewhere", startedAt: new Date().toISOString(), state: "recording" }, 6400, wavHeader(PROVISIONAL_SIZE, 16000))
  utimesSync(wide, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
  // A call that moved: its first part finished (1 s), its second (begun 1.5 s after the first) left
  // "recording" by a lost instance, with a pause still open and a partial sample frame at its end.
  const movedStart = Date.now() - 60_000
  const movedMeta = { instanceId: "elsewhere", startedAt: new Date().toISOString(), sampleRate: 8000 }
  lay("ses_moved", { ...movedMeta, state: "complete", durationMs: 1000, callerEndMs: 1000, partStartedAtMs: movedStart }, 32_000, wavHeader(32_000))
  const movedLater = lay(
    "ses_moved",
    { ...movedMeta, state: "recording", partStartedAtMs: movedStart + 1500, pauses: [{ startMs: 250, endMs: null }] },
    16_002,
    wavHeader(PROVISIONAL_SIZE),
    `${movedStart + 1500}-abc123`,
    5000
  )
  utimesSync(movedLater, new Date(Date.now() - 120_000), new Date(Date.now() - 120_000))
  // Still being written by another live instance (changed just now).
  const live = lay("ses_live", { instanceId: "elsewhere", startedAt: new Date().toISOString(), state: "recording" }, 800)

  beforeAll(async () => {
    // Redis mode: the start finishes only this instance's own recordings, not every one (the embedded store's rule).
    gateway = await startGateway({ store: "redis", env: { RECORDINGS_DIR: dir, RECORDINGS_RETENTION_DAYS: "1" } })
  })
  afterAll(() => gateway.close())

  it("deletes what is past the retention, finishes what a lost instance left, leaves live files alone", async () => {
    // The WAV goes first, then its sidecar: wait for both.
    await until(() => !existsSync(old) && !existsSync(join(dir, agentId, "ses_old.json")), "the expired recording deleted")
    await until(() => JSON.parse(readFileSync(join(dir, agentId, "ses_abandoned.json"), "utf8")).state === "complete", "the abandoned recording finished")
    expect(existsSync(fresh)).toBe(true)

    const finished = readFileSync(abandoned)
    expect(finished.length).toBe(HEADER_BYTES + 1000)
    expect(finished.readUInt32LE(40)).toBe(1000)
    expect(parseWav(finished).samples.length).toBe(500)
    const meta = JSON.parse(readFileSync(join(dir, agentId, "ses_abandoned.json"), "utf8"))
    // 1000 bytes: 250 sample frames, 31 ms; the open pause closed at the end.
    expect(meta).toMatchObject({ state: "complete", durationMs: 31, pauses: [{ startMs: 10, endMs: 31 }] })

    // The 16 kHz recording keeps its rate: 6400 bytes are 1600 sample frames, 100 ms.
    await until(() => JSON.parse(readFileSync(join(dir, agentId, "ses_wide.json"), "utf8")).state === "complete", "the 16 kHz recording finished")
    expect(JSON.parse(readFileSync(join(dir, agentId, "ses_wide.json"), "utf8")).durationMs).toBe(100)
    expect(parseWav(readFileSync(wide)).sampleRate).toBe(16000)

    // The moved call: its second part finished by the sweep, the two served as one recording, the
    // gap between them silent, the pause on the whole's timeline.
    const movedLaterMeta = join(dir, agentId, "ses_moved.parts", `${movedStart + 1500}-abc123.json`)
    await until(() => JSON.parse(readFileSync(movedLaterMeta, "utf8")).state === "complete", "the moved call's second part finished")
    expect(JSON.parse(readFileSync(movedLaterMeta, "utf8"))).toMatchObject({ durationMs: 500, pauses: [{ startMs: 250, endMs: 500 }] })
    const served = await fetch(`${gateway.httpBase}/v1/agents/${agentId}/sessions/ses_moved/recording`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })
    expect(served.status).toBe(200)
    const whole = Buffer.from(await served.arrayBuffer())
    expect(whole.length).toBe(HEADER_BYTES + 2000 * 8 * 4)
    const { samples } = parseWav(whole)
    const sample = (index: number) => samples[index]
    // Interleaved samples: the first part's 16000, then 8000 of silence (0.5 s), then the second part's 8000.
    expect([0, 1, 15_999].map(sample)).toEqual([0, 37, (15_999 * 37) % 2000])
    expect(samples.subarray(16_000, 24_000).every((value) => value === 0)).toBe(true)
    expect([24_000, 24_001, 31_999].map(sample)).toEqual([5000, 5037, 5000 + ((7_999 * 37) % 2000)])
    // A range across the gap and into the second part.
    const ranged = await fetch(`${gateway.httpBase}/v1/agents/${agentId}/sessions/ses_moved/recording`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}`, range: "bytes=60000-100043" }
    })
    expect(ranged.status).toBe(206)
    expect(Buffer.from(await ranged.arrayBuffer()).equals(whole.subarray(60_000, 100_044))).toBe(true)

    // Another sweep changes nothing more: the live file is still "recording", untouched.
    await gateway.run(Effect.flatMap(Recordings, (recordings) => recordings.sweep))
    expect(JSON.parse(readFileSync(join(dir, agentId, "ses_live.json"), "utf8")).state).toBe("recording")
    expect(readFileSync(live).readUInt32LE(40)).toBe(PROVISIONAL_SIZE)
  })
})
