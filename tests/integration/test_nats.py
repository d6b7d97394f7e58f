"""test_nats.py: `sink: nats` end to end against Debian's nats-server with JetStream (started by
tests/nats_fixtures.py), read back by the official nats client for Node (an ordered consumer, not
cdc's code) and decoded with the compiled event.proto.

Checked exactly: subject (default and templated), headers, Nats-Msg-Id, the value in both formats
(cross-checked field by field against the same changes on a stdout subscription), every op and a
row of many types; the stream created with `create: true`; and under failure: cdc killed with -9
under load (nothing lost, no copy read), the same changes published by a second process (the
duplicate window drops every copy), the server stopped and started again under load, a stream
that refuses publishes (cdc holds the slot and says why, then goes on), a missing stream."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, wait_for  # noqa: E402
from kafka_fixtures import lsn_text, row_plain, row_typed  # noqa: E402
from nats_fixtures import NoStream, read_stream  # noqa: E402
from pg import lsn_to_int  # noqa: E402
from test_kafka import kafka_section  # noqa: E402
from test_kafka_formats import ROOT, Window, check_records, read_topic, substitute  # noqa: E402
from test_status import get  # noqa: E402

CONTENT_TYPE_EVENT = "application/x-protobuf; messageType=cdc.v1.Event"
HEADERS = {"cdc-op", "cdc-lsn", "cdc-commit-lsn", "cdc-xid", "cdc-subscription", "content-type",
           "Nats-Msg-Id"}
INT4, TEXT, NUMERIC, BOOL, FLOAT8, TIMESTAMPTZ, BYTEA, JSONB, UUID = (
    23, 25, 1700, 16, 701, 1184, 17, 3802, 2950)


def nats_section(server, **extra):
    return dict({"servers": server.url, "create": True}, **extra)


def nsub(name, tables, **kw):
    return dict({"name": name, "tables": tables, "sink": "nats"}, **kw)


def status(c):
    return json.loads(get(c, "/status")[1])


def decode(proto, m):
    e = proto.Event()
    e.ParseFromString(m.data)
    return e


def ids(msgs, proto, table="rows"):
    return [row_plain(decode(proto, m).new_row)["id"] for m in msgs if m.subject.endswith("." + table)]


class Load:
    """Commits one-row transactions into SCHEMA.rows in a thread until stop()."""

    def __init__(self, pg, schema, pause=0.003):
        self.schema, self.pause = schema, pause
        pg.sql(f"create table {schema}.rows (id int primary key, pad text)")
        self.conn = pg.connect()
        self.committed = []
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        cur = self.conn.cursor()
        try:
            while not self._stop.is_set():
                i = len(self.committed)
                cur.execute(f"insert into {self.schema}.rows values ({i}, repeat('x', 200))")
                self.committed.append(i)
                time.sleep(self.pause)
        except Exception as e:  # surfaced by stop()
            self.error = e

    def wait_more(self, n, timeout=30):
        target = len(self.committed) + n
        wait_for(lambda: len(self.committed) >= target or self.error, timeout, what=f"{n} more commits")

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()
        assert self.error is None, self.error
        return list(self.committed)


def wait_stream(server, n, timeout=60, stream="CDC", describe=lambda: ""):
    """The stream's messages once it holds at least n. A stream not created yet holds none."""
    got = []

    def enough():
        try:
            got[:] = read_stream(server, stream)
        except NoStream:
            got[:] = []
        return len(got) >= n
    wait_for(enough, timeout, interval=0.5, what=f"{n} messages in stream {stream} (have {len(got)})\n{describe()}")
    return got


# --- what arrives ------------------------------------------------------------------------------

def test_every_op_and_type_headers_and_msg_id(pg, schema, cdc, nats_server, proto):
    pg.sql(f"""create table {schema}.t (id int primary key, name text, amount numeric, ok bool,
               ratio float8, at timestamptz, data bytea, doc jsonb, u uuid, note text)""")
    c = cdc(subscriptions=[nsub("n", [f"{schema}.t"], operations=["insert", "update", "delete", "truncate",
                                                                    "message"]),
                           nsub("j", [f"{schema}.t"], format="json", subject="json.{subscription}.{table}"),
                           {"name": "s", "tables": [f"{schema}.t"], "sink": "stdout",
                            "operations": ["insert", "update", "delete", "truncate", "message"]}],
            nats=nats_section(nats_server))
    p = c.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"""insert into {schema}.t values
        (1, 'one', 12.50, true, 0.25, '2024-01-02 03:04:05.123456+00', '\\x0001ff', '{{"a": [1, 2]}}',
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', null)""")
    cur.execute(f"insert into {schema}.t (id, name) values (2, 'two')")
    cur.execute("commit")
    cur.execute(f"update {schema}.t set name = 'uno', amount = 13 where id = 1")
    cur.execute(f"delete from {schema}.t where id = 2")
    cur.execute("select pg_logical_emit_message(true, 'cdc-test', 'hello')")
    cur.execute(f"truncate {schema}.t")
    conn.close()

    p.wait_events(6)
    json_events = {(e["commit_lsn"], e["tx_index"]): e for e in p.raw_events()}
    msgs = wait_stream(nats_server, 11, describe=p.describe)  # 6 protobuf, 5 json (no message)
    assert p.terminate() == 0, p.describe()
    msgs = read_stream(nats_server)
    pb = [m for m in msgs if m.header("cdc-subscription") == "n"]
    js = [m for m in msgs if m.header("cdc-subscription") == "j"]
    assert len(pb) == 6 and len(js) == 5, [(m.subject, m.headers) for m in msgs]
    assert [m.seq for m in msgs] == list(range(1, len(msgs) + 1))

    ops = []
    for m in pb:
        e = decode(proto, m)
        j = json_events[(lsn_text(e.commit_lsn), e.tx_index)]
        assert set(m.headers) == HEADERS | ({"cdc-schema-id"} if e.schema_id else set()), m.headers
        assert m.header("Nats-Msg-Id") == f"n:{lsn_text(e.commit_lsn)}:{e.tx_index}"
        assert m.header("cdc-op") == j["op"]
        assert m.header("cdc-lsn") == lsn_text(e.lsn) == j["lsn"]
        assert m.header("cdc-commit-lsn") == lsn_text(e.commit_lsn) == j["commit_lsn"]
        assert m.header("cdc-xid") == str(e.xid) == str(j["xid"])
        assert m.header("content-type") == CONTENT_TYPE_EVENT
        assert e.subscription == "n" and e.tx_index == j["tx_index"]
        if j["op"] == "message":  # no table: its tokens are "_"
            assert m.subject == "cdc._._"
            assert e.message.prefix == "cdc-test" and e.message.content == b"hello"
        else:
            assert m.subject == f"cdc.{schema}.t"
            assert (e.schema, e.table) == (schema, "t")
        assert e.HasField("key") == (j.get("key") is not None)
        if e.HasField("key"):
            assert row_plain(e.key) == j["key"]
        assert e.HasField("new_row") == (j.get("new") is not None)
        assert e.HasField("old_row") == (j.get("old") is not None)
        if e.HasField("old_row"):
            assert row_plain(e.old_row) == j["old"]
        ops.append(j["op"])
    assert ops == ["insert", "insert", "update", "delete", "message", "truncate"]

    first = row_typed(decode(proto, pb[0]).new_row)
    doc = first.pop("doc")
    assert doc[:2] == (JSONB, "json_value") and json.loads(doc[2]) == {"a": [1, 2]}
    assert first["id"] == (INT4, "int_value", 1) and first["amount"] == (NUMERIC, "numeric_value", "12.50")
    assert first["ok"] == (BOOL, "bool_value", True) and first["ratio"] == (FLOAT8, "float_value", 0.25)
    assert first["data"] == (BYTEA, "bytes_value", b"\x00\x01\xff")
    assert first["u"] == (UUID, "uuid_value", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    assert first["note"] == (TEXT, "null_value", None)

    # json: the event JSON sink: stdout prints, with subscription j, on the templated subject
    for m in js:
        v = json.loads(m.data)
        assert m.subject == "json.j.t" and m.header("content-type") == "application/json"
        s = json_events[(v["commit_lsn"], v["tx_index"])]
        assert {k: v[k] for k in v if k != "subscription"} == {k: s[k] for k in s if k != "subscription"}
        assert v["subscription"] == "j" and m.header("cdc-schema-id") == v.get("schema_id")
        assert m.header("Nats-Msg-Id") == f"j:{v['commit_lsn']}:{v['tx_index']}"


def test_debezium_messages_are_kafkas_debezium_values(pg, schema, cdc, kafka, nats_server):
    """format: debezium: each NATS message's data is the value of the record that Kafka's format:
    debezium writes for the same change, field by field (the envelope's ts_ms, ts_us and ts_ns are
    the time each sink wrote it), and its headers are that record's (cdc-*, Debezium's context
    headers, a key change's __debezium.newkey and __debezium.oldkey) with the subscription's name
    and Nats-Msg-Id. No keys and no tombstones, as Debezium Server's NATS JetStream sink publishes
    them. Every op (insert, update with a TOASTed value left unchanged, a key change, delete,
    truncate, message), with and without schemas; the subject is the envelope schema's topic."""
    pg.sql(f"create table {schema}.t (id int primary key, name text, big text)")
    pg.sql(f"alter table {schema}.t alter column big set storage external")  # out of line, uncompressed
    ops = ["insert", "update", "delete", "truncate", "message"]
    subs = []
    for prefix, schemas in (("plain", False), ("schemas", True)):
        common = dict(format="debezium", server_name="dbserver1", schemas=schemas, operations=ops)
        subs.append(dict({"name": "k" + prefix, "tables": [f"{schema}.t"], "sink": "kafka",
                          "topic": prefix + ".{schema}.{table}"}, **common))
        subs.append(nsub("n" + prefix, [f"{schema}.t"], subject=prefix + ".{schema}.{table}", **common))
        for topic in (f"{prefix}.{schema}.t", f"{prefix}.."):
            kafka.create_topic(topic, 1)
    c = cdc(subscriptions=subs, nats=nats_section(nats_server), kafka=kafka_section(kafka))
    p = c.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (1, 'one', repeat('x', 4000)), (2, 'two', null)")
    cur.execute("commit")
    cur.execute(f"update {schema}.t set name = 'uno' where id = 1")  # big: unchanged TOAST
    cur.execute(f"update {schema}.t set id = 10 where id = 1")  # a key change
    cur.execute(f"delete from {schema}.t where id = 2")
    cur.execute("select pg_logical_emit_message(true, 'cdc-test', 'hello')")
    cur.execute(f"truncate {schema}.t")
    conn.close()

    # Kafka: 2 inserts, update, the key change (delete, tombstone, create), delete, tombstone,
    # truncate on the table's topic; the message on its own. NATS: the same without tombstones.
    msgs = wait_stream(nats_server, 16, describe=p.describe)
    kafka_records = {prefix: [dict(r, topic=t) for t in (f"{prefix}.{schema}.t", f"{prefix}..")
                              for r in read_topic(kafka, t, 9 if t.endswith(".t") else 1, p.describe)]
                     for prefix in ("plain", "schemas")}
    assert p.terminate() == 0, p.describe()
    msgs = read_stream(nats_server)
    assert len(msgs) == 16, [(m.subject, m.headers) for m in msgs]

    def masked(value):
        """value with the envelope's times (a message has ts_ms only) as <now>."""
        payload = value.get("payload", value)
        assert isinstance(payload["ts_ms"], int), value
        for k in ("ts_ms", "ts_us", "ts_ns"):
            if k in payload:
                assert isinstance(payload[k], int), (k, value)
                payload[k] = "<now>"
        return value

    runs = set()
    for prefix in ("plain", "schemas"):
        mine = [m for m in msgs if m.header("cdc-subscription") == "n" + prefix]
        kafka_values = [r for r in kafka_records[prefix] if r["value"] is not None]
        assert [r["topic"] for r in kafka_records[prefix]].count(f"{prefix}.{schema}.t") == 9
        assert len(mine) == len(kafka_values) == 8, (prefix, [m.headers for m in mine])
        # table changes in commit order, then the message (on a subject of its own)
        mine.sort(key=lambda m: m.subject.endswith("._._"))
        for m, r in zip(mine, kafka_values):
            want = json.loads(r["value"])
            got = json.loads(m.data)
            assert masked(got) == masked(want), (prefix, got, want)
            assert m.subject == (f"{prefix}.{schema}.t" if r["topic"].endswith(".t") else f"{prefix}._._")
            kh = dict(r["headers"])
            assert kh.pop("cdc-subscription") == "k" + prefix
            nh = dict(m.headers)
            assert nh.pop("cdc-subscription") == "n" + prefix
            msg_id = nh.pop("Nats-Msg-Id")
            assert nh == kh, (prefix, nh, kh)
            runs.add(nh.get("__debezium.context.runId"))
            payload = got.get("payload", got)
            commit = lsn_text(int(json.loads(payload["source"]["sequence"])[0]))
            assert msg_id.startswith(f"n{prefix}:{commit}:"), msg_id
            # the key change's create is the change's second message
            assert msg_id.endswith(":2") == ("__debezium.oldkey" in nh), (msg_id, nh)
        ops = [(json.loads(m.data).get("payload", json.loads(m.data))["op"], m.header("cdc-op")) for m in mine]
        assert ops == [("c", "insert"), ("c", "insert"), ("u", "update"), ("d", "update"), ("c", "update"),
                       ("d", "delete"), ("t", "truncate"), ("m", "message")], ops
        after = json.loads(mine[2].data).get("payload", json.loads(mine[2].data))["after"]
        assert after == {"id": 1, "name": "uno", "big": "__debezium_unavailable_value"}, after
        assert mine[3].header("__debezium.newkey") == '{"id":10}'
        assert mine[4].header("__debezium.oldkey") == '{"id":1}'
        assert {m.header("content-type") for m in mine} == {"application/json"}
    assert len(runs - {None}) == 1, runs  # one runId for the process, on both sinks


# Debezium's documented shapes (tests/fixtures/debezium, which test_kafka_formats.py checks Kafka's
# records against): an insert, an update, a delete, and an update of the key.
DEBEZIUM_FIXTURES = ["create", "update_default", "delete_default", "update_key"]


@pytest.mark.parametrize("name", DEBEZIUM_FIXTURES)
def test_debezium_fixture(pg, schema, cdc, nats_server, name):
    """format: debezium through nats-server -js: the fixture's SQL, then each message against the
    fixture's Kafka records as Debezium Server's NATS JetStream sink would publish them. The value
    field by field, on the subject of the record's topic, with the headers the fixture names. No key
    and no tombstone: a delete is one message, a key change two (delete, then create). Each message
    also carries cdc's headers, which agree with its value, and a Nats-Msg-Id from the change's
    position (the key change's create adds :2). Nothing else is in the stream."""
    fx = json.load(open(os.path.join(ROOT, "tests", "fixtures", "debezium", name + ".json")))
    names = {"schema": schema}
    window = Window()
    for sql in substitute(fx["setup"], names):
        pg.sql(sql)
    want = [dict(r, key=None) for r in substitute(fx["records"], names) if r["value"] is not None]
    sub = dict({"name": "dbz", "sink": "nats", "format": "debezium"}, **substitute(fx["subscription"], names))
    c = cdc(subscriptions=[sub], nats=nats_section(nats_server))
    p = c.start()
    for sql in substitute(fx["sql"], names):
        pg.sql(sql)
    wait_stream(nats_server, len(want), describe=p.describe)
    assert p.terminate() == 0, p.describe()
    msgs = read_stream(nats_server)
    got = [{"topic": m.subject, "key": None, "value": json.loads(m.data), "headers": m.headers} for m in msgs]
    assert len(got) == len(want), [(g["topic"], g["value"] and g["value"]["op"]) for g in got]
    check_records(want, got, window)
    for w, m in zip(want, msgs):
        assert set(m.headers) == set(w["headers"]) | {"cdc-lsn", "cdc-commit-lsn", "cdc-xid", "cdc-subscription",
                                                      "cdc-schema-id", "Nats-Msg-Id"}, m.headers
        assert re.fullmatch(r"[0-9a-f]{16}", m.header("cdc-schema-id")), m.headers
        source = json.loads(m.data)["source"]
        commit = lsn_text(int(json.loads(source["sequence"])[0]))
        assert m.header("cdc-commit-lsn") == commit, (m.headers, source)
        assert m.header("cdc-lsn") == lsn_text(source["lsn"]), (m.headers, source)
        assert m.header("cdc-xid") == str(source["txId"]), (m.headers, source)
        assert m.header("cdc-subscription") == "dbz"
        # one row per transaction: the change's index is 0
        second = "__debezium.oldkey" in w["headers"]
        assert m.header("Nats-Msg-Id") == f"dbz:{commit}:0" + (":2" if second else ""), m.headers


def test_cdc_headers_false_leaves_them_out_and_acknowledgements_still_count(pg, schema, cdc, nats_server, proto):
    """subscriptions[].cdc_headers: false: a message carries Nats-Msg-Id alone, its value the same
    event; the sink still matches each acknowledgement to its transaction (by Nats-Msg-Id, which every
    message has), so nothing stays in flight and the slot moves past them all."""
    pg.sql(f"create table {schema}.t (id int primary key, name text)")
    c = cdc(subscriptions=[nsub("bare", [f"{schema}.t"], cdc_headers=False),
                           nsub("full", [f"{schema}.t"], subject="full.{table}")],
            nats=nats_section(nats_server))
    p = c.start()
    for i in range(3):
        pg.sql(f"insert into {schema}.t values (%s, %s)", (i, f"n{i}"))
    pg.sql(f"update {schema}.t set name = 'x' where id = 1")
    end = pg.current_wal_lsn()
    msgs = wait_stream(nats_server, 8, describe=p.describe)
    bare = [m for m in msgs if m.subject == f"cdc.{schema}.t"]
    full = [m for m in msgs if m.subject == "full.t"]
    assert len(bare) == len(full) == 4, [(m.subject, m.headers) for m in msgs]
    for b, f in zip(bare, full):
        assert set(b.headers) == {"Nats-Msg-Id"}, b.headers
        assert set(f.headers) == HEADERS | {"cdc-schema-id"}, f.headers
        eb, ef = decode(proto, b), decode(proto, f)
        assert b.header("Nats-Msg-Id") == f"bare:{lsn_text(eb.commit_lsn)}:{eb.tx_index}"
        assert eb.subscription == "bare" and ef.subscription == "full"
        ef.subscription = "bare"
        assert eb == ef  # the same event: the value says all the headers said
    assert [row_plain(decode(proto, m).new_row) for m in bare] == [
        {"id": 0, "name": "n0"}, {"id": 1, "name": "n1"}, {"id": 2, "name": "n2"}, {"id": 1, "name": "x"}]
    st = wait_for(lambda: (lambda s: s["delivered"] == 8 and s)(status(c)["nats"]), 10,
                  what=f"8 acknowledged\n{p.describe()}")
    assert st["in_flight"] == 0 and st["errors"] == 0, st
    wait_for(lambda: lsn_to_int(c.slot_row()[1]) >= lsn_to_int(end), 30,
             what=f"the slot to pass {end}\n{p.describe()}")
    assert p.terminate() == 0, p.describe()


# --- failures ----------------------------------------------------------------------------------

def load_run(pg, schema, cdc, nats_server, **nats):
    """SCHEMA.rows under load into sink nats (its stream created by cdc), the first 20 on NATS."""
    load = Load(pg, schema)
    c = cdc(subscriptions=[nsub("load", [f"{schema}.rows"], operations=["insert"])],
            nats=nats_section(nats_server, **nats))
    p = c.start()
    load.start()
    wait_stream(nats_server, 20, describe=p.describe)
    return load, c, p


def drained(nats_server, committed, proto, describe, timeout=90):
    """The stream once every committed row is in it: their ids, in stream order."""
    got = []

    def complete():
        got[:] = ids(read_stream(nats_server), proto)
        return set(got) >= set(committed)
    wait_for(complete, timeout, interval=0.5,
             what=f"all {len(committed)} committed rows in the stream (have {len(set(got))})\n{describe()}")
    return got


def test_kill9_under_load_loses_nothing_and_no_copy_is_read(pg, schema, cdc, nats_server, proto):
    load, c, p = load_run(pg, schema, cdc, nats_server)
    load.wait_more(50)
    p.kill()  # SIGKILL: acknowledged publishes the slot was not told of yet are sent again
    load.wait_more(50)
    p2 = c.start()
    committed = load.stop()
    got = drained(nats_server, committed, proto, p2.describe)
    assert got == committed  # each once, in commit order: the duplicate window dropped every copy
    st = wait_for(lambda: (lambda s: s["delivered"] and s)(status(c)["nats"]), 10, what="fresh figures")
    assert st["connected"] is True and st["errors"] == 0 and st["error"] is None, st
    print(f"sent again after kill -9, dropped by the duplicate window: {st['duplicates']}")
    assert p2.terminate() == 0, p2.describe()


def test_a_second_process_publishing_the_same_changes_is_dropped(pg, schema, cdc, nats_server, proto):
    """Two cdc processes on two slots see the same changes at the same positions: the stream holds
    each change once, and JetStream acknowledges every second copy as a duplicate (Nats-Msg-Id is
    the change's position, not the process's)."""
    pg.sql(f"create table {schema}.rows (id int primary key)")
    subs = [nsub("same", [f"{schema}.rows"], operations=["insert"])]
    a = cdc(subscriptions=subs, nats=nats_section(nats_server))
    b = cdc(subscriptions=subs, nats=nats_section(nats_server))
    pa, pb_ = a.start(), b.start()
    for i in range(0, 40, 4):
        pg.sql(f"insert into {schema}.rows select generate_series({i}, {i + 3})")
    for c, p in ((a, pa), (b, pb_)):
        wait_for(lambda: status(c)["nats"]["delivered"] == 40, 30, what=f"40 acknowledged\n{p.describe()}")
    got = ids(read_stream(nats_server), proto)
    assert got == list(range(40))
    assert status(a)["nats"]["duplicates"] + status(b)["nats"]["duplicates"] == 40


def test_server_stopped_and_started_again_under_load(pg, schema, cdc, nats_server, proto):
    load, c, p = load_run(pg, schema, cdc, nats_server, ack_timeout="3s")
    nats_server.stop()
    wait_for(lambda: status(c)["nats"]["connected"] is False, 20, what=f"cdc to see the server gone\n{p.describe()}")
    load.wait_more(100)  # committed while the server is down: the slot holds them
    code, body = get(c, "/readyz")
    assert code == 503 and "nats" in body, (code, body)
    nats_server.start()
    load.wait_more(50)
    committed = load.stop()
    got = drained(nats_server, committed, proto, p.describe)
    assert got == committed
    st = wait_for(lambda: (lambda s: s["connected"] and s)(status(c)["nats"]), 10, what="fresh figures")
    assert st["reconnects"] + st["restarts"] >= 1, st
    print(f"after the server's restart: {st}")
    assert p.terminate() == 0, p.describe()


def test_a_stream_that_refuses_holds_the_slot_and_says_why(pg, schema, cdc, nats_server, proto):
    """No stream, then one that stores only 3 messages (discard new): cdc publishes nothing past
    what the stream takes, holds the slot and says why in /status and /readyz; once the stream
    takes more, every change arrives once, in order."""
    pg.sql(f"create table {schema}.rows (id int primary key)")
    c = cdc(subscriptions=[nsub("r", [f"{schema}.rows"], operations=["insert"]),
                           {"name": "s", "tables": [f"{schema}.rows"], "sink": "stdout", "operations": ["insert"]}],
            nats={"servers": nats_server.url, "stream": "HELD", "ack_timeout": "5s"})
    p = c.start()
    for i in range(6):
        pg.sql(f"insert into {schema}.rows values ({i})")
    # On stdout the slot sends them all, and again after each of the NATS sink's restarts: each
    # transaction's commit by its row (the first six events may hold copies of the first ones).
    def commit_of():
        return {e["new"]["id"]: lsn_to_int(e["commit_lsn"]) for e in p.events() if e["op"] == "insert"}
    wait_for(lambda: len(commit_of()) == 6, 30, what=f"the six transactions on stdout\n{p.describe()}")
    commits = [commit_of()[i] for i in range(6)]
    wait_for(lambda: "stream HELD does not exist" in (status(c)["nats"]["error"] or ""), 30,
             what=f"the missing stream in /status\n{p.describe()}")
    code, body = get(c, "/readyz")
    assert code == 503 and "stream HELD does not exist" in body, (code, body)
    held_at = lsn_to_int(c.slot_row()[1])

    stream = {"name": "HELD", "subjects": [f"cdc.{schema}.rows"], "max_msgs": 3, "discard": "new",
              "duplicate_window": 120 * 10**9}
    nats_server.admin("add", json.dumps(stream))
    wait_for(lambda: "maximum messages exceeded" in (status(c)["nats"]["error"] or ""), 30,
             what=f"the refusal in /status\n{p.describe()}")
    assert ids(read_stream(nats_server, "HELD"), proto) == [0, 1, 2]
    # the slot is not confirmed past what the stream refused
    time.sleep(1)  # a standby status update would have been sent meanwhile
    assert held_at <= lsn_to_int(c.slot_row()[1]) < commits[3]

    nats_server.admin("update", json.dumps(dict(stream, max_msgs=-1)))
    wait_for(lambda: len(read_stream(nats_server, "HELD")) >= 6, 60, interval=0.5,
             what=f"the rest once the stream takes it\n{p.describe()}")
    assert ids(read_stream(nats_server, "HELD"), proto) == list(range(6))
    wait_for(lambda: status(c)["nats"]["error"] is None, 30, what="the error cleared")
    assert p.terminate() == 0, p.describe()


# --- cdc doctor, check-config ------------------------------------------------------------------

def doctor_nats(c):
    """cdc doctor --json's findings of the NATS checks: [(check, status, detail, fix)]."""
    p = subprocess.run([CDC_BIN, "doctor", "-c", c.path, "--json"], capture_output=True, text=True, timeout=60)
    checks = json.loads(p.stdout)["checks"]
    return [(k["check"], k["status"], k["detail"], k["fix"]) for k in checks if k["check"].startswith("nats_")]


def test_doctor_checks_the_server_and_the_stream(pg, schema, cdc, nats_server):
    pg.sql(f"create table {schema}.rows (id int primary key)")
    subs = [nsub("d", [f"{schema}.rows"]), nsub("e", [f"{schema}.rows"], subject="audit.{table}")]
    missing = cdc(subscriptions=subs, nats={"servers": nats_server.url, "stream": "DOC"})
    found = doctor_nats(missing)
    assert [f[:2] for f in found] == [("nats_server", "pass"), ("nats_stream", "fail")], found
    assert found[1][2] == "stream DOC does not exist"
    assert found[1][3] == ("nats stream add DOC --subjects 'cdc.*.*,audit.*' --storage file --dupe-window "
                           "120000ms --defaults, or set nats.create: true")
    created = cdc(subscriptions=subs, nats={"servers": nats_server.url, "stream": "DOC", "create": True})
    assert doctor_nats(created)[1][:3] == (
        "nats_stream", "pass", "stream DOC does not exist; cdc creates it (nats.create) for cdc.*.*,audit.*")

    # a stream without audit.* and with a short duplicate window
    nats_server.admin("add", json.dumps({"name": "DOC", "subjects": ["cdc.>"], "duplicate_window": 10 * 10**9}))
    found = doctor_nats(missing)
    assert found[1][:3] == ("nats_stream", "fail", "stream DOC does not hold audit.*: JetStream refuses those "
                            "publishes, and cdc holds the slot"), found
    nats_server.admin("update", json.dumps({"name": "DOC", "subjects": ["cdc.>", "audit.*"],
                                            "duplicate_window": 10 * 10**9}))
    found = doctor_nats(missing)
    assert found[1] == ("nats_stream", "warn", "stream DOC drops a copy only within 10000 ms, less than "
                        "nats.duplicate_window (120000 ms): a restart that takes longer may publish a change "
                        "twice", "nats stream edit DOC --dupe-window 120000ms"), found

    nats_server.stop()
    found = doctor_nats(missing)
    assert [f[:2] for f in found] == [("nats_server", "fail")], found
    assert found[0][2].startswith(nats_server.url + ": "), found


def test_check_config_masks_nats_secrets(cdc, nats_server):
    c = cdc(subscriptions=[nsub("m", ["public.t"])],
            nats={"servers": nats_server.url, "user": "cdc", "password": "hunter2", "token": "s3cret"})
    p = subprocess.run([CDC_BIN, "check-config", "-c", c.path], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "hunter2" not in p.stdout and "s3cret" not in p.stdout
    assert '  password: "********"\n' in p.stdout and '  token: "********"\n' in p.stdout
    assert "  user: cdc\n" in p.stdout and "    subject: \"cdc.{schema}.{table}\"\n" in p.stdout
