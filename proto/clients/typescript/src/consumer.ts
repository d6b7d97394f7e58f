// consumer.ts: a worker's view of a socket subscription: an async iterator of typed events, acks;
// reconnects with exponential backoff when cdc restarts or the connection breaks, and handles
// heartbeats. Built on Connection (connection.ts).
import { Connection, Start, SubscribeOptions } from "./connection";
import { ConnectionClosed, ProtocolError, ServerError } from "./errors";
import { Event, fromMessage } from "./events";
import { ConsumerMode, ErrorCode, big, long } from "./proto";

export interface ConsumerOptions extends SubscribeOptions {
  /** Applies to the first connection only; reconnections resume after the acknowledged offset. */
  start?: Start;
  /** Connect again after a failure (default true). Without: failures reject the iterator. */
  reconnect?: boolean;
  /** Backoff between attempts: initialMs doubling up to maxMs, with jitter (defaults 100, 10000). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Give up (ConnectionClosed) after this long unable to connect; default never. */
  giveUpAfterMs?: number;
  /** Retention discarded [from, to] before this consumer received them (default: console.warn). */
  onDropped?: (from: bigint, to: bigint) => void;
  /** Connection news ("connecting again in 200 ms: ECONNREFUSED"); default: none. */
  log?: (message: string) => void;
}

// Error codes after which connecting again may succeed: cdc is stopping (a restart, a rollout).
// Every other code (unknown or removed subscription, a frame the server refused) is thrown.
const RETRYABLE_CODES = new Set<number>([ErrorCode.values.SHUTTING_DOWN]);
const DEFAULT_HEARTBEAT_MS = 5000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Consumes one subscription:
 *
 *   const c = new Consumer("/run/cdc/events.sock", "jobs", { consumer: "worker-1" });
 *   for await (const event of c) { await handle(event); c.ack(event); }
 *
 * Not for concurrent iteration: one loop per Consumer.
 */
export class Consumer implements AsyncIterable<Event> {
  /** The last Subscribed answer (decoded), null before the first. */
  subscribed: any = null;
  /** The acknowledged offset the server last reported (Subscribed, Heartbeat). */
  serverAckedOffset = 0n;
  /** failover: whether this consumer receives now. */
  active = false;
  /** How many times it connected. */
  connections = 0;
  private conn: Connection | null = null;
  private closing = false;
  private readonly heartbeatMs: number;
  // One entry per ServerFrame kind: a new kind (such as an answer to acks) is one more entry.
  private readonly handlers: Record<string, (m: any) => Event[] | null> = {
    subscribed: () => {
      throw new ProtocolError("a second Subscribed");
    },
    delivery: (m) => (m.events ?? []).map((e: any) => fromMessage(e, this.connections)),
    heartbeat: (m) => {
      this.serverAckedOffset = big(m.ackedOffset);
      this.active = m.active;
      return null;
    },
    dropped: (m) => {
      (this.options.onDropped ?? this.warnDropped)(big(m.fromOffset), big(m.toOffset));
      return null;
    },
    error: (m) => {
      this.dropConnection();
      if (this.options.reconnect !== false && RETRYABLE_CODES.has(m.code)) {
        this.log(`${ErrorCode.valuesById[m.code]}: ${m.message}; connecting again`);
        return null;
      }
      throw new ServerError(m.code, m.message);
    },
  };

  constructor(readonly path: string, readonly subscription: string, readonly options: ConsumerOptions = {}) {
    this.heartbeatMs = options.heartbeatMs || DEFAULT_HEARTBEAT_MS;
  }

  [Symbol.asyncIterator](): AsyncIterator<Event> {
    return this.events();
  }

  /** Events one by one, until close() (or idleTimeoutMs without one). */
  async *events(idleTimeoutMs?: number): AsyncGenerator<Event> {
    for await (const batch of this.batches(idleTimeoutMs)) yield* batch;
  }

  /** The events of each Delivery frame (one transaction's with `batch: transaction`); acknowledge a
   * batch with ack(...batch). Ends on close() or after idleTimeoutMs without a delivery. */
  async *batches(idleTimeoutMs?: number): AsyncGenerator<Event[]> {
    let deadline = idleTimeoutMs === undefined ? Infinity : Date.now() + idleTimeoutMs;
    try {
      while (!this.closing) {
        const conn = await this.connection(deadline);
        if (!conn) return;
        // A live server sends something at least every heartbeatMs: three silent periods mean a
        // dead peer (the socket would not tell), so connect again.
        const silence = 3 * this.heartbeatMs;
        const f = await conn.next(Math.max(0, Math.min(silence, deadline - Date.now())));
        if (f === null) {
          if (this.closing) return;
          if (conn.closed) this.lost("the server closed the connection");
          else if (Date.now() >= deadline) return;
          else this.lost(`no frame for ${silence} ms`);
          continue;
        }
        const handler = this.handlers[f.kind];
        const batch = handler ? handler(f[f.kind]) : null; // a frame newer than this client: ignored
        if (batch && batch.length) {
          yield batch;
          if (idleTimeoutMs !== undefined) deadline = Date.now() + idleTimeoutMs;
        }
      }
    } catch (e) {
      if (e instanceof ProtocolError) this.dropConnection();
      throw e;
    }
  }

  /** Acknowledges events (or offsets) in one Ack frame: in failover mode and for dead letters acks
   * are cumulative, so only the highest offset is sent; in shared and key_shared modes each is.
   * Events delivered on an earlier connection are skipped (cdc delivers them again). */
  ack(...items: Array<Event | bigint | number>): void {
    let offsets: bigint[] = [];
    for (const it of items) {
      if (typeof it === "object") {
        if (it.connectionId === this.connections && it.offset !== null) offsets.push(it.offset);
      } else {
        offsets.push(BigInt(it));
      }
    }
    if (!offsets.length || !this.conn) return;
    if (this.cumulative) offsets = [offsets.reduce((a, b) => (b > a ? b : a))];
    this.send({ ack: { offsets: offsets.map(long) } });
  }

  /** "failover", "shared" or "key_shared"; null before the first Subscribed. */
  get mode(): string | null {
    if (!this.subscribed) return null;
    return (ConsumerMode.valuesById[this.subscribed.mode] ?? String(this.subscribed.mode)).toLowerCase();
  }

  /** Whether an ack covers every offset up to it (failover mode, dead letters). */
  get cumulative(): boolean {
    return !!this.options.deadLetters || !this.subscribed || this.subscribed.mode === ConsumerMode.values.FAILOVER;
  }

  /** Closes the connection; a running iteration ends. */
  close(): void {
    this.closing = true;
    this.conn?.close();
    this.conn = null;
  }

  private send(frame: Record<string, unknown>): void {
    try {
      this.conn?.send(frame);
    } catch (e) {
      // The iterator notices the closed connection and connects again; an unsent ack means a
      // redelivery, never a loss.
      this.log(`send failed (${(e as Error).message}); the connection will be replaced`);
    }
  }

  private async connection(deadline: number): Promise<Connection | null> {
    if (this.conn) return this.conn;
    const reconnect = this.options.reconnect !== false;
    let delay = this.options.backoffInitialMs ?? 100;
    const max = this.options.backoffMaxMs ?? 10000;
    const outageStart = Date.now();
    while (!this.closing) {
      let reason: Error;
      try {
        return await this.connect();
      } catch (e) {
        const err = e as Error;
        const retryable = err instanceof ServerError ? RETRYABLE_CODES.has(err.codeValue)
          : !(err instanceof ProtocolError || err instanceof TypeError || err instanceof RangeError);
        if (!reconnect || !retryable) throw err;
        reason = err;
      }
      const giveUp = this.options.giveUpAfterMs;
      if (giveUp !== undefined && Date.now() - outageStart >= giveUp) {
        throw new ConnectionClosed(`cdc at ${this.path} unreachable for ${giveUp} ms: ${reason.message}`);
      }
      let wait = delay * (0.5 + Math.random() / 2);
      if (deadline !== Infinity) {
        if (deadline - Date.now() <= 0) return null;
        wait = Math.min(wait, deadline - Date.now());
      }
      this.log(`${reason.message}; connecting again in ${Math.round(wait)} ms`);
      await sleep(wait);
      delay = Math.min(delay * 2, max);
    }
    return null;
  }

  private async connect(): Promise<Connection> {
    const conn = await Connection.connect(this.path);
    try {
      const o = this.options;
      const sub = await conn.subscribe(this.subscription, {
        consumer: o.consumer,
        start: this.connections === 0 ? o.start : "acked",
        maxUnacked: o.maxUnacked,
        deadLetters: o.deadLetters,
        heartbeatMs: this.heartbeatMs,
      });
      if (this.closing) throw new ConnectionClosed("closed");
      this.conn = conn;
      this.connections++;
      this.subscribed = sub;
      this.serverAckedOffset = big(sub.ackedOffset);
      this.active = sub.active;
      return conn;
    } catch (e) {
      conn.close();
      throw e;
    }
  }

  private lost(why: string): void {
    this.dropConnection();
    if (this.options.reconnect === false) throw new ConnectionClosed(why);
    this.log(`${why}; connecting again`);
  }

  private dropConnection(): void {
    this.conn?.close(true);
    this.conn = null;
  }

  private log(message: string): void {
    this.options.log?.(`cdc client: ${this.subscription}: ${message}`);
  }

  private warnDropped = (from: bigint, to: bigint): void => {
    console.warn(`cdc client: subscription ${this.subscription}: events ${from}..${to} were dropped by retention before this consumer received them`);
  };
}
