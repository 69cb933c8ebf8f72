/**
 * The recording's file format (docs/recording.md, "What is recorded, and the format"): RIFF/WAVE, 16-bit linear PCM, two
 * channels (caller left, agent right), at the call's rate: 8 kHz, or 16 kHz for a Telnyx stream of
 * L16 at 16 kHz. Each sample the carrier carries is exactly one 16-bit sample of the file (G.711
 * mu-law and A-law through their tables, ITU-T G.711; L16 as it is), so nothing is lost, and
 * silence is zero: a stretch the recorder never wrote (a gap, a pause, a hole a crash left) reads
 * back as silence.
 */

/** The rate of every call but Telnyx's L16 at 16 kHz. */
export const SAMPLE_RATE = 8000
export const CHANNELS = 2
export const BYTES_PER_SAMPLE = 2
/** Bytes per sample frame (one sample of each channel). */
export const FRAME_BYTES = CHANNELS * BYTES_PER_SAMPLE
export const HEADER_BYTES = 44
/** The sizes a header carries while the recording is still being written: "to the end of the file". */
export const PROVISIONAL_SIZE = 0xffffffff

/** A 44-byte canonical WAV header for `dataBytes` of audio (PROVISIONAL_SIZE while unknown). */
export const wavHeader = (dataBytes: number, sampleRate = SAMPLE_RATE): Buffer => {
  const header = Buffer.alloc(HEADER_BYTES)
  header.write("RIFF", 0, "ascii")
  header.writeUInt32LE(dataBytes === PROVISIONAL_SIZE ? PROVISIONAL_SIZE : dataBytes + 36, 4)
  header.write("WAVE", 8, "ascii")
  header.write("fmt ", 12, "ascii")
  header.writeUInt32LE(16, 16)
  header.writeUInt16LE(1, 20) // PCM
  header.writeUInt16LE(CHANNELS, 22)
  header.writeUInt32LE(sampleRate, 24)
  header.writeUInt32LE(sampleRate * FRAME_BYTES, 28)
  header.writeUInt16LE(FRAME_BYTES, 32)
  header.writeUInt16LE(BYTES_PER_SAMPLE * 8, 34)
  header.write("data", 36, "ascii")
  header.writeUInt32LE(dataBytes, 40)
  return header
}

/** Whole sample frames of audio in a file of `fileBytes` (what a crash left: a partial frame is cut). */
export const dataBytesOf = (fileBytes: number): number =>
  Math.max(0, Math.floor((fileBytes - HEADER_BYTES) / FRAME_BYTES) * FRAME_BYTES)

/** Milliseconds of audio in `dataBytes`. */
export const durationMsOf = (dataBytes: number, sampleRate = SAMPLE_RATE): number => Math.round((dataBytes / FRAME_BYTES / sampleRate) * 1000)

/** The sample rate a header written by `wavHeader` names (a recording's own, provisional or final); SAMPLE_RATE when it names none. */
export const sampleRateOf = (header: Buffer): number => {
  if (header.length < HEADER_BYTES || header.toString("ascii", 0, 4) !== "RIFF" || header.toString("ascii", 12, 16) !== "fmt ") return SAMPLE_RATE
  const rate = header.readUInt32LE(24)
  return rate === 8000 || rate === 16000 ? rate : SAMPLE_RATE
}

export interface ParsedWav {
  readonly channels: number
  readonly sampleRate: number
  readonly bitsPerSample: number
  /** Interleaved samples. */
  readonly samples: Int16Array
}

/** Reads a canonical PCM WAV (the recorder's own files; tests and tools). */
export const parseWav = (file: Buffer): ParsedWav => {
  if (file.toString("ascii", 0, 4) !== "RIFF" || file.toString("ascii", 8, 12) !== "WAVE") throw new Error("not a WAV file")
  let at = 12
  let format: { channels: number; sampleRate: number; bitsPerSample: number } | undefined
  while (at + 8 <= file.length) {
    const id = file.toString("ascii", at, at + 4)
    const size = file.readUInt32LE(at + 4)
    if (id === "fmt ") {
      format = { channels: file.readUInt16LE(at + 10), sampleRate: file.readUInt32LE(at + 12), bitsPerSample: file.readUInt16LE(at + 22) }
    } else if (id === "data") {
      if (format === undefined) throw new Error("WAV data before fmt")
      const end = Math.min(file.length, at + 8 + size)
      const data = file.subarray(at + 8, end - ((end - at - 8) % 2))
      const samples = new Int16Array(data.length / 2)
      for (let i = 0; i < samples.length; i++) samples[i] = data.readInt16LE(i * 2)
      return { ...format, samples }
    }
    at += 8 + size + (size % 2)
  }
  throw new Error("WAV without data")
}
