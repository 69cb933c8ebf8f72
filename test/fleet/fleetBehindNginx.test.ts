import { inject } from "vitest"
import { fleetPlacementSuite } from "./fleetSuite.js"

/** The fleet end-to-end test (fleetSuite.ts) on one Redis. */
fleetPlacementSuite("one Redis", () => inject("redisUrl"))
