"""recording.py: a fault run's recording, so that its checks can run again without the run: the
ledger (transactions committed, aborted, lost at a promotion), the kills with the slot's position,
what every sink delivered, and for exactly once the times Kafka showed each change and the
boundaries in cdc's logs. `harness.py --record FILE` writes one (JSON, gzipped);
tests/fault/test_checkers.py feeds perturbed copies of one to the checkers.
"""

import gzip
import json

from events import Rec
from load import Change, Txn
from verify import SinkData


def _txns(d):
    return [[tok, t.kind, t.xid, t.hi_lsn, [list(c) for c in t.changes]] for tok, t in d.items()]


def _untxns(rows):
    out = {}
    for tok, kind, xid, hi, changes in rows:
        t = Txn(kind, tok)
        t.xid, t.hi_lsn, t.changes = xid, hi, [Change(*c) for c in changes]
        out[tok] = t
    return out


def _key(sid):
    return list(sid) if isinstance(sid, tuple) else sid


def _unkey(sid):
    return tuple(sid) if isinstance(sid, list) else sid


def _unwhere(w):
    return (tuple(w[0]), w[1]) if isinstance(w[0], list) else tuple(w)


def _recs(recs):
    return [list(r[:-1]) + [_key(r.where)] for r in recs]


def _unrecs(rows):
    return [Rec(*r[:-1], where=_unwhere(r[-1])) for r in rows]


def save(path, committed, aborted, lost, sinks, kills, filters, kafka_times=None, bounds=None):
    """sinks: {name: SinkData}; filters: {name: the subscription's `where` on grp, as "grp<N"}."""
    out = {"committed": _txns(committed), "aborted": _txns(aborted), "lost": _txns(lost or {}),
           "kills": [list(k) for k in kills], "sinks": {},
           "kafka_times": [[cl, ti, ms] for (cl, ti), ms in (kafka_times or {}).items()],
           "bounds": [list(b) for b in bounds or []]}
    for name, s in sinks.items():
        out["sinks"][name] = {
            "title": s.name, "kind": s.kind, "filter": filters.get(name),
            "streams": [[_key(sid), _recs(recs)] for sid, recs in s.streams.items()],
            "cuts": [[k, [[_key(tp), hw] for tp, hw in cut.items()] if isinstance(cut, dict) else cut]
                     for k, cut in s.cuts.items()],
            "snap_recs": [[k, _recs(recs)] for k, recs in s.snap_recs.items()],
            "other_offsets": sorted(s.other_offsets), "failed_batches": [[_key(tp), n] for tp, n in s.failed_batches]}
    with gzip.open(path, "wt") as f:
        json.dump(out, f, separators=(",", ":"))


def wants(filter_text):
    """The subscription's filter: every change, or inserts and updates with grp below N."""
    if not filter_text:
        return lambda c: True
    below = int(filter_text.split("<")[1])
    return lambda c: c.op in ("insert", "update") and c.grp < below


def load(path):
    """A recording as verify() and exactly_once.check() take it: a dict with committed, aborted,
    lost, sinks ({name: SinkData}), kills, kafka_times and bounds."""
    with gzip.open(path, "rt") as f:
        d = json.load(f)
    sinks = {}
    for name, s in d["sinks"].items():
        sd = SinkData(s["title"], s["kind"], wants(s["filter"]))
        sd.streams = {_unkey(sid): _unrecs(recs) for sid, recs in s["streams"]}
        sd.cuts = {k: ({_unkey(tp): hw for tp, hw in cut} if s["kind"] == "kafka" and cut is not None else
                       tuple(cut) if isinstance(cut, list) else cut) for k, cut in s["cuts"]}
        sd.snap_recs = {k: _unrecs(recs) for k, recs in s["snap_recs"]}
        sd.other_offsets = set(s["other_offsets"])
        sd.failed_batches = [(_unkey(tp), n) for tp, n in s["failed_batches"]]
        sinks[name] = sd
    return {"committed": _untxns(d["committed"]), "aborted": _untxns(d["aborted"]), "lost": _untxns(d["lost"]),
            "sinks": sinks, "kills": [tuple(k) for k in d["kills"]],
            "kafka_times": {(cl, ti): ms for cl, ti, ms in d["kafka_times"]},
            "bounds": [tuple(b) for b in d["bounds"]]}
