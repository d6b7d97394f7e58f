// worker.ts: an example worker on @cdc/client. Prints each event of a socket subscription as one
// JSON line, then acknowledges it; survives cdc restarts. Exits after --count events or --idle
// seconds without one.
//   node proto/clients/typescript/dist/examples/worker.js /run/cdc/events.sock jobs [--count N] [--idle S]
import { Consumer, ServerError, rowOf } from "../src";

function json(v: unknown): string {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === "bigint") return x.toString();
    if (x && x.type === "Buffer" && Array.isArray(x.data)) return Buffer.from(x.data).toString("hex");
    return x;
  });
}

async function main(argv: string[]): Promise<number> {
  const [socket, subscription] = argv;
  const opt = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  if (!socket || !subscription) {
    console.error("usage: worker SOCKET SUBSCRIPTION [--consumer NAME] [--count N] [--idle SECONDS]");
    return 2;
  }
  const count = Number(opt("--count") ?? 0);
  const idle = opt("--idle");
  const consumer = new Consumer(socket, subscription, {
    consumer: opt("--consumer") ?? "example-worker",
    maxUnacked: 100,
    log: (m) => console.error(m),
  });
  process.once("SIGINT", () => consumer.close());
  process.once("SIGTERM", () => consumer.close());
  let done = 0;
  try {
    for await (const batch of consumer.batches(idle ? Number(idle) * 1000 : undefined)) {
      for (const e of batch) {
        process.stdout.write(json({ offset: e.offset, op: e.op, table: e.table, row: rowOf(e) }) + "\n");
      }
      consumer.ack(...batch); // one Ack frame for the whole delivery
      done += batch.length;
      if (count && done >= count) break;
    }
  } catch (e) {
    if (e instanceof ServerError) {
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
