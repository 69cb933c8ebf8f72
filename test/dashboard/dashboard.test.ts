import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { gzipSync } from "node:zlib"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket } from "ws"
import { buildDashboard } from "../../dashboard/build.mjs"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile, silence } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type GatewayProcess, repoRoot, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"

/**
 * The dashboard in Debian's chromium (playwright-core), against callgate started as `npm run dev`
 * starts it: every point the dashboard must meet. Each step waits for the element or event that
 * proves it, never for a fixed time. The screenshots in docs/dashboard/ are made here.
 */
// page.evaluate callbacks run in the browser; the test program has no DOM types.
declare const document: any, window: any, sessionStorage: any, localStorage: any

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const ADMIN_KEY = "dashboard-admin-key-0123456789"
/**
 * Every run takes the screenshots; `npm run screenshots` (UPDATE_SCREENSHOTS=1) writes them over
 * docs/dashboard/, other runs into a scratch folder, so a test run leaves the work tree clean.
 */
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === "1" ? join(repoRoot, "docs/dashboard") : mkdtempSync(join(tmpdir(), "callgate-screenshots-"))
const XSS_NAME = "<img src=x onerror=alert(1)>"
const MISSING_ENVIRONMENT = "env_doesnotexist00"

const callerTurn = readUlawFile("test/fixtures/audio/caller-appointment.ulaw").subarray(0, 110 * FRAME_BYTES)
const reply = readUlawFile("examples/agents/audio/agent-greeting.ulaw").subarray(0, 40 * FRAME_BYTES)

describe("the dashboard, in chromium", () => {
  let gateway: GatewayProcess
  let receiver: Receiver
  let context: BrowserContext
  let page: Page
  let profileDir: string
  let agent: AnsweringAgent | undefined
  const agentId = uniqueId("dash")
  const otherAgentId = uniqueId("scoped")
  let environmentId = ""
  let webhookSecret = ""
  let scopedKey = ""
  /** Everything that should never happen in the page: script errors, CSP violations, alert(). */
  const problems: Array<string> = []
  const requestedUrls: Array<string> = []

  const v1 = async (method: string, path: string, body?: unknown, key = ADMIN_KEY) => {
    const response = await fetch(`${gateway.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    return { status: response.status, json: response.status === 204 ? null : ((await response.json()) as any) }
  }

  const watch = (target: Page) => {
    target.on("pageerror", (error) => problems.push(`pageerror: ${error.message}`))
    target.on("console", (message) => {
      // The missing environment's page asks for it (and its breaker, sessions, deliveries) once, in
      // parallel: chromium logs each 404 as a failed load as it answers, some after the page says
      // "not found". Expected; anything else is a problem.
      const missing = message.location().url.includes(MISSING_ENVIRONMENT) && /status of 404/.test(message.text())
      if (message.type() === "error" && !missing) problems.push(`console: ${message.text()}`)
    })
    target.on("dialog", (dialog) => {
      problems.push(`dialog: ${dialog.type()} ${dialog.message()}`)
      void dialog.dismiss()
    })
    target.on("request", (request) => requestedUrls.push(request.url()))
  }

  const shot = (target: Page, name: string) => target.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true })

  const signIn = async (target: Page, key: string) => {
    await target.goto(`${gateway.baseUrl}/dashboard`)
    await target.getByLabel("API key").fill(key)
    await target.getByRole("button", { name: "Sign in" }).click()
    await target.getByRole("button", { name: "Sign out" }).waitFor()
  }

  beforeAll(async () => {
    // Never skipped: without a browser the dashboard is untested, so say what is missing (.ci/run installs it).
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium`)
    await buildDashboard()
    // The event webhook receiver: refuses the first delivery (400: not retried), accepts the rest.
    receiver = await startReceiver((_request, index) => ({ status: index === 0 ? 400 : 200 }))
    gateway = await spawnGateway({
      ADMIN_API_KEY: ADMIN_KEY,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      WEBHOOK_CA_FILE: CA_FILE
    })
    await waitForHealthy(gateway)
    profileDir = mkdtempSync(join(tmpdir(), "callgate-chromium-"))
    context = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 900 },
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync"
      ]
    })
    page = context.pages()[0] ?? (await context.newPage())
    watch(page)
  }, 240_000)

  afterAll(async () => {
    await agent?.close()
    await context?.close()
    await gateway?.stop()
    await receiver?.close()
    if (profileDir) rmSync(profileDir, { recursive: true, force: true })
  })

  it("is served at /dashboard with a strict CSP, hashed long-cached assets, under 300 KB gzipped", async () => {
    const index = await fetch(`${gateway.baseUrl}/dashboard`)
    expect(index.status).toBe(200)
    const csp = index.headers.get("content-security-policy") ?? ""
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("default-src 'none'")
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:/)
    expect(index.headers.get("cache-control")).toBe("no-cache")
    const html = await index.text()
    // No inline script or style: only files of this origin.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
    expect(html).not.toMatch(/<style|style=/)
    const assets = [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((match) => match[1]!)
    expect(assets.length).toBe(3)
    let gzipped = 0
    for (const asset of assets) {
      expect(asset).toMatch(/\/(app-[A-Z0-9]{8,}\.(js|css)|favicon-[a-f0-9]{10}\.svg)$/)
      const response = await fetch(`${gateway.baseUrl}${asset}`)
      expect(response.status).toBe(200)
      expect(response.headers.get("cache-control")).toContain("immutable")
      expect(response.headers.get("content-security-policy")).toBe(csp)
      gzipped += gzipSync(Buffer.from(await response.arrayBuffer())).length
    }
    expect(gzipped).toBeLessThan(300 * 1024)
    // Every asset comes from this origin (no CDN).
    const built = readdirSync(join(repoRoot, "dist/dashboard/assets")).map((name) => readFileSync(join(repoRoot, "dist/dashboard/assets", name), "utf8"))
    for (const text of built) expect(text).not.toMatch(/https?:\/\/(?:cdn|unpkg|fonts)\./)
  })

  it("signs in with the admin key, kept in sessionStorage only", async () => {
    await page.goto(`${gateway.baseUrl}/dashboard`)
    await page.getByLabel("API key").waitFor()
    await shot(page, "sign-in")
    await signIn(page, ADMIN_KEY)
    await page.getByTestId("scope").getByText("Admin key: every agent").waitFor()
    expect(await page.evaluate(() => sessionStorage.getItem("callgate.apiKey"))).toBe(ADMIN_KEY)
    expect(await page.evaluate(() => localStorage.length + document.cookie.length)).toBe(0)
    expect(page.url()).not.toContain(ADMIN_KEY)
  })

  it("creates an environment from the agent's page", async () => {
    await page.getByLabel("Agent ID").fill(agentId)
    await page.getByRole("button", { name: "Open agent" }).click()
    await page.getByRole("heading", { name: `Agent ${agentId}` }).waitFor()
    await page.getByLabel("Environment name").fill("Support line")
    await page.getByRole("button", { name: "Create environment" }).click()
    await page.getByRole("link", { name: "Support line" }).waitFor()
    const listed = await v1("GET", `/v1/agents/${agentId}/environments`)
    expect(listed.json.data.map((env: { name: string }) => env.name)).toEqual(["Support line"])
    environmentId = listed.json.data[0].id
    // The Agents page counts it.
    await page.getByRole("link", { name: "Agents" }).first().click()
    await page.getByRole("row", { name: new RegExp(`${agentId}\\s+1`) }).waitFor()
    await page.getByRole("link", { name: agentId }).click()
    await page.getByRole("link", { name: "Support line" }).click()
    await page.getByTestId("environment-name").getByText("Support line").waitFor()
  })

  it("Webhook Settings: saving the URL shows the whsec_ secret once; after a reload only its last four characters", async () => {
    await page.getByRole("button", { name: "Webhook Settings" }).click()
    await page.getByLabel("Webhook URL").fill("http://insecure.example.com/hook")
    await page.getByRole("button", { name: "Save" }).click()
    // The API's rule, beside the field.
    await page.locator(".field.invalid").getByText("must be an https:// URL without credentials").waitFor()
    await page.getByLabel("Webhook URL").fill(receiver.url("/events"))
    await page.getByRole("button", { name: "Save" }).click()
    const secret = page.getByTestId("webhook-secret").locator(".secret-value")
    await secret.waitFor()
    webhookSecret = (await secret.textContent()) ?? ""
    expect(webhookSecret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    await page.getByText("it will not be shown again").waitFor()
    await page.getByRole("button", { name: "Copy" }).waitFor()
    await shot(page, "webhook-settings")

    await page.reload()
    await page.getByRole("button", { name: "Webhook Settings" }).click()
    await page.getByTestId("webhook-secret-last4").getByText(`…${webhookSecret.slice(-4)}`).waitFor()
    expect(await page.getByTestId("webhook-secret").count()).toBe(0)
    expect(await page.content()).not.toContain(webhookSecret)
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.webhookUrl).toBe(receiver.url("/events"))
    // The signature scheme: Standard Webhooks, saved with the URL, shown again after a reload.
    expect(await page.getByLabel("Signature scheme").inputValue()).toBe("service")
    await page.getByLabel("Signature scheme").selectOption("both")
    await page.getByRole("button", { name: "Save" }).click()
    await page.getByRole("status").getByText("Saved.").waitFor()
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.webhookSignatureScheme).toBe("both")
    await page.reload()
    await page.getByRole("button", { name: "Webhook Settings" }).click()
    expect(await page.getByLabel("Signature scheme").inputValue()).toBe("both")
    await page.getByRole("button", { name: "Webhook Settings" }).click()
  })

  it("Failover: the Error Fallback Settings dialog validates through the API and saves exactly what was entered", async () => {
    const failover = page.getByRole("button", { name: "Failover" })
    await failover.click()
    const dialog = page.getByRole("dialog", { name: "Error Fallback Settings" })
    await dialog.waitFor()
    // Focus moved into the dialog.
    expect(await dialog.evaluate((element) => element.contains(document.activeElement))).toBe(true)
    for (const label of ["Error Fallback Type", "Error Fallback Value", "Error Fallback Timeout", "Error Fallback Occurrence Threshold", "Error Fallback Time Window", "Agent Failover Timeout"]) {
      await dialog.getByLabel(label, { exact: true }).waitFor()
    }
    expect(await dialog.getByLabel("Error Fallback Timeout").inputValue()).toBe("0")
    expect(await dialog.getByLabel("Error Fallback Occurrence Threshold").inputValue()).toBe("5")
    expect(await dialog.getByLabel("Error Fallback Time Window").inputValue()).toBe("300")
    expect(await dialog.getByLabel("Agent Failover Timeout").inputValue()).toBe("5")
    await dialog.getByText("0 turns the no-response trigger off").waitFor()
    const value = dialog.getByLabel("Error Fallback Value")
    expect(await value.isDisabled()).toBe(true)

    await dialog.getByLabel("Error Fallback Type").selectOption({ label: "Phone" })
    expect(await value.isEnabled()).toBe(true)
    expect(await value.getAttribute("placeholder")).toContain("E.164")
    await value.fill("415-555-0100")
    await dialog.getByRole("button", { name: "Save" }).click()
    const valueError = dialog.locator(".field.invalid").filter({ has: page.getByLabel("Error Fallback Value") }).locator(".field-error")
    await valueError.getByText("must be a phone number in E.164 format, such as +14155550100").waitFor()
    expect(await value.getAttribute("aria-describedby")).toContain(await valueError.getAttribute("id"))
    await shot(page, "failover-error")

    // Agent Failover Timeout goes through the API's validation too (0 to 30).
    await value.fill("+14155550100")
    const failoverTimeout = dialog.getByLabel("Agent Failover Timeout")
    await failoverTimeout.fill("31")
    await dialog.getByRole("button", { name: "Save" }).click()
    const failoverError = dialog.locator(".field.invalid").filter({ has: page.getByLabel("Agent Failover Timeout") }).locator(".field-error")
    await failoverError.getByText("must be an integer from 0 to 30").waitFor()
    expect(await failoverTimeout.getAttribute("aria-describedby")).toContain(await failoverError.getAttribute("id"))
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.agentFailoverTimeout).toBe(5)

    await failoverTimeout.fill("12")
    await dialog.getByLabel("Error Fallback Timeout").fill("3")
    await dialog.getByLabel("Error Fallback Occurrence Threshold").fill("2")
    await dialog.getByLabel("Error Fallback Time Window").fill("120")
    await dialog.getByLabel("Transfer Failed Message").fill("Sorry, nobody could take your call.")
    await dialog.getByRole("button", { name: "Save" }).click()
    await dialog.getByRole("status").getByText("Saved.").waitFor()
    expect(await dialog.locator(".field-error").count()).toBe(0)
    const saved = (await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data
    expect(saved).toMatchObject({
      errorFallbackType: "phone",
      errorFallbackValue: "+14155550100",
      errorFallbackTimeout: 3,
      errorFallbackOccurrenceThreshold: 2,
      errorFallbackTimeWindow: 120,
      agentFailoverTimeout: 12,
      transferFailedMessage: "Sorry, nobody could take your call."
    })
    await page.getByTestId("fallback-summary").getByText("agent failover within 12 s").waitFor()
    await shot(page, "failover")

    // Escape closes it and focus returns to the button that opened it.
    await page.keyboard.press("Escape")
    await dialog.waitFor({ state: "hidden" })
    expect(await failover.evaluate((element) => element === document.activeElement)).toBe(true)
  })

  it("switching to Webhook shows the generated errorFallbackWebhookSecret, with Regenerate secret", async () => {
    await page.getByRole("button", { name: "Failover" }).click()
    const dialog = page.getByRole("dialog", { name: "Error Fallback Settings" })
    await dialog.getByLabel("Error Fallback Type").selectOption({ label: "Webhook" })
    expect(await dialog.getByLabel("Error Fallback Value").getAttribute("placeholder")).toContain("HTTPS")
    await dialog.getByLabel("Error Fallback Value").fill(receiver.url("/fallback"))
    await dialog.getByRole("button", { name: "Save" }).click()
    const shown = dialog.getByTestId("fallback-webhook-secret").locator(".secret-value")
    await shown.waitFor()
    const first = (await shown.textContent()) ?? ""
    expect(first).toMatch(/^whsec_/)
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.errorFallbackWebhookSecret).toBe(first)

    await dialog.getByRole("button", { name: "Regenerate secret" }).click()
    await dialog.getByRole("button", { name: "Regenerate now" }).click()
    await dialog.getByRole("status").getByText("A new error fallback webhook secret was generated").waitFor()
    await expect.poll(async () => shown.textContent()).not.toBe(first)
    const second = (await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.errorFallbackWebhookSecret
    expect(await shown.textContent()).toBe(second)
    await dialog.getByRole("button", { name: "Close", exact: true }).click()
    await dialog.waitFor({ state: "hidden" })
  })

  it("the dialog is operable by keyboard alone", async () => {
    const failover = page.getByRole("button", { name: "Failover" })
    const focusedText = () => page.evaluate(() => document.activeElement?.textContent?.trim() ?? "")
    await page.getByTestId("environment-name").click()
    // Tab to the Failover button.
    for (let i = 0; i < 40 && (await focusedText()) !== "Failover"; i++) await page.keyboard.press("Tab")
    expect(await focusedText()).toBe("Failover")
    await page.keyboard.press("Enter")
    const dialog = page.getByRole("dialog", { name: "Error Fallback Settings" })
    await dialog.waitFor()
    // Focus is on the first field: the type (Webhook now); one up is Phone.
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("fallback-type")
    await page.keyboard.press("ArrowUp")
    expect(await dialog.getByLabel("Error Fallback Type").inputValue()).toBe("phone")
    await page.keyboard.press("Tab")
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("fallback-value")
    await page.keyboard.press("ControlOrMeta+A")
    await page.keyboard.type("+14155550199")
    for (let i = 0; i < 20 && (await focusedText()) !== "Save"; i++) await page.keyboard.press("Tab")
    expect(await focusedText()).toBe("Save")
    await page.keyboard.press("Enter")
    await dialog.getByRole("status").getByText("Saved.").waitFor()
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data).toMatchObject({
      errorFallbackType: "phone",
      errorFallbackValue: "+14155550199"
    })
    // Tab stays inside the modal: from the last control it wraps to the first.
    for (let i = 0; i < 30; i++) {
      await page.keyboard.press("Tab")
      expect(await dialog.evaluate((element) => element.contains(document.activeElement))).toBe(true)
    }
    await page.keyboard.press("Escape")
    await dialog.waitFor({ state: "hidden" })
    expect(await failover.evaluate((element) => element === document.activeElement)).toBe(true)
  })

  it("Call Limits: maxConcurrentCalls is set through the API's validation and cleared back to no limit", async () => {
    await page.getByRole("button", { name: "Call Limits" }).click()
    const panel = page.locator("#call-limits")
    expect(await panel.getByLabel("Max Concurrent Calls").inputValue()).toBe("")
    await panel.getByLabel("Max Concurrent Calls").fill("0")
    await panel.getByRole("button", { name: "Save" }).click()
    await panel.locator(".field.invalid").getByText("must be an integer from 1 to 100000").waitFor()
    await panel.getByLabel("Max Concurrent Calls").fill("5")
    await panel.getByRole("button", { name: "Save" }).click()
    await page.getByTestId("limits-summary").getByText("5 calls; 10 outbound").waitFor()
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.maxConcurrentCalls).toBe(5)
    await panel.getByLabel("Max Concurrent Calls").fill("")
    await panel.getByRole("button", { name: "Save" }).click()
    await page.getByTestId("limits-summary").getByText("no limit; 10 outbound").waitFor()
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.maxConcurrentCalls).toBeNull()
    await page.getByRole("button", { name: "Call Limits" }).click()
  })

  it("Audio Format: the Telnyx stream codec and the agents' audio format are set from the environment page, at desktop and phone width", async () => {
    const stored = async () => (await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data
    await page.getByTestId("audio-summary").getByText("Telnyx PCMU; agents get the carrier's format").waitFor()
    for (const [width, height, name, codec, agentFormat, summary] of [
      [1280, 900, "desktop", "PCMA", "audio/x-mulaw;rate=8000", "Telnyx PCMA; agents get 8 kHz mu-law (transcoded)"],
      [390, 844, "phone", "L16;rate=16000", "carrier", "Telnyx L16;rate=16000; agents get the carrier's format"]
    ] as const) {
      await page.setViewportSize({ width, height })
      await page.getByRole("button", { name: "Audio Format" }).click()
      const panel = page.locator("#audio-format")
      await panel.getByText("Twilio calls are always 8 kHz mu-law").waitFor()
      const codecSelect = panel.getByLabel("Telnyx Stream Codec")
      // Every value the API takes, G.722 included.
      expect(await codecSelect.locator("option").evaluateAll((options: Array<any>) => options.map((o) => o.value))).toEqual([
        "PCMU",
        "PCMA",
        "L16;rate=8000",
        "L16;rate=16000",
        "G722"
      ])
      await codecSelect.selectOption(codec)
      await panel.getByLabel("Agent Audio Format").selectOption(agentFormat)
      // The form fits the width: no control runs off the screen.
      for (const control of [codecSelect, panel.getByLabel("Agent Audio Format"), panel.getByRole("button", { name: "Save" })]) {
        const box = await control.boundingBox()
        expect(box, `${name}: a control of the audio form is laid out`).not.toBeNull()
        expect(box!.x + box!.width, `${name}: the control fits in ${width} px`).toBeLessThanOrEqual(width)
      }
      await shot(page, `audio-format-${name}`)
      await panel.getByRole("button", { name: "Save" }).click()
      await panel.getByRole("status").getByText("Saved.").waitFor()
      await page.getByTestId("audio-summary").getByText(summary).waitFor()
      expect(await stored()).toMatchObject({ telnyxStreamCodec: codec, agentAudioFormat: agentFormat })
      await page.getByRole("button", { name: "Audio Format" }).click()
      await panel.waitFor({ state: "hidden" })
    }
    await page.setViewportSize({ width: 1280, height: 900 })
    // Back to the defaults for the calls that follow.
    await v1("PATCH", `/v1/agents/${agentId}/environments/${environmentId}`, { telnyxStreamCodec: "PCMU", agentAudioFormat: "carrier" })
    await page.getByTestId("audio-summary").getByText("Telnyx PCMU; agents get the carrier's format").waitFor()
  })

  it("a simulated call appears, with its turns and latencies, without a reload; its failed delivery is redelivered", async () => {
    await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true))
    agent = await startAnsweringAgent({ gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, reply, responseLatencyMs: 150 })
    await agent.ready()
    const call = await placeTwilioCall({ gatewayUrl: gateway.baseUrl, agentId, environmentId, from: "+15551110001", to: "+15551110002", streamVia: "gateway" })
    // While the call is live, the page shows it as active.
    const row = page.locator("tr[data-session]")
    await row.getByText("active").waitFor()
    for (const turn of [1, 2]) {
      const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
      expect(result.answer.answered, `turn ${turn}`).toBe(true)
    }
    await call.hangup()
    await row.getByTestId("turn-count").getByText("2", { exact: true }).waitFor()
    await row.getByText("completed").waitFor()
    const latencies = (await row.getByTestId("latencies").textContent()) ?? ""
    expect(latencies).toMatch(/^\d+ ms, \d+ ms$/)
    await page.getByTestId("count-completed").getByText("1", { exact: true }).waitFor()
    await page.getByTestId("latency-summary").getByText("2 answered turns").waitFor()
    expect(await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce)).toBe(true)
    await page.getByTestId("breaker").waitFor()
    await page.getByTestId("breaker-last-trip").getByText("never").waitFor()

    // session.ended was refused with 400 (not retried): the log shows it failed; Redeliver sends it again.
    const delivery = page.locator("tr[data-delivery]")
    await delivery.getByTestId("delivery-state").getByText("failed").waitFor()
    await delivery.getByTestId("delivery-code").getByText("400").waitFor()
    await shot(page, "environment")
    await delivery.getByRole("button", { name: "Redeliver" }).click()
    await delivery.getByTestId("delivery-state").getByText("delivered").waitFor()
    await delivery.getByTestId("delivery-attempts").getByText("2", { exact: true }).waitFor()
    await delivery.getByTestId("delivery-code").getByText("200").waitFor()
    expect(receiver.requests.length).toBe(2)
    expect(page.url()).not.toContain(ADMIN_KEY)

    // The session's own page: the turns chart with the timeout line, the fallback record, its deliveries.
    const sessionId = (await row.getAttribute("data-session"))!
    await row.getByRole("link").first().click()
    await page.getByTestId("turns").locator("tbody tr").nth(1).waitFor()
    await page.locator(".chart canvas").first().waitFor()
    await page.getByText("The error fallback did not run.").waitFor()
    // One agent held the call: one leg, on the one instance, ended with the session; no failover.
    const legs = page.getByTestId("agent-legs").locator("tbody tr")
    await legs.first().waitFor()
    expect(await legs.count()).toBe(1)
    const stored = (await v1("GET", `/v1/agents/${agentId}/sessions/${sessionId}`)).json.data
    expect(stored.agentLegs).toHaveLength(1)
    expect(await legs.first().locator("td").nth(4).textContent()).toBe(stored.agentLegs[0].instanceId)
    expect(await legs.first().locator("td").nth(3).textContent()).toBe(stored.agentLegs[0].endReason ?? "—")
    await page.getByTestId("agent-failovers").getByText("No failover: one agent held the call.").waitFor()
    await page.getByTestId("deliveries").getByText("delivered").waitFor()
    await shot(page, "session")
  })

  it("a call whose agent vanished and another took over shows both agent legs and 1 failover", async () => {
    const created = await v1("POST", `/v1/agents/${agentId}/environments`, { name: "failover line" })
    const failoverEnv = created.json.data.id as string
    // The first agent: a bare socket, the oldest idle one, so it takes the call; it vanishes mid-call.
    const first = new WebSocket(`${gateway.baseUrl.replace(/^http/, "ws")}/v1/agents/${agentId}/environments/${failoverEnv}/connect`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` }
    })
    first.on("error", () => {})
    const started = new Promise<string>((resolve) =>
      first.on("message", (data) => {
        const message = JSON.parse(data.toString())
        if (message.event === "start") resolve(message.start.customParameters.sessionId)
      })
    )
    await new Promise((resolve) => first.once("open", resolve))
    const second = await startAnsweringAgent({ gatewayUrl: gateway.baseUrl, agentId, environmentId: failoverEnv, apiKey: ADMIN_KEY, reply, responseLatencyMs: 150 })
    try {
      await second.ready()
      const taken = new Promise((resolve) => second.once("call", resolve))
      const call = await placeTwilioCall({ gatewayUrl: gateway.baseUrl, agentId, environmentId: failoverEnv, from: "+15551110001", to: "+15551110002", streamVia: "gateway" })
      const sessionId = await started
      first.terminate()
      await taken
      await call.hangup()
      await page.goto(`${gateway.baseUrl}/dashboard#/agents/${encodeURIComponent(agentId)}/sessions/${encodeURIComponent(sessionId)}`)
      await page.getByTestId("agent-failovers").getByText("1 failover: the call moved to another agent.").waitFor()
      const legs = page.getByTestId("agent-legs").locator("tbody tr")
      await legs.nth(1).locator("td").nth(2).filter({ hasNotText: "holding the call" }).waitFor()
      expect(await legs.count()).toBe(2)
      expect(await legs.first().locator("td").nth(3).textContent()).toBe("agent_disconnected")
      const stored = (await v1("GET", `/v1/agents/${agentId}/sessions/${sessionId}`)).json.data
      expect(stored.agentFailovers).toBe(1)
      for (const n of [0, 1]) expect(await legs.nth(n).locator("td").nth(4).textContent()).toBe(stored.agentLegs[n].instanceId)
      await shot(page, "session-failover")
    } finally {
      first.terminate()
      await second.close()
    }
  })

  it("Recording: switched on from the environment page; a recorded call's session page plays its WAV", async () => {
    const href = (...parts: Array<string>) => `#/${parts.map(encodeURIComponent).join("/")}`
    await page.goto(`${gateway.baseUrl}/dashboard${href("agents", agentId, "environments", environmentId)}`)
    await page.getByLabel("Recording").selectOption("on")
    for (let tries = 0; tries < 200 && (await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.recording !== "on"; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect((await v1("GET", `/v1/agents/${agentId}/environments/${environmentId}`)).json.data.recording).toBe("on")
    const call = await placeTwilioCall({ gatewayUrl: gateway.baseUrl, agentId, environmentId, streamVia: "gateway" })
    const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
    expect(result.answer.answered).toBe(true)
    await call.hangup()
    let recorded: { id: string; recording?: { durationMs: number } } | undefined
    for (let tries = 0; tries < 400 && recorded?.recording === undefined; tries++) {
      const sessions = (await v1("GET", `/v1/agents/${agentId}/sessions?limit=1`)).json.data.sessions
      recorded = sessions[0]
      if (recorded?.recording === undefined) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(recorded?.recording?.durationMs).toBeGreaterThan(2000)
    await page.goto(`${gateway.baseUrl}/dashboard${href("agents", agentId, "sessions", recorded!.id)}`)
    const audio = page.getByTestId("recording").locator("audio")
    await audio.waitFor()
    // chromium decodes the WAV: its duration is the recording's.
    const duration = await audio.evaluate(
      // The page's own HTMLAudioElement (the test's TypeScript has no DOM types).
      (element: any) =>
        new Promise<number>((resolve) => {
          if (element.readyState >= 1) return resolve(element.duration)
          element.addEventListener("loadedmetadata", () => resolve(element.duration), { once: true })
        })
    )
    expect(Math.round(duration * 1000)).toBe(recorded!.recording!.durationMs)
    await page.getByTestId("recording").getByText("caller left, agent right").waitFor()
  })

  it("tables break no word at desktop or phone width; breadcrumb, counts, trip line and an unknown environment read right", async () => {
    /** Words of table cells (and headers) that the layout split over two lines: none may be. */
    const brokenWords = () =>
      page.evaluate(() => {
        const broken: Array<string> = []
        for (const cell of document.querySelectorAll("table.list th, table.list td")) {
          const walker = document.createTreeWalker(cell, 4 /* NodeFilter.SHOW_TEXT */)
          for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {
            for (const match of (node.textContent as string).matchAll(/\S+/g)) {
              const range = document.createRange()
              range.setStart(node, match.index)
              range.setEnd(node, match.index + match[0].length)
              const lines = new Set([...range.getClientRects()].map((rect: any) => Math.round(rect.top)))
              if (lines.size > 1) broken.push(match[0])
            }
          }
        }
        return broken
      })
    const environmentUrl = `${gateway.baseUrl}/dashboard#/agents/${agentId}/environments/${environmentId}`
    for (const [width, height, name] of [
      [1280, 900, "desktop"],
      [390, 844, "phone"]
    ] as const) {
      await page.setViewportSize({ width, height })
      await page.goto(environmentUrl)
      await page.locator("tr[data-session]").first().waitFor()
      await page.locator("tr[data-delivery]").first().waitFor()
      expect(await brokenWords(), `environment page, ${name}`).toEqual([])
      await shot(page, `environment-${name}`)
      await page.goto(`${gateway.baseUrl}/dashboard#/agents/${agentId}`)
      await page.getByTestId("environments").waitFor()
      await page.locator("tr[data-session]").first().waitFor()
      expect(await brokenWords(), `agent page, ${name}`).toEqual([])
      await shot(page, `agent-${name}`)
    }
    await page.setViewportSize({ width: 1280, height: 900 })

    // The Environments breadcrumb leads to the agent's list of environments, not just its page.
    await page.goto(environmentUrl)
    const crumb = page.getByRole("navigation", { name: "Breadcrumb" }).getByRole("link", { name: "Environments" })
    expect(await crumb.getAttribute("href")).toBe(`#/agents/${agentId}/environments`)
    await crumb.click()
    await page.getByTestId("environments").waitFor()
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("environments")

    // Rescued counts only fallbacks that took the caller over; this environment's calls had none.
    await page.goto(environmentUrl)
    await page.locator("tr[data-session]").first().waitFor()
    expect(await page.getByTestId("count-rescued").textContent()).toBe("0")
    expect(await page.getByTestId("count-rescue-failed").textContent()).toBe("0")

    // The breaker's last trip names its session with a space between ("session ses_..."): served a trip to read.
    await page.route("**/breaker", (route) =>
      route.fulfill({
        contentType: "application/json",
        body: JSON.stringify({
          data: {
            noResponseTrigger: "on",
            timeoutSeconds: 8,
            threshold: 3,
            windowSeconds: 120,
            occurrences: 3,
            newestOccurrenceAt: new Date().toISOString(),
            lastTrip: { at: new Date().toISOString(), sessionId: "ses_trippedcall01", count: 3, threshold: 3 }
          }
        })
      })
    )
    await page.goto(environmentUrl)
    await page.getByTestId("breaker-last-trip").getByText("ses_trippedcall01").waitFor()
    const tripLine = (await page.getByTestId("breaker-last-trip").textContent()) ?? ""
    expect(tripLine).toMatch(/, session ses_trippedcall01\)/)
    expect(tripLine).not.toContain("sessionses_")
    await page.unroute("**/breaker")

    // An environment id that does not exist says so, instead of "Loading…" for ever.
    const before = problems.length
    await page.goto(`${gateway.baseUrl}/dashboard#/agents/${agentId}/environments/${MISSING_ENVIRONMENT}`)
    await page.getByTestId("environment-not-found").waitFor()
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe("Environment not found")
    expect(await page.getByText("Loading…").count()).toBe(0)
    // chromium logs the API's 404s as failed resource loads: expected here, and nothing else.
    const logged = problems.splice(before)
    expect(logged.filter((line) => !/Failed to load resource: the server responded with a status of 404/.test(line))).toEqual([])
  })

  it("renders an environment named like markup as text and runs no script", async () => {
    await page.goto(`${gateway.baseUrl}/dashboard#/agents/${agentId}`)
    await page.getByLabel("Environment name").fill(XSS_NAME)
    await page.getByRole("button", { name: "Create environment" }).click()
    const link = page.getByRole("link", { name: XSS_NAME, exact: true })
    await link.waitFor()
    expect(await link.textContent()).toBe(XSS_NAME)
    expect(await page.locator("img").count()).toBe(0)
    await shot(page, "agent")
    await link.click()
    await page.getByTestId("environment-name").getByText(XSS_NAME, { exact: true }).waitFor()
    expect(await page.locator("img").count()).toBe(0)
    expect(problems.filter((problem) => problem.startsWith("dialog"))).toEqual([])
  })

  it("a scoped key sees only its agent, and the dashboard says so", async () => {
    const created = await v1("POST", "/v1/api-keys", { name: "scoped dashboard key", agentIds: [otherAgentId] })
    expect(created.status).toBe(201)
    scopedKey = created.json.data.key
    expect((await v1("POST", `/v1/agents/${otherAgentId}/environments`, { name: "Scoped env" })).status).toBe(201)

    const scoped = await context.newPage()
    watch(scoped)
    await signIn(scoped, scopedKey)
    await scoped.getByTestId("scope").getByText(`Scoped key: only ${otherAgentId}`).waitFor()
    await scoped.getByTestId("scope-notice").waitFor()
    await scoped.getByRole("link", { name: otherAgentId }).waitFor()
    expect(await scoped.getByTestId("agents").locator("tbody tr").count()).toBe(1)
    expect(await scoped.getByRole("link", { name: agentId }).count()).toBe(0)
    await shot(scoped, "agents-scoped")
    // Another agent's page is refused by the API, and says so.
    await scoped.goto(`${gateway.baseUrl}/dashboard#/agents/${agentId}`)
    await scoped.getByText("This API key may not act for this agent.").first().waitFor()
    await scoped.close()

    // The admin sees both.
    await page.goto(`${gateway.baseUrl}/dashboard#/agents`)
    await page.getByRole("link", { name: agentId }).waitFor()
    await page.getByRole("link", { name: otherAgentId }).waitFor()
    await shot(page, "agents")
  })

  it("Sign out forgets the key; no key ever went into a URL or a log line; no script error or CSP violation", async () => {
    await page.getByRole("button", { name: "Sign out" }).click()
    await page.getByLabel("API key").waitFor()
    expect(await page.evaluate(() => sessionStorage.getItem("callgate.apiKey"))).toBeNull()
    for (const url of requestedUrls) {
      expect(url).not.toContain(ADMIN_KEY)
      expect(url).not.toContain(scopedKey)
    }
    expect(gateway.stdout() + gateway.stderr()).not.toContain(ADMIN_KEY)
    expect(gateway.stdout() + gateway.stderr()).not.toContain(scopedKey)
    // The API's deliberate refusals (validation errors, the scoped key on another agent) are logged
    // by chromium as failed loads; nothing else may appear.
    expect(problems.filter((problem) => !/Failed to load resource: the server responded with a status of 40[03]/.test(problem))).toEqual([])
  })
})
