import { randomBytes } from "node:crypto"
import { open, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises"
import { join } from "node:path"
import type { RecordingPause } from "./CallRecording.js"
import { dataBytesOf, durationMsOf, HEADER_BYTES, sampleRateOf, wavHeader } from "./Wav.js"

/**
 * A recording on disk (docs/recording.md, "Storage"): `DIR/<agentId>/<sessionId>.wav` and its
 * sidecar `DIR/<agentId>/<sessionId>.json` (this metadata). The sidecar says whether the WAV is
 * still being written; a crash leaves "recording", and whoever finishes the file (the next start,
 * or the sweep of any instance) sets the header's sizes from what was written.
 */
export interface RecordingMeta {
  readonly sessionId: string
  readonly agentId: string
  readonly environmentId: string
  /** The instance that recorded the call. */
  readonly instanceId: string
  readonly startedAt: string
  readonly state: "recording" | "complete"
  readonly durationMs: number | null
  readonly pauses: ReadonlyArray<RecordingPause>
  /** Uploaded to the bucket (RECORDINGS_S3_URL); the local copy is removed once it is. */
  readonly uploaded?: boolean
}

export interface RecordingPaths {
  readonly wav: string
  readonly meta: string
}

export const pathsOf = (dir: string, agentId: string, sessionId: string): RecordingPaths => ({
  wav: join(dir, agentId, `${sessionId}.wav`),
  meta: join(dir, agentId, `${sessionId}.json`)
})

/** Object names in the bucket: the same layout. */
export const objectNamesOf = (agentId: string, sessionId: string) => ({ wav: `${agentId}/${sessionId}.wav`, meta: `${agentId}/${sessionId}.json` })

/** Written to a temporary file and renamed: a crash never leaves half a sidecar. */
export const writeMeta = async (path: string, meta: RecordingMeta): Promise<void> => {
  const temporary = `${path}.${randomBytes(4).toString("hex")}.tmp`
  await writeFile(temporary, JSON.stringify(meta))
  await rename(temporary, path)
}

export const readMeta = async (path: string): Promise<RecordingMeta | undefined> => {
  try {
    const value = JSON.parse(await readFile(path, "utf8")) as RecordingMeta
    return typeof value === "object" && value !== null && typeof value.sessionId === "string" ? value : undefined
  } catch {
    return undefined
  }
}

/**
 * Finishes a WAV file: cut to `dataBytes` of audio (what the file holds, when undefined), the
 * header's sizes set (its sample rate kept: the call's), synced. Returns the audio's duration in ms.
 */
export const finishWav = async (path: string, dataBytes?: number): Promise<number> => {
  const handle = await open(path, "r+")
  try {
    const bytes = dataBytes ?? dataBytesOf((await handle.stat()).size)
    const { buffer: header } = await handle.read(Buffer.alloc(HEADER_BYTES), 0, HEADER_BYTES, 0)
    const sampleRate = sampleRateOf(header)
    await handle.truncate(HEADER_BYTES + bytes)
    await handle.write(wavHeader(bytes, sampleRate), 0, HEADER_BYTES, 0)
    await handle.sync()
    return durationMsOf(bytes, sampleRate)
  } finally {
    await handle.close()
  }
}

/** Every sidecar under `dir`, with its path and the WAV's last change (undefined when the WAV is gone). */
export const listRecordings = async (
  dir: string
): Promise<Array<{ readonly meta: RecordingMeta; readonly paths: RecordingPaths; readonly wavChangedAt: number | undefined }>> => {
  const found: Array<{ meta: RecordingMeta; paths: RecordingPaths; wavChangedAt: number | undefined }> = []
  let agents: Array<string>
  try {
    agents = await readdir(dir)
  } catch {
    return found
  }
  for (const agentId of agents) {
    let names: Array<string>
    try {
      names = await readdir(join(dir, agentId))
    } catch {
      continue
    }
    for (const name of names) {
      if (!name.endsWith(".json")) continue
      const paths = pathsOf(dir, agentId, name.slice(0, -".json".length))
      const meta = await readMeta(paths.meta)
      if (meta === undefined) continue
      const changed = await stat(paths.wav).then((s) => s.mtimeMs, () => undefined)
      found.push({ meta, paths, wavChangedAt: changed })
    }
  }
  return found
}

export const removeLocal = async (paths: RecordingPaths): Promise<void> => {
  await rm(paths.wav, { force: true })
  await rm(paths.meta, { force: true })
}
