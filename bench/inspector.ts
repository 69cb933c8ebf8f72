/**
 * Memory of a process under test, read through its inspector (`--inspect=127.0.0.1:0`): a full
 * garbage collection first, then `process.memoryUsage()` and the RSS. Without the collection, RSS
 * swings by tens of megabytes with V8's heap sizing and says nothing about what one call costs.
 * The collection pauses the process, so the benchmark asks only outside its measurement windows.
 */
import { join } from "node:path"
import { WebSocket } from "ws"
import { rssBytesOf } from "./benchProcess.js"

/** Node flag that opens the inspector on a free loopback port. */
export const INSPECT_FLAG = "--inspect=127.0.0.1:0"

/** Resolves with the inspector's ws:// URL as the process prints it on stderr. */
export const inspectorUrlFrom = (stderr: NodeJS.ReadableStream) => {
  const url = new Promise<string>((resolve, reject) => {
    let text = ""
    const timer = setTimeout(() => reject(new Error("the process did not open its inspector")), 30_000)
    const onData = (chunk: Buffer | string) => {
      text += chunk.toString()
      const match = /Debugger listening on (ws:\/\/\S+)/.exec(text)
      if (match) {
        clearTimeout(timer)
        stderr.off("data", onData)
        resolve(match[1]!)
      }
    }
    stderr.on("data", onData)
  })
  // Awaited later (after the process is healthy); a failure then is reported there, not as unhandled.
  url.catch(() => {})
  return url
}

export interface MemoryReading {
  readonly rssBytes: number
  /** V8 heap in use plus memory outside it (Buffers, ArrayBuffers), after a full collection. */
  readonly heapUsedBytes: number
  readonly externalBytes: number
  /**
   * What of the heap is V8's code: compiled code and bytecode with their metadata
   * (`v8.getHeapCodeStatistics()`). It grows and shrinks as V8 compiles, tiers up and flushes
   * functions, whatever the number of calls; 0 when the process cannot say.
   */
  readonly codeBytes: number
}

/** Heap snapshots taken so far, per pid (BENCH_SNAPSHOT_DIR). */
const snapshotCount = new Map<number, number>()

/** Collects garbage in the process behind `inspectorUrl`, then reads its memory. */
export const measureMemory = (inspectorUrl: string, pid: number): Promise<MemoryReading> =>
  new Promise((resolve, reject) => {
    const ws = new WebSocket(inspectorUrl)
    const pending = new Map<number, (result: any) => void>()
    let nextId = 1
    const call = (method: string, params: object = {}) =>
      new Promise<any>((done) => {
        const id = nextId++
        pending.set(id, done)
        ws.send(JSON.stringify({ id, method, params }))
      })
    const timer = setTimeout(() => {
      ws.terminate()
      reject(new Error("no answer from the inspector within 30 s"))
    }, 30_000)
    ws.on("message", (data) => {
      const message = JSON.parse(data.toString()) as { id?: number; result?: unknown }
      if (message.id !== undefined) pending.get(message.id)?.(message.result)
    })
    ws.once("error", (error) => {
      clearTimeout(timer)
      reject(error)
    })
    ws.once("open", async () => {
      try {
        await call("HeapProfiler.collectGarbage")
        await call("HeapProfiler.collectGarbage")
        const evaluated = await call("Runtime.evaluate", { expression: "JSON.stringify(process.memoryUsage())", returnByValue: true })
        const usage = JSON.parse(evaluated.result.value as string) as { heapUsed: number; external: number }
        const rssBytes = rssBytesOf(pid)
        // process.getBuiltinModule: Node 20.16 and later; without it the code is not told apart.
        const code = await call("Runtime.evaluate", {
          expression:
            "(() => { const v8 = process.getBuiltinModule?.('v8'); if (v8 === undefined) return 0; " +
            "const s = v8.getHeapCodeStatistics(); return s.code_and_metadata_size + s.bytecode_and_metadata_size })()",
          returnByValue: true
        })
        const snapshots = process.env.BENCH_SNAPSHOT_DIR
        if (snapshots !== undefined && snapshots !== "") {
          // A heap snapshot at every reading (docs/benchmarks.md, "Memory per call"), named by pid and reading.
          const count = (snapshotCount.get(pid) ?? 0) + 1
          snapshotCount.set(pid, count)
          const file = join(snapshots, `${pid}-${count}.heapsnapshot`)
          await call("Runtime.evaluate", { expression: `process.getBuiltinModule("v8").writeHeapSnapshot(${JSON.stringify(file)})`, returnByValue: true })
        }
        clearTimeout(timer)
        ws.close()
        resolve({ rssBytes, heapUsedBytes: usage.heapUsed, externalBytes: usage.external, codeBytes: Number(code.result?.value) || 0 })
      } catch (error) {
        clearTimeout(timer)
        ws.terminate()
        reject(error)
      }
    })
  })
