"""harness.py: fault injection against a running cdc, and the proof that nothing was lost.

    python3 tests/fault/harness.py --seed 42 --duration 600     (make torture SEED=42 DURATION=600)

Starts a throwaway PostgreSQL (logical_decoding_work_mem=64kB, so large transactions are streamed;
synchronous_commit=on, so a commit that returned survives an immediate stop), the mock Kafka
cluster (3 brokers), Debian's nats-server with JetStream and `cdc run` with five subscriptions on
the tables of schema `fault`:

  k_all    sink kafka, every change (topics cdc.fault.TABLE, 4 partitions each)
  s_all    sink socket, every change, drained by `cdc tail` processes
  s_grp    sink socket, inserts and updates with `where: new.grp < 3`, batch: transaction,
           drained by tests/fault/consumer.py processes (cdc_client, via tests/subscriber_helpers.py)
  out_all  sink stdout, every change (each cdc run's stdout in a file of its own)
  n_all    sink nats, every change (stream CDC, created by cdc; read back with the nats npm client)

While load.py's workers commit (and abort) transactions for --duration seconds, the harness
injects one fault after another, every 1-5 s, dealt from a shuffled deck so that each kind comes
up within the first 22 faults:

  cdc_kill9          kill -9 of cdc; the slot's confirmed_flush_lsn is sampled once the walsender
                     let go, the consumers are stopped, Kafka's high watermarks read; cdc restarts
                     after 0-2 s and each socket subscription's spool is read from `earliest`
                     (without acknowledging) before the consumers come back
  cdc_term           SIGTERM (must exit 0 after delivering what is in flight), checked the same way
  pg_promote         (--standby) the primary killed (-m immediate) under load, its standby promoted,
                     the old primary rebuilt as the new one's standby (tests/pg.py PgPair); first
                     waits until cdc says a promotion is safe (/status source.failover.ready) and
                     the standby holds a persistent synchronized copy of the slot. Half of them cut
                     the standby off 0.5-2 s before the kill, so that the primary commits what the
                     promoted server will not have (and cdc must never deliver). A --standby run
                     has at least one (forced at 60% of --duration if the deck dealt none)
  pg_stop_fast       PostgreSQL stopped (-m fast), started again after 0.5-4 s
  pg_stop_immediate  the same with -m immediate (a crash: recovery at start)
  walsender_kill     pg_terminate_backend() of the slot's walsender
  kafka_broker_down  one broker down for 2-10 s (another fault may happen meanwhile)
  kafka_all_down     every broker down for 2-8 s
  kafka_produce_error
                     the next 1-5 produce requests fail with one of NOT_ENOUGH_REPLICAS,
                     NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT (retried), MSG_SIZE_TOO_LARGE
                     (permanent: the sink restarts) or OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to the
                     idempotent producer: it is rebuilt)
  kafka_slow         every broker answers 3 s late, for 2-6 s: past the producer's request.timeout.ms
                     (2 s), so requests the broker did append time out and are sent again

cdc's producer runs with max.in.flight.requests.per.connection=1 here. The mock cluster does not
check an idempotent producer's sequence numbers (a real broker does), so with several requests in
flight an injected error lets a later batch overtake the failed one, and librdkafka then reports
the failed batch delivered though the mock never stored it: a loss of the test rig, not of cdc
(tests/fault/mock_idempotence_loss.py shows it with a plain producer, and none with one request in
flight).
  consumer_kill      kill -9 of a socket consumer, mid-batch or not; the next starts 0.2-2 s later
  nats_kill9         kill -9 of nats-server; started again (same store) after 0.5-3 s
  nats_stop          nats-server stopped (SIGTERM); started again after 1-4 s

--standby runs a PostgreSQL 17 primary and a hot standby (slot synchronization on, the primary's
synchronized_standby_slots naming the standby's slot) instead of one server; cdc's source.dsn
names both (target_session_attrs=read-write) and source.failover is on. A transaction whose
COMMIT returned on a primary that then died before its standby had it is not on the promoted
server: at the end the ledger keeps only the transactions whose token the final primary has, and
an event of one of the others is a phantom (a change the promoted server never committed).

Then every fault is undone, the load stops, and the harness waits until every sink has every
committed change it wants (or --drain-timeout passes), stops cdc with SIGTERM and runs verify.py's
checks (its docstring defines them: lost, unexpected, duplicated, out of order, slot). It prints
the faults injected, what the load committed and aborted, one row per sink, examples of every
problem, and exits 1 on any loss, leaked or unknown change, order violation, slot violation, cdc
exit nobody asked for, or harness error (0 otherwise; duplicates are reported, not failed).

The seed fixes every random choice (fault kinds, order, timings, transaction shapes); threads and
processes still interleave as they will, so a rerun with the same seed is a close replay, not an
exact one. --keep keeps the work directory (cdc's logs, consumers' output, state_dir) and writes
k_all.jsonl there: every Kafka message the harness read, partition by partition in offset order
([topic, partition, offset, table, id, op, ver, note, grp, xid, commit_lsn, tx_index]):
the mock broker's log goes with it, and an order example names a partition and offset.
--record FILE writes the run's recording (tests/fault/recording.py): the checks can run on it
again without the run, as tests/fault/test_checkers.py does with perturbed copies.
"""

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import exactly_once  # noqa: E402
import recording  # noqa: E402
from events import NOT_CHANGES, LineFile, from_json, from_line, from_proto  # noqa: E402
from conftest import CDC_BIN, CdcProcess, to_yaml, wait_for  # noqa: E402
from kafka_fixtures import KafkaMock, KafkaReader  # noqa: E402
from load import SCHEMA, TABLES, Load, create_tables  # noqa: E402
from pg import PgPair, TempPostgres, lsn_to_int  # noqa: E402
from schema_check import SchemaCheck  # noqa: E402
from subscriber_helpers import Subscriber, protos  # noqa: E402
from verify import SinkData, failed_batches, verify  # noqa: E402
from nats_fixtures import NatsServer, read_stream  # noqa: E402

PARTITIONS = 4
SLOT, PUBLICATION = "fault_slot", "fault_pub"
GRP_BELOW = 3  # s_grp: where new.grp < 3
PRODUCE_ERRORS = ["NOT_ENOUGH_REPLICAS", "NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT",
                  "MSG_SIZE_TOO_LARGE", "OUT_OF_ORDER_SEQUENCE_NUMBER"]
REQUEST_TIMEOUT_MS = 2000  # cdc's producer request.timeout.ms; kafka_slow answers later than that
# kind: cards in the deck (how often it comes up)
FAULTS = {"cdc_kill9": 3, "cdc_term": 1, "pg_stop_fast": 1, "pg_stop_immediate": 1, "walsender_kill": 2,
          "kafka_broker_down": 2, "kafka_all_down": 1, "kafka_produce_error": 2, "kafka_slow": 1,
          "consumer_kill": 3, "pg_promote": 1, "nats_kill9": 2, "nats_stop": 1}
NEEDS_STANDBY = {"pg_promote"}
PG_SETTINGS = dict(logical_decoding_work_mem="64kB", synchronous_commit=True, max_wal_size="2GB",
                   wal_sender_timeout="30s")
KAFKA_OUTAGES = ("kafka_broker_down", "kafka_all_down", "kafka_slow")

T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return 0


def lsn_text(v):
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


# --- cdc ------------------------------------------------------------------------------------------

class CdcRunner:
    """`cdc run -c FILE`, started again after each stop: run n writes work/cdc.n.stdout|stderr."""

    def __init__(self, cfg_path, workdir):
        self.cfg_path, self.workdir = cfg_path, workdir
        self.runs = []   # CdcProcess, run n = runs[n - 1]
        self.unexpected_exits = []

    @property
    def current(self):
        return self.runs[-1] if self.runs else None

    def start(self):
        n = len(self.runs) + 1
        p = CdcProcess([CDC_BIN, "run", "-c", self.cfg_path], os.path.join(self.workdir, f"cdc.{n}.stdout"),
                       os.path.join(self.workdir, f"cdc.{n}.stderr"))
        self.runs.append(p)
        return p

    def stdout_path(self, n):
        return os.path.join(self.workdir, f"cdc.{n}.stdout")

    def check(self):
        """True if cdc runs; an exit nobody asked for is recorded (the caller restarts it)."""
        p = self.current
        if p is None or p.running():
            return True
        self.unexpected_exits.append((len(self.runs), p.returncode, p.describe(15)))
        log(f"cdc run {len(self.runs)} exited by itself with {p.returncode}\n{p.describe(15)}")
        return False

    def close(self):
        for p in self.runs:
            p.close()


# --- socket consumers -----------------------------------------------------------------------------

class Consumer:
    """One socket subscription's consumer processes, one at a time: run n writes NAME.n.jsonl."""

    def __init__(self, name, sub, kind, sock, workdir, rng):
        self.name, self.sub, self.kind, self.sock, self.workdir = name, sub, kind, sock, workdir
        self.rng = rng
        self.runs = 0
        self.files = []  # LineFile of each run
        self.checks = {}  # run -> SchemaCheck of its events (kind tail)
        self.proc = None
        self.not_before = 0.0
        self.err = open(os.path.join(workdir, f"{name}.stderr"), "ab")

    def path(self, n):
        return os.path.join(self.workdir, f"{self.name}.{n}.jsonl")

    def start(self):
        self.runs += 1
        n = self.runs
        if self.kind == "tail":
            with open(self.path(n), "wb") as out:
                self.proc = subprocess.Popen([CDC_BIN, "tail", "-s", self.sock, self.sub, "--consumer",
                                              f"{self.name}-{n}"], stdout=out, stderr=self.err,
                                             stdin=subprocess.DEVNULL)
        else:
            self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "consumer.py"), self.sock, self.sub,
                                          self.path(n), "--consumer", f"{self.name}-{n}"],
                                         stdout=subprocess.DEVNULL, stderr=self.err, stdin=subprocess.DEVNULL)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(30)

    def lines(self):
        """(current run, its complete lines): where a kill cuts its stream."""
        if self.runs == 0:
            return (0, 0)
        try:
            with open(self.path(self.runs), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return (self.runs, 0)
        return (self.runs, data.count(b"\n"))

    def collect(self, sink):
        """Adds what the runs wrote since the last call to sink.streams (stream id: the run)."""
        while len(self.files) < self.runs:
            self.files.append(LineFile(self.path(len(self.files) + 1)))
        for n, lf in enumerate(self.files, 1):
            sink.streams.setdefault(n, [])
            # a run may start after schema events an earlier run acknowledged: rows before its first
            # one are not checked (strict=())
            check = self.checks.setdefault(n, SchemaCheck())
            for line_no, line in lf.read_new():
                where = (n, line_no)
                if self.kind == "tail":
                    e = json.loads(line)
                    check.feed(e)
                    r = from_json(e, where)
                else:
                    r = from_line(line, where)
                sink.add(n, r)


class Supervisor(threading.Thread):
    """Keeps one consumer process per socket subscription running (0.2-2 s after one dies),
    except while paused."""

    def __init__(self, consumers):
        super().__init__(name="consumers", daemon=True)
        self.consumers = consumers
        self.lock = threading.Lock()
        self.paused = False
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(0.1):
            with self.lock:
                if self.paused:
                    continue
                now = time.monotonic()
                for c in self.consumers:
                    if c.alive():
                        continue
                    if c.proc is not None and c.not_before == 0.0:
                        c.not_before = now + c.rng.uniform(0.2, 2.0)
                    if now >= c.not_before:
                        c.not_before = 0.0
                        c.start()

    def pause(self):
        """Stops every consumer (kill -9) until resume()."""
        with self.lock:
            self.paused = True
            for c in self.consumers:
                c.kill()

    def resume(self):
        with self.lock:
            self.paused = False
            for c in self.consumers:
                c.not_before = 0.0

    def kill_one(self, c):
        with self.lock:
            was = c.alive()
            c.kill()
            return was

    def stop(self):
        self._halt.set()
        self.join(10)
        with self.lock:
            for c in self.consumers:
                c.kill()


# --- the harness ----------------------------------------------------------------------------------

class Harness:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = tempfile.mkdtemp(prefix="cdc-fault-")
        self.faults = collections.Counter()
        self.fault_details = collections.Counter()
        self.kills = []        # (kill index, confirmed_flush_lsn)
        self.errors = []       # harness-level failures (not cdc's, or not of one sink)
        self.restores = {}     # what: (timer, action) of the faults still to undo
        self.restore_lock = threading.Lock()
        self.slow_stops = []   # (fault, seconds) of PostgreSQL stops that took more than 5 s
        self.promotions = []   # (seconds waited for a safe moment, standby cut off, to promote, to rebuild)
        self.lost_at_promotion = {}  # token: Txn committed on a primary that died before its standby had it
        self.deck = []
        self.pg = self.kafka = self.reader = self.cdc = self.sup = self.load = self.nats = None
        self.nats_seq = 0  # the last stream sequence collected
        self.wm_consumer = None
        self.sinks = {}
        self.stdout_files = []
        self.stdout_checks = {}  # run -> SchemaCheck of its stdout
        self.kafka_times = collections.defaultdict(list)  # --exactly-once: (commit_lsn, tx_index): [ms]

    # --- setup ---

    def setup(self):
        a = self.args
        # --standby: a pair with failover slots, PostgreSQL 17 unless --pg-version says another
        version = a.pg_version or (17 if a.standby else None)
        self.pg = PgPair(version=version, **PG_SETTINGS) if a.standby else TempPostgres(version=version, **PG_SETTINGS)
        self.pg.start()
        create_tables(self.pg)
        self.kafka = KafkaMock(brokers=3)
        self.topics = [f"cdc.{SCHEMA}.{t}" for t in TABLES]
        for t in self.topics:
            self.kafka.create_topic(t, PARTITIONS)
        self.pb = protos()[0]
        self.nats = NatsServer()
        # Its connection errors while brokers are down on purpose are expected: counted in the
        # report, not logged (librdkafka would print each "Connection refused" to stderr)
        self.reader = KafkaReader(self.kafka.bootstrap, self.topics, self.pb, group=False, log_level=0)
        from confluent_kafka import Consumer as KConsumer
        self.wm_consumer = KConsumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "fault-wm",
                                      "enable.auto.commit": False, "log_level": 0})
        self.sock = os.path.join(self.workdir, "events.sock")
        tables = [f"{SCHEMA}.*"]
        cfg = {
            "source": {"dsn": self.pg.dsn, "slot": SLOT, "publication": PUBLICATION, "create": True,
                       "publish": tables, "status_interval": "250ms", "failover": a.standby},
            "state_dir": os.path.join(self.workdir, "state"),
            "status": {"socket": os.path.join(self.workdir, "status.sock")},
            "subscribers": {"socket": self.sock},
            "log": {"level": "debug" if a.kafka_debug else "info"},
            "kafka": {"brokers": self.kafka.bootstrap,
                      "properties": {"linger.ms": "5", "reconnect.backoff.max.ms": "1000",
                                     "request.timeout.ms": str(REQUEST_TIMEOUT_MS),
                                     # see the module docstring: the mock's idempotence
                                     "max.in.flight.requests.per.connection": "1"}},
            "nats": {"servers": self.nats.url, "create": True, "ack_timeout": "5s"},
            "subscriptions": [
                {"name": "k_all", "tables": tables, "sink": "kafka"},
                {"name": "n_all", "tables": tables, "sink": "nats"},
                {"name": "s_all", "tables": tables, "sink": "socket", "max_unacked": 10000000},
                {"name": "s_grp", "tables": tables, "operations": ["insert", "update"],
                 "where": f"new.grp < {GRP_BELOW}", "sink": "socket", "batch": "transaction",
                 "max_unacked": 10000000},
                {"name": "out_all", "tables": tables, "sink": "stdout"},
            ],
        }
        if a.kafka_debug:
            cfg["kafka"]["properties"]["debug"] = a.kafka_debug
        if a.exactly_once:
            cfg["kafka"]["exactly_once"] = True
        self.cfg_path = os.path.join(self.workdir, "cdc.yaml")
        with open(self.cfg_path, "w") as f:
            f.write(to_yaml(cfg))
        self.cdc = CdcRunner(self.cfg_path, self.workdir)
        self.start_cdc()
        self.consumers = [Consumer("s_all", "s_all", "tail", self.sock, self.workdir, random.Random(self.rng.random())),
                          Consumer("s_grp", "s_grp", "py", self.sock, self.workdir, random.Random(self.rng.random()))]
        self.sup = Supervisor(self.consumers)
        self.sup.start()
        rngs = [random.Random(self.rng.random()) for _ in range(a.workers)]
        self.load = Load(self.pg, rngs, pause=a.pause, large_rows=a.large_rows)

    def start_cdc(self):
        p = self.cdc.start()

        def streaming():
            if not p.running():
                raise AssertionError(f"cdc exited while starting\n{p.describe()}")
            rows = self.slot_row()
            return rows is not None and rows[0]
        wait_for(streaming, timeout=60, interval=0.1, what=f"cdc to stream\n{p.describe()}")
        return p

    def slot_row(self):
        rows = self.pg.sql("select active, confirmed_flush_lsn::text, active_pid from pg_replication_slots "
                           "where slot_name = %s", (SLOT,))
        return rows[0] if rows else None

    # --- faults ---

    def deal(self):
        if not self.deck:
            self.deck = [k for k, n in FAULTS.items() for _ in range(n) if k in self.args.faults]
            self.rng.shuffle(self.deck)
        return self.deck.pop()

    def kafka_outage(self):
        with self.restore_lock:
            return bool(self.restores)

    def restore_later(self, delay, what, action):
        """Undoes a fault after delay seconds, on a timer: whatever the main loop is doing then
        (a PostgreSQL fast shutdown can wait for cdc, which waits for Kafka)."""
        def fire():
            with self.restore_lock:
                if self.restores.pop(what, None) is None:
                    return
            log(f"restore: {what}")
            action()
        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self.restore_lock:
            self.restores[what] = (timer, action)
        timer.start()

    def restore_all(self):
        with self.restore_lock:
            items = list(self.restores.items())
            self.restores.clear()
        for what, (timer, action) in items:
            timer.cancel()
            log(f"restore: {what}")
            action()

    def inject(self, kind):
        rng = self.rng
        if kind in KAFKA_OUTAGES and self.kafka_outage():
            kind = "kafka_produce_error"
        if kind == "cdc_term" and self.kafka_outage():
            kind = "cdc_kill9"
        self.faults[kind] += 1
        if kind in ("cdc_kill9", "cdc_term"):
            self.stop_cdc(kind)
        elif kind in ("pg_stop_fast", "pg_stop_immediate"):
            mode = kind.rsplit("_", 1)[1]
            down = rng.uniform(0.5, 4.0)
            t = time.monotonic()
            try:
                self.pg.stop(mode)
            except Exception as e:  # pg_ctl's 120 s passed
                self.errors.append(f"pg_ctl stop -m {mode} failed: {e}")
                self.pg.stop("immediate")
            took = time.monotonic() - t
            log(f"fault {kind}: PostgreSQL stopped -m {mode} (in {took:.1f}s) for {down:.1f}s")
            if took > 5:
                self.slow_stops.append((kind, took))
            time.sleep(down)
            self.pg.start()
        elif kind == "pg_promote":
            self.promote()
        elif kind == "walsender_kill":
            row = self.slot_row()
            pid = row[2] if row else None
            log(f"fault {kind}: pg_terminate_backend({pid})")
            if pid:
                self.pg.sql("select pg_terminate_backend(%s)", (pid,))
        elif kind == "kafka_broker_down":
            b, d = rng.randint(1, 3), rng.uniform(2, 10)
            log(f"fault {kind}: broker {b} down for {d:.1f}s")
            self.kafka.down(b)
            self.restore_later(d, f"kafka broker {b} up", lambda: self.kafka.up(b))
        elif kind == "kafka_all_down":
            d = rng.uniform(2, 8)
            log(f"fault {kind}: every broker down for {d:.1f}s")
            self.kafka.all_down()
            self.restore_later(d, "kafka every broker up", self.kafka.all_up)
        elif kind == "kafka_produce_error":
            err, n = rng.choice(PRODUCE_ERRORS), rng.randint(1, 5)
            log(f"fault {kind}: next {n} produce requests fail with {err}")
            self.fault_details[f"{kind} {err}"] += 1
            self.kafka.push_errors(err, n)
        elif kind == "kafka_slow":
            d = rng.uniform(2, 6)
            log(f"fault {kind}: every broker answers {REQUEST_TIMEOUT_MS + 1000} ms late for {d:.1f}s")
            self.kafka.set_rtt(REQUEST_TIMEOUT_MS + 1000)
            self.restore_later(d, "kafka brokers answer at once", lambda: self.kafka.set_rtt(0))
        elif kind in ("nats_kill9", "nats_stop"):
            d = rng.uniform(0.5, 3.0) if kind == "nats_kill9" else rng.uniform(1.0, 4.0)
            log(f"fault {kind}: nats-server {'killed' if kind == 'nats_kill9' else 'stopped'} for {d:.1f}s")
            self.nats.kill() if kind == "nats_kill9" else self.nats.stop()
            self.restore_later(d, "nats-server started", self.nats.start)
        elif kind == "consumer_kill":
            c = rng.choice(self.consumers)
            was = self.sup.kill_one(c)
            log(f"fault {kind}: kill -9 {c.name} consumer run {c.runs}{'' if was else ' (was not running)'}")
        else:
            raise ValueError(kind)

    def promote(self):
        """Once cdc says a promotion is safe and the standby holds the slot's copy: the primary
        killed, the standby promoted, the old primary rebuilt as its standby (PgPair.failover)."""
        def ready():
            if not self.cdc.check():
                return True  # an exit nobody asked for: the main loop records it
            out = subprocess.run([CDC_BIN, "status", "-s", os.path.join(self.workdir, "status.sock"), "--json"],
                                 capture_output=True, text=True, timeout=30)
            try:
                st = json.loads(out.stdout)
            except ValueError:
                return False
            return (st["source"].get("failover") or {}).get("ready") and self.pg.synced(SLOT)
        t = time.monotonic()
        try:
            wait_for(ready, timeout=120, interval=0.5, what="cdc to say a promotion is safe (source.failover.ready) "
                     "and a persistent synchronized copy of the slot on the standby")
        except AssertionError as e:
            self.errors.append(f"pg_promote: {e}")
            return
        waited = time.monotonic() - t
        old = self.pg.primary.port
        cut = self.rng.uniform(0.5, 2.0) if self.rng.random() < 0.5 else 0.0
        promoted, rebuilt = self.pg.failover(cut)
        self.promotions.append((waited, cut, promoted, rebuilt))
        log(f"fault pg_promote: {f'standby cut off for {cut:.1f}s, ' if cut else ''}primary :{old} killed -m "
            f"immediate, standby :{self.pg.primary.port} promoted in {promoted:.1f}s (after {waited:.1f}s waiting "
            f"for a safe moment), old primary rebuilt as its standby in {rebuilt:.1f}s")

    def stop_cdc(self, kind):
        """kill -9 (or SIGTERM) of cdc, the slot sampled, the consumers stopped, Kafka's high
        watermarks read; cdc restarted and each socket subscription's spool read."""
        p = self.cdc.current
        run = len(self.cdc.runs)
        if kind == "cdc_term":
            try:
                rc = p.terminate(timeout=120)
            except AssertionError as e:  # still running after 120 s
                self.errors.append(f"cdc run {run} did not stop on SIGTERM: {e}")
                rc = p.kill()
            if rc != 0:
                self.errors.append(f"cdc run {run} exited {rc} on SIGTERM\n{p.describe(15)}")
        elif kind == "cdc_kill9":
            p.kill()
        else:  # crash: it exited by itself
            pass
        self.kill_record(kind, run)

    def kill_record(self, kind, run):
        k = len(self.kills) + 1
        try:
            wait_for(lambda: not self.slot_row()[0], timeout=60, interval=0.05, what="the walsender to let go")
        except AssertionError as e:
            self.errors.append(f"kill #{k}: {e}")
        confirmed = lsn_to_int(self.slot_row()[1])
        self.sup.pause()
        for s in ("s_all", "s_grp"):
            c = next(c for c in self.consumers if c.name == s)
            self.sinks[s].cuts[k] = c.lines()
        self.sinks["out_all"].cuts[k] = run
        self.sinks["k_all"].cuts[k] = self.watermarks()
        self.sinks["n_all"].cuts[k] = self.nats_last_seq()
        self.kills.append((k, confirmed))
        delay = self.rng.uniform(0, 2)
        log(f"fault {kind} #{k}: cdc run {run} stopped; slot confirmed_flush_lsn {lsn_text(confirmed)}; "
            f"restart in {delay:.1f}s")
        time.sleep(delay)
        self.start_cdc()
        for s in ("s_all", "s_grp"):
            recs = self.read_spool(s)
            if recs is None:
                self.errors.append(f"kill #{k}: could not read {s}'s spool after the restart")
            else:
                self.sinks[s].snap_recs[k] = recs
        self.sup.resume()

    def nats_last_seq(self):
        """The stream's last sequence, or None while the server is down."""
        try:
            return self.nats.admin("info", "CDC")["state"]["last_seq"]
        except (AssertionError, KeyError, TypeError):
            return None

    def watermarks(self):
        """{(topic, partition): high watermark}, or None if a broker does not answer."""
        from confluent_kafka import TopicPartition
        out = {}
        try:
            for t in self.topics:
                for part in range(PARTITIONS):
                    lo, hi = self.wm_consumer.get_watermark_offsets(TopicPartition(t, part), timeout=5, cached=False)
                    if hi < 0:
                        return None
                    out[((t, part))] = hi
        except Exception as e:
            log(f"kafka watermarks unavailable ({e}): this kill's Kafka check uses what arrived by the end")
            return None
        return out

    def read_spool(self, sub, timeout=60):
        """Every event of sub's spool from `earliest` up to the head at subscribe time, without
        acknowledging: [Rec] (None on failure: no connection, or no delivery, within timeout
        seconds; a slow but steady read goes on: one of 114,833 events on a machine shared with
        benchmarks had read 100,531 when a deadline for the whole read ran out)."""
        deadline = time.monotonic() + timeout
        s = None
        while s is None:
            try:
                s = Subscriber(self.sock, sub, consumer="harness-spool-read", start="earliest", heartbeat_ms=500)
            except Exception as e:
                if time.monotonic() > deadline:
                    log(f"spool read of {sub}: {e}")
                    return None
                time.sleep(0.1)
        recs = []
        with s:
            head = s.subscribed.head_offset
            last = s.subscribed.next_offset - 1
            while last < head:
                d = s.delivery(timeout)
                if d is None:
                    log(f"spool read of {sub}: nothing for {timeout}s at offset {last} of {head}")
                    return None
                for e in d:
                    r = from_proto(e, ("spool", e.offset))
                    if r.op in NOT_CHANGES:
                        self.sinks[sub].other_offsets.add(r.off)
                    else:
                        recs.append(r)
                    last = max(last, e.offset)
        return recs

    # --- the run ---

    def run(self):
        a = self.args
        self.sinks = {
            "k_all": SinkData("kafka k_all", "kafka", lambda c: True),
            "s_all": SinkData("socket s_all", "socket", lambda c: True),
            "s_grp": SinkData(f"socket s_grp (where grp<{GRP_BELOW})", "socket",
                              lambda c: c.op in ("insert", "update") and c.grp < GRP_BELOW),
            "out_all": SinkData("stdout out_all", "stdout", lambda c: True),
            "n_all": SinkData("nats n_all", "nats", lambda c: True),
        }
        self.setup()
        self.load.start()
        log(f"load running ({a.workers} workers); injecting faults for {a.duration}s")
        end = time.monotonic() + a.duration
        force_promotion = time.monotonic() + 0.6 * a.duration if "pg_promote" in a.faults else None
        next_fault = time.monotonic() + self.rng.uniform(1, 5)
        next_collect = time.monotonic() + 2
        while time.monotonic() < end:
            if not self.cdc.check():
                self.faults["cdc_exit (not injected)"] += 1
                self.kill_record("crash", len(self.cdc.runs))
            if force_promotion and time.monotonic() >= force_promotion and not self.faults["pg_promote"]:
                log("no promotion dealt yet: one now")
                self.inject("pg_promote")
                next_fault = time.monotonic() + self.rng.uniform(1, 5)
            elif time.monotonic() >= next_fault:
                self.inject(self.deal())
                next_fault = time.monotonic() + self.rng.uniform(1, 5)
            elif time.monotonic() >= next_collect:
                self.collect()  # as it goes: Kafka's raw messages are dropped once decoded
                next_collect = time.monotonic() + 2
            time.sleep(0.05)
        self.wind_down()

    def wind_down(self):
        log("faults over: every broker up, queued produce errors dropped; stopping the load")
        self.restore_all()
        if self.nats.proc.poll() is not None:
            self.nats.start()
        self.kafka.all_up()
        self.kafka.set_rtt(0)
        self.kafka.clear_errors()
        if not self.pg.running:
            self.pg.start()
        if not self.cdc.check():
            self.kill_record("crash", len(self.cdc.runs))
        self.load.stop()
        self.errors += self.load.errors
        self.reconcile()
        end_lsn = lsn_to_int(self.pg.current_wal_lsn())
        led = self.load.ledger
        log(f"load stopped: {len(led.committed)} transactions committed, {len(led.aborted)} aborted; "
            f"WAL at {lsn_text(end_lsn)}; draining")
        self.drain(end_lsn)
        p = self.cdc.current
        try:
            rc = p.terminate(timeout=120)
        except AssertionError as e:
            self.errors.append(f"final SIGTERM: {e}")
            rc = p.kill()
        if rc != 0:
            self.errors.append(f"final SIGTERM: cdc exited {rc}\n{p.describe(15)}")
        self.sup.stop()

    def reconcile(self):
        """The ledger as the final primary has it: a transaction whose COMMIT returned on a
        primary that died before its standby had it is not there (its token is not in
        fault_meta.txlog); it moves to lost_at_promotion, and an event of it is a phantom. Without
        promotions every committed transaction must be there."""
        led = self.load.ledger
        tokens = {r[0] for r in self.pg.sql("select token from fault_meta.txlog")}
        with led.lock:
            for tok in [tok for tok in led.committed if tok not in tokens]:
                self.lost_at_promotion[tok] = led.committed.pop(tok)
        if self.lost_at_promotion and not self.promotions:
            self.errors.append(f"{len(self.lost_at_promotion)} committed transactions are not on the server, "
                               "which was never promoted")
        if self.lost_at_promotion:
            log(f"{len(self.lost_at_promotion)} transactions committed on a primary that died before its standby "
                "had them: not on the promoted server, so no sink may deliver them")

    def collect(self):
        """Adds what arrived since the last call to the sinks' streams."""
        k = self.sinks["k_all"]
        msgs = self.reader.snapshot()
        # Decoded, the raw messages are not needed any more: dropped from the reader's list (the
        # reader only appends to it, so deleting what was read loses nothing), which keeps a long
        # run's memory to the Recs.
        del self.reader.messages[:len(msgs)]
        for m in msgs:
            if m.is_tombstone:
                self.errors.append(f"unexpected tombstone at {m.where()}")
                continue
            tp = (m.topic, m.partition)
            st = k.streams.setdefault(tp, [])
            if st and st[-1].where[1] >= m.offset:
                self.errors.append(f"the Kafka reader went back: {m.where()} after offset {st[-1].where[1]}")
            k.add(tp, from_proto(m.event, (tp, m.offset)))
            if self.args.exactly_once:
                self.kafka_times[(m.event.commit_lsn, m.event.tx_index)].append(m.timestamp)
        out = self.sinks["out_all"]
        while len(self.stdout_files) < len(self.cdc.runs):
            self.stdout_files.append(LineFile(self.cdc.stdout_path(len(self.stdout_files) + 1)))
        for n, lf in enumerate(self.stdout_files, 1):
            out.streams.setdefault(n, [])
            check = self.stdout_checks.setdefault(n, SchemaCheck(strict={"out_all"}))  # each run announces
            for line_no, line in lf.read_new():
                try:
                    e = json.loads(line)
                except ValueError as err:
                    self.errors.append(f"cdc run {n} stdout line {line_no} is not JSON ({err}): {line[:200]!r}")
                    continue
                try:
                    check.feed(e)
                except AssertionError as err:
                    self.errors.append(f"cdc run {n} stdout line {line_no}: {err}")
                out.add(n, from_json(e, (n, line_no)))
        for c in self.consumers:
            c.collect(self.sinks[c.name])
        self.collect_nats()

    def collect_nats(self):
        """The stream's messages after the last one collected (none while the server is down)."""
        if self.nats.proc.poll() is not None:
            return
        try:
            msgs = read_stream(self.nats, "CDC", self.nats_seq + 1)
        except AssertionError:  # the server went down meanwhile, or the stream is not there yet
            return
        n = self.sinks["n_all"]
        for m in msgs:
            e = self.pb.Event()
            e.ParseFromString(m.data)
            n.add(0, from_proto(e, (0, m.seq)))
            self.nats_seq = m.seq

    def drain(self, end_lsn):
        """Waits until every sink has every committed change it wants and the slot passed end_lsn."""
        from verify import change_ident, rec_ident
        changes = self.load.ledger.changes()
        want = {name: {change_ident(c) for _, c in changes if s.wants(c)} for name, s in self.sinks.items()}
        deadline = time.monotonic() + self.args.drain_timeout
        got = {name: set() for name in self.sinks}
        counted = {name: {} for name in self.sinks}  # stream id -> records already in got
        next_note = time.monotonic() + 5
        while True:
            if not self.cdc.check():
                self.kill_record("crash", len(self.cdc.runs))
            self.collect()
            missing = {}
            for name, s in self.sinks.items():
                for sid, recs in s.streams.items():
                    n = counted[name].get(sid, 0)
                    got[name].update(rec_ident(r) for r in recs[n:])
                    counted[name][sid] = len(recs)
                missing[name] = len(want[name] - got[name])
            row = self.slot_row()
            confirmed = lsn_to_int(row[1]) if row and row[1] else 0
            if not any(missing.values()) and confirmed >= end_lsn:
                log(f"drained: every sink has every change; slot at {lsn_text(confirmed)}")
                return
            if time.monotonic() >= next_note:
                log(f"draining: changes missing per sink {missing}; slot at {lsn_text(confirmed)}")
                next_note = time.monotonic() + 5
            if time.monotonic() > deadline:
                self.errors.append(f"not drained after {self.args.drain_timeout}s: changes missing per sink "
                                   f"{missing}; slot at {lsn_text(confirmed)}, WAL end {lsn_text(end_lsn)}")
                if missing["k_all"]:
                    self.diagnose_kafka(want["k_all"] - got["k_all"])
                return
            time.sleep(1)

    def diagnose_kafka(self, missing):
        """Reads every topic again with a fresh consumer, up to the high watermarks, to tell a
        message the broker does not have from one the harness's reader missed, and shows the
        neighbours of each missing change in the harness's reader: the key's other versions
        and the rest of its transaction."""
        from verify import rec_ident
        wm = self.watermarks() or {}
        fresh = KafkaReader(self.kafka.bootstrap, self.topics, self.pb, group=False)
        try:
            fresh.wait(sum(wm.values()), timeout=120)
        except AssertionError as e:
            self.errors.append(f"fresh Kafka read: {e}")
        msgs = fresh.snapshot()
        fresh.close()
        found = {rec_ident(from_proto(m.event)) for m in msgs if not m.is_tombstone} & missing
        self.errors.append(f"a fresh consumer read {len(msgs)} messages (high watermarks add up to "
                           f"{sum(wm.values())}): {len(found)} of the {len(missing)} changes missing are there"
                           + (" (the harness's reader missed them)" if found else " (not in the topics: lost)"))
        led = self.load.ledger
        recs = [r for st in self.sinks["k_all"].streams.values() for r in st]
        for ident in sorted(missing, key=str)[:5]:
            xid = next((t.xid for t in led.committed.values()
                        if any((c.table, c.id, c.op, None if c.op == "delete" else c.ver) == ident for c in t.changes)), None)
            same_key = [(r.where, r.op, r.ver) for r in recs if (r.table, r.id) == ident[:2]]
            same_txn = sorted({(r.where, r.ti, r.table, r.id) for r in recs if r.xid == xid})
            self.errors.append(f"  missing {ident} (xid {xid}): the key's messages {same_key}; its transaction's "
                               f"messages (partition, offset, tx_index): {same_txn[:40]}")

    def cleanup(self):
        for what in (lambda: self.sup and self.sup.stop(), lambda: self.cdc and self.cdc.close(),
                     lambda: self.reader and self.reader.close(), lambda: self.wm_consumer and self.wm_consumer.close(),
                     lambda: self.kafka and self.kafka.close(), lambda: self.nats and self.nats.close(),
                     lambda: self.pg and self.pg.cleanup()):
            try:
                what()
            except Exception as e:
                print(f"cleanup: {e}", file=sys.stderr)
        for c in getattr(self, "consumers", []):
            c.err.close()
        if self.args.keep:
            print(f"work directory kept: {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- the report ---

    def report(self, started):
        self.collect()
        led = self.load.ledger
        if self.args.keep:  # what the Kafka reader read, partition by partition, for a post-mortem
            with open(os.path.join(self.workdir, "k_all.jsonl"), "w") as f:
                for tp, recs in sorted(self.sinks["k_all"].streams.items()):
                    for r in recs:
                        f.write(json.dumps([tp[0], tp[1], r.where[1]] + list(r[:-2]), separators=(",", ":")) + "\n")
        self.sinks["k_all"].failed_batches = failed_batches(p.stderr() for p in self.cdc.runs)
        if self.args.record:  # before the checks, which leave out what the mock should have refused
            recording.save(self.args.record, led.committed, led.aborted, self.lost_at_promotion, self.sinks,
                           self.kills, {"s_grp": f"grp<{GRP_BELOW}"}, self.kafka_times,
                           exactly_once.boundaries(p.stderr() for p in self.cdc.runs) if self.args.exactly_once else None)
        results, errors = verify(led.committed, led.aborted, list(self.sinks.values()), self.kills,
                                 lost=self.lost_at_promotion)
        errors = self.errors + errors
        a = self.args
        print()
        print(f"fault-injection results: seed {a.seed}, duration {a.duration}s, PostgreSQL {self.pg.version}, "
              f"run time {time.monotonic() - started:.0f}s")
        print()
        print("faults injected:")
        for kind, n in sorted(self.faults.items()):
            print(f"  {kind:<28} {n:>5}")
        for kind, n in sorted(self.fault_details.items()):
            print(f"    {kind:<26} {n:>5}")
        print(f"  {'total':<28} {sum(self.faults.values()):>5}")
        nchanges = sum(len(t.changes) for t in led.committed.values())
        abort_changes = sum(len(t.changes) for t in led.aborted.values())
        rb = sum(len(t.rolled_back) for t in led.committed.values()) + \
            sum(len(t.rolled_back) for t in led.aborted.values())
        print()
        print(f"load: {nchanges} changes committed in {len(led.committed)} transactions "
              f"({', '.join(f'{k} {v}' for k, v in sorted(led.kinds.items()))}); "
              f"{len(led.aborted)} transactions aborted with {abort_changes} changes "
              f"({', '.join(f'{k} {v}' for k, v in sorted(led.abort_kinds.items()))}); "
              f"{rb} changes in rolled-back savepoints; in-doubt commits resolved: "
              f"{dict(led.in_doubt) or 'none'}")
        print()
        cols = ["sink", "expected", "delivered", "unique", "lost", "duplicated", "out of order", "unexpected",
                "slot checks", "slot violations"]
        rows = [[r.name, r.expected, r.delivered, r.unique, r.lost, r.duplicated, r.out_of_order,
                 sum(r.unexpected.values()), r.slot_checked, r.slot] for r in results]
        widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cols, widths))))
        for row in rows:
            print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        print()
        if a.standby:
            lost_changes = sum(len(t.changes) for t in self.lost_at_promotion.values())
            print(f"promotions: {len(self.promotions)} (PostgreSQL {self.pg.version} primary and standby, failover slot); "
                  f"transactions committed on a primary that died before its standby had them: "
                  f"{len(self.lost_at_promotion)} ({lost_changes} changes; their events would be phantoms)")
            for waited, cut, promoted, rebuilt in self.promotions:
                print(f"  waited {waited:.1f}s for a safe moment, {f'standby cut off {cut:.1f}s, ' if cut else ''}"
                      f"promoted in {promoted:.1f}s, old primary rebuilt as standby in {rebuilt:.1f}s")
        print(f"cdc runs: {len(self.cdc.runs)}; kills checked against the slot: {len(self.kills)}; "
              f"exits nobody asked for: {len(self.cdc.unexpected_exits)}; harness peak RSS {peak_rss_mib()} MiB")
        if self.reader.errors:
            print(f"  expected: the harness's Kafka reader met {len(self.reader.errors)} connection errors "
                  f"while brokers were down on purpose (librdkafka's log of them is off), the last: "
                  f"{self.reader.errors[-1]}")
        for r in results:
            if r.unexpected:
                print(f"  {r.name}: unexpected by kind {dict(r.unexpected)}")
            if r.refused:
                print(f"  {r.name}: {r.refused} events left out that the mock broker appended after a batch that "
                      f"failed for good (a real broker refuses them: verify.py 'refused')")
            if getattr(r, "spool_duplicated", 0) or getattr(r, "gaps", 0):
                print(f"  {r.name}: changes spooled at two offsets {r.spool_duplicated}, offsets never read {r.gaps}")
            for what, ex in r.examples.items():
                for e in ex:
                    print(f"  {r.name} {what}: {e}")
        for kind, took in self.slow_stops:
            print(f"  note: {kind} took {took:.1f}s: the walsender waits at shutdown until cdc confirms "
                  f"all it was sent, and cdc waits for its sinks")
        for run, rc, text in self.cdc.unexpected_exits:
            errors.append(f"cdc run {run} exited by itself with {rc}:\n{text}")
        eo = None
        if a.exactly_once:
            bounds = exactly_once.boundaries(p.stderr() for p in self.cdc.runs)
            eo = exactly_once.check(self.kafka_times, bounds)
            repeated, copies, violations, examples = eo
            print(f"exactly once: k_all read committed saw {repeated} changes more than once ({copies} copies); "
                  f"{copies - violations} sent again only after a boundary below their commit LSN (a position "
                  f"read back or a Kafka transaction aborted: {len(bounds)} in the logs), which a real broker "
                  f"hides; {violations} sent again although Kafka held them")
            for e in examples:
                print(f"  k_all exactly once: {e}")
        for e in errors:
            print(f"ERROR: {e}")
        checks = {
            "no committed change lost": all(not r.lost for r in results),
            "no aborted, unknown or filtered-out change delivered, no phantom": all(not r.unexpected for r in results),
            "per-key order never goes backwards": all(not r.out_of_order for r in results),
            "slot never passed an undelivered change": all(not r.slot for r in results),
            "socket offsets dense": all(not r.gaps for r in results),
            "NATS: no copy read (every copy within JetStream's duplicate window dropped)":
                all(not r.duplicated for r in results if r.name.startswith("nats")),
            "cdc and the harness ran without errors": not errors,
        }
        if eo:
            checks["exactly once: Kafka never sent again a change it held"] = eo[2] == 0
            checks["exactly once: no socket change spooled at two offsets"] = \
                all(not getattr(r, "spool_duplicated", 0) for r in results)
        print()
        for name, ok in checks.items():
            print(f"  {'PASS' if ok else 'FAIL'}  {name}")
        failed = sum(not ok for ok in checks.values())
        print(f"seed {a.seed}: rerun with  python3 tests/fault/harness.py --seed {a.seed} --duration {a.duration}"
              f"{' --exactly-once' if a.exactly_once else ''}{' --standby' if a.standby else ''}"
              f"{f' --pg-version {a.pg_version}' if a.pg_version else ''}"
              f"{'' if a.keep or not failed else '  (--keep keeps cdc logs and what every sink received)'}")
        print(f"fault: {len(checks) - failed} passed, {failed} failed")
        return 1 if failed else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fault injection against cdc: nothing committed may be lost.")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--duration", type=float, default=80, help="seconds of load and faults (default 80)")
    p.add_argument("--workers", type=int, default=3, help="load generator connections (default 3)")
    p.add_argument("--pause", type=float, default=0.03, help="mean pause of a worker between transactions (s)")
    p.add_argument("--large-rows", default="300,900", help="rows of a large transaction: MIN,MAX")
    p.add_argument("--faults", default=None,
                   help="kinds to inject (comma-separated; default all, pg_promote only with --standby)")
    p.add_argument("--standby", action="store_true",
                   help="a PostgreSQL 17 primary and standby with a failover slot; adds the pg_promote fault")
    p.add_argument("--drain-timeout", type=float, default=180, help="seconds to wait for the sinks at the end")
    p.add_argument("--keep", action="store_true",
                   help="keep the work directory (and write what the Kafka reader read into k_all.jsonl)")
    p.add_argument("--record", default=None,
                   help="write the run's recording (ledger, kills, what each sink delivered) to this file, "
                        "gzipped JSON (tests/fault/recording.py)")
    p.add_argument("--exactly-once", action="store_true",
                   help="kafka.exactly_once: true, and check it (tests/fault/exactly_once.py)")
    p.add_argument("--kafka-debug", default="", help="librdkafka debug contexts for cdc's producer (eos,msg,...)")
    p.add_argument("--pg-version", type=int, default=os.environ.get("CDC_PG_VERSION"),
                   help="PostgreSQL major version (tests/pg.py: 14 to 18; default $CDC_PG_VERSION, else "
                        "Debian's newest)")
    a = p.parse_args(argv)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 1 << 31)
    a.large_rows = tuple(int(x) for x in a.large_rows.split(","))
    if a.faults is None:
        a.faults = ",".join(k for k in FAULTS if a.standby or k not in NEEDS_STANDBY)
    a.faults = [f for f in a.faults.split(",") if f]
    unknown = set(a.faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULTS)}")
    if not a.standby and set(a.faults) & NEEDS_STANDBY:
        p.error(f"{', '.join(sorted(set(a.faults) & NEEDS_STANDBY))} needs --standby")
    if a.standby and a.pg_version and int(a.pg_version) < 17:
        p.error(f"--standby needs PostgreSQL 17 or later (failover slots), not {a.pg_version}")
    return a


def main(argv=None):
    a = parse_args(argv)
    print(f"fault harness: seed {a.seed}, duration {a.duration}s, faults {','.join(a.faults)}"
          f"{', exactly once' if a.exactly_once else ''}{', primary and standby' if a.standby else ''}", flush=True)
    started = time.monotonic()
    h = Harness(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        h.run()
        return h.report(started)
    except BaseException:
        if h.cdc and h.cdc.current:
            print(h.cdc.current.describe(30), file=sys.stderr)
        print(f"fault harness: seed {a.seed} (the run failed before its report)", file=sys.stderr)
        raise
    finally:
        h.cleanup()


if __name__ == "__main__":
    sys.exit(main())
