import { Effect } from "effect"
import { InstanceList } from "../../fleet/InstanceView.js"
import { InstanceRegistry } from "../../fleet/InstanceRegistry.js"
import { apiRoute } from "../ApiRoute.js"

export const instanceRoutes = [
  apiRoute({
    method: "GET",
    path: "/v1/instances",
    summary: "List the live instances of the fleet with their live calls and idle dial-in agents (admin only)",
    tag: "instances",
    auth: "admin",
    response: InstanceList,
    handler: () =>
      Effect.flatMap(InstanceRegistry, (registry) =>
        Effect.map(registry.instances, (live) => ({
          instances: live.map((entry) => ({ ...entry, self: entry.id === registry.instanceId }))
        }))
      )
  })
]
