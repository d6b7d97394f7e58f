"""test_held.py: transactions cdc must hold before delivering, on a real server: a streamed
transaction that alters its table midway, and prepared transactions (streamed or not) that keep the
slot from moving past them, survive a kill -9 of cdc, and are delivered at COMMIT PREPARED."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import wait_for  # noqa: E402
from test_spine import check_transactions, finish, lsn_to_int  # noqa: E402

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
    assert [len(t) for t in check_transactions(events)] == [2 * ROWS + 1]


def slot_lsn(c):
    row = c.slot_row()
    return lsn_to_int(row[1]) if row and row[1] else 0


def test_prepared_transaction_pins_the_slot_and_survives_a_crash(pg, schema, cdc):
    """Large and small prepared transactions: while they are held the slot is never confirmed past
    them (the server would not send their changes again), so after kill -9 and a restart cdc still
    delivers them at COMMIT PREPARED; one rolled back is never delivered."""
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
