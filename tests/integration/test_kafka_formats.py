"""test_kafka_formats.py: Kafka subscriptions with `format: json` and `format: debezium`, read by
consumers that are not cdc's code (kcat, and confluent_kafka), decoded with json.loads only.

Debezium: each tests/fixtures/debezium/*.json holds a shape of Debezium's PostgreSQL connector (an
op, a replica identity, the types, with and without schemas), with where in Debezium's
documentation and source it comes from and what differs; the test runs its SQL through a real
PostgreSQL and cdc into the mock Kafka cluster and compares every record field by field. Values
that legitimately differ between runs are written as <ms>, <us>, <ns> (times: numbers within the
test's run), <lsn>, <xid> (positive numbers), <sequence> (["N","N"]), <txn> ("XID:LSN") and
<version>, and checked by type and format, and against each other (source.ts_us is source.ts_ms's
microseconds, sequence's second LSN is source.lsn, the transaction id is txId and the commit LSN).

JSON: the value is the object sink: stdout prints for the same change, the key the key columns'
JSON; and the formats' refusals."""

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, wait_for  # noqa: E402
from kafka_fixtures import kcat  # noqa: E402
from test_kafka import kafka_section, ksub  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "debezium", "*.json")))
VERSION = open(os.path.join(ROOT, "VERSION")).read().strip()


# --- comparing --------------------------------------------------------------------------------

def substitute(obj, names):
    """obj with every {name} in its strings replaced (keys too)."""
    if isinstance(obj, str):
        for k, v in names.items():
            obj = obj.replace("{" + k + "}", v)
        return obj
    if isinstance(obj, list):
        return [substitute(x, names) for x in obj]
    if isinstance(obj, dict):
        return {substitute(k, names): substitute(v, names) for k, v in obj.items()}
    return obj


class Window:
    """The times a record of this run may carry: from the test's start to now, in ms, µs, ns."""

    def __init__(self):
        self.start = time.time() - 5

    def holds(self, v, scale):
        return isinstance(v, int) and not isinstance(v, bool) and \
            self.start * scale <= v <= (time.time() + 5) * scale


def compare(want, got, path, window, errors):
    """Field-by-field comparison; the <...> matchers check type and format."""
    if isinstance(want, str) and re.fullmatch(r"<[a-z_]+>", want):
        ok = {
            "<ms>": lambda: window.holds(got, 1e3),
            "<us>": lambda: window.holds(got, 1e6),
            "<ns>": lambda: window.holds(got, 1e9),
            "<lsn>": lambda: isinstance(got, int) and got > 0,
            "<xid>": lambda: isinstance(got, int) and got > 0,
            "<sequence>": lambda: isinstance(got, str) and re.fullmatch(r'\["\d+","\d+"\]', got),
            "<txn>": lambda: isinstance(got, str) and re.fullmatch(r"\d+:\d+", got),
            "<uuid>": lambda: isinstance(got, str) and re.fullmatch(
                r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", got),
            "<version>": lambda: got == "cdc-" + VERSION,
        }[want]()
        if not ok:
            errors.append(f"{path}: {got!r} is not {want}")
        return
    if isinstance(want, dict) and isinstance(got, dict):
        if list(want) != list(got):
            errors.append(f"{path}: fields {list(got)}, want {list(want)} (in this order)")
        for k in want:
            if k in got:
                compare(want[k], got[k], f"{path}.{k}", window, errors)
        return
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            errors.append(f"{path}: {len(got)} items, want {len(want)}: {got!r}")
        for i, (w, g) in enumerate(zip(want, got)):
            compare(w, g, f"{path}[{i}]", window, errors)
        return
    if type(want) is not type(got) or want != got:
        errors.append(f"{path}: {got!r}, want {want!r}")


def consistent(value, path, errors):
    """What ties a record's fields together, wherever they are."""
    p = value.get("payload", value) if isinstance(value, dict) else None
    if not isinstance(p, dict):
        return
    for where, obj in (("", p), (".source", p.get("source"))):
        if isinstance(obj, dict) and isinstance(obj.get("ts_us"), int):
            if obj["ts_us"] // 1000 != obj["ts_ms"] or obj["ts_ns"] != obj["ts_us"] * 1000:
                errors.append(f"{path}{where}: ts_ms, ts_us, ts_ns disagree: {obj}")
    src = p.get("source")
    if isinstance(src, dict) and src.get("sequence"):
        seq = json.loads(src["sequence"])
        if src.get("lsn") is not None and seq[1] != str(src["lsn"]):
            errors.append(f"{path}: sequence {seq} does not end at lsn {src['lsn']}")
        txn = p.get("transaction")
        if txn and txn["id"] != f"{src['txId']}:{seq[0]}":
            errors.append(f"{path}: transaction id {txn['id']}, want txId:commit LSN {src['txId']}:{seq[0]}")


def read_topic(kafka, topic, n, describe, timeout=30):
    """The first n records of topic as kcat reads them (waits for them)."""
    msgs = wait_for(lambda: (lambda m: m if len(m) >= n else None)(kcat(kafka.bootstrap, topic)),
                    timeout=timeout, what=f"{n} records on {topic}\n{describe()}")
    return msgs


def decode(m):
    return {"key": None if m["key"] is None else json.loads(m["key"]),
            "value": None if m["value"] is None else json.loads(m["value"]),
            "headers": dict(m["headers"])}


# --- Debezium fixtures -----------------------------------------------------------------------

def run_fixture(pg, schema, cdc, kafka, fx, sub_extra=None, kafka_extra=None, decode_record=decode,
                expected=lambda want, got: want):
    """Runs fixture fx (its setup, its SQL) through cdc into the mock cluster with the fixture's
    subscription (and sub_extra), reads every topic with kcat, decodes each record with
    decode_record and compares it with the fixture's, as expected() makes it for that record: every
    field, and the headers the fixture names (None: absent). Returns the decoded records."""
    names = {"schema": schema}
    window = Window()
    for sql in substitute(fx.get("setup", []), names):
        pg.sql(sql)
    records = substitute(fx["records"], names)
    topics = list(dict.fromkeys(r["topic"] for r in records))
    for t in topics:
        kafka.create_topic(t, 1)
    sub = dict({"name": "dbz", "sink": "kafka", "format": "debezium"},
               **substitute(fx["subscription"], names), **(sub_extra or {}))
    section = kafka_section(kafka, **substitute(fx.get("kafka", {}), names), **(kafka_extra or {}))
    c = cdc(subscriptions=[sub], kafka=section)
    p = c.start()
    for sql in substitute(fx.get("sql", []), names):
        pg.sql(sql)
    got = []
    for t in topics:
        want_n = sum(1 for r in records if r["topic"] == t)
        got += [dict(decode_record(m), topic=t) for m in read_topic(kafka, t, want_n, p.describe)]
    assert p.terminate() == 0, p.describe()
    check_records(records, got, window, expected)
    return got


def check_records(records, got, window, expected=lambda want, got: want):
    """Compares the decoded records got (each with its topic) with a fixture's records, topic by
    topic, as expected() makes each: every field of key and value, what ties a value's fields
    together, and the headers the fixture names (None: absent). One runId in all. Fails with every
    difference. NATS's tests use it too."""
    errors = []
    for t in dict.fromkeys(r["topic"] for r in records):
        mine = [r for r in records if r["topic"] == t]
        theirs = [g for g in got if g["topic"] == t]
        if len(theirs) != len(mine):
            errors.append(f"{t}: {len(theirs)} records, want {len(mine)}")
        for i, (w, g) in enumerate(zip(mine, theirs)):
            where = f"{t}[{i}]"
            w = expected(w, g)
            compare(w["key"], g["key"], where + ".key", window, errors)
            compare(w["value"], g["value"], where + ".value", window, errors)
            consistent(g["value"], where, errors)
            for h, v in w.get("headers", {}).items():
                compare(v, g["headers"].get(h), f"{where}.headers[{h}]", window, errors)
    runs = {g["headers"].get("__debezium.context.runId") for g in got} - {None}
    if len(runs) > 1:
        errors.append(f"one cdc run, {len(runs)} runIds: {runs}")
    assert not errors, "\n".join(errors) + "\n\nrecords:\n" + "\n".join(
        repr({k: g.get(k) for k in ("topic", "key", "value", "headers")}) for g in got)


@pytest.mark.parametrize("path", FIXTURES, ids=[os.path.basename(p)[:-5] for p in FIXTURES])
def test_debezium_fixture(pg, schema, cdc, kafka, path):
    run_fixture(pg, schema, cdc, kafka, json.load(open(path)))


# --- JSON ----------------------------------------------------------------------------------------

def test_json_value_is_the_stdout_object(pg, schema, cdc, kafka, kafka_reader):
    """format: json: each value is the object sink: stdout prints for the same change (read here by
    confluent_kafka, decoded with json.loads), keyed by the key columns' JSON after the change;
    tombstones as for protobuf."""
    pg.sql(f"create table {schema}.t (id int primary key, v text, n numeric(10,2), ts timestamptz, "
           "j jsonb, b bytea)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 2)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[{"name": "out", "tables": [f"{schema}.t"], "sink": "stdout"},
                           ksub("k", [f"{schema}.t"], format="json", tombstones=True)],
            kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 'a', 1.50, '2024-01-02 03:04:05+00', "
           "'{\"x\": [1, 2]}', '\\x01ff'), (2, 'b', null, null, null, null)")
    pg.sql(f"update {schema}.t set id = 3, v = 'c' where id = 1")
    pg.sql(f"delete from {schema}.t where id = 2")
    p.wait_events(4)
    stdout = [e for e in p.raw_events() if e["op"] != "schema"]  # as printed: schema_id included
    msgs = reader.wait(6, describe=p.describe)
    assert p.terminate() == 0, p.describe()

    by_id = {(e["commit_lsn"], e["tx_index"]): e for e in stdout}
    values = [m for m in msgs if not m.is_tombstone]
    assert len(values) == 4
    for m in values:
        got = json.loads(m.value)
        want = dict(by_id[(got["commit_lsn"], got["tx_index"])], subscription="k")
        assert list(got) == list(want) and got == want, (got, want)
        assert m.header("content-type") == "application/json"
        assert m.header("cdc-op") == got["op"]
        assert m.header("cdc-subscription") == "k"
        assert m.header("cdc-schema-id") == got["schema_id"]
        row = got["new"] or got["old"]
        assert json.loads(m.key) == {"id": row["id"]}
    ops = [(json.loads(m.key), None if m.is_tombstone else json.loads(m.value)["op"])
           for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]
    # per key, in order: the tombstone right behind the delete, and for the old key after the update
    assert sorted(ops, key=lambda o: o[0]["id"]) == [
        ({"id": 1}, "insert"), ({"id": 1}, None), ({"id": 2}, "insert"), ({"id": 2}, "delete"),
        ({"id": 2}, None), ({"id": 3}, "update")]


def test_json_transaction_records(pg, schema, cdc, kafka):
    """format: json with kafka.transactions_topic: the transaction's record is JSON too."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic, txns = f"cdc.{schema}.t", f"txns.{schema}"
    for t in (topic, txns):
        kafka.create_topic(t, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="json")],
            kafka=kafka_section(kafka, transactions_topic=txns))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1), (2)")
    events = [decode(m) for m in read_topic(kafka, topic, 2, p.describe)]
    records = [decode(m) for m in read_topic(kafka, txns, 1, p.describe)]
    assert p.terminate() == 0, p.describe()
    e = events[0]["value"]
    assert len(records) == 1
    r = records[0]
    assert r["headers"]["content-type"] == "application/json"
    assert r["value"] == {"xid": e["xid"], "commit_lsn": e["commit_lsn"], "commit_time": e["commit_time"],
                          "events": 2, "tables": [{"schema": schema, "table": "t", "events": 2}]}
    assert r["key"] == e["commit_lsn"]  # the commit LSN as a JSON string


def test_a_debezium_record_as_kcat_reads_it(pg, schema, cdc, kafka):
    """One record, read with kcat from a topic of 4 partitions: the partition Debezium (Kafka
    Connect's Java producer) puts the key {"id":1} in (0), every header in order (cdc's, then
    Debezium's context headers, docs/kafka-formats.md#headers), the key and the value as
    Debezium's documentation shows them ('Change event keys', 'create events')."""
    pg.sql(f"create table {schema}.customers (id int primary key, first_name text)")
    topic = f"dbserver1.{schema}.customers"
    kafka.create_topic(topic, 4)
    bare = f"bare.{schema}.customers"
    kafka.create_topic(bare, 4)
    c = cdc(subscriptions=[ksub("dbz", [f"{schema}.customers"], format="debezium", server_name="dbserver1",
                                topic="dbserver1.{schema}.{table}"),
                           ksub("bare", [f"{schema}.customers"], format="debezium", server_name="dbserver1",
                                topic="bare.{schema}.{table}", context_headers=False)],
            kafka=kafka_section(kafka))
    p = c.start()
    pg.sql(f"insert into {schema}.customers values (1, 'Anne')")
    (m,) = read_topic(kafka, topic, 1, p.describe)
    (b,) = read_topic(kafka, bare, 1, p.describe)
    assert p.terminate() == 0, p.describe()
    # context_headers: false (Debezium's extended.headers.enabled=false): cdc's headers only
    assert [h for h, _ in b["headers"]] == ["cdc-op", "cdc-lsn", "cdc-subscription", "cdc-schema-id",
                                           "cdc-commit-lsn", "cdc-xid", "content-type"]
    assert m["partition"] == 0
    assert m["key"] == b'{"id":1}'
    names = [h for h, _ in m["headers"]]
    assert names == ["cdc-op", "cdc-lsn", "cdc-subscription", "cdc-schema-id", "cdc-commit-lsn", "cdc-xid",
                     "content-type", "__debezium.context.connectorLogicalName", "__debezium.context.taskId",
                     "__debezium.context.connectorName", "__debezium.context.runId"], m["headers"]
    h = dict(m["headers"])
    assert (h["__debezium.context.connectorLogicalName"], h["__debezium.context.taskId"],
            h["__debezium.context.connectorName"]) == ("dbserver1", "0", "postgresql")
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        h["__debezium.context.runId"])
    value = json.loads(m["value"])
    assert list(value) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert (value["before"], value["after"], value["op"]) == (None, {"id": 1, "first_name": "Anne"}, "c")
    assert value["source"]["name"] == "dbserver1" and value["source"]["table"] == "customers"
