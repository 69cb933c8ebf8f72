import { Either } from "effect"
import { describe, expect, it } from "vitest"
import { connectStreamTwiml, dialTwiml, hangupTwiml, sayAndHangupTwiml } from "../../src/twiml/TwimlBuilder.js"
import { checkResponseDocument, twimlEffect, xmlRootName } from "../../src/twiml/TwimlDocument.js"

describe("TwiML, built and read in one place", () => {
  it("every document callgate builds is a <Response> the reader accepts, and says what it does", () => {
    for (const document of [hangupTwiml(), sayAndHangupTwiml("Goodbye & <thanks>"), dialTwiml("+15550100", "+15550199"), connectStreamTwiml({ url: "wss://x/s" }, [["a", "1"], ["b", undefined]], "https://x/r")]) {
      expect(Either.getOrThrow(checkResponseDocument(document))).toBe(document)
    }
    expect(twimlEffect(hangupTwiml())).toBe("hangup")
    expect(twimlEffect(dialTwiml("+15550100"))).toBe("dial")
    expect(twimlEffect(sayAndHangupTwiml("bye"))).toBe("other")
    expect(dialTwiml("+15550100", "+15550199")).toContain('<Dial callerId="+15550199">+15550100</Dial>')
    expect(connectStreamTwiml({ url: "wss://x/s" }, [["a", "1"], ["b", undefined]], "https://x/r")).toBe(
      '<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream url="wss://x/s"><Parameter name="a" value="1"/></Stream></Connect><Redirect method="POST">https://x/r</Redirect></Response>'
    )
  })

  it("says why a document is refused", () => {
    expect(checkResponseDocument("not xml")).toEqual(Either.left("the document is not well-formed XML"))
    expect(checkResponseDocument("<Response><Say>open")).toEqual(Either.left("the document is not well-formed XML"))
    expect(checkResponseDocument("<Reply/>")).toEqual(Either.left("the root element is <Reply>, not <Response>"))
    expect(xmlRootName('<?xml version="1.0"?>\n<Response/>')).toBe("Response")
    expect(xmlRootName("<a/><b/>")).toBeUndefined()
  })
})
