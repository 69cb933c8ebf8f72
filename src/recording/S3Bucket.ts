import { createReadStream } from "node:fs"
import type { Readable } from "node:stream"
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NoSuchKey,
  NotFound,
  PutObjectCommand,
  S3Client
} from "@aws-sdk/client-s3"
import { Upload } from "@aws-sdk/lib-storage"
import { dateAt } from "../kernel/Time.js"
import type { S3Credentials, S3Location } from "./S3Location.js"

export interface S3Object {
  readonly body: Readable
  /** Bytes of this answer (the range's, or the whole object's). */
  readonly length: number
  /** Bytes of the whole object. */
  readonly size: number
}

const isMissing = (error: unknown) =>
  error instanceof NoSuchKey ||
  error instanceof NotFound ||
  (typeof error === "object" && error !== null && (error as { name?: string }).name === "NoSuchKey") ||
  (typeof error === "object" && error !== null && (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404)

/**
 * The recordings' bucket over `@aws-sdk/client-s3`; uploads are `@aws-sdk/lib-storage`'s streaming
 * multipart upload (parts of 5 MB sent as the file is read, never the whole file in memory). The
 * only module that imports the SDK, and itself imported only when RECORDINGS_S3_URL is set: the
 * SDK is about 4.6 MB of heap and 22 MB of RSS that a gateway without a bucket does not carry.
 */
export class S3Bucket {
  private readonly client: S3Client

  constructor(
    readonly location: S3Location,
    credentials: S3Credentials
  ) {
    this.client = new S3Client({
      region: credentials.region,
      // Checksums only where S3 requires them: the SDK's default (CRC32 on every request) is not
      // understood by every S3-compatible service, and the TLS/TCP checks already cover transport.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      ...(location.endpoint !== undefined ? { endpoint: location.endpoint, forcePathStyle: true } : {}),
      ...(credentials.accessKeyId !== undefined && credentials.secretAccessKey !== undefined
        ? {
            credentials: {
              accessKeyId: credentials.accessKeyId,
              secretAccessKey: credentials.secretAccessKey,
              ...(credentials.sessionToken !== undefined ? { sessionToken: credentials.sessionToken } : {})
            }
          }
        : {})
    })
  }

  key(name: string): string {
    return `${this.location.prefix}${name}`
  }

  /** Streams the file at `path` to `name` as a multipart upload (one PutObject when it fits one part); returns the parts sent. */
  async uploadFile(name: string, path: string, contentType: string): Promise<number> {
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.location.bucket, Key: this.key(name), Body: createReadStream(path), ContentType: contentType },
      queueSize: 2,
      leavePartsOnError: false
    })
    let parts = 0
    upload.on("httpUploadProgress", (progress) => {
      parts = Math.max(parts, progress.part ?? 0)
    })
    await upload.done()
    return parts
  }

  async putJson(name: string, value: unknown): Promise<void> {
    await this.client.send(
      new PutObjectCommand({ Bucket: this.location.bucket, Key: this.key(name), Body: JSON.stringify(value), ContentType: "application/json" })
    )
  }

  async getJson(name: string): Promise<unknown | undefined> {
    try {
      const answer = await this.client.send(new GetObjectCommand({ Bucket: this.location.bucket, Key: this.key(name) }))
      return JSON.parse(await answer.Body!.transformToString("utf8"))
    } catch (error) {
      if (isMissing(error)) return undefined
      throw error
    }
  }

  /** The object's size, or undefined when there is none. */
  async size(name: string): Promise<number | undefined> {
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.location.bucket, Key: this.key(name) }))
      return head.ContentLength ?? 0
    } catch (error) {
      if (isMissing(error)) return undefined
      throw error
    }
  }

  /** Bytes [start, end] (inclusive) of the object. */
  async read(name: string, start: number, end: number, size: number): Promise<S3Object | undefined> {
    try {
      const answer = await this.client.send(
        new GetObjectCommand({ Bucket: this.location.bucket, Key: this.key(name), Range: `bytes=${start}-${end}` })
      )
      return { body: answer.Body as Readable, length: end - start + 1, size }
    } catch (error) {
      if (isMissing(error)) return undefined
      throw error
    }
  }

  async remove(names: ReadonlyArray<string>): Promise<void> {
    if (names.length === 0) return
    await this.client.send(
      new DeleteObjectsCommand({
        Bucket: this.location.bucket,
        Delete: { Objects: names.map((name) => ({ Key: this.key(name) })), Quiet: true }
      })
    )
  }

  /** Every object under the prefix (and whose name starts with `namePrefix`), with its size and last change. */
  async list(namePrefix = ""): Promise<Array<{ readonly name: string; readonly size: number; readonly lastModified: Date }>> {
    const found: Array<{ name: string; size: number; lastModified: Date }> = []
    let token: string | undefined
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.location.bucket, Prefix: this.key(namePrefix), ContinuationToken: token })
      )
      for (const object of page.Contents ?? []) {
        if (object.Key === undefined) continue
        found.push({ name: object.Key.slice(this.location.prefix.length), size: object.Size ?? 0, lastModified: object.LastModified ?? dateAt(0) })
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined
    } while (token !== undefined)
    return found
  }

  close(): void {
    this.client.destroy()
  }
}
