import fc from "fast-check"
import type { WireListener, WireSocket } from "../../src/frames/WireSocket.js"
import { isAscii } from "../../src/frames/MediaFields.js"

/** Cases per parser (the floor); FUZZ_RUNS raises it for a longer local run. */
export const RUNS = Math.max(10_000, Number(process.env.FUZZ_RUNS ?? 0) || 0)

/** Counts generated cases per suite and prints them, so CI logs show what ran. */
export const caseCounter = (suite: string) => {
  let cases = 0
  return {
    count: () => void cases++,
    report: () => {
      console.log(`fuzz ${suite}: ${cases} generated cases`)
      return cases
    }
  }
}

/** A WireSocket that records what the handler did with it. */
export const recordingSocket = () => {
  const sent: Array<string> = []
  let closed: { code: number; reason: string } | undefined
  let listener: WireListener | undefined
  const socket: WireSocket = {
    send: (text) => void sent.push(text),
    sendAscii: (text) => {
      if (!isAscii(text)) throw new Error(`sendAscii given a text that is not ASCII: ${JSON.stringify(text.slice(0, 80))}`)
      sent.push(text)
    },
    close: (code, reason) => {
      closed ??= { code, reason }
    },
    listen: (next) => {
      listener = next
    },
    get isOpen() {
      return closed === undefined
    },
    bufferedAmount: 0,
    heartbeat: () => true
  }
  return { socket, sent, closed: () => closed, listener: () => listener }
}

const base64 = fc.base64String({ maxLength: 400 })
const smallValue = fc.oneof(
  fc.string({ maxLength: 30 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.array(fc.string({ maxLength: 5 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 }),
  base64,
  fc.constantFrom("", "media", "start", "stop", "__proto__", "constructor", "\u0000", "\ud800", "9".repeat(30), "-1", "1e309")
)

/** Sets, replaces or deletes one value at a random path of a JSON-like object (copy). */
const mutate = (value: unknown, path: ReadonlyArray<number>, replacement: unknown, remove: boolean): unknown => {
  if (typeof value !== "object" || value === null || path.length === 0) return replacement
  const copy: Record<string, unknown> = Array.isArray(value) ? ([...value] as any) : { ...(value as Record<string, unknown>) }
  const keys = Object.keys(copy)
  if (keys.length === 0) return copy
  const key = keys[path[0]! % keys.length]!
  if (remove && path.length === 1) delete copy[key]
  else copy[key] = mutate(copy[key], path.slice(1), replacement, remove)
  return copy
}

/**
 * Text frames for a dialect: valid frames, valid frames with one field replaced or removed at any
 * depth, arbitrary JSON, and arbitrary text (truncated JSON included).
 */
export const framesFrom = (valid: ReadonlyArray<Record<string, unknown>>): fc.Arbitrary<string> => {
  const validFrame = fc.constantFrom(...valid)
  const mutated = fc
    .tuple(validFrame, fc.array(fc.nat(), { minLength: 1, maxLength: 4 }), smallValue, fc.boolean())
    .map(([frame, path, replacement, remove]) => JSON.stringify(mutate(frame, path, replacement, remove)) ?? "null")
  const truncated = fc.tuple(validFrame, fc.nat()).map(([frame, cut]) => {
    const text = JSON.stringify(frame)
    return text.slice(0, cut % (text.length + 1))
  })
  return fc.oneof(
    { weight: 2, arbitrary: validFrame.map((frame) => JSON.stringify(frame)) },
    { weight: 6, arbitrary: mutated },
    { weight: 1, arbitrary: truncated },
    { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ maxLength: 200, unit: "binary" }) }
  )
}

/** Close codes the stream and agent handlers document (docs/calls.md): normal, protocol, data, payload, policy. */
export const DOCUMENTED_CLOSE_CODES = new Set([1000, 1002, 1003, 1007, 1008])
