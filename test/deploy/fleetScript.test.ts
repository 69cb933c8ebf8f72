import { type ChildProcess, spawn } from "node:child_process"
import { afterEach, describe, expect, it } from "vitest"
import { startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { repoRoot } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"

const ADMIN = "fleet-script-test-admin-key"
const reply = readUlawFile("test/fixtures/audio/agent-greeting.ulaw").subarray(20 * FRAME_BYTES, 30 * FRAME_BYTES)

describe("npm run fleet", () => {
  let fleet: ChildProcess | undefined
  afterEach(async () => {
    if (fleet !== undefined && fleet.exitCode === null) {
      const exited = new Promise((resolve) => fleet!.once("exit", resolve))
      fleet.kill("SIGTERM")
      await exited
    }
  })

  it("starts Redis, three instances and nginx without docker; a call through nginx is answered; no false warnings; Ctrl-C stops it all", async () => {
    const port = await freePort()
    fleet = spawn(process.execPath, ["--import", "tsx", "scripts/fleet.ts"], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ADMIN_API_KEY: ADMIN, FLEET_PORT: String(port) },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    fleet.stdout!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk))
    fleet.stderr!.setEncoding("utf8").on("data", (chunk: string) => (output += chunk))
    const exited = new Promise<number | null>((resolve) => fleet!.once("exit", (code) => resolve(code)))
    while (!output.includes("fleet: fleet ready on")) {
      if (fleet.exitCode !== null) throw new Error(`npm run fleet exited: ${output}`)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    const base = `http://127.0.0.1:${port}`
    const headers = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }
    type Listed = { data: { instances: Array<{ id: string; publicUrl: string }> } }
    let instances: Listed["data"]["instances"] = []
    // Each instance joined the registry before it listened; a read lands on any of them.
    while (instances.length < 3) {
      instances = ((await (await fetch(`${base}/v1/instances`, { headers })).json()) as Listed).data.instances
      if (instances.length < 3) await new Promise((resolve) => setTimeout(resolve, 200))
    }
    expect(instances.map((instance) => instance.id).sort()).toEqual(["callgate-1", "callgate-2", "callgate-3"])
    expect(instances.map((instance) => instance.publicUrl).sort()).toEqual([1, 2, 3].map((n) => `${base}/i/callgate-${n}`))

    // Through nginx: an environment, a dial-in agent, and a simulated Twilio call on it.
    const created = await fetch(`${base}/v1/agents/fleet-agent/environments`, { method: "POST", headers, body: JSON.stringify({ name: "fleet" }) })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    const agent = await startAnsweringAgent({ gatewayUrl: base, agentId: "fleet-agent", environmentId, apiKey: ADMIN, reply, responseLatencyMs: 20 })
    try {
      await agent.ready()
      const call = await placeTwilioCall({ gatewayUrl: base, agentId: "fleet-agent", environmentId })
      expect(call.entry!.stream.url).toMatch(new RegExp(`^ws://127\\.0\\.0\\.1:${port}/i/callgate-[123]/telephony/twilio/stream`))
      const turn = await call.turn(readUlawFile("test/fixtures/audio/caller-appointment.ulaw"), { answerTimeoutMs: 30_000 })
      expect(turn.answer.answered).toBe(true)
      await call.hangup()
    } finally {
      await agent.close()
    }

    // Every instance started without a warning about its PUBLIC_URL (it is nginx's /i/{id} on another port by design).
    const lines = output.split("\n").filter((line) => /^\[callgate-\d\] \{/.test(line)).map((line) => JSON.parse(line.replace(/^\[callgate-\d\] /, "")))
    expect(lines.filter((line) => line.msg === "callgate listening")).toHaveLength(3)
    expect(lines.filter((line) => line.level === "warn" && /PUBLIC_URL|did you mean|does not read/.test(line.msg))).toEqual([])

    fleet.kill("SIGTERM")
    expect(await exited).toBe(0)
    expect(output).toContain("fleet: stopped")
  }, 300_000)
})
