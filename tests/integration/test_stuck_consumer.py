"""test_stuck_consumer.py: consumers that stop reading or acknowledging beside healthy ones (issue
22): what a consumer timed out on does not go back to it while another can take it; one that
neither reads its socket nor sends anything for ack_timeout loses what it holds to the others and
gets nothing more until it reads; Deliveries never written to its socket are withdrawn and do not
count. Each mode, with real non-reading sockets (SO_RCVBUF 4096, as the user had) beside the
Python client or the test helpers, a real PostgreSQL and cdc."""

import collections
import json
import socket
import threading
import time

from conftest import wait_for
from subscriber_helpers import encode_frame, subscribe_frame
from test_socket import attach, collect, insert, make_jobs, row, sock, socket_sub
from test_status import get

from cdc_client import Consumer  # noqa: E402 (on the path subscriber_helpers sets)

DEAD = "moved an event to the dead letters"


def never_reading(c, name, sub="jobs", **opts):
    """A consumer that subscribes and then never reads its socket, as the user's did."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(sock(c))
    s.sendall(encode_frame(subscribe_frame(sub, consumer=name, **opts)))
    return s


def insert_big(pg, schema, first, last):
    """Rows of 1 MB: one fills a socket's buffer, the next waits in cdc's output."""
    pg.sql(f"insert into {schema}.jobs select i, i, repeat('x', 1000000) from generate_series({first}, {last}) i")


def status_of(c, name="jobs"):
    return next(s for s in json.loads(get(c, "/status")[1])["subscriptions"] if s["name"] == name)


def start_with_a_stuck_consumer(pg, schema, cdc, rows, **sub):
    """cdc (ack_timeout 3s), a consumer that never reads, and rows of 1 MB: events 1 and 2 in flight
    to it, 1 partly written to its socket, 2 waiting in cdc's output (past the 1 MiB mark)."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, ack_timeout="3s", **sub)])
    stuck = never_reading(c, "stuck")
    insert_big(pg, schema, 1, rows)
    wait_for(lambda: status_of(c)["in_flight"] == 2, 10, what="events 1 and 2 in flight to the stuck consumer")
    return c, p, stuck


def test_a_consumer_that_never_reads_loses_its_jobs_to_the_worker(pg, schema, cdc):
    """The user's story with its proportions, shortened: a shared subscription (ack_timeout 1s,
    max_deliveries 3), a consumer that subscribes and never reads, a backlog of 250 jobs, and one
    worker on the Python client taking 20 ms a job (5 s of work: the worker's window stays full
    past three ack timeouts). The first job used to go back to the stuck consumer at each timeout
    until it was a dead letter; now the worker does every job, each exactly once, and none is
    dead."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1s", max_deliveries=3)])
    stuck = never_reading(c, "stuck")
    n = 250
    insert(pg, schema, 1, n)
    done = run_worker(c, p, n)
    assert DEAD not in p.stderr()
    assert sorted(done) == list(range(1, n + 1)) and set(done.values()) == {1}
    assert "a consumer has not read its socket for ack_timeout" in p.stderr()
    wait_for(lambda: status_of(c)["acked_offset"] == n, 10, what="every job acknowledged in /status")
    assert status_of(c)["dead"] == 0
    stuck.close()
    assert p.terminate() == 0


def run_worker(c, p, n, job_s=0.02):
    """The Python client taking job_s a job until n jobs are done (or a dead letter appears);
    returns how often it ran each."""
    worker = Consumer(sock(c), "jobs", consumer="worker")
    done = collections.Counter()
    deadline = time.monotonic() + 60
    for e in worker.events(idle_timeout=10):
        time.sleep(job_s)
        done[e.offset] += 1
        worker.ack(e)
        if len(done) == n or time.monotonic() > deadline or DEAD in p.stderr():
            break
    worker.close()
    return done


def test_a_consumer_that_reads_but_never_acks_does_not_get_its_timed_out_jobs_back(pg, schema, cdc):
    """As above with a hung worker that reads its socket all along but never acknowledges: what
    timed out there goes to the healthy worker, never back to it."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1s", max_deliveries=3)])
    hung = attach(c, consumer="hung")
    stop = threading.Event()
    held = []

    def read():
        while not stop.is_set():
            held.extend(hung.events(1, timeout=0.1, fail=False))
    reader = threading.Thread(target=read)
    reader.start()
    n = 250
    insert(pg, schema, 1, n)
    try:
        done = run_worker(c, p, n)
    finally:
        stop.set()
        reader.join()
    assert DEAD not in p.stderr()
    assert sorted(done) == list(range(1, n + 1)) and set(done.values()) == {1}
    # each event went to the hung worker at most once: never again after it timed out there
    assert len(held) == len({e.offset for e in held}) and all(e.delivery_count == 1 for e in held), held
    assert "has not read its socket" not in p.stderr()
    assert p.terminate() == 0


def test_deliveries_never_written_to_a_stuck_consumer_do_not_count(pg, schema, cdc):
    """The stuck consumer takes 1 MB events 1 and 2: 1 is partly written to its socket, 2 waits in
    cdc's output. Once it has not read for ack_timeout, 1 goes to the worker as a second delivery,
    2 as a first: it was withdrawn, never delivered. It used to count as delivered (2, 2)."""
    c, p, stuck = start_with_a_stuck_consumer(pg, schema, cdc, 3, consumers="shared")
    worker = attach(c, consumer="worker")
    got = [(e.offset, e.delivery_count) for e in collect(worker, 3, timeout=20)]
    assert sorted(got) == [(1, 2), (2, 1), (3, 1)]
    worker.ack([1, 2, 3])
    worker.wait_acked(3)
    st = wait_for(lambda: (lambda st: st["acked"] == 3 and st)(status_of(c)), 10, what="the acks in /status")
    assert (st["delivered"], st["redelivered"], st["in_flight"], st["dead"]) == (4, 1, 0, 0), st
    assert "in_flight=2 taken_back=2 withdrawn=1 " in p.stderr()
    stuck.close()
    assert p.terminate() == 0


def test_a_busy_consumer_that_sends_progress_keeps_its_job_without_reading(pg, schema, cdc):
    """A worker busy with a long job sends Progress from another thread and reads nothing meanwhile
    (heartbeats and Acked answers pile up unread): it is alive, and its job stays with it."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="shared", ack_timeout="1s")])
    busy = attach(c, consumer="busy", max_unacked=1, heartbeat_ms=100)
    insert(pg, schema, 1, 1)
    (e,) = collect(busy, 1)
    spare = attach(c, consumer="spare")
    t0, sent = time.monotonic(), 0
    while time.monotonic() - t0 < 3:
        busy.progress([e.offset])
        sent += 1
        time.sleep(0.3)
    assert spare.events(1, timeout=0.2, fail=False) == []
    busy.ack([e.offset])
    answers = busy.answers(sent + 1)
    assert [r for a in answers for r in a.refused] == [] and answers[-1].acked_offset == 1
    assert "has not read its socket" not in p.stderr()
    assert p.terminate() == 0


def test_key_shared_a_key_whose_event_timed_out_moves_to_another_consumer(pg, schema, cdc):
    """key_shared: a consumer that reads but never acknowledges (a hung worker) used to get its
    keys' events back at each timeout until they were dead letters, while another consumer sat
    idle. Now a timeout moves the key's bucket, with what the hung one holds of it, to the other;
    the key's later events follow it there, in order."""
    make_jobs(pg, schema)
    c, p = cdc.start(subscriptions=[socket_sub(schema, consumers="key_shared", ack_timeout="500ms",
                                               max_deliveries=2)])
    hung = attach(c, consumer="hung")
    insert(pg, schema, 1, 4)
    assert [e.offset for e in collect(hung, 4)] == [1, 2, 3, 4]
    good = attach(c, consumer="good")
    again = collect(good, 4, timeout=10)
    assert sorted((e.offset, e.delivery_count) for e in again) == [(1, 2), (2, 2), (3, 2), (4, 2)]
    pg.sql(f"update {schema}.jobs set note = 'later'")
    later = collect(good, 4, timeout=10)
    assert sorted((e.offset, row(e.key)["id"], row(e.new_row)["note"]) for e in later) == [
        (5, 1, "later"), (6, 2, "later"), (7, 3, "later"), (8, 4, "later")]
    good.ack([e.offset for e in again + later])
    good.wait_acked(8)
    assert hung.events(1, timeout=0.5, fail=False) == []
    assert DEAD not in p.stderr() and status_of(c)["dead"] == 0
    assert p.terminate() == 0


def test_key_shared_a_consumer_that_stops_reading_loses_its_keys(pg, schema, cdc):
    """key_shared: the keys of a consumer that never reads go to the others once it has not read for
    ack_timeout, with the 1 MB event that never left cdc withdrawn (a first delivery elsewhere)."""
    c, p, stuck = start_with_a_stuck_consumer(pg, schema, cdc, 2, consumers="key_shared")
    good = attach(c, consumer="good")
    got = collect(good, 2, timeout=20)
    assert sorted((e.offset, e.delivery_count) for e in got) == [(1, 2), (2, 1)]
    pg.sql(f"update {schema}.jobs set note = 'later'")
    assert sorted(e.offset for e in collect(good, 2, timeout=10)) == [3, 4]
    stuck.close()
    assert p.terminate() == 0


def test_failover_a_non_reading_active_consumer_hands_over_without_counting_unsent(pg, schema, cdc):
    """failover: the active consumer never reads; the waiting one takes over once it has not read
    for ack_timeout, and the Delivery that never left cdc is not counted: (2, 1), not (2, 2)."""
    c, p, stuck = start_with_a_stuck_consumer(pg, schema, cdc, 3)
    standby = attach(c, consumer="standby")
    assert not standby.subscribed.active
    got = collect(standby, 3, timeout=20)
    assert [(e.offset, e.delivery_count) for e in got] == [(1, 2), (2, 1), (3, 1)]
    assert "the active consumer stopped reading its socket; the next one takes over" in p.stderr()
    standby.ack([3])
    standby.wait_acked(3)
    stuck.close()
    assert p.terminate() == 0
