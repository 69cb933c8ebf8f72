import { inject } from "vitest"
import { fleetPlacementSuite } from "./fleetSuite.js"

/** The fleet end-to-end test on a three-master Redis Cluster (REDIS_URL=redis-cluster://...). */
fleetPlacementSuite("Redis Cluster", () => inject("redisClusterUrl"))
