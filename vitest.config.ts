import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    // Two cores: real sockets and child processes do better with few workers than with many.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } }
  }
})
