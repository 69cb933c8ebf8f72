import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "vitest"

const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

interface DemoRun {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** `npm run demo`'s command, with nothing from this runner's environment (REDIS_URL) but PATH and HOME. */
const runDemo = () =>
  new Promise<DemoRun>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "examples/demo.ts"], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    // The demo has its own 90 s deadline; this only stops a demo that ignores it.
    const kill = setTimeout(() => child.kill("SIGKILL"), 110_000)
    child.once("exit", (code) => {
      clearTimeout(kill)
      resolve({ code, stdout, stderr })
    })
  })

const isRunning = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * `npm run demo` end to end: callgate as a child process, the answering agent, a Twilio call
 * that stalls on its third turn. The demo checks each step itself and exits 1 when one is
 * missing; this test also reads its narrative for the lines a newcomer is promised.
 */
describe("npm run demo", () => {
  let run: DemoRun
  beforeAll(async () => {
    run = await runDemo()
  }, 120_000)

  it("exits 0 and reports no failure", () => {
    expect(run.stderr, run.stdout).not.toContain("FAILED")
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0)
    expect(run.stdout).toMatch(/done in [\d.]+ s: every process and server stopped/)
  })

  it("prints both answered turns' latencies, from the caller and from callgate's session record", () => {
    for (const turn of [1, 2]) {
      expect(run.stdout).toMatch(new RegExp(`caller +turn ${turn}: hears the agent \\d+ ms after its last voiced frame`))
      expect(run.stdout).toMatch(new RegExp(`callgate +turn ${turn} response latency: \\d+ ms \\(turns\\[${turn - 1}\\] of GET /v1/agents/demo-agent/sessions/ses_`))
      // The summary table: turn, caller stopped, agent began, latency (callgate), latency (simulator), timer expiries.
      expect(run.stdout).toMatch(new RegExp(`^${turn} +\\+[\\d.]+s +\\+[\\d.]+s +\\d+ ms +\\d+ ms +0$`, "m"))
    }
    expect(run.stdout).toMatch(/agent +heard the end of turn 3; stalls/)
    expect(run.stdout).toMatch(/^3 +\+[\d.]+s +- +no answer +- +1$/m)
  })

  it("prints the breaker trip, the signed fallback request and the TwiML applied to the call", () => {
    expect(run.stdout).toMatch(/callgate +breaker tripped: no answer within 2 s, occurrence 1 of threshold 1/)
    expect(run.stdout).toMatch(/receiver +fallback request: POST \/fallback\?error=The%20agent%20did%20not%20begin%20responding/)
    expect(run.stdout).toMatch(/fallback request:[^[]*signature verified: yes/)
    expect(run.stdout).toContain(
      "TwiML applied: <Response><Say>Sorry, our assistant is unavailable. Connecting you to a person.</Say><Dial>+14155550123</Dial></Response>"
    )
    expect(run.stdout).toMatch(/error fallback ran: type webhook, outcome markup_applied/)
    expect(run.stdout).toMatch(/fallback: trigger agent_unresponsive, type webhook, webhook HTTP 200, outcome markup_applied/)
  })

  it("prints the session.ended payload with its signature verified", () => {
    expect(run.stdout).toMatch(/receiver +session\.ended received: signature verified: yes/)
    expect(run.stdout).toContain('"event": "session.ended"')
    expect(run.stdout).toContain('"status": "failed"')
    expect(run.stdout).toContain('"agentId": "demo-agent"')
  })

  it("shows secrets by their last four characters only, never the admin key", () => {
    expect(run.stdout).toMatch(/webhookSecret whsec_….{4}, errorFallbackWebhookSecret whsec_….{4}/)
    expect(`${run.stdout}${run.stderr}`).not.toMatch(/whsec_[A-Za-z0-9+/]{8,}/)
    expect(`${run.stdout}${run.stderr}`).not.toContain("demo_admin_")
  })

  it("leaves no callgate process behind", () => {
    const pid = Number(/callgate is ready \(pid (\d+)\)/.exec(run.stdout)?.[1])
    expect(pid).toBeGreaterThan(0)
    expect(isRunning(pid)).toBe(false)
  })
})
