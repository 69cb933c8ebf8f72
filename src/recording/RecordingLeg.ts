import type { CallerEvents, CarrierLeg, LegFault } from "../kernel/CallLegs.js"
import type { CallRecording } from "./CallRecording.js"

/**
 * The recorder's tap on a call (docs/recording.md): the carrier leg as the session sees it, passing
 * every call through unchanged after handing the audio to the call's recording, if it has one.
 * Caller audio is taken as the carrier delivers it (in order, with its timestamp); agent audio as
 * the carrier is sent it to play, so whatever the caller hears (the agent, comfort noise while an
 * agent failover runs) is what is recorded. One synchronous call per frame, nothing more.
 */
export class RecordingLeg implements CarrierLeg, CallerEvents {
  /** The call's recording; undefined while the call is not (or no longer) recorded. */
  recording: CallRecording | undefined = undefined
  private events: CallerEvents | undefined

  constructor(readonly leg: CarrierLeg) {}

  // CarrierLeg (the session's side)

  bind(events: CallerEvents): void {
    this.events = events
    this.leg.bind(this)
  }

  sendMedia(payload: string): void {
    this.recording?.agent(payload)
    this.leg.sendMedia(payload)
  }

  sendMark(name: string): void {
    this.leg.sendMark(name)
  }

  sendClear(): void {
    this.recording?.clear()
    this.leg.sendClear()
  }

  close(code: number, reason: string): void {
    this.leg.close(code, reason)
  }

  pauseRecording(paused: boolean): void {
    this.recording?.pause(paused)
  }

  recordingPaused(): boolean {
    return this.recording?.paused ?? false
  }

  // CallerEvents (the carrier's side)

  callerMedia(payload: string, timestampMs: number): void {
    this.recording?.caller(payload, timestampMs)
    this.events?.callerMedia(payload, timestampMs)
  }

  callerDtmf(digit: string): void {
    this.events?.callerDtmf(digit)
  }

  carrierMark(name: string): void {
    this.events?.carrierMark(name)
  }

  carrierStopped(): void {
    this.events?.carrierStopped()
  }

  carrierGone(fault: LegFault | undefined): void {
    this.events?.carrierGone(fault)
  }
}
