import { ConfigProvider, Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { AppConfig } from "../../src/config/AppConfig.js"
import { PublicUrl } from "../../src/config/PublicUrl.js"

const report = (env: Record<string, string>, port: number) =>
  Effect.runPromise(
    Effect.map(PublicUrl, (publicUrl) => publicUrl.listeningOn({ host: "127.0.0.1", port })).pipe(
      Effect.provide(PublicUrl.Default),
      Effect.provide(AppConfig.Default),
      Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ADMIN_API_KEY: "public-url-test-admin-key", ...env })))))
    )
  )

describe("PublicUrl's start-up report", () => {
  it("warns when PUBLIC_URL names this machine on a port callgate does not listen on", async () => {
    expect((await report({ PUBLIC_URL: "http://127.0.0.1:9000" }, 8080))._tag).toBe("OtherPort")
  })

  it("does not warn behind the fleet's nginx, whose PUBLIC_URL carries the instance's path", async () => {
    expect(await report({ PUBLIC_URL: "http://127.0.0.1:8080/i/callgate-1" }, 41234)).toEqual({ _tag: "Configured", publicUrl: "http://127.0.0.1:8080/i/callgate-1" })
  })

  it("derives it from the listening address when unset", async () => {
    expect(await report({}, 8093)).toMatchObject({ _tag: "Derived", publicUrl: "http://127.0.0.1:8093" })
  })
})
