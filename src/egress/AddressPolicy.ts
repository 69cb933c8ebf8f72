import { isIP } from "node:net"

/**
 * Which destination addresses callgate may reach on a customer's behalf: event and fallback webhook
 * URLs and dial-out agentUrls (docs/security.md, "Outbound connections"). Both are chosen by
 * customers, so without this a URL could make callgate probe its own network or a cloud metadata
 * service. Pure: callers resolve names and ask about every address.
 */
export type AddressRefusal =
  | "loopback"
  | "private"
  | "link-local"
  | "cgnat"
  | "unspecified"
  | "multicast"
  | "metadata"
  | "reserved"

/** Cloud metadata endpoints are refused even when private networks are allowed (development). */
export const isAlwaysRefused = (refusal: AddressRefusal) => refusal === "metadata"

const describe: Record<AddressRefusal, string> = {
  loopback: "a loopback address",
  private: "a private network address",
  "link-local": "a link-local address",
  cgnat: "a carrier-grade NAT address",
  unspecified: "an unspecified address",
  multicast: "a multicast address",
  metadata: "a cloud metadata address",
  reserved: "a reserved or non-routable address"
}
export const describeRefusal = (refusal: AddressRefusal) => describe[refusal]

const parseIPv4 = (text: string): number | undefined => {
  const parts = text.split(".")
  if (parts.length !== 4) return undefined
  let value = 0
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part)) return undefined
    const octet = Number(part)
    if (octet > 255) return undefined
    value = value * 256 + octet
  }
  return value
}

/** Eight 16-bit groups; handles `::` compression, a dotted IPv4 tail and a `%zone` suffix. */
const parseIPv6 = (text: string): Array<number> | undefined => {
  let rest = text.split("%")[0]!
  const lastColon = rest.lastIndexOf(":")
  const tail = rest.slice(lastColon + 1)
  if (tail.includes(".")) {
    // a.b.c.d at the end stands for the last two groups.
    const v4 = parseIPv4(tail)
    if (v4 === undefined) return undefined
    rest = `${rest.slice(0, lastColon + 1)}${Math.floor(v4 / 65536).toString(16)}:${(v4 % 65536).toString(16)}`
  }
  const hex = (group: string) => (/^[0-9a-fA-F]{1,4}$/.test(group) ? parseInt(group, 16) : NaN)
  const toGroups = (part: string) => (part === "" ? [] : part.split(":").map(hex))
  const halves = rest.split("::")
  if (halves.length > 2) return undefined
  let groups: Array<number>
  if (halves.length === 2) {
    const left = toGroups(halves[0]!)
    const right = toGroups(halves[1]!)
    const missing = 8 - left.length - right.length
    if (missing < 1) return undefined
    groups = [...left, ...new Array<number>(missing).fill(0), ...right]
  } else {
    groups = toGroups(rest)
  }
  if (groups.length !== 8 || groups.some((g) => Number.isNaN(g))) return undefined
  return groups
}

const v4InRange = (value: number, base: string, bits: number) => {
  const start = parseIPv4(base)!
  const size = 2 ** (32 - bits)
  return value >= start && value < start + size
}

const IPV4_RULES: ReadonlyArray<readonly [string, number, AddressRefusal]> = [
  ["169.254.169.254", 32, "metadata"], // AWS, GCP, Azure, OpenStack, Oracle
  ["0.0.0.0", 8, "unspecified"],
  ["127.0.0.0", 8, "loopback"],
  ["10.0.0.0", 8, "private"],
  ["172.16.0.0", 12, "private"],
  ["192.168.0.0", 16, "private"],
  ["169.254.0.0", 16, "link-local"],
  ["100.64.0.0", 10, "cgnat"], // includes Alibaba Cloud's metadata at 100.100.100.200
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"], // includes 255.255.255.255
  ["192.0.0.0", 24, "reserved"],
  ["192.0.2.0", 24, "reserved"],
  ["192.88.99.0", 24, "reserved"],
  ["198.18.0.0", 15, "reserved"],
  ["198.51.100.0", 24, "reserved"],
  ["203.0.113.0", 24, "reserved"]
]

const classifyIPv4 = (value: number): AddressRefusal | undefined => {
  for (const [base, bits, refusal] of IPV4_RULES) if (v4InRange(value, base, bits)) return refusal
  return undefined
}

const embeddedV4 = (high: number, low: number) => high * 65536 + low

const classifyIPv6 = (g: ReadonlyArray<number>): AddressRefusal | undefined => {
  const [g0, g1, g2, g3, g4, g5, g6, g7] = g as [number, number, number, number, number, number, number, number]
  const zeroTo = (n: number) => g.slice(0, n).every((x) => x === 0)
  // fd00:ec2::254, AWS's IPv6 metadata endpoint.
  if (g0 === 0xfd00 && g1 === 0x0ec2 && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0 && g6 === 0 && g7 === 0x254) {
    return "metadata"
  }
  if (zeroTo(8)) return "unspecified"
  if (zeroTo(7) && g7 === 1) return "loopback"
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) reach the embedded IPv4 address.
  if (zeroTo(5) && g5 === 0xffff) return classifyIPv4(embeddedV4(g6, g7))
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) return classifyIPv4(embeddedV4(g6, g7))
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return "reserved" // local-use NAT64
  if (zeroTo(6)) return "reserved" // deprecated IPv4-compatible ::a.b.c.d
  if (g0 === 0x2002) return classifyIPv4(embeddedV4(g1, g2)) // 6to4 carries an IPv4 address
  if ((g0 & 0xfe00) === 0xfc00) return "private" // unique local fc00::/7
  if ((g0 & 0xffc0) === 0xfe80) return "link-local"
  if ((g0 & 0xffc0) === 0xfec0) return "private" // deprecated site-local
  if ((g0 & 0xff00) === 0xff00) return "multicast"
  if (g0 === 0x2001 && g1 === 0x0db8) return "reserved" // documentation
  if (g0 === 0x2001 && g1 === 0) return "reserved" // Teredo hides the real IPv4 destination
  if (g0 === 0x0100 && g1 === 0 && g2 === 0 && g3 === 0) return "reserved" // discard-only
  return undefined
}

/**
 * Why an IP address may not be a webhook destination, or undefined when it is a public address.
 * Anything that is not a valid IP address is refused as reserved.
 */
export const classifyAddress = (address: string): AddressRefusal | undefined => {
  const family = isIP(address.split("%")[0]!)
  if (family === 4) return classifyIPv4(parseIPv4(address)!)
  if (family === 6) {
    const groups = parseIPv6(address)
    return groups === undefined ? "reserved" : classifyIPv6(groups)
  }
  return "reserved"
}

const METADATA_NAMES = new Set(["metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"])

/**
 * Refusals decided by the host name alone, before any lookup: metadata service names, and
 * `localhost` names (RFC 6761: always loopback, whatever a resolver says).
 */
export const classifyHostname = (hostname: string): AddressRefusal | undefined => {
  const name = hostname.toLowerCase().replace(/\.$/, "")
  if (METADATA_NAMES.has(name)) return "metadata"
  if (name === "localhost" || name.endsWith(".localhost")) return "loopback"
  return undefined
}

/** A refusal that stands under the given setting (metadata addresses are refused even when private networks are allowed). */
export const refusalFor = (refusal: AddressRefusal | undefined, allowPrivate: boolean): AddressRefusal | undefined =>
  refusal !== undefined && (!allowPrivate || isAlwaysRefused(refusal)) ? refusal : undefined

/**
 * What can be refused about a URL's host without resolving it: an IP literal's class, or a
 * metadata / localhost name. Names that need a lookup are checked when the socket connects.
 */
export const hostRefusal = (url: URL, allowPrivate: boolean): AddressRefusal | undefined => {
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
  return refusalFor(isIP(host.split("%")[0]!) !== 0 ? classifyAddress(host) : classifyHostname(host), allowPrivate)
}
