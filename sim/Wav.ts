import { encodeMulaw, SAMPLE_RATE } from "./Mulaw.js"

/** A file the simulator cannot use as call audio, with a sentence saying why. */
export class AudioFormatError extends Error {
  override readonly name = "AudioFormatError"
}

const WAVE_FORMAT_PCM = 1
const WAVE_FORMAT_MULAW = 7
const WAVE_FORMAT_EXTENSIBLE = 0xfffe

export interface WavFormat {
  readonly format: "pcm" | "mulaw"
  readonly sampleRate: number
  readonly channels: number
  readonly bitsPerSample: number
}

/**
 * Reads a RIFF/WAVE file and returns 8 kHz mu-law. Accepted: mu-law at 8 kHz, or 16-bit PCM at
 * 8 or 16 kHz, mono. 16 kHz is brought down to 8 kHz by averaging sample pairs: a crude low-pass
 * that is plenty for a simulated caller (telephone audio stops at 3.4 kHz anyway).
 */
export const wavToMulaw = (file: Buffer, name = "WAV file"): { readonly audio: Buffer; readonly format: WavFormat } => {
  if (file.length < 12 || file.toString("ascii", 0, 4) !== "RIFF" || file.toString("ascii", 8, 12) !== "WAVE") {
    throw new AudioFormatError(`${name} is not a RIFF/WAVE file`)
  }
  let format: WavFormat | undefined
  let data: Buffer | undefined
  let offset = 12
  while (offset + 8 <= file.length) {
    const id = file.toString("ascii", offset, offset + 4)
    const size = file.readUInt32LE(offset + 4)
    const body = file.subarray(offset + 8, Math.min(file.length, offset + 8 + size))
    if (id === "fmt ") {
      if (body.length < 16) throw new AudioFormatError(`${name} has a truncated fmt chunk`)
      let tag = body.readUInt16LE(0)
      // WAVE_FORMAT_EXTENSIBLE names the real format in the first two bytes of its sub-format GUID.
      if (tag === WAVE_FORMAT_EXTENSIBLE && body.length >= 26) tag = body.readUInt16LE(24)
      if (tag !== WAVE_FORMAT_PCM && tag !== WAVE_FORMAT_MULAW) {
        throw new AudioFormatError(`${name} uses WAVE format ${tag}; use 16-bit PCM or mu-law`)
      }
      format = {
        format: tag === WAVE_FORMAT_PCM ? "pcm" : "mulaw",
        channels: body.readUInt16LE(2),
        sampleRate: body.readUInt32LE(4),
        bitsPerSample: body.readUInt16LE(14)
      }
    } else if (id === "data") {
      data = body
    }
    offset += 8 + size + (size % 2) // chunks are word-aligned
  }
  if (!format) throw new AudioFormatError(`${name} has no fmt chunk`)
  if (!data) throw new AudioFormatError(`${name} has no data chunk`)
  if (format.channels !== 1) throw new AudioFormatError(`${name} has ${format.channels} channels; use mono`)

  if (format.format === "mulaw") {
    if (format.sampleRate !== SAMPLE_RATE) throw new AudioFormatError(`${name} is mu-law at ${format.sampleRate} Hz; use 8000 Hz`)
    if (format.bitsPerSample !== 8) throw new AudioFormatError(`${name} is mu-law with ${format.bitsPerSample} bits per sample; expected 8`)
    return { audio: Buffer.from(data), format }
  }
  if (format.bitsPerSample !== 16) throw new AudioFormatError(`${name} is ${format.bitsPerSample}-bit PCM; use 16-bit`)
  if (format.sampleRate !== 8000 && format.sampleRate !== 16000) {
    throw new AudioFormatError(`${name} is PCM at ${format.sampleRate} Hz; use 8000 or 16000 Hz`)
  }
  const count = Math.floor(data.length / 2)
  const pcm = new Int16Array(count)
  for (let i = 0; i < count; i++) pcm[i] = data.readInt16LE(i * 2)
  const samples = format.sampleRate === 16000 ? downsampleByTwo(pcm) : pcm
  return { audio: encodeMulaw(samples), format }
}

const downsampleByTwo = (pcm: Int16Array): Int16Array => {
  const out = new Int16Array(Math.floor(pcm.length / 2))
  for (let i = 0; i < out.length; i++) out[i] = (pcm[2 * i]! + pcm[2 * i + 1]!) >> 1
  return out
}

/** A minimal WAV writer (tests and tools): PCM 16-bit or mu-law, mono. */
export const makeWav = (options: {
  readonly format: "pcm" | "mulaw"
  readonly sampleRate: number
  /** Int16 samples for PCM, mu-law bytes for mu-law. */
  readonly data: Int16Array | Uint8Array
}): Buffer => {
  const bytesPerSample = options.format === "pcm" ? 2 : 1
  const dataBytes = options.data.length * bytesPerSample
  const header = Buffer.alloc(44)
  header.write("RIFF", 0, "ascii")
  header.writeUInt32LE(36 + dataBytes, 4)
  header.write("WAVE", 8, "ascii")
  header.write("fmt ", 12, "ascii")
  header.writeUInt32LE(16, 16)
  header.writeUInt16LE(options.format === "pcm" ? WAVE_FORMAT_PCM : WAVE_FORMAT_MULAW, 20)
  header.writeUInt16LE(1, 22)
  header.writeUInt32LE(options.sampleRate, 24)
  header.writeUInt32LE(options.sampleRate * bytesPerSample, 28)
  header.writeUInt16LE(bytesPerSample, 32)
  header.writeUInt16LE(bytesPerSample * 8, 34)
  header.write("data", 36, "ascii")
  header.writeUInt32LE(dataBytes, 40)
  const body = Buffer.alloc(dataBytes)
  if (options.format === "pcm") options.data.forEach((sample, i) => body.writeInt16LE(sample, i * 2))
  else body.set(options.data as Uint8Array)
  return Buffer.concat([header, body])
}
