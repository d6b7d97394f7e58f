"""test_verify.py: the fault harness's checker against hand-made streams, so that a clean report
from a fault run means the checks looked, not that they cannot fail. Run by `make check-fault`
(python3 -m pytest tests/fault/test_verify.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from events import Rec  # noqa: E402
from load import Change, Txn  # noqa: E402
from verify import SinkData, verify  # noqa: E402

# Two committed transactions and an aborted one:
#   xid 100 (commit_lsn 0x1000): insert acct 1 (v1), insert ord 7 (v1), update acct 1 (v2)
#   xid 101 (commit_lsn 0x2000): update acct 1 (v3), delete ord 7 (v2)
#   xid 102 aborted: update acct 1 to v4
CL = {100: 0x1000, 101: 0x2000, 102: 0x3000}


def txn(xid, changes, hi):
    t = Txn("small")
    t.xid, t.changes, t.hi_lsn = xid, changes, hi
    return t


def ledger():
    committed = {
        100: txn(100, [Change("acct", 1, "insert", 1, 0, "ok"), Change("ord", 7, "insert", 1, 5, "ok"),
                       Change("acct", 1, "update", 2, 1, "ok")], 0x1100),
        101: txn(101, [Change("acct", 1, "update", 3, 2, "ok"), Change("ord", 7, "delete", 2, 5, "ok")], 0x2100),
    }
    aborted = {102: txn(102, [Change("acct", 1, "update", 4, 0, "ABORT")], None)}
    return committed, aborted


# (xid, tx_index) -> Rec fields
EV = {
    (100, 0): ("acct", 1, "insert", 1, "ok", 0),
    (100, 1): ("ord", 7, "insert", 1, "ok", 5),
    (100, 2): ("acct", 1, "update", 2, "ok", 1),
    (101, 0): ("acct", 1, "update", 3, "ok", 2),
    (101, 1): ("ord", 7, "delete", None, None, None),  # no old row: version from the ledger
    (102, 0): ("acct", 1, "update", 4, "ABORT", 0),
}
ALL = [(100, 0), (100, 1), (100, 2), (101, 0), (101, 1)]


def rec(x, ti, where, off=None, **over):
    table, id_, op, ver, note, grp = EV[(x, ti)]
    f = dict(table=table, id=id_, op=op, ver=ver, note=note, grp=grp, xid=x, cl=CL[x], ti=ti, off=off,
             where=where)
    f.update(over)
    return Rec(**f)


def stdout_sink(*runs, wants=lambda c: True):
    """A stdout sink whose run n delivered runs[n - 1] (a list of (xid, tx_index)); kill #n ended
    run n."""
    s = SinkData("out", "stdout", wants)
    for n, evs in enumerate(runs, 1):
        s.streams[n] = [rec(x, t, (n, i)) for i, (x, t) in enumerate(evs, 1)]
        s.cuts[n] = n
    return s


def run(sink, kills=()):
    committed, aborted = ledger()
    results, errors = verify(committed, aborted, [sink], list(kills))
    assert errors == []
    return results[0]


def test_clean_stream():
    r = run(stdout_sink(ALL))
    assert (r.expected, r.delivered, r.unique, r.lost, r.duplicated, r.out_of_order, r.slot) == (5, 5, 5, 0, 0, 0, 0)
    assert not r.unexpected and not r.failed


def test_redelivery_after_a_crash_is_duplication_not_disorder():
    r = run(stdout_sink(ALL[:4], ALL[2:]))
    assert (r.lost, r.duplicated, r.out_of_order) == (0, 2, 0) and not r.failed


def test_a_lost_change():
    r = run(stdout_sink([e for e in ALL if e != (100, 2)]))
    assert r.lost == 1 and r.failed
    assert "('acct', 1, 'update', 2)" in r.examples["lost"][0]


def test_versions_going_backwards():
    r = run(stdout_sink([(100, 0), (100, 1), (101, 0), (100, 2), (101, 1)]))
    assert r.out_of_order == 2 and r.failed  # v2 after v3, and the key's last event is v2
    assert "version 2" in r.examples["order"][0] and "after version 3" in r.examples["order"][0]


def test_backwards_then_redelivered_still_counts():
    # v3 v2 v3: a consumer dropping repeats by (commit_lsn, tx_index) would end at v2.
    r = run(stdout_sink([(100, 0), (100, 1), (101, 0)], [(100, 2), (101, 0), (101, 1)]))
    assert r.out_of_order == 1 and r.lost == 0


def test_a_stale_last_event():
    # Everything in order, then an old event again at the very end: a compacted topic keeps v2.
    r = run(stdout_sink(ALL, [(100, 2)]))
    assert r.out_of_order == 1 and "final is 3" in r.examples["order"][0]


def test_delete_version_from_the_ledger():
    # The delete (no old row) of ord 7 is version 2: an insert of ord 7 after it goes backwards.
    r = run(stdout_sink([(100, 0), (100, 2), (101, 0), (101, 1), (100, 1)]))
    assert r.out_of_order == 2  # backwards, and the key's last event is not its final version


def test_aborted_change_leaks():
    r = run(stdout_sink(ALL + [(102, 0)]))
    assert r.unexpected == {"aborted": 1} and r.failed


def test_committed_version_under_another_xid():
    s = stdout_sink(ALL)
    s.streams[1][3] = rec(101, 0, (1, 4), xid=555)
    r = run(s)
    assert r.unexpected == {"phantom": 1} and r.lost == 1


def test_filtered_out_change():
    r = run(stdout_sink(ALL, wants=lambda c: c.op == "insert"))
    assert r.expected == 2 and r.unexpected == {"filter": 3}


def test_slot_passed_a_change_delivered_only_after_the_kill():
    # Kill #1 ends run 1 with the slot at 0x2001: past xid 101, which only run 2 delivered.
    r = run(stdout_sink(ALL[:3], ALL[2:]), kills=[(1, 0x2001)])
    assert r.lost == 0 and r.slot == 2 and r.slot_checked == 5 and r.failed
    # At 0x2000 (xid 101's commit record itself) the slot has not passed it.
    r = run(stdout_sink(ALL[:3], ALL[2:]), kills=[(1, 0x2000)])
    assert r.slot == 0 and r.slot_checked == 3


def test_slot_upper_bound_for_a_change_no_sink_delivered():
    r = run(stdout_sink(ALL[:3]), kills=[(1, 0x2100)])
    assert r.lost == 2 and r.slot == 2  # the ledger's bound 0x2100 <= C: it was passed
    r = run(stdout_sink(ALL[:3]), kills=[(1, 0x20FF)])
    assert r.lost == 2 and r.slot == 0


def test_kafka_high_watermark():
    s = SinkData("k", "kafka", lambda c: True)
    tp = ("cdc.fault.acct", 0)
    s.streams[tp] = [rec(x, t, (tp, off)) for off, (x, t) in enumerate(ALL)]
    s.cuts[1] = {tp: 3}  # offsets 0..2 (xid 100) were there at the kill
    assert run(s, kills=[(1, 0x1001)]).slot == 0
    assert run(s, kills=[(1, 0x2001)]).slot == 2
    s.cuts[1] = None  # watermarks unknown: delivered by the end counts
    assert run(s, kills=[(1, 0x2001)]).slot == 0


def kafka_sink(*runs, failed=()):
    """A Kafka sink whose partition holds runs one after the other (lists of (xid, tx_index)), and
    failed: the batches cdc logged as failed for good, (messages,) each."""
    s = SinkData("k", "kafka", lambda c: True)
    tp = ("cdc.fault.acct", 0)
    evs = [e for run in runs for e in run]
    s.streams[tp] = [rec(x, t, (tp, off)) for off, (x, t) in enumerate(evs)]
    s.failed_batches = [(tp, n) for n in failed]
    return s


def test_a_batch_that_failed_for_good_and_what_the_mock_appended_after_it():
    # (100, 2) failed for good; the mock appended the batch queued behind it, which a real broker
    # refuses (a hole in the producer's sequence); the replay from the slot sends all three again.
    first, replay = [(100, 0), (100, 1), (101, 0), (101, 1)], [(100, 2), (101, 0), (101, 1)]
    r = run(kafka_sink(first, replay, failed=[1]))
    assert (r.refused, r.out_of_order, r.lost, r.duplicated, r.gaps) == (2, 0, 0, 0, 0) and not r.failed
    # Without cdc's log of the failed batch, or with another size, the hole is checked as it is:
    # version 2 of acct 1 comes after version 3.
    for failed in ([], [2]):
        r = run(kafka_sink(first, replay, failed=failed))
        assert r.refused == 0 and r.out_of_order == 1 and r.failed, failed
    # Nor when the replay does not send the appended events again.
    r = run(kafka_sink(first, [(100, 2)], failed=[1]))
    assert r.refused == 0 and r.out_of_order >= 1 and r.failed


def test_failed_batches_read_from_cdc_logs():
    from verify import failed_batches
    log = ('2026-11-28T05:20:46.155Z warn  kafka client facility=FATAL message="[thrd:127.0.0.1:39955/bootstrap]: '
           'Fatal error: Local: Gap-less ordering would not be guaranteed if proceeding: ProduceRequest for '
           'cdc.fault.acct [0] with 1 message(s) failed: Broker: Message size too large (broker 1 '
           'PID{Id:451121000,Epoch:0}, base seq 199): unable to satisfy gap-less guarantee"\n')
    assert failed_batches([log, "", log.replace("[0] with 1", "[3] with 12")]) == [
        (("cdc.fault.acct", 0), 1), (("cdc.fault.acct", 3), 12)]


def test_socket_consumer_cut_and_spool_read():
    s = SinkData("s", "socket", lambda c: True)
    s.streams[1] = [rec(x, t, (1, i), off=i) for i, (x, t) in enumerate(ALL[:3], 1)]
    s.streams[2] = [rec(x, t, (2, i), off=i + 2) for i, (x, t) in enumerate(ALL[2:], 1)]
    s.cuts[1] = (1, 3)
    s.snap_recs[1] = []  # the spool read after the restart was empty: xid 101 was nowhere
    assert run(s, kills=[(1, 0x2001)]).slot == 2
    s.snap_recs[1] = [rec(x, t, ("spool", i + 3), off=i + 3) for i, (x, t) in enumerate(ALL[3:], 1)]
    r = run(s, kills=[(1, 0x2001)])
    assert (r.slot, r.duplicated, r.gaps, r.out_of_order) == (0, 1, 0, 0) and not r.failed


def test_socket_offsets():
    s = SinkData("s", "socket", lambda c: True)
    s.streams[1] = [rec(x, t, (1, i), off=i) for i, (x, t) in enumerate(ALL, 1)]
    s.streams[1][4] = s.streams[1][4]._replace(off=7)
    r = run(s)
    assert r.gaps == 2 and r.failed
    s.streams[2] = [rec(100, 2, (2, 1), off=2)]  # offset 2 is (0x1000, 1), not (0x1000, 2)
    assert run(s).unexpected == {"phantom": 1}


def test_xid_of_an_aborted_transaction_reused_by_a_committed_one():
    # After an immediate stop the server hands out again an xid that never reached the WAL.
    committed, aborted = ledger()
    committed[101].xid = 102
    s = stdout_sink([(100, 0), (100, 1), (100, 2)])
    s.streams[1] += [rec(101, 0, (1, 4), xid=102), rec(101, 1, (1, 5), xid=102)]
    results, errors = verify(committed, aborted, [s], [])
    assert errors == [] and not results[0].failed, dict(results[0].examples)
    s.streams[1].append(rec(102, 0, (1, 6)))  # the aborted transaction's own change still counts
    results, _ = verify(committed, aborted, [s], [])
    assert results[0].unexpected == {"aborted": 1}


# --- the exactly-once check (exactly_once.py) ------------------------------------------------------

def test_exactly_once_boundaries_read_from_cdc_logs():
    import exactly_once
    log = ("2026-11-25T17:12:54.923Z info  exactly once: Kafka holds the stream up to the position read back "
           "transactional_id=cdc-s positions_topic=cdc.positions position=0/0\n"
           "2026-11-25T17:12:55.100Z warn  a sink failed; ...\n"
           "2026-11-25T17:12:55.389Z info  exactly once: aborted the Kafka transaction; the slot sends its "
           "source transactions again position=0/1593FD8\n")
    later = ("2026-11-25T17:13:01.000Z info  exactly once: Kafka holds the stream up to the position read back "
             "transactional_id=cdc-s positions_topic=cdc.positions position=1/A\n")
    t0 = 1795626774923  # 2026-11-25T17:12:54.923Z
    assert exactly_once.boundaries([later, log]) == [(t0, 0), (t0 + 466, 0x1593FD8), (t0 + 6077, (1 << 32) | 0xA)]


def test_exactly_once_copies_only_after_a_boundary_below_their_commit():
    import exactly_once
    bounds = [(1000, 0x100), (2000, 0x300)]
    times = {
        (0x50, 0): [500],                # once
        (0x200, 0): [900, 1500],         # before and after the boundary at 1000 (position 0x100 < 0x200): ok
        (0x200, 1): [900, 1000],         # the boundary's own millisecond counts
        (0x250, 0): [1200, 1300],        # no boundary between the copies
        (0x280, 0): [1900, 2100],        # after the boundary at 2000, whose position 0x300 held it
        (0x400, 0): [100, 1500, 2500],   # three copies, each after a boundary below 0x400: ok
    }
    repeated, copies, violations, examples = exactly_once.check(times, bounds)
    assert (repeated, copies, violations) == (5, 6, 2)
    assert examples == [
        "commit_lsn 0/250 tx_index 0 sent at 1200 and again at 1300 ms (no restart or abort between the copies)",
        "commit_lsn 0/280 tx_index 0 sent at 1900 and again at 2100 ms (position 0/300 in force)",
    ]


def test_a_change_the_promoted_server_never_committed_is_a_phantom():
    """xid 101 committed on a primary that died before its standby had it (harness --standby):
    the ledger drops it, and delivered, its changes are phantoms. On the promoted server xid 103
    wrote acct 1's version 3 again, and xid 101 came again for another transaction (an insert of
    ord 9): neither is one."""
    committed, aborted = ledger()
    lost = {101: committed.pop(101)}
    committed[103] = txn(103, [Change("acct", 1, "update", 3, 7, "ok")], 0x2200)
    committed[104] = txn(101, [Change("ord", 9, "insert", 1, 4, "ok")], 0x2400)
    s = SinkData("out", "stdout", lambda c: True)
    s.streams[1] = [rec(100, 0, (1, 1)), rec(100, 1, (1, 2)), rec(100, 2, (1, 3)),
                    rec(101, 0, (1, 4)),  # the lost update of acct 1 to v3
                    rec(101, 0, (1, 5), xid=103, cl=0x2180, grp=7),  # the promoted server's v3
                    rec(101, 0, (1, 6), table="ord", id=9, op="insert", ver=1, grp=4, cl=0x2300)]
    results, errors = verify(committed, aborted, [s], [], lost=lost)
    r = results[0]
    assert errors == [] and r.unexpected == {"phantom": 1}, (errors, r.unexpected)
    assert "xid 101 committed on a primary that died before its standby had it" in r.examples["phantom"][0]
    assert r.lost == 0 and r.failed
