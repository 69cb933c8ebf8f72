import { Context, type Effect } from "effect"
import type { StoreError } from "../kernel/StoreError.js"

/**
 * Which session tokens a media stream has already presented, fleet-wide (docs/scaling.md,
 * "Session tokens"). A token is single use: `spend` records its id atomically and answers true
 * only for the first presentation. Entries are kept until the token's own expiry (after that the
 * signature check refuses it anyway). Two adapters (in-memory, Redis) pass one contract suite
 * (test/telephony/SpentTokenStore.contract.ts).
 */
export interface SpentTokenStoreShape {
  /** True when `tokenId` had not been spent (and now is); false when it had. */
  readonly spend: (tokenId: string, expiresAtMs: number) => Effect.Effect<boolean, StoreError>
}

export class SpentTokenStore extends Context.Tag("callgate/SpentTokenStore")<SpentTokenStore, SpentTokenStoreShape>() {}
