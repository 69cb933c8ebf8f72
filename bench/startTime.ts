/**
 * How long `npm start` takes on a built, up-to-date tree: from spawning `npm start` to the first
 * `/healthz` answer, over a few runs (docs/benchmarks.md, "Start-up time"). Builds first when the
 * tree is stale, and that first start is not counted.
 *
 *   npm run bench:start            # 5 runs
 *   npm run bench:start -- --runs 10
 */
import { spawn } from "node:child_process"
import { createServer } from "node:net"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const runsIndex = process.argv.indexOf("--runs")
const runs = runsIndex > 0 ? Number(process.argv[runsIndex + 1]) : 5

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/** One `npm start`: milliseconds until /healthz answers, and whether it built. */
const startOnce = async (): Promise<{ ms: number; built: boolean }> => {
  const port = await freePort()
  const startedAt = performance.now()
  const child = spawn("npm", ["start", "--silent"], {
    cwd: root,
    env: { ...process.env, ADMIN_API_KEY: "bench-start-admin-key", PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "warn" },
    stdio: ["ignore", "ignore", "pipe"],
    detached: true
  })
  let stderr = ""
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`npm start exited: ${stderr}`)
      const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)
      if (ok) return { ms: performance.now() - startedAt, built: stderr.includes("building") }
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  } finally {
    // npm and the node it started: the whole process group.
    try {
      process.kill(-child.pid!, "SIGTERM")
    } catch {
      // already gone
    }
    await exited
  }
}

const first = await startOnce()
if (first.built) process.stdout.write(`first start built the tree (${first.ms.toFixed(0)} ms, not counted)\n`)
const times: Array<number> = first.built ? [] : [first.ms]
while (times.length < runs) {
  const run = await startOnce()
  if (run.built) throw new Error("the tree was rebuilt between two starts: a source changed meanwhile")
  times.push(run.ms)
}
times.sort((a, b) => a - b)
const median = times[Math.floor(times.length / 2)]!
process.stdout.write(
  `npm start on an up-to-date tree, ${times.length} runs: median ${median.toFixed(0)} ms, min ${times[0]!.toFixed(0)} ms, max ${times.at(-1)!.toFixed(0)} ms (goal < 3000 ms)\n`
)
