import { Either } from "effect"
import { describe, expect, it } from "vitest"
import { MAX_TWIML_BYTES, translateTwiml } from "../../src/twiml/TwimlCallControl.js"

const commands = (twiml: string) => {
  const result = translateTwiml(twiml)
  if (Either.isLeft(result)) throw new Error(`unexpected refusal: ${result.left.reason}`)
  return result.right
}
const refusal = (twiml: string) => {
  const result = translateTwiml(twiml)
  if (Either.isRight(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.right)}`)
  return result.left.reason
}

describe("TwiML to Call Control commands", () => {
  it("keeps document order and ends a document that runs out of verbs with a hangup", () => {
    expect(
      commands(`<?xml version="1.0"?><!-- fallback --><Response>
        <Say voice="Polly.Joanna">Caf&#233; &lt;open&gt; &#x263A;</Say>
        <Pause/>
        <Play loop="0">https://cdn.example.com/a.wav</Play>
      </Response>`)
    ).toEqual([
      { _tag: "Speak", payload: "Café <open> ☺", voice: "Polly.Joanna", language: undefined },
      { _tag: "Wait", seconds: 1 },
      { _tag: "Play", audioUrl: "https://cdn.example.com/a.wav", loop: "infinity" },
      { _tag: "Hangup" }
    ])
  })

  it("an empty <Response> just hangs up", () => {
    expect(commands("<Response/>")).toEqual([{ _tag: "Hangup" }])
  })

  it("<Dial> takes a bare number, one <Number> or one <Sip>, and ends the document", () => {
    expect(commands("<Response><Dial>+14155550199</Dial><Hangup/></Response>")).toEqual([
      { _tag: "Transfer", to: "+14155550199", from: undefined, timeoutSecs: undefined }
    ])
    expect(commands('<Response><Dial callerId="+14155550111"><Sip>sip:desk@example.com</Sip></Dial></Response>')).toEqual([
      { _tag: "Transfer", to: "sip:desk@example.com", from: "+14155550111", timeoutSecs: undefined }
    ])
  })

  it("voices: man/woman/alice map to Telnyx's male/female; unknown names are refused", () => {
    expect(commands('<Response><Say voice="woman">x</Say><Hangup/></Response>')[0]).toMatchObject({ voice: "female" })
    expect(commands('<Response><Say voice="man">x</Say><Hangup/></Response>')[0]).toMatchObject({ voice: "male" })
    expect(refusal('<Response><Say voice="robot">x</Say></Response>')).toContain("voice")
  })

  it.each([
    ["<Response><Dial><Number>+1415</Number><Number>+1416</Number></Dial></Response>", "<Dial> must hold one number"],
    ["<Response><Dial><Conference>room</Conference></Dial></Response>", "<Dial> must hold one number"],
    ["<Response><Dial>14155550199</Dial></Response>", "E.164"],
    ['<Response><Pause length="301"/></Response>', "<Pause"],
    ['<Response><Pause length="-1"/></Response>', "<Pause"],
    ['<Response><Play digits="1234"/></Response>', "digits"],
    ["<Response><Play>ftp://x/a.wav</Play></Response>", "http(s) audio URL"],
    ["<Response><Say></Say></Response>", "<Say>"],
    ["<Response><Say><Break/>x</Say></Response>", "<Say>"],
    ["<Response><Enqueue>q</Enqueue></Response>", "<Enqueue> cannot run"],
    ["<Response>text</Response>", "text directly"],
    ["<Response></Response><Response></Response>", "not"],
    ["", "not well-formed"]
  ])("refuses %s", (twiml, reason) => {
    expect(refusal(twiml)).toContain(reason)
  })

  it("refuses documents over the size limit before parsing them", () => {
    expect(refusal(`<Response><Say>${"a".repeat(MAX_TWIML_BYTES)}</Say></Response>`)).toContain("larger than")
  })
})
