import { createRequire } from "node:module"
import { Effect } from "effect"
import { Cluster, type Redis } from "ioredis"
import { StoreError } from "../core/StoreError.js"

/**
 * `REDIS_WAIT_REPLICAS`: `auto` waits for one replica when the primary that took the write has one
 * connected; a number always waits for that many (0: never).
 */
export type WaitReplicas = "auto" | number

/** A write the primary took but no replica confirmed in time: it may be lost in a failover. */
export class NotReplicated extends Error {
  constructor(readonly wanted: number, readonly confirmed: number, readonly timeoutMs: number) {
    super(`the write was not confirmed by ${wanted} replica(s) within ${timeoutMs} ms (${confirmed} did)`)
  }
}

/** A key's Cluster hash slot: ioredis's own (untyped) helper, the package it routes commands with. */
const calculateSlot = createRequire(import.meta.url)("cluster-key-slot") as (key: string) => number

/** How long `auto` trusts what a standalone primary said about its replicas (ROLE). */
const ROLE_FRESH_MS = 1000

/** Connected replicas in a ROLE answer of a primary (`["master", offset, [[ip, port, offset], ...]]`); 0 for anything else. */
export const replicasInRole = (role: unknown): number =>
  Array.isArray(role) && role[0] === "master" && Array.isArray(role[2]) ? role[2].length : 0

/**
 * Waits until the writes this connection sent before, on the primary that holds `key`, reached
 * the replicas `REDIS_WAIT_REPLICAS` asks for (docs/scaling.md, "Nothing acknowledged is lost").
 * Redis `WAIT` counts every write the connection made before it, so it is sent on the connection
 * that made the write: the one connection of a standalone or Sentinel client, or (in a Cluster) the
 * connection to the key's primary, reached by a pipeline that carries the key. `auto` learns the
 * replicas from ROLE (a standalone or Sentinel primary, re-read at most once a second) or from the
 * Cluster's slot table (CLUSTER SLOTS lists a primary's healthy replicas). Fails with a StoreError
 * (NotReplicated) when fewer confirm within `timeoutMs`.
 */
export const makeReplicated = (client: Redis | Cluster, setting: WaitReplicas, timeoutMs: number) => {
  let known: { readonly replicas: number; readonly at: number } | undefined
  // A Sentinel failover or reconnect may land on another primary: learn its replicas afresh.
  client.on("ready", () => {
    known = undefined
  })

  const replicasFor = async (key: string): Promise<number> => {
    if (client instanceof Cluster) {
      const nodes = client.slots[calculateSlot(key)]
      return nodes === undefined ? 0 : Math.max(0, nodes.length - 1)
    }
    const now = Date.now()
    if (known !== undefined && now - known.at < ROLE_FRESH_MS) return known.replicas
    const replicas = replicasInRole(await client.call("ROLE"))
    known = { replicas, at: now }
    return replicas
  }

  const confirm = async (key: string) => {
    const wanted = setting === "auto" ? Math.min(1, await replicasFor(key)) : setting
    if (wanted === 0) return
    let confirmed: unknown
    if (client instanceof Cluster) {
      // EXISTS only routes the pipeline to the key's primary; WAIT follows it on that connection.
      const results = await client.pipeline().exists(key).call("WAIT", wanted, timeoutMs).exec()
      const [error, value] = results?.[1] ?? [new Error("no answer to WAIT"), 0]
      if (error) throw error
      confirmed = value
    } else {
      confirmed = await client.call("WAIT", wanted, timeoutMs)
    }
    if (Number(confirmed) < wanted) throw new NotReplicated(wanted, Number(confirmed), timeoutMs)
  }

  return (key: string, operation: string): Effect.Effect<void, StoreError> =>
    setting === 0 ? Effect.void : Effect.tryPromise({ try: () => confirm(key), catch: (cause) => new StoreError({ operation: `${operation} (replication)`, cause }) })
}
