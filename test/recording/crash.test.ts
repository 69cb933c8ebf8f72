import { mkdtempSync, readFileSync, readdirSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { MULAW_TO_LINEAR } from "../../sim/Mulaw.js"
import { parseWav, PROVISIONAL_SIZE } from "../../src/recording/Wav.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { openSocket, type Peer, until } from "../livecall/callHarness.js"

/**
 * SIGKILL in the middle of a recorded call, on the real process (`node src/main.ts`): the WAV keeps
 * what was written up to the last batch, and the next start finishes it (header sizes from what
 * the file holds, sidecar complete) so it plays and is served through /v1.
 */
describe("a recorded call survives SIGKILL", () => {
  const processes: Array<GatewayProcess> = []
  let twilio: FakeTwilio | undefined
  let agent: Peer | undefined
  afterAll(async () => {
    agent?.close()
    await Promise.all(processes.map((gateway) => gateway.stop("SIGKILL")))
    await twilio?.close()
  })

  it("the next start finishes the file, which plays up to the last second written", async () => {
    twilio = await startFakeTwilio()
    const port = await freePort()
    const baseUrl = `http://127.0.0.1:${port}`
    const dataDir = mkdtempSync(join(tmpdir(), "callgate-data-"))
    const recordingsDir = join(dataDir, "recordings")
    const env = {
      ADMIN_API_KEY: ADMIN_KEY,
      DATA_DIR: dataDir,
      PORT: String(port),
      PUBLIC_URL: baseUrl,
      ...twilio.env,
      RATE_LIMIT_PER_MINUTE: "0",
      LOG_LEVEL: "warn"
    }
    const launch = async () => {
      const gateway = await spawnGateway(env)
      processes.push(gateway)
      await waitForHealthy(gateway, "/readyz", 90_000)
      return gateway
    }
    const first = await launch()
    const agentId = uniqueId("agent")
    const created = await fetch(`${baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "recorded", recording: "on" })
    })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    agent = await openSocket(`ws://127.0.0.1:${port}/v1/agents/${agentId}/environments/${environmentId}/connect`, adminAuth)

    // A real-time call (a frame every 20 ms from chunk 0, speech after the first frames).
    const call = await placeTwilioCall({ gatewayUrl: baseUrl, agentId, environmentId, authToken: twilio.authToken })
    await agent.waitForEvent("start")
    const sessionId = agent.events("start")[0].start.customParameters.sessionId as string
    void call.play(readFileSync(new URL("../fixtures/audio/caller-appointment.ulaw", import.meta.url)))
    const wav = join(recordingsDir, agentId, `${sessionId}.wav`)
    // Two seconds of audio written (the batches land once a second).
    await until(() => {
      try {
        return statSync(wav).size >= 44 + 2 * 8000 * 4
      } catch {
        return false
      }
    }, "two seconds of the recording on disk", 60_000)
    await first.stop("SIGKILL")
    call.drop()
    const heard = agent.events("media").map((m) => m.media.payload as string)

    // What the crash left: the provisional header, the sidecar still "recording".
    const left = readFileSync(wav)
    expect(left.readUInt32LE(40)).toBe(PROVISIONAL_SIZE)
    expect(JSON.parse(readFileSync(join(recordingsDir, agentId, `${sessionId}.json`), "utf8")).state).toBe("recording")
    const writtenBytes = Math.floor((left.length - 44) / 4) * 4

    const second = await launch()
    const url = `${second.baseUrl}/v1/agents/${agentId}/sessions/${sessionId}/recording`
    let answer: Response | undefined
    // The start's sweep finishes it; until then it is "in progress" (409).
    for (let tries = 0; tries < 600 && answer?.status !== 200; tries++) {
      answer = await fetch(url, { headers: adminAuth })
      if (answer.status !== 200) await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(answer?.status).toBe(200)
    const served = Buffer.from(await answer!.arrayBuffer())
    expect(served.length).toBe(44 + writtenBytes)
    // The header now says how much audio there is.
    expect(served.readUInt32LE(40)).toBe(writtenBytes)
    expect(served.readUInt32LE(4)).toBe(writtenBytes + 36)
    const { samples } = parseWav(served)
    const frames = Math.floor(samples.length / 2 / 160)
    expect(frames).toBeGreaterThanOrEqual(100)
    expect(heard.length).toBeGreaterThanOrEqual(frames)
    // Sample for sample: the caller's channel is what the agent heard, frame k at k * 20 ms.
    for (let k = 0; k < frames; k++) {
      const expected = Array.from(Buffer.from(heard[k]!, "base64"), (byte) => MULAW_TO_LINEAR[byte]!)
      const got = Array.from({ length: 160 }, (_, i) => samples[(k * 160 + i) * 2]!)
      expect(got, `caller frame ${k}`).toEqual(expected)
    }
    const meta = JSON.parse(readFileSync(join(recordingsDir, agentId, `${sessionId}.json`), "utf8"))
    expect(meta).toMatchObject({ state: "complete", durationMs: Math.round((writtenBytes / 4 / 8000) * 1000) })
    expect(readdirSync(join(recordingsDir, agentId)).filter((name) => name.endsWith(".tmp"))).toEqual([])
  })
})
