/**
 * The demo's output: one line per thing that happened, as
 *
 *   [  7.412s] caller    turn 1: the agent began answering 1139 ms after the caller's last word
 *
 * with the time since the demo started, who acted, and what happened; detail lines are indented
 * under the message. Nothing here prints secrets: callers pass only what may be shown.
 */

export type Actor = "setup" | "config" | "callgate" | "agent" | "caller" | "receiver" | "twilio" | "demo"

const ACTOR_WIDTH = 9

export class Narrator {
  /** Where the message column starts, for detail lines. */
  private readonly indent = " ".repeat("[  0.000s] ".length + ACTOR_WIDTH + 1)
  private muted = false

  constructor(
    private readonly write: (text: string) => void = (text) => void process.stdout.write(text),
    readonly startedAt: number = Date.now()
  ) {}

  /** Seconds since the demo started, for messages. */
  elapsed(at = Date.now()): string {
    return `${((at - this.startedAt) / 1000).toFixed(1)} s`
  }

  /** From now on nothing is printed: after a failure, the steps still in flight must not talk over it. */
  mute(): void {
    this.muted = true
  }

  say(actor: Actor, message: string, ...details: ReadonlyArray<string>): void {
    if (this.muted) return
    const time = ((Date.now() - this.startedAt) / 1000).toFixed(3).padStart(7)
    const lines = [`[${time}s] ${actor.padEnd(ACTOR_WIDTH)} ${message}`, ...details.map((line) => this.indent + line)]
    this.write(lines.join("\n") + "\n")
  }

  /** Lines printed as they are, under the message column (the session.ended payload). */
  block(lines: ReadonlyArray<string>): void {
    if (!this.muted) this.write(lines.map((line) => this.indent + line).join("\n") + "\n")
  }

  section(title: string): void {
    if (!this.muted) this.write(`\n${title}\n${"-".repeat(title.length)}\n`)
  }

  /** Plain lines (the banner, tables), with no time and no actor. */
  plain(...lines: ReadonlyArray<string>): void {
    if (!this.muted) this.write(lines.join("\n") + "\n")
  }
}

export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/** A call or stream SID cut to its first ten characters: enough to follow one call. */
export const shortId = (id: string) => (id.length > 14 ? `${id.slice(0, 10)}…` : id)

/** `whsec_…wxyz`: enough to tell secrets apart, never enough to use one. */
export const lastFour = (secret: string | null | undefined): string =>
  typeof secret === "string" && secret.length >= 4 ? `${secret.startsWith("whsec_") ? "whsec_" : ""}…${secret.slice(-4)}` : "(none)"

/** Rows as aligned columns; the first row is the header, underlined. */
export const table = (rows: ReadonlyArray<ReadonlyArray<string>>): Array<string> => {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length)))
  const render = (row: ReadonlyArray<string>) => row.map((cell, column) => cell.padEnd(widths[column]!)).join("  ").trimEnd()
  return [render(rows[0]!), render(widths.map((width) => "-".repeat(width))), ...rows.slice(1).map(render)]
}
