"""test_queue.py: the subscriber socket as a work queue (issue 15): acks that are refused when the
offset is not in flight to the consumer (answered by Acked), Nack with a delay and a reason,
Progress, dead letters that keep their history, delivery counts across a kill -9, and fair
dispatch among shared workers. A real PostgreSQL, cdc, and consumers through
tests/subscriber_helpers.py (cdc_client, the Python client library, plus test helpers)."""

import json
import threading
import time

from conftest import wait_for
from subscriber_helpers import Subscriber, pb
from test_socket import attach, collect, insert, make_jobs, row, socket_sub
from test_status import get


def spooled(c):
    s = attach(c, consumer="probe", max_unacked=1)
    head = s.subscribed.head_offset
    s.close()
    return head


def refused(acked):
    return [(r.offset, pb.Refused.Reason.Name(r.reason)) for r in acked.refused]


def one_answer(s):
    (a,) = s.answers(1)
    return a


# --- acks -----------------------------------------------------------------------------------------

def test_ack_of_another_consumers_delivery_is_refused_and_it_is_redelivered_when_its_holder_dies(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    a = attach(c, consumer="a", max_unacked=1)
    b = attach(c, consumer="b", max_unacked=1)
    insert(pg, schema, 1, 2)
    (ea,), (eb,) = collect(a, 1), collect(b, 1)
    assert {ea.offset, eb.offset} == {1, 2}
    b.ack([ea.offset])  # a's
    assert refused(one_answer(b)) == [(ea.offset, "OTHER_CONSUMER")]
    b.ack([99, eb.offset])  # never delivered, then its own
    ans = one_answer(b)
    assert refused(ans) == [(99, "NOT_DELIVERED")] and ans.answered == 1
    b.ack([eb.offset])  # again
    assert refused(one_answer(b)) == [(eb.offset, "ALREADY_ACKED")]
    a.kill()  # a dies holding its delivery: b gets it, delivered a second time
    (again,) = collect(b, 1, timeout=10)
    assert (again.offset, again.delivery_count) == (ea.offset, 2)
    b.ack([again.offset])
    ans = one_answer(b)
    assert (refused(ans), ans.acked_offset) == ([], 2)
    # The operator sees the same: 2 acked, 3 refused, nothing in flight, in /status and /metrics.
    figures = ("acked", "refused", "nacked", "progressed", "in_flight", "redelivered")

    def jobs():
        return next(s for s in json.loads(get(c, "/status")[1])["subscriptions"] if s["name"] == "jobs")
    wait_for(lambda: jobs()["acked"] == 2, 10, what="the figures to be published")
    assert {k: jobs()[k] for k in figures} == dict(zip(figures, (2, 3, 0, 0, 0, 1)))
    metrics = get(c, "/metrics")[1]
    for line in ('cdc_subscription_acked_events_total{subscription="jobs"} 2',
                 'cdc_subscription_refused_total{subscription="jobs"} 3',
                 'cdc_subscription_in_flight_events{subscription="jobs"} 0'):
        assert line in metrics.splitlines(), line
    assert p.terminate() == 0


def test_failover_acks_are_cumulative_and_only_from_the_active_consumer(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    a = attach(c, consumer="a")
    b = attach(c, consumer="b")
    insert(pg, schema, 1, 5)
    assert [e.offset for e in collect(a, 5)] == [1, 2, 3, 4, 5]
    b.ack([5])  # b is not active
    assert refused(one_answer(b)) == [(5, "NOT_ACTIVE")]
    a.ack([9])  # never delivered: no effect at all (not even up to 5)
    ans = one_answer(a)
    assert (refused(ans), ans.acked_offset) == ([(9, "NOT_DELIVERED")], 0)
    a.ack([3])  # cumulative: 1..3
    assert (refused(ans := one_answer(a)), ans.acked_offset) == ([], 3)
    a.kill()
    assert [(e.offset, e.delivery_count) for e in collect(b, 2)] == [(4, 2), (5, 2)]
    assert p.terminate() == 0


# --- Progress and Nack ----------------------------------------------------------------------------

def test_progress_keeps_a_long_job_from_being_redelivered(pg, schema, cdc):
    """The issue's 10 s jobs with ack_timeout 3s and a Progress every second, shortened with the
    same ratios: 4 s jobs, ack_timeout 1.2s, a Progress every 0.4 s."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1200ms")])
    worker = attach(c, consumer="worker", max_unacked=1)
    insert(pg, schema, 1, 1)
    (e,) = collect(worker, 1)
    spare = attach(c, consumer="spare", max_unacked=1)  # would take the job if it came back
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4:
        worker.progress([e.offset])
        assert refused(one_answer(worker)) == []
        time.sleep(0.4)
    assert spare.events(1, timeout=0.1, fail=False) == []  # never redelivered
    worker.ack([e.offset])
    ans = one_answer(worker)
    assert (refused(ans), ans.acked_offset, e.delivery_count) == ([], 1, 1)
    # Without Progress the next job is taken away after the ack timeout.
    spare.close()
    insert(pg, schema, 2, 2)
    (e2,) = collect(worker, 1)
    spare = attach(c, consumer="spare2", max_unacked=1)
    (again,) = collect(spare, 1, timeout=5)
    assert (again.offset, again.delivery_count) == (e2.offset, 2)
    worker.progress([e2.offset])  # too late: it is another's now
    assert refused(one_answer(worker)) == [(e2.offset, "OTHER_CONSUMER")]
    def jobs():
        return json.loads(get(c, "/status")[1])["subscriptions"][0]
    wait_for(lambda: jobs()["refused"] == 1, 10, what="the refused Progress in /status")
    st = jobs()  # e2 is in flight to spare2 only: it was taken from the worker at its deadline
    assert st["progressed"] >= 5 and (st["in_flight"], st["acked"], st["redelivered"]) == (1, 1, 1), st
    assert p.terminate() == 0


def test_nack_with_delay_and_reason_then_a_dead_letter_with_its_history(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", max_deliveries=2)])
    a = attach(c, consumer="a", max_unacked=1)
    insert(pg, schema, 1, 1)
    (e,) = collect(a, 1)
    b = attach(c, consumer="b", max_unacked=1)
    t0 = time.monotonic()
    a.nack([e.offset], delay_ms=1500, reason="card declined")
    assert refused(one_answer(a)) == []
    # Held back for the delay, then delivered again: to the other consumer.
    (again,) = collect(b, 1, timeout=10)
    waited = time.monotonic() - t0
    assert 1.3 <= waited < 5, waited
    assert (again.offset, again.delivery_count) == (e.offset, 2)
    assert a.events(1, timeout=0.1, fail=False) == []
    b.nack([e.offset], reason="gateway timeout \u2014 gave up")  # the second delivery: max_deliveries
    assert refused(one_answer(b)) == []
    wait_for(lambda: "moved an event to the dead letters" in p.stderr(), 10, what="the dead letter")
    assert 'reason="gateway timeout' in p.stderr()
    b.nack([e.offset])  # it is gone from the queue
    assert refused(one_answer(b)) == [(e.offset, "ALREADY_ACKED")]
    dead = attach(c, dead_letters=True)
    assert dead.subscribed.mode == pb.FAILOVER  # dead letters are read in order by one reader
    (d,) = collect(dead, 1)
    h = dead.dead_letter[d.offset]
    assert (d.offset, d.delivery_count, row(d.new_row)["id"]) == (1, 1, 1)
    assert (h.offset, h.original_offset, h.deliveries, h.reason) == (1, e.offset, 2, "gateway timeout \u2014 gave up")
    assert abs(h.dead_time / 1e6 - time.time()) < 30
    dead.ack([d.offset])
    assert one_answer(dead).acked_offset == 1
    # Two nacks took effect, the third was refused (the dead letter's ack is its own queue's).
    wait_for(lambda: [(s["nacked"], s["refused"], s["dead"]) for s in
                      json.loads(get(c, "/status")[1])["subscriptions"]] == [(2, 1, 0)], 10,
             what="nacked 2, refused 1 in /status")
    assert p.terminate() == 0


def test_dead_letter_after_ack_timeouts_says_so(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="300ms", max_deliveries=1)])
    a = attach(c, consumer="a")
    insert(pg, schema, 1, 1)
    collect(a, 1)
    a.close()  # gone with it: the one delivery it was allowed
    dead = attach(c, dead_letters=True)
    (d,) = collect(dead, 1, timeout=10)
    h = dead.dead_letter[d.offset]
    assert (h.original_offset, h.deliveries, h.reason) == (1, 1, "consumer went away")
    assert p.terminate() == 0


# --- delivery counts across restarts ----------------------------------------------------------

def test_delivery_counts_survive_kill_9_so_max_deliveries_holds(pg, schema, cdc):
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, max_deliveries=2)])
    a = attach(c, consumer="a")
    insert(pg, schema, 1, 3)
    assert [(e.offset, e.delivery_count) for e in collect(a, 3)] == [(1, 1), (2, 1), (3, 1)]
    a.ack([1])
    assert one_answer(a).acked_offset == 1
    p.kill()  # kill -9 with 2 and 3 delivered once, unacknowledged
    a.close()
    p = c.start()
    b = attach(c, consumer="b")
    assert [(e.offset, e.delivery_count) for e in collect(b, 2)] == [(2, 2), (3, 2)]
    b.close()  # the second delivery failed too: max_deliveries
    dead = attach(c, dead_letters=True)
    got = collect(dead, 2, timeout=10)
    assert [(dead.dead_letter[d.offset].original_offset, dead.dead_letter[d.offset].deliveries,
             dead.dead_letter[d.offset].reason) for d in got] == [(2, 2, "consumer went away"),
                                                                 (3, 2, "consumer went away")]
    s = attach(c, consumer="c")
    assert s.subscribed.acked_offset == 3 and s.events(1, timeout=0.5, fail=False) == []
    assert p.terminate() == 0


# --- fair dispatch ----------------------------------------------------------------------------

def run_workers(c, n_workers, job_s, total, consumers_limit=0, deadline_s=60):
    """n_workers threads, each its own connection, taking deliveries and acking each job after
    job_s seconds of work, until every one of total jobs was acknowledged. Returns the offsets each
    worker executed (in order) and the seconds it all took."""
    done = {i: [] for i in range(n_workers)}
    acked = set()
    lock = threading.Lock()
    start = threading.Barrier(n_workers)
    errors = []

    def work(i):
        try:
            s = attach(c, consumer=f"w{i}", max_unacked=consumers_limit)
            start.wait()
            end = time.monotonic() + deadline_s
            while time.monotonic() < end:
                with lock:
                    if len(acked) >= total:
                        break
                d = s.delivery(timeout=0.2)
                for e in d or []:
                    time.sleep(job_s)
                    done[i].append(e.offset)
                    s.ack([e.offset])
                    with lock:
                        acked.add(e.offset)
            s.close()
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t0 = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return done, time.monotonic() - t0


def test_shared_workers_each_get_a_fair_share_and_no_job_runs_twice(pg, schema, cdc):
    """The issue's story: 3 workers taking 50 ms per job (ack after the work), a backlog of 300
    jobs, ack_timeout 5s. A worker is handed only what it can start on before its deadline: each
    job runs exactly once and each worker does at least a fifth."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="5s")])
    insert(pg, schema, 1, 300)
    wait_for(lambda: spooled(c) >= 300, 30, what="the backlog to be spooled")
    done, took = run_workers(c, 3, 0.05, 300)
    runs = sum(len(v) for v in done.values())
    print(f"\n300 jobs of 50 ms, 3 workers, ack_timeout 5s: {runs} executions in {took:.1f} s; per worker "
          f"{[len(v) for v in done.values()]}")
    assert sorted(o for v in done.values() for o in v) == list(range(1, 301))  # each exactly once
    assert all(len(v) >= 60 for v in done.values()), {i: len(v) for i, v in done.items()}
    assert "redeliver" not in p.stderr()
    assert p.terminate() == 0


def test_a_shared_consumers_window_grows_to_max_unacked_with_its_pace(pg, schema, cdc):
    """A shared consumer starts with 16 events in flight (WINDOW_START); once it has acknowledged at
    a steady pace for a rate period (500 ms), its window is what it acknowledges per ack_timeout / 2,
    here far above max_unacked, so it holds max_unacked (1000), as a failover consumer would. The
    outcome does not depend on the machine's speed: the consumer paces itself (16 events, then
    20 ms), and what it holds is counted once it stops acknowledging."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared")])
    n = 10000
    insert(pg, schema, 1, n)
    wait_for(lambda: spooled(c) >= n, 60, what="the backlog to be spooled")
    s = attach(c, consumer="steady")
    first = s.events(16, timeout=10, all_available=True)
    time.sleep(0.3)  # had the window room for more, more would have come by now
    first += s.events(1, timeout=0, fail=False, all_available=True)
    assert len(first) == 16
    seen = [e.offset for e in first]
    s.ack_events(first)
    deadline = time.monotonic() + 30
    while True:  # acknowledge at a steady pace until a delivery shows the window grew
        time.sleep(0.02)
        evs = s.events(1, timeout=10, all_available=True)
        seen += [e.offset for e in evs]
        if len(evs) > 16:
            break
        s.ack_events(evs)
        assert time.monotonic() < deadline, "the window did not grow in 30 s of steady acks"
    held = evs + s.events(1, timeout=1, fail=False, all_available=True)  # until nothing more comes
    seen += [e.offset for e in held[len(evs):]]
    assert len(held) == 1000  # max_unacked, and not one more
    while len(seen) < n:  # the rest, acknowledging at once: each event exactly once
        s.ack_events(held)
        held = s.events(1, timeout=10, all_available=True)
        seen += [e.offset for e in held]
    s.ack_events(held)
    assert sorted(seen) == list(range(1, n + 1))
    s.close()
    assert p.terminate() == 0


def test_a_cumulative_ack_holding_a_never_delivered_offset_is_refused_whole(pg, schema, cdc):
    """failover, offsets 1-5 delivered, nothing acked: Ack{1005, 2} used to acknowledge 1-2 and
    refuse only 1005. A cumulative ack is one request: now nothing is acknowledged, 1005 is refused
    as NOT_DELIVERED and 2 as IN_REFUSED_ACK. An offset already acknowledged is refused by itself
    (ALREADY_ACKED) without refusing the rest. The dead letters' acks are cumulative too."""
    make_jobs(pg, schema)
    make_jobs(pg, schema, table="orders")
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", max_deliveries=1),
                                    socket_sub(schema, name="fo", table="orders")])
    f = attach(c, sub="fo", consumer="f")
    insert(pg, schema, 1, 5, table="orders")
    assert [e.offset for e in collect(f, 5)] == [1, 2, 3, 4, 5]
    f.ack([1005, 2])
    ans = one_answer(f)
    assert (refused(ans), ans.acked_offset) == ([(1005, "NOT_DELIVERED"), (2, "IN_REFUSED_ACK")], 0)
    f.ack([5])
    assert one_answer(f).acked_offset == 5

    a = attach(c, consumer="a")  # shared: 1-5 become dead letters when a goes
    insert(pg, schema, 1, 5)
    assert [e.offset for e in collect(a, 5)] == [1, 2, 3, 4, 5]
    a.close()
    dead = attach(c, dead_letters=True)
    assert [e.offset for e in collect(dead, 5, timeout=10)] == [1, 2, 3, 4, 5]
    dead.ack([1005, 2])
    ans = one_answer(dead)
    assert (refused(ans), ans.acked_offset) == ([(1005, "NOT_DELIVERED"), (2, "IN_REFUSED_ACK")], 0)
    dead.ack([2, 1])  # both in flight: everything up to 2, whatever the order
    ans = one_answer(dead)
    assert (refused(ans), ans.acked_offset) == ([], 2)
    dead.ack([1, 3])  # 1 is acknowledged already: listed, and 3 still counts
    ans = one_answer(dead)
    assert (refused(ans), ans.acked_offset) == ([(1, "ALREADY_ACKED")], 3)
    dead.close()
    assert p.terminate() == 0


def test_a_nacked_event_never_comes_back_before_its_delay(pg, schema, cdc):
    """600 events nacked one frame at a time with a 3 ms delay: each comes back at or after its
    delay, measured from before its Nack was sent. The delay used to run from the millisecond the
    Nack was read in, truncated, so a redelivery could come up to 1 ms early. Timed to show it: cdc's
    clock is the same CLOCK_MONOTONIC, and the Nacks go out in turn early and late in a millisecond,
    so that one read early in a millisecond (each read dispatches what is due) finds due the event
    of one sent late in the millisecond 3 ms before; the client reads all along, so a redelivery's
    arrival is known to within microseconds. The old code failed on most of them."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema)])
    s = attach(c, consumer="n")
    n, delay = 600, 3
    insert(pg, schema, 1, n)
    assert [e.offset for e in collect(s, n)] == list(range(1, n + 1))
    sent, back = {}, {}

    def receive(timeout=0.0):
        for e in s.events(1, timeout=timeout, fail=False, all_available=True):
            back.setdefault(e.offset, time.monotonic())
    for o in range(1, n + 1):
        lo = 0.6 if o % 2 else 0.1  # where in its millisecond the Nack goes out
        while not lo <= time.monotonic() * 1000 % 1 < lo + 0.1:
            receive()
        sent[o] = time.monotonic()
        s.nack([o], delay_ms=delay)
    deadline = time.monotonic() + 30
    while len(back) < n and time.monotonic() < deadline:
        receive(0.5)
    assert sorted(back) == list(range(1, n + 1))
    early = {o: round((sent[o] + delay / 1000 - t) * 1000, 3) for o, t in back.items() if t < sent[o] + delay / 1000}
    assert early == {}, "%d redeliveries early (ms, by offset): %s" % (len(early), early)
    assert p.terminate() == 0
