import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { gunzipSync } from "node:zlib"

/**
 * An OTLP/HTTP trace receiver on 127.0.0.1 (the collector's side of
 * https://opentelemetry.io/docs/specs/otlp/#otlphttp): `POST /v1/traces` with an
 * ExportTraceServiceRequest as binary protobuf (`application/x-protobuf`) or OTLP/JSON
 * (`application/json`), gzip or not, answered 200 with an empty ExportTraceServiceResponse in the
 * same encoding. Every span received is kept, decoded to one plain shape whichever encoding it came
 * in, with the content type it came with.
 */

export type AttributeValue = string | number | boolean | ReadonlyArray<AttributeValue> | null

export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  /** "" for a root span. */
  readonly parentSpanId: string
  readonly name: string
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  readonly kind: number
  readonly startNs: bigint
  readonly endNs: bigint
  readonly attributes: Readonly<Record<string, AttributeValue>>
  readonly links: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number
  readonly resource: Readonly<Record<string, AttributeValue>>
  readonly contentType: string
}

export interface OtlpReceiver {
  /** http://127.0.0.1:<port>: the value for OTEL_EXPORTER_OTLP_ENDPOINT. */
  readonly endpoint: string
  readonly spans: ReadonlyArray<ReceivedSpan>
  readonly requests: () => number
  readonly close: () => Promise<void>
}

// -------------------------------------------------------------------------------------------------
// Protobuf wire format, as much of it as the OTLP trace messages use
// (https://protobuf.dev/programming-guides/encoding/).

interface Field {
  readonly number: number
  /** Varint and fixed values; for length-delimited fields, the bytes. */
  readonly varint?: bigint
  readonly bytes?: Buffer
}

const readFields = (buffer: Buffer): Array<Field> => {
  const fields: Array<Field> = []
  let offset = 0
  const varint = (): bigint => {
    let result = 0n
    let shift = 0n
    for (;;) {
      if (offset >= buffer.length) throw new Error("truncated varint")
      const byte = buffer[offset++]!
      result |= BigInt(byte & 0x7f) << shift
      if ((byte & 0x80) === 0) return result
      shift += 7n
    }
  }
  while (offset < buffer.length) {
    const key = Number(varint())
    const number = key >>> 3
    switch (key & 7) {
      case 0:
        fields.push({ number, varint: varint() })
        break
      case 1:
        fields.push({ number, varint: buffer.readBigUInt64LE(offset), bytes: buffer.subarray(offset, offset + 8) })
        offset += 8
        break
      case 2: {
        const length = Number(varint())
        fields.push({ number, bytes: buffer.subarray(offset, offset + length) })
        offset += length
        break
      }
      case 5:
        fields.push({ number, varint: BigInt(buffer.readUInt32LE(offset)) })
        offset += 4
        break
      default:
        throw new Error(`unsupported wire type ${key & 7}`)
    }
  }
  return fields
}

const all = (fields: Array<Field>, number: number) => fields.filter((f) => f.number === number)
const one = (fields: Array<Field>, number: number) => fields.find((f) => f.number === number)
const text = (field: Field | undefined) => field?.bytes?.toString("utf8") ?? ""
const hex = (field: Field | undefined) => field?.bytes?.toString("hex") ?? ""

/** AnyValue: 1 string, 2 bool, 3 int, 4 double, 5 array. */
const protoValue = (bytes: Buffer | undefined): AttributeValue => {
  if (bytes === undefined) return null
  const fields = readFields(bytes)
  const f = fields[0]
  if (f === undefined) return null
  switch (f.number) {
    case 1:
      return text(f)
    case 2:
      return f.varint === 1n
    case 3:
      return Number(BigInt.asIntN(64, f.varint!))
    case 4:
      return f.bytes!.readDoubleLE(0)
    case 5:
      return all(readFields(f.bytes!), 1).map((v) => protoValue(v.bytes))
    default:
      return null
  }
}

/** KeyValue: 1 key, 2 value. */
const protoAttributes = (fields: Array<Field>, number: number) => {
  const attributes: Record<string, AttributeValue> = {}
  for (const kv of all(fields, number)) {
    const inner = readFields(kv.bytes!)
    attributes[text(one(inner, 1))] = protoValue(one(inner, 2)?.bytes)
  }
  return attributes
}

const fromProtobuf = (body: Buffer, contentType: string): Array<ReceivedSpan> => {
  const spans: Array<ReceivedSpan> = []
  // ExportTraceServiceRequest: 1 resource_spans. ResourceSpans: 1 resource, 2 scope_spans. ScopeSpans: 2 spans.
  for (const resourceSpans of all(readFields(body), 1)) {
    const rs = readFields(resourceSpans.bytes!)
    const resourceField = one(rs, 1)
    const resource = resourceField === undefined ? {} : protoAttributes(readFields(resourceField.bytes!), 1)
    for (const scopeSpans of all(rs, 2)) {
      for (const spanField of all(readFields(scopeSpans.bytes!), 2)) {
        // Span: 1 trace_id, 2 span_id, 4 parent_span_id, 5 name, 6 kind, 7 start, 8 end, 9 attributes, 13 links, 15 status.
        const s = readFields(spanField.bytes!)
        const status = one(s, 15)
        spans.push({
          traceId: hex(one(s, 1)),
          spanId: hex(one(s, 2)),
          parentSpanId: hex(one(s, 4)),
          name: text(one(s, 5)),
          kind: Number(one(s, 6)?.varint ?? 0n),
          startNs: one(s, 7)?.varint ?? 0n,
          endNs: one(s, 8)?.varint ?? 0n,
          attributes: protoAttributes(s, 9),
          links: all(s, 13).map((link) => {
            const l = readFields(link.bytes!)
            return { traceId: hex(one(l, 1)), spanId: hex(one(l, 2)) }
          }),
          statusCode: status === undefined ? 0 : Number(one(readFields(status.bytes!), 3)?.varint ?? 0n),
          resource,
          contentType
        })
      }
    }
  }
  return spans
}

// OTLP/JSON: ids as hex strings, 64-bit integers as strings or numbers, enums as numbers.

const jsonValue = (value: any): AttributeValue => {
  if (value === undefined || value === null) return null
  if ("stringValue" in value) return value.stringValue
  if ("boolValue" in value) return value.boolValue
  if ("intValue" in value) return Number(value.intValue)
  if ("doubleValue" in value) return Number(value.doubleValue)
  if ("arrayValue" in value) return (value.arrayValue.values ?? []).map(jsonValue)
  return null
}

const jsonAttributes = (list: any): Record<string, AttributeValue> => {
  const attributes: Record<string, AttributeValue> = {}
  for (const kv of list ?? []) attributes[kv.key] = jsonValue(kv.value)
  return attributes
}

const fromJson = (body: Buffer, contentType: string): Array<ReceivedSpan> => {
  const spans: Array<ReceivedSpan> = []
  const request = JSON.parse(body.toString("utf8"))
  for (const rs of request.resourceSpans ?? []) {
    const resource = jsonAttributes(rs.resource?.attributes)
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? "",
          name: s.name,
          kind: Number(s.kind ?? 0),
          startNs: BigInt(s.startTimeUnixNano),
          endNs: BigInt(s.endTimeUnixNano),
          attributes: jsonAttributes(s.attributes),
          links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId })),
          statusCode: Number(s.status?.code ?? 0),
          resource,
          contentType
        })
      }
    }
  }
  return spans
}

export const startOtlpReceiver = async (): Promise<OtlpReceiver> => {
  const spans: Array<ReceivedSpan> = []
  let requests = 0
  const server: Server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      requests++
      const contentType = String(request.headers["content-type"] ?? "")
      try {
        if (request.method !== "POST" || request.url !== "/v1/traces") throw new Error(`unexpected ${request.method} ${request.url}`)
        let body = Buffer.concat(chunks)
        if (request.headers["content-encoding"] === "gzip") body = gunzipSync(body)
        const json = contentType.startsWith("application/json")
        if (!json && !contentType.startsWith("application/x-protobuf")) throw new Error(`unexpected content type ${contentType}`)
        spans.push(...(json ? fromJson(body, contentType) : fromProtobuf(body, contentType)))
        response.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" })
        response.end(json ? "{}" : Buffer.alloc(0))
      } catch (error) {
        response.writeHead(400, { "content-type": "text/plain" })
        response.end(String(error))
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}
