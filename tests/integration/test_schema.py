"""test_schema.py: schema events and DDL events (README "Schema events", "DDL events") against a
real PostgreSQL: ALTER TABLE ... ADD COLUMN, RENAME COLUMN, ALTER COLUMN TYPE and DROP COLUMN run
while a writer inserts, and in every sink (stdout, the socket read by `cdc tail` and by the Python
client, Kafka through the mock broker) each row follows the schema event it names and has its
columns and types, and a rename is told as a rename; the types as PostgreSQL's format_type prints
them; DDL capture refused without a superuser, with what to run, and working once it was run."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import CDC_BIN, wait_for
from pg import find_bindir
from schema_check import SchemaCheck
from test_kafka import kafka_section, ksub

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "proto", "clients", "python"))
from cdc_client import Consumer  # noqa: E402


@pytest.fixture
def ddl_trigger(pg):
    """cdc's event trigger is database-wide and outlives cdc: dropped after the test, so that other
    tests' DDL writes no messages (README "DDL events": how to remove it)."""
    yield
    pg.sql("drop event trigger if exists cdc_ddl_command_end")
    pg.sql("drop event trigger if exists cdc_sql_drop")
    pg.sql("drop schema if exists cdc cascade")


def numeric_scale(type_text):
    m = re.fullmatch(r"numeric\((\d+),(-?\d+)\)", type_text)
    return int(m.group(2)) if m else None


def check_values(row, schema_event):
    """The row's values have the JSON form of their schema's types: integers for integer and
    bigint, text for text, numeric(p,s) as a string with exactly s decimals."""
    types = {c["name"]: c["type"] for c in schema_event["table_schema"]["columns"]}
    for name, v in (row.get("new") or {}).items():
        t = types[name]
        if v is None:
            continue
        if t in ("integer", "bigint"):
            assert isinstance(v, int), (name, t, row)
        elif t == "text":
            assert isinstance(v, str), (name, t, row)
        elif numeric_scale(t) is not None:
            assert isinstance(v, str) and len(v.partition(".")[2]) == numeric_scale(t), (name, t, row)


def check_stream(events, sub, n_rows, renames=True):
    """One subscription's events as a consumer sees them (JSON form, in order): the schema promise
    (SchemaCheck, strict), the values' forms, every row inserted exactly once (ids 1..n_rows), and
    both renames reported as such."""
    check = SchemaCheck(strict={sub})
    last = {}
    ids = []
    for e in events:
        assert e["subscription"] == sub, e
        if check.feed(e):
            last[e["table"]] = e
            continue
        if e["op"] == "insert":
            check_values(e, last[e["table"]])
            ids.append(e["new"]["id"])
    assert sorted(ids) == list(range(1, n_rows + 1)), f"rows lost or twice: {len(ids)} of {n_rows}"
    renamed = {(c["name"], c["renamed_from"]) for s in check.schemas for c in s["table_schema"]["columns"]
               if c["renamed_from"]}
    if renames:
        assert renamed == {("b2", "b"), ("d2", "d")}, renamed
    return check


ALTERS = [
    "alter table {t} add column c int default 7",
    "alter table {t} rename column b to b2",
    "alter table {t} alter column a type bigint",
    "alter table {t} drop column c",
    "alter table {t} add column d numeric(10,2) default 1.5",
    "alter table {t} rename column d to d2",
    "alter table {t} alter column d2 type numeric(12,3)",
    "alter table {t} drop column b2",
]


def race(pg, table):
    """A writer inserting rows (one transaction each) while the ALTERs run one by one; returns the
    number of rows written."""
    stop = threading.Event()
    written = [0]
    errors = []

    def writer():
        conn = pg.connect()
        conn.autocommit = True
        cur = conn.cursor()
        try:
            while not stop.is_set():
                cur.execute(f"insert into {table} default values")
                written[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            conn.close()

    w = threading.Thread(target=writer)
    w.start()
    try:
        wait_for(lambda: written[0] >= 20, 30, what="the writer's first rows")
        for sql in ALTERS:
            pg.sql(sql.format(t=table))
            # rows of each shape: counted once the ALTER committed (two ALTERs with no row between
            # them are one change of shape to the consumers: an ADD then RENAME of the new column
            # is a column added, not renamed)
            at = written[0]
            wait_for(lambda: written[0] >= at + 20, 30, what=f"rows after {sql}")
    finally:
        stop.set()
        w.join(30)
    assert not errors, errors
    pg.sql(f"insert into {table} default values")
    return written[0] + 1


def tail_json(c, sub, n, timeout=60):
    p = subprocess.run([CDC_BIN, "tail", "-c", c.path, sub, "--from", "earliest", "--count", str(n),
                        "--timeout", "20"], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def client_json(e):
    """A Python client's Event in the form of cdc's JSON, as SchemaCheck reads it."""
    d = {"subscription": e.subscription, "op": e.op, "schema": e.schema, "table": e.table,
         "key": e.key, "new": e.new, "old": e.old, "unchanged_toast": e.unchanged_toast}
    if e.schema_id:
        d["schema_id"] = e.schema_id
    if e.table_schema:
        d["table_schema"] = {
            "columns": [{"name": c.name, "type": c.type, "type_oid": c.type_oid, "typmod": c.typmod, "key": c.key,
                         "nullable": c.nullable, "renamed_from": c.renamed_from} for c in e.table_schema.columns],
            "replica_identity": e.table_schema.replica_identity}
    if d["new"]:  # native values back to JSON's forms (the checks compare numeric scales)
        d["new"] = {k: (str(v) if v.__class__.__name__ == "Decimal" else v) for k, v in d["new"].items()}
    return d


def test_alter_table_racing_writes_in_every_sink(pg, schema, cdc, kafka, kafka_reader, proto, ddl_trigger):
    table = f"{schema}.racy"
    pg.sql(f"create table {table} (id bigserial primary key, a int default 0, b text default 'x')")
    topic, schemas_topic = f"cdc.{schema}.racy", f"cdc.schemas.{schema}"
    kafka.create_topic(topic, 3)
    kafka.create_topic(schemas_topic, 1)
    reader = kafka_reader([topic, schemas_topic], group=False)
    c = cdc(subscriptions=[{"name": "out", "tables": [table], "sink": "stdout"},
                           {"name": "sock", "tables": [table], "sink": "socket"},
                           {"name": "py", "tables": [table], "sink": "socket"},
                           ksub("kaf", [table])],
            source={"ddl": True},
            kafka=kafka_section(kafka, schemas_topic=schemas_topic))
    p = c.start()
    n = race(pg, table)

    # stdout: the daemon's own JSON lines
    p.wait_events(n, timeout=60, pred=lambda e: e["op"] == "insert")
    raw = p.raw_events()
    check_stream(raw, "out", n)
    ddl = [e for e in raw if e["op"] == "ddl"]
    assert [e["ddl"]["statement"] for e in ddl] == [a.format(t=table) for a in ALTERS]
    assert [e["ddl"]["command_tag"] for e in ddl] == ["ALTER TABLE"] * len(ALTERS)
    assert ddl[1]["ddl"]["object_type"] == "table column" and ddl[1]["ddl"]["object_identity"] == f"{table}.b2"
    # every DDL event comes before the rows of the shape it made: the schema events follow it
    for d in ddl:
        after = raw[raw.index(d) + 1:]
        first_row = next(e for e in after if e["op"] == "insert")
        s = next(e for e in after if e["op"] == "schema")
        assert after.index(s) < after.index(first_row), (d, s, first_row)
    # the last schema has what the table has now, NOT NULL included (DDL events tell it)
    last = [e for e in raw if e["op"] == "schema"][-1]["table_schema"]
    assert [(col["name"], col["type"], col["nullable"]) for col in last["columns"]] == [
        ("id", "bigint", False), ("a", "bigint", True), ("d2", "numeric(12,3)", True)]

    # the socket subscription through cdc tail, and through the Python client
    n_sock = len([e for e in raw if e["op"] in ("schema", "ddl", "insert")])
    tailed = tail_json(c, "sock", n_sock)
    check_stream(tailed, "sock", n)
    assert [e["offset"] for e in tailed] == list(range(1, n_sock + 1))
    with Consumer(c.config["subscribers"]["socket"], "py") as con:
        it = con.events(idle_timeout=20)
        got = []
        for _ in range(n_sock):
            e = next(it)
            got.append(client_json(e))
            con.ack(e)
    check_stream(got, "py", n)

    # Kafka: rows in the data topic name their schema in cdc-schema-id; the schema records (and the
    # DDL ones) are in the schemas topic, keyed SUBSCRIPTION/ID, produced before the rows
    rows = reader.wait(n, timeout=60, pred=lambda m: m.topic == topic, describe=p.describe)
    table_msgs = reader.wait_until(
        lambda ms: [m for m in ms if m.topic == schemas_topic] if
        len([m for m in ms if m.topic == schemas_topic and m.header("cdc-op") == "ddl"]) == len(ALTERS) else None,
        timeout=30, what="the DDL records")
    assert p.terminate() == 0
    schemas = {}
    for m in table_msgs:
        assert m.partition == 0 and m.header("cdc-subscription") == "kaf"
        e = m.event
        if m.header("cdc-op") == "schema":
            sid = m.header("cdc-schema-id")
            assert m.key == f"kaf/{sid}".encode() and e.schema_id == int(sid, 16)
            schemas.setdefault(sid, (m, e))
        else:
            assert m.header("cdc-op") == "ddl" and e.ddl.command_tag == "ALTER TABLE"
            assert m.key.startswith(b"kaf/ddl/")
    assert [m.event.ddl.statement for m in table_msgs if m.header("cdc-op") == "ddl"] == [
        a.format(t=table) for a in ALTERS]
    seen_ids = set()
    for m in rows:
        e = m.event
        sid = m.header("cdc-schema-id")
        assert e.schema_id == int(sid, 16), m
        sm, s = schemas[sid]
        assert sm.timestamp <= m.timestamp, (sm, m)
        cols = {col.name: col.type_oid for col in s.table_schema.columns}
        assert {col.name: col.type_oid for col in e.new_row.columns} == cols, (s, e)
        seen_ids.add(next(col.value.int_value for col in e.new_row.columns if col.name == "id"))
    assert seen_ids == set(range(1, n + 1))
    renamed = {(col.name, col.renamed_from) for _, s in schemas.values() for col in s.table_schema.columns
               if col.renamed_from}
    assert renamed == {("b2", "b"), ("d2", "d")}


def test_ddl_events_in_order_with_the_rows_of_their_transaction(pg, schema, cdc, ddl_trigger):
    """DDL and rows in one transaction: each DDL event comes before the rows after its command.
    (The server decodes a transactional message at the end of its record: without a record after
    it, an ALTER's message and the INSERT right after it had the same position and came in either
    order; the trigger writes one, see cdc/daemon/ddl_trigger.c.)"""
    table = f"{schema}.t"
    pg.sql(f"create table {table} (id int primary key, a int)")
    c, p = cdc.start(subscriptions=[{"name": "all", "tables": [table], "sink": "stdout"}], source={"ddl": True})
    pg.sql(f"insert into {table} values (1, 1)")
    conn = pg.connect()
    cur = conn.cursor()
    for sql in ("begin", f"alter table {table} rename column a to a2", f"alter table {table} add column b text",
                f"insert into {table} (id) values (2)", f"alter table {table} add column c text",
                f"insert into {table} (id) values (3)", "commit"):
        cur.execute(sql)
    conn.close()
    p.wait_events(6)
    assert p.terminate() == 0
    raw = p.raw_events()[2:]
    assert [(e["op"], e.get("ddl", {}).get("statement")) for e in raw] == [
        ("ddl", f"alter table {table} rename column a to a2"), ("ddl", f"alter table {table} add column b text"),
        ("schema", None), ("insert", None), ("ddl", f"alter table {table} add column c text"), ("schema", None),
        ("insert", None)]
    assert [e["tx_index"] for e in raw] == [0, 1, 2, 2, 3, 4, 4]
    assert [(col["name"], col["renamed_from"]) for col in raw[2]["table_schema"]["columns"]] == [
        ("id", None), ("a2", "a"), ("b", None)]
    assert [(col["name"], col["renamed_from"]) for col in raw[5]["table_schema"]["columns"]] == [
        ("id", None), ("a2", None), ("b", None), ("c", None)]


def test_schema_again_after_a_restart_and_without_ddl_no_renames(pg, schema, cdc):
    table = f"{schema}.t"
    pg.sql(f"create table {table} (id int primary key, b text)")
    c = cdc(subscriptions=[{"name": "all", "tables": [table], "sink": "stdout"},
                           {"name": "rows", "tables": [table], "operations": ["insert"], "sink": "stdout"}])
    p = c.start()
    pg.sql(f"insert into {table} values (1, 'x')")
    pg.sql(f"alter table {table} rename column b to b2")
    pg.sql(f"insert into {table} values (2, 'y')")
    p.wait_events(4)
    assert p.terminate() == 0
    raw = p.raw_events()
    # no DDL capture: the rename is a new shape, not reported as a rename; "rows" lists no schema
    assert [(e["subscription"], e["op"]) for e in raw] == [
        ("all", "schema"), ("all", "insert"), ("rows", "insert"), ("all", "schema"), ("all", "insert"),
        ("rows", "insert")]
    assert [c["renamed_from"] for c in raw[3]["table_schema"]["columns"]] == [None, None]
    assert raw[0]["schema_id"] != raw[3]["schema_id"] and raw[2]["schema_id"] == raw[1]["schema_id"]
    assert [(c["name"], c["nullable"]) for c in raw[3]["table_schema"]["columns"]] == [("id", None), ("b2", None)]
    # after a restart the first row is announced again, with the same id
    p = c.start()
    pg.sql(f"insert into {table} values (3, 'z')")
    p.wait_events(2)
    assert p.terminate() == 0
    again = p.raw_events()
    assert [(e["subscription"], e["op"]) for e in again] == [("all", "schema"), ("all", "insert"),
                                                             ("rows", "insert")]
    assert again[0]["schema_id"] == raw[3]["schema_id"] and again[0]["table_schema"] == raw[3]["table_schema"]


def test_types_as_format_type_prints_them(pg, schema, cdc):
    pg.sql(f"create type {schema}.mood as enum ('ok', 'sad')")
    pg.sql(f"create domain {schema}.pos as int check (value > 0)")
    # a negative scale: PostgreSQL 15 and later
    nneg = "nneg numeric(3,-2), " if pg.version >= 15 else ""
    pg.sql(f"""create table {schema}.types (id int primary key, n numeric(10,2), n0 numeric, {nneg}
               v varchar(20), v0 varchar, ch char(3), qc "char", t3 time(3), tz timetz(0), ts timestamp(6),
               tstz timestamptz(2), tstz0 timestamptz, iv interval, ivy interval year to month,
               ivs interval day to second(2), bi bit(5), vb varbit(7), arr numeric(10,2)[], varr varchar(9)[],
               i2 int2, i8 int8, f4 float4, f8 float8, bo bool, tx text, by bytea, js jsonb, j json, u uuid,
               d date, ip inet, m {schema}.mood, ma {schema}.mood[], dom {schema}.pos, rng int4range, mo money)""")
    c = cdc(subscriptions=[{"name": "all", "tables": [f"{schema}.types"], "sink": "stdout"}])
    p = c.start()
    pg.sql(f"insert into {schema}.types (id) values (1)")
    p.wait_events(1)
    assert p.terminate() == 0
    s = p.raw_events()[0]
    assert s["op"] == "schema"
    want = pg.sql(f"""select attname, format_type(atttypid, atttypmod), atttypid::int, atttypmod
                      from pg_attribute where attrelid = '{schema}.types'::regclass and attnum > 0
                      order by attnum""")
    got = [(col["name"], col["type"], col["type_oid"], col["typmod"]) for col in s["table_schema"]["columns"]]
    # a domain: pgoutput sends its base type's name, not the domain's (README "Schema events")
    want = [(n, "integer" if n == "dom" else t, o, m) for n, t, o, m in want]
    assert got == want
    assert [col["key"] for col in s["table_schema"]["columns"]] == [True] + [False] * (len(got) - 1)


def test_ddl_capture_needs_a_superuser_and_says_what_to_run(pg, schema, cdc, ddl_trigger):
    table = f"{schema}.t"
    pg.sql(f"create table {table} (id int primary key, b text)")
    role = f"cdc_{schema}"[:63]
    pg.sql(f"create role {role} login replication")
    dbname = re.search(r"dbname=(\S+)", pg.dsn).group(1)
    pg.sql(f"grant create on database {dbname} to {role}")
    pg.sql(f"grant usage on schema {schema} to {role}")
    pg.sql(f"grant select on {table} to {role}")
    try:
        c = cdc(subscriptions=[{"name": "all", "tables": [table], "sink": "stdout"}], source={"ddl": True})
        pg.sql(f'create publication "{c.publication}" for table {table}')
        with open(c.path) as f:
            text = f.read()
        with open(c.path, "w") as f:
            f.write(text.replace(pg.dsn, pg.dsn.replace("user=postgres", f"user={role}")))
        p = c.run()
        assert p.wait_exit(30) == 1, p.describe()
        err = p.stderr()
        path = os.path.join(c.state_dir, "ddl-trigger.sql")
        assert "only a superuser can create an event trigger" in err, err
        assert f"-f {path}" in err and "permission denied to create event trigger" in err, err
        assert pg.sql("select count(*) from pg_event_trigger where evtname like 'cdc_%'")[0][0] == 0
        # what the message says to run, run by a superuser: cdc starts and reports DDL
        psql = os.path.join(find_bindir(), "psql")
        r = subprocess.run([psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", pg.dsn, "-f", path], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        p = c.start()
        pg.sql(f"alter table {table} rename column b to b2")
        pg.sql(f"insert into {table} values (1, 'x')")
        p.wait_events(2)
        assert p.terminate() == 0
        raw = p.raw_events()
        assert [e["op"] for e in raw] == ["ddl", "schema", "insert"]
        assert [(col["name"], col["renamed_from"], col["nullable"]) for col in raw[1]["table_schema"]["columns"]] == [
            ("id", None, False), ("b2", None, True)]  # its first schema event: nothing to rename from
    finally:
        pg.sql(f"drop owned by {role}")
        pg.sql(f"drop role {role}")
