import { Either } from "effect"
import { XMLParser, XMLValidator } from "fast-xml-parser"

/**
 * Reading TwiML/TeXML documents others wrote (a fallback webhook's answer, an agent's call update):
 * the one XML parser, the root check, what a document does to the call. Pure.
 */

/** Twilio refuses a call update whose Twiml parameter is longer than this. */
export const MAX_TWILIO_TWIML_CHARS = 4000

/** A parsed element: `{ [name]: children, ":@": attributes }` (fast-xml-parser's preserveOrder form). */
export type XmlNode = Record<string, unknown> & { readonly ":@"?: Record<string, string> }

const parser = new XMLParser({
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: "",
  // Entities are never expanded by the parser (no DOCTYPE expansion, no entity-expansion blow-ups
  // from a hostile sender); TwimlCallControl decodes the five XML ones and character references.
  processEntities: false,
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true,
  ignoreDeclaration: true,
  ignorePiTags: true
})

/** The top-level nodes of a document already checked to be well-formed (text nodes dropped). */
export const parseXml = (text: string): ReadonlyArray<XmlNode> =>
  (parser.parse(text) as Array<XmlNode>).filter((node) => nameOf(node) !== "#text")

export const nameOf = (node: XmlNode): string | undefined => Object.keys(node).find((key) => key !== ":@")

/** The name of the document's root element, or undefined when the text is not well-formed XML with one root. */
export const xmlRootName = (text: string): string | undefined => {
  const trimmed = text.trim()
  if (!trimmed.startsWith("<")) return undefined
  if (XMLValidator.validate(trimmed) !== true) return undefined
  const roots = parseXml(trimmed)
  return roots.length === 1 ? nameOf(roots[0]!) : undefined
}

/** The document, trimmed, when it is well-formed XML whose root is `<Response>`; else why not. */
export const checkResponseDocument = (text: string): Either.Either<string, string> => {
  const twiml = text.trim()
  const root = xmlRootName(twiml)
  if (root === undefined) return Either.left("the document is not well-formed XML")
  if (root !== "Response") return Either.left(`the root element is <${root}>, not <Response>`)
  return Either.right(twiml)
}

/** What a document does to the call: moves it (`<Dial>`), only hangs up, or anything else. */
export const twimlEffect = (twiml: string): "dial" | "hangup" | "other" => {
  if (/<Dial[\s>/]/.test(twiml)) return "dial"
  const body = twiml.replace(/^<\?xml[^>]*\?>/, "").replace(/\s+/g, "")
  return /^<Response><Hangup\/><\/Response>$/.test(body) ? "hangup" : "other"
}
