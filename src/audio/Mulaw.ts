/**
 * G.711 mu-law (ITU-T G.711, PCMU), the audio Twilio and Telnyx carry: the one decoding table, used
 * by voice activity detection, the recorder and the simulator.
 */

/** Each mu-law byte's 16-bit linear PCM sample. */
export const MULAW_TO_PCM: Int16Array = (() => {
  const table = new Int16Array(256)
  for (let byte = 0; byte < 256; byte++) {
    const u = ~byte & 0xff
    const exponent = (u >> 4) & 0x07
    const mantissa = u & 0x0f
    const magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    table[byte] = u & 0x80 ? -magnitude : magnitude
  }
  return table
})()

/** The mu-law byte of digital silence (decodes to 0). */
export const MULAW_SILENCE = 0xff
