"""test_python_client.py: proto/clients/python (cdc_client) against a real PostgreSQL and cdc:
typed events with native values, schema and DDL events with their typed columns (a rename told
as a rename), acks per consumer mode, reconnection across a cdc restart
(unacknowledged events come again, acknowledged ones do not), an Error frame raised as
ServerError, Nack with a delay and a reason up to a dead letter with its history, Progress keeping
a long job, a refused ack reported, and the example worker run as a process (nacking the rows it
cannot process)."""

import datetime
import decimal
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import CDC_BIN, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY_CLIENT = os.path.join(ROOT, "proto", "clients", "python")
sys.path.insert(0, PY_CLIENT)
from cdc_client import (Connection, Consumer, Ddl, DdlColumn, PermissionDenied, Refused, SchemaColumn,  # noqa: E402
                        ServerError, TableSchema, pb)

# The example worker imports cdc_client as an installed package would be: from the repository here
# (tests/clients/test_packages.py runs it from a virtualenv the package is installed in).
WORKER = [sys.executable, os.path.join(PY_CLIENT, "examples", "worker.py")]
WORKER_ENV = dict(os.environ, PYTHONPATH=PY_CLIENT)


def socket_sub(schema, name="jobs", table="jobs", **kw):
    s = {"name": name, "tables": [f"{schema}.{table}"], "operations": ["insert", "update", "delete"],
         "sink": "socket"}
    s.update(kw)
    return s


def sock(c):
    return c.config["subscribers"]["socket"]


def make_jobs(pg, schema):
    pg.sql(f"create table {schema}.jobs (id int primary key, note text)")


def insert(pg, schema, first, last):
    pg.sql(f"insert into {schema}.jobs select i, 'n' || i from generate_series({first}, {last}) i")


def take(it, n):
    return [next(it) for _ in range(n)]


def test_events_have_native_values_and_acks_stick(pg, schema, cdc):
    pg.sql(f"""create table {schema}.t (id int primary key, big bigint, amount numeric, ok boolean,
               f float8, note text, at timestamptz, ts timestamp, d date, tm time, u uuid, b bytea,
               doc jsonb, ip inet, nothing text)""")
    c, p = cdc.start(subscriptions=[socket_sub(schema, table="t", tag="typed")])
    pg.sql(f"""insert into {schema}.t values (1, 9007199254740993, 120.50, true, 1.5, 'héllo',
               '2026-11-22 10:00:00.123456+00', '2026-11-22 10:00:00', '2026-11-22', '10:11:12.5',
               'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x0001ff', '{{"a": [1, null]}}', '10.0.0.1', null)""")
    pg.sql(f"update {schema}.t set ok = false where id = 1")
    pg.sql(f"delete from {schema}.t where id = 1")
    with Consumer(sock(c), "jobs", consumer="py-test", heartbeat_ms=200) as con:
        it = con.events(idle_timeout=20)
        ins, upd, dele = take(it, 3)
        assert con.mode == "failover" and con.active and con.subscribed.next_offset == 1
        assert [(e.offset, e.op, e.delivery_count, e.tag) for e in (ins, upd, dele)] == [
            (1, "insert", 1, "typed"), (2, "update", 1, "typed"), (3, "delete", 1, "typed")]
        assert (ins.subscription, ins.schema, ins.table, ins.tx_index) == ("jobs", schema, "t", 0)
        assert ins.new == {
            "id": 1, "big": 9007199254740993, "amount": decimal.Decimal("120.50"), "ok": True, "f": 1.5,
            "note": "héllo",
            "at": datetime.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc),
            "ts": datetime.datetime(2026, 11, 22, 10, 0, 0), "d": datetime.date(2026, 11, 22),
            "tm": datetime.time(10, 11, 12, 500000), "u": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            "b": b"\x00\x01\xff", "doc": {"a": [1, None]}, "ip": "10.0.0.1", "nothing": None}
        assert ins.key == {"id": 1} and ins.old is None and ins.unchanged_toast == []
        assert upd.new["ok"] is False and upd.row is upd.new
        assert dele.new is None and dele.key == {"id": 1} and dele.row == {"id": 1}
        assert ins.lsn <= ins.commit_lsn < upd.commit_lsn < dele.commit_lsn
        assert ins.commit_time.tzinfo is datetime.timezone.utc and ins.commit_time.year >= 2024
        assert ins.pb.new_row.columns[12].value.json_value  # the message as received is kept
        con.ack(ins, upd)  # failover: one cumulative Ack of offset 2
        wait_for(lambda: next(con.events(idle_timeout=0.3), None) is None and con.server_acked_offset == 2,
                 10, what="the server to report offset 2 acknowledged")
    # A new consumer starts after the acknowledged offset: the delete again, first delivery on
    # this connection (counts live in cdc's memory: 2).
    with Consumer(sock(c), "jobs") as con:
        evs = list(con.events(idle_timeout=1.0))
        assert [(e.offset, e.op, e.delivery_count) for e in evs] == [(3, "delete", 2)]
        assert con.subscribed.acked_offset == 2
    assert p.terminate() == 0


def test_schema_and_ddl_events_are_typed(pg, schema, cdc):
    # A pattern, not the table's name: the table is created while cdc runs (its CREATE is the first
    # event), and a table named one by one must exist when cdc starts.
    c, p = cdc.start(subscriptions=[socket_sub(schema, "shaped", "shaped*", operations=["insert", "schema", "ddl"])],
                     source={"ddl": True})
    pg.sql(f"create table {schema}.shaped (id int primary key, amount numeric(10,2) not null, note varchar(20))")
    pg.sql(f"insert into {schema}.shaped values (1, 1.5, 'a')")
    pg.sql(f"alter table {schema}.shaped rename column note to memo")
    pg.sql(f"insert into {schema}.shaped values (2, 2.5, 'b')")
    with Consumer(sock(c), "shaped", heartbeat_ms=200) as con:
        evs = take(con.events(idle_timeout=20), 6)
        assert [(e.offset, e.op) for e in evs] == [
            (1, "ddl"), (2, "schema"), (3, "insert"), (4, "ddl"), (5, "schema"), (6, "insert")]
        create, s1, ins1, rename, s2, ins2 = evs
        assert create.ddl == Ddl(
            event="ddl_command_end", command_tag="CREATE TABLE", object_type="table",
            object_identity=f"{schema}.shaped",
            statement=f"create table {schema}.shaped (id int primary key, amount numeric(10,2) not null, "
                      "note varchar(20))",
            columns=[DdlColumn(1, "id", "integer", 23, -1, True), DdlColumn(2, "amount", "numeric(10,2)", 1700, 655366, True),
                     DdlColumn(3, "note", "character varying(20)", 1043, 24, False)])
        assert create.table_schema is None and create.schema_id is None and create.new is None
        assert s1.table_schema == TableSchema(
            columns=[SchemaColumn("id", "integer", 23, -1, True, False, None),
                     SchemaColumn("amount", "numeric(10,2)", 1700, 655366, False, False, None),
                     SchemaColumn("note", "character varying(20)", 1043, 24, False, True, None)],
            replica_identity="default")
        assert len(s1.schema_id) == 16 and ins1.schema_id == s1.schema_id
        assert ins1.new == {"id": 1, "amount": decimal.Decimal("1.50"), "note": "a"}
        assert (rename.ddl.command_tag, rename.ddl.object_type, rename.ddl.object_identity) == (
            "ALTER TABLE", "table column", f"{schema}.shaped.memo")
        assert [(col.attnum, col.name) for col in rename.ddl.columns] == [(1, "id"), (2, "amount"), (3, "memo")]
        assert s2.table_schema.column("memo") == SchemaColumn(
            "memo", "character varying(20)", 1043, 24, False, True, "note")
        assert s2.table_schema.column("note") is None and s2.schema_id != s1.schema_id
        assert ins2.schema_id == s2.schema_id and ins2.new["memo"] == "b"
        # schema events share the tx_index of the row they precede; DDL events take their own
        assert (s2.commit_lsn, s2.tx_index) == (ins2.commit_lsn, ins2.tx_index)
        con.ack(ins2)
    assert p.terminate() == 0


def test_shared_mode_acks_each_offset(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    insert(pg, schema, 1, 4)
    with Consumer(sock(c), "jobs", heartbeat_ms=200) as con:
        evs = take(con.events(idle_timeout=20), 4)
        assert con.mode == "shared" and not con.cumulative
        assert [e.new["id"] for e in evs] == [1, 2, 3, 4]
        con.ack(evs[0], evs[2])  # per offset: 2 and 4 stay unacknowledged
        wait_for(lambda: next(con.events(idle_timeout=0.3), None) is None and con.server_acked_offset == 1,
                 10, what="the server to report offset 1 acknowledged")
    with Consumer(sock(c), "jobs") as con:
        assert [(e.offset, e.new["id"]) for e in con.events(idle_timeout=1.0)] == [(2, 2), (4, 4)]
    assert p.terminate() == 0


@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
def test_worker_survives_a_cdc_restart(pg, schema, cdc, stop):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 4)
    got = queue.Queue()
    con = Consumer(sock(c), "jobs", consumer="survivor", heartbeat_ms=200, backoff_initial=0.05,
                   backoff_max=0.5, give_up_after=60)

    def worker():
        # Acknowledges 1 and 2 only; stops after the events of the second life.
        try:
            for e in con.events(idle_timeout=60):
                got.put((e.offset, e.delivery_count, e.new["id"], con.connections))
                if e.offset <= 2:
                    con.ack(e)
                if e.offset == 6:
                    break
        except BaseException as exc:  # the test fails with it below
            got.put(exc)
        finally:
            con.close()

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    first = [got.get(timeout=20) for _ in range(4)]
    assert first == [(1, 1, 1, 1), (2, 1, 2, 1), (3, 1, 3, 1), (4, 1, 4, 1)]
    wait_for(lambda: con.server_acked_offset == 2, 10, what="the server to report offset 2 acknowledged")
    if stop == "sigterm":
        assert p.terminate() == 0
    else:
        p.kill()
    p2 = c.start()
    insert(pg, schema, 5, 6)
    second = [got.get(timeout=30) for _ in range(4)]
    t.join(10)
    assert not t.is_alive()
    # 3 and 4 were never acknowledged: delivered again, their second delivery (the spool keeps
    # delivery counts across restarts, kill -9 too); 1 and 2 not.
    assert second == [(3, 2, 3, 2), (4, 2, 4, 2), (5, 1, 5, 2), (6, 1, 6, 2)]
    assert got.empty()
    assert p2.terminate() == 0


def test_error_frame_is_raised_with_its_code(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    with pytest.raises(ServerError) as err:
        with Consumer(sock(c), "nope") as con:
            next(iter(con))
    assert (err.value.code, err.value.code_value, err.value.message) == (
        "UNKNOWN_SUBSCRIPTION", pb.Error.UNKNOWN_SUBSCRIPTION, "no subscription named nope")
    assert str(err.value) == "UNKNOWN_SUBSCRIPTION: no subscription named nope"
    # The raw connection says the same, and the server closes it afterwards.
    conn = Connection(sock(c))
    with pytest.raises(ServerError) as err:
        conn.subscribe("nope")
    assert err.value.code == "UNKNOWN_SUBSCRIPTION"
    assert conn.recv(10) is None and conn.closed
    conn.close()
    assert p.terminate() == 0


def test_a_refused_subscribe_raises_permission_denied_at_once(pg, schema, cdc):
    """The subscription's allow list does not hold this process's uid: PermissionDenied (a
    ServerError), raised at once although the consumer reconnects on other errors; the example
    worker says it and exits 1."""
    make_jobs(pg, schema)
    me = os.geteuid()
    c, p = cdc.start(subscriptions=[socket_sub(schema, allow={"uids": [me + 1]})])
    with pytest.raises(PermissionDenied) as err:
        with Consumer(sock(c), "jobs") as con:
            next(iter(con))
    assert isinstance(err.value, ServerError) and err.value.code == "PERMISSION_DENIED"
    assert re.fullmatch(rf"PERMISSION_DENIED: uid {me} \(group {os.getegid()}[^)]*\) may not read subscription jobs: "
                        r"neither its uid nor its groups are in the subscription's allow list \(allow: uids, gids\)",
                        str(err.value)), str(err.value)
    w = subprocess.run(WORKER + [sock(c), "jobs", "--idle", "5"], capture_output=True, text=True, timeout=60,
                       env=WORKER_ENV)
    assert (w.returncode, w.stdout) == (1, "")
    assert w.stderr == f"worker: {err.value}\n"
    # Both raised, so neither connected again (a retried error loops); the two refusals are counted.
    def denied():
        out = subprocess.run([CDC_BIN, "status", "-c", c.path, "--json"], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)["subscriptions"][0]["denied"]
    wait_for(lambda: denied() == 2, 10, what="two refusals in /status")
    assert p.terminate() == 0


def test_example_worker_processes_inserted_rows(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    n = 50
    w = subprocess.Popen(WORKER + [sock(c), "jobs", "--count", str(n)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=WORKER_ENV)
    insert(pg, schema, 1, n)
    out, err = w.communicate(timeout=60)
    assert w.returncode == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines == [{"offset": i, "op": "insert", "table": "jobs", "row": {"id": i, "note": f"n{i}"}}
                     for i in range(1, n + 1)]
    # Everything was acknowledged: a new consumer gets nothing old.
    with Consumer(sock(c), "jobs") as con:
        assert list(con.events(idle_timeout=0.5)) == []
        assert con.subscribed.acked_offset == n
    assert p.terminate() == 0


def test_nack_with_delay_and_reason_comes_again_then_becomes_a_dead_letter(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, max_deliveries=2)])
    insert(pg, schema, 1, 3)
    with Consumer(sock(c), "jobs", consumer="nacker", heartbeat_ms=200) as con:
        it = con.events(idle_timeout=20)
        e1, e2, e3 = take(it, 3)
        assert [(e.offset, e.delivery_count) for e in (e1, e2, e3)] == [(1, 1), (2, 1), (3, 1)]
        t0 = time.monotonic()
        con.ack(e1)
        con.nack(e2, delay=1.0, reason="card declined")
        con.ack(e3)  # failover acks are cumulative: held below 2 while 2 is given back
        assert con.wait_answered() == []
        assert con.server_acked_offset == 1
        (again,) = take(it, 1)
        waited = time.monotonic() - t0
        assert (again.offset, again.delivery_count, again.new["id"]) == (2, 2, 2)
        assert 0.8 <= waited < 5, waited
        con.nack(again, reason="gateway timeout \u2014 gave up")  # the second delivery: max_deliveries
        # 2 is a dead letter now, so the ack of 3 held back goes out.
        assert con.wait_answered() == []
        assert con.server_acked_offset == 3
    with Consumer(sock(c), "jobs", dead_letters=True) as dead:
        (d,) = list(dead.events(idle_timeout=2.0))
        h = d.dead_letter
        assert (d.offset, d.delivery_count, d.new["id"]) == (1, 1, 2)
        assert (h.offset, h.original_offset, h.deliveries, h.reason) == (1, 2, 2, "gateway timeout \u2014 gave up")
        assert abs(h.dead_time.timestamp() - time.time()) < 30 and h.dead_time.tzinfo is datetime.timezone.utc
        dead.ack(d)
        assert dead.wait_answered() == [] and dead.server_acked_offset == 1
    with Consumer(sock(c), "jobs") as con:  # nothing left in the subscription
        assert list(con.events(idle_timeout=0.5)) == [] and con.subscribed.acked_offset == 3
        assert all(e.dead_letter is None for e in (e1, e2, e3))
    assert p.terminate() == 0


def first_delivery(conn, seconds):
    """The events of the first Delivery a raw Connection receives within seconds, else []."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        f = conn.recv(left)
        if f is not None and f.WhichOneof("kind") == "delivery":
            return list(f.delivery.events)
    return []


def test_progress_keeps_a_long_job_from_being_delivered_again(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1s")])
    insert(pg, schema, 1, 1)
    with Consumer(sock(c), "jobs", consumer="worker", max_unacked=1, heartbeat_ms=200) as con:
        it = con.events(idle_timeout=20)
        (job,) = take(it, 1)
        with Connection(sock(c)) as spare:
            spare.subscribe("jobs", consumer="spare", max_unacked=1)  # would take the job if it came back
            with con.keep_alive(job, every=0.3):
                time.sleep(2.5)  # the job: 2.5 ack timeouts
            assert first_delivery(spare, 0.2) == []
            con.ack(job)
            assert con.wait_answered() == [] and con.server_acked_offset == 1 and job.delivery_count == 1
        # Without Progress the next job is taken away after the ack timeout.
        insert(pg, schema, 2, 2)
        (job2,) = take(it, 1)
        with Connection(sock(c)) as spare:
            spare.subscribe("jobs", consumer="spare2", max_unacked=1)
            assert [(e.offset, e.delivery_count) for e in first_delivery(spare, 5)] == [(2, 2)]
            con.progress(job2)  # too late: it is the spare's now
            assert con.wait_answered() == [Refused(2, "OTHER_CONSUMER")]
    assert p.terminate() == 0


def test_a_refused_ack_is_reported(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 1)
    seen = []
    with Consumer(sock(c), "jobs", heartbeat_ms=200, on_refused=seen.append) as con:
        (e,) = take(con.events(idle_timeout=20), 1)
        con.ack(99)  # never delivered
        assert con.wait_answered() == [Refused(99, "NOT_DELIVERED")]
        assert seen == [[Refused(99, "NOT_DELIVERED")]] and con.server_acked_offset == 0
        con.ack(e)
        assert con.wait_answered() == [] and con.server_acked_offset == 1
        con.ack(e)  # again
        assert con.wait_answered() == [Refused(1, "ALREADY_ACKED")] and con.unanswered == 0
    assert p.terminate() == 0


def test_example_worker_nacks_what_it_cannot_process(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, max_deliveries=2)])
    insert(pg, schema, 1, 5)
    worker = WORKER + [sock(c), "jobs"]
    w = subprocess.run(worker + ["--fail-on", "id=3", "--nack-delay", "0.2", "--idle", "2"],
                       capture_output=True, text=True, timeout=60, env=WORKER_ENV)
    assert w.returncode == 0, w.stderr
    assert [json.loads(x)["row"]["id"] for x in w.stdout.splitlines()] == [1, 2, 4, 5]
    assert w.stderr.count("id=3 is not supported; given back") == 2
    # 3 went to the dead letters with the worker's reason; everything else was acknowledged.
    d = subprocess.run(worker + ["--dead-letters", "--idle", "1"], capture_output=True, text=True, timeout=60,
                       env=WORKER_ENV)
    assert d.returncode == 0, d.stderr
    (line,) = [json.loads(x) for x in d.stdout.splitlines()]
    assert (line["row"], line["dead_letter"]["original_offset"], line["dead_letter"]["deliveries"],
            line["dead_letter"]["reason"]) == ({"id": 3, "note": "n3"}, 3, 2, "id=3 is not supported")
    with Consumer(sock(c), "jobs") as con:
        assert list(con.events(idle_timeout=0.5)) == [] and con.subscribed.acked_offset == 5
    assert p.terminate() == 0


def test_example_worker_exits_1_when_it_never_reaches_cdc(tmp_path):
    """A worker pointed at a socket where no cdc listens says so and exits 1: after --idle seconds
    without ever connecting, or once cdc stayed unreachable for --give-up seconds."""
    missing = str(tmp_path / "no-cdc-here.sock")
    w = subprocess.run(WORKER + [missing, "jobs", "--idle", "1"], capture_output=True, text=True, timeout=60,
                       env=WORKER_ENV)
    assert (w.returncode, w.stdout) == (1, "")
    assert f"worker: never reached cdc at {missing} within 1s: is cdc running" in w.stderr
    assert "No such file or directory; connecting again in" in w.stderr  # each attempt is logged
    w = subprocess.run(WORKER + [missing, "jobs", "--give-up", "0.5"], capture_output=True, text=True,
                       timeout=60, env=WORKER_ENV)
    assert (w.returncode, w.stdout) == (1, "")
    assert f"worker: cdc at {missing} unreachable for 0.5s: " in w.stderr


def test_a_missing_protobuf_runtime_names_the_package():
    """Without google.protobuf (python3 -S: no site-packages), importing cdc_client says which
    package provides it instead of a bare ModuleNotFoundError."""
    p = subprocess.run([sys.executable, "-S", "-c", "import cdc_client"], capture_output=True, text=True,
                       timeout=60, env=WORKER_ENV)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: cdc_client needs the protobuf runtime (the module google.protobuf): on "
                    "Debian `apt-get install python3-protobuf`, else `pip install protobuf`"), p.stderr


def readme_ops(path):
    """The ops a client's README lists where it describes an event's `op`: each quoted name in the
    parentheses after the first `op`."""
    with open(path) as f:
        text = f.read()
    start = text.index("`op` (")
    return re.findall(r'`"(\w+)"`', text[start:text.index(")", start)])


def test_readmes_list_every_op():
    ops = [n[3:].lower() for n in pb.Op.keys() if n != "OP_UNSPECIFIED"]
    assert "read" in ops
    for client in ("python", "typescript"):
        assert readme_ops(os.path.join(ROOT, "proto", "clients", client, "README.md")) == ops, client
