"""test_checkers.py: every check of the fault harness, its exactly-once mode and the backfill
torture fails when fed a real recording perturbed with the bug it is for. Without this, a clean
report could also mean a check that can no longer fail.

The recordings (tests/fault/recordings/) come from short runs on PostgreSQL 18:
  alo.json.gz       harness.py --seed 34 --duration 20 --pause 0.15 --workers 2 --large-rows 20,60
                    --faults cdc_kill9,consumer_kill,walsender_kill,kafka_produce_error --record ...
                    (1,568 changes, two kill -9 checked against the slot)
  eo.json.gz        the same with --seed 35 --exactly-once (1,569 changes, three boundaries)
  backfill.json.gz  CDC_BACKFILL_ROWS=400 CDC_BACKFILL_RECORD=... pytest
                    tests/integration/test_backfill.py -k test_backfill_under_load_with_kills: the
                    stdout subscription's events (reads, then the load, across two kill -9) and
                    the table's rows at the end
Each test first checks that the unperturbed recording passes the check, then that the perturbed one
fails it. Run by `make check-fault` (a few seconds).
"""

import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import exactly_once  # noqa: E402
import recording  # noqa: E402
from load import MARK_ABORT  # noqa: E402
from verify import verify  # noqa: E402

REC = os.path.join(HERE, "recordings")


def load(name):
    return recording.load(os.path.join(REC, f"{name}.json.gz"))


def check(r, sink=None):
    """{sink name: Result} of verify() on recording r (on one sink of it if given); no global error."""
    names = [sink] if sink else list(r["sinks"])
    results, errors = verify(r["committed"], r["aborted"], [r["sinks"][n] for n in names], r["kills"], lost=r["lost"])
    assert errors == []
    return dict(zip(names, results))


def test_the_recordings_pass():
    for name in ("alo", "eo"):
        res = check(load(name))
        assert all(not x.failed and not x.spool_duplicated for x in res.values()), name
        assert all(x.slot_checked > 0 for x in res.values())


def once_delivered(sink):
    """(stream id, index) of an event in the middle of the sink's stream whose change the sink
    delivered only there."""
    seen = {}
    for sid, recs in sink.streams.items():
        for i, x in enumerate(recs):
            seen.setdefault((x.cl, x.ti), []).append((sid, i))
    once = [places[0] for places in seen.values() if len(places) == 1]
    return once[len(once) // 2]


def test_an_event_dropped_is_lost():
    r = load("alo")
    out = r["sinks"]["out_all"]
    sid, i = once_delivered(out)
    del out.streams[sid][i]
    res = check(r, "out_all")["out_all"]
    assert res.lost == 1 and res.failed


def test_an_unknown_version_is_a_phantom():
    r = load("alo")
    out = r["sinks"]["out_all"]
    sid, i = once_delivered(out)
    x = next(x for x in out.streams[sid] if x.op == "update")
    out.streams[sid].append(x._replace(ver=x.ver + 1000, ti=10**6))
    assert check(r, "out_all")["out_all"].unexpected == {"phantom": 1}


def test_an_aborted_change_delivered():
    r = load("alo")
    t = next(t for t in r["aborted"].values() if t.changes and t.xid)
    c = t.changes[0]
    k = r["sinks"]["k_all"]
    tp = sorted(k.streams)[0]
    last = k.streams[tp][-1]
    k.streams[tp].append(last._replace(table=c.table, id=c.id, op=c.op, ver=c.ver, note=MARK_ABORT, grp=c.grp,
                                       xid=t.xid, cl=last.cl + 1, ti=0, where=(tp, last.where[1] + 1)))
    assert check(r, "k_all")["k_all"].unexpected == {"aborted": 1}


def test_two_versions_swapped_go_backwards():
    r = load("alo")
    k = r["sinks"]["k_all"]
    for tp, recs in sorted(k.streams.items()):
        first = {}
        for j, x in enumerate(recs):
            if x.op == "update" and (x.table, x.id) in first and recs[first[(x.table, x.id)]].xid != x.xid:
                i = first[(x.table, x.id)]
                recs[i], recs[j] = recs[j]._replace(where=recs[i].where), recs[i]._replace(where=recs[j].where)
                break
            first.setdefault((x.table, x.id), j)
        else:
            continue
        break
    res = check(r, "k_all")["k_all"]
    assert res.out_of_order >= 1 and res.failed and res.lost == 0


def test_the_slot_moved_early():
    r = load("alo")
    before = check(r, "out_all")["out_all"].slot_checked
    k, confirmed = r["kills"][0]
    top = max(x.cl for recs in r["sinks"]["out_all"].streams.values() for x in recs)
    r["kills"][0] = (k, top + 1)  # past every change, including those the next run delivered
    res = check(r, "out_all")["out_all"]
    assert res.slot_checked > before and res.slot >= 1 and res.failed


def test_an_offset_never_read_is_a_gap():
    r = load("alo")
    s = r["sinks"]["s_all"]
    sid, i = once_delivered(s)
    off = s.streams[sid][i].off
    del s.streams[sid][i]
    for recs in s.snap_recs.values():
        recs[:] = [x for x in recs if x.off != off]
    res = check(r, "s_all")["s_all"]
    assert res.gaps == 1 and res.failed


def test_a_socket_change_spooled_twice():
    r = load("eo")
    s = r["sinks"]["s_all"]
    assert check(r, "s_all")["s_all"].spool_duplicated == 0
    sid = max(s.streams)
    x = s.streams[sid][0]
    top = max(y.off for recs in s.streams.values() for y in recs)
    s.streams[sid].append(x._replace(off=top + 1, where=(sid, 10**6)))  # the same change at a new offset
    res = check(r, "s_all")["s_all"]
    assert res.spool_duplicated == 1


def test_a_kafka_copy_under_exactly_once():
    r = load("eo")
    times, bounds = r["kafka_times"], r["bounds"]
    assert exactly_once.check(times, bounds)[2] == 0
    (cl, ti), ms = max(((k, v) for k, v in times.items() if len(v) == 1 and v[0] > bounds[-1][0]),
                       key=lambda kv: kv[1])
    times[(cl, ti)] = ms + [ms[0] + 5]  # sent again 5 ms later, no restart or abort between
    repeated, copies, violations, examples = exactly_once.check(times, bounds)
    assert violations == 1 and "no restart or abort between the copies" in examples[0]


# --- the backfill torture: a consumer applying the events ends with the table's rows ---------------

def backfill():
    with gzip.open(os.path.join(REC, "backfill.json.gz"), "rt") as f:
        d = json.load(f)
    return d["events"], {row["id"]: row for row in d["table"]}


def test_backfill_recording_matches_and_perturbations_do_not():
    from test_backfill import replay
    events, table = backfill()
    assert replay(events)[0] == table and replay(events)[1] > 0
    # an event dropped: the last change of a row
    last = max(i for i, e in enumerate(events) if e["op"] == "update")
    assert replay(events[:last] + events[last + 1:])[0] != table
    # two versions of a row swapped: its last update and an earlier one with other values
    last_of = {e["key"]["id"]: i for i, e in enumerate(events)}
    i, j = next((i, last_of[e["key"]["id"]]) for i, e in enumerate(events)
                if e["op"] == "update" and events[last_of[e["key"]["id"]]]["op"] == "update" and
                last_of[e["key"]["id"]] > i and events[last_of[e["key"]["id"]]]["new"] != e["new"])
    swapped = list(events)
    swapped[i], swapped[j] = events[j], events[i]
    assert replay(swapped)[0] != table
    # a change of an aborted transaction added: a row the table never had
    phantom = {"op": "insert", "key": {"id": 10**9}, "new": {"id": 10**9, "v": "aborted", "n": 0}}
    assert replay(events + [phantom])[0] != table
