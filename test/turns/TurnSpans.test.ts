import { Option, Tracer } from "effect"
import { describe, expect, it } from "vitest"
import { makeCallTracer } from "../../src/observability/Tracing.js"
import { noTurnSpans, TurnSpans, turnSpansOn } from "../../src/turns/TurnSpans.js"

/** A tracer that keeps the names of the spans it is asked for (as an exporting one would send them). */
const keeping = () => {
  const made: Array<string> = []
  const inner = makeCallTracer(undefined)
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      made.push(name)
      return inner.span(name, parent, context, links, startTime, kind, options)
    },
    context: (execution) => execution()
  })
  return { tracer, made }
}

describe("turn spans", () => {
  it("are made where spans leave the process, one per caller turn", () => {
    const { tracer, made } = keeping()
    const spans = turnSpansOn(tracer, Option.none())
    expect(spans).toBeInstanceOf(TurnSpans)
    spans.ended({ index: 0, input: "speech", endedAtMs: 10, detectedAtMs: 710 })
    spans.close(800)
    expect(made).toEqual(["callgate.turn"])
  })

  it("are not made with tracing off: the spans would be id holders nothing reads", () => {
    expect(turnSpansOn(makeCallTracer(undefined), Option.none())).toBe(noTurnSpans)
  })
})
