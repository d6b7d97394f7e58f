"""test_socket_model.py: the subscriber socket's randomized state-machine test (socket_model.py), a
bounded run for `make check`, and focused regressions of the bugs it found.

CDC_MODEL_SEED replays a seed; CDC_MODEL_STEPS bounds the run (default 400; make check-model: 700)."""

import os
import random
import select
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from socket_model import Model  # noqa: E402
from conftest import wait_for  # noqa: E402
from subscriber_helpers import FRAME_MAX  # noqa: E402
from test_socket import attach, collect, make_jobs, row, socket_sub  # noqa: E402


def test_socket_model_bounded_run(pg, tmp_path):
    seed = int(os.environ.get("CDC_MODEL_SEED") or random.randrange(1 << 31))
    print("socket model seed %d" % seed)
    m = Model(seed, pg, str(tmp_path), log=lambda s: print(s, flush=True))
    stats = m.run(steps=int(os.environ.get("CDC_MODEL_STEPS", "400")))
    assert stats["deliveries"] > 0 and stats["settles"] >= 1


# --- regressions --------------------------------------------------------------------------------

def readable(s):
    return select.select([s.sock], [], [], 0)[0]


def insert_big(pg, schema, first, last):
    """Rows of 1 MB each: a consumer that does not read has its socket buffer full after one, so the
    Error frame cdc answers a bad frame with stays in cdc's output buffer."""
    pg.sql(f"insert into {schema}.jobs select i, i, repeat('x', 1000000) from generate_series({first}, {last}) i")

def test_bad_frame_then_hang_up_frees_the_failover(pg, schema, cdc):
    """The active failover consumer, its socket buffer full, sends an oversized frame and hangs up
    without reading. cdc used to keep that connection for ever (the Error frame never drained, and its
    event callback was dropped with the Error, so the failed write went unnoticed): the subscription
    stalled, nothing more reached the next consumer."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, ack_timeout="1h")])
    a = attach(c, consumer="a")
    b = attach(c, consumer="b")
    assert a.subscribed.active and not b.subscribed.active
    insert_big(pg, schema, 1, 3)
    wait_for(lambda: readable(a), what="deliveries to a")
    a.send_raw((FRAME_MAX + 1).to_bytes(4, "big"))
    wait_for(lambda: "over the 16 MiB limit" in p.stderr(), what="cdc to read the bad frame")
    a.close()
    evs = collect(b, 3, timeout=30)
    # 3 was never sent to a: its output was over the 1 MiB high-water mark after 1 and 2; 2 never
    # left cdc's output (its socket's buffer was full with 1): withdrawn, it was no delivery
    assert [(e.offset, e.delivery_count) for e in evs] == [(1, 2), (2, 1), (3, 1)]
    b.ack([3])
    b.wait_acked(3, 30)
    assert p.running(), p.stderr()
    assert "subscriber disconnected consumer=a" in p.stderr()
    assert p.terminate() == 0


def test_bad_frame_returns_what_the_consumer_held_at_once(pg, schema, cdc):
    """A shared consumer that sends a malformed frame and then neither reads nor hangs up: what it
    held goes to the other consumer at once, not when its peer gets round to reading the Error."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1h", max_unacked=2)])
    a = attach(c, consumer="a")
    insert_big(pg, schema, 1, 2)
    wait_for(lambda: readable(a), what="deliveries to a")  # both are a's: it was alone
    b = attach(c, consumer="b")
    a.send_raw(b"\x00\x00\x00\x03\x12\xff\xff")
    # 2 never left cdc's output (a's socket buffer was full with 1): withdrawn, not counted
    assert sorted((e.offset, e.delivery_count) for e in collect(b, 2, timeout=30)) == [(1, 2), (2, 1)]
    a.close()
    assert p.terminate() == 0


def test_key_shared_batch_keeps_a_key_with_its_consumer(pg, schema, cdc):
    """key_shared with batch: transaction. a holds row 1's insert; a transaction then inserts row 2
    (a new key: it goes to b, the least loaded) and updates row 1. The update used to ride along in
    b's batch while a still held the insert: row 1 in flight to two consumers, its order lost. Now the
    batch ends where the key is another consumer's."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="key_shared", batch="transaction",
                                               ack_timeout="1h")])
    a = attach(c, consumer="a")
    pg.sql(f"insert into {schema}.jobs values (1, 1, 'a')")
    assert [e.offset for e in collect(a, 1)] == [1]
    b = attach(c, consumer="b")
    pg.sql(f"begin; insert into {schema}.jobs values (2, 2, 'b'); "
           f"update {schema}.jobs set note = 'c' where id = 1; commit")
    assert [(e.offset, row(e.new_row)["id"]) for e in collect(b, 1)] == [(2, 2)]
    assert [(e.offset, row(e.new_row)["id"]) for e in collect(a, 1)] == [(3, 1)]
    assert b.events(1, timeout=1, fail=False) == []
    assert p.terminate() == 0
