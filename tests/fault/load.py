"""load.py: the fault harness's load generator and its ledger of what committed.

Three tables in schema `fault`, each row (id bigint primary key, ver int, grp int, note text,
pad text); `acct` has REPLICA IDENTITY FULL (its deletes carry the old row), `ord` and `item` the
default. A row's `ver` is its version: 1 when inserted, +1 at each update (`ver = ver + 1` in SQL,
so concurrent writers of one row are numbered in the row lock's order, which is its commit order),
and a delete counts as one more version. Ids are never reused, so a key's changes are exactly
versions 1, 2, ... n (then the delete).

Worker threads (a connection each) commit transactions of these shapes:
  small      1-6 inserts, updates and deletes on random tables
  savepoint  like small, with a part inside a savepoint that is rolled back (note = 'RB')
  large      300+ inserted rows and the deletes that keep the table near its target size, with
             a rolled-back savepoint of its own sometimes: past logical_decoding_work_mem (64kB
             on the test server), so the server streams it before it commits
  abort      small or large, note = 'ABORT', then ROLLBACK
Every statement says what it changed (RETURNING id, ver, grp) and the ledger records a committed
transaction's changes only once its COMMIT returned, with its top-level xid (the event's xid) and
an upper bound of its commit LSN (pg_current_wal_insert_lsn() after COMMIT). Transactions are
keyed by a token of the harness's own: an xid is not unique here, since after an immediate stop
the server hands out again the xids of transactions that never reached the WAL. Each
transaction also inserts its token into fault_meta.txlog (not published): when the connection
breaks during COMMIT (the server was stopped), the transaction committed if and only if its token
is there once the server is back and the old backend is gone. A failure before COMMIT was sent is
an abort.
"""

import collections
import itertools
import threading
import time

import psycopg2

from pg import PostgresError, lsn_to_int

SCHEMA = "fault"
META = "fault_meta"  # the transactions' tokens: not in the publication
TABLES = ("acct", "ord", "item")
FULL_IDENTITY = {"acct"}
MARK_OK, MARK_ABORT, MARK_RB = "ok", "ABORT", "RB"
NGROUPS = 10  # grp is 0..9

Change = collections.namedtuple("Change", "table id op ver grp note")


class Txn:
    __slots__ = ("kind", "token", "xid", "changes", "rolled_back", "hi_lsn", "committing")

    def __init__(self, kind, token=None):
        self.kind = kind
        self.token = token    # unique over the run
        self.xid = None       # 32-bit xid, as events carry it
        self.changes = []     # Change, in statement order
        self.rolled_back = []  # changes of a rolled-back savepoint (never visible)
        self.hi_lsn = None    # commit record < hi_lsn
        self.committing = False


def create_tables(pg):
    pg.sql(f"create schema {META}")
    pg.sql(f"create table {META}.txlog (token bigint primary key)")
    pg.sql(f"create schema {SCHEMA}")
    for t in TABLES:
        pg.sql(f"create table {SCHEMA}.{t} (id bigint primary key, ver int not null, grp int not null, "
               f"note text not null, pad text)")
        if t in FULL_IDENTITY:
            pg.sql(f"alter table {SCHEMA}.{t} replica identity full")


class Keys:
    """The ids that exist (committed, not deleted) per table, and the id counter (ids unique over
    all tables, never reused)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.alive = {t: {} for t in TABLES}  # dict as an ordered set
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)

    def token(self):
        with self.lock:
            return next(self._tokens)

    def new_ids(self, n):
        with self.lock:
            return [next(self._ids) for _ in range(n)]

    def pick(self, rng, table, n):
        with self.lock:
            a = self.alive[table]
            if not a:
                return []
            return sorted(rng.sample(list(a), min(n, len(a))))

    def size(self, table):
        with self.lock:
            return len(self.alive[table])

    def apply(self, changes):
        with self.lock:
            for c in changes:
                if c.op == "insert":
                    self.alive[c.table][c.id] = None
                elif c.op == "delete":
                    self.alive[c.table].pop(c.id, None)


class Ledger:
    """What the load generator knows committed and aborted, by token."""

    def __init__(self):
        self.lock = threading.Lock()
        self.committed = {}
        self.aborted = {}
        self.in_doubt = collections.Counter()  # resolved as "committed" / "aborted"
        self.kinds = collections.Counter()     # committed transactions by kind
        self.abort_kinds = collections.Counter()

    def commit(self, t):
        with self.lock:
            assert t.token not in self.committed and t.token not in self.aborted, t.token
            self.committed[t.token] = t
            self.kinds[t.kind] += 1

    def abort(self, t):
        with self.lock:
            assert t.token not in self.committed and t.token not in self.aborted, t.token
            self.aborted[t.token] = t
            self.abort_kinds[t.kind] += 1

    def changes(self):
        """Every committed change: [(Txn, Change)]."""
        with self.lock:
            return [(t, c) for t in self.committed.values() for c in t.changes]


_CONN_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError, PostgresError)


class LoadWorker(threading.Thread):
    def __init__(self, n, pg, ledger, keys, rng, pause, large_rows, target_keys, stop, errors):
        super().__init__(name=f"load-{n}", daemon=True)
        self.pg, self.ledger, self.keys, self.rng = pg, ledger, keys, rng
        self.pause, self.large_rows, self.target = pause, large_rows, target_keys
        self.stop_event = stop
        self.errors = errors
        self.conn = None
        self.backend = None  # (pid, backend_start): a pid alone may be reused after a restart

    # --- connection ---

    def _connect(self, deadline=None):
        """A working connection; retries while the server is down (until deadline, if given)."""
        while self.conn is None:
            try:
                conn = self.pg.connect()
                cur = conn.cursor()
                cur.execute("select pid, backend_start from pg_stat_activity where pid = pg_backend_pid()")
                self.backend = cur.fetchone()
                self.conn = conn
            except (psycopg2.Error, PostgresError):
                if deadline is not None and time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return self.conn.cursor()

    def _drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    # --- statements: each returns the changes it made ---

    def _sql_insert(self, cur, table, ids, mark):
        cur.execute(f"insert into {SCHEMA}.{table} (id, ver, grp, note, pad) "
                    f"select g, 1, floor(random() * {NGROUPS})::int, %s, repeat(md5(g::text), 2) "
                    f"from unnest(%s::bigint[]) g returning id, ver, grp", (mark, ids))
        return [Change(table, r[0], "insert", r[1], r[2], mark) for r in cur.fetchall()]

    def _sql_update(self, cur, table, ids, mark):
        cur.execute(f"update {SCHEMA}.{table} set ver = ver + 1, grp = floor(random() * {NGROUPS})::int, "
                    f"note = %s, pad = md5(random()::text) where id = any(%s::bigint[]) returning id, ver, grp",
                    (mark, ids))
        return [Change(table, r[0], "update", r[1], r[2], mark) for r in cur.fetchall()]

    def _sql_delete(self, cur, table, ids, mark):
        cur.execute(f"delete from {SCHEMA}.{table} where id = any(%s::bigint[]) returning id, ver, grp", (ids,))
        return [Change(table, r[0], "delete", r[1] + 1, r[2], mark) for r in cur.fetchall()]

    def _small_ops(self, cur, mark, n):
        """n random single-row changes, updates and deletes in key order (no lock cycles between
        workers doing the same)."""
        rng = self.rng
        ins, mod = [], []
        for _ in range(n):
            table = rng.choice(TABLES)
            size = self.keys.size(table)
            r = rng.random()
            if size < 20 or r < 0.35:
                ins.append(table)
            else:
                ids = self.keys.pick(rng, table, 1)
                if ids:
                    p_delete = 0.3 if size > self.target else 0.1
                    mod.append((table, ids[0], "delete" if rng.random() < p_delete else "update"))
        out = []
        for table in ins:
            out += self._sql_insert(cur, table, self.keys.new_ids(1), mark)
        for table, id_, op in sorted(mod):
            out += (self._sql_delete if op == "delete" else self._sql_update)(cur, table, [id_], mark)
        return out

    def _large_ops(self, cur, mark, t):
        rng = self.rng
        table = rng.choice(TABLES)
        out = self._sql_insert(cur, table, self.keys.new_ids(rng.randint(*self.large_rows)), mark)
        if rng.random() < 0.3:
            cur.execute("savepoint big")
            t.rolled_back += self._sql_insert(cur, rng.choice(TABLES), self.keys.new_ids(200), MARK_RB)
            cur.execute("rollback to savepoint big")
        other = rng.choice(TABLES)
        out += self._sql_update(cur, other, self.keys.pick(rng, other, rng.randint(1, 40)), mark)
        excess = self.keys.size(table) - self.target
        if excess > 0:
            out += self._sql_delete(cur, table, self.keys.pick(rng, table, excess), mark)
        return out

    # --- transactions ---

    def _pick_kind(self):
        r = self.rng.random()
        for kind, w in (("large", 0.03), ("abort_large", 0.01), ("savepoint", 0.10), ("abort", 0.10)):
            if r < w:
                return kind
            r -= w
        return "small"

    def _run_txn(self, kind):
        t = Txn(kind, self.keys.token())
        mark = MARK_ABORT if kind.startswith("abort") else MARK_OK
        try:
            cur = self._connect()
            cur.execute("begin")
            cur.execute(f"insert into {META}.txlog values (%s) returning pg_current_xact_id()::text",
                        (t.token,))
            t.xid = int(cur.fetchone()[0]) & 0xFFFFFFFF
            if kind in ("large", "abort_large"):
                t.changes += self._large_ops(cur, mark, t)
            else:
                t.changes += self._small_ops(cur, mark, self.rng.randint(1, 6))
            if kind == "savepoint":
                cur.execute("savepoint s")
                t.rolled_back += self._small_ops(cur, MARK_RB, self.rng.randint(1, 4))
                cur.execute("rollback to savepoint s")
                t.changes += self._small_ops(cur, mark, self.rng.randint(1, 3))
            if mark == MARK_ABORT:
                cur.execute("rollback")
                self.ledger.abort(t)
                return
            t.committing = True
            cur.execute("commit")
            cur.execute("select pg_current_wal_insert_lsn()::text")
            t.hi_lsn = lsn_to_int(cur.fetchone()[0])
        except psycopg2.Error as e:
            self._resolve(t, e)
            return
        self.keys.apply(t.changes)
        self.ledger.commit(t)

    def _resolve(self, t, err):
        """A statement failed. Before COMMIT: an abort. During COMMIT (the connection broke): the
        transaction committed if its token is in fault_meta.txlog, once its backend is gone."""
        backend = self.backend
        if isinstance(err, _CONN_ERRORS):
            self._drop()
        else:
            try:
                self.conn.cursor().execute("rollback")
            except psycopg2.Error:
                self._drop()
        if t.xid is None or not t.committing:
            if t.xid is not None:
                self.ledger.abort(t)
            return
        deadline = time.monotonic() + 300
        while True:
            try:
                cur = self._connect(deadline)
                cur.execute("select exists (select 1 from pg_stat_activity where pid = %s and backend_start = %s), "
                            f"exists (select 1 from {META}.txlog where token = %s), "
                            "pg_current_wal_insert_lsn()::text", (backend[0], backend[1], t.token))
                running, committed, lsn = cur.fetchone()
            except _CONN_ERRORS:
                self._drop()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            if not running:
                break
            time.sleep(0.1)
        if committed:
            t.hi_lsn = lsn_to_int(lsn)
            self.keys.apply(t.changes)
            self.ledger.in_doubt["committed"] += 1
            self.ledger.commit(t)
        else:
            self.ledger.in_doubt["aborted"] += 1
            self.ledger.abort(t)

    def run(self):
        try:
            while not self.stop_event.is_set():
                self._run_txn(self._pick_kind())
                self.stop_event.wait(self.rng.expovariate(1.0 / self.pause) if self.pause > 0 else 0)
        except Exception as e:  # reported by the harness
            self.errors.append(f"{self.name}: {type(e).__name__}: {e}")
        finally:
            self._drop()


class Load:
    """The workers; start(), stop() (waits for the transaction in progress of each)."""

    def __init__(self, pg, rngs, pause=0.03, large_rows=(300, 900), target_keys=400):
        self.ledger = Ledger()
        self.keys = Keys()
        self.errors = []
        self._stop = threading.Event()
        self.workers = [LoadWorker(i, pg, self.ledger, self.keys, rng, pause, large_rows, target_keys,
                                   self._stop, self.errors) for i, rng in enumerate(rngs)]

    def start(self):
        for w in self.workers:
            w.start()
        return self

    def stop(self, timeout=320):
        self._stop.set()
        for w in self.workers:
            w.join(timeout)
            if w.is_alive():
                self.errors.append(f"{w.name} did not stop within {timeout}s")
