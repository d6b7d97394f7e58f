"""verify.py: the fault harness's checks: what every sink received against the load generator's
ledger of what committed, and against the slot positions sampled at each kill -9 of cdc.

Vocabulary
  change     one row change the ledger recorded as committed: (table, id, op, version).
             Its identity is (table, id, op, version) for inserts and updates and (table, id,
             delete) for a delete (ids are never reused, so a key is deleted at most once).
  event      one delivery of a change by a sink; (commit_lsn, tx_index) names the change it
             carries across redeliveries (README: "use it to drop duplicates").
  stream     what one sink delivered, in delivery order: a Kafka partition in offset order; for a
             socket subscription, everything its consumers wrote, consumer after consumer, each
             in the order received; for the stdout sink, the output of each cdc run after the
             other.

The checks, per sink
  lost        a committed change the sink wants (its subscription's tables, operations and
              `where`) that no event carries.
  unexpected  an event that is not a committed change the sink wants: a change of an aborted
              transaction or of a rolled-back savepoint (its xid is in the aborted ledger, or its
              marker is ABORT/RB), a change that matches the ledger's (table, id, op, version)
              but not its xid (the same version written by an aborted transaction), one the
              ledger does not know (phantom), or one the subscription's filter excludes. With
              promotions (harness --standby) a transaction whose COMMIT returned on a primary
              that died before its standby had it is not on the promoted server: an event of it
              is a phantom too (a change the promoted server never committed).
  duplicated  events minus distinct (commit_lsn, tx_index): redeliveries; at least once allows
              them, so they are counted, not failed.
  out of order
              A stream goes backwards when, after dropping every event whose (commit_lsn,
              tx_index) the stream already delivered (keeping the first), some key's version is
              not greater than the version of the key's previous event. This is exactly what a
              consumer needs that applies events in order and drops repeats by (commit_lsn,
              tx_index), as the README recommends: it then never applies an older version after
              a newer one. A redelivery after a crash repeats older events (v3 v4 | v3 v4 v5) and
              is not backwards; v3 v5 v4 is, even if v5 is delivered again later, since that
              consumer would end at v4. Also counted here: a key whose last event in the stream
              (repeats included) is not its final version although that was delivered: a
              compacted topic (or a consumer that keeps the last event of a key) would hold a
              stale row; and, for Kafka, a key whose events are in more than one partition.
  refused     (Kafka) what the mock broker appended although a real one refuses it. cdc's producer
              is idempotent with enable.gapless.guarantee: when a batch fails for good, librdkafka
              raises a fatal error (cdc logs it, naming the partition and the batch's size) and
              cdc streams again from the slot. A real broker refuses every later batch of that
              producer in that partition (its sequence numbers have a hole), but librdkafka may
              already have queued one behind the failed one, and librdkafka 2.0.2's mock checks
              sequence numbers only for transactional producers: it appends it. Such a run of the
              partition then has a hole of exactly the failed batch's size, the next run (the
              replay from the slot's confirmed position) delivers the hole and everything after
              it again, and the events after the hole are left out of every check, as a real
              broker would have refused them. Nothing else is: a hole without a logged failure of
              its size, or followers the replay does not deliver again, are checked as they are.
  slot        at each kill -9 of cdc the harness samples the slot's confirmed_flush_lsn C once
              the walsender has let go. The server never sends again a transaction whose commit
              LSN is below C, so each such change the sink wants must already have been
              delivered then: for Kafka, at an offset below the partition's high watermark read
              right after the kill; for the stdout sink, in the output of a run before the kill;
              for a socket subscription, written by a consumer before the kill or readable from
              the spool after the restart (read from `earliest` without acknowledging, before any
              consumer attaches). A change's commit LSN is the one its events carry (any sink);
              for a change no sink delivered, the ledger's upper bound (insert LSN after COMMIT)
              is used when it is below C.
"""

import collections
import re

from load import MARK_ABORT, MARK_OK, MARK_RB

MAX_EXAMPLES = 8


def change_ident(c):
    return (c.table, c.id, c.op, None if c.op == "delete" else c.ver)


def rec_ident(r):
    return (r.table, r.id, r.op, None if r.op == "delete" else r.ver)


class LedgerIndex:
    """The ledger ({token: Txn} committed and aborted, and lost at a promotion), indexed by change
    identity."""

    def __init__(self, committed, aborted, lost=None):
        self.committed = committed
        self.aborted_xids = {t.xid for t in aborted.values()}
        self.lost_xids = {t.xid for t in (lost or {}).values()}
        self.by_ident = {}  # ident -> (Txn, Change)
        self.errors = []
        for t in committed.values():
            for c in t.changes:
                i = change_ident(c)
                if i in self.by_ident:
                    self.errors.append(f"ledger: change {i} recorded twice (xids {self.by_ident[i][0].xid} "
                                       f"and {t.xid})")
                self.by_ident[i] = (t, c)

    def version(self, r):
        """The version of an event's change, for ordering (a delete without an old row: the
        ledger's)."""
        if r.ver is not None or r.op != "delete":
            return r.ver
        hit = self.by_ident.get(rec_ident(r))
        return hit[1].ver if hit else None

    def judge(self, r, wants):
        """None if r carries a committed change that the sink wants, else (category, text). An
        xid can belong to an aborted and to a committed transaction (reused after a crash), so
        an event is matched against the committed changes first."""
        hit = self.by_ident.get(rec_ident(r))
        why = None
        if hit is None:
            why = f"no committed change {rec_ident(r)} in the ledger (xid {r.xid})"
        else:
            t, c = hit
            if t.xid != r.xid:
                why = f"ledger has {rec_ident(r)} from xid {t.xid}, the event says xid {r.xid}"
            elif r.op != "delete" and r.note != MARK_OK:
                why = f"note {r.note!r}, the ledger's change wrote {c.note!r}"
            elif r.op == "delete" and r.ver is not None and r.ver != c.ver:
                why = f"delete of version {r.ver - 1}, the ledger deleted version {c.ver - 1}"
        if why is None:
            if not wants(c):
                return "filter", f"{rec_ident(r)} does not match the subscription"
            return None
        if r.xid in self.aborted_xids or r.note in (MARK_ABORT, MARK_RB):
            return "aborted", f"change of an aborted transaction or savepoint (xid {r.xid}, note {r.note}): {why}"
        if r.xid in self.lost_xids:
            return "phantom", f"xid {r.xid} committed on a primary that died before its standby had it: {why}"
        return "phantom", why


class SinkData:
    """What one sink delivered, filled in by the harness.

    kind      'kafka', 'socket', 'stdout' or 'nats'
    wants     Change -> bool: whether the sink's subscription takes the change
    streams   {stream id: [Rec]}: Kafka (topic, partition) with Rec.where = (stream id, offset);
              socket consumer run n / stdout cdc run n with Rec.where = (n, line number); NATS the
              one stream 0 with Rec.where = (0, stream sequence)
    cuts      {kill index: cut}: Kafka {(topic, partition): high watermark} (None: unknown), socket
              (consumer run, lines written) at the kill, stdout the number of the run killed, NATS
              the stream's last sequence (None: unknown)
    snap_recs {kill index: [Rec] read from the spool after the restart} (socket; a kill without
              an entry: the read failed, and what was delivered by the end counts)
    other_offsets  the offsets of the schema and DDL events read (socket): no changes, but they
              take offsets
    failed_batches [((topic, partition), messages)] of the batches cdc's producer logged as failed
              for good (Kafka; failed_batches() reads them from cdc's logs)
    refused   {(topic, partition): offsets} the mock appended after such a batch (set by analyse)
    """

    def __init__(self, name, kind, wants):
        self.name, self.kind, self.wants = name, kind, wants
        self.streams = {}
        self.cuts = {}
        self.snap_recs = {}
        self.other_offsets = set()
        self.failed_batches = []
        self.refused = {}

    def add(self, sid, r):
        """One event read in stream sid: a change into the stream, a schema or DDL event's offset
        aside."""
        if r.op in ("schema", "ddl"):
            if r.off is not None:
                self.other_offsets.add(r.off)
            return
        self.streams.setdefault(sid, []).append(r)

    def order_groups(self):
        if self.kind == "kafka":
            return [self.streams[k] for k in sorted(self.streams)]
        return [[r for k in sorted(self.streams) for r in self.streams[k]]]

    def present(self, k, where, ident, snaps):
        """Whether the first delivery at where (None: never delivered) counts as delivered at
        kill k; snaps: {kill index: set of idents} of the spool reads."""
        cut = self.cuts.get(k)
        if self.kind == "kafka":
            if cut is None:
                return where is not None
            return where is not None and where[1] < cut.get(where[0], 0)
        if self.kind == "stdout":
            return where is not None and where[0] <= cut
        if self.kind == "nats":
            return where is not None and (cut is None or where[1] <= cut)
        if where is not None and cut is not None and where <= cut:
            return True
        if k not in snaps:  # the spool read failed: what was delivered by the end
            return where is not None
        return ident in snaps[k]


class Result:
    def __init__(self, name):
        self.name = name
        self.expected = self.delivered = self.unique = self.lost = self.duplicated = 0
        self.out_of_order = self.slot = self.slot_checked = 0
        self.gaps = self.spool_duplicated = self.refused = 0
        self.unexpected = collections.Counter()
        self.examples = collections.defaultdict(list)

    def note(self, what, text):
        if len(self.examples[what]) < MAX_EXAMPLES:
            self.examples[what].append(text)

    @property
    def failed(self):
        return bool(self.lost or sum(self.unexpected.values()) or self.out_of_order or self.slot or self.gaps)


def commit_lsns(sinks, index):
    """{xid: commit_lsn} from the events of every sink, and the disagreements."""
    out, errors = {}, []
    for s in sinks:
        for stream in s.streams.values():
            for r in stream:
                prev = out.setdefault(r.xid, r.cl)
                if prev != r.cl and r.xid not in index.aborted_xids and r.xid not in index.lost_xids:
                    errors.append(f"{s.name}: xid {r.xid} with commit_lsn {r.cl:X} and {prev:X}")
    return out, errors


def analyse(sink, index, kills, cl_by_xid):
    """One sink against the ledger: a Result. kills: [(kill index, confirmed_flush_lsn)]."""
    res = Result(sink.name)
    if sink.kind == "kafka":
        _leave_out_refused(sink, res)
    expected = {i for i, (_, c) in index.by_ident.items() if sink.wants(c)}
    res.expected = len(expected)
    first_ok = {}     # ident -> where of its first delivery (committed changes only)
    by_clti = {}      # (commit_lsn, tx_index) -> ident
    bad_keys = set()  # (commit_lsn, tx_index) of unexpected events: left out of the order check
    for sid in sorted(sink.streams):
        for r in sink.streams[sid]:
            res.delivered += 1
            key = (r.cl, r.ti)
            ident = rec_ident(r)
            prev = by_clti.get(key)
            if prev is not None:
                if prev != ident:
                    bad_keys.add(key)
                    res.unexpected["phantom"] += 1
                    res.note("phantom", f"({r.cl:X}, {r.ti}) is {prev} and, at {r.where}, {ident}")
                continue
            by_clti[key] = ident
            bad = index.judge(r, sink.wants)
            if bad:
                bad_keys.add(key)
                res.unexpected[bad[0]] += 1
                res.note(bad[0], f"at {r.where}: {bad[1]}")
                continue
            if ident not in first_ok or r.where < first_ok[ident]:
                first_ok[ident] = r.where
    res.unique = len(by_clti)
    res.duplicated = res.delivered - res.unique
    lost = expected - first_ok.keys()
    res.lost = len(lost)
    for i in sorted(lost, key=lambda i: (i[0], i[1], str(i[3])))[:MAX_EXAMPLES]:
        t = index.by_ident[i][0]
        res.note("lost", f"{i} of xid {t.xid} (commit_lsn {cl_by_xid.get(t.xid, 0):X}, kind {t.kind})")
    _check_order(sink, index, expected, first_ok, bad_keys, res)
    if sink.kind == "socket":
        _check_offsets(sink, res)
    if sink.kind == "kafka":
        _check_partition_offsets(sink, res)
    _check_slot(sink, index, kills, cl_by_xid, expected, first_ok, res)
    return res


def _check_order(sink, index, expected, first_ok, bad_keys, res):
    final = {}  # key -> the last version the sink wants
    for (table, id_, op, ver) in expected:
        v = index.by_ident[(table, id_, op, ver)][1].ver
        if v > final.get((table, id_), 0):
            final[(table, id_)] = v
    delivered = {(i[0], i[1], index.by_ident[i][1].ver) for i in first_ok}
    homes = {}
    for gi, group in enumerate(sink.order_groups()):
        seen, last, last_raw = set(), {}, {}
        for r in group:
            if (r.cl, r.ti) in bad_keys:
                continue
            k = (r.table, r.id)
            v = index.version(r)
            last_raw[k] = (v, r.where)
            homes.setdefault(k, set()).add(gi)
            key = (r.cl, r.ti)
            if key in seen:
                continue
            seen.add(key)
            if v is None:
                continue
            if k in last and v <= last[k][0]:
                res.out_of_order += 1
                res.note("order", f"key {k}: version {v} at {r.where} after version {last[k][0]} at {last[k][1]}")
            last[k] = (v, r.where)
        for k, (v, where) in last_raw.items():
            want = final.get(k)
            # Only a stale last event counts here; a final version never delivered is a loss.
            if want is not None and v != want and (k[0], k[1], want) in delivered:
                res.out_of_order += 1
                res.note("order", f"key {k}: last event (at {where}) has version {v}, final is {want}")
    if sink.kind == "kafka":
        for k, gs in homes.items():
            if len(gs) > 1:
                res.out_of_order += 1
                res.note("order", f"key {k} in {len(gs)} partitions")


def _check_offsets(sink, res):
    """A socket subscription's offsets: increasing within each consumer connection, each naming
    one change wherever it is read (consumers, the spool reads after restarts), dense from the
    first one read."""
    change_at = {}  # offset -> (commit_lsn, tx_index)
    offsets_of = collections.defaultdict(set)
    runs = [(sid, sink.streams[sid]) for sid in sorted(sink.streams)]
    runs += [(f"spool read #{k}", recs) for k, recs in sorted(sink.snap_recs.items())]
    for sid, recs in runs:
        prev = None
        for r in recs:
            if r.off is None:
                res.unexpected["phantom"] += 1
                res.note("phantom", f"{sid}: an event without an offset")
                continue
            if prev is not None and r.off <= prev:
                res.out_of_order += 1
                res.note("order", f"consumer run {sid}: offset {r.off} after {prev}")
            prev = r.off
            key = (r.cl, r.ti)
            if change_at.setdefault(r.off, key) != key:
                res.unexpected["phantom"] += 1
                res.note("phantom", f"offset {r.off} is ({change_at[r.off][0]:X}, {change_at[r.off][1]}) "
                                    f"and, in {sid}, ({r.cl:X}, {r.ti})")
            offsets_of[key].add(r.off)
    res.spool_duplicated = sum(len(v) - 1 for v in offsets_of.values())
    if change_at:
        lo, hi = min(change_at), max(change_at)
        missing = [o for o in range(lo, hi + 1) if o not in change_at and o not in sink.other_offsets]
        res.gaps = len(missing)
        if missing:
            res.note("gaps", f"offsets never read between {lo} and {hi}: {missing[:20]}")


def _check_partition_offsets(sink, res):
    """Each Kafka partition was read without a hole: a broker numbers every message, so an offset
    the reader never saw means the reader skipped it (not that the broker lost it)."""
    for tp, recs in sorted(sink.streams.items()):
        seen = {r.where[1] for r in recs} | sink.refused.get(tp, set())
        missing = [o for o in range(0, max(seen) + 1) if o not in seen] if seen else []
        if missing:
            res.gaps += len(missing)
            res.note("gaps", f"partition {tp}: offsets never read: {missing[:20]}")


FAILED_BATCH = re.compile(r"Gap-less ordering would not be guaranteed if proceeding: ProduceRequest for (\S+) "
                          r"\[(\d+)\] with (\d+) message\(s\) failed")


def failed_batches(logs):
    """[((topic, partition), messages)] of each batch librdkafka failed for good with its
    gap-less guarantee (a fatal error, in the logs of cdc's runs)."""
    return [((m[1], int(m[2])), int(m[3])) for text in logs for m in FAILED_BATCH.finditer(text)]


def refused_after_failed_batches(keys, counts):
    """The indexes into keys (one Kafka partition's (commit_lsn, tx_index), in offset order) of what
    a real broker refuses after batches of counts messages failed for good (see 'refused' in the
    module docstring). The partition splits into runs where keys go back (one producer session
    each, streaming forward). A batch of n failed in run i when run i misses exactly n keys that run
    i + 1 (the replay) holds consecutively inside run i's range, and run i + 1 holds again every key
    of run i after them: those are refused. Each count matches one run at most."""
    starts = [0] + [i for i in range(1, len(keys)) if keys[i] < keys[i - 1]] + [len(keys)]
    runs = [range(a, b) for a, b in zip(starts, starts[1:])]
    out, used = set(), set()
    for n in counts:
        for i in range(len(runs) - 1):
            cur, nxt = [keys[j] for j in runs[i]], [keys[j] for j in runs[i + 1]]
            have = set(cur)
            hole = [j for j, k in enumerate(nxt) if cur[0] <= k <= cur[-1] and k not in have]
            if i in used or not hole or len({nxt[j] for j in hole}) != n:
                continue
            if hole != list(range(hole[0], hole[-1] + 1)):  # not one batch
                continue
            after = [j for j in runs[i] if keys[j] > nxt[hole[-1]]]
            if after and {keys[j] for j in after} <= set(nxt):
                used.add(i)
                out.update(after)
                break
    return out


def _leave_out_refused(sink, res):
    """Leaves out of sink.streams what the mock appended after a batch that failed for good (see
    'refused' in the module docstring), into sink.refused."""
    counts = collections.defaultdict(list)
    for tp, n in sink.failed_batches:
        counts[tp].append(n)
    for tp, ns in counts.items():
        recs = sink.streams.get(tp, [])
        gone = refused_after_failed_batches([(r.cl, r.ti) for r in recs], ns)
        if not gone:
            continue
        sink.refused[tp] = {recs[j].where[1] for j in gone}
        sink.streams[tp] = [r for j, r in enumerate(recs) if j not in gone]
        res.refused += len(gone)
        res.note("refused", f"{tp}: {len(gone)} events the mock appended after a batch that failed for good "
                            f"(offsets {min(sink.refused[tp])}..{max(sink.refused[tp])}), sent again by the replay")


def _check_slot(sink, index, kills, cl_by_xid, expected, first_ok, res):
    if not kills:
        return
    items = []
    for ident in expected:
        t = index.by_ident[ident][0]
        cl = cl_by_xid.get(t.xid)
        if cl is not None:
            items.append((cl, False, ident, first_ok.get(ident)))
        else:
            items.append((t.hi_lsn, True, ident, first_ok.get(ident)))
    snaps = {k: {rec_ident(r) for r in recs} for k, recs in sink.snap_recs.items()}
    for k, confirmed in kills:
        for lsn, bound, ident, where in items:
            # Exact commit LSN: passed when below C. Upper bound only: passed when <= C.
            if lsn is None or lsn > confirmed or (lsn == confirmed and not bound):
                continue
            res.slot_checked += 1
            if not sink.present(k, where, ident, snaps):
                res.slot += 1
                res.note("slot", f"kill #{k}: slot confirmed {confirmed:X}, change {ident} (commit "
                                 f"{'<' if bound else ''}{lsn:X}) was {'delivered only later, at ' + str(where) if where else 'never delivered'}")


def verify(committed, aborted, sinks, kills, lost=None):
    """Runs every check: ([Result], [global error texts]). lost: {token: Txn} committed on a primary
    that died before its standby had them (not on the promoted server)."""
    index = LedgerIndex(committed, aborted, lost)
    cl_by_xid, errors = commit_lsns(sinks, index)
    errors = index.errors + errors
    return [analyse(s, index, kills, cl_by_xid) for s in sinks], errors
