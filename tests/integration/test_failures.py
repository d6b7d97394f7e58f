"""test_failures.py: cdc under connection loss, server restarts and crashes, a busy slot, slots it
must refuse (ahead of its record, dropped, lost), one being created by another session (held there
by gdb), heartbeats, SIGHUP reloads and a shared state_dir.
Every test checks the events that arrive, not only that cdc survived."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, CdcProcess, drop_slot, to_yaml, wait_for  # noqa: E402
from pg import TempPostgres, lsn_to_int  # noqa: E402

# Rounds of test_two_cdc_started_at_once_share_what_they_create.
ROUNDS_AT_ONCE = 40


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
        [os.path.join(pg.client_bindir, "pg_recvlogical"), "-d", pg.dsn, "-S", c.slot, "--start", "-f", "/dev/null",
         "-o", "proto_version=1", "-o", f"publication_names={c.publication}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: walsender_pid(pg, c.slot), what="pg_recvlogical to hold the slot")
        p = c.run()
        wait_for(lambda: "standby: another process streams the replication slot" in p.stderr(), timeout=30,
                 what=p.describe())
        assert p.running()
    finally:
        other.terminate()
        other.wait(10)
    c.wait_streaming(p, timeout=60)
    pg.sql(f"insert into {schema}.t values (1)")
    assert [e["new"] for e in p.wait_events(1, timeout=30)] == [{"id": 1}]
    assert p.terminate() == 0


def test_standby_waits_then_takes_over_when_the_active_cdc_dies(pg, schema, cdc):
    """A second cdc on the same slot (its own state_dir) waits as a standby, says so in /status,
    /readyz, /metrics and cdc status, and takes over within seconds of the active one's kill -9
    under a write load: every committed row reaches one of the two."""
    import json
    from test_status import http
    pg.sql(f"create table {schema}.t (id int primary key)")
    a = cdc()
    pa = a.start()
    b = cdc(source={"slot": a.slot, "publication": a.publication})
    pb = b.run()
    wait_for(lambda: "standby: another process streams the replication slot" in pb.stderr(), 30,
             what=pb.describe())
    sock = b.config["status"]["socket"]
    wait_for(lambda: json.loads(http((sock, "/status"))[1])["source"]["standby"], 10, what="standby in /status")
    st = json.loads(http((sock, "/status"))[1])
    assert (st["ready"], st["source"]["connected"]) == (False, False), st
    assert st["reason"].startswith(f"standby: replication slot {a.slot} is streamed by another process"), st
    code, body = http((sock, "/readyz"))
    assert code == 503 and body.startswith("standby: "), (code, body)
    assert "cdc_standby 1" in http((sock, "/metrics"))[1].splitlines()
    out = subprocess.run([os.environ.get("CDC_BIN", "build/cdc"), "status", "-s", sock], capture_output=True,
                         text=True, timeout=30)
    assert out.stdout.splitlines()[1].startswith("source  standby"), out.stdout
    ids = insert_batches(pg, f"{schema}.t", 1, 20)
    wait_for(lambda: len(ids_seen(pa)) >= 50, 30, what=pa.describe())
    pa.kill()
    ids |= insert_batches(pg, f"{schema}.t", 1001, 20)
    wait_for(lambda: "taking over" in pb.stderr(), 30, what=pb.describe())
    ids |= insert_batches(pg, f"{schema}.t", 2001, 20)
    wait_for(lambda: ids <= ids_seen(pa, pb), 60, what=f"{len(ids - ids_seen(pa, pb))} rows missing; {pb.describe()}")
    assert ids_seen(pa, pb) == ids
    assert "not streaming; retrying" not in pb.stderr()  # waiting is quiet
    wait_for(lambda: json.loads(http((sock, "/status"))[1])["ready"], 10, what="the new active one ready")
    # And back: the first one, restarted, waits; its record is behind the slot that b moved on,
    # which a standby accepts when it takes over.
    pa2 = a.run()
    wait_for(lambda: "standby: another process streams" in pa2.stderr(), 30, what=pa2.describe())
    pb.kill()
    ids |= insert_batches(pg, f"{schema}.t", 3001, 20)
    wait_for(lambda: ids <= ids_seen(pa, pb, pa2), 60,
             what=f"{len(ids - ids_seen(pa, pb, pa2))} rows missing; {pa2.describe()}")
    assert ids_seen(pa, pb, pa2) == ids
    # A former standby restarted while nobody streams: its record says another process streamed
    # the slot, so the slot being ahead of it is expected, not refused.
    pb2 = b.run()
    wait_for(lambda: "standby: another process streams" in pb2.stderr(), 30, what=pb2.describe())
    pb2.kill()
    assert "streamed_by_another_process" in open(os.path.join(b.state_dir, "position")).read()
    ids |= insert_batches(pg, f"{schema}.t", 4001, 20)
    wait_for(lambda: ids <= ids_seen(pa, pb, pa2), 60, what=pa2.describe())
    pa2.kill()
    pb3 = b.start()
    ids |= insert_batches(pg, f"{schema}.t", 5001, 20)
    wait_for(lambda: ids <= ids_seen(pa, pb, pa2, pb3), 60,
             what=f"{len(ids - ids_seen(pa, pb, pa2, pb3))} rows missing; {pb3.describe()}")
    assert ids_seen(pa, pb, pa2, pb3) == ids
    assert pb3.terminate() == 0
    assert "streamed_by_another_process" not in open(os.path.join(b.state_dir, "position")).read()


@pytest.mark.matrix
def test_two_cdc_started_at_once_share_what_they_create(pg, schema, cdc):
    """Two cdc with one config (their own state_dirs) started at the same moment, as the replicas of
    a StatefulSet with podManagementPolicy Parallel are, both with source.create: both find no
    publication and no slot and create them; the one that loses a race uses what the other
    created instead of stopping. Then one streams and the other waits as a standby. The race is
    not forced: several rounds, each from nothing, and at least one of them must have run into it."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    a = cdc()
    b = cdc(source={"slot": a.slot, "publication": a.publication})
    raced = 0
    for _ in range(ROUNDS_AT_ONCE):
        pa, pb = a.run(), b.run()

        def one_streams_one_waits():
            for p in (pa, pb):
                if not p.running():
                    raise AssertionError(p.describe())
            return sorted((" streaming slot=" in p.stderr(), "standby: another process streams" in p.stderr())
                          for p in (pa, pb)) == [(False, True), (True, False)]
        try:
            wait_for(one_streams_one_waits, 30, what="one cdc to stream and the other to wait")
        except AssertionError as e:  # with what they logged by then
            raise AssertionError(f"{e}\n{pa.describe()}\n{pb.describe()}") from None
        err = pa.stderr() + pb.stderr()
        raced += "created by another process meanwhile" in err
        assert pa.terminate() == 0 and pb.terminate() == 0, f"{pa.describe()}\n{pb.describe()}"
        drop_slot(pg, a.slot)
        pg.sql(f'drop publication "{a.publication}"')
        shutil.rmtree(a.state_dir)
        shutil.rmtree(b.state_dir)
    print(f"rounds with a race: {raced} of {ROUNDS_AT_ONCE}")
    assert raced > 0


class HeldBackend:
    """gdb attached to one PostgreSQL backend with a breakpoint on a server function: what that
    backend runs next stops there until release(). Holds a backend in a window that lasts
    microseconds otherwise."""

    def __init__(self, pid, function, timeout=120.0):
        self.gdb = subprocess.Popen(["gdb", "-q", "-nx", "-p", str(pid)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.out = []
        threading.Thread(target=lambda: self.out.extend(self.gdb.stdout), daemon=True).start()
        # The backend's own signals (latches, timeouts) pass through without stopping it.
        self.gdb.stdin.write("set pagination off\nset confirm off\nhandle all nostop noprint pass\n"
                             f"break {function}\necho gdb-ready\\n\ncontinue\n")
        self.gdb.stdin.flush()
        self.wait_output("gdb-ready", timeout, "gdb to attach")

    def wait_output(self, text, timeout, what):
        wait_for(lambda: any(text in ln for ln in self.out) or self.gdb.poll() is not None, timeout,
                 what=what)
        assert any(text in ln for ln in self.out), f"{what}: gdb said\n{''.join(self.out)}"

    def release(self):
        if self.gdb.poll() is None:
            self.gdb.stdin.write("detach\nquit\n")
            self.gdb.stdin.flush()
            try:
                self.gdb.wait(30)
            except subprocess.TimeoutExpired:
                self.gdb.kill()
                self.gdb.wait(10)


ptrace_allowed = os.geteuid() == 0 or not os.path.exists("/proc/sys/kernel/yama/ptrace_scope") or \
    open("/proc/sys/kernel/yama/ptrace_scope").read().strip() == "0"


@pytest.mark.skipif(not ptrace_allowed, reason="gdb attaches to a PostgreSQL backend: needs root or "
                    "kernel.yama.ptrace_scope=0")
def test_a_slot_being_created_by_another_session_is_waited_for(pg, schema, cdc):
    """pg_create_logical_replication_slot() lists the slot in pg_replication_slots, held by its
    session, before it names the plugin (PostgreSQL's ReplicationSlotCreate, then
    CreateInitDecodingContext). A cdc that looks in that moment (the other of two started at once
    is creating it) waits as a standby and streams the slot once it is created, instead of
    refusing a slot "with plugin none". gdb holds the creating session in that moment."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    creator = pg.connect()
    creator.autocommit = True
    cur = creator.cursor()
    cur.execute("select pg_backend_pid()")
    pid = cur.fetchone()[0]
    held = HeldBackend(pid, "CreateInitDecodingContext")
    creating = threading.Thread(target=cur.execute, daemon=True,
                                args=("select pg_create_logical_replication_slot(%s, 'pgoutput')", (c.slot,)))
    try:
        creating.start()
        held.wait_output("Breakpoint 1,", 60, "the creating session at the breakpoint")
        slot_row = f"select plugin, slot_type, active_pid from pg_replication_slots where slot_name = '{c.slot}'"
        assert pg.sql(slot_row) == [("", "logical", pid)]
        p = c.run()
        wait_for(lambda: "standby: another process streams" in p.stderr() or not p.running(), 30,
                 what=p.describe())
        assert p.running(), p.describe()
        assert f"replication slot being created by another process; waiting for it slot={c.slot} pid={pid}" \
            in p.stderr(), p.describe()
        doc = subprocess.run([CDC_BIN, "doctor", "-c", c.path, "--json"], capture_output=True, text=True,
                             timeout=60)
        assert [(f["status"], f["detail"], f["fix"]) for f in json.loads(doc.stdout)["checks"]
                if f["check"] == "slot"] == \
            [("warn", f"{c.slot} is being created by another session (PID {pid})",
              "run cdc doctor again once it is created")], doc.stdout + doc.stderr
    finally:
        held.release()
    creating.join(30)
    assert not creating.is_alive()
    assert pg.sql(slot_row)[0][:2] == ("pgoutput", "logical")
    creator.close()  # the slot is free: the waiting cdc takes it
    wait_for(lambda: " streaming slot=" in p.stderr(), 30, what=p.describe())
    assert "taking over: the slot was let go" in p.stderr(), p.describe()
    pg.sql(f"insert into {schema}.t values (1)")
    assert [(e["op"], e["new"]) for e in p.wait_events(1)] == [("insert", {"id": 1})]
    assert p.terminate() == 0, p.describe()


def test_slot_ahead_of_recorded_position_is_refused(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p0 = c.start()
    assert p0.terminate() == 0
    # cdc has exited; its walsender may hold the slot a moment longer
    wait_for(lambda: not c.slot_row()[0], what="the walsender to let go of the slot")
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
    drop_slot(pg, c.slot)  # once its walsender, which may outlive cdc a moment, let go
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    assert "does not exist, but cdc recorded position" in p.stderr()
    assert c.slot_row() is None


# --- a publication newer than the slot, a lost slot: stop with the ways out, or re-sync --------

def resync_markers(p, sub="all"):
    import base64
    import json
    return [json.loads(base64.b64decode(e["message"]["content"])) for e in p.events()
            if e["subscription"] == sub and e["op"] == "message" and e["message"]["prefix"] == "cdc.resync"]


def rows_after_resync(p, sub="all"):
    """The model a consumer keeps from the marker on: reads and inserts/updates as upserts, deletes
    as deletes; also the ops seen after the marker, in order."""
    model, ops, after = {}, [], False
    for e in p.events():
        if e["subscription"] != sub:
            continue
        if e["op"] == "message" and e["message"]["prefix"] == "cdc.resync":
            after = True
            continue
        if not after:
            continue
        ops.append(e["op"])
        if e["op"] == "delete":
            model.pop(e["key"]["id"], None)
        else:
            model[e["new"]["id"]] = e["new"]["v"]
    return model, ops


@pytest.mark.matrix
def test_publication_newer_than_the_slot_stops_with_the_ways_out(pg, schema, cdc):
    """The slot exists before cdc creates the publication: the server cannot decode the change
    between them, every start would fail the same way, so cdc stops at once and says why."""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c = cdc()
    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (c.slot,))
    pg.sql(f"insert into {schema}.t values (1, 'before the publication')")
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    err = p.stderr()
    assert f'publication "{c.publication}" does not exist' in err, err
    assert "created after the position of replication slot" in err
    assert "source.on_publication_newer: resync" in err
    assert "not streaming; retrying" not in err
    assert p.events() == []


@pytest.mark.matrix
def test_publication_newer_than_the_slot_is_resynced_when_told(pg, schema, cdc):
    """on_publication_newer: resync: the slot moves on, every consumer gets the marker, then the
    table's rows as reads (the changes in the gap included, as the rows are now), then the stream."""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    pg.sql(f"insert into {schema}.t select g, 'old' from generate_series(1, 5) g")
    c = cdc(subscriptions=[{"name": "all", "tables": [f"{schema}.t"], "sink": "stdout"},
                           {"name": "inserts", "tables": [f"{schema}.t"], "operations": ["insert"],
                            "where": "new.id > 100", "sink": "stdout"}],
            source={"on_publication_newer": "resync"})
    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (c.slot,))
    pg.sql(f"insert into {schema}.t values (6, 'gap')")
    pg.sql(f"update {schema}.t set v = 'gap' where id = 1")
    pg.sql(f"delete from {schema}.t where id = 2")
    p = c.run()
    wait_for(lambda: rows_after_resync(p)[0] == {1: "gap", 3: "old", 4: "old", 5: "old", 6: "gap"}, 60,
             what="the marker, then the rows as reads: " + p.describe())
    pg.sql(f"insert into {schema}.t values (7, 'after')")
    wait_for(lambda: rows_after_resync(p)[0].get(7) == "after", 30, what="the stream after the re-sync")
    markers = resync_markers(p)
    assert len(markers) == 1, f"{markers}\n{p.describe()}"
    m = markers[0]
    assert (m["reason"], m["slot"]) == ("publication_newer", c.slot), m
    assert lsn_to_int(m["resumed_at"]) > lsn_to_int(m["skipped_from"]) > 0, m
    model, ops = rows_after_resync(p)
    assert ops == ["read"] * 5 + ["insert"], ops
    # Every subscription gets the marker, whatever its operations and where; reads as its rules say.
    assert [e["op"] for e in p.events() if e["subscription"] == "inserts"] == ["message"]
    assert "re-synced" in p.stderr() and "reason=publication_newer" in p.stderr()
    assert p.terminate() == 0


@pytest.mark.matrix
def test_publication_newer_is_resynced_once_when_the_wal_is_not_flushed(tmp_path):
    """A server that flushes its WAL late (synchronous_commit off, as the test servers run, and the WAL
    writer asleep for 10 s): the slot can only move up to the flushed WAL. A re-sync that moved it
    there stopped before a change still unflushed, and the next start failed on that change again: a
    second re-sync, a second marker and every backfill twice (make check, PostgreSQL 14 and 16). cdc
    flushes the WAL before it moves the slot: one re-sync, one marker."""
    with TempPostgres(wal_writer_delay="10s") as srv:
        srv.sql("create table t (id int primary key, v text)")
        srv.sql("insert into t select g, 'old' from generate_series(1, 5) g")
        srv.sql("select pg_create_logical_replication_slot('late_slot', 'pgoutput')")  # flushes
        # One change flushed (the stream fails on it), one not (the WAL writer sleeps 10 s).
        srv.sql("begin; set local synchronous_commit = on; insert into t values (6, 'gap'); commit")
        srv.sql("update t set v = 'gap' where id = 1")
        cfg = {"source": {"dsn": srv.dsn, "slot": "late_slot", "publication": "late_pub", "create": True,
                          "publish": ["public.t"], "on_publication_newer": "resync"},
               "state_dir": str(tmp_path / "state"),
               "status": {"socket": str(tmp_path / "status.sock")},
               "subscriptions": [{"name": "all", "tables": ["public.t"], "sink": "stdout"}]}
        path = tmp_path / "cdc.yaml"
        path.write_text(to_yaml(cfg))
        p = CdcProcess([CDC_BIN, "run", "-c", str(path)], str(tmp_path / "out"), str(tmp_path / "err"))
        wait_for(lambda: rows_after_resync(p)[0] == {1: "gap", 2: "old", 3: "old", 4: "old", 5: "old", 6: "gap"},
                 60, what="the marker, then the rows as reads: " + p.describe())
        # Flushed at once, and after the update in the WAL: the stream brings it only past the update.
        srv.sql("begin; set local synchronous_commit = on; insert into t values (7, 'after'); commit")
        wait_for(lambda: rows_after_resync(p)[0].get(7) == "after", 60, what="the stream after the re-sync")
        markers = resync_markers(p)
        assert len(markers) == 1 and p.stderr().count("re-synced:") == 1, f"{markers}\n{p.describe()}"
        assert p.terminate() == 0, p.describe()


@pytest.mark.matrix
def test_dropped_slot_is_resynced_when_told(pg, schema, cdc):
    """on_slot_lost: resync: a dropped slot is made again, consumers get the marker, the rows as
    reads (what changed while there was no slot included), then the stream; counted in /metrics."""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c = cdc(source={"on_slot_lost": "resync"})
    p0 = c.start()
    pg.sql(f"insert into {schema}.t select g, 'v1' from generate_series(1, 4) g")
    wait_for(lambda: len(p0.events()) == 4, what="the first rows")
    assert p0.terminate() == 0
    drop_slot(pg, c.slot)  # once its walsender, which may outlive cdc a moment, let go
    pg.sql(f"update {schema}.t set v = 'v2' where id = 2")
    pg.sql(f"delete from {schema}.t where id = 3")
    pg.sql(f"insert into {schema}.t values (5, 'v2')")
    p = c.run()
    wait_for(lambda: rows_after_resync(p)[0] == {1: "v1", 2: "v2", 4: "v1", 5: "v2"}, 60,
             what="the marker, then the rows as reads: " + p.describe())
    (m,) = resync_markers(p)
    assert m["reason"] == "slot_lost" and lsn_to_int(m["resumed_at"]) > lsn_to_int(m["skipped_from"]) > 0, m
    assert c.slot_row() is not None
    sock = c.config["status"]["socket"]
    from test_status import http
    wait_for(lambda: "cdc_source_resyncs_total 1" in http((sock, "/metrics"))[1].splitlines(), 10,
             what="cdc_source_resyncs_total 1")
    assert p.terminate() == 0
    # The new position is recorded: the next start streams on, with no second re-sync.
    p2 = c.start()
    pg.sql(f"insert into {schema}.t values (6, 'v3')")
    wait_for(lambda: [e["new"]["id"] for e in p2.events() if e["op"] == "insert"] == [6], 30, what=p2.describe())
    assert resync_markers(p2) == [] and "re-sync" not in p2.stderr()
    assert p2.terminate() == 0


@pytest.mark.matrix
def test_lost_slot_is_refused(tmp_path):
    """A slot whose WAL the server removed (max_slot_wal_keep_size) is refused with what to do, and
    why the server invalidated it (PostgreSQL 17's invalidation_reason); re-synced when told; then
    the slot health of 17 and 18 in /status, /metrics and `cdc status` (the slot valid again, and 18's
    idle_replication_slot_timeout)."""
    srv = TempPostgres(max_slot_wal_keep_size="1MB", wal_keep_size="0", max_wal_size="32MB",
                       min_wal_size="32MB")
    if srv.version >= 18:
        srv.settings["idle_replication_slot_timeout"] = "1h"
    with srv:
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
        why = (", invalidation_reason = wal_removed: the server removed WAL past max_slot_wal_keep_size"
               if srv.version >= 17 else "")
        assert f"has lost WAL it needed (wal_status = lost{why}): changes after " in p.stderr(), p.describe()
        assert "pg_drop_replication_slot('lost_slot')" in p.stderr()
        assert "source.on_slot_lost: resync" in p.stderr()
        p.close()
        # Told to re-sync: the slot is made again, and the table arrives whole as reads after the marker.
        cfg["source"]["on_slot_lost"] = "resync"
        path.write_text(to_yaml(cfg))
        p = run()
        want = srv.sql("select count(*) from t")[0][0]
        wait_for(lambda: sum(1 for e in p.events() if e["op"] == "read") == want, 120,
                 what=f"{want} reads after the re-sync: " + p.describe())
        ops = [e["op"] for e in p.events()]
        assert ops[0] == "message" and set(ops[1:]) == {"read"}, ops[:3]
        assert status() == "reserved" and "reason=slot_lost" in p.stderr()
        from test_status import http
        sock = str(tmp_path / "status.sock")
        src = wait_for(lambda: (lambda s: s if s["wal_status"] else None)(
            json.loads(http((sock, "/status"))[1])["source"]), 15, what="the slot's health in /status")
        timeout = 3600 if srv.version >= 18 else None
        assert (src["wal_status"], src["invalidation_reason"], src["inactive_since"],
                src["idle_replication_slot_timeout_s"]) == ("reserved", None, None, timeout), src
        metrics = {(s.name, s.labels.get("reason")): s.value
                   for f in text_string_to_metric_families(http((sock, "/metrics"))[1]) for s in f.samples}
        assert metrics.get(("cdc_source_slot_invalidation_reason", "wal_removed")) == \
            (0 if srv.version >= 17 else None)
        assert metrics.get(("cdc_source_idle_replication_slot_timeout_seconds", None)) == timeout
        text = subprocess.run([os.environ.get("CDC_BIN", "build/cdc"), "status", "-s", sock],
                              capture_output=True, text=True, timeout=30).stdout
        assert ("  idle_timeout=1h00m\n" in text) == (srv.version >= 18), text
        assert "invalidated=" not in text and "inactive_since=" not in text, text
        assert p.terminate() == 0, p.describe()


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
    b1_end = lsn_to_int(pg.current_wal_lsn())  # the insert position: past b1's commit record
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
    # A broken file is refused and the running subscriptions stay; each problem is a log line of
    # its own (the list used to be one line with literal \n inside).
    with open(c.path, "w") as f:
        f.write("subscriptions: [{name: x}]\nbogus: 1\n")
    p.signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in p.stderr(), what=p.describe())
    problems = [ln for ln in p.stderr().splitlines() if "configuration problem" in ln]
    assert len(problems) == 2, p.stderr()
    assert sum('unknown top-level key "bogus"' in ln for ln in problems) == 1, problems
    assert sum('missing required key "tables"' in ln for ln in problems) == 1, problems
    assert "\\n" not in p.stderr(), p.stderr()
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
