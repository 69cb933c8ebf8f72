/**
 * Small plumbing for the demo: waiting with a deadline that names what was awaited, an inbox of
 * things that happened (gateway log lines, webhook requests, carrier REST calls) that a step can
 * wait on whether they came before or after it asked, and a free loopback port.
 */
import { createServer } from "node:net"

/** A step of the demo failed; `message` says which and why, in one sentence. */
export class DemoFailure extends Error {
  override readonly name = "DemoFailure"
}

/** `promise`, or a DemoFailure naming `what` after `timeoutMs`. */
export const withTimeout = <A>(promise: Promise<A>, timeoutMs: number, what: string): Promise<A> => {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DemoFailure(`timed out after ${(timeoutMs / 1000).toFixed(1)} s waiting for ${what}`)), timeoutMs)
    // A deadline alone never keeps the process alive: once the demo has torn everything down,
    // the waits abandoned by a failed step must not hold the exit.
    timer.unref()
  })
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer))
}

interface Waiter<T> {
  readonly match: (item: T) => boolean
  readonly resolve: (item: T) => void
}

/**
 * Everything of one kind that happened, in order. `next` resolves with the first item matching
 * that has not been taken yet, already there or still to come, so a step never misses an event
 * that raced ahead of it.
 */
export class Inbox<T> {
  readonly items: Array<T> = []
  private readonly taken = new Set<T>()
  private waiters: Array<Waiter<T>> = []

  push(item: T): void {
    this.items.push(item)
    const waiter = this.waiters.find((w) => w.match(item))
    if (waiter === undefined) return
    this.waiters = this.waiters.filter((w) => w !== waiter)
    this.taken.add(item)
    waiter.resolve(item)
  }

  next(match: (item: T) => boolean, timeoutMs: number, what: string): Promise<T> {
    const ready = this.items.find((item) => !this.taken.has(item) && match(item))
    if (ready !== undefined) {
      this.taken.add(ready)
      return Promise.resolve(ready)
    }
    let waiter: Waiter<T> | undefined
    const arrived = new Promise<T>((resolve) => {
      waiter = { match, resolve }
      this.waiters.push(waiter)
    })
    return withTimeout(arrived, timeoutMs, what).finally(() => {
      this.waiters = this.waiters.filter((w) => w !== waiter)
    })
  }
}

/** A TCP port free on 127.0.0.1 right now (the OS picks it). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))))
    })
  })

/** Closers run in reverse order of registration, each at most once, none allowed to throw. */
export class Teardown {
  private readonly closers: Array<{ readonly name: string; readonly close: () => Promise<unknown> }> = []

  add(name: string, close: () => Promise<unknown>): void {
    this.closers.push({ name, close })
  }

  /** Runs every closer (at most `timeoutMs` each); returns the names of those that failed. */
  async run(timeoutMs = 20_000): Promise<Array<string>> {
    const failed: Array<string> = []
    for (const { name, close } of this.closers.splice(0).reverse()) {
      try {
        await withTimeout(close(), timeoutMs, `${name} to stop`)
      } catch (error) {
        failed.push(`${name}: ${(error as Error).message}`)
      }
    }
    return failed
  }
}
