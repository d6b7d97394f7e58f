"""test_monitoring.py: deploy/monitoring/ in a real Prometheus (Debian's) scraping real cdc processes.

Prometheus runs in a temporary directory on a free port, scrapes two cdc's status.listen every
second and loads a copy of cdc-alerts.yml in which every minute is a second (`for: 10m` -> `for:
10s`, `[15m]` -> `[15s]`): the expressions, thresholds and labels are the shipped ones, only the time
scale is shortened (promtool's unit tests, `make check-monitoring`, test the shipped durations).

cdc `a` streams a stdout, a socket (no consumer), a shared socket subscription whose consumer nacks
(`max_deliveries: 1`) and an exactly-once Kafka subscription (a mock cluster of its own) under load,
with a snapshot that succeeds and one that fails (its COPY cancelled by pg_cancel_backend). cdc `b` has one socket
subscription with a retention of one event (`when_full: block`): once full, its slot stays where it
is while 1.1 GiB of WAL is written (segment switches). Every panel query of cdc-dashboard.json
returns data, and these alerts fire: a socket backlog with no consumer, a failed backfill, dead
letters growing, a full spool, the slot's lag in bytes, safe_wal_size low and wal_status not
reserved (`b`), a failover not ready (cdc `c`: source.failover on a PostgreSQL 17 server of its own
whose synchronized_standby_slots is empty); then a Kafka producer restart (a fenced producer),
restarts (`b` started twice more) and a subscription `b` runs without (one it stored whose table
lost REPLICA IDENTITY FULL while `b` was down), the Kafka sink stalled (the mock cluster's process
killed while events flow), and the stream down once PostgreSQL stops. CdcSlotLagSeconds is left to promtool: its threshold is 300 seconds
since a commit, which only the wall clock can reach.

With CDC_DASHBOARD_PNG=FILE, the dashboard's panels over the run are drawn into FILE at the end
(tests/monitoring/dashboard.py; docs/monitoring/dashboard.png is made so).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import CdcFactory, drop_slot, wait_for
from kafka_fixtures import KafkaMock
from monitoring import dashboard
from pg import TempPostgres
from test_exactly_once import API_END_TXN
from test_kafka import kafka_section, ksub
from test_socket import attach, collect, socket_sub
from test_status import get, http, status_sock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONITORING = os.path.join(ROOT, "deploy", "monitoring")
GIB = 1 << 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scaled_rules(path):
    """The rule file with every minute made a second (for: and range windows)."""
    doc = yaml.safe_load(open(path))
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = re.sub(r"(\d+)m$", r"\1s", rule["for"])
            rule["expr"] = re.sub(r"\[(\d+)m\]", r"[\1s]", rule["expr"])
    return doc


class Prometheus:
    """Prometheus scraping targets ({instance name: address}) every second, with the scaled rules."""

    def __init__(self, targets):
        self.dir = tempfile.mkdtemp(prefix="cdc-prom-")
        self.port = free_port()
        with open(os.path.join(self.dir, "rules.yml"), "w") as f:
            yaml.safe_dump(scaled_rules(os.path.join(MONITORING, "cdc-alerts.yml")), f)
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                            "rule_files": ["rules.yml"],
                            "scrape_configs": [{"job_name": "cdc", "static_configs": [
                                {"targets": [address], "labels": {"instance": name}}
                                for name, address in targets.items()]}]}, f)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir}/prometheus.yml", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=self.log,
            stdin=subprocess.DEVNULL, cwd=self.dir)
        wait_for(self._ready, 60, what="prometheus to be ready")
        self.started, self.started_wall = time.monotonic(), time.time()

    def _get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read()) if path.startswith("/api") else r.read()

    def _ready(self):
        try:
            self._get("/-/ready")
            return True
        except OSError:
            assert self.proc.poll() is None, open(self.log.name).read()[-3000:]
            return False

    def query(self, expr):
        return self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]

    def firing(self):
        """(alertname, subscription or else instance) of every firing alert."""
        return {(a["labels"]["alertname"], a["labels"].get("subscription", a["labels"]["instance"]))
                for a in self._get("/api/v1/alerts")["data"]["alerts"] if a["state"] == "firing"}

    def wait_firing(self, alert, timeout=40, tick=lambda: None):
        """Waits until alert fires, calling tick() every half second."""
        def fired():
            tick()
            return alert in self.firing()
        wait_for(fired, timeout, interval=0.5, what=f"{alert} to fire (firing: {sorted(self.firing())})")
        self.note(f"{alert} fires")

    def note(self, what):
        """A line of the test's output (shown when it fails): when each alert fired."""
        print(f"prometheus +{time.monotonic() - self.started:.1f}s: {what}")

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class WalWriter(threading.Thread):
    """Writes gib GiB of WAL quickly, in a thread: a row, then a switch to the next segment (16
    MiB), again and again. join() raises what the thread raised."""

    def __init__(self, pg, schema, gib):
        threading.Thread.__init__(self)
        self.pg, self.schema, self.gib, self.error = pg, schema, gib, None
        self.start()

    def run(self):
        try:
            conn = self.pg.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("select pg_size_bytes(current_setting('wal_segment_size'))")
                    n = int(self.gib * GIB) // cur.fetchone()[0] + 1
                    cur.execute(f"do $$ begin for i in 1..{n} loop insert into {self.schema}.pad values (i); "
                                "perform pg_switch_wal(); end loop; end $$")
            finally:
                conn.close()
        except BaseException as e:  # noqa: B036 (handed to join)
            self.error = e

    def join(self, timeout=None):
        threading.Thread.join(self, timeout)
        if self.error:
            raise self.error


def test_dashboard_queries_and_alerts_in_a_real_prometheus(pg, cdc, schema, tmp_path):
    if not shutil.which("prometheus"):
        pytest.fail("prometheus is not installed (deploy/deps.sh test installs it)")
    for t in ("orders (id serial primary key, v text)", "slow (v int)", "jobs (id int primary key)",
              "held (id int primary key)", "pad (i int)", "ident (id int primary key, v text)"):
        pg.sql(f"create table {schema}.{t}")
    pg.sql(f"alter table {schema}.ident replica identity full")
    pg.sql(f"insert into {schema}.orders (v) select 'x' from generate_series(1, 2000)")
    pg.sql(f"insert into {schema}.slow select generate_series(1, 20000)")
    # safe_wal_size is known with a limit; b's 1.1 GiB of lag is then under a fifth of it left, and
    # past max_wal_size (wal_status extended).
    settings = {"max_slot_wal_keep_size": "1280MB", "max_wal_size": "512MB"}
    for k, v in settings.items():
        pg.sql(f"alter system set {k} = '{v}'")
    pg.sql("select pg_reload_conf()")
    kafka, prom, worker, pb, pc = KafkaMock(), None, None, None, None
    pg17 = TempPostgres(version=17)
    cdc17 = CdcFactory(pg17, tmp_path, "public", "failover")
    try:
        kafka.create_topic("cdc.positions", 1)
        listen = {"a": f"127.0.0.1:{free_port()}", "b": f"127.0.0.1:{free_port()}",
                  "c": f"127.0.0.1:{free_port()}"}
        a = cdc(subscriptions=[
            {"name": "events", "tables": [f"{schema}.orders"], "sink": "stdout"},
            {"name": "queue", "tables": [f"{schema}.orders"], "sink": "socket", "operations": ["insert"]},
            socket_sub(schema, consumers="shared", max_deliveries=1),
            {"name": "snap", "tables": [f"{schema}.orders"], "sink": "stdout", "snapshot": True,
             "operations": ["update"]},
            {"name": "broken", "tables": [f"{schema}.slow"], "sink": "stdout", "snapshot": True},
            ksub("k", [f"{schema}.orders"])],
            kafka=kafka_section(kafka, exactly_once=True), backfill={"rate_limit": 2000, "tables": 2},
            status={"socket": os.path.join(cdc.sockdir, "sta.sock"), "listen": listen["a"]})
        b = cdc(subscriptions=[socket_sub(schema, name="held", table="held",
                                          retention={"max_events": 1, "when_full": "block"})],
                status={"socket": os.path.join(cdc.sockdir, "stb.sock"), "listen": listen["b"]})
        # c: source.failover on a PostgreSQL 17 primary with no synchronized_standby_slots
        pg17.start()
        pg17.sql("create table public.t (id int primary key)")
        c = cdc17(source={"failover": True}, status={"socket": os.path.join(cdc17.sockdir, "status.sock"),
                                                      "listen": listen["c"]})
        pa, pb, pc = a.start(), b.start(), c.start()
        # broken's backfill fails: an administrator cancels its COPY (a statement that fails is
        # not done again, unlike a connection lost). Once it has read a chunk, a lock makes its
        # next COPY wait, and the cancel finds it waiting (a cancel between two statements, which
        # take milliseconds each, would do nothing).
        def broken():
            code, body = get(a, "/backfills")
            assert code == 200, body
            return next((x for x in json.loads(body) if x["subscription"] == "broken"), {})
        wait_for(lambda: broken().get("rows_read", 0) > 0, 30, what=f"broken's first chunk\n{pa.describe()}")
        locker = pg.connect()
        try:
            locker.cursor().execute(f"begin; lock table {schema}.slow in access exclusive mode")
            wait_for(lambda: pg.sql("select count(pg_cancel_backend(a.pid)) from pg_stat_activity a join "
                                    "pg_locks l on l.pid = a.pid where a.application_name = 'cdc backfill' "
                                    "and l.relation = %s::regclass and not l.granted",
                                    (f"{schema}.slow",))[0][0] > 0,
                     30, what=f"broken's next COPY to wait for the lock\n{pa.describe()}")
        finally:
            locker.close()
        wait_for(lambda: broken().get("state") == "failed", 30, what=f"broken's backfill to fail\n{pa.describe()}")
        # b's spool fills: its slot stays, and the server keeps all the WAL written from here on
        pg.sql(f"insert into {schema}.held select generate_series(1, 3)")
        wait_for(lambda: json.loads(get(b, "/status")[1])["subscriptions"][0]["full"], 30,
                 what=f"b's spool to be full\n{pb.describe()}")
        # b stores a subscription that needs ident's old rows; ident loses them while b is down
        # (below), so b's next start sets it aside
        code, body = http((status_sock(b), "/subscriptions/chg"), "PUT", json.dumps(
            {"tables": [f"{schema}.ident"], "sink": "stdout", "operations": ["update"], "changed": ["v"]}),
            timeout=60)
        assert code == 200, body
        wal = WalWriter(pg, schema, 1.1)
        prom = Prometheus(listen)
        # a's nacking consumer, once Prometheus has a sample from before: one delivery allowed, so
        # each nack makes a dead letter
        wait_for(lambda: prom.query('cdc_subscription_dead_events{subscription="jobs"}'), 30, what="a first scrape")
        worker = attach(a, consumer="w")
        pg.sql(f"insert into {schema}.jobs select generate_series(1, 2)")
        worker.nack([e.offset for e in collect(worker, 2)], reason="always fails")
        expected = {("CdcSocketBacklogNoConsumer", "queue"), ("CdcBackfillFailed", "broken"),
                    ("CdcDeadLettersGrowing", "jobs"), ("CdcSpoolFull", "held"), ("CdcSlotLagBytes", "b"),
                    ("CdcSafeWalSizeLow", "b"), ("CdcWalStatusNotReserved", "b"), ("CdcFailoverNotReady", "c")}
        deadline = time.monotonic() + 90
        missing, fired = None, set()  # dead letters fire for 15 s after they grew: each is seen once
        while time.monotonic() < deadline:
            pg.sql(f"insert into {schema}.orders (v) select 'y' from generate_series(1, 200)")
            missing = [(p["title"], q) for p in dashboard.panels() for q, _ in p["targets"] if not prom.query(q)]
            new = prom.firing() - fired
            if new:
                prom.note(f"{sorted(new)} fire")
            fired |= new
            if not missing and expected <= fired:
                break
            time.sleep(1)
        wal.join()
        assert not missing, f"panel queries without data: {missing}\n{pa.describe()}"
        assert expected <= fired, f"{sorted(expected - fired)} did not fire\n{pb.describe()}"
        assert prom.query('cdc_source_failover_ready{instance="c"}')[0]["metric"]["reason"] == \
            "synchronized_standby_slots_empty"
        assert pc.terminate() == 0, pc.describe()
        lag = float(prom.query('cdc_source_lag_bytes{instance="b"}')[0]["value"][1])
        assert 1.0 * GIB < lag < 1.25 * GIB, lag
        assert not {n for n, _ in fired} & {"CdcStreamDown", "CdcKafkaStalled", "CdcRestarting",
                                            "CdcKafkaProducerRestarts"}
        # a fenced producer: a's Kafka sink restarts it (rows keep coming, so that a transaction
        # ends: the backlog of the loop above may be delivered already)
        kafka.push_errors("PRODUCER_FENCED", 1, api_key=API_END_TXN)
        prom.wait_firing(("CdcKafkaProducerRestarts", "a"),
                         tick=lambda: pg.sql(f"insert into {schema}.orders (v) select 'f' from generate_series(1, 50)"))
        # the stream down: PostgreSQL stops, cdc stays up and says so. A fast shutdown waits for
        # every walsender to have sent the WAL up to its end: b's waits for b, which reads no more
        # (and so would a's once Kafka is gone), so b stops first.
        assert pb.terminate() == 0, pb.describe()
        pg.sql(f"alter table {schema}.ident replica identity default")
        pg.stop("fast")
        try:
            prom.wait_firing(("CdcStreamDown", "a"))
        finally:
            pg.start()
        # the Kafka cluster's process is gone while a produces; meanwhile b starts again, twice
        # (resets() counts a sample lower than the one before: the first new run is seen at 3 s of
        # uptime before the second starts)
        kafka.proc.kill()

        def b_seen(restarts, uptime):
            q = f'resets(cdc_uptime_seconds{{instance="b"}}[5m]) >= {restarts} and on() ' \
                f'cdc_uptime_seconds{{instance="b"}} >= {uptime}'
            return prom.query(q)
        for restarts, uptime in ((1, 3), (2, 0)):
            pb = b.run()
            wait_for(lambda: b_seen(restarts, uptime), 30, interval=0.2,
                     what=f"Prometheus to see b started again\n{pb.describe()}")
            if restarts == 1:
                assert pb.terminate() == 0, pb.describe()
        prom.wait_firing(("CdcRestarting", "b"))
        prom.wait_firing(("CdcSubscriptionFailed", "chg"))
        prom.wait_firing(("CdcKafkaStalled", "a"),
                         tick=lambda: pg.sql(f"insert into {schema}.orders (v) select 'z' from generate_series(1, 50)"))
        if os.environ.get("CDC_DASHBOARD_PNG"):  # the picture in docs/alerts.md
            dashboard.draw(prom.url, prom.started_wall, time.time(), os.environ["CDC_DASHBOARD_PNG"])
    finally:
        if worker:
            worker.close()
        if prom:
            prom.close()
        kafka.close()
        if pg17.running:
            cdc17.cleanup()
        pg17.cleanup()
        for k in settings:
            pg.sql(f"alter system reset {k}")
        pg.sql("select pg_reload_conf()")
        if pb:  # b's 1.1 GiB of WAL is removed now, not at some later test's checkpoint
            pb.kill()
            drop_slot(pg, b.slot)
            pg.sql("checkpoint")
