"""test_socket.py: `sink: socket` end to end: a real PostgreSQL, cdc, and consumers on the real
subscriber socket speaking proto/cdc/v1/subscriber.proto through cdc_client (proto/clients/python,
built only from the .proto files) and the test helpers of tests/subscriber_helpers.py. Covers the
spool (durability, restart, torn tail, retention), the consumer modes (failover, shared,
key_shared), acks, flow control, batches, dead letters, start positions and malformed frames."""

import calendar
import glob
import json
import os
import stat
import struct
import subprocess
import time

import pytest

from conftest import CDC_BIN, wait_for
from pg import lsn_to_int
from subscriber_helpers import Subscriber, pb

OP = {1: "insert", 2: "update", 3: "delete", 4: "truncate", 5: "message"}


# --- helpers ------------------------------------------------------------------------------------

def value(v):
    kind = v.WhichOneof("kind")
    if kind == "null_value":
        return None
    return getattr(v, kind)


def row(r):
    return {c.name: value(c.value) for c in r.columns}


def ids(events):
    """(offset, delivery_count, op, id) of each event."""
    return [(e.offset, e.delivery_count, OP[e.op], row(e.new_row if e.op != 3 else e.key)["id"]) for e in events]


def socket_sub(schema, name="jobs", table="jobs", **kw):
    s = {"name": name, "tables": [f"{schema}.{table}"], "operations": ["insert", "update", "delete"],
         "sink": "socket"}
    s.update(kw)
    return s


def make_jobs(pg, schema, table="jobs"):
    pg.sql(f"create table {schema}.{table} (id int primary key, k int, note text)")


def insert(pg, schema, first, last, table="jobs", k=None):
    pg.sql(f"insert into {schema}.{table} select i, {k if k is not None else 'i'}, 'n' || i "
           f"from generate_series({first}, {last}) i")


def sock(c):
    return c.config["subscribers"]["socket"]


def attach(c, sub="jobs", **kw):
    s = Subscriber(sock(c), sub, **kw)
    return s


def collect(s, n, timeout=20):
    """Receives until n events arrived; returns them (fails with what it has on timeout)."""
    return s.events(n, timeout)


def wait_acked(s, offset, timeout=20):
    s.wait_acked(offset, timeout)


def confirmed(c):
    row_ = c.slot_row()
    return lsn_to_int(row_[1]) if row_ and row_[1] else 0


def wal_lsn(pg):
    return lsn_to_int(pg.sql("select pg_current_wal_lsn()::text")[0][0])


# --- delivery and the spool ---------------------------------------------------------------------

@pytest.mark.matrix
def test_events_arrive_with_dense_offsets_and_exact_fields(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, tag="send")])
    s = attach(c, consumer="worker-1", heartbeat_ms=200)
    assert s.subscribed.subscription == "jobs"
    assert s.subscribed.mode == pb.FAILOVER and s.subscribed.active
    assert (s.subscribed.head_offset, s.subscribed.acked_offset, s.subscribed.next_offset) == (0, 0, 1)
    insert(pg, schema, 1, 3)
    pg.sql(f"update {schema}.jobs set note = 'x' where id = 2")
    pg.sql(f"delete from {schema}.jobs where id = 3")
    evs = collect(s, 5)
    assert ids(evs) == [(1, 1, "insert", 1), (2, 1, "insert", 2), (3, 1, "insert", 3), (4, 1, "update", 2),
                        (5, 1, "delete", 3)]
    e = evs[3]
    assert (e.subscription, e.tag, e.schema, e.table) == ("jobs", "send", schema, "jobs")
    assert row(e.new_row) == {"id": 2, "k": 2, "note": "x"} and row(e.key) == {"id": 2}
    assert [x.tx_index for x in evs] == [0, 1, 2, 0, 0]
    assert len({x.commit_lsn for x in evs}) == 3 and evs[0].commit_lsn == evs[2].commit_lsn
    assert all(x.lsn <= x.commit_lsn and x.commit_time > 0 and x.xid > 0 for x in evs)
    s.ack([5])
    wait_acked(s, 5)
    s.close()
    # Reattaching from the acked position: nothing is delivered again.
    s2 = attach(c, heartbeat_ms=200)
    assert (s2.subscribed.head_offset, s2.subscribed.acked_offset, s2.subscribed.next_offset) == (5, 5, 6)
    insert(pg, schema, 10, 10)
    assert ids(collect(s2, 1)) == [(6, 1, "insert", 10)]
    assert "subscriber attached" in p.stderr() and "consumer=worker-1" in p.stderr()
    assert p.terminate() == 0


def test_absent_consumer_does_not_pin_the_slot_and_gets_everything_later(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 200)
    end = wal_lsn(pg)
    # Durably spooled is delivered for the slot: it moves on with nobody attached.
    wait_for(lambda: confirmed(c) >= end, 30, what="the slot to pass the spooled changes")
    assert p.terminate() == 0
    p = c.start()
    s = attach(c)
    evs = collect(s, 200)
    assert [e.offset for e in evs] == list(range(1, 201))
    assert [row(e.new_row)["id"] for e in evs] == list(range(1, 201))
    assert p.terminate() == 0


def test_socket_file_mode_and_peer_logged(pg, schema, cdc):
    make_jobs(pg, schema)
    c = cdc(subscriptions=[socket_sub(schema)])
    c.config["subscribers"]["mode"] = "0600"
    from conftest import to_yaml
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    p = c.start()
    assert stat.S_IMODE(os.stat(sock(c)).st_mode) == 0o600
    s = attach(c)
    s.close()
    wait_for(lambda: f"pid={os.getpid()} uid={os.getuid()}" in p.stderr(), 10, what="peer pid and uid in the log")
    assert p.terminate() == 0
    assert not os.path.exists(sock(c))


def test_unknown_subscription_and_non_socket_subscription_are_refused(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema),
                                    {"name": "out", "tables": [f"{schema}.*"], "sink": "stdout"}])
    for name, code, msg in [("nope", pb.Error.UNKNOWN_SUBSCRIPTION, "no subscription named nope"),
                            ("out", pb.Error.NOT_A_SOCKET_SUBSCRIPTION,
                             "subscription out does not deliver to the socket (its sink is another)")]:
        s = Subscriber(sock(c), name, expect_subscribed=False)
        f = s.recv(timeout=10)
        assert f.WhichOneof("kind") == "error" and (f.error.code, f.error.message) == (code, msg)
        assert s.recv(timeout=10) is None and s.closed
    assert p.terminate() == 0


# --- failover -----------------------------------------------------------------------------------

def test_failover_next_consumer_continues_from_last_ack(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    a = attach(c, consumer="a", heartbeat_ms=200)
    b = attach(c, consumer="b", heartbeat_ms=200)
    assert a.subscribed.active and not b.subscribed.active
    insert(pg, schema, 1, 10)
    got = collect(a, 10)
    assert [e.offset for e in got] == list(range(1, 11))
    a.ack([6])
    wait_acked(a, 6)
    assert b.recv(timeout=0.5) is None or b.last_kind == "heartbeat"
    a.kill()  # the active consumer dies with 7..10 unacked
    evs = collect(b, 4)
    assert ids(evs) == [(7, 2, "insert", 7), (8, 2, "insert", 8), (9, 2, "insert", 9), (10, 2, "insert", 10)]
    b.ack([10])
    insert(pg, schema, 11, 11)
    assert ids(collect(b, 1)) == [(11, 1, "insert", 11)]
    assert "failover: another consumer is active now" in p.stderr()
    assert p.terminate() == 0


def test_failover_hands_over_when_active_holds_past_ack_timeout(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, ack_timeout="500ms")])
    a = attach(c, consumer="a")
    b = attach(c, consumer="b")
    insert(pg, schema, 1, 3)
    assert [e.offset for e in collect(a, 3)] == [1, 2, 3]  # a never acks
    evs = collect(b, 3, timeout=15)
    assert ids(evs) == [(1, 2, "insert", 1), (2, 2, "insert", 2), (3, 2, "insert", 3)]
    assert "the active consumer did not acknowledge in time" in p.stderr()
    assert p.terminate() == 0


def test_max_unacked_limits_what_is_in_flight(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    s = attach(c, max_unacked=3)
    assert s.subscribed.max_unacked == 3
    insert(pg, schema, 1, 10)
    assert [e.offset for e in collect(s, 3)] == [1, 2, 3]
    assert s.events(1, timeout=1, fail=False) == []
    s.ack([2])
    assert [e.offset for e in collect(s, 2)] == [4, 5]
    assert s.events(1, timeout=1, fail=False) == []
    assert p.terminate() == 0


# --- shared and key_shared ----------------------------------------------------------------------

def test_shared_each_event_to_exactly_one_consumer(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    subs = [attach(c, consumer=f"w{i}", max_unacked=5) for i in range(3)]
    assert all(s.subscribed.mode == pb.SHARED for s in subs)
    insert(pg, schema, 1, 300)
    seen = {i: [] for i in range(3)}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in seen.values()) < 300 and time.monotonic() < deadline:
        for i, s in enumerate(subs):
            for e in s.events(1, timeout=0.05, fail=False, all_available=True):
                seen[i].append(e.offset)
                s.ack([e.offset])
    offsets = sorted(o for v in seen.values() for o in v)
    assert offsets == list(range(1, 301))  # every event exactly once
    assert all(len(v) > 0 for v in seen.values()), {i: len(v) for i, v in seen.items()}
    assert p.terminate() == 0


def test_shared_redelivers_after_ack_timeout_then_dead_letters(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="300ms",
                                               max_deliveries=2)])
    lazy = attach(c, consumer="lazy", max_unacked=1)
    insert(pg, schema, 1, 1)
    first = collect(lazy, 1)
    assert ids(first) == [(1, 1, "insert", 1)]
    good = attach(c, consumer="good", max_unacked=10)
    again = collect(good, 1, timeout=10)  # lazy never acks: after ack_timeout it goes to another
    assert ids(again) == [(1, 2, "insert", 1)]
    # good does not ack either: the second timeout is the last delivery (max_deliveries 2).
    wait_for(lambda: "moved an event to the dead letters" in p.stderr(), 10, what="dead letter")
    lazy.close()
    insert(pg, schema, 2, 2)
    assert ids(collect(good, 1, timeout=10)) == [(2, 1, "insert", 2)]  # offset 1 is gone from the queue
    good.ack([2])
    dead = attach(c, dead_letters=True)
    devs = collect(dead, 1)
    assert [(row(e.new_row)["id"], e.offset, e.delivery_count) for e in devs] == [(1, 1, 1)]
    # cdc tail --dead reads the same.
    out = subprocess.run([CDC_BIN, "tail", "-s", sock(c), "jobs", "--dead", "--from", "earliest", "--count", "1",
                          "--timeout", "10"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    assert line["new"]["id"] == 1 and line["subscription"] == "jobs" and line["offset"] == 1
    # with its history, as the Delivery's DeadLetter has it (it used to be left out)
    history = line["dead_letter"]
    assert time.time() - 60 < calendar.timegm(time.strptime(history.pop("dead_time")[:19], "%Y-%m-%dT%H:%M:%S"))
    assert history == {"original_offset": 1, "deliveries": 2, "reason": "ack timeout"}
    assert list(line)[-3:] == ["commit_lsn", "tx_index", "commit_time"]
    assert p.terminate() == 0


def test_key_shared_keeps_per_key_order(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="key_shared")])
    subs = [attach(c, consumer=f"w{i}", max_unacked=1000) for i in range(3)]
    insert(pg, schema, 1, 30)
    for r in range(5):
        pg.sql(f"update {schema}.jobs set note = 'r{r}'")
    per = {i: [] for i in range(3)}
    total = 30 * 6
    deadline = time.monotonic() + 30
    while sum(len(v) for v in per.values()) < total and time.monotonic() < deadline:
        for i, s in enumerate(subs):
            for e in s.events(1, timeout=0.05, fail=False, all_available=True):
                per[i].append(e)
                s.ack([e.offset])
    assert sum(len(v) for v in per.values()) == total
    owner = {}
    for i, evs in per.items():
        for e in evs:
            k = row(e.key)["id"]
            assert owner.setdefault(k, i) == i, f"key {k} went to two consumers"
        for k in {row(e.key)["id"] for e in evs}:
            notes = [row(e.new_row)["note"] for e in evs if row(e.key)["id"] == k]
            assert notes == [f"n{k}"] + [f"r{r}" for r in range(5)]
    assert len(set(owner.values())) >= 2
    assert p.terminate() == 0


# --- batches, start positions -------------------------------------------------------------------

def test_batch_transaction_delivers_one_frame_per_transaction(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, batch="transaction")])
    s = attach(c)
    assert s.subscribed.batch_transaction
    insert(pg, schema, 1, 4)
    insert(pg, schema, 5, 5)
    insert(pg, schema, 6, 8)
    batches = [s.delivery(timeout=10) for _ in range(3)]
    assert [[e.offset for e in b] for b in batches] == [[1, 2, 3, 4], [5], [6, 7, 8]]
    assert p.terminate() == 0


def test_start_positions(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 5)
    s = attach(c, heartbeat_ms=200)
    collect(s, 5)
    s.ack([3])
    wait_acked(s, 3)
    s.close()
    s = attach(c, start="earliest")
    assert s.subscribed.next_offset == 1
    assert [e.offset for e in collect(s, 5)] == [1, 2, 3, 4, 5]
    s.close()
    s = attach(c, start="offset", start_offset=5)
    assert [e.offset for e in collect(s, 1)] == [5]
    s.close()
    s = attach(c)  # offset 5 skipped 4: acked is 4 now
    assert (s.subscribed.acked_offset, s.subscribed.next_offset) == (4, 5)
    s.close()
    s = attach(c, start="latest")
    assert s.subscribed.next_offset == 6 and s.subscribed.acked_offset == 5
    insert(pg, schema, 6, 6)
    assert [e.offset for e in collect(s, 1)] == [6]
    s.close()
    # Past the head: offsets are given as events are spooled, so it starts after the head (as
    # latest), says so in next_offset, and the log says why.
    s = attach(c, start="offset", start_offset=1000)
    assert (s.subscribed.head_offset, s.subscribed.acked_offset, s.subscribed.next_offset) == (6, 6, 7)
    assert "start_offset is out of the spool's range; starting at its nearest end" in p.stderr()
    assert "start_offset=1000 first_offset=1 head_offset=6 next_offset=7" in p.stderr()
    insert(pg, schema, 7, 7)
    assert [e.offset for e in collect(s, 1)] == [7]
    assert p.terminate() == 0


def test_a_connection_that_ends_mid_frame(pg, schema, cdc):
    """A client acks 1 in a whole frame, sends half of an Ack of 2, and closes: the whole frame
    counts, the half is dropped (and logged), and 2 goes to the next consumer as a redelivery."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    s = attach(c, consumer="halfway")
    insert(pg, schema, 1, 2)
    assert [e.offset for e in collect(s, 2)] == [1, 2]
    half = Subscriber.encode(pb.ClientFrame(ack=pb.Ack(offsets=[2])))
    s.send_raw(Subscriber.encode(pb.ClientFrame(ack=pb.Ack(offsets=[1]))) + half[:len(half) - 2])
    s.close()
    wait_for(lambda: "subscriber disconnected consumer=halfway" in p.stderr(), 10, what="the disconnection")
    assert "ended in the middle of a frame; the partial frame is dropped consumer=halfway" in p.stderr()
    nxt = attach(c, consumer="next")
    assert nxt.subscribed.acked_offset == 1
    assert [(e.offset, e.delivery_count) for e in collect(nxt, 1)] == [(2, 2)]
    assert p.terminate() == 0


def read_acking(s, until, pause_after=None, pause=0.0, timeout=30):
    """Offsets of every event up to offset `until`, acknowledging each delivery as it comes; after
    the first delivery reaching pause_after, sleeps pause seconds once (a slow consumer)."""
    got = []
    while not got or got[-1] < until:
        d = s.delivery(timeout)
        assert d is not None, "no delivery within %ss after offset %s of %s" % (timeout, got[-1] if got else None, until)
        got.extend(e.offset for e in d)
        s.ack_events(d)
        if pause_after is not None and got[-1] >= pause_after:
            pause_after = None
            time.sleep(pause)
    return got


def test_reading_again_from_earliest_keeps_the_acknowledged_segments_ahead(pg, schema, cdc):
    """A consumer that starts from `earliest` reads acknowledged events again. Retention deletes
    segment files (64 MiB) whose events are all acknowledged, once a second: it must leave those the
    consumer has not read yet, or the read stops for good at the next one (the fault harness's
    spool read stalled at offset 117,589 of 163,018 this way)."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    segs_dir = os.path.join(c.state_dir, "spool", "jobs", "events")
    n, last = 60000, 0  # of 1.2 kB each: more than one segment
    for attempt in range(3):
        pg.sql(f"insert into {schema}.jobs select i, i, repeat('x', 1200) "
               f"from generate_series({last + 1}, {last + n}) i")
        last += n
        a = attach(c)
        read_acking(a, last)
        wait_acked(a, last)
        a.close()
        b = attach(c, start="earliest")
        first = b.subscribed.first_offset
        segs = sorted(int(os.path.basename(f)[:-4]) for f in glob.glob(os.path.join(segs_dir, "*.seg")))
        if len(segs) > 1 and segs[0] == first:
            break  # a segment wholly acknowledged, the retention's next to delete, is read again
        b.close()  # the once-a-second deletion came between the ack and the Subscribe: again
    else:
        raise AssertionError("no attempt read a wholly acknowledged segment again")
    assert b.subscribed.next_offset == first
    # It reads slowly: the deletion runs at least twice meanwhile.
    assert read_acking(b, last, pause_after=first, pause=2.5) == list(range(first, last + 1))
    assert p.terminate() == 0


# --- crashes and the spool ------------------------------------------------------------------------

def test_kill_9_during_load_loses_nothing_and_redelivers_only_unacked(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    s = attach(c, heartbeat_ms=100)
    load = subprocess.Popen(["/usr/bin/python3", "-c", f"""
import psycopg2, time
conn = psycopg2.connect({pg.dsn!r}); conn.autocommit = True
cur = conn.cursor()
for i in range(1, 401):
    cur.execute("insert into {schema}.jobs values (%s, %s, 'x')", (i, i))
    time.sleep(0.005)
"""])
    got = collect(s, 100, timeout=30)
    s.ack([got[-1].offset])
    acked = got[-1].offset
    wait_acked(s, acked)
    # More arrives unacknowledged, then the daemon dies mid-load.
    more = collect(s, 20, timeout=30)
    p.kill()
    s.close()
    assert load.wait(60) == 0
    p = c.start()
    s = attach(c)
    assert s.subscribed.acked_offset == acked
    n = 400 - acked
    evs = collect(s, n, timeout=60)
    assert [e.offset for e in evs] == list(range(acked + 1, 401))  # nothing acked again, nothing lost
    assert sorted(row(e.new_row)["id"] for e in evs) == list(range(acked + 1, 401))
    assert {e.offset for e in more} <= {e.offset for e in evs}
    assert s.events(1, timeout=1, fail=False) == []  # the spool did not append a resent change twice
    assert p.terminate() == 0


def test_consumer_killed_mid_batch_gets_redelivery_from_last_ack(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, batch="transaction")])
    s = attach(c, heartbeat_ms=100)
    insert(pg, schema, 1, 3)
    insert(pg, schema, 4, 6)
    b1 = s.delivery(timeout=10)
    s.ack([b1[-1].offset])
    wait_acked(s, 3)
    b2 = s.delivery(timeout=10)
    assert [e.offset for e in b2] == [4, 5, 6]
    s.kill()  # dies before acknowledging the second batch
    s = attach(c)
    again = s.delivery(timeout=10)
    assert [(e.offset, e.delivery_count) for e in again] == [(4, 2), (5, 2), (6, 2)]
    assert p.terminate() == 0


def test_torn_spool_tail_is_cut_at_restart(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 3)
    wait_for(lambda: confirmed(c) >= wal_lsn(pg), 30, what="spooled")
    assert p.terminate() == 0
    segs = sorted(glob.glob(os.path.join(c.state_dir, "spool", "jobs", "events", "*.seg")))
    assert segs
    torn = b"\x01\x02torn record that never finished"
    with open(segs[-1], "ab") as f:
        f.write(torn)
    p = c.start()
    wait_for(lambda: "spool recovered" in p.stderr(), 10, what="recovery log")
    assert f"torn_bytes_cut={len(torn)}" in p.stderr()
    insert(pg, schema, 4, 4)
    s = attach(c)
    assert ids(collect(s, 4)) == [(1, 1, "insert", 1), (2, 1, "insert", 2), (3, 1, "insert", 3),
                                  (4, 1, "insert", 4)]
    assert p.terminate() == 0


# --- retention ------------------------------------------------------------------------------------

def test_drop_oldest_reports_the_dropped_range(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, retention={"max_events": 5, "when_full": "drop_oldest"})])
    insert(pg, schema, 1, 12)
    wait_for(lambda: "retention discarded events" in p.stderr(), 15, what="retention")
    s = attach(c)
    f = s.recv(timeout=10)
    assert f.WhichOneof("kind") == "dropped"
    assert (f.dropped.from_offset, f.dropped.to_offset) == (1, 7)
    assert [e.offset for e in collect(s, 5)] == [8, 9, 10, 11, 12]
    assert p.terminate() == 0


def test_block_stops_the_slot_until_consumers_catch_up(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, retention={"max_events": 5, "when_full": "block"})])
    for i in range(1, 6):
        insert(pg, schema, i, i)
    wait_for(lambda: "paused reading the slot" in p.stderr(), 15, what="pause")
    held = wal_lsn(pg)
    for i in range(6, 11):
        insert(pg, schema, i, i)
    end = wal_lsn(pg)
    time.sleep(1)
    assert confirmed(c) <= held  # the five changes after the pause are not read, so not confirmed
    s = attach(c)
    got = []
    while len(got) < 10:
        evs = s.events(1, timeout=15, all_available=True)
        got += evs
        s.ack([evs[-1].offset])
    assert [row(e.new_row)["id"] for e in got] == list(range(1, 11))  # nothing lost
    wait_for(lambda: confirmed(c) >= end, 30, what="the slot to move on")
    assert p.terminate() == 0


# --- bad input ----------------------------------------------------------------------------------

def test_malformed_and_oversized_frames_close_only_that_connection(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    good = attach(c)
    cases = [
        (struct.pack(">I", 3) + b"\xff\xff\xff", "malformed ClientFrame protobuf"),
        (struct.pack(">I", 16 * 1024 * 1024 + 1), "over the 16 MiB limit"),
        (struct.pack(">I", 0), "frame has no message kind"),
    ]
    for raw, msg in cases:
        f = Subscriber.raw(sock(c), raw)
        assert f.WhichOneof("kind") == "error" and f.error.code == pb.Error.BAD_FRAME
        assert msg in f.error.message, f.error.message
    # An ack before subscribing.
    raw = Subscriber.encode(pb.ClientFrame(ack=pb.Ack(offsets=[1])))
    bad = Subscriber.raw(sock(c), raw)
    assert "Ack before Subscribe" in bad.error.message
    insert(pg, schema, 1, 2)
    assert [e.offset for e in collect(good, 2)] == [1, 2]  # the good consumer never noticed
    assert p.terminate() == 0


def test_limits_are_refused_with_a_bad_frame_that_names_them(pg, schema, cdc):
    """An empty Ack, an Ack of 65,537 offsets, a Nack delayed over an hour: each closes that
    connection with Error BAD_FRAME naming the limit; an Ack sent before it in the same write counts,
    and what the consumer held goes to the next one."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    insert(pg, schema, 1, 3)
    cases = [(pb.Ack(offsets=[]), "Ack: no offsets"),
             (pb.Ack(offsets=list(range(1, 65538))), "Ack: 65537 offsets, at most 65536 in one frame"),
             (pb.Nack(offsets=[3], delay_ms=3600001), "Nack: delay_ms 3600001 is over 3600000")]
    for i, (msg, text) in enumerate(cases, 1):
        s = attach(c, consumer=f"c{i}")
        assert [e.offset for e in collect(s, 4 - i)] == list(range(i, 4))
        bad = pb.ClientFrame(ack=msg) if isinstance(msg, pb.Ack) else pb.ClientFrame(nack=msg)
        s.send_raw(Subscriber.encode(pb.ClientFrame(ack=pb.Ack(offsets=[i]))) + Subscriber.encode(bad))
        frames = s.wait_closed(10)
        errors = [f.error for f in frames if f.WhichOneof("kind") == "error"]
        assert [(e.code, e.message) for e in errors] == [(pb.Error.BAD_FRAME, text)]
    nxt = attach(c, consumer="next")
    assert nxt.subscribed.acked_offset == 3
    assert p.running() and p.terminate() == 0


# --- cdc tail -----------------------------------------------------------------------------------

def tail(c, *args, timeout=60):
    return subprocess.run([CDC_BIN, "tail", "-c", c.path] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def test_cdc_tail_prints_acks_and_stops(pg, schema, cdc):
    import json
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, tag="t")])
    insert(pg, schema, 1, 3)
    out = tail(c, "jobs", "--count", "2", "--no-ack")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [(e["offset"], e["delivery_count"], e["new"]["id"], e["tag"]) for e in lines] == [
        (1, 1, 1, "t"), (2, 1, 2, "t")]
    assert lines[0]["subscription"] == "jobs" and lines[0]["op"] == "insert" and lines[0]["key"] == {"id": 1}
    # --no-ack: delivered again (count 2), then acked this time; --timeout ends the wait for more.
    out = tail(c, "jobs", "--timeout", "1")
    assert out.returncode == 0, out.stderr
    assert [(e["offset"], e["delivery_count"]) for e in map(json.loads, out.stdout.splitlines())] == [
        (1, 2), (2, 2), (3, 1)]
    out = tail(c, "jobs", "--timeout", "1")
    assert (out.returncode, out.stdout) == (0, "")  # everything was acknowledged
    out = tail(c, "jobs", "--from", "2", "--count", "1")
    assert [e["offset"] for e in map(json.loads, out.stdout.splitlines())] == [2]
    out = tail(c, "nope", "--timeout", "1")
    assert out.returncode == 1 and "no subscription named nope" in out.stderr
    assert p.terminate() == 0
    out = tail(c, "jobs", "--timeout", "1")
    assert out.returncode == 1 and sock(c) in out.stderr


def test_cdc_tail_and_status_wait_for_cdc_to_start(pg, schema, cdc):
    """Issue 31: `cdc tail` and `cdc status --wait` started before cdc make its sockets wait for
    them, saying what they wait for, and give up after their --wait with the usual error."""
    import json
    make_jobs(pg, schema)
    c = cdc(subscriptions=[socket_sub(schema)])
    missing = os.path.join(os.path.dirname(sock(c)), "missing.sock")
    out = subprocess.run([CDC_BIN, "tail", "-s", missing, "jobs", "--wait", "0.3"], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr.splitlines()) == (1, "", [
        f"cdc tail: waiting up to 1 s for cdc's subscriber socket at {missing} (not there yet)",
        f"cdc tail: no subscriber socket at {missing}: is cdc running? (the path comes from -s, -c FILE's "
        "subscribers.socket or CDC_SUBSCRIBER_SOCKET)"])
    out = subprocess.run([CDC_BIN, "tail", "-s", missing, "jobs", "--wait", "0"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "waiting" not in out.stderr and "no subscriber socket" in out.stderr
    out = subprocess.run([CDC_BIN, "status", "-s", missing, "--wait", "0.2"], capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout) == (1, "") and out.stderr.startswith(
        f"cdc status: waiting up to 1 s for cdc's status socket at {missing} (not there yet)\n"
        f"cdc status: no status socket at {missing}: is cdc running?")
    # Started before cdc: both say they wait, then do their work once it is there.
    d = cdc.tmp_path
    t = subprocess.Popen([CDC_BIN, "tail", "-c", c.path, "jobs", "--count", "1", "--wait", "60"],
                         stdout=open(os.path.join(d, "tail.out"), "w"), stderr=open(os.path.join(d, "tail.err"), "w"))
    s = subprocess.Popen([CDC_BIN, "status", "-c", c.path, "--wait", "60"],
                         stdout=open(os.path.join(d, "status.out"), "w"), stderr=open(os.path.join(d, "status.err"), "w"))

    def said(name, what):
        with open(os.path.join(d, name)) as f:
            return what in f.read()
    wait_for(lambda: said("tail.err", f"cdc tail: waiting up to 60 s for cdc's subscriber socket at {sock(c)} "
                                      "(not there yet)")
             and said("status.err", "cdc status: waiting up to 60 s for cdc's status socket at "
                                    f"{c.config['status']['socket']} (not there yet)"),
             what="both clients to say they wait")
    p = c.run()
    assert s.wait(timeout=90) == 0, open(os.path.join(d, "status.err")).read()
    assert said("status.out", "\nsource  streaming  slot=")
    insert(pg, schema, 1, 1)  # after cdc status --wait: the slot streams
    assert t.wait(timeout=90) == 0, open(os.path.join(d, "tail.err")).read()
    with open(os.path.join(d, "tail.out")) as f:
        assert [json.loads(x)["new"]["id"] for x in f.read().splitlines()] == [1]
    assert p.terminate() == 0


# --- connections that never subscribe (issue: SIGSEGV when a consumer left beside one) -----------

def silent(c):
    """A connection to the subscriber socket that sends nothing, as a client still starting does."""
    import socket as socket_
    s = socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM)
    s.connect(sock(c))
    return s


def test_consumer_leaving_beside_an_unsubscribed_connection_keeps_cdc_running(pg, schema, cdc):
    """The reported story: a failover subscription, a connection that never subscribes, `cdc tail`
    receives one event, acks it and leaves. cdc used to hand the failover to the silent connection
    (it took the connection after the leaving consumer on the pending list for the next consumer)
    and die with SIGSEGV."""
    import json
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    idle = silent(c)
    wait_for(lambda: "subscriber connected" in p.stderr(), what="the silent connection to be accepted")
    insert(pg, schema, 1, 1)
    out = tail(c, "jobs", "--count", "1")
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["offset"] for x in out.stdout.splitlines()] == [1]
    insert(pg, schema, 2, 2)
    out = tail(c, "jobs", "--count", "1")
    assert out.returncode == 0, out.stderr
    assert [(e["offset"], e["new"]["id"]) for e in map(json.loads, out.stdout.splitlines())] == [(2, 2)]
    assert p.running(), p.stderr()
    assert "another consumer is active now" not in p.stderr()
    idle.close()
    assert p.terminate() == 0


def test_shared_and_key_shared_consumers_beside_unsubscribed_connections(pg, schema, cdc):
    """The same in the shared modes: consumers that subscribe while silent connections are open,
    ack and leave; the silent ones never receive and cdc keeps serving."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared"),
                                    socket_sub(schema, name="keyed", consumers="key_shared")])
    idle = [silent(c)]
    a = attach(c, consumer="a")
    idle.append(silent(c))
    b = attach(c, "keyed", consumer="b")
    idle.append(silent(c))
    insert(pg, schema, 1, 4)
    ea, eb = collect(a, 4), collect(b, 4)
    assert [e.offset for e in ea] == [1, 2, 3, 4] and sorted(e.offset for e in eb) == [1, 2, 3, 4]
    a.ack([e.offset for e in ea])
    b.ack([e.offset for e in eb])
    wait_acked(a, 4)
    wait_acked(b, 4)
    a.close()
    b.close()
    a2, b2 = attach(c, consumer="a2"), attach(c, "keyed", consumer="b2")
    insert(pg, schema, 5, 5)
    assert [e.offset for e in collect(a2, 1)] == [5] and [e.offset for e in collect(b2, 1)] == [5]
    for s in idle:
        s.setblocking(False)
        try:
            got = s.recv(1)
            raise AssertionError("a silent connection was sent %r" % got if got else "was closed")
        except BlockingIOError:
            pass  # open, and nothing was sent to it
        s.close()
    assert p.running(), p.stderr()
    assert p.terminate() == 0


# --- connections that cannot wear the socket down -------------------------------------------------

def read_closing(s, timeout=5.0):
    """Everything a connection cdc closes sends until the end of its stream: the ServerFrames."""
    import socket as socket_
    s.settimeout(timeout)
    got = bytearray()
    while True:
        try:
            chunk = s.recv(1 << 16)
        except (socket_.timeout, BlockingIOError):
            raise AssertionError("still open; received %r" % bytes(got))
        except ConnectionResetError:
            raise AssertionError("reset instead of closed; received %r" % bytes(got))
        if not chunk:
            break
        got += chunk
    frames = []
    while len(got) >= 4:
        (n,) = struct.unpack_from(">I", got)
        frames.append(pb.ServerFrame.FromString(bytes(got[4:4 + n])))
        del got[:4 + n]
    return frames


def cdc_rss_kib(p):
    with open(f"/proc/{p.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_connection_flood_gives_way_to_a_consumer_and_silent_ones_are_closed(pg, schema, cdc):
    """2,000 connections that never subscribe (the consumer's uid): the table (1,024) is full, so the
    oldest silent connections make room, each told why; a real consumer attaches at once and
    receives; every silent connection is closed by the first-frame deadline (10 s)."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    idle = []
    t0 = time.monotonic()
    for _ in range(2000):
        idle.append(silent(c))
    opened = time.monotonic()
    # connect() succeeds once the kernel queues a connection; wait until cdc has taken them all.
    wait_for(lambda: p.stderr().count("subscriber connected") >= 2000, 30, interval=0.5,
             what="cdc to accept the 2000 connections")
    opened = time.monotonic()
    t = time.monotonic()
    s = attach(c, consumer="real")
    insert(pg, schema, 1, 3)
    assert [e.offset for e in collect(s, 3)] == [1, 2, 3]
    attach_s = time.monotonic() - t
    print(f"\n2000 silent connections opened in {opened - t0:.1f} s; a consumer attached and received in "
          f"{attach_s:.2f} s")
    assert attach_s < 5
    # The oldest gave way to newer ones, with an Error they can read.
    frames = read_closing(idle[0])
    assert [(f.WhichOneof("kind"), f.error.code) for f in frames] == [("error", pb.Error.CONNECTION_LIMIT)]
    assert "closed to make room" in frames[0].error.message
    # The rest are closed by the deadline: 10 s after they were accepted.
    deadline = opened + 10 + 10
    codes = {}
    for i, x in enumerate(idle[1:]):
        frames = read_closing(x, timeout=max(0.5, deadline - time.monotonic()))
        assert len(frames) == 1 and frames[0].WhichOneof("kind") == "error", (i, frames)
        codes[frames[0].error.code] = codes.get(frames[0].error.code, 0) + 1
        x.close()
    closed_s = time.monotonic() - opened
    print(f"all silent connections closed {closed_s:.1f} s after they were opened: {codes}")
    assert set(codes) == {pb.Error.CONNECTION_LIMIT, pb.Error.SUBSCRIBE_TIMEOUT}
    assert codes[pb.Error.SUBSCRIBE_TIMEOUT] <= 1023
    assert closed_s >= 9
    # The consumer was never disturbed.
    insert(pg, schema, 4, 4)
    assert [e.offset for e in collect(s, 1)] == [4]
    assert p.running(), p.stderr()
    assert p.terminate() == 0


def test_refused_client_that_writes_subscribe_first_reads_the_error(pg, schema, cdc):
    """Every place of the table taken by subscribed consumers: a new client sends its Subscribe and
    gets to read the Error (no broken pipe, no reset)."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    subs = [attach(c, consumer=f"w{i}") for i in range(1024)]
    try:
        attach(c, consumer="one-too-many")
        raise AssertionError("a 1025th consumer was let in")
    except Exception as e:  # ServerError, from the Subscribed it expected
        assert getattr(e, "code", None) == "CONNECTION_LIMIT", repr(e)
        assert "too many subscriber connections" in e.message
    subs.pop().close()
    wait_for(lambda: p.stderr().count("subscriber disconnected") >= 2, 10, what="the refused and the closed one")
    late = attach(c, consumer="late")  # a place is free again
    assert late.subscribed.mode == pb.SHARED
    for x in subs:
        x.close()
    assert p.terminate() == 0


def test_first_frame_timeout_and_max_connections_are_settings(pg, schema, cdc):
    """subscribers.first_frame_timeout: 1s closes a silent connection after a second, with an Error
    naming the setting; subscribers.max_connections: 2 refuses a third subscribed consumer."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")],
                     subscribers={"socket": os.path.join(cdc.sockdir, "limits.sock"),
                                  "first_frame_timeout": "1s", "max_connections": 2})
    quiet = silent(c)
    frames = read_closing(quiet, timeout=10)
    assert [(f.WhichOneof("kind"), f.error.code) for f in frames] == [("error", pb.Error.SUBSCRIBE_TIMEOUT)]
    assert frames[0].error.message == "no Subscribe within 1000 ms (subscribers.first_frame_timeout)"
    subs = [attach(c, consumer=f"w{i}") for i in range(2)]
    try:
        attach(c, consumer="third")
        raise AssertionError("a third consumer was let in past max_connections: 2")
    except Exception as e:
        assert getattr(e, "code", None) == "CONNECTION_LIMIT", repr(e)
    insert(pg, schema, 1, 2)
    got = subs[0].events(1, timeout=20, fail=False, all_available=True) + \
        subs[1].events(1, timeout=20, fail=False, all_available=True)
    assert sorted(e.offset for e in got) == [1, 2]
    for x in subs:
        x.close()
    assert p.terminate() == 0


def test_a_consumer_that_stops_reading_does_not_hold_up_the_others(pg, schema, cdc):
    """A shared subscription, a consumer that stops reading, another that reads and acks: the second
    receives everything (the first's deliveries time out and come to it), and what cdc buffers for
    the stalled one stays bounded (1 MiB high-water mark) instead of growing by each redelivery."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1s")])
    stalled = attach(c, consumer="stalled", max_unacked=1000)
    good = attach(c, consumer="good", max_unacked=1000)
    rss0 = cdc_rss_kib(p)
    n = 3000
    pg.sql(f"insert into {schema}.jobs select i, i, repeat('x', 4000) from generate_series(1, {n}) i")
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        evs = good.events(1, timeout=1, fail=False, all_available=True)
        if evs:
            good.ack([e.offset for e in evs])
            seen.update(e.offset for e in evs)
    rss1 = cdc_rss_kib(p)
    assert seen == set(range(1, n + 1)), f"{len(seen)} of {n}"
    # Everything waiting for the stalled consumer, read now: bounded by the high-water mark (and
    # the socket's own buffers).
    stalled.sock.setblocking(False)
    backlog = 0
    while True:
        try:
            chunk = stalled.sock.recv(1 << 20)
        except BlockingIOError:
            time.sleep(0.2)
            try:
                chunk = stalled.sock.recv(1 << 20)
            except BlockingIOError:
                break
        if not chunk:
            break
        backlog += len(chunk)
    print(f"\nstalled consumer's backlog {backlog >> 10} KiB; cdc RSS {rss0} KiB before, {rss1} KiB after "
          f"{n} events of 4 KB")
    assert backlog < 3 * 1024 * 1024
    assert rss1 - rss0 < 64 * 1024
    assert p.terminate() == 0
