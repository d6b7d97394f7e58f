// consumer.ts: a worker's view of a socket subscription: an async iterator of typed events, acks,
// nacks and progress; reconnects with exponential backoff when cdc restarts or the connection
// breaks, handles heartbeats and the Acked answers to acks. Built on Connection (connection.ts).
import { Connection, Start, SubscribeOptions } from "./connection";
import { ConnectionClosed, ProtocolError, ServerError, TimeoutError, serverError } from "./errors";
import { DeadLetter, Event, Refused, deadLetterFromMessage, fromMessage, refusedFromMessage } from "./events";
import { ConsumerMode, ErrorCode, big, long } from "./proto";

/** What ack, nack and progress take: events, offsets, or arrays of them (a batch). */
export type Item = Event | bigint | number | ReadonlyArray<Event | bigint | number>;

export interface NackOptions {
  /** Deliver it again after this long (at most an hour; default 0). */
  delayMs?: number;
  /** Why: goes with the event if it becomes a dead letter (cut to 1 KiB of UTF-8). */
  reason?: string;
}

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
  /** cdc refused these offsets of an Ack, Nack or Progress (default: console.warn). */
  onRefused?: (refused: Refused[]) => void;
  /** Connection news ("connecting again in 200 ms: ECONNREFUSED"); default: none. */
  log?: (message: string) => void;
}

// Error codes after which connecting again may succeed: cdc is stopping (a restart, a rollout),
// its connection table is full, or this client's Subscribe came too late (a process stopped for
// seconds). Every other code (unknown or removed subscription, a frame the server refused) is thrown.
const RETRYABLE_CODES = new Set<number>([
  ErrorCode.values.SHUTTING_DOWN,
  ErrorCode.values.CONNECTION_LIMIT,
  ErrorCode.values.SUBSCRIBE_TIMEOUT,
]);
const DEFAULT_HEARTBEAT_MS = 5000;
const OFFSETS_MAX = 65536; // offsets in one Ack, Nack or Progress frame
const NACK_DELAY_MAX_MS = 3600000;
const REASON_MAX = 1024; // bytes of UTF-8
const REFUSALS_KEPT = 65536; // refusals kept for waitAnswered()

const maxOf = (xs: Iterable<bigint>) => {
  let m = 0n;
  for (const x of xs) if (x > m) m = x;
  return m;
};
const minOf = (xs: Iterable<bigint>) => {
  let m: bigint | null = null;
  for (const x of xs) if (m === null || x < m) m = x;
  return m;
};

/** reason cut to REASON_MAX bytes of UTF-8, at a character boundary. */
function cutReason(reason: string): string {
  const b = Buffer.from(reason, "utf8");
  if (b.length <= REASON_MAX) return reason;
  let end = REASON_MAX;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--; // not inside a character
  return b.subarray(0, end).toString("utf8");
}

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
  /** The acknowledged offset the server last reported (Subscribed, Acked, Heartbeat). */
  serverAckedOffset = 0n;
  /** failover: whether this consumer receives now. */
  active = false;
  /** How many times it connected. */
  connections = 0;
  private conn: Connection | null = null;
  private closing = false;
  private readonly heartbeatMs: number;
  private pending: Event[][] = []; // batches read by waitAnswered, yielded first
  // Per connection: frames sent and answered, refusals since the last waitAnswered. Cumulative acks
  // (failover, dead letters) must not pass an offset given back by a Nack: it is held back until
  // delivered again, and acks stop below it meanwhile.
  private sent = 0;
  private answered = 0;
  private refusals: Refused[] = [];
  private heldBack = new Set<bigint>();
  private ackWanted = 0n; // the highest delivered offset the worker acked
  private ackSent = 0n; // the highest cumulative ack sent
  private deliveredMax = 0n; // the highest offset delivered on this connection
  // One entry per ServerFrame kind.
  private readonly handlers: Record<string, (m: any) => Event[] | null> = {
    subscribed: () => {
      throw new ProtocolError("a second Subscribed");
    },
    delivery: (m) => {
      const history = new Map<bigint, DeadLetter>();
      for (const d of m.deadLetters ?? []) history.set(big(d.offset), deadLetterFromMessage(d));
      const events: Event[] = (m.events ?? []).map((e: any) => {
        const ev = fromMessage(e, this.connections);
        return ev.offset !== null && history.has(ev.offset) ? { ...ev, deadLetter: history.get(ev.offset)! } : ev;
      });
      for (const e of events) {
        if (e.offset === null) continue;
        if (e.offset > this.deliveredMax) this.deliveredMax = e.offset;
        this.heldBack.delete(e.offset);
      }
      return events;
    },
    heartbeat: (m) => {
      this.serverAckedOffset = big(m.ackedOffset);
      this.active = m.active;
      this.releaseHeldBack(this.serverAckedOffset);
      return null;
    },
    acked: (m) => {
      this.serverAckedOffset = big(m.ackedOffset);
      this.answered += m.answered;
      const refused: Refused[] = (m.refused ?? []).map(refusedFromMessage);
      for (const r of refused) this.heldBack.delete(r.offset); // a refused Nack gave nothing back
      this.refusals.push(...refused);
      if (this.refusals.length > REFUSALS_KEPT) this.refusals.splice(0, this.refusals.length - REFUSALS_KEPT);
      this.releaseHeldBack(this.serverAckedOffset);
      if (refused.length) (this.options.onRefused ?? this.warnRefused)(refused);
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
      throw serverError(m.code, m.message);
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
        const held = this.pending.shift();
        if (held) {
          yield held;
          if (idleTimeoutMs !== undefined) deadline = Date.now() + idleTimeoutMs;
          continue;
        }
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

  /** Acknowledges events (or offsets, or arrays of them such as a batch) in one Ack frame (more
   * past 65,536 offsets). In failover mode and for dead letters acks are cumulative, so only the
   * highest offset is sent, and never one past an event given back by nack() until that event has
   * come back; in shared and key_shared modes each is. Events delivered on an earlier connection
   * are skipped (cdc delivers them again). */
  ack(...items: Item[]): void {
    const offsets = this.offsets(items);
    if (!offsets.length || !this.conn) return;
    if (!this.cumulative) {
      this.sendOffsets("ack", offsets);
      return;
    }
    let top = maxOf(offsets);
    if (top <= this.deliveredMax) {
      if (top > this.ackWanted) this.ackWanted = top;
      top = this.ackWanted;
    }
    const low = minOf(this.heldBack);
    if (low !== null) {
      if (low - 1n < top) top = low - 1n;
      if (top <= this.ackSent) return; // nothing new below the event given back
    }
    if (top > this.ackSent) this.ackSent = top;
    this.sendOffsets("ack", [top]);
  }

  /** Gives events (or offsets) back: cdc delivers each again after delayMs (at most an hour), to
   * another consumer where the mode allows (shared); the delivery given back counts towards the
   * subscription's max_deliveries, and an event that reaches it becomes a dead letter carrying
   * reason. One Nack frame of every offset, in every mode. */
  nack(items: Item, options: NackOptions = {}): void {
    const delayMs = Math.round(options.delayMs ?? 0);
    if (!(delayMs >= 0 && delayMs <= NACK_DELAY_MAX_MS)) throw new RangeError(`delayMs must be 0 to ${NACK_DELAY_MAX_MS}, not ${options.delayMs}`);
    const offsets = this.offsets([items]);
    if (!offsets.length || !this.conn) return;
    if (this.cumulative) for (const o of offsets) this.heldBack.add(o);
    this.sendOffsets("nack", offsets, { delayMs, reason: cutReason(options.reason ?? "") });
  }

  /** Still working on these events (or offsets): each one's ack_timeout starts again. A job longer
   * than the subscription's ack_timeout sends one every ack_timeout / 3 or so (see keepAlive). */
  progress(...items: Item[]): void {
    const offsets = this.offsets(items);
    if (offsets.length && this.conn) this.sendOffsets("progress", offsets);
  }

  /** Sends progress(items) every everyMs until the returned function is called (a third of the
   * subscription's ack_timeout, say):
   *
   *   const stop = c.keepAlive(event, 1000);
   *   try { await longJob(event); } finally { stop(); }
   */
  keepAlive(items: Item, everyMs: number): () => void {
    if (!(everyMs > 0)) throw new RangeError("everyMs must be positive");
    const timer = setInterval(() => this.progress(items), everyMs);
    return () => clearInterval(timer);
  }

  /** Resolves once cdc has answered every Ack, Nack and Progress sent on this connection, with the
   * offsets it refused since the last call (each was also passed to onRefused). Await it from the
   * loop's body (events that arrive meanwhile are kept for the iterator), not beside a running
   * iteration. Rejects with TimeoutError if the answers do not come within timeoutMs, with
   * ConnectionClosed if the connection is lost first (what it did not answer had no effect: those
   * events come again). */
  async waitAnswered(timeoutMs = 10000): Promise<Refused[]> {
    const deadline = Date.now() + timeoutMs;
    const conn = this.conn;
    for (;;) {
      if (this.answered >= this.sent) {
        const out = this.refusals;
        this.refusals = [];
        return out;
      }
      if (!conn || this.conn !== conn) {
        throw new ConnectionClosed(`the connection was lost before cdc answered ${this.sent - this.answered} frames`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new TimeoutError(`cdc answered ${this.answered} of ${this.sent} frames within ${timeoutMs} ms`);
      let f;
      try {
        f = await conn.next(left);
      } catch (e) {
        if (e instanceof ProtocolError) this.dropConnection();
        throw e;
      }
      if (f === null) {
        if (conn.closed) this.dropConnection();
        continue;
      }
      const handler = this.handlers[f.kind];
      const batch = handler ? handler(f[f.kind]) : null;
      if (batch && batch.length) this.pending.push(batch);
    }
  }

  /** Ack, Nack and Progress frames sent on this connection that cdc has not answered yet. */
  get unanswered(): number {
    return this.sent - this.answered;
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

  /** The offsets of Events (those of this connection), numbers, bigints and arrays of them. */
  private offsets(items: ReadonlyArray<Item>): bigint[] {
    const out: bigint[] = [];
    for (const it of items) {
      if (Array.isArray(it)) out.push(...this.offsets(it));
      else if (typeof it === "object") {
        const e = it as Event;
        if (e.connectionId === this.connections && e.offset !== null) out.push(e.offset);
      } else out.push(BigInt(it as bigint | number));
    }
    return out;
  }

  /** Ack, Nack or Progress frames of offsets, 65,536 a frame. */
  private sendOffsets(kind: "ack" | "nack" | "progress", offsets: bigint[], fields: Record<string, unknown> = {}): void {
    for (let i = 0; i < offsets.length; i += OFFSETS_MAX) {
      try {
        this.conn?.send({ [kind]: { offsets: offsets.slice(i, i + OFFSETS_MAX).map(long), ...fields } });
      } catch (e) {
        // The iterator notices the closed connection and connects again; an unsent ack means a
        // redelivery, never a loss.
        this.log(`send failed (${(e as Error).message}); the connection will be replaced`);
        return;
      }
      this.sent++;
    }
  }

  /** Events given back that cdc counts as done (acknowledged, or moved to the dead letters) will
   * not come back: the acks held below them go out now. */
  private releaseHeldBack(ackedOffset: bigint): void {
    const low = minOf(this.heldBack);
    if (low === null || low > ackedOffset) return;
    for (const o of [...this.heldBack]) if (o <= ackedOffset) this.heldBack.delete(o);
    let top = this.ackWanted;
    const next = minOf(this.heldBack);
    if (next !== null && next - 1n < top) top = next - 1n;
    if (top > this.ackSent && top > ackedOffset && this.conn) {
      this.ackSent = top;
      this.sendOffsets("ack", [top]);
    }
  }

  private resetConnectionState(): void {
    this.sent = 0;
    this.answered = 0;
    this.refusals = [];
    this.heldBack = new Set();
    this.ackWanted = 0n;
    this.ackSent = 0n;
    this.deliveredMax = 0n;
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
      this.resetConnectionState();
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
    this.pending = []; // read on the lost connection (by waitAnswered): they come again
  }

  private log(message: string): void {
    this.options.log?.(`cdc client: ${this.subscription}: ${message}`);
  }

  private warnRefused = (refused: Refused[]): void => {
    const list = refused.slice(0, 20).map((r) => `${r.offset} (${r.reason})`).join(", ");
    console.warn(`cdc client: subscription ${this.subscription}: cdc refused ${list}${refused.length > 20 ? ` and ${refused.length - 20} more` : ""}`);
  };

  private warnDropped = (from: bigint, to: bigint): void => {
    console.warn(`cdc client: subscription ${this.subscription}: events ${from}..${to} were dropped by retention before this consumer received them`);
  };
}
