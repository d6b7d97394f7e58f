// client.test.mjs: proto/clients/typescript (@cdc/client) against a real cdc and PostgreSQL, with
// node's test runner. Run by tests/clients/test_typescript_client.py, which starts PostgreSQL,
// writes cdc's config and passes: CDC_BIN, CDC_CONFIG, CDC_SOCKET, CDC_SLOT, CDC_SCHEMA, PSQL,
// PG_DSN. This file runs cdc itself (so that it can restart it) and writes rows with psql.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Consumer, Connection, PermissionDenied, ServerError } = require(path.join(here, "../../../proto/clients/typescript/dist/src"));

const env = (k) => {
  if (!process.env[k]) throw new Error(`${k} not set: run through tests/clients/test_typescript_client.py`);
  return process.env[k];
};
const [CDC_BIN, CONFIG, SOCKET, SLOT, SCHEMA, PSQL, DSN] =
  ["CDC_BIN", "CDC_CONFIG", "CDC_SOCKET", "CDC_SLOT", "CDC_SCHEMA", "PSQL", "PG_DSN"].map(env);

const sql = (q) => execFileSync(PSQL, ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", DSN, "-c", q], { encoding: "utf8" }).trim();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(cond, what, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

let cdc = null;
async function startCdc() {
  const p = spawn(CDC_BIN, ["run", "-c", CONFIG], { stdio: ["ignore", "ignore", "inherit"] });
  p.exited = new Promise((r) => p.once("exit", (code) => r(code)));
  cdc = p;
  await waitFor(() => sql(`select active from pg_replication_slots where slot_name = '${SLOT}'`) === "t", "cdc to stream from its slot");
  return p;
}
async function stopCdc(signal = "SIGTERM") {
  const p = cdc;
  cdc = null;
  p.kill(signal);
  return p.exited;
}

/** Takes n events from an async iterator. */
async function take(it, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await it.next();
    assert.ok(!r.done, `iteration ended after ${i} of ${n} events`);
    out.push(r.value);
  }
  return out;
}

before(async () => {
  sql(`create table ${SCHEMA}.typed (id int primary key, big bigint, amount numeric, ok boolean, note text,
       at timestamptz, d date, u uuid, b bytea, doc jsonb, nothing text)`);
  sql(`create table ${SCHEMA}.jobs (id int primary key, note text)`);
  sql(`create table ${SCHEMA}.shared (id int primary key)`);
  for (const t of ["nacked", "long", "refusals"]) sql(`create table ${SCHEMA}.${t} (id int primary key)`);
  await startCdc();
});

after(async () => {
  if (cdc) await stopCdc();
});

test("events arrive as typed objects with native values, and acks stick", async () => {
  sql(`insert into ${SCHEMA}.typed values (1, 9007199254740993, 120.50, true, 'héllo', '2026-11-22 10:00:00.123456+00',
       '2026-11-22', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x0001ff', '{"a": [1, null]}', null)`);
  sql(`update ${SCHEMA}.typed set ok = false, big = 7 where id = 1`);
  sql(`delete from ${SCHEMA}.typed where id = 1`);
  const c = new Consumer(SOCKET, "typed", { consumer: "ts-test", heartbeatMs: 200 });
  const it = c.events(20000);
  const [ins, upd, del] = await take(it, 3);
  assert.equal(c.mode, "failover");
  assert.deepEqual([ins, upd, del].map((e) => [e.offset, e.op, e.deliveryCount, e.tag, e.subscription, e.schema, e.table]), [
    [1n, "insert", 1, "t1", "typed", SCHEMA, "typed"],
    [2n, "update", 1, "t1", "typed", SCHEMA, "typed"],
    [3n, "delete", 1, "t1", "typed", SCHEMA, "typed"],
  ]);
  assert.deepEqual(ins.new, {
    id: 1, big: 9007199254740993n, amount: "120.50", ok: true, note: "héllo",
    at: new Date("2026-11-22T10:00:00.123Z"), d: "2026-11-22", u: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    b: Buffer.from([0, 1, 255]), doc: { a: [1, null] }, nothing: null,
  });
  assert.deepEqual([ins.key, ins.old, ins.unchangedToast], [{ id: 1 }, null, []]);
  assert.deepEqual([upd.new.ok, upd.new.big], [false, 7]);
  assert.deepEqual([del.new, del.key], [null, { id: 1 }]);
  assert.ok(ins.lsn <= ins.commitLsn && ins.commitLsn < upd.commitLsn && upd.commitLsn < del.commitLsn);
  assert.equal(ins.txIndex, 0);
  assert.ok(ins.commitTime instanceof Date && ins.commitTime.getUTCFullYear() >= 2024);
  c.ack(ins, upd); // failover: one cumulative Ack of offset 2
  // Heartbeats come while the iterator waits: the server reports offset 2 acknowledged.
  await waitFor(async () => {
    for await (const e of c.events(300)) assert.fail(`unexpected event ${e.offset}`);
    return c.serverAckedOffset === 2n;
  }, "the server to report offset 2 acknowledged", 10000);
  c.close();
  // A new consumer starts after the acknowledged offset: the delete again (second delivery).
  const c2 = new Consumer(SOCKET, "typed");
  const again = [];
  for await (const e of c2.events(1000)) again.push([e.offset, e.op, e.deliveryCount]);
  assert.deepEqual(again, [[3n, "delete", 2]]);
  assert.equal(BigInt(c2.subscribed.ackedOffset.toString()), 2n);
  c2.close();
});

test("schema and DDL events are typed: columns, types, keys, NOT NULL, a rename", async () => {
  sql(`create table ${SCHEMA}.shaped (id int primary key, amount numeric(10,2) not null, note varchar(20))`);
  sql(`insert into ${SCHEMA}.shaped values (1, 1.5, 'a')`);
  sql(`alter table ${SCHEMA}.shaped rename column note to memo`);
  sql(`insert into ${SCHEMA}.shaped values (2, 2.5, 'b')`);
  const c = new Consumer(SOCKET, "shaped", { heartbeatMs: 200 });
  const evs = await take(c.events(20000), 6);
  assert.deepEqual(evs.map((e) => [e.offset, e.op]), [
    [1n, "ddl"], [2n, "schema"], [3n, "insert"], [4n, "ddl"], [5n, "schema"], [6n, "insert"],
  ]);
  const [create, s1, ins1, rename, s2, ins2] = evs;
  assert.deepEqual(create.ddl, {
    event: "ddl_command_end", commandTag: "CREATE TABLE", objectType: "table", objectIdentity: `${SCHEMA}.shaped`,
    statement: `create table ${SCHEMA}.shaped (id int primary key, amount numeric(10,2) not null, note varchar(20))`,
    columns: [
      { attnum: 1, name: "id", type: "integer", typeOid: 23, typmod: -1, notNull: true },
      { attnum: 2, name: "amount", type: "numeric(10,2)", typeOid: 1700, typmod: 655366, notNull: true },
      { attnum: 3, name: "note", type: "character varying(20)", typeOid: 1043, typmod: 24, notNull: false },
    ],
  });
  assert.deepEqual([create.tableSchema, create.schemaId], [null, null]);
  assert.deepEqual(s1.tableSchema, {
    columns: [
      { name: "id", type: "integer", typeOid: 23, typmod: -1, key: true, nullable: false, renamedFrom: null },
      { name: "amount", type: "numeric(10,2)", typeOid: 1700, typmod: 655366, key: false, nullable: false, renamedFrom: null },
      { name: "note", type: "character varying(20)", typeOid: 1043, typmod: 24, key: false, nullable: true, renamedFrom: null },
    ],
    replicaIdentity: "default",
  });
  assert.match(s1.schemaId, /^[0-9a-f]{16}$/);
  assert.equal(ins1.schemaId, s1.schemaId);
  assert.deepEqual(ins1.new, { id: 1, amount: "1.50", note: "a" });
  assert.deepEqual([rename.ddl.commandTag, rename.ddl.objectType, rename.ddl.objectIdentity],
    ["ALTER TABLE", "table column", `${SCHEMA}.shaped.memo`]);
  assert.deepEqual(s2.tableSchema.columns[2],
    { name: "memo", type: "character varying(20)", typeOid: 1043, typmod: 24, key: false, nullable: true, renamedFrom: "note" });
  assert.notEqual(s2.schemaId, s1.schemaId);
  assert.deepEqual([ins2.schemaId, ins2.new.memo, s2.txIndex, s2.commitLsn], [s2.schemaId, "b", ins2.txIndex, ins2.commitLsn]);
  c.ack(ins2);
  assert.deepEqual(await c.waitAnswered(), []);
  c.close();
});

test("shared mode acknowledges each offset", async () => {
  sql(`insert into ${SCHEMA}.shared select generate_series(1, 4)`);
  const c = new Consumer(SOCKET, "shared", { heartbeatMs: 200 });
  const evs = await take(c.events(20000), 4);
  assert.equal(c.mode, "shared");
  assert.equal(c.cumulative, false);
  assert.deepEqual(evs.map((e) => e.new.id), [1, 2, 3, 4]);
  c.ack(evs[0], evs[2]);
  await waitFor(async () => {
    for await (const e of c.events(300)) assert.fail(`unexpected event ${e.offset}`);
    return c.serverAckedOffset === 1n;
  }, "the server to report offset 1 acknowledged", 10000);
  c.close();
  const c2 = new Consumer(SOCKET, "shared");
  const rest = [];
  for await (const e of c2.events(1000)) rest.push([e.offset, e.new.id]);
  assert.deepEqual(rest, [[2n, 2], [4n, 4]]);
  c2.close();
});

for (const signal of ["SIGTERM", "SIGKILL"]) {
  test(`a worker survives a cdc restart (${signal}): unacknowledged events come again, acknowledged ones do not`, async () => {
    const base = signal === "SIGTERM" ? 0 : 100;
    sql(`insert into ${SCHEMA}.jobs select i, 'n' || i from generate_series(${base + 1}, ${base + 4}) i`);
    const c = new Consumer(SOCKET, "jobs", { heartbeatMs: 200, backoffInitialMs: 50, backoffMaxMs: 500, giveUpAfterMs: 60000 });
    const got = [];
    const worker = (async () => {
      for await (const e of c.events(60000)) {
        got.push([e.new.id - base, e.deliveryCount, c.connections]);
        if (e.new.id - base <= 2 || c.connections === 2) c.ack(e); // all but 3 and 4 the first time
        if (e.new.id - base === 6) break;
      }
      c.close();
    })();
    await waitFor(() => got.length >= 4, "4 events");
    assert.deepEqual(got, [[1, 1, 1], [2, 1, 1], [3, 1, 1], [4, 1, 1]]);
    const offset2 = (base === 0 ? 2n : 8n);
    await waitFor(() => c.serverAckedOffset === offset2, `the server to report offset ${offset2} acknowledged`);
    const code = await stopCdc(signal);
    if (signal === "SIGTERM") assert.equal(code, 0);
    await startCdc();
    sql(`insert into ${SCHEMA}.jobs select i, 'n' || i from generate_series(${base + 5}, ${base + 6}) i`);
    await worker;
    // 3 and 4 were never acknowledged: delivered again, their second delivery (the spool keeps
    // delivery counts across restarts, kill -9 too); 1 and 2 not.
    assert.deepEqual(got.slice(4), [[3, 2, 2], [4, 2, 2], [5, 1, 2], [6, 1, 2]]);
  });
}

test("an Error frame becomes a ServerError with its code, and the server closes the connection", async () => {
  const c = new Consumer(SOCKET, "nope");
  await assert.rejects(take(c.events(), 1), (e) => {
    assert.ok(e instanceof ServerError);
    assert.deepEqual([e.code, e.codeValue, e.serverMessage, e.message],
      ["UNKNOWN_SUBSCRIPTION", 2, "no subscription named nope", "UNKNOWN_SUBSCRIPTION: no subscription named nope"]);
    return true;
  });
  c.close();
  const conn = await Connection.connect(SOCKET);
  await assert.rejects(conn.subscribe("nope"), (e) => e instanceof ServerError && e.code === "UNKNOWN_SUBSCRIPTION");
  assert.equal(await conn.next(10000), null);
  assert.equal(conn.closed, true);
});

test("PERMISSION_DENIED (the allow list does not hold this uid) becomes a PermissionDenied at once, not retried", async () => {
  const c = new Consumer(SOCKET, "locked"); // reconnects on other errors
  await assert.rejects(take(c.events(), 1), (e) => {
    assert.ok(e instanceof PermissionDenied && e instanceof ServerError);
    assert.deepEqual([e.code, e.codeValue], ["PERMISSION_DENIED", 8]);
    assert.match(e.serverMessage, new RegExp(`^uid ${process.getuid()} \\(group ${process.getgid()}[^)]*\\) may not read ` +
      "subscription locked: neither its uid nor its groups are in the subscription's allow list \\(allow: uids, gids\\)$"));
    return true;
  });
  c.close();
});

test("nack with a delay and a reason: delivered again later, then a dead letter carrying the reason", async () => {
  sql(`insert into ${SCHEMA}.nacked select generate_series(1, 3)`);
  const c = new Consumer(SOCKET, "nacked", { consumer: "nacker", heartbeatMs: 200 });
  const it = c.events(20000);
  const [e1, e2, e3] = await take(it, 3);
  assert.deepEqual([e1, e2, e3].map((e) => [e.offset, e.deliveryCount]), [[1n, 1], [2n, 1], [3n, 1]]);
  const t0 = Date.now();
  c.ack(e1);
  c.nack(e2, { delayMs: 1000, reason: "card declined" });
  c.ack(e3); // failover acks are cumulative: held below 2 while 2 is given back
  assert.deepEqual(await c.waitAnswered(), []);
  assert.equal(c.serverAckedOffset, 1n);
  const [again] = await take(it, 1);
  const waited = Date.now() - t0;
  assert.deepEqual([again.offset, again.deliveryCount, again.new.id], [2n, 2, 2]);
  assert.ok(waited >= 800 && waited < 5000, `waited ${waited} ms`);
  c.nack(again, { reason: "gateway timeout \u2014 gave up" }); // the second delivery: max_deliveries
  // 2 is a dead letter now, so the ack of 3 held back goes out.
  assert.deepEqual(await c.waitAnswered(), []);
  assert.equal(c.serverAckedOffset, 3n);
  c.close();
  const dead = new Consumer(SOCKET, "nacked", { deadLetters: true });
  const got = [];
  for await (const d of dead.events(2000)) got.push(d);
  assert.equal(got.length, 1);
  const [d] = got;
  assert.deepEqual([d.offset, d.deliveryCount, d.new.id], [1n, 1, 2]);
  const h = d.deadLetter;
  assert.deepEqual([h.offset, h.originalOffset, h.deliveries, h.reason], [1n, 2n, 2, "gateway timeout \u2014 gave up"]);
  assert.ok(Math.abs(h.deadTime.getTime() - Date.now()) < 30000 && h.deadTimeMicros / 1000n === BigInt(h.deadTime.getTime()));
  dead.ack(d);
  assert.deepEqual(await dead.waitAnswered(), []);
  assert.equal(dead.serverAckedOffset, 1n);
  dead.close();
  assert.deepEqual([e1, e2, e3].map((e) => e.deadLetter), [null, null, null]);
});

/** The events of the first Delivery a raw Connection receives within ms, else []. */
async function firstDelivery(conn, ms) {
  const end = Date.now() + ms;
  for (let left = ms; left > 0; left = end - Date.now()) {
    const f = await conn.next(left);
    if (f && f.kind === "delivery") return f.delivery.events;
    if (f === null && conn.closed) break;
  }
  return [];
}

test("progress keeps a long job (2.5 s, ack_timeout 1 s) from being delivered again", async () => {
  sql(`insert into ${SCHEMA}.long values (1)`);
  const c = new Consumer(SOCKET, "long", { consumer: "worker", maxUnacked: 1, heartbeatMs: 200 });
  const it = c.events(20000);
  const [job] = await take(it, 1);
  let spare = await Connection.connect(SOCKET);
  await spare.subscribe("long", { consumer: "spare", maxUnacked: 1 }); // would take the job if it came back
  const stop = c.keepAlive(job, 300);
  await sleep(2500); // the job
  stop();
  assert.deepEqual(await firstDelivery(spare, 200), []);
  spare.close();
  c.ack(job);
  assert.deepEqual(await c.waitAnswered(), []);
  assert.deepEqual([c.serverAckedOffset, job.deliveryCount], [1n, 1]);
  // Without Progress the next job is taken away after the ack timeout.
  sql(`insert into ${SCHEMA}.long values (2)`);
  const [job2] = await take(it, 1);
  spare = await Connection.connect(SOCKET);
  await spare.subscribe("long", { consumer: "spare2", maxUnacked: 1 });
  const taken = await firstDelivery(spare, 5000);
  assert.deepEqual(taken.map((e) => [BigInt(e.offset.toString()), e.deliveryCount]), [[2n, 2]]);
  c.progress(job2); // too late: it is the spare's now
  assert.deepEqual(await c.waitAnswered(), [{ offset: 2n, reason: "OTHER_CONSUMER" }]);
  spare.close();
  c.close();
});

test("a refused ack (an offset never delivered) is reported to onRefused and by waitAnswered", async () => {
  sql(`insert into ${SCHEMA}.refusals values (1)`);
  const seen = [];
  const c = new Consumer(SOCKET, "refusals", { heartbeatMs: 200, onRefused: (r) => seen.push(r) });
  const [e] = await take(c.events(20000), 1);
  c.ack(99);
  assert.deepEqual(await c.waitAnswered(), [{ offset: 99n, reason: "NOT_DELIVERED" }]);
  assert.deepEqual(seen, [[{ offset: 99n, reason: "NOT_DELIVERED" }]]);
  assert.equal(c.serverAckedOffset, 0n);
  c.ack(e);
  assert.deepEqual(await c.waitAnswered(), []);
  assert.equal(c.serverAckedOffset, 1n);
  c.ack([e]); // again, as a batch
  assert.deepEqual(await c.waitAnswered(), [{ offset: 1n, reason: "ALREADY_ACKED" }]);
  assert.equal(c.unanswered, 0);
  c.close();
});
