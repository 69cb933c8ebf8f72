import { Data, Effect, PubSub } from "effect"

/**
 * What carriers tell callgate about calls outside the media stream (Telnyx Call Control webhooks
 * today). The entry endpoints publish; the session registry subscribes and ends the session.
 */
export type CarrierCallEvent = Data.TaggedEnum<{
  CallHungUp: { readonly callId: string; readonly cause?: string | undefined }
  /**
   * Telnyx answering-machine detection: `stage` detection (call.machine[.premium].detection.ended)
   * or greeting (call.machine[.premium].greeting.ended), with the carrier's `result`.
   */
  MachineDetected: { readonly callId: string; readonly stage: "detection" | "greeting"; readonly result: string }
}>
export const CarrierCallEvent = Data.taggedEnum<CarrierCallEvent>()

export class CarrierCallEvents extends Effect.Service<CarrierCallEvents>()("callgate/CarrierCallEvents", {
  scoped: Effect.gen(function* () {
    const hub = yield* PubSub.unbounded<CarrierCallEvent>()
    return {
      publish: (event: CarrierCallEvent) => PubSub.publish(hub, event),
      subscribe: PubSub.subscribe(hub)
    } as const
  })
}) {}
