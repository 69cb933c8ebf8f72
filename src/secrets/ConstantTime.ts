import { timingSafeEqual } from "node:crypto"

/**
 * Whether two secrets (bytes, or strings taken as UTF-8) are equal, in time that does not depend on
 * where they differ: the one comparison of MACs, tokens and key digests. Only the length is
 * compared first (it is not secret: every MAC and digest has a fixed one).
 */
export const constantTimeEqual = (a: Uint8Array | string, b: Uint8Array | string): boolean => {
  const left = typeof a === "string" ? Buffer.from(a, "utf8") : a
  const right = typeof b === "string" ? Buffer.from(b, "utf8") : b
  return left.length === right.length && timingSafeEqual(left, right)
}
