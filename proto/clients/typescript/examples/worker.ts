// worker.ts: an example worker on @cdc/client. Prints each event of a socket subscription as one
// JSON line, then acknowledges it; an event it cannot process is given back (nack) with the reason,
// to be delivered again after --nack-delay seconds and, once the subscription's max_deliveries is
// reached, moved to the dead letters. Survives cdc restarts. Exits 0 after --count events or --idle
// seconds without one; 1 when it never reached cdc within --idle, when cdc stayed unreachable for
// --give-up seconds, or on an error from cdc. With --dead-letters it reads the dead letters and
// prints each one's history.
//   node proto/clients/typescript/dist/examples/worker.js /run/cdc/events.sock jobs [--count N] [--idle S]
//        [--fail-on COLUMN=VALUE] [--nack-delay S] [--give-up S] [--dead-letters]
import { ConnectionClosed, Consumer, Event, ServerError, rowOf } from "../src";

/** One JSON line. Offsets and other 64-bit integers (bigints in the client) are JSON numbers, as
 * Python's worker prints them; only beyond 2^53, where a JSON number would lose digits in
 * JavaScript, a decimal string. */
function json(v: unknown): string {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === "bigint") return Number.isSafeInteger(Number(x)) ? Number(x) : x.toString();
    if (x && x.type === "Buffer" && Array.isArray(x.data)) return Buffer.from(x.data).toString("hex");
    return x;
  });
}

class CannotProcess extends Error {}

/** The work: one JSON line. A row matching --fail-on COLUMN=VALUE stands for one the worker
 * cannot handle. */
function processEvent(e: Event, failOn: [string, string] | null): void {
  const row = rowOf(e);
  if (failOn && row && String(row[failOn[0]]) === failOn[1]) throw new CannotProcess(`${failOn[0]}=${failOn[1]} is not supported`);
  const line: Record<string, unknown> = { offset: e.offset, op: e.op, table: e.table, row };
  if (e.deadLetter) {
    const d = e.deadLetter;
    line.deadLetter = { originalOffset: d.originalOffset, deliveries: d.deliveries, reason: d.reason, deadTime: d.deadTime };
  }
  process.stdout.write(json(line) + "\n");
}

async function main(argv: string[]): Promise<number> {
  const [socket, subscription] = argv;
  const opt = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  if (!socket || !subscription) {
    console.error("usage: worker SOCKET SUBSCRIPTION [--consumer NAME] [--count N] [--idle SECONDS] [--fail-on COLUMN=VALUE] [--nack-delay SECONDS] [--give-up SECONDS] [--dead-letters]");
    return 2;
  }
  const count = Number(opt("--count") ?? 0);
  const idle = opt("--idle");
  const failOnArg = opt("--fail-on");
  const failOn: [string, string] | null = failOnArg
    ? [failOnArg.slice(0, failOnArg.indexOf("=")), failOnArg.slice(failOnArg.indexOf("=") + 1)] : null;
  const nackDelayMs = Number(opt("--nack-delay") ?? 5) * 1000;
  const giveUp = opt("--give-up");
  const consumer = new Consumer(socket, subscription, {
    consumer: opt("--consumer") ?? "example-worker",
    maxUnacked: 100,
    deadLetters: argv.includes("--dead-letters"),
    giveUpAfterMs: giveUp === undefined ? undefined : Number(giveUp) * 1000,
    log: (m) => console.error(m),
  });
  process.once("SIGINT", () => consumer.close());
  process.once("SIGTERM", () => consumer.close());
  let done = 0;
  try {
    for await (const batch of consumer.batches(idle ? Number(idle) * 1000 : undefined)) {
      const ok: Event[] = [];
      for (const e of batch) {
        try {
          processEvent(e, failOn);
          ok.push(e);
        } catch (err) {
          if (!(err instanceof CannotProcess)) throw err;
          console.error(`offset ${e.offset} (delivery ${e.deliveryCount}): ${err.message}; given back`);
          consumer.nack(e, { delayMs: nackDelayMs, reason: err.message });
        }
      }
      consumer.ack(ok); // one Ack frame for the delivery's processed events
      done += ok.length;
      if (count && done >= count) break;
    }
    if (!consumer.connections) {
      const within = idle === undefined ? "" : ` within ${idle}s`;
      console.error(`worker: never reached cdc at ${socket}${within}: is cdc running, and is this its subscribers.socket?`);
      return 1;
    }
    try {
      await consumer.waitAnswered(); // cdc has every ack before the worker leaves
    } catch (e) {
      console.error(`acks not confirmed (${(e as Error).message}): those events come again`);
    }
  } catch (e) {
    if (e instanceof ServerError || e instanceof ConnectionClosed) {
      console.error(`worker: ${e.message}`);
      return 1;
    }
    throw e;
  } finally {
    consumer.close();
  }
  return 0;
}

main(process.argv.slice(2)).then((rc) => {
  process.exitCode = rc;
});
