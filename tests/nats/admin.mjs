// admin.mjs: manages JetStream streams with the official nats client, for the tests that need a
// stream made a certain way. Usage: node admin.mjs SERVER add|update CONFIG_JSON, or
// node admin.mjs SERVER info|delete NAME. Prints the stream's info (or {}) as JSON.
import { connect } from "nats";

const [server, command, arg] = process.argv.slice(2);
const nc = await connect({ servers: server, timeout: 10000 });
try {
  const jsm = await nc.jetstreamManager();
  let out = {};
  if (command === "add") out = await jsm.streams.add(JSON.parse(arg));
  else if (command === "update") {
    const config = JSON.parse(arg);
    out = await jsm.streams.update(config.name, config);
  } else if (command === "info") out = await jsm.streams.info(arg);
  else if (command === "delete") await jsm.streams.delete(arg);
  else throw new Error(`unknown command ${command}`);
  process.stdout.write(JSON.stringify(out) + "\n");
} finally {
  await nc.close();
}
