"""test_failures.py: cdc under connection loss, server restarts and crashes, a busy slot, slots it
must refuse (ahead of its record, dropped, lost), heartbeats, SIGHUP reloads and a shared state_dir.
Every test checks the events that arrive, not only that cdc survived."""

import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CdcProcess, to_yaml, wait_for  # noqa: E402
from pg import TempPostgres, lsn_to_int  # noqa: E402


def insert_batches(pg, table, start, count, rows=5):
    """count transactions of rows rows each, ids from start; returns the set of ids committed."""
    ids = set()
    for i in range(count):
        lo = start + i * rows
        pg.sql(f"insert into {table} select g from generate_series(%s, %s) g", (lo, lo + rows - 1))
        ids.update(range(lo, lo + rows))
    return ids


def ids_seen(*procs):
    return {e["new"]["id"] for p in procs for e in p.events() if e["op"] == "insert"}


def walsender_pid(pg, slot):
    rows = pg.sql("select active_pid from pg_replication_slots where slot_name = %s", (slot,))
    return rows[0][0] if rows else None


def test_walsender_terminated_then_resumes(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    committed = insert_batches(pg, f"{schema}.t", 1, 20)
    p.wait_events(len(committed))
    pid = walsender_pid(pg, c.slot)
    pg.sql("select pg_terminate_backend(%s)", (pid,))
    committed |= insert_batches(pg, f"{schema}.t", 1000, 20)
    wait_for(lambda: ids_seen(p) >= committed, timeout=60, what=f"every row after a reconnect\n{p.describe()}")
    assert walsender_pid(pg, c.slot) not in (None, pid)
    assert "not streaming; retrying" in p.stderr()
    assert ids_seen(p) == committed
    assert p.terminate() == 0, p.describe()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_restart_loses_nothing(pg, schema, cdc, mode):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    committed = insert_batches(pg, f"{schema}.t", 1, 30)
    p.wait_events(len(committed))
    try:
        pg.stop(mode)
    finally:
        pg.start()
    committed |= insert_batches(pg, f"{schema}.t", 1000, 30)
    wait_for(lambda: ids_seen(p) >= committed, timeout=90,
             what=f"every row after a {mode} restart\n{p.describe()}")
    assert ids_seen(p) == committed
    assert p.terminate() == 0, p.describe()
    # Everything delivered was confirmed: the slot is not behind what cdc recorded at its stop.
    recorded = open(os.path.join(c.state_dir, "position")).read()
    flushed = [ln.split()[1] for ln in recorded.splitlines() if ln.startswith("flushed_lsn ")][0]
    assert f"flushed_lsn={flushed}" in p.stderr().splitlines()[-1], p.describe()


def test_busy_slot_is_retried_until_free(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p0 = c.start()
    assert p0.terminate() == 0
    other = subprocess.Popen(
        [os.path.join(pg.bindir, "pg_recvlogical"), "-d", pg.dsn, "-S", c.slot, "--start", "-f", "/dev/null",
         "-o", "proto_version=1", "-o", f"publication_names={c.publication}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: walsender_pid(pg, c.slot), what="pg_recvlogical to hold the slot")
        p = c.run()
        wait_for(lambda: "is in use by another process" in p.stderr(), timeout=30, what=p.describe())
        assert p.running()
    finally:
        other.terminate()
        other.wait(10)
    c.wait_streaming(p, timeout=60)
    pg.sql(f"insert into {schema}.t values (1)")
    assert [e["new"] for e in p.wait_events(1, timeout=30)] == [{"id": 1}]
    assert p.terminate() == 0


def test_slot_ahead_of_recorded_position_is_refused(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p0 = c.start()
    assert p0.terminate() == 0
    pg.sql(f"insert into {schema}.t values (1)")
    # Something else consumes the slot: the change above would never reach cdc's sinks.
    recorded = [ln.split()[1] for ln in open(os.path.join(c.state_dir, "position")) if ln.startswith("flushed_lsn")][0]
    # The server advances only to flushed WAL (asynchronous commit here): retry until it passes the record.
    wait_for(lambda: pg.sql("select end_lsn::text from pg_replication_slot_advance(%s, pg_current_wal_insert_lsn())",
                            (c.slot,))[0][0] != recorded, what="the slot to move past the recorded position")
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    assert "ahead of the position cdc recorded in state_dir" in p.stderr()
    assert p.events() == []


def test_dropped_slot_is_not_recreated(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p0 = c.start()
    assert p0.terminate() == 0
    pg.sql("select pg_drop_replication_slot(%s)", (c.slot,))
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    assert "does not exist, but cdc recorded position" in p.stderr()
    assert c.slot_row() is None


def test_lost_slot_is_refused(tmp_path):
    """A slot whose WAL the server removed (max_slot_wal_keep_size) is refused with what to do."""
    with TempPostgres(max_slot_wal_keep_size="1MB", wal_keep_size="0", max_wal_size="32MB",
                      min_wal_size="32MB") as srv:
        srv.sql("create table t (id int primary key, v text)")
        cfg = {"source": {"dsn": srv.dsn, "slot": "lost_slot", "publication": "lost_pub", "create": True,
                          "publish": ["public.*"]},
               "state_dir": str(tmp_path / "state"),
               "status": {"socket": str(tmp_path / "status.sock")},
               "subscriptions": [{"name": "all", "tables": ["public.*"], "sink": "stdout"}]}
        path = tmp_path / "cdc.yaml"
        path.write_text(to_yaml(cfg))

        def run():
            return CdcProcess([os.environ.get("CDC_BIN", "build/cdc"), "run", "-c", str(path)],
                              str(tmp_path / "out"), str(tmp_path / "err"))
        p0 = run()
        wait_for(lambda: srv.sql("select active from pg_replication_slots where slot_name = 'lost_slot'")
                 == [(True,)] or not p0.running(), what=p0.describe())
        assert p0.terminate() == 0, p0.describe()

        def status():
            return srv.sql("select wal_status from pg_replication_slots where slot_name = 'lost_slot'")[0][0]
        for _ in range(8):
            srv.sql("insert into t select g, repeat('x', 500) from generate_series(1, 5000) g")
            srv.sql("select pg_switch_wal()")
            srv.sql("checkpoint")
            if status() == "lost":
                break
        assert status() == "lost"
        p = run()
        assert p.wait_exit(30) == 1, p.describe()
        assert "has lost WAL it needed (wal_status = lost)" in p.stderr()
        assert "pg_drop_replication_slot('lost_slot')" in p.stderr()
        p.close()


def test_heartbeat_moves_slot_and_is_not_delivered(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc(source={"heartbeat": "500ms"},
            subscriptions=[{"name": "all", "tables": [f"{schema}.*"], "sink": "stdout",
                            "operations": ["insert", "message"]}])
    p = c.start()
    # A second slot sees what the heartbeat writes to WAL.
    watcher = f"{c.slot}_w"
    pg.sql("select pg_create_logical_replication_slot(%s, 'test_decoding')", (watcher,))
    try:
        def beats():
            rows = pg.sql("select data from pg_logical_slot_peek_changes(%s, NULL, NULL)", (watcher,))
            return [r[0] for r in rows if "cdc.heartbeat" in r[0]]
        assert wait_for(lambda: len(beats()) >= 2, timeout=30, what="two heartbeat messages in WAL")
        start = pg.current_wal_lsn()
        wait_for(lambda: c.slot_row()[1] and int(c.slot_row()[1].split("/")[0], 16) << 32 |
                 int(c.slot_row()[1].split("/")[1], 16) >= int(start.split("/")[0], 16) << 32 |
                 int(start.split("/")[1], 16), timeout=30, what="the slot to pass the heartbeats")
    finally:
        pg.sql("select pg_drop_replication_slot(%s)", (watcher,))
    pg.sql(f"insert into {schema}.t values (7)")
    evs = p.wait_events(1)
    assert [e["op"] for e in evs] == ["insert"], evs
    assert "heartbeat failed" not in p.stderr()
    assert p.terminate() == 0


def test_sighup_reloads_subscriptions_at_a_transaction_boundary(pg, schema, cdc):
    pg.sql(f"create table {schema}.a (id int primary key)")
    pg.sql(f"create table {schema}.b (id int primary key)")
    c = cdc(subscriptions=[{"name": "a_only", "tables": [f"{schema}.a"], "sink": "stdout"}])
    p = c.start()
    pg.sql(f"insert into {schema}.a values (1)")
    pg.sql(f"insert into {schema}.b values (1)")
    b1_end = lsn_to_int(pg.sql("select pg_current_wal_lsn()::text")[0][0])
    p.wait_events(1)
    # b's first row is matched by the old rules: cdc has passed it before the reload is asked for
    # (the reload applies at the next transaction boundary, which could otherwise come before it).
    wait_for(lambda: lsn_to_int(c.slot_row()[1] or "0/0") >= b1_end, what="cdc to confirm b's first row")
    c.config["subscriptions"] = [{"name": "b_only", "tables": [f"{schema}.b"], "sink": "stdout", "tag": "t2"}]
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    p.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded subscriptions" in p.stderr(), what=p.describe())
    pg.sql(f"insert into {schema}.a values (2)")
    pg.sql(f"insert into {schema}.b values (2)")
    evs = p.wait_events(2)
    assert [(e["subscription"], e["table"], e["new"]["id"], e["tag"]) for e in evs] == [
        ("a_only", "a", 1, None), ("b_only", "b", 2, "t2")]
    # A broken file is refused and the running subscriptions stay.
    with open(c.path, "w") as f:
        f.write("subscriptions: [{name: x}]\nbogus: 1\n")
    p.signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in p.stderr(), what=p.describe())
    pg.sql(f"insert into {schema}.b values (3)")
    assert [e["new"]["id"] for e in p.wait_events(3)][-1] == 3
    assert p.terminate() == 0


def test_second_cdc_on_the_same_state_dir_is_refused(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p1 = c.start()
    p2 = c.run()
    assert p2.wait_exit(30) == 1, p2.describe()
    assert "is in use by another cdc process" in p2.stderr()
    assert p1.running()
    assert p1.terminate() == 0


def test_keepalives_are_answered_so_wal_sender_timeout_never_trips(pg, schema, cdc):
    """The server asks for a reply after half of wal_sender_timeout without one; cdc's own status
    updates come only every 10s, so only immediate answers keep a 1s timeout from tripping."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc(source={"dsn": pg.dsn + " options='-c wal_sender_timeout=1000'"})
    p = c.start()
    pid = walsender_pid(pg, c.slot)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        assert walsender_pid(pg, c.slot) == pid, f"the walsender was replaced\n{p.describe()}"
        time.sleep(0.1)
    pg.sql(f"insert into {schema}.t values (1)")
    assert [e["new"] for e in p.wait_events(1)] == [{"id": 1}]
    assert "retrying" not in p.stderr(), p.describe()
    assert p.terminate() == 0
