"""test_monitoring.py: deploy/monitoring/ in a real Prometheus (Debian's) scraping a real cdc.

Prometheus runs in a temporary directory on a free port, scrapes cdc's status.listen every second and
loads a copy of cdc-alerts.yml in which every minute is a second (`for: 10m` -> `for: 10s`, `[15m]`
-> `[15s]`): the expressions, thresholds and labels are the shipped ones, only the time scale is
shortened (promtool's unit tests, `make check-monitoring`, test the shipped durations). cdc streams
a stdout, a socket (no consumer) and an exactly-once Kafka subscription under load, with a snapshot
that succeeds and one that fails (a table without a key). Every panel query of cdc-dashboard.json
returns data; the alerts this setup provokes fire (a socket backlog with no consumer, a failed
backfill, then the stream down once PostgreSQL stops); every other alert's metrics return data.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import wait_for
from test_kafka import kafka_section, ksub

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONITORING = os.path.join(ROOT, "deploy", "monitoring")


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
    def __init__(self, target):
        self.dir = tempfile.mkdtemp(prefix="cdc-prom-")
        self.port = free_port()
        with open(os.path.join(self.dir, "rules.yml"), "w") as f:
            yaml.safe_dump(scaled_rules(os.path.join(MONITORING, "cdc-alerts.yml")), f)
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                            "rule_files": ["rules.yml"],
                            "scrape_configs": [{"job_name": "cdc", "static_configs": [{"targets": [target]}]}]}, f)
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir}/prometheus.yml", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=self.log,
            stdin=subprocess.DEVNULL, cwd=self.dir)
        wait_for(self._ready, 60, what="prometheus to be ready")

    def _get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
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
        return {(a["labels"]["alertname"], a["labels"].get("subscription", "")) for a in
                self._get("/api/v1/alerts")["data"]["alerts"] if a["state"] == "firing"}

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def panel_queries():
    dash = json.load(open(os.path.join(MONITORING, "cdc-dashboard.json")))
    for p in dash["panels"]:
        for t in p["targets"]:
            yield p["title"], t["expr"].replace("$__rate_interval", "10s")


def test_dashboard_queries_and_alerts_in_a_real_prometheus(pg, cdc, schema, kafka):
    if not shutil.which("prometheus"):
        pytest.fail("prometheus is not installed (deploy/deps.sh test installs it)")
    pg.sql(f"create table {schema}.orders (id serial primary key, v text)")
    pg.sql(f"create table {schema}.nokey (v int)")
    pg.sql(f"insert into {schema}.orders (v) select 'x' from generate_series(1, 2000)")
    pg.sql(f"insert into {schema}.nokey select 1")
    kafka.create_topic("cdc.positions", 1)
    pg.sql("alter system set max_slot_wal_keep_size = '1GB'")  # safe_wal_size is known then
    pg.sql("select pg_reload_conf()")
    listen = f"127.0.0.1:{free_port()}"
    c = cdc(subscriptions=[
        {"name": "events", "tables": [f"{schema}.orders"], "sink": "stdout"},
        {"name": "queue", "tables": [f"{schema}.orders"], "sink": "socket", "operations": ["insert"]},
        {"name": "snap", "tables": [f"{schema}.orders"], "sink": "stdout", "snapshot": True,
         "operations": ["update"]},
        {"name": "broken", "tables": [f"{schema}.nokey"], "sink": "stdout", "snapshot": True},
        ksub("k", [f"{schema}.orders"])],
        kafka=kafka_section(kafka, exactly_once=True), status={"socket": os.path.join(cdc.sockdir, "st.sock"),
                                                                "listen": listen})
    proc = c.start()
    prom = Prometheus(listen)
    try:
        deadline = time.monotonic() + 90
        missing = None
        while time.monotonic() < deadline:
            pg.sql(f"insert into {schema}.orders (v) select 'y' from generate_series(1, 200)")
            missing = [(title, q) for title, q in panel_queries() if not prom.query(q)]
            if not missing and {("CdcSocketBacklogNoConsumer", "queue"), ("CdcBackfillFailed", "broken")} <= \
                    prom.firing():
                break
            time.sleep(1)
        assert not missing, f"panel queries without data: {missing}\n{proc.describe()}"
        assert ("CdcSocketBacklogNoConsumer", "queue") in prom.firing()
        assert ("CdcBackfillFailed", "broken") in prom.firing()
        assert not {a for a, _ in prom.firing()} & {"CdcStreamDown", "CdcKafkaStalled", "CdcRestarting"}
        # every alert's metrics are scraped (those not provoked here read series that exist)
        for metric in ("cdc_source_lag_bytes", "cdc_source_lag_seconds", "cdc_source_connected",
                       "cdc_standby", "cdc_source_wal_status", "cdc_subscription_dead_events",
                       "cdc_subscription_full", "cdc_kafka_in_flight_messages",
                       "cdc_kafka_delivered_messages_total", "cdc_kafka_restarts_total",
                       "cdc_uptime_seconds", "cdc_backfill_failed"):
            assert prom.query(metric), metric
        # the stream down: PostgreSQL stops, cdc stays up and says so
        pg.stop("fast")
        try:
            wait_for(lambda: "CdcStreamDown" in {a for a, _ in prom.firing()}, 60,
                     what="CdcStreamDown to fire")
        finally:
            pg.start()
    finally:
        prom.close()
        pg.sql("alter system reset max_slot_wal_keep_size")
        pg.sql("select pg_reload_conf()")
