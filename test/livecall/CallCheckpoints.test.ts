import { expect, it } from "@effect/vitest"
import { makeCallFork } from "../../src/kernel/SessionFibers.js"
import { Deferred, Duration, Effect, Layer, Option } from "effect"
import type { Checkpoint } from "../../src/kernel/CallLegs.js"
import type { SessionInfo } from "../../src/kernel/SessionInfo.js"
import { CallCheckpoints } from "../../src/livecall/CallCheckpoints.js"
import { makeMemorySessionStore } from "../../src/sessions/MemorySessionStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { uniqueId } from "../support/testApp.js"

const infoFor = (agentId: string): SessionInfo => ({
  sessionId: uniqueId("ses"),
  agentId,
  environmentId: "env_1",
  provider: "twilio",
  call: { kind: "twilio", callId: "CA1" },
  from: "+14155550100",
  to: "+14155550111",
  direction: "inbound",
  streamSid: "MZ1",
  createdAt: new Date()
})

/**
 * The memory store, its checkpoint writes recorded and held until `release` (a store that is slow
 * to answer): what reaches the store while one write is in flight is what the keeper coalesced.
 */
const gatedStore = Effect.gen(function* () {
  const store = yield* makeMemorySessionStore(Duration.days(1))
  const writes: Array<Checkpoint> = []
  let gate = yield* Deferred.make<void>()
  const started = { count: 0 }
  const layer = Layer.succeed(
    SessionStore,
    SessionStore.of({
      ...store,
      saveCheckpoint: (agentId, sessionId, checkpoint) =>
        Effect.suspend(() => {
          started.count++
          return Deferred.await(gate)
        }).pipe(
          Effect.zipRight(store.saveCheckpoint(agentId, sessionId, checkpoint)),
          Effect.tap(() => Effect.sync(() => void writes.push(checkpoint)))
        )
    })
  )
  const release = Effect.gen(function* () {
    const open = gate
    gate = yield* Deferred.make<void>()
    yield* Deferred.succeed(open, undefined)
  })
  return { layer, writes, started, release, store }
})

const keeperOn = (layer: Layer.Layer<SessionStore>, info: SessionInfo) =>
  Effect.flatMap(Effect.zip(CallCheckpoints, makeCallFork), ([checkpoints, fork]) => checkpoints.keeper(info, fork)).pipe(
    Effect.provide(CallCheckpoints.Default.pipe(Layer.provide(layer)))
  )

it.scoped("one write in flight per call; of the checkpoints kept meanwhile only the newest is written next", () =>
  Effect.gen(function* () {
    const gated = yield* gatedStore
    const info = infoFor(uniqueId("agent"))
    const keeper = yield* keeperOn(gated.layer, info)
    for (let step = 1; step <= 50; step++) keeper.keep({ step })
    // The first write is in flight (held by the store); the other 49 wait as one.
    expect(gated.started.count).toBe(1)
    expect(yield* keeper.latest).toEqual({ step: 50 })
    yield* gated.release
    yield* Effect.iterate(0, { while: () => gated.started.count < 2, body: (n) => Effect.as(Effect.yieldNow(), n + 1) })
    yield* gated.release
    yield* keeper.written
    expect(gated.writes).toEqual([{ step: 1 }, { step: 50 }])
    expect(yield* gated.store.checkpointOf(info.agentId, info.sessionId)).toEqual(Option.some({ step: 50 }))
  }))

it.scoped("written waits for the writes in flight; latest falls back on the store when this call kept none", () =>
  Effect.gen(function* () {
    const gated = yield* gatedStore
    const info = infoFor(uniqueId("agent"))
    // A checkpoint an earlier instance stored for the session (the call came from there).
    yield* gated.store.saveCheckpoint(info.agentId, info.sessionId, { from: "elsewhere" })
    const keeper = yield* keeperOn(gated.layer, info)
    expect(yield* keeper.latest).toEqual({ from: "elsewhere" })
    yield* keeper.written

    keeper.keep({ step: 1 })
    const waiting = yield* Effect.fork(keeper.written)
    yield* Effect.yieldNow()
    expect(waiting.unsafePoll()).toBeNull()
    yield* gated.release
    yield* waiting.await
    expect(gated.writes).toEqual([{ step: 1 }])
    expect(yield* keeper.latest).toEqual({ step: 1 })

    const none = yield* keeperOn(gated.layer, infoFor(uniqueId("agent")))
    expect(yield* none.latest).toBeNull()
  }))
