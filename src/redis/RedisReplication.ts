import { createRequire } from "node:module"
import { Effect } from "effect"
import { Cluster, type Redis } from "ioredis"
import { NotReplicated, StoreError } from "../kernel/StoreError.js"

/**
 * `REDIS_WAIT_REPLICAS`: `auto` waits for one replica when the primary that took the write has one
 * connected; a number always waits for that many (0: never).
 */
export type WaitReplicas = "auto" | number

/** A key's Cluster hash slot: ioredis's own (untyped) helper, the package it routes commands with. */
const calculateSlot = createRequire(import.meta.url)("cluster-key-slot") as (key: string) => number

/** How long `auto` trusts what a standalone or Sentinel primary said about its replicas (ROLE). */
const ROLE_FRESH_MS = 1000

/** Connected replicas in a ROLE answer of a primary (`["master", offset, [[ip, port, offset], ...]]`); 0 for anything else. */
export const replicasInRole = (role: unknown): number =>
  Array.isArray(role) && role[0] === "master" && Array.isArray(role[2]) ? role[2].length : 0

/** The probe key beside `key`: in `key`'s hash slot (its hash tag, or the whole key as the tag). */
export const probeKey = (prefix: string, key: string) => {
  const open = key.indexOf("{")
  const close = open >= 0 ? key.indexOf("}", open + 1) : -1
  const tag = open >= 0 && close > open + 1 ? key.slice(open, close + 1) : `{${key}}`
  return `${prefix}replication-probe:${tag}`
}

/**
 * Waits until a write already acknowledged on `main` reached the replicas REDIS_WAIT_REPLICAS asks
 * for (docs/scaling.md, "Nothing acknowledged is lost"). Redis `WAIT` blocks the connection it is
 * sent on and counts only that connection's writes, so it runs on `waiter`, a connection of its
 * own: a probe write (a tiny expiring key in `key`'s hash slot, so on the same primary) and WAIT
 * in one pipeline. Replication is one ordered stream per primary: once a replica has the probe, it
 * has every write the primary took before it, ours included. `auto` learns a primary's replicas
 * from ROLE (a standalone or Sentinel primary, re-read at most once a second and after every
 * reconnect) or from the Cluster's slot table (CLUSTER SLOTS lists a primary's healthy replicas).
 * Fails with a StoreError (NotReplicated) when fewer confirm within `timeoutMs`.
 */
export const makeReplicated = (main: Redis | Cluster, waiter: Redis | Cluster, prefix: string, setting: WaitReplicas, timeoutMs: number, now: () => number) => {
  let known: { readonly replicas: number; readonly at: number } | undefined
  // A Sentinel failover or reconnect may land on another primary: learn its replicas afresh.
  waiter.on("ready", () => {
    known = undefined
  })

  const replicasFor = async (key: string): Promise<number> => {
    if (main instanceof Cluster) {
      const nodes = main.slots[calculateSlot(key)]
      return nodes === undefined ? 0 : Math.max(0, nodes.length - 1)
    }
    const at = now()
    if (known !== undefined && at - known.at < ROLE_FRESH_MS) return known.replicas
    const replicas = replicasInRole(await waiter.call("ROLE"))
    known = { replicas, at }
    return replicas
  }

  const confirm = async (key: string) => {
    const wanted = setting === "auto" ? Math.min(1, await replicasFor(key)) : setting
    if (wanted === 0) return
    const results = await waiter.pipeline().set(probeKey(prefix, key), "1", "PX", 60_000).call("WAIT", wanted, timeoutMs).exec()
    const [error, confirmed] = results?.[1] ?? [new Error("no answer to WAIT"), 0]
    if (error) throw error
    if (Number(confirmed) < wanted) throw new NotReplicated(wanted, Number(confirmed), timeoutMs)
  }

  return (key: string, operation: string): Effect.Effect<void, StoreError> =>
    Effect.tryPromise({ try: () => confirm(key), catch: (cause) => new StoreError({ operation: `${operation} (replication)`, cause }) })
}
