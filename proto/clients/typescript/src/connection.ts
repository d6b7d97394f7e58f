// connection.ts: one connection to cdc's subscriber socket: framing (4-byte big-endian length, one
// protobuf message), Subscribe and its answer, Ack, Nack, Progress. No policy: Consumer
// (consumer.ts) adds reconnection, heartbeats, answers to acks and typed events on top.
import * as net from "node:net";
import * as os from "node:os";
import { ConnectionClosed, ProtocolError, serverError } from "./errors";
import { ClientFrame, ServerFrame, StartFrom, long } from "./proto";

export const FRAME_MAX = 16 * 1024 * 1024; // what a client may send
export const FRAME_SERVER_MAX = 1024 * 1024 * 1024; // a Delivery of one event larger than FRAME_MAX

/** Where deliveries start: after the acknowledged offset, the oldest retained event, only new
 * events, or an offset. */
export type Start = "acked" | "earliest" | "latest" | bigint | number;

export interface SubscribeOptions {
  /** A name for cdc's log and status (default "node-PID"). */
  consumer?: string;
  start?: Start;
  /** Events in flight to this consumer; 0: the subscription's. */
  maxUnacked?: number;
  /** Read the subscription's dead letters instead of its events. */
  deadLetters?: boolean;
  /** A Heartbeat after this long without a frame; 0: the server's 5000. */
  heartbeatMs?: number;
}

/** A decoded cdc.v1.ServerFrame: kind names the member that is set. */
export type ServerFrameMessage = { kind: string; [member: string]: any };

export function subscribeFrame(subscription: string, o: SubscribeOptions = {}): Record<string, unknown> {
  const start = o.start ?? "acked";
  const offset = typeof start === "bigint" || typeof start === "number";
  return {
    subscribe: {
      subscription,
      consumer: o.consumer ?? `node-${process.pid}@${os.hostname()}`,
      start: offset ? StartFrom.values.START_OFFSET : StartFrom.values[`START_${start.toUpperCase()}`],
      startOffset: offset ? long(start) : "0",
      maxUnacked: o.maxUnacked ?? 0,
      deadLetters: o.deadLetters ?? false,
      heartbeatMs: o.heartbeatMs ?? 0,
    },
  };
}

export function encodeFrame(frame: Record<string, unknown>): Buffer {
  const body = ClientFrame.encode(ClientFrame.fromObject(frame)).finish();
  if (body.length > FRAME_MAX) throw new RangeError(`frame of ${body.length} bytes is over the 16 MiB limit`);
  const out = Buffer.allocUnsafe(4 + body.length);
  out.writeUInt32BE(body.length, 0);
  out.set(body, 4);
  return out;
}

/** One connection. next() resolves with the next ServerFrame, or null once the server has closed
 * the connection (or after timeoutMs without a frame: then .closed is false). */
export class Connection {
  closed = false;
  private buf: Buffer = Buffer.alloc(0);
  private frames: ServerFrameMessage[] = [];
  private failure: Error | null = null;
  private wake: (() => void) | null = null;

  private constructor(private readonly socket: net.Socket) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => {
      this.closed = true;
      this.notify();
    });
    socket.on("error", () => {
      // "close" follows: a reset is the server going away, like an orderly close.
    });
  }

  /** Connects to the socket at path; rejects with the system error (ENOENT, ECONNREFUSED...). */
  static connect(path: string): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const s = net.createConnection({ path });
      const fail = (e: Error) => {
        s.destroy();
        reject(e);
      };
      s.once("error", fail);
      s.once("connect", () => {
        s.off("error", fail);
        resolve(new Connection(s));
      });
    });
  }

  send(frame: Record<string, unknown>): void {
    if (this.closed) throw new ConnectionClosed("the connection is closed");
    this.socket.write(encodeFrame(frame));
  }

  /** Sends Subscribe and resolves with the Subscribed answer; an Error answer rejects with
   * ServerError. */
  async subscribe(subscription: string, options: SubscribeOptions = {}, timeoutMs = 10000): Promise<any> {
    this.send(subscribeFrame(subscription, options));
    const f = await this.next(timeoutMs);
    if (f === null) {
      throw new ConnectionClosed(this.closed ? "the server closed the connection instead of answering Subscribe"
        : `no answer to Subscribe within ${timeoutMs} ms`);
    }
    if (f.kind === "error") throw serverError(f.error.code, f.error.message);
    if (f.kind !== "subscribed") throw new ProtocolError(`expected Subscribed, got ${f.kind}`);
    return f.subscribed;
  }

  /** One Ack frame of these offsets, sent as given. */
  ack(offsets: Iterable<bigint | number>): void {
    this.send({ ack: { offsets: [...offsets].map(long) } });
  }

  /** One Nack frame: these offsets are given back, delivered again after delayMs (at most an
   * hour); reason (at most 1 KiB of UTF-8) goes with a dead letter. */
  nack(offsets: Iterable<bigint | number>, delayMs = 0, reason = ""): void {
    this.send({ nack: { offsets: [...offsets].map(long), delayMs, reason } });
  }

  /** One Progress frame: still working on these offsets, their ack timeouts start again. */
  progress(offsets: Iterable<bigint | number>): void {
    this.send({ progress: { offsets: [...offsets].map(long) } });
  }

  /** The next frame; null when closed, or when timeoutMs passes first (undefined: no limit). */
  async next(timeoutMs?: number): Promise<ServerFrameMessage | null> {
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    for (;;) {
      if (this.failure) throw this.failure;
      const f = this.frames.shift();
      if (f) return f;
      if (this.closed) {
        if (this.buf.length) throw new ProtocolError("the connection closed mid-frame");
        return null;
      }
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise<void>((resolve) => {
        const timer = left === Infinity ? null : setTimeout(resolve, left);
        this.wake = () => {
          if (timer) clearTimeout(timer);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  /** Closes the connection: what was sent still reaches the server (an ack before a close is
   * not lost), unless abort is set (a broken connection). */
  close(abort = false): void {
    this.closed = true;
    if (abort) {
      this.socket.destroy();
    } else {
      this.socket.end();
      // The server closes its side on EOF; a server that does not gets its socket dropped.
      setTimeout(() => this.socket.destroy(), 2000).unref();
    }
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    if (w) w();
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    try {
      while (this.buf.length >= 4) {
        const n = this.buf.readUInt32BE(0);
        if (n > FRAME_SERVER_MAX) throw new ProtocolError(`frame of ${n} bytes is over the 1024 MiB limit`);
        if (this.buf.length < 4 + n) break;
        const body = this.buf.subarray(4, 4 + n);
        this.buf = this.buf.subarray(4 + n);
        let msg: any;
        try {
          msg = ServerFrame.decode(body);
        } catch (e) {
          throw new ProtocolError(`malformed ServerFrame: ${(e as Error).message}`);
        }
        this.frames.push(msg as ServerFrameMessage);
      }
    } catch (e) {
      this.failure = e as Error;
      this.socket.destroy();
    }
    this.notify();
  }
}
