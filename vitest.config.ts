import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    // Limits only, never assertions: a machine kept busy by other work needs them generous.
    testTimeout: 120_000,
    hookTimeout: 240_000,
    pool: "forks",
    // Two cores: real sockets and child processes do better with few workers than with many.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } }
  }
})
