"""test_backfill.py: snapshots and backfills while the stream keeps flowing (cdc/backfill). A table
is backfilled by block ranges on several connections at once while a concurrent load inserts,
updates (keys too) and deletes, and cdc is killed with -9 twice during the backfill: a consumer
applying the events in order by key (read, insert and update as upserts, delete as delete) ends with
exactly the table's rows, row by row, for the socket, Kafka and stdout sinks; another subscription
of the table gets no reads; no transaction of cdc's stays open longer than a chunk. The same for
200,000 rows while rows move from blocks not read yet into blocks read already with a TOAST value
left unchanged (the rows read again by key); a partitioned table while a partition is detached and
another attached; tables without a key against docs/backfills.md's promise; the progress of a
table never analyzed. Then the request's and the subscription's `where`, `columns`, the API (POST,
DELETE, GET /backfills, `cdc backfill --wait`), its figures when cdc evaluates part of the `where`,
and the requests refused when they are made (a table not the subscription's, a `where` never true
for a column's type). The 100k-row variant is CDC_BACKFILL_ROWS=100000 (make torture-backfill)."""

import gzip
import json
import os
import random
import re
import select
import subprocess
import threading
import time

import psycopg2
import pytest

from conftest import CDC_BIN, wait_for
from kafka_fixtures import row_plain
from subscriber_helpers import Subscriber, pb
from test_kafka import kafka_section, ksub
from test_status import http

ROWS = int(os.environ.get("CDC_BACKFILL_ROWS", "3000"))


def status(c, target, method="GET", body=None):
    return http((c.config["status"]["socket"], target), method, body)


def backfills(c):
    code, body = status(c, "/backfills")
    assert code == 200, body
    return json.loads(body)


# --- the consumer's model -----------------------------------------------------------------------

def apply(model, op, key, new):
    """One event on a {id: row} model. key: the row's key before the change."""
    if op == "delete":
        model.pop(key["id"], None)
    elif op in ("read", "insert", "update"):
        if op == "update" and key["id"] != new["id"]:
            model.pop(key["id"], None)
        model[new["id"]] = new
    else:
        raise AssertionError(f"unexpected op {op}")


def pb_op(e):
    return pb.Op.Name(e.op)[3:].lower()


class SocketConsumer:
    """Applies a socket subscription's events in delivery order, acking each delivery; reconnects
    while cdc restarts."""

    def __init__(self, path, subscription):
        self.path, self.subscription = path, subscription
        self.model, self.reads, self.errors, self.log = {}, 0, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                s = Subscriber(self.path, self.subscription, timeout=2)
            except Exception as e:  # cdc restarting: not listening yet, or not serving it yet
                self.errors.append(e)
                self._stop.wait(0.1)
                continue
            try:
                while not self._stop.is_set():
                    d = s.delivery(0.2)
                    if d is None:
                        if s.closed:
                            break
                        continue
                    for e in d:
                        op = pb_op(e)
                        self.log.append(e.offset)
                        if op == "schema":  # the columns of the rows that follow: acked, not applied
                            continue
                        self.reads += op == "read"
                        apply(self.model, op, row_plain(e.key),
                              row_plain(e.new_row) if e.HasField("new_row") else None)
                    s.ack_events(d)
            except Exception as e:  # cdc killed under the connection
                self.errors.append(e)
            finally:
                s.close()

    def close(self):
        self._stop.set()
        self._thread.join(10)


def replay(events):
    """The consumer's model after events (JSON events, in delivery order) applied: (model, reads)."""
    model, reads = {}, 0
    for e in events:
        reads += e["op"] == "read"
        apply(model, e["op"], e["key"], e["new"])
    return model, reads


def stdout_events(processes, subscription):
    """Every run's stdout in order: the events of subscription."""
    return [e for p in processes for e in p.events() if e["subscription"] == subscription]


def stdout_model(processes, subscription):
    return replay(stdout_events(processes, subscription))


class KafkaModel:
    """Kafka gives order per partition only: every message once by (commit_lsn, tx_index), applied
    in that order, which is the stream's (reads included). Messages are decoded once."""

    def __init__(self, reader):
        self.reader, self.seen, self.count = reader, {}, 0

    def model(self):
        msgs = self.reader.snapshot()
        for m in msgs[self.count:]:
            e = m.event
            if e is not None:
                self.seen[(e.commit_lsn, e.tx_index)] = e
        self.count = len(msgs)
        model, reads = {}, 0
        for k in sorted(self.seen):
            e = self.seen[k]
            reads += pb_op(e) == "read"
            apply(model, pb_op(e), row_plain(e.key), row_plain(e.new_row) if e.HasField("new_row") else None)
        self.reads = reads
        return model


# --- the load -----------------------------------------------------------------------------------

class Writer:
    """Small transactions from a thread of its own until stopped, each running one() 1 to per_tx
    times. A subclass sets what one() needs before calling __init__, which starts the thread."""

    per_tx, pause = 1, 0.002

    def __init__(self, pg, seed):
        self.conn = psycopg2.connect(pg.dsn)
        self.rng = random.Random(seed)
        self.transactions, self.errors = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                with self.conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, self.per_tx)):
                        self.one(cur)
                self.conn.commit()
                self.transactions += 1
                time.sleep(self.pause)
        except Exception as e:  # reported by stop()
            self.errors.append(e)

    def stopped(self):
        return self._stop.is_set()

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()
        assert not self.errors, self.errors


class Load(Writer):
    """Inserts, updates, key changes and deletes of table t."""

    per_tx, pause = 3, 0.003

    def __init__(self, pg, table, first_free, seed=7):
        self.table = table
        self.ids = list(range(1, first_free))
        self.next_id = first_free
        super().__init__(pg, seed)

    def one(self, cur):
        r, t = self.rng.random(), self.table
        if r < 0.25 or not self.ids:
            cur.execute(f"insert into {t} values (%s, %s, %s)", (self.next_id, f"new{self.next_id}", 0))
            self.ids.append(self.next_id)
            self.next_id += 1
        elif r < 0.65:
            cur.execute(f"update {t} set n = n + 1, v = v || '+' where id = %s", (self.rng.choice(self.ids),))
        elif r < 0.8:
            i = self.rng.randrange(len(self.ids))
            cur.execute(f"update {t} set id = %s where id = %s", (self.next_id, self.ids[i]))
            self.ids[i] = self.next_id
            self.next_id += 1
        else:
            i = self.rng.randrange(len(self.ids))
            cur.execute(f"delete from {t} where id = %s", (self.ids[i],))
            self.ids.pop(i)


class LongestTransaction:
    """Watches pg_stat_activity for cdc's backfill connection: the longest transaction seen."""

    def __init__(self, pg):
        self.conn = psycopg2.connect(pg.dsn)
        self.conn.autocommit = True
        self.longest, self.seen = 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            with self.conn.cursor() as cur:
                cur.execute("select extract(epoch from clock_timestamp() - xact_start) from pg_stat_activity "
                            "where application_name = 'cdc backfill' and xact_start is not null")
                for (age,) in cur.fetchall():
                    self.seen += 1
                    self.longest = max(self.longest, float(age))
            self._stop.wait(0.001)  # a chunk's transaction lasts milliseconds

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self.conn.close()


def short(row):
    """A row for a message: long values cut."""
    return {k: v[:20] + f"...({len(v)})" if isinstance(v, str) and len(v) > 40 else v for k, v in row.items()}


def diff(model, want):
    """What differs between a consumer's rows and the table's, for failure messages."""
    extra = sorted(set(model) - set(want))[:10]
    missing = sorted(set(want) - set(model))[:10]
    changed = [(k, short(model[k]), short(want[k])) for k in sorted(set(model) & set(want))
               if model[k] != want[k]]
    return (f"{len(model)} rows, {len(want)} in the table; extra {extra} missing {missing} "
            f"{len(changed)} changed, such as {changed[:5]}")


def converge(progress, model, want, what):
    """Waits until model() equals want, as long as progress() keeps moving (a consumer in Python is
    slower than cdc: a large table's events take a while); fails with the difference otherwise."""
    last, moved = None, time.monotonic()
    while True:
        m = model()
        if m == want:
            return
        p = progress()
        if p != last:
            last, moved = p, time.monotonic()
        elif time.monotonic() - moved > 30:
            raise AssertionError(f"{what}: " + diff(m, want))
        time.sleep(0.2)


def wait_confirmed(pg, c, p):
    """Waits until cdc confirmed the server's WAL position as it is now: every change so far is
    delivered durably."""
    end = pg.current_wal_lsn()
    wait_for(lambda: c.slot_row()[1] and
             [int(x, 16) for x in c.slot_row()[1].split("/")] >= [int(x, 16) for x in end.split("/")],
             timeout=60, what=f"cdc to confirm {end}\n{p.describe()}")


def table_rows(pg, table):
    return {r[0]: {"id": r[0], "v": r[1], "n": r[2]} for r in pg.sql(f"select id, v, n from {table}")}


@pytest.mark.parametrize("shape", ["plain", "partitioned"])
def test_backfill_under_load_with_kills(pg, schema, cdc, kafka, kafka_reader, shape):
    """The table plain, or partitioned (by hash: a key change moves its row to another partition)."""
    t = f"{schema}.t"
    if shape == "plain":
        pg.sql(f"create table {t} (id int primary key, v text not null, n int not null)")
    else:
        pg.sql(f"create table {t} (id int primary key, v text not null, n int not null) partition by hash (id)")
        for i in range(4):
            pg.sql(f"create table {t}_{i} partition of {t} for values with (modulus 4, remainder {i})")
    pg.sql(f"insert into {t} select g, 'v' || g, 0 from generate_series(1, {ROWS}) g")
    pg.sql(f"analyze {t}")
    topic = f"bf.{schema}"
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[
        {"name": "sk", "tables": [t], "sink": "socket", "snapshot": True},
        ksub("kf", [t], topic=topic, snapshot=True),
        {"name": "so", "tables": [t], "sink": "stdout", "snapshot": True},
        {"name": "other", "tables": [t], "sink": "stdout"}],
        kafka=kafka_section(kafka),
        backfill={"min_rows": 50, "max_rows": 200, "rate_limit": max(ROWS // 4, 500), "tables": 3,
                  "parallel": 4})
    watch = LongestTransaction(pg)
    load = Load(pg, t, ROWS + 1)
    consumer = SocketConsumer(c.config["subscribers"]["socket"], "sk")
    try:
        p = c.start()
        # Killed with -9 twice while the backfills run, each time once the fastest made progress.
        # Not the slowest: a sink slow after a restart (Kafka's producer reconnecting) can hold its
        # backfill back so long that another finishes first (PG 17 torture at load 6, once).
        for fraction in (0.25, 0.6):
            wait_for(lambda: len(backfills(c)) == 3 and
                     max(b["rows_read"] for b in backfills(c)) >= fraction * ROWS,
                     timeout=120, what=f"{fraction:.0%} of the rows read\n{p.describe()}")
            assert all(b["state"] == "running" for b in backfills(c)), backfills(c)
            p.kill()
            p = c.start()
        wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"] * 3, timeout=180,
                 what=f"the backfills to finish\n{p.describe()}")
        load.stop()
        want = table_rows(pg, t)
        wait_confirmed(pg, c, p)
        if os.environ.get("CDC_BACKFILL_RECORD"):  # tests/fault/test_checkers.py's recording
            with gzip.open(os.environ["CDC_BACKFILL_RECORD"], "wt") as f:
                json.dump({"events": [{k: e[k] for k in ("op", "key", "new")} for e in stdout_events(c.processes, "so")],
                           "table": list(want.values())}, f, separators=(",", ":"))
        model, reads = stdout_model(c.processes, "so")
        assert model == want, "stdout: " + diff(model, want)
        converge(lambda: len(consumer.log), lambda: consumer.model, want,
                 f"socket (errors {consumer.errors[-3:]})")
        km = KafkaModel(reader)
        converge(lambda: len(reader.snapshot()), km.model, want, "kafka")
        read_msg = next(m for m in reader.snapshot() if m.event is not None and m.event.op == pb.OP_READ)
        assert read_msg.header("cdc-op") == "read" and read_msg.key_pb is not None
        assert reads > 0 and consumer.reads > 0 and km.reads > 0
        assert stdout_model(c.processes, "other") == (stdout_model(c.processes, "other")[0], 0)
        assert load.transactions > 100
        for b in backfills(c):
            assert b["rows_delivered"] > 0 and b["estimate"] >= ROWS // 2, b
            assert b["rows_read"] == b["rows_delivered"] + b["rows_dropped"] + b["rows_filtered"], b
        # each chunk is one autocommit statement: none lives longer than a chunk takes
        assert watch.seen > 0 and watch.longest < 2.0, (watch.seen, watch.longest)
    finally:
        consumer.close()
        watch.stop()
        if not load.stopped():
            load.stop()


def cli(*args, timeout=60):
    return subprocess.run([CDC_BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_backfill_where_columns_and_api(pg, schema, cdc):
    w, nk = f"{schema}.w", f"{schema}.nokey"
    pg.sql(f"create table {w} (id int primary key, status text, amount int, secret text, created timestamptz)")
    pg.sql(f"insert into {w} select g, case when g % 3 = 0 then 'paid' else 'new' end, g, 's', "
           f"timestamptz '2026-01-01 00:00:00+00' + g * interval '1 hour' from generate_series(1, 200) g")
    pg.sql(f"create table {nk} (x int)")
    c, p = cdc.start(subscriptions=[
        {"name": "paid", "tables": [w], "sink": "stdout", "where": "new.status = 'paid'",
         "columns": ["status"]},
        {"name": "nk", "tables": [nk], "sink": "stdout"}],
        backfill={"rate_limit": 40, "min_rows": 10, "max_rows": 10})
    sock = c.config["status"]["socket"]

    # The request's where on top of the subscription's; columns as the subscription says. The
    # status and amount comparisons go into the chunks' SELECT, the timestamp one is cdc's: rows it
    # leaves out are read but not delivered, and the figures say so (rows_emitted counted them).
    r = cli("backfill", "-s", sock, "paid", "--where",
            "new.amount >= 150 and new.created >= '2026-01-08 00:00:00+00'", "--wait", timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    read = [i for i in range(150, 201) if i % 3 == 0]
    want = [i for i in read if i >= 168]
    assert "backfill " in r.stdout and f": done, {len(read)} rows read, {len(want)} delivered\n" in r.stdout, r.stdout
    reads = p.wait_events(len(want), pred=lambda e: e["op"] == "read")
    assert [e["key"]["id"] for e in reads] == want
    assert all(e["new"] == {"id": e["key"]["id"], "status": "paid"} for e in reads), reads[0]
    assert all(e["subscription"] == "paid" for e in reads)
    done = [b for b in backfills(c) if b["state"] == "done"]
    assert len(done) == 1, done
    figures = {k: done[0]["tables"][0][k] for k in ("rows_read", "rows_delivered", "rows_filtered", "rows_dropped")}
    assert figures == {"rows_read": len(read), "rows_delivered": len(want),
                       "rows_filtered": len(read) - len(want), "rows_dropped": 0}, done
    labels = f'{{subscription="paid",backfill="{done[0]["id"]}",table="{w}"}}'
    metrics = wait_for(lambda: (lambda b: b if labels in b else None)(status(c, "/metrics")[1]),
                       what="the backfill in /metrics")  # published every second
    assert f"cdc_backfill_rows_delivered_total{labels} {len(want)}\n" in metrics, metrics
    assert f"cdc_backfill_rows_filtered_total{labels} {len(read) - len(want)}\n" in metrics, metrics

    # POST answers with the id; DELETE cancels; GET /backfills lists them
    code, body = status(c, "/subscriptions/paid/backfill", "POST", json.dumps({"tables": [w]}))
    assert code == 200, body
    bid = json.loads(body)["id"]
    assert json.loads(body)["state"] == "queued"
    code, body = status(c, f"/subscriptions/paid/backfill/{bid}", "DELETE")
    assert code == 200 and json.loads(body)["state"] == "cancelled", body
    code, body = status(c, f"/subscriptions/paid/backfill/{bid}", "DELETE")
    assert code == 404 and "has finished already (cancelled)" in body, body
    listed = {b["id"]: b for b in backfills(c)}
    assert listed[bid]["state"] == "cancelled"

    # bad requests name the problem
    for target, method, req, want_code, want_text in [
            ("/subscriptions/paid/backfill", "POST", '{"tables": 5}', 400, "tables: expected an array"),
            ("/subscriptions/paid/backfill", "POST", '{"where": "new.a ="}', 400, "where: position 7"),
            ("/subscriptions/paid/backfill", "POST", '{"where": "new.a == 1"}', 400, "write '=' to compare"),
            ("/subscriptions/paid/backfill", "POST", '{"table": []}', 400, "unknown key 'table'"),
            ("/subscriptions/paid/backfill", "GET", None, 405, "use POST")]:
        code, body = status(c, target, method, req)
        assert code == want_code and want_text in body, (target, req, code, body)

    # /status and cdc status show them
    wait_for(lambda: bid in status(c, "/status")[1], what="the backfill in /status")
    r = cli("status", "-s", sock)
    assert r.returncode == 0 and f"backfill {bid} of paid: cancelled" in r.stdout, r.stdout
    assert f"backfill {done[0]['id']} of paid: done, {len(read)} rows read, {len(want)} delivered" in r.stdout

    # no reads ever reach the subscription that did not ask: nk got none, and nothing else
    assert not [e for e in p.events() if e["op"] == "read" and e["subscription"] != "paid"]
    assert p.terminate() == 0


def test_backfill_refused_when_it_cannot_succeed(pg, schema, cdc):
    w = f"{schema}.w"
    pg.sql(f"create table {w} (id int primary key, status text)")
    c, p = cdc.start(subscriptions=[{"name": "paid", "tables": [w], "sink": "stdout"}])
    sock = c.config["status"]["socket"]

    # Requests that cannot succeed are refused when they are made, naming why, and nothing is
    # queued: a table the subscription does not have, a where that is never true for the column's
    # type, a subscription that does not exist.
    r = cli("backfill", "-s", sock, "paid", "--where", "new.status = 5", "--wait")
    assert r.returncode == 1 and "queued" not in r.stdout, r.stdout
    assert (f"where: in table {w}, new.status = 5 is never true: column status is of type text and 5 "
            f"is a number; write '5'") in r.stderr, r.stderr
    for target, req, want_code, want_text in [
            ("/subscriptions/paid/backfill", '{"tables": ["nope.x"]}', 400,
             "table nope.x is not one of subscription paid's tables"),
            ("/subscriptions/gone/backfill", None, 404, "no such subscription: gone")]:
        code, body = status(c, target, "POST", req)
        assert code == want_code and want_text in body, (target, req, code, body)
    assert backfills(c) == [], backfills(c)
    assert "backfill refused" in p.stderr()
    assert p.terminate() == 0


@pytest.mark.matrix
def test_snapshot_once(pg, schema, cdc):
    """snapshot: true backfills once; a restart does not read the table again; a subscription added
    by a reload has its own."""
    t = f"{schema}.s"
    pg.sql(f"create table {t} (id int primary key)")
    pg.sql(f"insert into {t} select generate_series(1, 50)")
    c = cdc(subscriptions=[{"name": "a", "tables": [t], "sink": "stdout", "snapshot": True}])
    p = c.start()
    p.wait_events(50, pred=lambda e: e["op"] == "read")
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], what="the snapshot to finish")
    assert p.terminate() == 0
    p = c.start()
    pg.sql(f"insert into {t} values (51)")
    p.wait_events(1, pred=lambda e: e["op"] == "insert")
    assert not [e for e in p.events() if e["op"] == "read"]
    assert len(backfills(c)) == 1
    code, body = status(c, "/subscriptions/b", "PUT",
                        json.dumps({"tables": [t], "sink": "stdout", "snapshot": True}))
    assert code == 200, body
    evs = p.wait_events(51, pred=lambda e: e["op"] == "read" and e["subscription"] == "b")
    assert sorted(e["key"]["id"] for e in evs) == list(range(1, 52))
    assert p.terminate() == 0


def test_a_backfill_on_a_quiet_stream_is_not_read_as_a_backlog(pg, schema, cdc):
    """A backfill's watermarks (a non-transactional message a chunk) are not commits. On a quiet
    stream they used to switch cdc to reading the slot as a backlog after every chunk (SO_RCVLOWAT
    and a 2 ms poll), so that each next high watermark waited for the poll: a backfill on one
    connection took twice as long. Commits older than a second are a backlog, and are counted."""
    t = f"{schema}.q"
    pg.sql(f"create table {t} (id int primary key, v text)")
    pg.sql(f"insert into {t} select g, 'v' || g from generate_series(1, 6000) g")
    c = cdc(subscriptions=[{"name": "a", "tables": [t], "sink": "stdout", "snapshot": True}],
            backfill={"max_rows": 500, "parallel": 1})
    p = c.start()
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], what=f"the backfill\n{p.describe()}")
    assert backfills(c)[0]["rows_delivered"] == 6000

    def source():
        code, body = status(c, "/status")
        assert code == 200, body
        return json.loads(body)["source"]
    # the figures are published every second: once they have the reads, they have the watermarks
    wait_for(lambda: source()["events"] >= 6000, what="the figures of the backfill")
    assert source()["backlog_reads"] == 0, source()
    assert p.terminate() == 0
    pg.sql(f"insert into {t} values (0, 'old')")
    time.sleep(1.5)
    p = c.start()
    p.wait_events(1, pred=lambda e: e["op"] == "insert")
    wait_for(lambda: source()["events"] >= 1, what="the figures of the insert")
    assert source()["backlog_reads"] >= 1, source()
    code, body = status(c, "/metrics")
    assert re.search(r"^cdc_source_backlog_reads_total [1-9]", body, re.M), body
    assert p.terminate() == 0


# --- block ranges read at once ------------------------------------------------------------------

MISSING = "<the stream left it out and no read gave it>"


def apply_event(model, e):
    """One stdout event on a {id: row} model, as a consumer applying events in order by key does:
    read and insert replace the row, update replaces it (its key may change) keeping the columns the
    stream left out (unchanged TOAST) from the row it had, delete removes it."""
    op, key, new = e["op"], e["key"]["id"], e["new"]
    if op == "delete":
        model.pop(key, None)
        return
    base = model.pop(key, None) if op == "update" else None
    row = dict(new)
    for col in e.get("unchanged_toast") or []:
        row[col] = base.get(col, MISSING) if base else MISSING
    model[new["id"]] = row


class Mover(Writer):
    """Small transactions on a table of (id, v, n, big) from a thread of its own: inserts, updates of
    n that leave big (TOAST, stored out of line) as it is, so the stream's copy of the row is
    incomplete, key changes of such rows from the top of the key space to below its bottom, and
    deletes. Its table has free space in its first blocks (rows deleted and vacuumed there), where
    the updated rows of its last blocks land: from ranges not read yet into ranges read already."""

    per_tx = 3

    def __init__(self, pg, table, first_free, big_ids, seed=11):
        self.table = table
        self.big = [i for i in big_ids if i > first_free // 2]
        self.ids = set(range(first_free // 2, first_free))
        self.next_id = first_free
        super().__init__(pg, seed)

    def one(self, cur):
        r, t = self.rng.random(), self.table
        if r < 0.2:
            big = f"repeat(md5('{self.next_id}'), 100)" if self.next_id % 7 == 0 else "null"
            cur.execute(f"insert into {t} values (%s, 'v', 0, {big})", (self.next_id,))
            self.next_id += 1
        elif r < 0.6 and self.big:
            cur.execute(f"update {t} set n = n + 1 where id = %s", (self.rng.choice(self.big),))
        elif r < 0.75 and self.big:
            i = self.big.pop(self.rng.randrange(len(self.big)))
            cur.execute(f"update {t} set id = -id, n = n + 1 where id = %s", (i,))
        elif r < 0.9 and self.ids:
            cur.execute(f"update {t} set v = v || '+' where id = %s", (self.rng.choice(tuple(self.ids)),))
        elif self.ids:
            i = self.rng.choice(tuple(self.ids))
            self.ids.discard(i)
            if i in self.big:
                self.big.remove(i)
            cur.execute(f"delete from {t} where id = %s", (i,))


def big_table(pg, t, rows):
    """rows rows, every 50th with a 3,200-byte big stored out of line; a third of the first
    quarter deleted and vacuumed, so that updated rows move into the first blocks. Returns the ids
    with a big value."""
    pg.sql(f"create table {t} (id int primary key, v text not null, n int not null, big text)")
    pg.sql(f"alter table {t} alter column big set storage external")
    pg.sql(f"insert into {t} select g, 'v' || g, 0, case when g % 50 = 0 then repeat(md5(g::text), 100) end "
           f"from generate_series(1, {rows}) g")
    pg.sql(f"delete from {t} where id <= {rows // 4} and id % 3 = 0")
    pg.sql(f"vacuum analyze {t}")
    return [g for g in range(50, rows + 1, 50) if not (g <= rows // 4 and g % 3 == 0)]


def full_rows(pg, t):
    return {r[0]: {"id": r[0], "v": r[1], "n": r[2], "big": r[3]} for r in pg.sql(f"select id, v, n, big from {t}")}


def test_parallel_backfill_exact_under_moves(pg, schema, cdc):
    """A backfill of 200,000 rows by block ranges on four connections at once while a writer
    inserts, updates (rows moving from blocks not read yet into blocks read already, their TOAST
    value unchanged, so that the stream's copy is incomplete), changes keys and deletes: a consumer
    applying the events in order by key ends with exactly the table, TOAST values included. No
    transaction of cdc's outlives a chunk."""
    t = f"{schema}.t"
    rows = 200_000
    big = big_table(pg, t, rows)
    c = cdc(subscriptions=[{"name": "so", "tables": [t], "sink": "stdout", "snapshot": True}],
            backfill={"max_rows": 2000, "rate_limit": 40_000, "parallel": 4})
    watch = LongestTransaction(pg)
    mover = Mover(pg, t, rows + 1, big)
    try:
        p = c.start()
        wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], timeout=120,
                 what=f"the backfill to finish\n{p.describe()}")
        mover.stop()
        want = full_rows(pg, t)
        wait_confirmed(pg, c, p)
        model, reads = {}, 0
        for e in p.events():
            reads += e["op"] == "read"
            apply_event(model, e)
        assert model == want, diff(model, want)
        assert mover.transactions > 100, mover.transactions
        b = backfills(c)[0]
        assert b["rows_read"] == b["rows_delivered"] + b["rows_dropped"] + b["rows_filtered"], b
        assert reads == b["rows_delivered"] and b["rows_delivered"] > rows // 2, (reads, b)
        assert b["blocks"] == b["blocks_read"] > 0, b
        assert watch.seen > 0 and watch.longest < 2.0, (watch.seen, watch.longest)
        assert p.terminate() == 0
    finally:
        watch.stop()
        if not mover.stopped():
            mover.stop()


class KeylessWriter(Writer):
    """On a table without a key (REPLICA IDENTITY FULL): inserts of rows unlike any other, updates
    (some of a row's TOAST value left as it is), updates of a row into one unlike any other, and
    deletes; on a second one without REPLICA IDENTITY FULL, inserts only (PostgreSQL refuses its
    updates and deletes while the publication publishes them)."""

    def __init__(self, pg, full, plain, first_free, seed=5):
        self.full, self.plain = full, plain
        self.live = list(range(1, first_free))
        self.next = first_free
        super().__init__(pg, seed)

    def one(self, cur):
        r = self.rng.random()
        if r < 0.3 or not self.live:
            cur.execute(f"insert into {self.full} values (%s, 'b', null)", (self.next,))
            cur.execute(f"insert into {self.plain} values (%s, 'b')", (self.next,))
            self.live.append(self.next)
            self.next += 1
        elif r < 0.7:
            cur.execute(f"update {self.full} set b = b || '+' where a = %s", (self.rng.choice(self.live),))
        elif r < 0.85:
            i = self.rng.randrange(len(self.live))
            cur.execute(f"update {self.full} set a = %s where a = %s", (self.next, self.live[i]))
            self.live[i] = self.next
            self.next += 1
        else:
            cur.execute(f"delete from {self.full} where a = %s", (self.live.pop(self.rng.randrange(len(self.live))),))


def as_set_of_rows(events, table, columns):
    """The consumer docs/backfills.md describes for a table without a key: the rows as a set. A read
    or an insert adds its row, an update replaces its old row by its new one (a column the stream
    left out, unchanged TOAST, taken from the old row), a delete removes its old row."""
    rows = set()
    for e in events:
        if e["table"] != table:
            continue
        old = tuple(e["old"][c] for c in columns) if e["old"] else None
        if e["op"] in ("update", "delete"):
            rows.discard(old)
        if e["op"] in ("read", "insert", "update"):
            new = dict(e["new"])
            for c in e.get("unchanged_toast") or []:
                new[c] = e["old"][c]
            rows.add(tuple(new[c] for c in columns))
    return rows


@pytest.mark.matrix
def test_keyless_backfill_promise(pg, schema, cdc):
    """What docs/backfills.md promises for tables without a key, while a writer changes them: with
    REPLICA IDENTITY FULL a consumer keeping the rows as a set ends with exactly the table's rows
    (no two of them equal), TOAST values left unchanged by an update included; without it the table
    takes only inserts, and the same holds. Both are read by block ranges."""
    full, plain = f"{schema}.kf", f"{schema}.kp"
    rows = 5000
    pg.sql(f"create table {full} (a int not null, b text, big text)")
    pg.sql(f"alter table {full} replica identity full")
    pg.sql(f"alter table {full} alter column big set storage external")
    pg.sql(f"insert into {full} select g, 'b' || g, case when g % 50 = 0 then repeat(md5(g::text), 100) end "
           f"from generate_series(1, {rows}) g")
    pg.sql(f"create table {plain} (a int, b text)")
    pg.sql(f"insert into {plain} select g, 'b' || g from generate_series(1, {rows}) g")
    c = cdc(subscriptions=[{"name": "k", "tables": [full, plain], "sink": "stdout", "snapshot": True}],
            backfill={"rate_limit": 4000, "max_rows": 300, "tables": 2})
    writer = KeylessWriter(pg, full, plain, rows + 1)
    try:
        p = c.start()
        wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], timeout=120,
                 what=f"the backfill to finish\n{p.describe()}")
        writer.stop()
        wait_confirmed(pg, c, p)
        events = p.events()
        got = as_set_of_rows(events, "kf", ("a", "b", "big"))
        want = {tuple(r) for r in pg.sql(f"select a, b, big from {full}")}
        assert len(want) == pg.sql(f"select count(*) from {full}")[0][0]  # no two rows equal
        assert got == want, (len(got), len(want), sorted(got - want)[:3], sorted(want - got)[:3])
        got = as_set_of_rows(events, "kp", ("a", "b"))
        assert got == {tuple(r) for r in pg.sql(f"select a, b from {plain}")}
        reads = [e for e in events if e["op"] == "read"]
        assert {e["table"] for e in reads} == {"kf", "kp"}
        # a read's key is what the stream's events of its table carry: every column with REPLICA
        # IDENTITY FULL, none without
        assert all(set(e["key"]) == {"a", "b", "big"} for e in reads if e["table"] == "kf"), reads[0]
        assert all(not e["key"] for e in reads if e["table"] == "kp"), reads[-1]
        assert writer.transactions > 100, writer.transactions
        assert p.terminate() == 0
    finally:
        if not writer.stopped():
            writer.stop()


def test_progress_of_a_table_never_analyzed(pg, schema, cdc):
    """Issue 31: a table never analyzed (reltuples -1) has an estimate from its size after the
    first chunk, said to be one: `cdc backfill --wait` on a terminal draws its bar with a share
    and an ETA ("of about"), `cdc status` and GET /backfills tell it, /metrics has it."""
    t = f"{schema}.fresh"
    pg.sql(f"create table {t} (id int primary key, v text) with (autovacuum_enabled = false)")
    pg.sql(f"insert into {t} select g, 'v' || g from generate_series(1, 40000) g")
    assert pg.sql(f"select reltuples from pg_class where oid = '{t}'::regclass")[0][0] == -1
    c, p = cdc.start(subscriptions=[{"name": "s", "tables": [t], "sink": "stdout"}],
                     backfill={"rate_limit": 8000, "max_rows": 500})
    sock = c.config["status"]["socket"]
    leader, follower = os.openpty()
    start = time.monotonic()
    wait = subprocess.Popen([CDC_BIN, "backfill", "-s", sock, "s", "--wait"], stdout=follower,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    # the table's bar: it comes a line after the backfill's (stdout on a terminal is line-buffered,
    # so a read may end between the two)
    bar = r"\[#*\.*\] running, [0-9,]+ of about [0-9,]+ rows read \(\d+%\)"
    try:
        while not re.search(bar, out.decode(errors="replace")) and time.monotonic() - start < 10:
            if select.select([leader], [], [], 0.2)[0]:
                out += read_pty(leader)
        first = time.monotonic() - start
        text = out.decode(errors="replace")
        assert "of about" in text and "rows read (" in text and "ETA" in text, text
        assert re.search(bar, text), text
        # /status follows every second
        wait_for(lambda: re.search(r"of about [0-9,]+ rows read \(\d+%\)", cli("status", "-s", sock).stdout),
                 timeout=3, what="cdc status to show the estimate")
        b = backfills(c)[0]["tables"][0]
        assert b["estimate_from"] == "size" and 20000 <= b["estimate"] <= 80000, b
        assert b["blocks"] > 0 and b["blocks_read"] > 0, b
        metrics = wait_for(lambda: (lambda m: m if "cdc_backfill_rows_estimate{" in m else None)(
            status_metrics(c)), what="the estimate in /metrics")
        assert re.search(r'cdc_backfill_rows_estimate\{subscription="s",backfill="[0-9a-f]+",table="'
                         + re.escape(t) + r'"\} \d+', metrics), metrics
        # from the first second on a quiet machine; the bound leaves room for a loaded one
        assert first < 5, (first, text)
        assert wait.wait(60) == 0, wait.stderr.read()
        rest = b""
        while select.select([leader], [], [], 0.1)[0] and (more := read_pty(leader)):
            rest += more
        assert "done, 40,000 rows read, 40,000 delivered" in (out + rest).decode(errors="replace")
    finally:
        os.close(leader)
        if wait.poll() is None:
            wait.kill()
    assert p.terminate() == 0


def read_pty(fd):
    """What a pseudo-terminal has, b"" once its other side closed (EIO)."""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def status_metrics(c):
    code, body = status(c, "/metrics")
    assert code == 200, body
    return body


class RootWriter(Writer):
    """Small transactions through a partitioned table (id-ranged partitions): inserts into its last
    partition, updates that leave a TOAST value as it is (the stream's copy incomplete), updates
    that move a row to another partition (a delete and an insert in the stream), and deletes."""

    def __init__(self, pg, root, ids, first_free, seed=3):
        self.root, self.ids, self.next = root, list(ids), first_free
        super().__init__(pg, seed)

    def one(self, cur):
        r, t = self.rng.random(), self.root
        if r < 0.25 or not self.ids:
            cur.execute(f"insert into {t} values (%s, 'v', 0, repeat('x', 3000))", (self.next,))
            self.ids.append(self.next)
            self.next += 1
        elif r < 0.65:
            cur.execute(f"update {t} set n = n + 1 where id = %s", (self.rng.choice(self.ids),))
        elif r < 0.8:
            i = self.rng.randrange(len(self.ids))
            cur.execute(f"update {t} set id = %s where id = %s", (self.next, self.ids[i]))
            self.ids[i] = self.next
            self.next += 1
        else:
            cur.execute(f"delete from {t} where id = %s", (self.ids.pop(self.rng.randrange(len(self.ids))),))


@pytest.mark.matrix
def test_partitioned_root_backfill_with_attach_and_detach(pg, schema, cdc):
    """A snapshot of a partitioned table reads every leaf by block ranges, its rows under the
    root's name, while a writer changes it through the root (rows moved between partitions, TOAST
    values left unchanged), one partition is detached and another, full of rows, attached: a
    consumer applying the events in order by key ends with exactly the root's rows, plus rows of the
    detached partition it had before the detach, each as the partition has it (PostgreSQL's stream
    says nothing at a DETACH, so those stay: docs/backfills.md)."""
    root, outside = f"{schema}.ev", f"{schema}_out"
    rows = 8000
    pg.sql(f"create table {root} (id int primary key, v text not null, n int not null, big text) "
           "partition by range (id)")
    for i, (lo, hi) in enumerate([(1, 2001), (2001, 4001), (4001, 6001), (6001, 8001), (10001, 10**9)]):
        pg.sql(f"create table {root}_{i} partition of {root} for values from ({lo}) to ({hi})")
        pg.sql(f"alter table {root}_{i} alter column big set storage external")
    pg.sql(f"insert into {root} select g, 'v' || g, 0, case when g % 20 = 0 then repeat(md5(g::text), 100) end "
           f"from generate_series(1, {rows}) g")
    # attached during the backfill: filled outside the publication (PostgreSQL 14 would otherwise
    # keep sending its changes under its own name after the ATTACH)
    pg.sql(f"create schema {outside}")
    pg.sql(f"create table {outside}.late (like {root})")
    pg.sql(f"insert into {outside}.late select g, 'late' || g, 0, null from generate_series(8001, 10000) g")
    c = cdc(subscriptions=[{"name": "r", "tables": [root], "sink": "stdout", "snapshot": True}],
            backfill={"rate_limit": 3000, "max_rows": 200})
    writer = RootWriter(pg, root, [i for i in range(1, rows + 1) if i <= 6000], 10001)
    try:
        p = c.start()
        wait_for(lambda: backfills(c) and backfills(c)[0]["rows_read"] >= rows // 4, timeout=60,
                 what=f"a quarter of the rows read\n{p.describe()}")
        pg.sql(f"alter table {root} detach partition {root}_3")
        detached = full_rows(pg, f"{root}_3")
        pg.sql(f"alter table {root} attach partition {outside}.late for values from (8001) to (10001)")
        wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], timeout=120,
                 what=f"the backfill to finish\n{p.describe()}")
        writer.stop()
        want = full_rows(pg, root)
        wait_confirmed(pg, c, p)
        model = {}
        events = p.events()
        for e in events:
            assert e["table"] == "ev", e
            apply_event(model, e)
        kept = {k: v for k, v in model.items() if 6001 <= k <= 8000}
        assert all(detached.get(k) == v for k, v in kept.items()), [
            (k, short(v), short(detached.get(k) or {})) for k, v in kept.items() if detached.get(k) != v][:3]
        rest = {k: v for k, v in model.items() if not 6001 <= k <= 8000}
        assert rest == want, diff(rest, want)
        assert all(8001 <= k <= 10000 for k in want if 8001 <= k <= 10000) and \
            sum(1 for k in want if 8001 <= k <= 10000) == 2000  # the attached rows, read
        b = backfills(c)[0]
        assert b["rows_read"] == b["rows_delivered"] + b["rows_dropped"] + b["rows_filtered"], b
        assert writer.transactions > 50, writer.transactions
        assert p.terminate() == 0
    finally:
        if not writer.stopped():
            writer.stop()
        pg.sql(f"drop schema if exists {outside} cascade")


def test_a_table_that_shrinks_and_grows_while_it_is_read(pg, schema, cdc):
    """The ranges are the table's size when its reading starts. Its last blocks emptied and cut off
    by VACUUM while it is read (the ranges past its end read nothing), then rows added (past the
    ranges: the stream carries them): a consumer applying the events ends with exactly the table."""
    t = f"{schema}.t"
    rows = 20000
    pg.sql(f"create table {t} (id int primary key, v text not null, n int not null) "
           "with (autovacuum_enabled = false)")
    pg.sql(f"insert into {t} select g, 'v' || g, 0 from generate_series(1, {rows}) g")
    c = cdc(subscriptions=[{"name": "so", "tables": [t], "sink": "stdout", "snapshot": True}],
            backfill={"rate_limit": 4000, "max_rows": 500})
    p = c.start()
    wait_for(lambda: backfills(c) and backfills(c)[0]["rows_read"] >= rows // 5, timeout=60,
             what=f"a fifth of the rows read\n{p.describe()}")
    blocks = backfills(c)[0]["blocks"]
    size = pg.sql(f"select pg_relation_size('{t}')")[0][0]
    pg.sql(f"delete from {t} where id > {rows * 6 // 10}")
    pg.sql(f"vacuum {t}")
    assert pg.sql(f"select pg_relation_size('{t}')")[0][0] < size * 7 // 10  # cut off
    pg.sql(f"update {t} set n = n + 1 where id % 7 = 0")
    pg.sql(f"insert into {t} select g, 'new' || g, 0 from generate_series({rows + 1}, {rows + 5000}) g")
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], timeout=60,
             what=f"the backfill to finish\n{p.describe()}")
    want = table_rows(pg, t)
    wait_confirmed(pg, c, p)
    model = {}
    for e in p.events():
        apply_event(model, e)
    assert model == want, diff(model, want)
    b = backfills(c)[0]
    assert b["blocks"] == blocks and b["blocks_read"] == blocks, (b, blocks)  # the ranges of the start
    assert p.terminate() == 0
