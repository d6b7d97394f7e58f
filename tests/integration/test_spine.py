"""test_spine.py: the daemon end to end against a real PostgreSQL: `cdc run` with stdout
subscriptions, asserting the exact events of the contract ("Event JSON"), the replication
behaviours (replica identities, TOAST, DDL, two-phase, streamed transactions, restarts, slot
progress), subscription filters and the command line (exit codes, check-config, --endpos).

Every field that is deterministic is compared exactly; lsn, commit_lsn, xid and commit_time are
checked for format and consistency (check_transactions)."""

import base64
import datetime
import hashlib
import json
import os
import re
import signal
import subprocess
import time

import psycopg2
import psycopg2.errors
import pytest

from conftest import CDC_BIN, LSN_RE, ROOT, wait_for
from pg import lsn_to_int

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
RFC3339_LOCAL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?$")
SEMANTIC = ("subscription", "tag", "op", "schema", "table", "key", "new", "old", "unchanged_toast")
TX_FIELDS = ("lsn", "commit_lsn", "xid", "tx_index", "commit_time")
STDOUT_SUB = "all"


# --- helpers ------------------------------------------------------------------------------------

def sem(e):
    """The deterministic part of an event: what tests compare exactly. Truncate and message events
    also carry their own object ("truncate" / "message"). Checks the event has exactly the
    contract's keys, and that offset and delivery_count, which belong to socket subscriptions,
    are null on stdout (README "Events")."""
    keys = set(SEMANTIC + TX_FIELDS + ("offset", "delivery_count"))
    if e.get("op") in ("truncate", "message"):
        keys.add(e["op"])
    assert set(e) == keys, f"event keys differ: extra {set(e) - keys}, missing {keys - set(e)}: {e}"
    assert e["offset"] is None and e["delivery_count"] is None, e
    out = {k: e[k] for k in SEMANTIC}
    for k in ("truncate", "message"):
        if k in e:
            out[k] = e[k]
    return out


def ev(op, schema, table, key=None, new=None, old=None, toast=(), sub=STDOUT_SUB, tag=None, **extra):
    """An expected event (see sem)."""
    d = {"subscription": sub, "tag": tag, "op": op, "schema": schema, "table": table, "key": key,
         "new": new, "old": old, "unchanged_toast": list(toast)}
    d.update(extra)
    return d


def transactions(events):
    """Groups consecutive events by commit_lsn: [[event, ...], ...] in stream order."""
    txs = []
    for e in events:
        if txs and txs[-1][0]["commit_lsn"] == e["commit_lsn"]:
            txs[-1].append(e)
        else:
            txs.append([e])
    return txs


def check_transactions(events, contiguous=True):
    """Checks lsn/commit_lsn/xid/tx_index/commit_time of transactional events: formats, one
    commit_lsn, xid and commit_time per transaction, tx_index 0..n-1 (contiguous) or increasing
    (a filtered subscription), lsn <= commit_lsn, transactions in increasing commit_lsn order."""
    last_commit = -1
    for tx in transactions(events):
        first = tx[0]
        assert LSN_RE.match(first["commit_lsn"]), first
        commit = lsn_to_int(first["commit_lsn"])
        assert commit > last_commit, f"commit_lsn not increasing at {first}"
        last_commit = commit
        assert isinstance(first["xid"], int) and first["xid"] > 0, first
        assert isinstance(first["commit_time"], str) and RFC3339_UTC.match(first["commit_time"]), first
        ct = datetime.datetime.fromisoformat(first["commit_time"].replace("Z", "+00:00"))
        now = datetime.datetime.now(datetime.timezone.utc)
        assert abs((now - ct).total_seconds()) < 3600, f"commit_time far from now: {first}"
        prev_index = -1
        for i, e in enumerate(tx):
            assert e["xid"] == first["xid"] and e["commit_time"] == first["commit_time"], (first, e)
            assert LSN_RE.match(e["lsn"]), e
            assert lsn_to_int(e["lsn"]) <= commit, f"lsn after commit_lsn: {e}"
            assert isinstance(e["tx_index"], int), e
            if contiguous:
                assert e["tx_index"] == i, f"tx_index {e['tx_index']}, expected {i}: {e}"
            else:
                assert e["tx_index"] > prev_index, e
            prev_index = e["tx_index"]
    return transactions(events)


def of_sub(events, sub=STDOUT_SUB):
    return [e for e in events if e["subscription"] == sub]


def finish(proc, n, timeout=30, sub=None):
    """Waits for n events (of subscription sub, if given), stops cdc with SIGTERM (exit 0 expected)
    and returns every event it wrote."""
    pred = (lambda e: e["subscription"] == sub) if sub else None
    proc.wait_events(n, timeout=timeout, pred=pred)
    rc = proc.terminate()
    assert rc == 0, f"SIGTERM: exit {rc}\n{proc.describe()}"
    return proc.events()


def b64(b):
    return base64.b64encode(b).decode()


def run_cli(*args, timeout=30):
    return subprocess.run([CDC_BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def slot_confirmed(pg, slot):
    rows = pg.sql("select confirmed_flush_lsn::text from pg_replication_slots where slot_name = %s",
                  (slot,))
    return lsn_to_int(rows[0][0]) if rows and rows[0][0] else 0


# --- changes ------------------------------------------------------------------------------------

@pytest.mark.matrix
def test_insert_update_delete(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (1, 'one'), (2, 'two')")
    cur.execute(f"update {schema}.t set v = 'uno' where id = 1")
    cur.execute("commit")
    pg.sql(f"delete from {schema}.t where id = 2")
    events = finish(p, 4)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "v": "one"}),
        ev("insert", schema, "t", {"id": 2}, {"id": 2, "v": "two"}),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "v": "uno"}),
        ev("delete", schema, "t", {"id": 2}, None, {"id": 2}),
    ]
    txs = check_transactions(events)
    assert [len(t) for t in txs] == [3, 1]
    assert txs[0][0]["xid"] != txs[1][0]["xid"]
    conn.close()


@pytest.mark.matrix
def test_truncate_cascade_and_restart_identity(pg, schema, cdc):
    pg.sql(f"create table {schema}.parent (id int primary key)")
    pg.sql(f"create table {schema}.child (id int primary key, pid int references {schema}.parent)")
    pg.sql(f"create table {schema}.seq (id serial primary key)")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.parent values (1)")
    pg.sql(f"insert into {schema}.child values (10, 1)")
    pg.sql(f"truncate {schema}.parent cascade")
    pg.sql(f"truncate {schema}.seq restart identity")
    events = finish(p, 5)
    check_transactions(events)
    assert [sem(e) for e in events[:2]] == [
        ev("insert", schema, "parent", {"id": 1}, {"id": 1}),
        ev("insert", schema, "child", {"id": 10}, {"id": 10, "pid": 1}),
    ]
    # One TRUNCATE of parent with CASCADE: an event per relation, both flagged cascade.
    tr = events[2:4]
    assert tr[0]["commit_lsn"] == tr[1]["commit_lsn"]
    assert sorted((sem(e) for e in tr), key=lambda e: e["table"]) == [
        ev("truncate", schema, "child", truncate={"cascade": True, "restart_identity": False}),
        ev("truncate", schema, "parent", truncate={"cascade": True, "restart_identity": False}),
    ]
    assert sem(events[4]) == ev("truncate", schema, "seq",
                                truncate={"cascade": False, "restart_identity": True})


@pytest.mark.matrix
def test_logical_messages(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start(subscriptions=[
        {"name": "all", "tables": [f"{schema}.*"], "sink": "stdout",
         "operations": ["insert", "message"]}])
    conn = pg.connect()
    cur = conn.cursor()
    # Transactional: delivered in its transaction, at commit, in order with the rows.
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (1)")
    cur.execute("select pg_logical_emit_message(true, 'cdc.test', 'hello'::bytea)")
    cur.execute("commit")
    # Non-transactional, inside a transaction that rolls back: delivered all the same; the
    # transactional one and the row are not.
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (2)")
    cur.execute("select pg_logical_emit_message(true, 'cdc.test', 'rolled back')")
    cur.execute("select pg_logical_emit_message(false, 'cdc.raw', '\\x00ff10'::bytea)")
    cur.execute("rollback")
    pg.sql(f"insert into {schema}.t values (3)")
    # A non-transactional message as the last record before a commit: the transaction's commit_lsn
    # (its commit record's start) is the message's LSN (its record's end); the message's commit_lsn
    # is one less, so (commit_lsn, tx_index) tells them apart.
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (4)")
    cur.execute("select pg_logical_emit_message(false, 'cdc.raw', 'last')")
    cur.execute("commit")
    events = finish(p, 6)
    msg, row4 = events[4], events[5]
    assert (msg["op"], row4["op"], row4["new"]) == ("message", "insert", {"id": 4})
    assert lsn_to_int(msg["commit_lsn"]) == lsn_to_int(msg["lsn"]) - 1 < lsn_to_int(row4["commit_lsn"])
    assert (msg["commit_lsn"], msg["tx_index"]) != (row4["commit_lsn"], row4["tx_index"])
    events = events[:4]
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1}),
        ev("message", "", "", message={"prefix": "cdc.test", "content": b64(b"hello"),
                                       "transactional": True}),
        ev("message", "", "", message={"prefix": "cdc.raw", "content": b64(b"\x00\xff\x10"),
                                       "transactional": False}),
        ev("insert", schema, "t", {"id": 3}, {"id": 3}),
    ]
    check_transactions(events[:2])
    check_transactions(events[3:])
    assert LSN_RE.match(events[2]["lsn"])
    assert lsn_to_int(events[1]["commit_lsn"]) < lsn_to_int(events[2]["lsn"]) < \
        lsn_to_int(events[3]["lsn"])
    conn.close()


# --- values -------------------------------------------------------------------------------------

TYPES_DDL = """
create type {s}.mood as enum ('sad', 'happy');
create table {s}.v (
  id int primary key,
  i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, num numeric, b bool,
  t text, vc varchar(20), ch char(5), by bytea, u uuid,
  d date, tm time, ts timestamp, tstz timestamptz,
  j json, jb jsonb, arr int[], tarr text[], iv interval, m {s}.mood
)"""

TEXT = 'h\u00e9llo "q" \\ back\nslash\ttab \u2603 \U0001F600'


@pytest.mark.matrix
def test_value_types(pg, schema, cdc):
    for stmt in TYPES_DDL.format(s=schema).split(";"):
        pg.sql(stmt)
    c, p = cdc.start()
    pg.sql(
        f"insert into {schema}.v values (1, -32768, 2147483647, 9223372036854775807, 1.5, 0.1, "
        "'12345678901234567890.000123', true, %s, 'var', 'ab', '\\x00ff10', "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', '13:45:06.5', "
        "'2024-02-29 13:45:06.123456', '2024-02-29 13:45:06.123456+02', "
        "'{\"a\": [1, 2.5, {\"b\": null}], \"s\": \"x\"}', '{\"k\": true, \"n\": [\"y\"]}', "
        "'{1,2,3}', '{\"a b\",c,NULL}', '1 day 02:03:04', 'happy')", (TEXT,))
    pg.sql(f"insert into {schema}.v (id) values (2)")
    pg.sql(f"insert into {schema}.v (id, i8, f4, f8, num, b, by, j, tstz, d) values "
           "(3, -9223372036854775808, 'NaN', 'Infinity', 'NaN', false, '', '[1, \"two\"]', "
           "'1999-12-31 23:59:59+00', '0001-01-01')")
    pg.sql(f"insert into {schema}.v (id, f4, f8) values (4, '-Infinity', -2.5e-300)")
    events = finish(p, 4)
    check_transactions(events)
    news = [e["new"] for e in events]
    for e in events:
        assert e["op"] == "insert" and e["old"] is None and e["unchanged_toast"] == []
        assert e["key"] == {"id": e["new"]["id"]}

    # Row 1: every type with a value.
    r = dict(news[0])
    # Time-like values: RFC 3339 text, compared as values (fraction digits may vary).
    assert RFC3339_LOCAL.match(r["ts"]), r["ts"]
    assert datetime.datetime.fromisoformat(r.pop("ts")) == \
        datetime.datetime(2024, 2, 29, 13, 45, 6, 123456)
    assert RFC3339_UTC.match(r["tstz"]), r["tstz"]
    assert datetime.datetime.fromisoformat(r.pop("tstz").replace("Z", "+00:00")) == \
        datetime.datetime(2024, 2, 29, 11, 45, 6, 123456, tzinfo=datetime.timezone.utc)
    assert re.match(r"^\d\d:\d\d:\d\d(\.\d{1,6})?$", r["tm"]), r["tm"]
    assert datetime.time.fromisoformat(r.pop("tm")) == datetime.time(13, 45, 6, 500000)
    assert r == {
        "id": 1, "i2": -32768, "i4": 2147483647, "i8": 9223372036854775807, "f4": 1.5, "f8": 0.1,
        "num": "12345678901234567890.000123", "b": True, "t": TEXT, "vc": "var", "ch": "ab   ",
        "by": b64(b"\x00\xff\x10"), "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "d": "2024-02-29", "j": {"a": [1, 2.5, {"b": None}], "s": "x"},
        "jb": {"k": True, "n": ["y"]}, "arr": "{1,2,3}", "tarr": '{"a b",c,NULL}',
        "iv": "1 day 02:03:04", "m": "happy",
    }
    # Raw JSON text: integers stay integers (no 9.223372036854776e18), text is valid UTF-8 JSON.
    line = next(x for x in p.stdout_text().splitlines() if '"op":"insert"' in x)  # after the schema event
    assert '9223372036854775807' in line

    # Row 2: NULLs are JSON null, every column present.
    assert news[1] == {k: (2 if k == "id" else None) for k in news[0]}

    # Rows 3 and 4: special floats as strings, numeric NaN, extremes.
    r3 = news[2]
    assert (r3["i8"], r3["f4"], r3["f8"], r3["num"], r3["b"], r3["by"], r3["j"], r3["d"]) == \
        (-9223372036854775808, "NaN", "Infinity", "NaN", False, "", [1, "two"], "0001-01-01")
    assert datetime.datetime.fromisoformat(r3["tstz"].replace("Z", "+00:00")) == \
        datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)
    assert (news[3]["f4"], news[3]["f8"]) == ("-Infinity", -2.5e-300)


# --- replica identity ---------------------------------------------------------------------------

def test_replica_identity_default(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values (1, 'a')")
    pg.sql(f"update {schema}.t set v = 'b' where id = 1")        # key unchanged: no old row
    pg.sql(f"update {schema}.t set id = 2, v = 'c' where id = 1")  # key changed: old key
    pg.sql(f"delete from {schema}.t where id = 2")
    events = finish(p, 4)
    check_transactions(events)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "v": "a"}),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "v": "b"}, None),
        ev("update", schema, "t", {"id": 1}, {"id": 2, "v": "c"}, {"id": 1}),
        ev("delete", schema, "t", {"id": 2}, None, {"id": 2}),
    ]


@pytest.mark.matrix
def test_replica_identity_full(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text, n int)")
    pg.sql(f"alter table {schema}.t replica identity full")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values (1, 'a', 10)")
    pg.sql(f"update {schema}.t set v = 'b' where id = 1")
    pg.sql(f"delete from {schema}.t where id = 1")
    events = finish(p, 3)
    check_transactions(events)
    # FULL sends the whole old row; the key is still the primary key (cdc looks it up), so a row
    # keeps its Kafka key and partition when other columns change.
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "v": "a", "n": 10}),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "v": "b", "n": 10}, {"id": 1, "v": "a", "n": 10}),
        ev("delete", schema, "t", {"id": 1}, None, {"id": 1, "v": "b", "n": 10}),
    ]


def test_replica_identity_full_without_primary_key(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (v text, n int)")
    pg.sql(f"alter table {schema}.t replica identity full")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values ('a', 10)")
    pg.sql(f"update {schema}.t set n = 11")
    events = finish(p, 2)
    # No primary key: the whole row identifies it, as the server says.
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"v": "a", "n": 10}, {"v": "a", "n": 10}),
        ev("update", schema, "t", {"v": "a", "n": 10}, {"v": "a", "n": 11}, {"v": "a", "n": 10}),
    ]


def test_replica_identity_nothing(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int, v text)")
    pg.sql(f"alter table {schema}.t replica identity nothing")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values (1, 'a')")
    # The server refuses updates and deletes of a published table without a replica identity.
    with pytest.raises(psycopg2.errors.ObjectNotInPrerequisiteState):
        pg.sql(f"update {schema}.t set v = 'b'")
    with pytest.raises(psycopg2.errors.ObjectNotInPrerequisiteState):
        pg.sql(f"delete from {schema}.t")
    pg.sql(f"insert into {schema}.t values (2, 'b')")
    events = finish(p, 2)
    check_transactions(events)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", None, {"id": 1, "v": "a"}),
        ev("insert", schema, "t", None, {"id": 2, "v": "b"}),
    ]


def test_replica_identity_using_index(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, email text not null, v text)")
    pg.sql(f"create unique index t_email on {schema}.t (email)")
    pg.sql(f"alter table {schema}.t replica identity using index t_email")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values (1, 'a@x', 'v1')")
    pg.sql(f"update {schema}.t set v = 'v2' where id = 1")
    pg.sql(f"update {schema}.t set email = 'b@x' where id = 1")
    pg.sql(f"delete from {schema}.t where id = 1")
    events = finish(p, 4)
    check_transactions(events)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"email": "a@x"}, {"id": 1, "email": "a@x", "v": "v1"}),
        ev("update", schema, "t", {"email": "a@x"}, {"id": 1, "email": "a@x", "v": "v2"}),
        ev("update", schema, "t", {"email": "a@x"}, {"id": 1, "email": "b@x", "v": "v2"},
           {"email": "a@x"}),
        ev("delete", schema, "t", {"email": "b@x"}, None, {"email": "b@x"}),
    ]


@pytest.mark.matrix
def test_unchanged_toast(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, big text, n int)")
    pg.sql(f"alter table {schema}.t alter column big set storage external")  # stored out of line
    c, p = cdc.start()
    # ~128 kB of random hex: far over the TOAST threshold.
    pg.sql(f"insert into {schema}.t select 1, string_agg(md5(random()::text), '') , 1 "
           "from generate_series(1, 4000)")
    big = pg.sql(f"select big from {schema}.t where id = 1")[0][0]
    assert len(big) == 128000
    pg.sql(f"update {schema}.t set n = 2 where id = 1")
    pg.sql(f"update {schema}.t set big = 'small now', n = 3 where id = 1")
    events = finish(p, 3)
    check_transactions(events)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "big": big, "n": 1}),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "n": 2}, toast=["big"]),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "big": "small now", "n": 3}),
    ]


def test_add_and_drop_column_mid_stream(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, a text, b int)")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t values (1, 'x', 10)")
    pg.sql(f"alter table {schema}.t add column c int default 5")
    pg.sql(f"insert into {schema}.t values (2, 'y', 20, 7)")
    pg.sql(f"alter table {schema}.t drop column a")
    pg.sql(f"insert into {schema}.t values (3, 30, 8)")
    pg.sql(f"update {schema}.t set b = 11 where id = 1")
    events = finish(p, 4)
    check_transactions(events)
    assert [sem(e) for e in events] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "a": "x", "b": 10}),
        ev("insert", schema, "t", {"id": 2}, {"id": 2, "a": "y", "b": 20, "c": 7}),
        ev("insert", schema, "t", {"id": 3}, {"id": 3, "b": 30, "c": 8}),
        ev("update", schema, "t", {"id": 1}, {"id": 1, "b": 11, "c": 5}),
    ]


# --- transactions -------------------------------------------------------------------------------

@pytest.mark.matrix
def test_two_phase(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    conn = pg.connect()
    cur = conn.cursor()
    gid1, gid2 = f"{schema}_g1", f"{schema}_g2"
    try:
        cur.execute("begin")
        cur.execute(f"insert into {schema}.t values (1), (2)")
        cur.execute(f"prepare transaction '{gid1}'")
        cur.execute("begin")
        cur.execute(f"insert into {schema}.t values (3)")
        cur.execute(f"prepare transaction '{gid2}'")
        # A later transaction commits first: it arrives while both are still only prepared.
        pg.sql(f"insert into {schema}.t values (100)")
        first = p.wait_events(1)
        assert [e["new"] for e in first] == [{"id": 100}]
        pg.sql(f"rollback prepared '{gid2}'")
        pg.sql(f"commit prepared '{gid1}'")
        pg.sql(f"insert into {schema}.t values (101)")
    finally:
        for g in (gid1, gid2):
            if pg.sql("select 1 from pg_prepared_xacts where gid = %s", (g,)):
                pg.sql(f"rollback prepared '{g}'")
        conn.close()
    events = finish(p, 4)
    assert [e["new"] for e in events] == [{"id": 100}, {"id": 1}, {"id": 2}, {"id": 101}]
    assert [sem(e) for e in events[1:3]] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1}),
        ev("insert", schema, "t", {"id": 2}, {"id": 2}),
    ]
    txs = check_transactions(events)
    assert [len(t) for t in txs] == [1, 2, 1]
    # The prepared transaction is placed at its COMMIT PREPARED: after 100's commit, before 101's.
    assert lsn_to_int(txs[0][0]["commit_lsn"]) < lsn_to_int(txs[1][0]["commit_lsn"]) < \
        lsn_to_int(txs[2][0]["commit_lsn"])


@pytest.mark.matrix
def test_streamed_transaction_committed(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    n = 20000  # far over logical_decoding_work_mem=64kB: the server streams it in chunks
    pg.sql(f"insert into {schema}.t select g, md5(g::text) from generate_series(1, {n}) g")
    pg.sql(f"insert into {schema}.t values (0, 'after')")
    events = finish(p, n + 1, timeout=60)
    assert len(events) == n + 1
    txs = check_transactions(events)
    assert [len(t) for t in txs] == [n, 1]
    for i, e in enumerate(txs[0]):
        g = i + 1
        assert e["op"] == "insert" and e["table"] == "t" and e["key"] == {"id": g}
        assert e["new"] == {"id": g, "v": hashlib.md5(str(g).encode()).hexdigest()}, e
    assert txs[1][0]["new"] == {"id": 0, "v": "after"}


@pytest.mark.matrix
@pytest.mark.parametrize("while_down", [False, True], ids=["streaming", "while_cdc_was_down"])
def test_streamed_transaction_aborted(pg, schema, cdc, while_down):
    """A transaction past logical_decoding_work_mem that aborts, while cdc streams it or while cdc
    is down: none of it is delivered, and the stream goes on. (Decoding it again after cdc was
    down, the server may find it aborted: PostgreSQL 18 drops it unstreamed, older ones stream it
    and send its abort; a Stream Abort with no Stream Start before it is test_txn's case.)"""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c = cdc()
    p = c.start()
    if while_down:
        assert p.terminate() == 0
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t select g, md5(g::text) from generate_series(1, 20000) g")
    cur.execute("rollback")
    conn.close()
    pg.sql(f"insert into {schema}.t values (0, 'after')")
    if while_down:
        p = c.start()
    events = finish(p, 1)
    assert [sem(e) for e in events] == [ev("insert", schema, "t", {"id": 0}, {"id": 0, "v": "after"})]
    check_transactions(events)


@pytest.mark.matrix
def test_streamed_transaction_with_rollback_to_savepoint(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t select g, 'a' from generate_series(1, 4000) g")
    cur.execute("savepoint s1")
    cur.execute(f"insert into {schema}.t select g, 'b' from generate_series(4001, 8000) g")
    cur.execute("rollback to savepoint s1")
    cur.execute(f"insert into {schema}.t select g, 'c' from generate_series(8001, 12000) g")
    cur.execute("savepoint s2")
    cur.execute(f"insert into {schema}.t select g, 'd' from generate_series(12001, 14000) g")
    cur.execute("release savepoint s2")
    cur.execute("commit")
    conn.close()
    pg.sql(f"insert into {schema}.t values (0, 'after')")
    expected = [(g, "a") for g in range(1, 4001)] + [(g, "c") for g in range(8001, 12001)] + \
        [(g, "d") for g in range(12001, 14001)] + [(0, "after")]
    events = finish(p, len(expected), timeout=60)
    assert [(e["new"]["id"], e["new"]["v"]) for e in events] == expected
    txs = check_transactions(events)
    assert [len(t) for t in txs] == [10000, 1]


# --- restarts and slot progress -----------------------------------------------------------------

def test_kill9_mid_stream_then_restart_loses_nothing(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c = cdc()
    p1 = c.start()
    committed = set()
    next_id = 1

    def write_batches(count, rows):
        nonlocal next_id
        for _ in range(count):
            pg.sql(f"insert into {schema}.t select g, 'x' from generate_series(%s, %s) g",
                   (next_id, next_id + rows - 1))
            committed.update(range(next_id, next_id + rows))
            next_id += rows

    write_batches(100, 20)
    write_batches(1, 15000)  # a streamed one
    write_batches(100, 20)
    p1.wait_events(200, timeout=60)
    p1.kill()
    # Written while cdc is down; and an aborted one that must not appear.
    write_batches(50, 20)
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t select g, 'x' from generate_series(1000000, 1005000) g")
    cur.execute("rollback")
    conn.close()
    p2 = c.start()
    write_batches(50, 20)
    p2.wait_events(1, pred=lambda e: e["new"]["id"] == next_id - 1, timeout=60)
    assert p2.terminate() == 0, p2.describe()

    seen = {}
    for proc in (p1, p2):
        for e in proc.events():
            k = (e["commit_lsn"], e["tx_index"])
            if k in seen:
                assert sem(seen[k]) == sem(e) and seen[k]["lsn"] == e["lsn"], (seen[k], e)
            seen[k] = e
    ids = [e["new"]["id"] for e in seen.values()]
    assert len(ids) == len(set(ids)), "two different (commit_lsn, tx_index) for one row"
    assert set(ids) == committed, (f"missing {sorted(committed - set(ids))[:20]}, "
                                   f"unexpected {sorted(set(ids) - committed)[:20]}")
    check_transactions(sorted(seen.values(), key=lambda e: (lsn_to_int(e["commit_lsn"]),
                                                            e["tx_index"])))


def test_idle_slot_advances(pg, schema, cdc):
    pg.sql(f"create table {schema}.pub (id int primary key)")
    pg.sql(f"create table {schema}.unpub (id int primary key)")
    c = cdc(publish=[f"{schema}.pub"],
            subscriptions=[{"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"}])
    p = c.start()
    # Nothing written: the slot catches up with the server's WAL position all the same.
    target = lsn_to_int(pg.current_wal_lsn())
    wait_for(lambda: slot_confirmed(pg, c.slot) >= target, timeout=15,
             what=f"confirmed_flush_lsn >= {pg.current_wal_lsn()} while idle\n{p.describe()}")
    # Writes to a table the publication does not hold: no events, and the slot moves past them.
    for i in range(20):
        pg.sql(f"insert into {schema}.unpub select g from generate_series(%s, %s) g",
               (i * 100, i * 100 + 99))
    target = lsn_to_int(pg.current_wal_lsn())
    wait_for(lambda: slot_confirmed(pg, c.slot) >= target, timeout=15,
             what=f"confirmed_flush_lsn to pass unpublished writes\n{p.describe()}")
    assert p.terminate() == 0, p.describe()
    assert p.events() == []


def wal_segments(server):
    return server.sql("select count(*) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'")[0][0]


@pytest.mark.parametrize("heartbeat", ["1s", None])
def test_heartbeat_lets_a_quiet_server_remove_old_wal(tmp_path, heartbeat):
    """A server where nothing else writes (one of its own, so no other test's slot holds WAL): the
    WAL moves to a new segment and a checkpoint runs every 1.5 s, as archive_timeout would make it.
    cdc's heartbeat is a transactional logical message: the checkpoints remove the old segments.
    Without one the slot's restart_lsn still follows, but the server does not recompute the
    position its slots need, and every old segment stays (PeerDB #3904 saw the same with a
    non-transactional heartbeat; measured on PostgreSQL 18: 21 segments after 20 cycles, 4 with the
    heartbeat). The case without a heartbeat asserts the server's side, so that this test shows what
    it guards."""
    from conftest import CdcProcess, to_yaml
    from pg import TempPostgres
    with TempPostgres() as server:
        server.sql("create table quiet (id int primary key)")
        source = {"dsn": server.dsn, "slot": "quiet", "publication": "quiet", "create": True,
                  "publish": ["public.quiet"], "status_interval": "500ms"}
        if heartbeat:
            source["heartbeat"] = heartbeat
        cfg = tmp_path / "cdc.yaml"
        cfg.write_text(to_yaml({"source": source, "state_dir": str(tmp_path / "state"),
                                "status": {"socket": str(tmp_path / "status.sock")},
                                "subscriptions": [{"name": "all", "tables": ["public.quiet"], "sink": "stdout"}]}))
        p = CdcProcess([CDC_BIN, "run", "-c", str(cfg)], str(tmp_path / "out"), str(tmp_path / "err"))
        try:
            wait_for(lambda: (server.sql("select active from pg_replication_slots") or [[False]])[0][0], 30,
                     what=f"cdc to stream\n{p.describe()}")
            for _ in range(6):
                time.sleep(1.5)
                server.sql("select pg_switch_wal()")
                server.sql("checkpoint")
            segments = wal_segments(server)
            held = server.sql("select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) from pg_replication_slots")
            assert held[0][0] < 32 << 20, held  # the slot itself holds about one segment
            if heartbeat:
                assert segments <= 5, f"{segments} WAL segments kept\n{p.describe()}"
                assert "heartbeat failed" not in p.stderr(), p.describe()
            else:
                assert segments >= 6, segments
            assert p.terminate() == 0, p.describe()
        finally:
            p.close()


def test_endpos_delivers_up_to_lsn_and_confirms(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p0 = c.start()  # creates slot and publication
    assert p0.terminate() == 0, p0.describe()
    pg.sql(f"insert into {schema}.t values (1)")
    pg.sql(f"insert into {schema}.t values (2), (3)")
    endpos = pg.current_wal_lsn()
    pg.sql(f"insert into {schema}.t values (4)")
    p1 = c.run(endpos=endpos)
    assert p1.wait_exit(60) == 0, p1.describe()
    assert [e["new"] for e in p1.events()] == [{"id": 1}, {"id": 2}, {"id": 3}]
    check_transactions(p1.events())
    # Confirmed past the last commit it delivered (the commit record's end).
    last = lsn_to_int(p1.events()[-1]["commit_lsn"])
    wait_for(lambda: slot_confirmed(pg, c.slot) > last, timeout=10,
             what="the slot to be confirmed past the last commit delivered")
    # The next run starts after what the first confirmed.
    p2 = c.start()
    events = finish(p2, 1)
    assert [e["new"] for e in events] == [{"id": 4}]


def test_a_backlog_over_the_unix_socket_arrives_whole_and_a_live_change_after_it_at_once(pg, schema, cdc):
    """Over the server's Unix socket (host=DIR), whose readiness ignores SO_RCVLOWAT, a backlog is
    read on a 60 us timer rather than as each message lands. 3,000 single-row transactions more
    than a second old and a streamed 20,000-row one, then a live insert: every event once and in
    order, the backlog counted, and the live insert after it (a read that brings nothing ends the
    timer)."""
    from test_status import get
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c = cdc(source={"dsn": f"host={pg.sockdir} port={pg.port} dbname=postgres user=postgres"})
    p = c.start()  # creates slot and publication
    assert p.terminate() == 0, p.describe()
    pg.sql(f"do $$ begin for i in 1..3000 loop insert into {schema}.t values (i, 'small'); commit; "
           "end loop; end $$")
    n = 20000  # far over logical_decoding_work_mem=64kB: the server streams it in chunks
    pg.sql(f"insert into {schema}.t select g, md5(g::text) from generate_series(3001, 3000 + {n}) g")
    time.sleep(1.5)  # its commits are a backlog now: more than a second old when read
    p = c.start()
    p.wait_events(3000 + n, timeout=60)
    (unix,) = pg.sql("select a.client_addr is null from pg_replication_slots s "
                     "join pg_stat_activity a on a.pid = s.active_pid where s.slot_name = %s", (c.slot,))[0]
    assert unix, "the replication connection is not over the Unix socket"
    wait_for(lambda: json.loads(get(c, "/status")[1])["source"]["backlog_reads"] >= 1, 10,
             what="the backlog counted (figures are published every second)")
    pg.sql(f"insert into {schema}.t values (0, 'live')")
    events = finish(p, 3000 + n + 1)
    txs = check_transactions(events)
    assert [len(t) for t in txs] == [1] * 3000 + [n, 1]
    assert [e["key"]["id"] for e in events] == list(range(1, 3001 + n)) + [0]
    assert events[-1]["new"] == {"id": 0, "v": "live"}


@pytest.mark.matrix
def test_restart_where_a_commit_ends_at_the_next_change(pg, schema, cdc, kafka, kafka_reader):
    """Transaction B's first change starts exactly where transaction A's commit record ends (its
    end LSN, what cdc confirms), and cdc stops exactly between them: --endpos at A's end. Debezium
    lost B on restart through a false match there (it took B's first change, at the stored
    position, for one it had delivered; noticed with PostgreSQL 17). cdc confirms A's end, the
    server sends again every transaction whose commit record starts at or after it, and cdc's own
    skips (the socket spool's, exactly once's) compare commit LSNs, never a change's LSN with a
    commit's end: B comes on every sink, once. The test asserts the positions meet (a test_decoding
    slot shows A's COMMIT and B's BEGIN and first change at one LSN) and that the slot holds
    exactly that position between the runs."""
    from subscriber_helpers import Subscriber
    from test_kafka import kafka_section, ksub
    from kafka_fixtures import row_plain
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[{"name": "out", "tables": [f"{schema}.t"], "sink": "stdout"},
                           {"name": "s", "tables": [f"{schema}.t"], "sink": "socket"},
                           ksub("k", [f"{schema}.t"])],
            kafka=kafka_section(kafka, exactly_once=True))
    p0 = c.start()  # creates the slot and the publication, and delivers a first row
    pg.sql(f"insert into {schema}.t values (0)")
    reader.wait(1, describe=p0.describe)
    assert p0.terminate() == 0, p0.describe()
    helper = f"h_{c.slot}"
    pg.sql("select pg_create_logical_replication_slot(%s, 'test_decoding')", (helper,))
    try:
        # Rarely the positions do not meet: A's commit ends where a WAL page starts (B's change then
        # follows the page's header; seen once), or another commit comes between. Then another
        # pair, up to 5.
        for k in range(5):
            a, b = 2 * k + 1, 2 * k + 2
            pg.sql(f"insert into {schema}.t values ({a})")  # A
            a_end = pg.current_wal_lsn()
            pg.sql(f"insert into {schema}.t values ({b})")  # B, right after it
            # The WAL is flushed a moment later (synchronous_commit=off), and only flushed WAL
            # decodes. The rows of A's and B's transactions, whatever else the database committed
            # meanwhile: whether it came between them, the LSNs below tell.
            def a_and_b():
                r = pg.sql("select lsn::text, xid::text, data from pg_logical_slot_peek_changes(%s, NULL, NULL)",
                           (helper,))
                mine = {x for _, x, d in r if d in (f"table {schema}.t: INSERT: id[integer]:{a}",
                                                    f"table {schema}.t: INSERT: id[integer]:{b}")}
                r = [(lsn, d) for lsn, x, d in r if x in mine]
                return len(r) == 6 and r
            rows = wait_for(a_and_b, what="A and B decoded by the test_decoding slot")
            (a_commit, a_data), (b_begin, b_data), (b_change, _) = rows[2], rows[3], rows[4]
            assert a_data.startswith("COMMIT") and b_data.startswith("BEGIN"), rows
            if a_commit == b_begin == b_change == a_end:
                break
        assert a_commit == b_begin == b_change == a_end, rows
    finally:
        pg.sql("select pg_drop_replication_slot(%s)", (helper,))
    p1 = c.run(endpos=a_end)
    assert p1.wait_exit(60) == 0, p1.describe()
    assert [e["new"]["id"] for e in p1.events()] == list(range(1, a + 1))
    assert c.slot_row()[1] == a_end, "the restart is not exactly between A and B"
    p2 = c.start()
    p2.wait_events(1)
    with Subscriber(c.config["subscribers"]["socket"], "s", start="earliest") as sub:
        got = [e for d in sub.deliveries(2) for e in d if e.HasField("new_row")]
    assert [row_plain(e.new_row)["id"] for e in got] == list(range(b + 1))
    reader.wait(b + 1, describe=p2.describe)
    assert [e["new"]["id"] for e in finish(p2, 1)] == [b]
    assert sorted(row_plain(m.event.new_row)["id"] for m in reader.snapshot()) == list(range(b + 1))


# --- subscriptions ------------------------------------------------------------------------------

@pytest.mark.matrix
def test_filter_by_table_glob(pg, schema, cdc):
    for t in ("orders_a", "orders_b", "other", "xorders_c"):
        pg.sql(f"create table {schema}.{t} (id int primary key)")
    c, p = cdc.start(subscriptions=[
        {"name": "orders", "tables": [f"{schema}.orders_*"], "sink": "stdout", "tag": "o"},
        {"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"},
    ])
    for t in ("orders_a", "other", "orders_b", "xorders_c"):
        pg.sql(f"insert into {schema}.{t} values (1)")
    events = finish(p, 4, sub="all")
    assert [sem(e) for e in of_sub(events, "orders")] == [
        ev("insert", schema, "orders_a", {"id": 1}, {"id": 1}, sub="orders", tag="o"),
        ev("insert", schema, "orders_b", {"id": 1}, {"id": 1}, sub="orders", tag="o"),
    ]
    assert [e["table"] for e in of_sub(events, "all")] == ["orders_a", "other", "orders_b",
                                                           "xorders_c"]
    check_transactions(of_sub(events, "all"))
    check_transactions(of_sub(events, "orders"))
    assert len(events) == 6


def test_filter_by_operations(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v int)")
    c, p = cdc.start(subscriptions=[
        {"name": "ins_del", "tables": [f"{schema}.t"], "operations": ["insert", "delete"],
         "sink": "stdout"},
        {"name": "all", "tables": [f"{schema}.t"],
         "operations": ["insert", "update", "delete", "truncate"], "sink": "stdout"},
    ])
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t values (1, 1)")
    cur.execute(f"update {schema}.t set v = 2")
    cur.execute(f"delete from {schema}.t")
    cur.execute("commit")
    conn.close()
    pg.sql(f"truncate {schema}.t")
    events = finish(p, 4, sub="all")
    assert [e["op"] for e in of_sub(events, "all")] == ["insert", "update", "delete", "truncate"]
    ins_del = of_sub(events, "ins_del")
    assert [sem(e) for e in ins_del] == [
        ev("insert", schema, "t", {"id": 1}, {"id": 1, "v": 1}, sub="ins_del"),
        ev("delete", schema, "t", {"id": 1}, None, {"id": 1}, sub="ins_del"),
    ]
    # tx_index counts the transaction's changes, so the filtered view skips the update's.
    assert [e["tx_index"] for e in ins_del] == [0, 2]
    check_transactions(ins_del, contiguous=False)
    check_transactions(of_sub(events, "all")[:3])


# --- command line -------------------------------------------------------------------------------

def test_help_and_version():
    with open(os.path.join(ROOT, "VERSION")) as f:
        version = f.read().strip()
    r = run_cli("--version")
    assert r.returncode == 0 and version in r.stdout, r
    r = run_cli("--help")
    assert r.returncode == 0, r
    for word in ("run", "check-config"):
        assert word in r.stdout, r.stdout
    for cmd in ("run", "check-config"):
        r = run_cli(cmd, "--help")
        assert r.returncode == 0 and "-c" in r.stdout, r
    r = run_cli("no-such-command")
    assert r.returncode == 2, r
    r = run_cli("run", "--no-such-option")
    assert r.returncode == 2, r
    for cmd in ("run", "check-config", "doctor"):  # the commands that need a configuration file
        r = run_cli(cmd)
        assert r.returncode == 2 and r.stderr.split("\n")[0].endswith(": missing -c FILE"), r


BAD_CONFIG = """\
source:
  dsn: "host=localhost"
  slott: cdc_slot
subscriptions:
  - name: a
    tables: ["public.t"]
    operations: [insert, explode]
    sink: stdout
"""


def test_check_config_reports_file_line_col(tmp_path):
    path = str(tmp_path / "bad.yaml")
    with open(path, "w") as f:
        f.write(BAD_CONFIG)
    r = run_cli("check-config", "-c", path)
    assert r.returncode == 2, r
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith(path + ":")]
    assert any(ln.startswith(f"{path}:3:3: ") for ln in lines), r    # unknown key "slott"
    assert any(ln.startswith(f"{path}:7:26: ") for ln in lines), r   # unknown operation
    for ln in lines:
        assert re.match(re.escape(path) + r":\d+:\d+: \S", ln), ln

    with open(path, "w") as f:
        f.write("source:\n  dsn: [unclosed\n")
    r = run_cli("check-config", "-c", path)
    assert r.returncode == 2, r
    assert re.search("^" + re.escape(path) + r":\d+:\d+: ", r.stdout + r.stderr, re.M), r

    r = run_cli("check-config", "-c", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2, r


def test_check_config_prints_effective_config(tmp_path):
    path = str(tmp_path / "good.yaml")
    with open(path, "w") as f:
        f.write('source:\n  dsn: "host=db password=hunter2"\n  slot: s1\n'
                'subscriptions:\n  - name: a\n    tables: ["public.*"]\n    sink: stdout\n')
    r = run_cli("check-config", "-c", path)
    assert r.returncode == 0, r
    assert "s1" in r.stdout and "public.*" in r.stdout, r.stdout
    assert "hunter2" not in r.stdout + r.stderr


def test_slot_with_another_plugin_is_refused(pg, schema, cdc):
    c = cdc()
    pg.sql("select pg_create_logical_replication_slot(%s, 'test_decoding')", (c.slot,))
    p = c.run()
    assert p.wait_exit(60) == 1, p.describe()
    assert "test_decoding" in p.stderr(), p.describe()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_gracefully(pg, schema, cdc, sig):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    pg.sql(f"insert into {schema}.t select generate_series(1, 100)")
    p.wait_events(100)
    p.signal(sig)
    assert p.wait_exit(30) == 0, p.describe()
    assert len(p.events()) == 100
    # The final flushed position is reported (last log lines), past the last commit delivered,
    # and the slot is confirmed that far (the walsender may take a moment to process the final
    # status update after cdc exits).
    last = lsn_to_int(p.events()[-1]["commit_lsn"])
    tail = "\n".join(p.stderr().splitlines()[-3:])
    reported = [lsn_to_int(x) for x in re.findall(r"\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b", tail)]
    assert reported and max(reported) > last, p.describe()
    wait_for(lambda: slot_confirmed(pg, c.slot) > last, timeout=10,
             what="the slot to be confirmed past the last commit delivered")
