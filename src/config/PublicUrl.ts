import { networkInterfaces, hostname } from "node:os"
import { Effect, Option } from "effect"
import { AppConfig } from "./AppConfig.js"

/** Where the HTTP server ended up listening (from `server.address()`). */
export interface ListeningAddress {
  readonly host: string
  readonly port: number
}

const wildcardHosts = new Set(["0.0.0.0", "::", "0:0:0:0:0:0:0:0"])

/** `http://host:port` for an address a process on this machine can reach; wildcards become loopback. */
export const urlForAddress = (address: ListeningAddress): string => {
  const host = address.host === "::" || address.host === "0:0:0:0:0:0:0:0" ? "::1" : wildcardHosts.has(address.host) ? "127.0.0.1" : address.host
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`
}

/** True when `host` (a URL's hostname) names this machine: loopback, its host name, or one of its interface addresses. */
export const isThisHost = (host: string): boolean => {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase()
  if (bare === "localhost" || bare.endsWith(".localhost") || bare === hostname().toLowerCase()) return true
  if (/^127\./.test(bare) || bare === "::1" || wildcardHosts.has(bare)) return true
  return Object.values(networkInterfaces()).some((list) => (list ?? []).some((nic) => nic.address.toLowerCase() === bare))
}

const portOf = (url: URL): number => (url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80)

/**
 * What the start-up log says about PUBLIC_URL once the server listens: which URL carriers are
 * told, and a warning when PUBLIC_URL names this machine on a port nothing of ours listens on
 * (not when it has a path, as behind the fleet's nginx: `http://127.0.0.1:8080/i/callgate-1`).
 */
export type PublicUrlReport =
  | { readonly _tag: "Derived"; readonly publicUrl: string; readonly listening: string }
  | { readonly _tag: "Configured"; readonly publicUrl: string }
  | { readonly _tag: "OtherPort"; readonly publicUrl: string; readonly listening: string }

/**
 * The base URL carriers are told to reach callgate on (docs/api.md, "Configuration": PUBLIC_URL).
 * PUBLIC_URL when set; otherwise derived from the address the server actually listens on, so a
 * PORT-only start hands out stream URLs that reach this very process.
 */
export class PublicUrl extends Effect.Service<PublicUrl>()("callgate/PublicUrl", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    // Before the server listens (and in tests that never listen): HOST and PORT as configured.
    let current = config.publicUrl
    return {
      /** The base URL (no trailing slash) stream URLs and carrier signature checks are built from. */
      current: (): string => current,
      /** Called once the server listens; returns what the start-up log should say. */
      listeningOn: (address: ListeningAddress): PublicUrlReport => {
        const listening = `${address.host.includes(":") ? `[${address.host}]` : address.host}:${address.port}`
        if (Option.isNone(config.publicUrlSetting)) {
          current = urlForAddress(address)
          return { _tag: "Derived", publicUrl: current, listening }
        }
        const url = new URL(config.publicUrlSetting.value)
        // A path (the fleet's `/i/{INSTANCE_ID}`) means a proxy routes it here: another port is expected.
        const behindProxy = url.pathname.replace(/\/+$/, "") !== ""
        return isThisHost(url.hostname) && portOf(url) !== address.port && !behindProxy
          ? { _tag: "OtherPort", publicUrl: current, listening }
          : { _tag: "Configured", publicUrl: current }
      }
    } as const
  })
}) {}
