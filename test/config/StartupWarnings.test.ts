import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { ConfigProvider, Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { AppConfig } from "../../src/config/AppConfig.js"
import { isKnownVariable, lookalikeVariables, startupWarnings } from "../../src/config/StartupWarnings.js"
import { spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { repoRoot } from "../support/gatewayProcess.js"

const config = (env: Record<string, string>) =>
  Effect.runPromise(
    AppConfig.pipe(Effect.provide(AppConfig.Default), Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))
  )

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry)
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : []
  })

describe("start-up warnings", () => {
  it("warn about the published admin key only when callgate listens beyond loopback", async () => {
    const published = await config({ ADMIN_API_KEY: "dev-admin-key-change-me" })
    for (const host of ["0.0.0.0", "::", "10.0.0.5"]) {
      expect(startupWarnings(published, host, {}).join("\n")).toContain(`ADMIN_API_KEY is the example key published in callgate's documentation and callgate listens on ${host}`)
    }
    for (const host of ["127.0.0.1", "::1"]) expect(startupWarnings(published, host, {})).toEqual([])
    const secret = await config({ ADMIN_API_KEY: "a-long-random-admin-key-nobody-knows" })
    expect(startupWarnings(secret, "0.0.0.0", {})).toEqual([])
  })

  it("warn about each address protection turned off", async () => {
    const open = await config({ ADMIN_API_KEY: "a-long-random-admin-key-nobody-knows", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", AGENT_ALLOW_PRIVATE_NETWORKS: "true" })
    const warnings = startupWarnings(open, "127.0.0.1", {})
    expect(warnings).toHaveLength(2)
    expect(warnings[0]).toMatch(/^WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: .*SSRF protection is off/)
    expect(warnings[1]).toMatch(/^AGENT_ALLOW_PRIVATE_NETWORKS=true: .*SSRF protection is off/)
  })

  it("name unknown variables that look like callgate's, with the closest known name, and leave the machine's own alone", () => {
    const env = {
      REDIS_ULR: "redis://x",
      WEBHOOK_ALLOW_PRIVATE_NETWORK: "true",
      TWILLIO_AUTH_TOKEN: "x",
      TWILIO_REGION: "ie1",
      ADMIN_API_KEYS: "x",
      // The machine's and the tools' own: never reported.
      HOME: "/root",
      HOSTNAME: "box",
      PATH: "/bin",
      HTTP_PROXY: "http://proxy",
      NODE_ENV: "production",
      LANG: "C.UTF-8",
      CALLGATE_API_KEY: "for the example agents",
      npm_config_cache: "/tmp",
      REDIS_URL: "redis://ok",
      LOG_LEVEL: "info"
    }
    expect(lookalikeVariables(env)).toEqual([
      { name: "ADMIN_API_KEYS", suggestion: "ADMIN_API_KEY" },
      { name: "REDIS_ULR", suggestion: "REDIS_URL" },
      { name: "TWILIO_REGION", suggestion: undefined },
      { name: "TWILLIO_AUTH_TOKEN", suggestion: "TWILIO_AUTH_TOKEN" },
      { name: "WEBHOOK_ALLOW_PRIVATE_NETWORK", suggestion: "WEBHOOK_ALLOW_PRIVATE_NETWORKS" }
    ])
  })

  it("know every variable the sources read (add a new one without a default to VARIABLES_WITHOUT_DEFAULT)", () => {
    const read = new Set<string>()
    for (const file of sourceFiles(join(repoRoot, "src"))) {
      const text = readFileSync(file, "utf8")
      for (const match of text.matchAll(/Config\.[a-zA-Z]+\(\s*"([A-Z][A-Z0-9_]+)"/g)) read.add(match[1]!)
      if (file.endsWith("AppConfig.ts")) for (const match of text.matchAll(/\(\s*\[?"([A-Z][A-Z0-9_]+)"/g)) read.add(match[1]!)
    }
    expect([...read].filter((name) => !isKnownVariable(name))).toEqual([])
  })

  it("reach the log of a started gateway", async () => {
    const gateway = await spawnGateway({ ADMIN_API_KEY: "startup-warnings-admin-key", AGENT_ALLOW_PRIVATE_NETWORKS: "true", REDIS_ULR: "redis://127.0.0.1:1" })
    try {
      await waitForHealthy(gateway)
      // Logged right after listening, with the "callgate listening" line.
      while (!gateway.stdout().includes("REDIS_ULR")) await new Promise((resolve) => setTimeout(resolve, 50))
      const warnings = gateway
        .stdout()
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line) as { level: string; msg: string })
        .filter((line) => line.level === "warn")
        .map((line) => line.msg)
      expect(warnings).toContain("REDIS_ULR is set but callgate does not read it: did you mean REDIS_URL?")
      expect(warnings.some((msg) => msg.startsWith("AGENT_ALLOW_PRIVATE_NETWORKS=true"))).toBe(true)
      expect(warnings.some((msg) => msg.startsWith("ADMIN_API_KEY is the example key"))).toBe(false)
    } finally {
      await gateway.stop()
    }
  }, 120_000)
})
