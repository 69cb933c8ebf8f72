import { XMLParser } from "fast-xml-parser"
import { SimError } from "./SimCall.js"

/** What a carrier takes from a `<Response><Connect><Stream>` answer (TwiML or TeXML). */
export interface StreamInstruction {
  /** The stream's `url` attribute, entities decoded. */
  readonly url: string
  /** Every attribute of `<Stream>` (url, bidirectionalMode, codec, ...). */
  readonly attributes: Readonly<Record<string, string>>
  /** The `<Parameter name value>` children, which come back in the start frame's custom parameters. */
  readonly parameters: Readonly<Record<string, string>>
  /**
   * The `<Redirect>` after `<Connect>`, if the answer has one: where the carrier goes once the
   * stream ends (unless the call's document was replaced through the REST API meanwhile).
   */
  readonly redirect?: { readonly url: string; readonly method: "GET" | "POST" }
}

const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: "",
  parseAttributeValue: false,
  parseTagValue: false,
  isArray: (name) => name === "Parameter" || name === "Stream" || name === "Connect" || name === "Redirect"
})

/**
 * Reads the stream instruction out of a voice webhook's answer, as the carrier would. Only the
 * bidirectional form, `<Connect><Stream>`, is accepted: `<Start><Stream>` would be one-way audio.
 */
export const parseStreamMarkup = (xml: string): StreamInstruction => {
  let document: any
  try {
    document = parser.parse(xml)
  } catch (error) {
    throw new SimError(`the webhook answer is not XML: ${(error as Error).message}`, "markup", undefined, xml)
  }
  const response = document?.Response
  if (response === undefined || typeof response !== "object") {
    throw new SimError("the webhook answer has no <Response> root", "markup", undefined, xml)
  }
  const stream = (response.Connect as Array<any> | undefined)?.flatMap((connect) => (connect?.Stream as Array<any>) ?? [])[0]
  if (stream === undefined) throw new SimError("the webhook answer has no <Connect><Stream>", "markup", undefined, xml)
  const attributes: Record<string, string> = {}
  for (const [key, value] of Object.entries(stream)) if (typeof value === "string") attributes[key] = value
  if (!attributes.url) throw new SimError("<Stream> has no url attribute", "markup", undefined, xml)
  const parameters: Record<string, string> = {}
  for (const parameter of (stream.Parameter as Array<any> | undefined) ?? []) {
    if (typeof parameter?.name === "string") parameters[parameter.name] = String(parameter.value ?? "")
  }
  const redirect = (response.Redirect as Array<any> | undefined)?.[0]
  const redirectUrl = typeof redirect === "string" ? redirect : typeof redirect?.["#text"] === "string" ? (redirect["#text"] as string) : undefined
  const method = typeof redirect === "object" && String(redirect?.method ?? "").toUpperCase() === "GET" ? "GET" : "POST"
  return { url: attributes.url, attributes, parameters, ...(redirectUrl ? { redirect: { url: redirectUrl.trim(), method } } : {}) }
}
