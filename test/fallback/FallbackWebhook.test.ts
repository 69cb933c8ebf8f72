import { describe, expect, it } from "vitest"
import { classifyFallbackAnswer, fallbackUrl } from "../../src/fallback/FallbackWebhook.js"
import { xmlRootName } from "../../src/twiml/TwimlDocument.js"

describe("fallbackUrl", () => {
  it("adds the error as a percent-encoded query parameter", () => {
    expect(fallbackUrl("https://example.com/fallback", "agent socket dropped: 1006 & more")).toBe(
      "https://example.com/fallback?error=agent%20socket%20dropped%3A%201006%20%26%20more"
    )
  })

  it("keeps the URL's existing query parameters", () => {
    const url = new URL(fallbackUrl("https://example.com/fb?tenant=a%20b&x=1", "boom"))
    expect(url.searchParams.get("tenant")).toBe("a b")
    expect(url.searchParams.get("x")).toBe("1")
    expect(url.searchParams.get("error")).toBe("boom")
  })
})

describe("classifyFallbackAnswer (docs/fallback.md, The fallback webhook)", () => {
  const ok = (body: string, truncated = false) => classifyFallbackAnswer({ status: 200, body, truncated })

  it.each([
    ["<Say>", `<?xml version="1.0" encoding="UTF-8"?><Response><Say>Please hold.</Say></Response>`],
    ["<Dial>", `<Response><Dial callerId="+14155550100">+14155550199</Dial></Response>`],
    ["<Redirect>", `<Response><Redirect method="POST">https://example.com/next</Redirect></Response>`]
  ])("a 2xx <Response> document with %s is markup to apply", (_verb, xml) => {
    expect(ok(xml)).toEqual({ _tag: "Markup", twiml: xml })
  })

  it("XML whose root is not <Response> is unexpected", () => {
    expect(ok("<Foo><Say>hi</Say></Foo>")).toMatchObject({ _tag: "Unexpected", reason: "XML root is <Foo>, not <Response>" })
  })

  it("JSON is unexpected", () => {
    expect(ok(`{"action":"transfer"}`)).toMatchObject({ _tag: "Unexpected", reason: "body is not an XML document" })
  })

  it("an empty 200 is unexpected", () => {
    expect(ok("")).toMatchObject({ _tag: "Unexpected", reason: "empty body" })
  })

  it("malformed XML is unexpected", () => {
    expect(ok("<Response><Say>unclosed</Response>")).toMatchObject({ _tag: "Unexpected" })
  })

  it("an oversized body is unexpected, never applied", () => {
    expect(ok("<Response><Say>…</Say></Response>", true)).toMatchObject({ _tag: "Unexpected" })
  })

  it.each([302, 404, 500])("HTTP %i is a webhook failure", (status) => {
    expect(classifyFallbackAnswer({ status, body: "<Response/>", truncated: false })).toEqual({
      _tag: "Failed",
      reason: `HTTP ${status}`
    })
  })

  it("does not expand entities", () => {
    const bomb = `<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><Response><Say>&b;</Say></Response>`
    expect(xmlRootName(bomb)).toBe("Response")
  })
})
