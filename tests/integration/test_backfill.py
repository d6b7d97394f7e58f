"""test_backfill.py: snapshots and backfills while the stream keeps flowing (cdc/backfill). A table
is backfilled while a concurrent load inserts, updates (keys too) and deletes, and cdc is killed
with -9 twice during the backfill: a consumer applying the events in order by key (read, insert and
update as upserts, delete as delete) ends with exactly the table's rows, row by row, for the socket,
Kafka and stdout sinks; another subscription of the table gets no reads; no transaction of cdc's
stays open longer than a chunk. Then the request's and the subscription's `where`, `columns`, the
API (POST, DELETE, GET /backfills, `cdc backfill --wait`), its figures when cdc evaluates part of
the `where`, and the requests refused when they are made (a keyless table, a table not the
subscription's, a `where` never true for a column's type). The 100k-row variant is CDC_BACKFILL_ROWS=100000."""

import gzip
import json
import os
import random
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

class Load:
    """Small transactions on table t from a thread of its own: inserts, updates, key changes and
    deletes, until stopped."""

    def __init__(self, pg, table, first_free, seed=7):
        self.conn = psycopg2.connect(pg.dsn)
        self.table = table
        self.rng = random.Random(seed)
        self.ids = list(range(1, first_free))
        self.next_id = first_free
        self.transactions = 0
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _one(self, cur):
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

    def _run(self):
        try:
            while not self._stop.is_set():
                with self.conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, 3)):
                        self._one(cur)
                self.conn.commit()
                self.transactions += 1
                time.sleep(0.003)
        except Exception as e:  # reported by stop()
            self.errors.append(e)

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()
        assert not self.errors, self.errors


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


def diff(model, want):
    """What differs between a consumer's rows and the table's, for failure messages."""
    extra = sorted(set(model) - set(want))[:10]
    missing = sorted(set(want) - set(model))[:10]
    changed = [(k, model[k], want[k]) for k in sorted(set(model) & set(want)) if model[k] != want[k]][:5]
    return f"{len(model)} rows, {len(want)} in the table; extra {extra} missing {missing} changed {changed}"


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


def table_rows(pg, table):
    return {r[0]: {"id": r[0], "v": r[1], "n": r[2]} for r in pg.sql(f"select id, v, n from {table}")}


def test_backfill_under_load_with_kills(pg, schema, cdc, kafka, kafka_reader):
    t = f"{schema}.t"
    pg.sql(f"create table {t} (id int primary key, v text not null, n int not null)")
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
        backfill={"min_rows": 50, "max_rows": 200, "rate_limit": max(ROWS // 4, 500), "tables": 3})
    watch = LongestTransaction(pg)
    load = Load(pg, t, ROWS + 1)
    consumer = SocketConsumer(c.config["subscribers"]["socket"], "sk")
    try:
        p = c.start()
        # killed with -9 twice while the backfills run, each time once they made progress
        for fraction in (0.25, 0.6):
            wait_for(lambda: len(backfills(c)) == 3 and
                     min(b["rows_read"] for b in backfills(c)) >= fraction * ROWS,
                     timeout=120, what=f"{fraction:.0%} of the rows read\n{p.describe()}")
            assert all(b["state"] == "running" for b in backfills(c)), backfills(c)
            p.kill()
            p = c.start()
        wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"] * 3, timeout=180,
                 what=f"the backfills to finish\n{p.describe()}")
        load.stop()
        want = table_rows(pg, t)
        end = pg.current_wal_lsn()
        wait_for(lambda: c.slot_row()[1] and
                 [int(x, 16) for x in c.slot_row()[1].split("/")] >= [int(x, 16) for x in end.split("/")],
                 timeout=60, what=f"cdc to confirm {end}\n{p.describe()}")
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
        if not load._stop.is_set():
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
    w, nk = f"{schema}.w", f"{schema}.nokey"
    pg.sql(f"create table {w} (id int primary key, status text)")
    pg.sql(f"create table {nk} (x int)")
    c, p = cdc.start(subscriptions=[{"name": "paid", "tables": [w], "sink": "stdout"},
                                    {"name": "nk", "tables": [nk], "sink": "stdout"}])
    sock = c.config["status"]["socket"]

    # Requests that cannot succeed are refused when they are made, naming why, and nothing is
    # queued: a keyless table, a table the subscription does not have, a where that is never true
    # for the column's type, a subscription that does not exist.
    r = cli("backfill", "-s", sock, "nk", "--wait")
    assert r.returncode == 1 and "queued" not in r.stdout, r.stdout
    assert f"{nk} has neither a primary key nor a unique index on NOT NULL columns" in r.stderr, r.stderr
    assert "ALTER TABLE" in r.stderr
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
