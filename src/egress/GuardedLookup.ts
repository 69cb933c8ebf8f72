import { lookup as dnsLookup } from "node:dns/promises"
import type { LookupFunction } from "node:net"
import { type AddressRefusal, classifyAddress, describeRefusal, refusalFor } from "./AddressPolicy.js"

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

export type Resolver = (hostname: string) => Promise<ReadonlyArray<ResolvedAddress>>

/** Raised inside the socket lookup; recognised on the way out to report a refusal, not a connection error. */
export class RefusedAddressError extends Error {
  readonly code = "ERR_CALLGATE_REFUSED_ADDRESS"
  constructor(readonly refusal: AddressRefusal) {
    super(`the destination resolves to ${describeRefusal(refusal)}`)
  }
}

export const systemResolve: Resolver = async (hostname) =>
  (await dnsLookup(hostname, { all: true, verbatim: true })).map((entry) => ({
    address: entry.address,
    family: entry.family === 6 ? 6 : 4
  }))

/**
 * A `lookup` for net/tls sockets that checks every resolved address against AddressPolicy before
 * the socket connects (docs/security.md, "Outbound connections"). Called by the socket itself, so
 * what is checked is what it connects to: no second resolution a DNS-rebinding attacker could
 * answer differently. Sockets skip their lookup for IP literals: callers check those first
 * (AddressPolicy.hostRefusal).
 */
export const guardedLookup = (allowPrivate: boolean, resolve: Resolver = systemResolve): LookupFunction =>
  (hostname, lookupOptions, callback) => {
    const done = callback as (error: Error | null, address: unknown, family?: number) => void
    resolve(hostname).then(
      (addresses) => {
        if (addresses.length === 0) {
          return done(Object.assign(new Error(`no address for the host`), { code: "ENOTFOUND" }), undefined)
        }
        for (const { address } of addresses) {
          const refusal = refusalFor(classifyAddress(address), allowPrivate)
          if (refusal !== undefined) return done(new RefusedAddressError(refusal), undefined)
        }
        const wanted = lookupOptions.family === 4 || lookupOptions.family === 6 ? lookupOptions.family : undefined
        const usable = wanted === undefined ? addresses : addresses.filter((a) => a.family === wanted)
        if (usable.length === 0) {
          return done(Object.assign(new Error(`no address of the wanted family`), { code: "ENOTFOUND" }), undefined)
        }
        if (lookupOptions.all) return done(null, usable.map((a) => ({ address: a.address, family: a.family })))
        return done(null, usable[0]!.address, usable[0]!.family)
      },
      (error: unknown) => done(error instanceof Error ? error : new Error("lookup failed"), undefined)
    )
  }
