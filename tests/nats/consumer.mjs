// consumer.mjs: reads a JetStream stream from its first message with an ordered consumer of the
// official nats client (not cdc's code) and prints one JSON line per message: its stream sequence,
// subject, headers and data (base64). It stops at the stream's last message as its info said at
// the start. Usage: node consumer.mjs SERVER STREAM [FROM_SEQ] (from the first message by default).
// A stream that does not exist (JetStream's error 10059) exits with code 3.
import { connect } from "nats";

const [server, stream, from] = process.argv.slice(2);
const start = Number(from ?? 1);
const nc = await connect({ servers: server, timeout: 10000 });
try {
  const jsm = await nc.jetstreamManager();
  const info = await jsm.streams.info(stream).catch((e) => {
    if (e.api_error?.err_code !== 10059) throw e;
    process.stderr.write(`no stream ${stream}\n`);
    process.exit(3);
  });
  const last = info.state.last_seq;
  if (info.state.messages > 0 && start <= last) {
    const consumer = await nc.jetstream().consumers.get(stream, { opt_start_seq: start });
    const messages = await consumer.consume();
    for await (const m of messages) {
      const headers = {};
      for (const [k, v] of m.headers ?? []) headers[k] = v.length === 1 ? v[0] : v;
      process.stdout.write(JSON.stringify({
        seq: m.seq,
        subject: m.subject,
        headers,
        data: Buffer.from(m.data).toString("base64"),
      }) + "\n");
      if (m.seq >= last) break;
    }
  }
} finally {
  await nc.close();
}
