/**
 * G.722 (ITU-T G.722, 64 kbit/s mode): 16 kHz audio in 8 bits per pair of samples. A quadrature
 * mirror filter splits the signal into a low (0 to 4 kHz) and a high (4 to 8 kHz) band at 8 kHz
 * each; the low band is coded with 6-bit adaptive differential PCM, the high band with 2 bits. Each
 * code byte holds the high band's 2 bits above the low band's 6. A 20 ms frame is 320 samples, 160
 * bytes.
 *
 * ADPCM is backward adaptive: the encoder and the decoder each keep a predictor and a quantiser
 * scale that every code moves, so a stream needs one encoder or decoder for its whole life, fed
 * every frame in order (`G722Encoder`, `G722Decoder`, and `G722NarrowbandDecoder` for the low band
 * alone: a few hundred bytes each, made once per call and direction). The arithmetic follows the
 * recommendation's fixed-point blocks exactly (16-bit saturation and truncation wherever they can
 * change a value), so the codes interoperate with any conforming implementation: the tests hold it
 * to FFmpeg's, bit for bit, both ways. Nothing is allocated per frame.
 */

/** Samples per second of G.722 audio (its RTP clock says 8000, by an old mistake kept for compatibility). */
export const G722_SAMPLE_RATE = 16000
/** Bytes of one 20 ms frame. */
export const G722_FRAME_BYTES = 160

// ---- The recommendation's tables ----

/** The QMF's 24 coefficients, as 12 pairs (the filter is symmetric): the newest sample of a pair takes the last. */
const QMF = Int32Array.of(3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11)
const QMF_REVERSED = Int32Array.from(QMF).reverse()

/** Low band: decision levels of the 6-bit quantiser (times the scale), and the codes of each interval by sign. */
const Q6 = Int32Array.of(0, 35, 72, 110, 150, 190, 233, 276, 323, 370, 422, 473, 530, 587, 650, 714, 786, 858, 940, 1023, 1121, 1219, 1339, 1458, 1612, 1765, 1980, 2195, 2557, 2919, 0, 0)
const ILN = Int32Array.of(0, 63, 62, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 0)
const ILP = Int32Array.of(0, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 0)

/** Low band: inverse quantiser outputs of the 6-bit code (the signal) and of its top 4 bits (the predictor's input). */
const QM6 = Int32Array.of(
  -136, -136, -136, -136, -24808, -21904, -19008, -16704, -14984, -13512, -12280, -11192, -10232, -9360, -8576, -7856,
  -7192, -6576, -6000, -5456, -4944, -4464, -4008, -3576, -3168, -2776, -2400, -2032, -1688, -1360, -1040, -728,
  24808, 21904, 19008, 16704, 14984, 13512, 12280, 11192, 10232, 9360, 8576, 7856, 7192, 6576, 6000, 5456,
  4944, 4464, 4008, 3576, 3168, 2776, 2400, 2032, 1688, 1360, 1040, 728, 432, 136, -432, -136
)
const QM4 = Int32Array.of(0, -20456, -12896, -8968, -6288, -4240, -2584, -1200, 20456, 12896, 8968, 6288, 4240, 2584, 1200, 0)
/** Low band: the log-scale step of each 4-bit code's magnitude. */
const RL42 = Int32Array.of(0, 7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3, 2, 1, 0)
const WL = Int32Array.of(-60, -30, 58, 172, 334, 538, 1198, 3042)

/** High band: the 2-bit code's inverse quantiser output, log-scale step, and codes by sign. */
const QM2 = Int32Array.of(-7408, -1616, 7408, 1616)
const RH2 = Int32Array.of(2, 1, 2, 1)
const WH = Int32Array.of(0, -214, 798)
const IHN = Int32Array.of(0, 1, 0)
const IHP = Int32Array.of(0, 3, 2)

/** The antilog of the scale's fractional part (both bands). */
const ILB = Int32Array.of(
  2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
  2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008
)

const LOW_NB_MAX = 18432
const HIGH_NB_MAX = 22528

/** Saturation to 16 bits, and the wrap of a C cast to int16_t. */
const sat16 = (x: number): number => (x > 32767 ? 32767 : x < -32768 ? -32768 : x)
const int16 = (x: number): number => (x << 16) >> 16
/** The 15-bit limit the reconstructed band signals are held to. */
const sat15 = (x: number): number => (x > 16383 ? 16383 : x < -16384 ? -16384 : x)

/** The quantiser scale from its logarithm (blocks SCALEL / SCALEH): `shift` is 8 for the low band, 10 for the high. */
const scaleOf = (nb: number, shift: number): number => {
  const fraction = ILB[(nb >> 6) & 31]!
  const exponent = shift - (nb >> 11)
  return int16((exponent < 0 ? fraction << -exponent : fraction >> exponent) << 2)
}

/**
 * One band's adaptive predictor (blocks 4L / 4H): a pole section of order 2 and a zero section of
 * order 6 over the reconstructed signal and the quantised differences, adapted by sign.
 */
class Band {
  /** Signal estimate (the prediction the next difference is taken from). */
  s = 0
  /** Zero section's part of it. */
  sz = 0
  /** Last reconstructed signal. */
  r = 0
  a1 = 0
  a2 = 0
  /** Last two partially reconstructed signals. */
  p1 = 0
  p2 = 0
  /** Zero section: coefficients, and the differences they weigh (d[0] the newest). */
  readonly b = new Int32Array(6)
  readonly d = new Int32Array(7)
  /** Quantiser scale, and its logarithm. */
  det = 0
  nb = 0

  constructor(det: number) {
    this.det = det
  }

  /** Moves the predictor on by one quantised difference `dx`. */
  adapt(dx: number): void {
    const r = sat16(this.s + dx)
    const p = sat16(this.sz + dx)
    const signChanged1 = ((p ^ this.p1) & 0x8000) !== 0
    const signChanged2 = ((p ^ this.p2) & 0x8000) !== 0

    // UPPOL2: the second pole.
    const a1Times4 = sat16(this.a1 << 2)
    let wd = signChanged1 ? a1Times4 : 0 - a1Times4
    if (wd > 32767) wd = 32767
    // (No 16-bit wrap can happen from here on: the poles are bounded well inside it.)
    let a2 = (signChanged2 ? -128 : 128) + (wd >> 7) + ((this.a2 * 32512) >> 15)
    if (a2 > 12288) a2 = 12288
    else if (a2 < -12288) a2 = -12288

    // UPPOL1: the first pole, kept inside the stability triangle.
    let a1 = sat16((signChanged1 ? -192 : 192) + ((this.a1 * 32640) >> 15))
    const limit = sat16(15360 - a2)
    if (a1 > limit) a1 = limit
    else if (a1 < 0 - limit) a1 = 0 - limit

    // FILTEP: the pole section's prediction.
    const sp = sat16(((a1 * sat16(r + r)) >> 15) + ((a2 * sat16(this.r + this.r)) >> 15))
    this.r = r
    this.a1 = a1
    this.a2 = a2
    this.p2 = this.p1
    this.p1 = p

    // UPZERO, DELAYA, FILTEZ: the zero section, adapted by the signs of the differences.
    const step = dx === 0 ? 0 : 128
    const b = this.b
    const d = this.d
    d[0] = dx
    let sz = 0
    for (let i = 5; i >= 0; i--) {
      const bi = sat16((((d[i + 1]! ^ dx) & 0x8000) !== 0 ? 0 - step : step) + ((b[i]! * 32640) >> 15))
      b[i] = bi
      sz += (bi * sat16(d[i]! + d[i]!)) >> 15
      d[i + 1] = d[i]!
    }
    this.sz = sat16(sz)

    // PREDIC
    this.s = sat16(sp + this.sz)
  }
}

// ---- One sample of each band, encoded or decoded (the blocks of the recommendation) ----

/** Low band encoder: SUBTRA, QUANTL (the interval of the difference's magnitude), INVQAL, LOGSCL, SCALEL; the 6-bit code. */
const encodeLow = (low: Band, xLow: number): number => {
  const el = sat16(xLow - low.s)
  const magnitude = el >= 0 ? el : -el - 1
  // The first of levels 1..29 whose decision level is above the magnitude (30 if none): the
  // recommendation's linear search, as a binary one (the decision levels rise).
  const det = low.det
  let level = 1
  let above = 30
  while (level < above) {
    const middle = (level + above) >> 1
    if (magnitude >= (Q6[middle]! * det) >> 12) level = middle + 1
    else above = middle
  }
  const code = el < 0 ? ILN[level]! : ILP[level]!
  adaptLow(low, code >> 2)
  return code
}

/** Low band decoder: INVQBL (the 6-bit code, for the output), then the predictor from its top 4 bits; the 15-bit sample. */
const decodeLow = (low: Band, code6: number): number => {
  const rLow = sat15(low.s + ((low.det * QM6[code6]!) >> 15))
  adaptLow(low, code6 >> 2)
  return rLow
}

/** INVQAL, LOGSCL, SCALEL and the predictor, from the low band's 4-bit code (encoder and decoder alike). */
const adaptLow = (low: Band, code4: number): void => {
  const dLow = (low.det * QM4[code4]!) >> 15
  const nb = ((low.nb * 127) >> 7) + WL[RL42[code4]!]!
  low.nb = nb < 0 ? 0 : nb > LOW_NB_MAX ? LOW_NB_MAX : nb
  low.det = scaleOf(low.nb, 8)
  low.adapt(dLow)
}

/** High band encoder: SUBTRA, QUANTH; the 2-bit code. */
const encodeHigh = (high: Band, xHigh: number): number => {
  const eh = sat16(xHigh - high.s)
  const magnitude = eh >= 0 ? eh : -eh - 1
  const level = magnitude >= (564 * high.det) >> 12 ? 2 : 1
  const code = eh < 0 ? IHN[level]! : IHP[level]!
  adaptHigh(high, code)
  return code
}

/** High band decoder: the 15-bit sample. */
const decodeHigh = (high: Band, code: number): number => {
  const rHigh = sat15(((high.det * QM2[code]!) >> 15) + high.s)
  adaptHigh(high, code)
  return rHigh
}

/** INVQAH, LOGSCH, SCALEH and the predictor (encoder and decoder alike). */
const adaptHigh = (high: Band, code: number): void => {
  const dHigh = (high.det * QM2[code]!) >> 15
  const nb = ((high.nb * 127) >> 7) + WH[RH2[code]!]!
  high.nb = nb < 0 ? 0 : nb > HIGH_NB_MAX ? HIGH_NB_MAX : nb
  high.det = scaleOf(high.nb, 10)
  high.adapt(dHigh)
}

// ---- Streams ----

/** A G.722 encoder for one stream: 16 kHz 16-bit samples in, one code byte per pair of samples out. */
export class G722Encoder {
  private readonly low = new Band(32)
  private readonly high = new Band(8)
  /**
   * The QMF's last 12 pairs (`first` the earlier sample of each), a ring at `position` written
   * twice (at i and i + 12), so the 12 pairs from the oldest are always one straight run.
   */
  private readonly first = new Int32Array(24)
  private readonly second = new Int32Array(24)
  private position = 0

  /**
   * Encodes `count` samples of `pcm` (an even number: an odd last sample is left out) into `out`
   * from `outOffset`; returns the bytes written (count / 2).
   */
  encode(pcm: Int16Array, count: number, out: Uint8Array, outOffset = 0): number {
    const low = this.low
    const high = this.high
    const first = this.first
    const second = this.second
    let position = this.position
    const pairs = count >> 1
    for (let n = 0; n < pairs; n++) {
      // Transmit QMF: the pair into the ring, then both sums with the oldest pair first.
      first[position] = first[position + 12] = pcm[2 * n]!
      second[position] = second[position + 12] = pcm[2 * n + 1]!
      if (++position === 12) position = 0
      let sumOdd = 0
      let sumEven = 0
      for (let i = 0; i < 12; i++) {
        sumOdd += first[position + i]! * QMF[i]!
        sumEven += second[position + i]! * QMF_REVERSED[i]!
      }
      // The QMF's gain is 4096, twice over for the two sums, and the bands are 15-bit signals.
      const lowCode = encodeLow(low, int16((sumEven + sumOdd) >> 14))
      const highCode = encodeHigh(high, int16((sumEven - sumOdd) >> 14))
      out[outOffset + n] = (highCode << 6) | lowCode
    }
    this.position = position
    return pairs
  }
}

/** A G.722 decoder for one stream: code bytes in, two 16 kHz 16-bit samples per byte out. */
export class G722Decoder {
  private readonly low = new Band(32)
  private readonly high = new Band(8)
  /** The receive QMF's last 12 pairs (sum and difference of the bands), a ring as the encoder's. */
  private readonly sums = new Int32Array(24)
  private readonly differences = new Int32Array(24)
  private position = 0

  /** Decodes `length` bytes of `codes` into `pcm` from `pcmOffset`; returns the samples written (2 x length). */
  decode(codes: Uint8Array, length: number, pcm: Int16Array, pcmOffset = 0): number {
    const low = this.low
    const high = this.high
    const sums = this.sums
    const differences = this.differences
    let position = this.position
    let at = pcmOffset
    for (let n = 0; n < length; n++) {
      const code = codes[n]!
      const rLow = decodeLow(low, code & 0x3f)
      const rHigh = decodeHigh(high, code >> 6)
      // Receive QMF: the bands back to two samples (gain 4096, less one bit for the 15-bit bands).
      sums[position] = sums[position + 12] = sat16(rLow + rHigh)
      differences[position] = differences[position + 12] = sat16(rLow - rHigh)
      if (++position === 12) position = 0
      let even = 0
      let odd = 0
      for (let i = 0; i < 12; i++) {
        even += differences[position + i]! * QMF_REVERSED[i]!
        odd += sums[position + i]! * QMF[i]!
      }
      pcm[at++] = sat16(even >> 11)
      pcm[at++] = sat16(odd >> 11)
    }
    this.position = position
    return at - pcmOffset
  }
}

/**
 * A G.722 stream read at 8 kHz: the low band alone (0 to 4 kHz, already at 8 kHz: the QMF's own
 * half-band split, a better decimation than any averaging), for what needs only narrowband audio
 * (voice activity, a mu-law agent). A third of a full decoder's work. One per stream, fed every
 * frame in order, as a full decoder.
 */
export class G722NarrowbandDecoder {
  private readonly low = new Band(32)

  /** Decodes `length` bytes of `codes` into `pcm` (8 kHz) from `pcmOffset`; returns the samples written (= length). */
  decode(codes: Uint8Array, length: number, pcm: Int16Array, pcmOffset = 0): number {
    const low = this.low
    for (let n = 0; n < length; n++) pcm[pcmOffset + n] = sat16(decodeLow(low, codes[n]! & 0x3f) << 1)
    return length
  }
}
