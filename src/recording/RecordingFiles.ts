import { randomBytes } from "node:crypto"
import { open, readdir, readFile, rename, rm, rmdir, stat, writeFile } from "node:fs/promises"
import { dirname, join } from "node:path"
import type { RecordingPause } from "./CallRecording.js"
import { dataBytesOf, durationMsOf, HEADER_BYTES, sampleRateOf, wavHeader } from "./Wav.js"

/**
 * A recording's part on disk (docs/recording.md, "Storage"): `DIR/<agentId>/<stem>.wav` and its
 * sidecar `DIR/<agentId>/<stem>.json` (this metadata), where the stem is the session id for the
 * call's first stream and `<sessionId>.parts/<part>` for each stream the call was moved to after it
 * (an agent failover to another instance, a caller back from a transfer): every part has files of
 * its own, so no instance ever overwrites another's, and a session's later parts are found in one
 * small folder (no listing of the agent's whole folder per read). The sidecar says whether the WAV is still being
 * written; a crash leaves "recording", and whoever finishes the file (the next start, or the sweep
 * of any instance) sets the header's sizes from what was written. The parts are joined into the
 * one recording when it is read (RecordingJoin).
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
  /** The part's name after the session id; absent for the call's first stream (and in recordings made before parts). */
  readonly part?: string
  /** When the part's stream began (epoch ms, the recording instance's clock): where the part goes in the whole. */
  readonly partStartedAtMs?: number
  /** Where the caller's audio of the part ends (ms from the part's start); the next part never starts before it. */
  readonly callerEndMs?: number
  /** The part's sample rate (absent in recordings made before parts: the WAV's header says it). */
  readonly sampleRate?: number
}

/** The folder (in the agent's) of a session's later parts. */
export const partsFolderOf = (sessionId: string): string => `${sessionId}.parts`

/** The file name (without extension, from the agent's folder) of a session's part. */
export const stemOf = (sessionId: string, part: string | undefined): string => (part === undefined ? sessionId : `${partsFolderOf(sessionId)}/${part}`)

/** Whether `name` (a path from the agent's folder) is one of the session's parts' files with that extension (".json", ".wav"). */
export const isPartFile = (name: string, sessionId: string, extension: ".json" | ".wav"): boolean => {
  if (!name.endsWith(extension)) return false
  const stem = name.slice(0, -extension.length)
  const folder = `${partsFolderOf(sessionId)}/`
  return stem === sessionId || (stem.startsWith(folder) && /^[A-Za-z0-9_-]+$/.test(stem.slice(folder.length)))
}

export interface RecordingPaths {
  readonly wav: string
  readonly meta: string
}

/** A part's files; `stem` is `stemOf(sessionId, part)`. */
export const pathsOf = (dir: string, agentId: string, stem: string): RecordingPaths => ({
  wav: join(dir, agentId, `${stem}.wav`),
  meta: join(dir, agentId, `${stem}.json`)
})

/** Object names in the bucket: the same layout. */
export const objectNamesOf = (agentId: string, stem: string) => ({ wav: `${agentId}/${stem}.wav`, meta: `${agentId}/${stem}.json` })

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
    const sidecars: Array<string> = []
    for (const name of names) {
      if (name.endsWith(".json")) sidecars.push(name)
      else if (name.endsWith(".parts")) {
        const parts = await readdir(join(dir, agentId, name)).catch((): Array<string> => [])
        for (const part of parts) if (part.endsWith(".json")) sidecars.push(`${name}/${part}`)
      }
    }
    for (const name of sidecars) {
      const paths = pathsOf(dir, agentId, name.slice(0, -".json".length))
      const meta = await readMeta(paths.meta)
      if (meta === undefined) continue
      const changed = await stat(paths.wav).then((s) => s.mtimeMs, () => undefined)
      found.push({ meta, paths, wavChangedAt: changed })
    }
  }
  return found
}

/** The session's parts in `dir` (its agent's folder): each sidecar of the session, with its WAV's size (undefined when the WAV is gone). */
export const listSessionParts = async (
  dir: string,
  agentId: string,
  sessionId: string
): Promise<Array<{ readonly meta: RecordingMeta; readonly paths: RecordingPaths; readonly wavBytes: number | undefined }>> => {
  const folder = partsFolderOf(sessionId)
  const later = await readdir(join(dir, agentId, folder)).catch((): Array<string> => [])
  const names = [`${sessionId}.json`, ...later.map((name) => `${folder}/${name}`)]
  const found: Array<{ meta: RecordingMeta; paths: RecordingPaths; wavBytes: number | undefined }> = []
  for (const name of names) {
    if (!isPartFile(name, sessionId, ".json")) continue
    const paths = pathsOf(dir, agentId, name.slice(0, -".json".length))
    const meta = await readMeta(paths.meta)
    if (meta === undefined || meta.agentId !== agentId || meta.sessionId !== sessionId) continue
    found.push({ meta, paths, wavBytes: await stat(paths.wav).then((s) => s.size, () => undefined) })
  }
  return found
}

export const removeLocal = async (paths: RecordingPaths): Promise<void> => {
  await rm(paths.wav, { force: true })
  await rm(paths.meta, { force: true })
  // A later part's folder goes with its last part (another part still there keeps it).
  if (dirname(paths.meta).endsWith(".parts")) await rmdir(dirname(paths.meta)).catch(() => {})
}
