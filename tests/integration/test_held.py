"""test_held.py: transactions cdc must hold before delivering, on a real server: a streamed
transaction that alters its table midway, and prepared transactions (streamed or not) that keep the
slot from moving past them, survive a kill -9 of cdc, and are delivered at COMMIT PREPARED."""

import glob
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import wait_for  # noqa: E402
from test_spine import check_transactions, finish, lsn_to_int  # noqa: E402
from subscriber_helpers import Subscriber  # noqa: E402

OP_INSERT, OP_SCHEMA = 1, 7  # cdc.v1.Op

ROWS = 5000  # with logical_decoding_work_mem=64kB the server streams this many rows in chunks


def test_alter_table_inside_a_streamed_transaction(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    conn = pg.connect()
    cur = conn.cursor()
    cur.execute("begin")
    cur.execute(f"insert into {schema}.t select g, 'before' from generate_series(1, {ROWS}) g")
    cur.execute(f"alter table {schema}.t add column extra int default 7")
    cur.execute(f"insert into {schema}.t select g, 'after', g from generate_series({ROWS + 1}, {2 * ROWS}) g")
    cur.execute(f"alter table {schema}.t drop column v")
    cur.execute(f"insert into {schema}.t values (0, 0)")
    cur.execute("commit")
    conn.close()
    events = finish(p, 2 * ROWS + 1, timeout=60)
    news = [e["new"] for e in events]
    # Each change carries the columns its table had when it was made.
    assert news[:ROWS] == [{"id": g, "v": "before"} for g in range(1, ROWS + 1)]
    assert news[ROWS:2 * ROWS] == [{"id": g, "v": "after", "extra": g} for g in range(ROWS + 1, 2 * ROWS + 1)]
    assert news[-1] == {"id": 0, "extra": 0}
    assert [len(t) for t in check_transactions(events, contiguous=False)] == [2 * ROWS + 1]
    # Each ALTER is a change of the transaction when a cdc with source.ddl (an earlier test's) left
    # its event trigger in the database: its DDL message takes a tx_index, though this cdc (without
    # source.ddl) delivers no DDL event. Without the trigger the indexes are 0..n-1.
    ddl = pg.sql("select count(*) from pg_event_trigger where evtname = 'cdc_ddl_command_end' and evtenabled <> 'D'")[0][0]
    assert [e["tx_index"] for e in events] == (
        list(range(ROWS)) + list(range(ROWS + ddl, 2 * ROWS + ddl)) + [2 * ROWS + 2 * ddl])


def slot_lsn(c):
    row = c.slot_row()
    return lsn_to_int(row[1]) if row and row[1] else 0


@pytest.mark.matrix
def test_prepared_transaction_pins_the_slot_and_survives_a_crash(pg, schema, cdc):
    """Large and small prepared transactions: while they are held the slot is never confirmed past
    them (the server would not send their changes again), so after kill -9 and a restart cdc still
    delivers them at COMMIT PREPARED; one rolled back is never delivered."""
    if pg.version < 15:
        pytest.skip("PostgreSQL 14 has no two-phase decoding: a prepared transaction is sent at its "
                    "COMMIT PREPARED, so nothing is held (test_two_phase covers it)")
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p1 = cdc.start()
    conn = pg.connect()
    cur = conn.cursor()
    big, small, gone = f"{schema}_big", f"{schema}_small", f"{schema}_gone"
    try:
        before = lsn_to_int(pg.current_wal_lsn())
        cur.execute("begin")
        cur.execute(f"insert into {schema}.t select g, 'big' from generate_series(1, {ROWS}) g")
        cur.execute(f"prepare transaction '{big}'")  # streamed, then Stream Prepare
        after_big = lsn_to_int(pg.current_wal_lsn())  # past big's PREPARE record
        cur.execute("begin")
        cur.execute(f"insert into {schema}.t values (-1, 'small')")
        cur.execute(f"prepare transaction '{small}'")
        cur.execute("begin")
        cur.execute(f"insert into {schema}.t values (-2, 'gone')")
        cur.execute(f"prepare transaction '{gone}'")
        # Later transactions commit and are delivered; the slot still stays before the PREPAREs.
        for i in range(20):
            pg.sql(f"insert into {schema}.t values (%s, 'plain')", (100000 + i,))
        p1.wait_events(20)
        # Confirming up to the PREPARE record's start is safe (the server skips a PREPARE only if
        # it starts before the confirmed position); anything beyond would lose it. Watch for a
        # second of keepalives too: they must not move it either.
        wait_for(lambda: slot_lsn(c) > before, what="cdc to confirm what it delivered")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert slot_lsn(c) < after_big, "the slot was confirmed past a prepared transaction"
            time.sleep(0.05)
        p1.kill()

        p2 = c.start()
        pg.sql(f"rollback prepared '{gone}'")
        pg.sql(f"commit prepared '{small}'")
        pg.sql(f"commit prepared '{big}'")
        pg.sql(f"insert into {schema}.t values (200000, 'last')")
        p2.wait_events(1, timeout=60, pred=lambda e: e["new"]["id"] == 200000)
        # Everything delivered is confirmed now, past the COMMIT PREPAREDs.
        wait_for(lambda: slot_lsn(c) > after_big, what="the slot to move once the prepared transactions committed")
        assert p2.terminate() == 0, p2.describe()
    finally:
        for g in (big, small, gone):
            if pg.sql("select 1 from pg_prepared_xacts where gid = %s", (g,)):
                pg.sql(f"rollback prepared '{g}'")
        conn.close()

    ids = [e["new"]["id"] for e in p2.events()]
    assert -2 not in ids + [e["new"]["id"] for e in p1.events()]
    # After the restart: the plain ones again (never confirmed), then small, big, last.
    assert ids == [100000 + i for i in range(20)] + [-1] + list(range(1, ROWS + 1)) + [200000]
    txs = check_transactions(p2.events())
    assert [len(t) for t in txs] == [1] * 20 + [1, ROWS, 1]


# --- held transactions on the socket path: spooled as they stream, visible at their commit ----------

def take(s, n, timeout=60):
    """n events (whole Deliveries), acknowledging each Delivery as it comes."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        got = s.events(1, timeout=max(0.1, deadline - time.monotonic()))
        s.ack_events(got)
        out += got
    return out


def held_files(c, sub="jobs"):
    return glob.glob(os.path.join(c.state_dir, "spool", sub, "events", "held-*"))


def held_bytes(c):
    n = 0
    for f in held_files(c):
        try:
            n += os.path.getsize(f)
        except FileNotFoundError:  # committed or aborted meanwhile
            pass
    return n


def test_socket_held_transaction_is_spooled_as_it_streams_and_seen_once_at_commit(pg, schema, cdc):
    """A socket subscription's events of a streamed transaction go to the spool while the server
    streams it, none visible before its commit (a plain transaction committing meanwhile is, at the
    next offset), all of them once after it, at dense offsets, after a schema event of its own (a
    held transaction announces its tables: README "Schema events"); a rolled-back subtransaction's
    rows and an aborted transaction leave nothing. Then kill -9 in the middle of one: after the
    restart it arrives whole and once; kill -9 right after one was spooled: not spooled again."""
    pg.sql(f"create table {schema}.jobs (id int primary key, v text)")
    c, p = cdc.start(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "sink": "socket"}])
    s = Subscriber(c.config["subscribers"]["socket"], "jobs", heartbeat_ms=100)
    pg.sql(f"insert into {schema}.jobs values (0, 'first')")
    assert [(e.offset, e.op) for e in take(s, 2)] == [(1, OP_SCHEMA), (2, OP_INSERT)]

    def big(cur, first, label):
        cur.execute(f"insert into {schema}.jobs select g, '{label}' from generate_series({first}, {first + ROWS - 1}) g")

    def announced(evs, first_offset, first_id):
        """evs: the held transaction's schema event, then its ROWS or 2 * ROWS rows in order."""
        rows = evs[1:]
        assert (evs[0].op, evs[0].offset, evs[0].tx_index, evs[0].commit_lsn) == (
            OP_SCHEMA, first_offset, 0, rows[0].commit_lsn)
        assert [e.offset for e in rows] == list(range(first_offset + 1, first_offset + 1 + len(rows)))
        assert [row_id(e) for e in rows] == list(range(first_id, first_id + len(rows)))

    conn = pg.connect()
    try:
        cur = conn.cursor()
        cur.execute("begin")
        big(cur, 1, "big")
        cur.execute("savepoint s1")
        cur.execute(f"insert into {schema}.jobs select -g, 'gone' from generate_series(1, {ROWS}) g")
        cur.execute("rollback to savepoint s1")
        big(cur, ROWS + 1, "big")
        # Written to the spool while the server streams it (past the 1 MiB write buffer)...
        wait_for(lambda: held_bytes(c) > 0, what="the streamed transaction in the spool")
        pg.sql(f"insert into {schema}.jobs values (-100000, 'meanwhile')")
        meanwhile = take(s, 1)
        # ... invisible: what commits meanwhile takes the next offset.
        assert [(e.offset, row_id(e)) for e in meanwhile] == [(3, -100000)]
        cur.execute("commit")
        evs = take(s, 1 + 2 * ROWS)
        announced(evs, 4, 1)
        assert [e.tx_index for e in evs[1:]] == list(range(2 * ROWS))
        assert len({e.commit_lsn for e in evs}) == 1 and all(e.commit_time > 0 for e in evs)
        wait_for(lambda: not held_files(c), what="the held file to become a segment")

        # Aborted: nothing of it, its file gone.
        cur.execute("begin")
        big(cur, 100000, "aborted")
        wait_for(lambda: held_files(c), what="the streamed transaction in the spool")
        cur.execute("rollback")
        wait_for(lambda: not held_files(c), what="the aborted transaction's file to go")
        pg.sql(f"insert into {schema}.jobs values (-200000, 'after the abort')")
        assert [(e.offset, row_id(e)) for e in take(s, 1)] == [(5 + 2 * ROWS, -200000)]
        next_offset = 6 + 2 * ROWS
        s.wait_acked(next_offset - 1)

        # kill -9 in the middle of a streamed transaction, then its commit after the restart.
        cur.execute("begin")
        big(cur, 200000, "killed")
        wait_for(lambda: held_files(c), what="the streamed transaction in the spool")
        p.kill()
        s.close()
        p = c.start()
        cur.execute("commit")
        s = Subscriber(c.config["subscribers"]["socket"], "jobs", heartbeat_ms=100)
        evs = take(s, 1 + ROWS)
        announced(evs, next_offset, 200000)
        next_offset += 1 + ROWS
        s.wait_acked(next_offset - 1)

        # kill -9 as soon as a streamed transaction is visible (spooled, maybe not confirmed yet): the
        # slot may send it again, the spool does not take it twice.
        cur.execute("begin")
        big(cur, 300000, "spooled")
        cur.execute("commit")
        evs = take(s, 1 + ROWS)
        announced(evs, next_offset, 300000)
        next_offset += 1 + ROWS
        s.wait_acked(next_offset - 1)
        p.kill()
        s.close()
    finally:
        conn.close()
    p = c.start()
    pg.sql(f"insert into {schema}.jobs values (-300000, 'last')")
    s = Subscriber(c.config["subscribers"]["socket"], "jobs", heartbeat_ms=100)
    # The new stream announces the table again before this row, unless the slot sent the spooled
    # transaction again (the spool did not take it, and its consumers have the schema it announced).
    evs = take(s, 1)
    if evs[0].op == OP_SCHEMA:
        evs += take(s, 1)
        assert [e.offset for e in evs] == [next_offset, next_offset + 1]
    else:
        assert [e.offset for e in evs] == [next_offset]
    assert row_id(evs[-1]) == -300000
    assert s.events(1, timeout=1, fail=False) == []
    assert p.terminate() == 0


def row_id(e):
    return {c.name: getattr(c.value, c.value.WhichOneof("kind")) for c in e.new_row.columns}["id"]
