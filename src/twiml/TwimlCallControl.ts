import { Data, Either } from "effect"
import { XMLValidator } from "fast-xml-parser"
import { nameOf, parseXml, type XmlNode } from "./TwimlDocument.js"

/**
 * TwiML for Telnyx Call Control calls, which have no markup interpreter: the verbs callgate can
 * run are translated into call commands, in document order. Pure; TelnyxTwimlRunner runs the result.
 *
 *   <Say>      -> speak (then wait for call.speak.ended)
 *   <Play>     -> playback_start (then wait for call.playback.ended)
 *   <Pause>    -> a local wait of `length` seconds
 *   <Dial>     -> transfer (one <Number>, one <Sip> or a bare number); the document ends there
 *   <Hangup/>  -> hangup; the document ends there
 *
 * A document that runs out of verbs ends the call, as TwiML does. Anything else (Redirect, Gather,
 * Record, Conference, ...) makes the whole document unsupported and nothing is sent.
 */
export type CallControlCommand =
  | { readonly _tag: "Speak"; readonly payload: string; readonly voice: string; readonly language?: string | undefined }
  | { readonly _tag: "Play"; readonly audioUrl: string; readonly loop?: number | "infinity" | undefined }
  | { readonly _tag: "Wait"; readonly seconds: number }
  | { readonly _tag: "Transfer"; readonly to: string; readonly from?: string | undefined; readonly timeoutSecs?: number | undefined }
  | { readonly _tag: "Hangup" }

export class UnsupportedTwiml extends Data.TaggedError("UnsupportedTwiml")<{ readonly reason: string }> {}

/** Larger documents are refused before parsing. */
export const MAX_TWIML_BYTES = 64 * 1024
/** A <Pause> longer than this is refused: a caller should not sit in silence for minutes. */
export const MAX_PAUSE_SECONDS = 300

const decodeEntities = (text: string) =>
  text.replace(/&(#x[0-9a-fA-F]+|#\d+|amp|lt|gt|quot|apos);/g, (_match, entity: string) => {
    if (entity.startsWith("#x")) return String.fromCodePoint(Number.parseInt(entity.slice(2), 16))
    if (entity.startsWith("#")) return String.fromCodePoint(Number.parseInt(entity.slice(1), 10))
    return { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" }[entity]!
  })

const childrenOf = (node: XmlNode): ReadonlyArray<XmlNode> => {
  const name = nameOf(node)
  const value = name !== undefined ? node[name] : undefined
  return Array.isArray(value) ? (value as Array<XmlNode>) : []
}
const attribute = (node: XmlNode, name: string): string | undefined => {
  const value = node[":@"]?.[name]
  return value === undefined ? undefined : decodeEntities(value)
}
/** The element's text, when it holds only text. */
const textOf = (node: XmlNode): string | undefined => {
  const children = childrenOf(node)
  if (children.length !== 1 || nameOf(children[0]!) !== "#text") return children.length === 0 ? "" : undefined
  return decodeEntities(String(children[0]!["#text"]))
}

const VOICES: Record<string, string> = { man: "male", male: "male", woman: "female", female: "female", alice: "female" }

const nonNegativeInteger = (text: string | undefined): number | undefined =>
  text !== undefined && /^\d{1,6}$/.test(text.trim()) ? Number(text.trim()) : undefined

type Step = Either.Either<CallControlCommand, UnsupportedTwiml>
const unsupported = (reason: string): Step => Either.left(new UnsupportedTwiml({ reason }))

const translateVerb = (node: XmlNode): Step => {
  const verb = nameOf(node)
  switch (verb) {
    case "Say": {
      const payload = textOf(node)
      if (payload === undefined || payload.trim() === "") return unsupported("<Say> must hold only text")
      const voiceAttribute = attribute(node, "voice")
      // Telnyx names its engines' voices with a dot (Polly.Joanna, Azure.en-US-...): pass those through.
      const voice = voiceAttribute === undefined ? "female" : voiceAttribute.includes(".") ? voiceAttribute : VOICES[voiceAttribute.toLowerCase()]
      if (voice === undefined) return unsupported(`<Say voice="${voiceAttribute}"> is not a voice Telnyx knows`)
      return Either.right({ _tag: "Speak", payload, voice, language: attribute(node, "language") })
    }
    case "Play": {
      const url = textOf(node)?.trim()
      if (attribute(node, "digits") !== undefined) return unsupported("<Play digits> is not supported on Call Control calls")
      if (url === undefined || !/^https?:\/\/\S+$/.test(url)) return unsupported("<Play> must hold an http(s) audio URL")
      const loopText = attribute(node, "loop")
      const loop = loopText === undefined ? undefined : nonNegativeInteger(loopText)
      if (loopText !== undefined && loop === undefined) return unsupported(`<Play loop="${loopText}"> is not a count`)
      return Either.right({ _tag: "Play", audioUrl: url, loop: loop === 0 ? "infinity" : loop })
    }
    case "Pause": {
      const lengthText = attribute(node, "length")
      const seconds = lengthText === undefined ? 1 : nonNegativeInteger(lengthText)
      if (seconds === undefined || seconds > MAX_PAUSE_SECONDS) {
        return unsupported(`<Pause length="${lengthText}"> must be 0 to ${MAX_PAUSE_SECONDS} seconds`)
      }
      return Either.right({ _tag: "Wait", seconds })
    }
    case "Dial": {
      const children = childrenOf(node)
      let to: string | undefined
      if (children.length === 1 && nameOf(children[0]!) === "#text") to = textOf(node)?.trim()
      else if (children.length === 1 && (nameOf(children[0]!) === "Number" || nameOf(children[0]!) === "Sip")) to = textOf(children[0]!)?.trim()
      else return unsupported("<Dial> must hold one number, one <Number> or one <Sip>")
      if (to === undefined || !/^(\+[1-9]\d{1,14}|sips?:\S+)$/.test(to)) return unsupported("<Dial> must dial an E.164 number or a SIP URI")
      const timeoutText = attribute(node, "timeout")
      const timeoutSecs = timeoutText === undefined ? undefined : nonNegativeInteger(timeoutText)
      if (timeoutText !== undefined && timeoutSecs === undefined) return unsupported(`<Dial timeout="${timeoutText}"> is not a number of seconds`)
      return Either.right({ _tag: "Transfer", to, from: attribute(node, "callerId"), timeoutSecs })
    }
    case "Hangup":
      return Either.right({ _tag: "Hangup" })
    case "#text":
      return unsupported("text directly inside <Response>")
    default:
      return unsupported(`<${verb}> cannot run on a Telnyx Call Control call`)
  }
}

/**
 * The commands for a TwiML document, ending with a transfer or a hangup. Commands after the first
 * transfer or hangup are unreachable on a Call Control call and are dropped.
 */
export const translateTwiml = (twiml: string): Either.Either<ReadonlyArray<CallControlCommand>, UnsupportedTwiml> => {
  if (Buffer.byteLength(twiml, "utf8") > MAX_TWIML_BYTES) return Either.left(new UnsupportedTwiml({ reason: `the document is larger than ${MAX_TWIML_BYTES} bytes` }))
  const text = twiml.trim()
  if (/<!DOCTYPE/i.test(text)) return Either.left(new UnsupportedTwiml({ reason: "documents with a DOCTYPE are not accepted" }))
  if (XMLValidator.validate(text) !== true) return Either.left(new UnsupportedTwiml({ reason: "the document is not well-formed XML" }))
  const roots = parseXml(text)
  if (roots.length !== 1 || nameOf(roots[0]!) !== "Response") return Either.left(new UnsupportedTwiml({ reason: "the root element is not <Response>" }))
  const commands: Array<CallControlCommand> = []
  for (const node of childrenOf(roots[0]!)) {
    const step = translateVerb(node)
    if (Either.isLeft(step)) return Either.left(step.left)
    commands.push(step.right)
    if (step.right._tag === "Transfer" || step.right._tag === "Hangup") return Either.right(commands)
  }
  commands.push({ _tag: "Hangup" })
  return Either.right(commands)
}
