import { readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { defaults } from "../../config/defaults.js"
import { repoRoot } from "../support/gatewayProcess.js"

const read = (path: string) => readFileSync(join(repoRoot, path), "utf8")

/** Every variable AppConfig reads, from its source, and every one with a default. */
const configVariables = () => {
  const read_ = [...read("src/config/AppConfig.ts").matchAll(/\(\s*\[?"([A-Z][A-Z0-9_]+)"/g)].map((match) => match[1]!)
  return [...new Set([...Object.keys(defaults), ...read_])]
}

describe("deploy/", () => {
  it(".env.example lists every variable, each with a comment above it", () => {
    const lines = read("deploy/.env.example").split("\n")
    for (const variable of configVariables()) {
      const at = lines.findIndex((line) => new RegExp(`^(# )?${variable}=`).test(line))
      expect(at, `deploy/.env.example has no line for ${variable}`).toBeGreaterThan(0)
      let above = at - 1
      while (above > 0 && /^# [A-Z][A-Z0-9_]*=/.test(lines[above]!)) above--
      expect(lines[above], `${variable} has a comment`).toMatch(/^# /)
    }
  })

  it("docker-compose.yml runs Redis, nginx and three instances whose ids are nginx's /i/ routes", () => {
    const compose = read("deploy/docker-compose.yml")
    const nginx = read("deploy/nginx/callgate.conf")
    for (const service of ["redis:", "nginx:", "callgate-1:", "callgate-2:", "callgate-3:"]) expect(compose).toContain(`  ${service}`)
    for (const id of ["callgate-1", "callgate-2", "callgate-3"]) {
      expect(compose).toContain(`INSTANCE_ID: ${id}`)
      expect(compose).toMatch(new RegExp(`PUBLIC_URL: \\$\\{PUBLIC_HOST[^}]*\\}/i/${id}`))
      expect(nginx).toContain(`upstream ${id} { server ${id}:8080; }`)
      expect(nginx).toMatch(new RegExp(`^\\s+${id} ${id};$`, "m"))
    }
  })

  it("the instances trust nginx's fixed address for X-Forwarded-For, and nginx sends it", () => {
    const compose = read("deploy/docker-compose.yml")
    const nginxAddress = /ipv4_address: (\S+)/.exec(compose)?.[1]
    expect(nginxAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/)
    expect([...compose.matchAll(/^\s+TRUSTED_PROXIES: (\S+)$/gm)].map((m) => m[1])).toEqual([nginxAddress, nginxAddress, nginxAddress])
    const nginx = read("deploy/nginx/callgate.conf")
    expect(nginx.match(/proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;/g)?.length).toBe(2)
  })
})
