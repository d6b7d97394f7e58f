"""test_kafka.py: `sink: kafka` end to end: cdc streams a real PostgreSQL into the mock Kafka
cluster (tests/kafka/mock_cluster.c) and the tests read the topics back with a consumer group
(confluent_kafka) and with kcat, decoding keys and values with the compiled event.proto.

Checked exactly: topic (default and templated), key (cdc.v1.Key, deterministic bytes), headers,
value (cdc.v1.Event, cross-checked field by field against the same change on a stdout
subscription), per-key order, tombstones, transaction records; and under failure: every broker
down for 20 s (the slot holds), retriable produce errors (nothing lost, no restart), a permanent
and a fatal produce error (the producer is rebuilt, streaming resumes from the slot, nothing
lost), kill -9 under load, SIGTERM with messages in flight."""

import collections
import datetime
import json
import os
import re
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import to_yaml, wait_for  # noqa: E402
from kafka_fixtures import (CONTENT_TYPE_EVENT, CONTENT_TYPE_TXN, kcat, lsn_text,  # noqa: E402
                            row_plain, row_typed)
from pg import lsn_to_int  # noqa: E402
from test_status import get  # noqa: E402

EVENT_HEADERS = {"cdc-op", "cdc-lsn", "cdc-commit-lsn", "cdc-xid", "cdc-subscription", "content-type"}
ROW_HEADERS = EVENT_HEADERS | {"cdc-schema-id"}  # a row's: the schema it has (docs/kafka.md#schemas)
TXN_HEADERS = {"cdc-xid", "cdc-commit-lsn", "content-type"}
RESTART_LOG = "a sink failed; it restarts and streaming resumes from the slot's confirmed position"

# type oids
INT4, TEXT, NUMERIC, BOOL, FLOAT8, TIMESTAMPTZ, BYTEA, JSONB, UUID = (
    23, 25, 1700, 16, 701, 1184, 17, 3802, 2950)


# --- helpers ------------------------------------------------------------------------------------

def kafka_section(kafka, **extra):
    """The top-level kafka: section for the mock cluster. The properties go to librdkafka as they
    are: a short linger, reconnects within a second once brokers return, and one request in flight:
    librdkafka 2.0.2's mock checks idempotent sequence numbers only for transactional producers, so
    with several in flight an injected produce error can lose a batch that librdkafka then reports
    delivered (tests/fault/mock_idempotence_loss.py shows it without cdc)."""
    section = {"brokers": kafka.bootstrap,
               "properties": {"linger.ms": "5", "reconnect.backoff.max.ms": "1000",
                              "max.in.flight.requests.per.connection": "1"}}
    section.update(extra)
    return section


def ksub(name, tables, **kw):
    return dict({"name": name, "tables": tables, "sink": "kafka"}, **kw)


def micros(rfc3339):
    """Microseconds since the epoch of an RFC 3339 UTC timestamp ("...Z")."""
    dt = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return (dt - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)


def event_id(m):
    """What identifies one event across redeliveries: subscription, commit_lsn, tx_index (and
    whether it is the tombstone that follows a delete)."""
    if m.is_tombstone:
        return (m.topic, m.key, "tombstone", m.header("cdc-commit-lsn"))
    e = m.event
    return (e.subscription, e.commit_lsn, e.tx_index)


def unique(msgs):
    """The messages without redeliveries (first occurrence kept). A redelivery must carry the
    very same key and value."""
    seen = {}
    for m in msgs:
        k = event_id(m)
        if k in seen:
            assert (seen[k].key, seen[k].value) == (m.key, m.value), \
                f"two different messages for {k}: {seen[k].where()} and {m.where()}"
            continue
        seen[k] = m
    return list(seen.values())


def by_key(msgs):
    """{key bytes: [messages in partition order]}; every key's messages are in one partition."""
    out = collections.defaultdict(list)
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        out[m.key].append(m)
    for k, ms in out.items():
        parts = {m.partition for m in ms}
        assert len(parts) == 1, f"key {k!r} in partitions {parts}"
    return out


def expected_key(proto, schema, table, id_):
    """The Key of a row with an int4 primary key id, as any protobuf implementation packs it."""
    return proto.Key(schema=schema, table=table, columns=[
        proto.Column(name="id", type_oid=INT4, value=proto.Value(int_value=id_))]).SerializeToString()


def slot_confirmed(c):
    row = c.slot_row()
    return lsn_to_int(row[1]) if row and row[1] else 0


def wait_slot_past(c, p, end, timeout):
    """Waits until the slot's confirmed position reaches end; else fails saying where the slot, cdc's
    sinks (/status, read then) and its log stand."""
    try:
        wait_for(lambda: slot_confirmed(c) >= end, timeout=timeout, what=f"the slot to pass {lsn_text(end)}")
    except AssertionError as e:
        raise AssertionError(f"{e}: it is at {lsn_text(slot_confirmed(c))}\n/status: {get(c, '/status')[1]}\n"
                             f"{p.describe()}") from None


class Load:
    """Commits small transactions in a thread until stop(): transaction i inserts row i into
    SCHEMA.rows and sets counters.n = i on key i % keys, so every key's values increase."""

    def __init__(self, pg, schema, keys=5, pause=0.004):
        self.schema, self.keys, self.pause = schema, keys, pause
        pg.sql(f"create table {schema}.rows (id int primary key)")
        pg.sql(f"create table {schema}.counters (id int primary key, n int not null)")
        pg.sql(f"insert into {schema}.counters select g, -1 from generate_series(0, {keys - 1}) g")
        self.conn = pg.connect()
        self.committed = []
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        cur = self.conn.cursor()
        i = len(self.committed)
        try:
            while not self._stop.is_set():
                # One simple query with two statements: one implicit transaction.
                cur.execute(f"insert into {self.schema}.rows values ({i}); "
                            f"update {self.schema}.counters set n = {i} where id = {i % self.keys}")
                self.committed.append(i)
                i += 1
                time.sleep(self.pause)
        except Exception as e:  # surfaced by stop()
            self.error = e

    def count(self):
        return len(self.committed)

    def wait_more(self, n, timeout=30):
        target = self.count() + n
        wait_for(lambda: self.count() >= target or self.error, timeout, what=f"{n} more load transactions")
        assert self.error is None, self.error

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()
        assert self.error is None, f"load failed: {self.error}"
        return set(self.committed)

    def final(self):
        """{counter id: last n committed}."""
        last = {}
        for i in self.committed:
            last[i % self.keys] = i
        return last

    def topics(self):
        return [f"cdc.{self.schema}.rows", f"cdc.{self.schema}.counters"]


def load_ids(msgs, schema):
    return {row_plain(m.event.new_row)["id"] for m in msgs
            if not m.is_tombstone and m.topic == f"cdc.{schema}.rows"}


def check_counters(msgs, load, strict):
    """Per-key order of the counters topic. strict: the values of each key, redeliveries left
    out, strictly increase (nothing was sent again). Always: the last message of each key carries
    the key's final value, so a compacted topic holds the current rows."""
    counters = [m for m in msgs if m.topic == f"cdc.{load.schema}.counters"]
    final = load.final()
    keys = by_key(counters)
    assert len(keys) == len(final), f"{len(keys)} counter keys on Kafka, {len(final)} updated"
    for key, ms in keys.items():
        ns = [row_plain(m.event.new_row)["n"] for m in (unique(ms) if strict else ms)]
        k = ms[0].key_pb
        id_ = row_plain(k)["id"]
        if strict:
            assert ns == sorted(ns) and len(set(ns)) == len(ns), f"key {id_}: values out of order: {ns}"
            want = [i for i in load.committed if i % load.keys == id_]
            assert ns == want, f"key {id_}: got {len(ns)} updates, committed {len(want)}"
        assert ns[-1] == final[id_], f"key {id_}: last message has n={ns[-1]}, final value {final[id_]}"


def start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=None, **sub):
    """Tables, topics (4 partitions), a reader, cdc streaming, load running and its first
    transactions on Kafka: (Load, Cdc, CdcProcess, KafkaReader). kafka_extra: more keys of the
    kafka: section."""
    load = Load(pg, schema)
    for t in load.topics():
        kafka.create_topic(t, 4)
    reader = kafka_reader(load.topics(), group=False)
    c = cdc(subscriptions=[ksub("load", [f"{schema}.rows", f"{schema}.counters"], **sub)],
            kafka=kafka_section(kafka, **(kafka_extra or {})))
    p = c.start()
    load.start()
    reader.wait(20, timeout=30, what="before the failure", describe=p.describe)
    return load, c, p, reader


def drain(load, p, reader, schema, timeout=60):
    """Stops the load and waits until every committed transaction is on Kafka, both its events:
    the row (ids) and the counter update (same commit_lsn). Returns the messages."""
    committed = load.stop()

    def commits(ms, table):
        return {m.event.commit_lsn for m in ms if m.topic == f"cdc.{schema}.{table}"}

    def complete(ms):
        return load_ids(ms, schema) >= committed and commits(ms, "counters") >= commits(ms, "rows")
    reader.wait_until(complete, timeout=timeout, what=f"all {len(committed)} committed transactions",
                      describe=p.describe)
    msgs = reader.snapshot()
    assert load_ids(msgs, schema) == committed
    assert commits(msgs, "counters") == commits(msgs, "rows")
    return msgs


# --- what arrives ------------------------------------------------------------------------------

@pytest.mark.matrix
def test_events_topic_key_headers_value(pg, schema, cdc, kafka, kafka_reader, proto):
    pg.sql(f"""create table {schema}.t (id int primary key, name text, amount numeric, ok bool,
               ratio float8, at timestamptz, data bytea, doc jsonb, u uuid, note text)""")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 3)
    reader = kafka_reader([topic])  # a consumer group, joined while cdc starts
    # The same changes on a stdout subscription: its JSON gives lsn, xid and commit_time to
    # compare with.
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"]),
                           {"name": "s", "tables": [f"{schema}.t"], "sink": "stdout"}],
            kafka=kafka_section(kafka))
    p = c.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"""insert into {schema}.t values
        (1, 'one', 12.50, true, 0.25, '2024-01-02 03:04:05.123456+00', '\\x0001ff', '{{"a": [1, 2]}}',
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', null)""")
    cur.execute(f"insert into {schema}.t (id, name) values (2, 'two')")
    cur.execute(f"insert into {schema}.t (id) values (3)")
    cur.execute("commit")
    cur.execute(f"update {schema}.t set name = 'uno', amount = 13 where id = 1")
    cur.execute(f"delete from {schema}.t where id = 2")
    cur.execute(f"update {schema}.t set id = 30 where id = 3")
    conn.close()

    msgs = reader.wait(6, timeout=30, describe=p.describe)
    json_events = {(e["commit_lsn"], e["tx_index"]): e for e in p.wait_events(6)}
    assert p.terminate() == 0, p.describe()
    assert len(kcat(kafka.bootstrap, topic)) == 6  # cdc is gone: the topic is complete
    msgs = reader.wait(6)
    assert len(msgs) == 6, msgs
    relid = pg.sql(f"select '{schema}.t'::regclass::oid")[0][0]

    evs = sorted(msgs, key=lambda m: (m.event.commit_lsn, m.event.tx_index))
    ops = {1: "insert", 2: "update", 3: "delete"}
    for m in evs:
        e = m.event
        j = json_events[(lsn_text(e.commit_lsn), e.tx_index)]
        assert m.topic == topic
        # key: deterministic bytes of the row's key after the change (the JSON "key" is before it)
        after = j["new"] or j["key"]
        assert m.key_pb.schema == schema and m.key_pb.table == "t"
        assert row_plain(m.key_pb) == {"id": after["id"]}
        assert m.key == expected_key(proto, schema, "t", after["id"])
        # headers
        assert sorted(m.header_names()) == sorted(ROW_HEADERS), m.headers
        assert m.header("cdc-schema-id") == f"{e.schema_id:016x}" and e.schema_id != 0
        assert m.header("cdc-op") == ops[e.op] == j["op"]
        assert m.header("cdc-lsn") == lsn_text(e.lsn) == j["lsn"]
        assert m.header("cdc-commit-lsn") == lsn_text(e.commit_lsn) == j["commit_lsn"]
        assert m.header("cdc-xid") == str(e.xid) == str(j["xid"])
        assert m.header("cdc-subscription") == "k"
        assert m.header("content-type") == CONTENT_TYPE_EVENT
        # value
        assert e.subscription == "k"
        assert e.WhichOneof("offset_present") is None and e.WhichOneof("tag_present") is None
        assert (e.schema, e.table, e.relation_id) == (schema, "t", relid)
        assert e.xid == j["xid"] and e.tx_index == j["tx_index"]
        assert e.commit_time == micros(j["commit_time"])
        assert e.lsn <= e.commit_lsn
        assert e.delivery_count == 0 and not e.origin
        assert not e.HasField("truncate") and not e.HasField("message")
        assert row_plain(e.key) == j["key"]
        assert e.HasField("new_row") == (j["new"] is not None)
        assert e.HasField("old_row") == (j["old"] is not None)
        if j["old"] is not None:
            assert row_plain(e.old_row) == j["old"]

    # one transaction: one commit_lsn, xid and commit_time, tx_index 0..2
    tx = evs[:3]
    assert {(m.event.commit_lsn, m.event.xid, m.event.commit_time) for m in tx} == \
        {(tx[0].event.commit_lsn, tx[0].event.xid, tx[0].event.commit_time)}
    assert [m.event.tx_index for m in tx] == [0, 1, 2]
    assert len({m.event.commit_lsn for m in evs}) == 4
    assert [m.event.op for m in evs] == [proto.OP_INSERT] * 3 + [proto.OP_UPDATE, proto.OP_DELETE, proto.OP_UPDATE]

    at = (datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.timezone.utc)
          - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)
    first = row_typed(evs[0].event.new_row)
    doc = first.pop("doc")
    assert doc[:2] == (JSONB, "json_value") and json.loads(doc[2]) == {"a": [1, 2]}
    assert first == {
        "id": (INT4, "int_value", 1), "name": (TEXT, "text_value", "one"),
        "amount": (NUMERIC, "numeric_value", "12.50"), "ok": (BOOL, "bool_value", True),
        "ratio": (FLOAT8, "float_value", 0.25), "at": (TIMESTAMPTZ, "timestamp_value", (at, True)),
        "data": (BYTEA, "bytes_value", b"\x00\x01\xff"),
        "u": (UUID, "uuid_value", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        "note": (TEXT, "null_value", None)}
    assert list(first) == ["id", "name", "amount", "ok", "ratio", "at", "data", "u", "note"]
    assert row_plain(evs[1].event.new_row) == {"id": 2, "name": "two", "amount": None, "ok": None,
                                               "ratio": None, "at": None, "data": None, "doc": None,
                                               "u": None, "note": None}
    upd = row_plain(evs[3].event.new_row)
    assert (upd["id"], upd["name"], upd["amount"]) == (1, "uno", "13")
    assert not evs[3].event.HasField("old_row")
    dele = evs[4].event
    assert row_plain(dele.key) == row_plain(dele.old_row) == {"id": 2} and not dele.HasField("new_row")
    # The key changed: the event's key and old_row are the key before the change; the Kafka key is
    # the one after it, so a compacted topic holds the row under its current key.
    moved = evs[5].event
    assert row_plain(moved.key) == row_plain(moved.old_row) == {"id": 3}
    assert row_plain(moved.new_row)["id"] == 30
    assert evs[5].key == expected_key(proto, schema, "t", 30)


def test_cdc_headers_false_leaves_them_out_and_the_value_says_the_same(pg, schema, cdc, kafka, kafka_reader):
    """cdc_headers: false: a row's record has none of cdc's headers, and its value says what they
    would have; Debezium's context headers have a key of their own and stay."""
    pg.sql(f"create table {schema}.t (id int primary key, name text)")
    topics = {n: f"{n}.{schema}.t" for n in ("k", "bare", "dbz")}
    for t in topics.values():
        kafka.create_topic(t, 1)
    reader = kafka_reader(list(topics.values()))
    c = cdc(subscriptions=[ksub(n, [f"{schema}.t"], topic=n + ".{schema}.{table}",
                                **({} if n == "k" else {"cdc_headers": False}),
                                **({"format": "debezium"} if n == "dbz" else {}))
                           for n in topics],
            kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 'one')")
    pg.sql(f"update {schema}.t set name = 'uno' where id = 1")
    msgs = reader.wait(6, timeout=30, describe=p.describe)
    assert p.terminate() == 0, p.describe()
    got = {n: [m for m in msgs if m.topic == t] for n, t in topics.items()}
    assert [len(v) for v in got.values()] == [2, 2, 2], msgs
    ops = {1: "insert", 2: "update"}
    for m, b in zip(got["k"], got["bare"]):
        assert sorted(m.header_names()) == sorted(ROW_HEADERS) and b.headers == []
        e = b.event
        assert (m.header("cdc-op"), m.header("cdc-lsn"), m.header("cdc-commit-lsn"), m.header("cdc-xid"),
                m.header("cdc-schema-id")) == \
            (ops[e.op], lsn_text(e.lsn), lsn_text(e.commit_lsn), str(e.xid), f"{e.schema_id:016x}")
        assert (m.header("cdc-subscription"), e.subscription) == ("k", "bare")
        assert b.key == m.key and b.partition == m.partition
    for d in got["dbz"]:
        assert d.header_names() == ["__debezium.context.connectorLogicalName", "__debezium.context.taskId",
                                    "__debezium.context.connectorName", "__debezium.context.runId"]


def test_updates_to_one_row_arrive_in_order(pg, schema, cdc, kafka, kafka_reader):
    pg.sql(f"create table {schema}.c (id int primary key, n int)")
    topic = f"cdc.{schema}.c"
    kafka.create_topic(topic, 4)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.c"])], kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.c select g, 0 from generate_series(1, 6) g")
    for i in range(1, 31):
        for k in range(1, 7):
            pg.sql(f"update {schema}.c set n = %s where id = %s", (i, k))
    msgs = reader.wait(6 + 30 * 6, timeout=30, describe=p.describe)
    keys = by_key(msgs)
    assert len(keys) == 6
    assert len({ms[0].partition for ms in keys.values()}) > 1, "all keys in one partition: order not shown"
    for key, ms in keys.items():
        assert [row_plain(m.event.new_row)["n"] for m in ms] == list(range(0, 31)), key
        assert [m.event.op for m in ms][0] == 1  # the insert first
    assert p.terminate() == 0, p.describe()


def test_tombstones_follow_deletes(pg, schema, cdc, kafka, kafka_reader, proto):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    tmpl = "cdc.{schema}.{table}.{subscription}"
    t_tomb, t_plain = f"cdc.{schema}.t.tomb", f"cdc.{schema}.t.plain"
    for t in (t_tomb, t_plain):
        kafka.create_topic(t, 2)
    reader = kafka_reader([t_tomb, t_plain], group=False)
    c = cdc(subscriptions=[ksub("tomb", [f"{schema}.t"], topic=tmpl, tombstones=True),
                           ksub("plain", [f"{schema}.t"], topic=tmpl)],
            kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 'a'), (2, 'b')")
    pg.sql(f"delete from {schema}.t where id = 1")
    pg.sql(f"update {schema}.t set v = 'c' where id = 2")
    pg.sql(f"delete from {schema}.t where id = 2")
    reader.wait(7, pred=lambda m: m.topic == t_tomb, describe=p.describe)
    reader.wait(5, pred=lambda m: m.topic == t_plain, describe=p.describe)
    assert p.terminate() == 0, p.describe()
    assert (len(kcat(kafka.bootstrap, t_tomb)), len(kcat(kafka.bootstrap, t_plain))) == (7, 5)

    plain = [m for m in reader.snapshot() if m.topic == t_plain]
    assert len(plain) == 5 and not any(m.is_tombstone for m in plain)
    tomb = [m for m in reader.snapshot() if m.topic == t_tomb]
    assert len(tomb) == 7
    for key, ms in by_key(tomb).items():
        id_ = row_plain(proto.Key.FromString(key))["id"]
        kinds = ["tombstone" if m.is_tombstone else {1: "insert", 2: "update", 3: "delete"}[m.event.op] for m in ms]
        want = {1: ["insert", "delete", "tombstone"], 2: ["insert", "update", "delete", "tombstone"]}[id_]
        assert kinds == want, (id_, kinds)
        delete, stone = ms[-2], ms[-1]
        assert stone.offset == delete.offset + 1  # right behind its delete
        assert stone.key == delete.key == expected_key(proto, schema, "t", id_)
        assert stone.value is None


def test_update_that_changes_the_key_moves_the_row(pg, schema, cdc, kafka, kafka_reader, proto):
    """Keyed by the key after the change, so a compacted topic holds the row under its current key;
    with tombstones the old key gets one (the event's own key field stays the identity before)."""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 2)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], tombstones=True)], kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (3, 'a')")
    pg.sql(f"update {schema}.t set id = 30 where id = 3")
    pg.sql(f"update {schema}.t set v = 'b' where id = 30")
    reader.wait(4, describe=p.describe)
    assert p.terminate() == 0, p.describe()
    keyed = by_key(reader.snapshot())
    assert set(keyed) == {expected_key(proto, schema, "t", 3), expected_key(proto, schema, "t", 30)}
    old, new = keyed[expected_key(proto, schema, "t", 3)], keyed[expected_key(proto, schema, "t", 30)]
    assert [("tombstone" if m.is_tombstone else m.event.op) for m in old] == [1, "tombstone"]
    assert [(m.event.op, row_plain(m.event.new_row)["id"], row_plain(m.event.key)["id"]) for m in new] == \
        [(2, 30, 3), (2, 30, 30)]


def test_transaction_records(pg, schema, cdc, kafka, kafka_reader, proto):
    for t in ("a", "b", "x"):
        pg.sql(f"create table {schema}.{t} (id int primary key, v int)")
    txt = f"cdc.tx.{schema}"
    kafka.create_topic(txt, 1)
    topics = [f"cdc.{schema}.a", f"cdc.{schema}.b"]
    for t in topics:
        kafka.create_topic(t, 2)
    reader = kafka_reader(topics + [txt], transactions_topic=txt, group=False)
    c = cdc(subscriptions=[ksub("ab", [f"{schema}.a", f"{schema}.b"]),
                           {"name": "xs", "tables": [f"{schema}.x"], "sink": "stdout"}],
            kafka=kafka_section(kafka, transactions_topic=txt))
    p = c.start()
    pg.sql(f"insert into {schema}.a values (1, 1), (2, 2); insert into {schema}.b values (1, 1)")
    pg.sql(f"update {schema}.a set v = 3 where id = 1")
    pg.sql(f"insert into {schema}.x values (1, 1)")  # no Kafka event: no record
    pg.sql(f"insert into {schema}.b values (2, 2); insert into {schema}.x values (2, 2)")
    records = reader.wait(3, pred=lambda m: m.topic == txt, describe=p.describe)
    events = reader.wait(5, pred=lambda m: m.topic != txt, describe=p.describe)
    assert p.terminate() == 0, p.describe()
    # In commit order in one partition: a record for the x-only transaction would be the third.
    assert len(kcat(kafka.bootstrap, txt)) == 3

    by_commit = collections.defaultdict(list)
    for m in events:
        by_commit[m.event.commit_lsn].append(m.event)
    want_tables = [{(schema, "a"): 2, (schema, "b"): 1}, {(schema, "a"): 1}, {(schema, "b"): 1}]
    assert [r.offset for r in records] == [0, 1, 2]
    commits = sorted(by_commit)
    assert len(commits) == 3
    for r, commit, tables in zip(records, commits, want_tables):
        t = r.txn
        evs = by_commit[commit]
        assert r.key == lsn_text(commit).encode()
        assert (t.commit_lsn, t.xid, t.commit_time) == (commit, evs[0].xid, evs[0].commit_time)
        assert {(tc.schema, tc.table): tc.events for tc in t.tables} == tables
        assert len(t.tables) == len(tables)
        assert t.events == len(evs) == sum(tables.values())
        assert sorted(r.header_names()) == sorted(TXN_HEADERS), r.headers
        assert r.header("cdc-xid") == str(t.xid)
        assert r.header("cdc-commit-lsn") == lsn_text(commit)
        assert r.header("content-type") == CONTENT_TYPE_TXN


def test_topic_template_subscription_and_tag_seen_by_kcat(pg, schema, cdc, kafka, kafka_reader, proto):
    pg.sql(f"create table {schema}.orders (id int primary key, status text)")
    topic = f"{schema}.audit.orders_feed.orders"
    kafka.create_topic(topic, 3)
    reader = kafka_reader([topic])  # a consumer group
    c = cdc(subscriptions=[ksub("orders_feed", [f"{schema}.orders"], tag="audit",
                                topic="{schema}.{tag}.{subscription}.{table}")],
            kafka=kafka_section(kafka))
    p = c.start()
    for i in range(1, 11):
        pg.sql(f"insert into {schema}.orders values (%s, 'new')", (i,))
    pg.sql(f"update {schema}.orders set status = 'paid' where id <= 5")
    msgs = reader.wait(15, describe=p.describe)
    assert p.terminate() == 0, p.describe()
    for m in msgs:
        assert m.topic == topic
        assert m.header("cdc-subscription") == "orders_feed"
        assert m.event.subscription == "orders_feed" and m.event.tag == "audit"
        assert m.event.WhichOneof("tag_present") == "tag"
        assert m.key == expected_key(proto, schema, "orders", row_plain(m.event.key)["id"])
    assert sorted(row_plain(m.event.new_row)["id"] for m in msgs) == sorted(list(range(1, 11)) + list(range(1, 6)))

    # kcat, a client of its own, reads the very same records: partition, offset, key, value, headers.
    seen = kcat(kafka.bootstrap, topic)
    assert sorted((k["partition"], k["offset"], k["key"], k["value"], tuple(k["headers"])) for k in seen) == \
        sorted((m.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in msgs)


def test_first_message_of_a_topic_asks_for_its_leaders(pg, schema, cdc, kafka, kafka_reader):
    """librdkafka 2.0.2 asks the brokers for a topic's leaders when a handle for it is made, not
    when rd_kafka_producev() is given its name: produced that way, the first messages of every
    topic, created or not, waited for the periodic metadata refresh (up to a second; the bench
    paused 0.9 s at every start). cdc makes a handle at a topic's first message; librdkafka's debug
    log shows the leader query it sends then."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic])
    section = kafka_section(kafka)
    section["properties"]["debug"] = "metadata"
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=section, log={"level": "debug"})
    p = c.start()
    wait_for(lambda: "streaming" in p.stderr(), timeout=30, what=f"cdc streaming\n{p.describe()}")
    assert "topics: leader query" not in p.stderr(), p.describe()  # no topic yet
    pg.sql(f"insert into {schema}.t values (1)")
    assert len(reader.wait(1, describe=p.describe)) == 1
    assert p.terminate() == 0, p.describe()
    assert "Requesting metadata for 1/1 topics: leader query" in p.stderr(), p.describe()


# --- failures ----------------------------------------------------------------------------------

def test_all_brokers_down_holds_the_slot(pg, schema, cdc, kafka, kafka_reader):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader)
    kafka.all_down()
    # Nothing committed from here on can reach Kafka while the brokers are down.
    down_at = lsn_to_int(pg.current_wal_lsn())
    before = load.count()
    deadline = time.monotonic() + 20
    highest = 0
    readyz = set()
    while time.monotonic() < deadline:
        assert p.running(), p.describe()
        highest = max(highest, slot_confirmed(c))
        assert highest <= down_at, \
            f"slot confirmed {lsn_text(highest)} past {lsn_text(down_at)} while every broker is down"
        readyz.add(get(c, "/readyz"))
        time.sleep(0.25)
    # Kubernetes sees the outage: not ready, saying why.
    assert (503, "kafka: every broker is down; messages wait in flight\n") in readyz, readyz
    during = load.count() - before
    assert during >= 20, f"only {during} transactions while the brokers were down"
    assert lsn_to_int(pg.current_wal_lsn()) > down_at
    kafka.all_up()
    load.wait_more(50)
    msgs = drain(load, p, reader, schema, timeout=90)
    check_counters(msgs, load, strict=RESTART_LOG not in p.stderr())
    end = lsn_to_int(pg.current_wal_lsn())
    wait_slot_past(c, p, end, timeout=60)
    wait_for(lambda: get(c, "/readyz") == (200, "ready\n"), 10, what="ready again")
    assert p.terminate() == 0, p.describe()


def test_retriable_produce_errors_lose_nothing(pg, schema, cdc, kafka, kafka_reader):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader)

    # Every partition of rows gets rows (ids are all distinct), so each of its leaders gets
    # produce requests and serves the errors it was given.
    leaders = sorted(kafka.leaders([f"cdc.{schema}.rows"]))

    def inject(errors):
        for b in leaders:
            for err, n in errors:
                kafka.push_broker_errors(b, err, n)
        pending = {}

        def served():
            pending.update({b: kafka.pending_errors(b) for b in leaders})
            return not any(pending.values())
        try:
            wait_for(served, timeout=30)
        except AssertionError:
            raise AssertionError(f"errors {errors} still queued on brokers: {pending}\n{p.describe()}")

    # Not persisted by the broker, retried by librdkafka: no restart, no duplicate.
    inject([("NOT_ENOUGH_REPLICAS", 3), ("NOT_LEADER_FOR_PARTITION", 2)])
    load.wait_more(50)
    upto = set(load.committed)
    reader.wait_until(lambda ms: load_ids(ms, schema) >= upto, what="the rows committed so far",
                      describe=p.describe)
    assert RESTART_LOG not in p.stderr(), p.describe()
    # Possibly persisted (a timeout), retried too. librdkafka before 2.3.0 may make a fatal error
    # of a timeout followed by an out-of-sequence answer (confluentinc/librdkafka#4438); cdc then
    # restarts the producer, and only "nothing lost" holds.
    inject([("REQUEST_TIMED_OUT", 3)])
    load.wait_more(50)
    msgs = drain(load, p, reader, schema)
    check_counters(msgs, load, strict=RESTART_LOG not in p.stderr())
    assert p.terminate() == 0, p.describe()


@pytest.mark.parametrize("error,count,why", [
    # A permanent error: the delivery report fails (librdkafka does not retry it).
    ("MSG_SIZE_TOO_LARGE", 1, "a message could not be delivered"),
    # A fatal error of the idempotent producer when it answers the partition's first request in
    # flight (sequence desynchronisation); on a later one librdkafka bumps the epoch and retries,
    # so three are queued: one of them is fatal.
    ("OUT_OF_ORDER_SEQUENCE_NUMBER", 3, "fatal producer error"),
])
def test_failed_producer_is_rebuilt_and_nothing_lost(pg, schema, cdc, kafka, kafka_reader, error, count, why):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader)
    broker = min(kafka.leaders([f"cdc.{schema}.rows"]))  # leads a partition every row may go to
    kafka.push_broker_errors(broker, error, count)
    wait_for(lambda: RESTART_LOG in p.stderr() or not p.running(), timeout=30,
             what=f"cdc to restart the sink after {error}\n{p.describe()}")
    assert p.running(), p.describe()
    wait_for(lambda: kafka.pending_errors(broker) == 0, timeout=30, what=f"broker {broker} to serve every {error}")
    line = [ln for ln in p.stderr().splitlines() if RESTART_LOG in ln][0]
    assert "sink=kafka" in line and why in line, line
    load.wait_more(150)
    msgs = drain(load, p, reader, schema)
    # Sent again from the slot: duplicates (same commit_lsn and tx_index, same bytes), no loss,
    # and each key's last message is its final value.
    check_counters(msgs, load, strict=False)
    end = lsn_to_int(pg.current_wal_lsn())
    wait_slot_past(c, p, end, timeout=60)
    assert p.terminate() == 0, p.describe()


def kill9_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=None, before_kill=None):
    """cdc killed with -9 under load (after 100 more transactions, and before_kill(Cdc) if given)
    and started again; returns (the messages once every committed transaction is on Kafka, the
    second process)."""
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=kafka_extra)
    load.wait_more(100)
    if before_kill:
        before_kill(c)
    p.kill()
    load.wait_more(100)
    p2 = c.start()
    load.wait_more(100)
    msgs = drain(load, p2, reader, schema)
    check_counters(msgs, load, strict=False)
    return msgs, p2


def test_kill9_under_load_then_restart(pg, schema, cdc, kafka, kafka_reader):
    _, p2 = kill9_run(pg, schema, cdc, kafka, kafka_reader)
    assert p2.terminate() == 0, p2.describe()


def test_sigterm_delivers_in_flight_then_exits_0(pg, schema, cdc, kafka, kafka_reader):
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 2)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=kafka_section(kafka),
            source={"status_interval": "100ms"})
    p = c.start()
    pg.sql(f"insert into {schema}.t values (0)")
    reader.wait(1, describe=p.describe)
    kafka.set_rtt(1500)  # every broker answers late: what cdc produces now stays in flight
    for i in range(1, 20):
        pg.sql(f"insert into {schema}.t values (%s)", (i,))
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (20)")
    cur.execute("select pg_current_wal_insert_lsn()::text")
    before_commit = lsn_to_int(cur.fetchone()[0])
    cur.execute("commit")
    committed_at = time.monotonic()
    conn.close()

    # cdc reports as written what it has received: past before_commit, it holds the last commit.
    def received():
        rows = pg.sql("select r.write_lsn::text from pg_stat_replication r join pg_replication_slots s "
                      "on s.active_pid = r.pid where s.slot_name = %s", (c.slot,))
        return rows and rows[0][0] and lsn_to_int(rows[0][0]) > before_commit
    wait_for(received, timeout=30, what=f"cdc to receive the last commit\n{p.describe()}")
    confirmed = slot_confirmed(c)
    early = time.monotonic() - committed_at < 1.4
    assert p.terminate(timeout=60) == 0, p.describe()
    # No broker can have acknowledged the last transaction's message within 1.5s of its commit:
    # the slot must not have passed it yet. (Checked only when the test got here that fast.)
    if early:
        assert confirmed <= before_commit, \
            f"slot confirmed {lsn_text(confirmed)} past {lsn_text(before_commit)} before any acknowledgement"
    kafka.set_rtt(0)
    confirmed = slot_confirmed(c)
    assert confirmed > before_commit, f"slot at {lsn_text(confirmed)} after exit"
    assert f"flushed_lsn={lsn_text(confirmed)}" in p.stderr(), p.describe()
    msgs = reader.wait(21, describe=p.describe)
    assert sorted(row_plain(m.event.new_row)["id"] for m in msgs) == list(range(21))


def test_a_transaction_larger_than_the_queue_waits_for_room_and_loses_nothing(pg, schema, cdc, kafka,
                                                                              kafka_reader):
    """librdkafka's queue (queue.buffering.max.messages, here 20 from kafka.properties, over cdc's
    default) is far smaller than one transaction: cdc waits for delivery reports to make room
    instead of failing the message or growing, and every row arrives once, in order per key."""
    pg.sql(f"create table {schema}.big (id int primary key, n int not null)")
    topic = f"cdc.{schema}.big"
    kafka.create_topic(topic, 1)  # one partition: the whole transaction in commit order
    reader = kafka_reader([topic], group=False)
    section = kafka_section(kafka)
    section["properties"]["queue.buffering.max.messages"] = "20"
    c = cdc(subscriptions=[ksub("k", [f"{schema}.big"])], kafka=section)
    p = c.start()
    pg.sql(f"insert into {schema}.big select g, g * 2 from generate_series(1, 2000) g")
    pg.sql(f"update {schema}.big set n = -1 where id = 7")
    end = lsn_to_int(pg.current_wal_lsn())
    msgs = reader.wait(2001, timeout=90, describe=p.describe)
    assert [row_plain(m.event.new_row)["id"] for m in msgs] == list(range(1, 2001)) + [7]
    assert [row_plain(m.event.new_row)["n"] for m in msgs[:3]] == [2, 4, 6]
    assert [m.event.tx_index for m in msgs[:2000]] == list(range(2000))
    wait_slot_past(c, p, end, timeout=60)
    assert p.terminate() == 0, p.describe()
    err = p.stderr()
    assert "could not be queued" not in err and RESTART_LOG not in err, p.describe()
    assert len(kcat(kafka.bootstrap, topic)) == 2001


def test_a_row_larger_than_message_max_bytes_stops_cdc_with_what_to_do(pg, schema, cdc, kafka, kafka_reader):
    """A row whose event is over the producer's message.max.bytes (1 MB by default) cannot be sent
    however often the sink restarts: cdc used to restart and read the slot again every half
    second, saying only 'Message size too large'. It stops (exit 1), naming the topic, the size and
    the settings to raise; with message.max.bytes raised the row arrives, nothing lost."""
    pg.sql(f"create table {schema}.t (id int primary key, doc text)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 'small')")
    pg.sql(f"insert into {schema}.t select 2, string_agg(md5(g::text), '') from generate_series(1, 40000) g")
    assert p.wait_exit(30) == 1, p.describe()
    err = p.stderr()
    assert re.search(rf"a message is larger than the producer sends: \d+ bytes for topic {topic}, more than "
                     r"message.max.bytes \(1000000\): raise message.max.bytes in kafka.properties", err), err
    assert RESTART_LOG not in err, err
    c.config["kafka"]["properties"]["message.max.bytes"] = "4000000"
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    p2 = c.start()
    msgs = reader.wait(2, describe=p2.describe)
    assert [row_plain(m.event.new_row)["id"] for m in msgs] == [1, 2]
    assert len(row_plain(msgs[1].event.new_row)["doc"]) == 40000 * 32
    assert p2.terminate() == 0, p2.describe()


def test_a_row_larger_than_the_queue_is_sent_when_message_max_bytes_allows_it(pg, schema, cdc, kafka, kafka_reader):
    """librdkafka answers QUEUE_FULL to a record larger than queue.buffering.max.kbytes even into an
    empty queue, so with message.max.bytes raised past the queue (as cdc's own error advises) such a
    row used to wait for good, the slot held and nothing said. cdc sizes the queue to hold one record
    of message.max.bytes, and refuses at the start kafka.properties that set both the other way."""
    pg.sql(f"create table {schema}.t (id int primary key, doc text)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic], group=False)
    section = kafka_section(kafka)
    section["properties"].update({"message.max.bytes": "6000000", "queue.buffering.max.kbytes": "2048"})
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=section)
    p = c.run()
    assert p.wait_exit(30) == 2, p.describe()  # a configuration that cannot work
    assert ("kafka.properties: queue.buffering.max.kbytes 2048 holds less than one record of message.max.bytes "
            "6000000, so such a record could never be queued: raise queue.buffering.max.kbytes to 5860 or more"
            in p.stderr()), p.describe()
    del c.config["kafka"]["properties"]["queue.buffering.max.kbytes"]
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    p2 = c.start()
    # 4.6 MiB of text: past both the 2 MiB queue cdc starts from and the 4 MiB one it had before
    pg.sql(f"insert into {schema}.t select 1, string_agg(md5(g::text), '') from generate_series(1, 150000) g")
    (m,) = reader.wait(1, describe=p2.describe)
    assert len(row_plain(m.event.new_row)["doc"]) == 150000 * 32
    assert p2.terminate() == 0, p2.describe()


def test_no_experimental_warning_for_the_gapless_guarantee_cdc_sets(pg, schema, cdc, kafka):
    """cdc turns enable.gapless.guarantee on itself: librdkafka's "experimental" warning about it,
    printed at every start, is not passed on; set in kafka.properties, it is the user's and is."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    for props, warned in (({}, False), ({"enable.gapless.guarantee": "true"}, True)):
        section = kafka_section(kafka)
        section["properties"].update(props)
        c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=section)
        p = c.start()
        wait_for(lambda: "streaming" in p.stderr(), timeout=30, what=f"cdc streaming\n{p.describe()}")
        assert p.terminate() == 0, p.describe()
        assert ("enable.gapless.guarantee is experimental" in p.stderr()) == warned, p.describe()
