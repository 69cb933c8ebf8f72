/**
 * Debian's nginx in front of a callgate fleet, configured by deploy/nginx/callgate.conf moved onto
 * loopback (docs/scaling.md, "The load balancer"). Shared by the fleet's end-to-end tests
 * (test/fleet/) and the benchmark's fleet part (bench/fleet.ts).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, repoRoot, track } from "./benchProcess.js"

export interface Nginx {
  /** The master process (its workers are its children). */
  readonly pid: number
  readonly port: number
  readonly baseUrl: string
  readonly config: string
  readonly errorLog: () => string
  readonly stop: () => Promise<void>
}

/** Debian's nginx binary; fails loudly when missing (`.ci/run` installs it): nginx tests are never skipped. */
const nginxBinary = () => {
  for (const candidate of ["/usr/sbin/nginx", "nginx"]) {
    if (spawnSync(candidate, ["-v"]).status === 0) return candidate
  }
  throw new Error("nginx is not installed: install it (apt-get install nginx)")
}

export interface NginxOptions {
  /** nginx's `worker_processes` (default 1; the deployed configuration says `auto`). */
  readonly workerProcesses?: number | "auto"
  /** Run nginx (master and workers) on these cores only (`taskset -c`), e.g. "2-3". */
  readonly cpus?: string
  /** The port nginx listens on (127.0.0.1); default a free one. */
  readonly port?: number
}

/**
 * The fleet's nginx configuration exactly as deploy/nginx/callgate.conf has it, moved onto
 * loopback: each `server callgate-N:8080` becomes the N-th instance's 127.0.0.1 port, `listen 80`
 * a free port, and the paths nginx writes go to a private directory. Instances the configuration
 * names beyond those started (callgate-2 and -3 for a fleet of one) are left out: their line in
 * `callgate_fleet`, their `upstream` block and their line in the map.
 */
export const fleetNginxConfig = (instancePorts: ReadonlyArray<number>, listenPort: number, dir: string, options: NginxOptions = {}): string => {
  let config = readFileSync(join(repoRoot, "deploy/nginx/callgate.conf"), "utf8")
  instancePorts.forEach((port, i) => {
    if (!config.includes(`server callgate-${i + 1}:8080`)) throw new Error(`deploy/nginx/callgate.conf names no instance callgate-${i + 1}`)
    config = config.replaceAll(`server callgate-${i + 1}:8080`, `server 127.0.0.1:${port}`)
  })
  for (const unused of new Set([...config.matchAll(/server (callgate-\d+):8080/g)].map((m) => m[1]!))) {
    config = config
      .split("\n")
      .filter((line) => !line.includes(`server ${unused}:8080`) && !new RegExp(`^\\s+${unused} ${unused};$`).test(line))
      .join("\n")
  }
  config = config.replace(/listen 80;/, `listen 127.0.0.1:${listenPort};`)
  config = config.replace(
    /^http \{$/m,
    [
      "http {",
      `    client_body_temp_path ${dir}/body;`,
      `    proxy_temp_path ${dir}/proxy;`,
      `    fastcgi_temp_path ${dir}/fastcgi;`,
      `    uwsgi_temp_path ${dir}/uwsgi;`,
      `    scgi_temp_path ${dir}/scgi;`
    ].join("\n")
  )
  return config.replace(/^worker_processes auto;$/m, `worker_processes ${options.workerProcesses ?? 1};`)
}

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/** Starts nginx in the foreground (`daemon off`) in front of the instances on `instancePorts`. */
export const startFleetNginx = async (instancePorts: ReadonlyArray<number>, options: NginxOptions = {}): Promise<Nginx> => {
  const binary = nginxBinary()
  const port = options.port ?? (await freePort())
  const dir = mkdtempSync(join(tmpdir(), "callgate-nginx-"))
  for (const sub of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(dir, sub))
  const config = fleetNginxConfig(instancePorts, port, dir, options)
  const file = join(dir, "nginx.conf")
  writeFileSync(file, config)
  const errorLog = join(dir, "error.log")
  // As root (CI containers), workers would run as nobody and could not use the private directory.
  const user = process.getuid?.() === 0 ? "user root; " : ""
  const globals = `${user}daemon off; master_process on; pid ${dir}/nginx.pid; error_log ${errorLog} warn;`
  const check = spawnSync(binary, ["-t", "-q", "-e", errorLog, "-p", dir, "-c", file, "-g", globals], { encoding: "utf8" })
  if (check.status !== 0) throw new Error(`nginx refused the configuration: ${check.stderr}`)
  const args = ["-e", errorLog, "-p", dir, "-c", file, "-g", globals]
  const child: ChildProcess = track(
    options.cpus === undefined
      ? spawn(binary, args, { stdio: ["ignore", "ignore", "pipe"] })
      : spawn("taskset", ["-c", options.cpus, binary, ...args], { stdio: ["ignore", "ignore", "pipe"] })
  )
  let stderr = ""
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const deadline = Date.now() + 15_000
  while (!(await listening(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL")
      throw new Error(`nginx did not start: ${stderr}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const readLog = () => {
    try {
      return readFileSync(errorLog, "utf8")
    } catch {
      return ""
    }
  }
  return {
    pid: child.pid!,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    config,
    errorLog: readLog,
    stop: () =>
      new Promise<void>((resolve) => {
        const done = () => {
          rmSync(dir, { recursive: true, force: true })
          resolve()
        }
        if (child.exitCode !== null) return done()
        child.once("exit", done)
        // SIGQUIT: graceful; SIGTERM: fast shutdown (open WebSockets are closed at once).
        child.kill("SIGTERM")
      })
  }
}
