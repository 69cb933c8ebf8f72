import { Schema } from "effect"

/** One live instance as `GET /v1/instances` shows it (docs/api.md). */
export const InstanceView = Schema.Struct({
  id: Schema.String.annotations({ description: "INSTANCE_ID" }),
  publicUrl: Schema.String.annotations({ description: "The instance's own PUBLIC_URL (its media streams go there)" }),
  draining: Schema.Boolean,
  liveCalls: Schema.Number,
  idleAgents: Schema.Array(
    Schema.Struct({ agentId: Schema.String, environmentId: Schema.String, idle: Schema.Number })
  ).annotations({ description: "Idle dial-in agent connections per environment" }),
  startedAt: Schema.String,
  lastSeenAt: Schema.String.annotations({ description: "Its last refresh (every 2 s; silent 10 s = gone)" }),
  self: Schema.Boolean.annotations({ description: "True for the instance that answered" })
}).annotations({ identifier: "Instance" })

export const InstanceList = Schema.Struct({ instances: Schema.Array(InstanceView) }).annotations({ identifier: "InstanceList" })
