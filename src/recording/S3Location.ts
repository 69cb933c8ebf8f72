/**
 * Where RECORDINGS_S3_URL points: `s3://bucket/prefix` (AWS, region from AWS_REGION), or
 * `http(s)://host[:port]/bucket/prefix` for another S3-compatible service (path-style addressing).
 */
export interface S3Location {
  readonly endpoint: string | undefined
  readonly bucket: string
  /** Key prefix, empty or ending with "/". */
  readonly prefix: string
}

export const parseS3Url = (text: string): S3Location | string => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return "must be s3://bucket/prefix or http(s)://host/bucket/prefix"
  }
  const parts = (url.protocol === "s3:" ? [url.hostname, ...url.pathname.split("/")] : url.pathname.split("/")).filter((part) => part.length > 0)
  if (url.username !== "" || url.password !== "") return "must not carry credentials (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
  if (!["s3:", "http:", "https:"].includes(url.protocol)) return "must be s3://bucket/prefix or http(s)://host/bucket/prefix"
  const [bucket, ...rest] = parts
  if (bucket === undefined) return "names no bucket"
  return {
    endpoint: url.protocol === "s3:" ? undefined : `${url.protocol}//${url.host}`,
    bucket,
    prefix: rest.length === 0 ? "" : `${rest.join("/")}/`
  }
}

export interface S3Credentials {
  readonly region: string
  readonly accessKeyId?: string | undefined
  readonly secretAccessKey?: string | undefined
  readonly sessionToken?: string | undefined
}
