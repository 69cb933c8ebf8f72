import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { GetObjectCommand, HeadObjectCommand, S3Client } from "@aws-sdk/client-s3"
import S3rver from "s3rver"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { S3Bucket } from "../../src/recording/S3Bucket.js"
import { parseS3Url } from "../../src/recording/S3Location.js"
import { parseWav } from "../../src/recording/Wav.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import { audioFrames, dialInAgent, type Gateway, sessionIdOf, startGateway, twilioCall, until } from "../livecall/callHarness.js"

/**
 * Recordings in an S3-compatible bucket: a real S3-protocol server on loopback (s3rver), reached
 * through @aws-sdk/client-s3 exactly as an AWS or MinIO bucket would be.
 */
describe("recordings in an S3 bucket", () => {
  let s3rver: S3rver
  let endpoint: string
  let client: S3Client
  let gateway: Gateway
  let recordingsDir: string
  const credentials = { region: "us-east-1", accessKeyId: "S3RVER", secretAccessKey: "S3RVER" }

  beforeAll(async () => {
    s3rver = new S3rver({
      port: 0,
      address: "127.0.0.1",
      silent: true,
      directory: mkdtempSync(join(tmpdir(), "callgate-s3-")),
      configureBuckets: [{ name: "recordings", configs: [] }]
    })
    const { port } = await s3rver.run()
    endpoint = `http://127.0.0.1:${port}`
    client = new S3Client({ region: "us-east-1", endpoint, forcePathStyle: true, credentials })
    recordingsDir = mkdtempSync(join(tmpdir(), "callgate-recordings-"))
    gateway = await startGateway({
      env: {
        RECORDINGS_DIR: recordingsDir,
        RECORDINGS_S3_URL: `${endpoint}/recordings/calls`,
        AWS_REGION: "us-east-1",
        AWS_ACCESS_KEY_ID: "S3RVER",
        AWS_SECRET_ACCESS_KEY: "S3RVER"
      }
    })
  })
  afterAll(async () => {
    await gateway?.close()
    client?.destroy()
    await s3rver?.close()
  })

  const object = async (key: string, range?: string) => {
    const answer = await client.send(new GetObjectCommand({ Bucket: "recordings", Key: key, ...(range !== undefined ? { Range: range } : {}) }))
    return Buffer.from(await answer.Body!.transformToByteArray())
  }

  it("a finished call's recording is uploaded, served through /v1 (whole and by Range) and deleted from the bucket", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { recording: "on" })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    const caller = audioFrames("caller-appointment.ulaw", 100)
    caller.forEach((payload, n) => call.media(payload, n + 1))
    await agent.waitForEvent("media", caller.length)
    call.stop()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended.recording?.durationMs).toBe(2020)

    // Uploaded, with its metadata beside it; the local copy is gone.
    const stored = await object(`calls/${agentId}/${sessionId}.wav`)
    expect(stored.length).toBe(44 + 2020 * 8 * 4)
    expect(parseWav(stored).samples.length).toBe(2020 * 8 * 2)
    const meta = JSON.parse((await object(`calls/${agentId}/${sessionId}.json`)).toString("utf8"))
    expect(meta).toMatchObject({ sessionId, agentId, state: "complete", durationMs: 2020, uploaded: true })
    expect(existsSync(join(recordingsDir, agentId, `${sessionId}.wav`))).toBe(false)

    const url = `${gateway.httpBase}/v1/agents/${agentId}/sessions/${sessionId}/recording`
    const whole = await fetch(url, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })
    expect(whole.status).toBe(200)
    expect(Buffer.from(await whole.arrayBuffer())).toEqual(stored)
    const part = await fetch(url, { headers: { authorization: `Bearer ${ADMIN_KEY}`, range: "bytes=44-1043" } })
    expect(part.status).toBe(206)
    expect(part.headers.get("content-range")).toBe(`bytes 44-1043/${stored.length}`)
    expect(Buffer.from(await part.arrayBuffer())).toEqual(stored.subarray(44, 1044))

    const deleted = await fetch(url, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } })
    expect(deleted.status).toBe(204)
    await expect(client.send(new HeadObjectCommand({ Bucket: "recordings", Key: `calls/${agentId}/${sessionId}.wav` }))).rejects.toThrow()
    expect((await fetch(url, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })).status).toBe(404)
  })

  it("a file larger than one part goes up as a streaming multipart upload", async () => {
    const location = parseS3Url(`${endpoint}/recordings/big`)
    if (typeof location === "string") throw new Error(location)
    const bucket = new S3Bucket(location, credentials)
    const path = join(mkdtempSync(join(tmpdir(), "callgate-big-")), "big.wav")
    const content = randomBytes(11 * 1024 * 1024 + 123)
    writeFileSync(path, content)
    try {
      // 5 MB parts, read from the file as they go: three of them.
      expect(await bucket.uploadFile("big.wav", path, "audio/wav")).toBe(3)
      // Compared as bytes (a deep toEqual of 11 MB takes minutes).
      expect((await object("big/big.wav")).equals(content)).toBe(true)
      expect(await bucket.size("big.wav")).toBe(content.length)
    } finally {
      bucket.close()
    }
  })
})
