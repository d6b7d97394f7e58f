"""socket_model.py: a randomized state-machine test of cdc's subscriber socket. Clients connect to a
real cdc (meant to be the sanitizer build), subscribe in each mode and to dead letters, ack (rightly
and wrongly, cumulative acks mixing delivered and never-delivered offsets), stay silent, stop
reading their socket (and start again), send garbage and disconnect while rows (some of 300 kB, so
that a consumer that stops reading has Deliveries left in cdc's output) are inserted into a real
PostgreSQL; every frame they receive is checked against a reference model of what each consumer
holds, and every few dozen steps the run settles (all acknowledged, nothing lost, nothing hung).

    /usr/bin/python3 tests/model/socket_model.py [--seed N] [--steps N | --duration SECONDS]

The seed is printed first (and on failure); CDC_MODEL_SEED sets it too. CDC_BIN names the binary.

Only the clients' own clock is known, so each check is one that no interleaving of the server can
pass legitimately: a frame's send time is bounded below by what caused it (the row's insert, the
consumer's Subscribe, earlier frames on the same connection) and above by its receipt; an ack is
known processed once a later barrier (a Subscribe to an unknown subscription, answered with an
Error) or an acked_offset says so, and an ack counts unless cdc's Acked answer refuses it (issue 15:
an ack of an offset in flight to another consumer is refused). A cumulative ack is all or nothing
(issue 22): the answer to one mixing held and never-delivered offsets must list every offset, the
held ones as IN_REFUSED_ACK, and leave acked_offset where it was. A connection that never subscribes
is closed with SUBSCRIBE_TIMEOUT after 10 s.

A consumer that neither reads nor sends for ack_timeout loses what it holds (issue 22): cdc sees
reads only every 100 ms and through the kernel's count of unread bytes, so the model takes a
delivery as possibly taken back from the end of its consumer's last quiet stretch of ack_timeout -
QUIET_SLACK on (its reads and sends are known to the client exactly).
"""

import argparse
import http.client
import itertools
import json
import os
import random
import signal
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from conftest import CDC_BIN, CdcProcess, to_yaml, wait_for  # noqa: E402
from pg import TempPostgres  # noqa: E402
from subscriber_helpers import FRAME_MAX, Subscriber, ServerError, encode_frame, pb  # noqa: E402

INF = float("inf")
EPS = 0.03            # ms rounding of cdc's deadlines, and clock reads on either side
QUIET_SLACK = 0.35    # cdc's 100 ms reading checks (and a read it could not see between two)
BIG = 300000          # bytes of a big row's pad
TIMEOUT = 1.0         # ack_timeout of the subscriptions that time out
NO_TIMEOUT = 3600.0   # fo: rotation impossible, so the active consumer is known exactly
MAX_DELIVERIES = 3
MAX_UNACKED = 6
HUGE = 10 ** 12       # an offset never delivered
# name: (consumers, ack_timeout, batch)
SUBS = {
    "fo": ("failover", NO_TIMEOUT, False),
    "fot": ("failover", TIMEOUT, False),
    "sh": ("shared", TIMEOUT, False),
    "ks": ("key_shared", TIMEOUT, False),
    "ksb": ("key_shared", TIMEOUT, True),
}
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")


class ModelError(AssertionError):
    pass


def column(row, name):
    for c in row.columns:
        if c.name == name:
            return getattr(c.value, c.value.WhichOneof("kind"))
    raise ModelError("event row without column %s" % name)


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("cdc", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def request(path, method, target, body=None):
    """(status, body) of one HTTP request on the status socket."""
    h = UnixHTTP(path)
    try:
        h.request(method, target, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"} if body is not None else {})
        r = h.getresponse()
        return r.status, r.read().decode()
    finally:
        h.close()


class Delivery:
    __slots__ = ("conn", "offset", "count", "L", "recv")

    def __init__(self, conn, offset, count, L, recv):
        self.conn, self.offset, self.count, self.L, self.recv = conn, offset, count, L, recv


class Queue:
    """What the model knows of one queue: a subscription's events or its dead letters."""

    def __init__(self, sub, dead):
        self.sub, self.dead = sub, dead
        mode, self.timeout, self.batch = SUBS[sub]
        self.mode = "failover" if dead else mode
        self.name = sub + (".dead" if dead else "")
        self.deliveries = {}     # offset -> [Delivery] in order of receipt
        self.rows = {}           # dead: offset -> row id
        self.cursor = []         # [(acked_offset, time it was known at the latest)], increasing
        self.confirmed = {}      # offset -> time by which an ack of it was processed
        self.ack_sent = {}       # shared modes: offset -> first time an ack that counts was sent
        self.maybe_acked = set()  # offsets an ack may have covered without their delivery being seen
        self.first = {}          # key_shared: key -> [Delivery, offset] of first deliveries
        self.conns = []          # subscribed connections, in order of Subscribe

    def confirmed_at(self, o):
        t = self.confirmed.get(o, INF)
        for a, r in self.cursor:
            if a >= o:
                return min(t, r)
        return t

    def note_cursor(self, acked, when):
        if not self.cursor or acked > self.cursor[-1][0]:
            self.cursor.append((acked, when))


class Conn:
    ids = itertools.count(1)

    def __init__(self, kind, q=None):
        self.id = next(Conn.ids)
        self.kind = kind            # consumer, silent (never subscribes), extra (a PUT subscription)
        self.q = q
        self.sub = None             # Subscriber or raw socket
        self.t_sub = 0.0
        self.W = 0.0                # lower bound of the send time of the last frame received
        self.poisoned = INF         # time garbage was sent: cdc closes it, its acks no longer count
        self.closed = INF           # time the client closed it
        self.acked_seen = 0         # highest acked_offset cdc reported on this connection
        self.held = {}              # offset -> delivery count, not acked by this connection
        self.mine = set()           # offsets this connection acked
        self.expect_error = None    # the Error code cdc must answer before closing
        self.active = None
        self.first_recv = None      # when its first Delivery arrived
        self.mute = False           # sent half a frame: anything more would be read as its rest
        self.unanswered = 0         # Ack frames sent that no Acked has answered yet
        self.refused = set()        # offsets cdc refused in this connection's acks
        self.stopped = None         # since when it does not read its socket (nor send)
        self.stop_for = 0.0         # and for how long at least
        self.activity = []          # times it read its socket or sent a frame, increasing
        self.answers = []           # the Acked frames received, in order
        self.got = []               # the Deliveries (events) it received

    def __repr__(self):
        return "c%d(%s%s)" % (self.id, self.q.name if self.q else self.kind,
                             ",poisoned" if self.poisoned < INF else "")

    def released(self):
        """Lower bound of when cdc took back what this connection holds, timeouts aside."""
        return min(self.closed, self.poisoned)

    def active_at(self, t):
        self.activity.append(t)

    def quiet_from(self, since, timeout):
        """Lower bound of when cdc could take it for one that stopped reading, at or after since:
        the end of its first stretch without reads or sends of timeout - QUIET_SLACK ending then
        or later (cdc takes it back at such an end, never earlier)."""
        need = timeout - QUIET_SLACK
        a = self.activity
        for i, t in enumerate(a):
            end = a[i + 1] if i + 1 < len(a) else INF
            if end >= since and end - t >= need:
                return max(since, t + need)
        return INF if a else since


class Model:
    def __init__(self, seed, pg, workdir, log=print, reload_every=0.15):
        self.seed = seed
        self.rng = random.Random(seed)
        self.pg = pg
        self.workdir = workdir
        self.log = log
        self.reload_every = reload_every
        self.schema = "model_%d" % (seed % 1000000)
        self.t_ins = [None]          # offset -> time before its transaction was sent
        self.key = [None]            # offset -> the row's key (id): key_shared keeps its order
        self.version = [None]        # offset -> the row's v after the change
        self.rows_v = {}             # id -> current v
        self.by_key = {}             # id -> its offsets
        self.queues = {(s, d): Queue(s, d) for s in SUBS for d in (False, True)}
        self.conns = []
        self.history = []
        self.steps = 0
        self.stats = {"deliveries": 0, "acks": 0, "wrong_acks": 0, "cross_acks": 0, "mixed_acks": 0, "garbage": 0,
                      "closes": 0, "settles": 0, "dead": 0, "reloads": 0, "puts": 0, "redelivered": 0,
                      "stopped_reading": 0}
        self.extra = None            # None, "put", "deleted"
        self.err_pos = 0

    # --- cdc -----------------------------------------------------------------------------------

    def start(self):
        self.pg.sql('drop schema if exists "%s" cascade' % self.schema)
        self.pg.sql('create schema "%s"' % self.schema)
        self.pg.sql('create table "%s".jobs (id int primary key, v int, pad text)' % self.schema)
        sockdir = tempfile.mkdtemp(prefix="cdc-model-")
        self.sock = os.path.join(sockdir, "events.sock")
        self.status = os.path.join(sockdir, "status.sock")
        subs = []
        for name, (mode, timeout, batch) in SUBS.items():
            s = {"name": name, "tables": ["%s.jobs" % self.schema], "operations": ["insert", "update"], "sink": "socket",
                 "consumers": mode, "ack_timeout": "%ds" % timeout, "max_deliveries": MAX_DELIVERIES,
                 "max_unacked": MAX_UNACKED}
            if batch:
                s["batch"] = "transaction"
            subs.append(s)
        tag = "%d_%d" % (seed_tag(self.seed), os.getpid())
        self.cfg = {"source": {"dsn": self.pg.dsn, "slot": "model_" + tag, "publication": "model_" + tag,
                               "create": True, "publish": ["%s.jobs" % self.schema]},
                    "state_dir": os.path.join(self.workdir, "state"),
                    "status": {"socket": self.status},
                    "subscribers": {"socket": self.sock},
                    "subscriptions": subs}
        self.cfg_path = os.path.join(self.workdir, "cdc.yaml")
        with open(self.cfg_path, "w") as f:
            f.write(to_yaml(self.cfg))
        self.proc = CdcProcess([CDC_BIN, "run", "-c", self.cfg_path], os.path.join(self.workdir, "cdc.stdout"),
                               os.path.join(self.workdir, "cdc.stderr"))
        slot = self.cfg["source"]["slot"]

        def streaming():
            self.check_cdc()
            rows = self.pg.sql("select active from pg_replication_slots where slot_name = %s", (slot,))
            return rows and rows[0][0]
        wait_for(streaming, 60, what="cdc to stream")

    def stop(self):
        """SIGTERM: cdc must exit 0 with no sanitizer report (LeakSanitizer runs at exit)."""
        for c in self.conns:
            self.close(c, quiet=True)
        rc = self.proc.terminate(60)
        self.check_cdc(exited_ok=rc == 0)
        self.expect(rc == 0, "cdc exited %s at SIGTERM" % rc)
        self.proc.close()
        slot = self.cfg["source"]["slot"]
        self.pg.sql("select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = %s",
                    (slot,))
        self.pg.sql('drop publication if exists "%s"' % self.cfg["source"]["publication"])
        self.pg.sql('drop schema if exists "%s" cascade' % self.schema)

    def check_cdc(self, exited_ok=False):
        err = self.proc.stderr()
        for m in SANITIZER_MARKS:
            i = err.find(m)
            if i >= 0:
                raise ModelError("sanitizer report in cdc's stderr:\n" + err[max(0, i - 2000):i + 6000])
        if not exited_ok and not self.proc.running():
            raise ModelError("cdc died: " + self.proc.describe())

    def expect(self, cond, msg):
        if not cond:
            raise ModelError(msg)

    # --- frames --------------------------------------------------------------------------------

    def on_frame(self, c, f, recv):
        kind = f.WhichOneof("kind")
        q = c.q
        if kind == "delivery":
            self.expect(c.kind != "silent", "%r never subscribed but got a Delivery" % c)
            if c.kind == "consumer":
                self.on_delivery(c, list(f.delivery.events), recv)
        elif kind == "heartbeat":
            h = f.heartbeat
            if c.kind == "consumer":
                self.on_cursor(c, h.acked_offset, h.head_offset, recv)
                c.active = h.active
        elif kind == "error":
            code = pb.Error.Code.Name(f.error.code)
            self.expect(c.expect_error is not None and code in c.expect_error,
                        "%r got Error %s (%s); expected %s" % (c, code, f.error.message, c.expect_error))
            c.expect_error = ("<closed>",)
        elif kind == "acked":
            a = f.acked
            c.answers.append(a)
            self.expect(a.answered <= c.unanswered, "%r: Acked answers %d acks of %d sent" %
                        (c, a.answered, c.unanswered))
            c.unanswered -= a.answered
            c.refused.update(r.offset for r in a.refused)
            self.expect(a.acked_offset >= c.acked_seen, "%r: acked_offset went back from %d to %d" %
                        (c, c.acked_seen, a.acked_offset))
            c.acked_seen = a.acked_offset
            q.note_cursor(a.acked_offset, recv)
        elif kind == "dropped":
            raise ModelError("%r got Dropped %s without retention limits" % (c, f.dropped))
        else:
            raise ModelError("%r got an unexpected %s frame" % (c, kind))
        if q is not None and kind != "error":
            c.W = max(c.W, c.t_sub)

    def on_cursor(self, c, acked, head, recv):
        q = c.q
        limit = len(self.t_ins) - 1 if not q.dead else HUGE
        self.expect(acked <= head <= limit, "%r: acked_offset %d, head_offset %d, %d rows inserted" %
                    (c, acked, head, len(self.t_ins) - 1))
        self.expect(acked >= c.acked_seen, "%r: acked_offset went back from %d to %d" % (c, c.acked_seen, acked))
        c.acked_seen = acked
        q.note_cursor(acked, recv)
        if not q.dead and head:
            c.W = max(c.W, self.t_ins[head])

    def on_delivery(self, c, events, recv):
        q = c.q
        self.expect(events, "%r: an empty Delivery" % c)
        L = max(c.W, c.t_sub)
        if not q.dead:
            for e in events:
                self.expect(1 <= e.offset < len(self.t_ins), "%r: offset %d, only %d rows inserted" %
                            (c, e.offset, len(self.t_ins) - 1))
                L = max(L, self.t_ins[e.offset])
        c.W = L
        if q.mode == "failover":
            self.check_active(c, recv)
        if q.batch and not q.dead:
            offs = [e.offset for e in events]
            self.expect(offs == list(range(offs[0], offs[0] + len(offs))), "%r: batch %s not dense" % (c, offs))
        for e in events:
            self.on_event(c, q, e, L, recv)

    def check_active(self, c, recv):
        """failover: only the first consumer still attached receives. Without timeouts the order is
        that of Subscribe; with them, two consumers' first deliveries cannot both come before either
        could have lost the failover (gone, or ack_timeout after subscribing)."""
        q = c.q
        for y in q.conns:
            if y is c:
                break
            if q.timeout == NO_TIMEOUT:
                self.expect(recv >= y.released(), "failover %s: %r received while %r, subscribed before it, "
                            "was attached" % (q.name, c, y))
        if q.timeout != NO_TIMEOUT and c.first_recv is None:
            lb = lambda x: min(x.released(), x.t_sub + q.timeout - EPS, x.quiet_from(x.t_sub, q.timeout))  # noqa: E731
            for y in q.conns:
                if y is not c and y.first_recv is not None:
                    self.expect(recv >= lb(y) or y.first_recv >= lb(c), "failover %s: %r and %r both received "
                                "before either could lose the failover" % (q.name, c, y))
        if c.first_recv is None:
            c.first_recv = recv

    def release_lb(self, q, d):
        """Lower bound of when cdc took delivery d back: its consumer went, its deadline passed,
        or its consumer stopped reading. key_shared: a timeout takes the key's bucket away with the
        consumer's other deliveries of it, so the deadline of any other delivery to the same
        connection that was not acknowledged before it counts too (the model does not know
        buckets: 256 of them, by a hash of the key)."""
        start = d.conn.t_sub if q.mode == "failover" else d.L  # failover returns all on rotation
        lb = min(d.conn.released(), start + q.timeout - EPS, d.conn.quiet_from(start, q.timeout))
        if q.mode == "key_shared" and not q.dead:
            for y in d.conn.got:
                due = y.L + q.timeout - EPS
                if y.L >= d.L - q.timeout and q.confirmed_at(y.offset) >= due:
                    lb = min(lb, due)
        return lb

    def on_event(self, c, q, e, L, recv):
        o, n = e.offset, e.delivery_count
        row = e.new_row
        rid = column(row, "id")
        what = "%s offset %d delivery_count %d to %r" % (q.name, o, n, c)
        self.stats["deliveries"] += 1
        self.stats["redelivered"] += n > 1
        self.expect(n >= 1, what + ": delivery_count < 1")
        if not q.dead:
            self.expect((rid, column(row, "v")) == (self.key[o], self.version[o]),
                        what + ": carries row %d v %d" % (rid, column(row, "v")))
            self.expect(n <= MAX_DELIVERIES, what + ": delivered more than max_deliveries")
        else:
            change = (rid, column(row, "v"))
            self.expect(change in self.changes, what + ": change %s never made" % (change,))
            self.expect(q.rows.setdefault(o, change) == change, what + ": %s, before %s" % (change, q.rows[o]))
            owner = self.dead_rows.setdefault((q.sub, self.changes[change]), o)
            self.expect(owner == o, what + ": change %s already dead letter %d" % (change, owner))
        self.expect(o > c.acked_seen, what + ": after this connection was told %d is acknowledged" % c.acked_seen)
        t = q.confirmed_at(o)
        self.expect(L <= t, what + ": acknowledged by %.3f, sent again after %.3f" % (t, L))
        x = Delivery(c, o, n, L, recv)
        prev = q.deliveries.setdefault(o, [])
        for p in prev:
            self.expect(p.count != n, what + ": delivery_count %d already went to %r" % (n, p.conn))
            a, b = (p, x) if p.count < n else (x, p)
            self.expect(b.recv >= self.release_lb(q, a),
                        "%s offset %d: delivery %d to %r while delivery %d was in flight to %r (no timeout, "
                        "no disconnect between)" % (q.name, o, b.count, b.conn, a.count, a.conn))
        prev.append(x)
        c.got.append(x)
        if q.mode == "key_shared" and not q.dead:
            self.check_key(c, q, o, x)
        c.held[o] = n

    def check_key(self, c, q, o, x):
        k = self.key[o]
        for o2 in self.by_key[k]:
            if o2 >= o:
                break
            for p in q.deliveries.get(o2, ()):
                if p.conn is c:
                    continue
                lb = min(self.release_lb(q, p), q.ack_sent.get(o2, INF))
                self.expect(x.recv >= lb, "%s key %d: offset %d to %r while offset %d was in flight to %r" %
                            (q.name, k, o, c, o2, p.conn))
        if x.count != 1:
            return
        for y, o2 in q.first.setdefault(k, []):
            self.expect(not (o2 > o and (y.conn is c or y.recv < x.L)),
                        "%s key %d: offset %d first sent to %r before offset %d to %r" % (q.name, k, o2, y.conn, o, c))
        q.first[k].append((x, o))

    # --- connections ---------------------------------------------------------------------------

    def drain(self, c, timeout=0.0):
        """Feeds every frame at hand (or arriving within timeout) to the model; True if closed. A
        connection that stopped reading is left alone."""
        if c.stopped is not None:
            return False
        s = c.sub
        deadline = time.monotonic() + timeout
        c.active_at(time.monotonic())
        while True:
            f = s.recv(max(0.0, deadline - time.monotonic()))
            if f is None:
                break
            self.on_frame(c, f, time.monotonic())
        c.active_at(time.monotonic())
        if s.closed and c.closed == INF:
            self.expect(c.expect_error == ("<closed>",) or (c.expect_error and "<eof>" in c.expect_error),
                        "cdc closed %r (expected %s)" % (c, c.expect_error))
            self.forget(c)
            return True
        return False

    def drain_all(self, timeout=0.0):
        """Every connection's frames at hand; with a timeout, all of them for that long."""
        deadline = time.monotonic() + timeout
        while True:
            for c in list(self.conns):
                self.drain(c)
            if time.monotonic() >= deadline:
                break
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    def forget(self, c):
        c.closed = min(c.closed, time.monotonic())
        c.sub.close()
        if c in self.conns:
            self.conns.remove(c)

    def close(self, c, quiet=False):
        if not quiet:
            self.drain(c)
        self.stats["closes"] += 1
        c.closed = time.monotonic()
        c.sub.close()
        if c in self.conns:
            self.conns.remove(c)

    def subscribe(self, q, name=None, max_unacked=0, heartbeat_ms=300):
        c = Conn("consumer", q)
        c.t_sub = time.monotonic()
        c.active_at(c.t_sub)
        c.sub = Subscriber(self.sock, q.sub, consumer=name or "m%d" % next(Conn.ids), max_unacked=max_unacked,
                           dead_letters=q.dead, heartbeat_ms=heartbeat_ms, timeout=30)
        a = c.sub.subscribed
        mode = {"failover": pb.FAILOVER, "shared": pb.SHARED, "key_shared": pb.KEY_SHARED}[q.mode]
        self.expect(a.subscription == q.sub and a.mode == mode, "%r: Subscribed %s" % (c, a))
        self.expect(a.next_offset >= a.acked_offset + 1, "%r: next_offset %d below acked %d" %
                    (c, a.next_offset, a.acked_offset))
        self.on_cursor(c, a.acked_offset, a.head_offset, time.monotonic())
        if q.mode == "failover" and q.timeout == NO_TIMEOUT and all(y.poisoned == INF for y in q.conns):
            # a closed connection's EOF is read before the Subscribe of one opened after it
            first = all(y.closed < INF for y in q.conns)
            self.expect(a.active == first, "%r: Subscribed.active %s with %s before" % (c, a.active, q.conns))
        q.conns.append(c)
        self.conns.append(c)
        return c

    def ack(self, c, offsets, wrong=False):
        if not offsets:
            return
        q = c.q
        t = time.monotonic()
        c.sub.ack(offsets)
        c.active_at(time.monotonic())
        c.unanswered += 1
        self.stats["acks"] += 1
        self.stats["wrong_acks"] += wrong
        counts = c.poisoned == INF
        for o in offsets:
            c.held.pop(o, None)
            c.mine.add(o)
        if q.mode == "failover":
            top = max(offsets)
            if counts:
                seen = max(q.deliveries) if q.deliveries else 0
                if top > seen:
                    q.maybe_acked.update(range(seen + 1, min(top, len(self.t_ins) - 1) + 1))
            return
        for o in offsets:
            if o in q.deliveries:
                if counts:
                    q.ack_sent.setdefault(o, t)
                    self.pending.append((q, o, c))
                    if any(o in y.held for y in self.conns if y is not c and y.q is q):
                        self.stats["cross_acks"] += 1
            elif o < HUGE and counts:
                q.maybe_acked.add(o)

    def barrier(self):
        """Every frame sent before this returns has been processed by cdc."""
        try:
            Subscriber(self.sock, "no_such_subscription", timeout=30)
        except ServerError as e:
            self.expect(e.code == "UNKNOWN_SUBSCRIPTION", "barrier: %s" % e)
        else:
            raise ModelError("barrier: subscribed to a subscription that does not exist")
        t = time.monotonic()
        # cdc answered every ack before the barrier's Error; an ack it refused does not count
        for c in {c for _, _, c in self.pending}:
            deadline = time.monotonic() + 30
            while c.unanswered and c.closed == INF and c.poisoned == INF and not self.drain(c, 0.05):
                self.expect(time.monotonic() < deadline, "%r: %d acks not answered" % (c, c.unanswered))
        for q, o, c in self.pending:
            if o in c.refused:
                q.ack_sent.pop(o, None)
            else:
                q.confirmed[o] = min(q.confirmed.get(o, INF), t)
        self.pending = []

    # --- actions -------------------------------------------------------------------------------

    def do_write(self, big=False):
        """One transaction of 1-5 changes: inserts of new rows, updates of recent ones (so that
        keys repeat, for key_shared's per-key order); big: one insert of a row of BIG bytes."""
        rng = self.rng
        first = len(self.t_ins)
        stmts, done = [], []
        for _ in range(1 if big else rng.choice([1, 1, 2, 3, 5])):
            if big:
                rid = len(self.rows_v) + 1
                self.rows_v[rid] = 0
                stmts.append('insert into "%s".jobs values (%d, 0, repeat(\'x\', %d))' % (self.schema, rid, BIG))
            elif self.rows_v and rng.random() < 0.6:
                rid = rng.choice(sorted(self.rows_v)[-6:])
                self.rows_v[rid] += 1
                stmts.append('update "%s".jobs set v = %d where id = %d' % (self.schema, self.rows_v[rid], rid))
            else:
                rid = len(self.rows_v) + 1
                self.rows_v[rid] = 0
                stmts.append('insert into "%s".jobs values (%d, 0)' % (self.schema, rid))
            self.key.append(rid)
            self.by_key.setdefault(rid, []).append(len(self.key) - 1)
            self.version.append(self.rows_v[rid])
            self.changes[(rid, self.rows_v[rid])] = len(self.key) - 1
            done.append("%d:%d" % (rid, self.rows_v[rid]))
        self.t_ins.extend([time.monotonic()] * len(stmts))
        self.pg.sql("begin; %s; commit" % "; ".join(stmts))
        return "write%s offsets %d.. rows:versions %s" % (" big" if big else "", first, " ".join(done))

    def do_write_big(self):
        return self.do_write(big=True)

    def consumers(self, pred=lambda c: True):
        return [c for c in self.conns if c.kind == "consumer" and c.poisoned == INF and not c.mute and
                c.stopped is None and pred(c)]

    def do_subscribe(self):
        q = self.queues[(self.rng.choice(list(SUBS)), self.rng.random() < 0.25)]
        c = self.subscribe(q, max_unacked=self.rng.choice([0, 0, 1, 2, 3]))
        return "subscribe %r" % c

    def do_silent(self):
        c = Conn("silent")
        c.expect_error = ("SUBSCRIBE_TIMEOUT",)  # after 10 s
        c.sub = unsubscribed(self.sock)
        self.conns.append(c)
        return "silent connection %r" % c

    def do_ack(self):
        cs = self.consumers(lambda c: c.held)
        if not cs:
            return None
        c = self.rng.choice(cs)
        held = sorted(c.held)
        if c.q.mode == "failover":
            offs = [self.rng.choice(held)]
        else:
            offs = self.rng.sample(held, self.rng.randint(1, len(held)))
        self.ack(c, offs)
        return "ack %r %s" % (c, offs)

    def do_wrong_ack(self):
        cs = self.consumers()
        if not cs:
            return None
        c = self.rng.choice(cs)
        q = c.q
        kind = self.rng.choice(["never", "duplicate", "other"])
        if kind == "never":
            offs = [HUGE + self.rng.randrange(1000)]
        elif kind == "duplicate" and c.mine:
            offs = self.rng.sample(sorted(c.mine), min(2, len(c.mine)))
        elif kind == "other" and q.mode != "failover":
            others = sorted({o for y in self.conns if y is not c and y.q is q for o in y.held})
            if not others:
                return None
            offs = [self.rng.choice(others)]
        else:
            return None
        self.ack(c, offs, wrong=True)
        return "wrong ack (%s) %r %s" % (kind, c, offs)

    def do_mixed_ack(self):
        """A cumulative ack (failover, dead letters) of offsets the consumer holds and one never
        delivered (past the head): refused whole, every offset listed, acked_offset unmoved."""
        cs = self.consumers(lambda c: c.held and c.q.mode == "failover")
        if not cs:
            return None
        c = self.rng.choice(cs)
        deadline = time.monotonic() + 30
        while c.unanswered and c.closed == INF and not self.drain(c, 0.05):  # its answer comes next
            self.expect(time.monotonic() < deadline, "%r: %d acks not answered" % (c, c.unanswered))
        if c.closed < INF:
            return None
        held = sorted(c.held)
        never = HUGE + self.rng.randrange(1000) if self.rng.random() < 0.5 else len(self.t_ins) + self.rng.randrange(3)
        offs = self.rng.sample(held, self.rng.randint(1, min(3, len(held)))) + [never]
        self.rng.shuffle(offs)
        before, seen = c.acked_seen, len(c.answers)
        c.sub.ack(offs)
        c.active_at(time.monotonic())
        c.unanswered += 1
        self.stats["mixed_acks"] += 1
        while len(c.answers) == seen and c.closed == INF and not self.drain(c, 0.05):
            self.expect(time.monotonic() < deadline, "%r: mixed ack %s not answered" % (c, offs))
        if len(c.answers) == seen:
            return "mixed ack %r %s: closed before the answer" % (c, offs)
        a = c.answers[seen]
        why = {r.offset: pb.Refused.Reason.Name(r.reason) for r in a.refused}
        what = "%r: cumulative ack %s answered %s, acked_offset %d (was %d)" % (c, offs, why, a.acked_offset, before)
        self.expect(a.answered == 1 and sorted(r.offset for r in a.refused) == sorted(offs),
                    what + ": not refused whole")
        if set(why.values()) != {"NOT_ACTIVE"}:
            self.expect(why[never] == "NOT_DELIVERED" and a.acked_offset == before, what)
            self.expect(all(why[o] in ("IN_REFUSED_ACK", "ALREADY_ACKED", "NOT_DELIVERED") for o in offs if o != never),
                        what)
        return "mixed ack %r %s: %s" % (c, offs, why)

    def do_stop_reading(self):
        """A consumer stops reading its socket (and sending) for a while, often past ack_timeout:
        then cdc gives what it holds to the others, and Deliveries it could not write to it yet do
        not count."""
        cs = self.consumers()
        if not cs:
            return None
        c = self.rng.choice(cs)
        self.drain(c)
        c.stopped = time.monotonic()
        c.stop_for = self.rng.choice([0.2, 1.5, 2.5, 4.0])
        self.stats["stopped_reading"] += 1
        if self.rng.random() < 0.4:  # the others carry on meanwhile, past its ack timeout
            t = self.rng.uniform(1.3, 2.2)
            self.drain_all(t)
            return "stop reading %r, the others read for %.1fs" % (c, t)
        return "stop reading %r" % c

    def do_resume_reading(self):
        cs = [c for c in self.conns if c.stopped is not None and time.monotonic() - c.stopped >= c.stop_for]
        if not cs:
            return None
        c = self.rng.choice(cs)
        quiet = time.monotonic() - c.stopped
        c.stopped = None
        self.drain(c)
        return "read again %r after %.1fs" % (c, quiet)

    def do_garbage(self):
        cs = [c for c in self.conns if c.kind in ("consumer", "silent") and c.poisoned == INF and not c.mute
              and c.stopped is None]
        if not cs:
            return None
        c = self.rng.choice(cs)
        kind = self.rng.choice(["malformed", "oversized", "half", "empty", "offset0", "twice", "ack_first"])
        if kind == "ack_first" and c.kind != "silent":
            kind = "twice"
        if kind == "twice" and c.kind == "silent":
            kind = "ack_first"
        data = {
            "malformed": b"\x00\x00\x00\x03\x12\xff\xff",
            "oversized": (FRAME_MAX + 1).to_bytes(4, "big"),
            "half": self.rng.choice([b"\x00\x00", b"\x00\x00\x00\x09\x12\x02"]),
            "empty": b"\x00\x00\x00\x00",
            "offset0": encode_frame(pb.ClientFrame(ack=pb.Ack(offsets=[0]))),
            "twice": encode_frame(pb.ClientFrame(subscribe=pb.Subscribe(subscription="fo"))),
            "ack_first": encode_frame(pb.ClientFrame(ack=pb.Ack(offsets=[1]))),
        }[kind]
        self.stats["garbage"] += 1
        c.mute = kind == "half"
        if kind != "half":
            c.poisoned = time.monotonic()
            c.expect_error = ("BAD_FRAME", "SUBSCRIBE_TIMEOUT") if c.kind == "silent" else ("BAD_FRAME",)
        try:
            c.sub.send_raw(data)
        except OSError:
            pass
        hang_up = self.rng.random() < 0.4
        if hang_up:
            self.close(c, quiet=True)
        elif kind != "half":
            self.expect_closed(c)
        return "garbage %s %r%s" % (kind, c, " and hang up" if hang_up else "")

    def expect_closed(self, c, timeout=60):
        deadline = time.monotonic() + timeout
        while not self.drain(c, 0.2):
            self.expect(time.monotonic() < deadline, "%r not closed by cdc %ds after %s" % (c, timeout, c.expect_error))

    def do_close(self):
        if not self.conns:
            return None
        c = self.rng.choice(self.conns)
        self.close(c, quiet=self.rng.random() < 0.5)
        return "close %r" % c

    def do_wait(self):
        t = self.rng.choice([0.1, 0.3, 0.6])
        self.drain_all(t)
        return "listen %.1fs" % t

    def do_reload(self):
        if self.rng.random() < 0.5:
            self.proc.signal(signal.SIGHUP)
            self.stats["reloads"] += 1
            return "SIGHUP"
        if self.extra is None or self.extra == "deleted":
            st, body = request(self.status, "PUT", "/subscriptions/extra",
                               {"tables": ["%s.jobs" % self.schema], "operations": ["insert"], "sink": "socket",
                                "consumers": "shared", "ack_timeout": "1s"})
            self.expect(st == 200, "PUT /subscriptions/extra: %d %s" % (st, body))
            self.extra = "put"
            self.stats["puts"] += 1
            return "PUT extra"
        if not [c for c in self.conns if c.kind == "extra"]:
            c = Conn("extra")
            try:
                c.sub = Subscriber(self.sock, "extra", consumer="extra", timeout=30)
            except ServerError as e:  # PUT applies at the next transaction boundary
                self.expect(e.code == "UNKNOWN_SUBSCRIPTION", "subscribe extra: %s" % e)
                return "subscribe extra: not yet"
            c.expect_error = ("SUBSCRIPTION_REMOVED", "<eof>")
            self.conns.append(c)
            return "subscribe %r" % c
        st, body = request(self.status, "DELETE", "/subscriptions/extra")
        self.expect(st == 200, "DELETE /subscriptions/extra: %d %s" % (st, body))
        self.extra = "deleted"
        return "DELETE extra"

    def step(self):
        actions = [(self.do_write, 20), (self.do_write_big, 2), (self.do_subscribe, 8), (self.do_silent, 2),
                   (self.do_ack, 25), (self.do_wrong_ack, 8), (self.do_mixed_ack, 6), (self.do_stop_reading, 4),
                   (self.do_resume_reading, 3), (self.do_garbage, 6), (self.do_close, 6), (self.do_wait, 6),
                   (self.do_reload, 10 * self.reload_every)]
        if len(self.consumers()) > 14:
            actions = [a for a in actions if a[0] is not self.do_subscribe]
        fn = self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
        what = fn()
        self.steps += 1
        if what:
            self.history.append("%d %.3f %s" % (self.steps, time.monotonic(), what))
        self.barrier()
        self.drain_all()
        self.check_cdc()

    # --- settling ------------------------------------------------------------------------------

    def settle(self, timeout=120):
        """Chaos stops: one consumer per queue acks everything, until every offset is acknowledged.
        Then checks that nothing was lost and that new consumers get nothing again."""
        self.stats["settles"] += 1
        self.history.append("%d settle" % self.steps)
        for c in [c for c in self.conns if c.kind == "consumer"]:
            self.close(c, quiet=self.rng.random() < 0.5)
        good = {k: self.subscribe(q, name="settle-" + q.name, heartbeat_ms=100) for k, q in self.queues.items()}
        head = len(self.t_ins) - 1
        deadline = time.monotonic() + timeout
        while True:
            self.drain_all(0.05)
            for c in good.values():
                if c.held:
                    self.ack(c, [max(c.held)] if c.q.mode == "failover" else sorted(c.held))
            st, body = request(self.status, "GET", "/status")
            self.expect(st == 200, "GET /status: %d" % st)
            subs = {s["name"]: s for s in json.loads(body)["subscriptions"]}
            done = all(subs[n]["head_offset"] == head and subs[n]["acked_offset"] == head and subs[n]["dead"] == 0
                       for n in SUBS)
            if done:
                break
            if time.monotonic() > deadline:
                late = {n: (s["acked_offset"], s["head_offset"], s["dead"]) for n, s in subs.items() if n in SUBS}
                missing = {q.name: [o for o in range(1, head + 1) if o not in q.deliveries][:20]
                           for q in self.queues.values() if not q.dead}
                raise ModelError("delivery hung: (acked, head, dead) %s after %ds, %d rows; never delivered: %s" %
                                 (late, timeout, head, missing))
            self.check_cdc()
        self.barrier()
        self.drain_all()
        for q in self.queues.values():
            if q.dead or q.mode == "failover":
                continue
            dead = {o for (s, o) in self.dead_rows if s == q.sub}
            lost = [o for o in range(1, head + 1) if o not in q.deliveries and o not in dead
                    and o not in q.maybe_acked]
            self.expect(not lost, "%s: offsets acknowledged without ever being delivered: %s" % (q.name, lost[:20]))
        for c in good.values():
            self.close(c)
        for q in self.queues.values():  # a new consumer is told all is acknowledged, and gets nothing
            c = self.subscribe(q, name="fresh-" + q.name, heartbeat_ms=100)
            a = c.sub.subscribed
            self.expect(a.acked_offset == a.head_offset and a.next_offset == a.head_offset + 1,
                        "%r after settling: Subscribed %s" % (c, a))
            f = c.sub.recv(30)
            self.expect(f is not None and f.WhichOneof("kind") == "heartbeat",
                        "%r after settling: first frame %s, not a Heartbeat" % (c, f))
            self.on_frame(c, f, time.monotonic())
            self.close(c)
        self.stats["dead"] = len(self.dead_rows)

    def run(self, steps=None, duration=None, settle_every=60):
        self.dead_rows = {}
        self.changes = {}            # (id, v) -> offset
        self.pending = []
        self.log("socket model: seed %d (replay: --seed %d or CDC_MODEL_SEED=%d)" % (self.seed, self.seed, self.seed))
        t0 = time.monotonic()
        self.start()
        try:
            while (steps is None or self.steps < steps) and (duration is None or time.monotonic() - t0 < duration):
                self.step()
                if self.steps % settle_every == 0:
                    self.settle()
                    self.log("  step %d: %d rows, %s (%.0fs)" % (self.steps, len(self.t_ins) - 1, self.stats,
                                                               time.monotonic() - t0))
            self.settle()
            err = self.proc.stderr()
            self.stats["cdc_not_reading"] = err.count("has not read its socket")
            self.stats["cdc_withdrawn"] = sum(int(x.split()[0]) for x in err.split(" withdrawn=")[1:])
            self.stop()
        except BaseException:
            self.log("socket model FAILED: seed %d at step %d; last actions:\n  %s\ncdc stderr: %s" % (
                self.seed, self.steps, "\n  ".join(self.history[-40:]), self.proc.stderr_path))
            raise
        self.log("socket model: seed %d passed, %d steps, %d rows, %.0fs, %s" % (
            self.seed, self.steps, len(self.t_ins) - 1, time.monotonic() - t0, self.stats))
        return self.stats


def seed_tag(seed):
    return seed % 100000


def unsubscribed(path):
    """A Subscriber object on a connection that sends nothing (recv, send_raw and close work)."""
    return Subscriber.unsubscribed(path, timeout=30)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=int(os.environ.get("CDC_MODEL_SEED") or random.randrange(1 << 31)))
    p.add_argument("--steps", type=int)
    p.add_argument("--duration", type=float)
    p.add_argument("--settle-every", type=int, default=60)
    a = p.parse_args(argv)
    if a.steps is None and a.duration is None:
        a.steps = 300
    workdir = tempfile.mkdtemp(prefix="cdc-model-run-")
    with TempPostgres(logical_decoding_work_mem="64kB") as pg:
        m = Model(a.seed, pg, workdir, log=lambda s: print(s, flush=True))
        m.run(steps=a.steps, duration=a.duration, settle_every=a.settle_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
