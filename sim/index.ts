/**
 * The call simulator as a library: simulated Twilio and Telnyx calls against a running gateway
 * (or any media-stream server), call audio sources, and frame stamps for delay measurement.
 * `callgate-sim` (cli.ts), the tests, the demo and the benchmark all build on these exports.
 */
export { comfortNoise, loadAudio, readUlawFile, readWavFile, seededRandom, silence, speechLike, type SpeechLikeOptions } from "./AudioSource.js"
export { entryUrl, onGatewayOrigin, twilioSignature, type EntryAnswer, type RedirectAnswer } from "./CallEntry.js"
export { telnyxDialect, twilioDialect, type CarrierDialect } from "./CarrierDialect.js"
export { nowUs, readStamp, readStampInto, STAMP_BYTES, writeStamp, type FrameStamp } from "./FrameStamp.js"
export { FramePacer } from "./FramePacer.js"
export {
  DEFAULT_VOICED_RMS,
  FRAME_BYTES,
  FRAME_MS,
  MULAW_SILENCE,
  decodeMulaw,
  durationMs,
  encodeMulaw,
  frameCount,
  framesOf,
  isVoicedFrame,
  linearToMulaw,
  mulawRms,
  padToFrames
} from "./Mulaw.js"
export { Playout } from "./Playout.js"
export {
  SimCall,
  SimError,
  type AgentAnswer,
  type AgentMedia,
  type AnswerWait,
  type CloseInfo,
  type PlayResult,
  type SimCallEvents,
  type SimCallOptions,
  type TurnResult
} from "./SimCall.js"
export { runScript, type ScriptStep, type StepOutcome } from "./Script.js"
export { parseStreamMarkup, type StreamInstruction } from "./StreamMarkup.js"
export { codecOfStreamAttributes, isSimStreamCodec, simAudioCodec, SIM_STREAM_CODECS, type SimAudioCodec, type SimStreamCodec } from "./StreamCodec.js"
export { connectTelnyxStream, placeTelnyxTexmlCall, telnyxSignatureHeaders, type TelnyxStreamOptions, type TelnyxTexmlCallOptions } from "./TelnyxCall.js"
export { connectTwilioStream, placeTwilioCall, type TwilioCallOptions, type TwilioStreamOptions } from "./TwilioCall.js"
export {
  startTwilioCarrier,
  TwilioCarrier,
  twimlVerbs,
  type CalleeBehaviour,
  type CarrierCall,
  type TwilioCarrierEvents,
  type TwilioCarrierOptions
} from "./TwilioCarrier.js"
export { AudioFormatError, makeWav, wavToMulaw } from "./Wav.js"
