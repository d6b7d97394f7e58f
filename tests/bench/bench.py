"""bench.py (`make bench`): how fast cdc drains a slot compared with pg_recvlogical.

Two backlogs, each created before any consumer runs:
  a) one transaction inserting 1,000,000 rows (the server streams it: larger than
     logical_decoding_work_mem, default 64MB);
  b) 100,000 single-row transactions (a DO block that COMMITs after every row).
Before each backlog is written, pgoutput slots are created at the same point, one per consumer,
connection and run; afterwards they are drained by
  - server: the server's own decoding with no client, the yardstick: psql runs
    `select count(*) from pg_logical_slot_get_binary_changes(slot, endpos, NULL, <the options
    below>)` (work_mem 1GB for that session, so that the function's tuplestore stays in memory
    rather than spilling to a temp file: what is left is the walsender's decoding less its
    sending, one send() per message, so a bound no client reaches);
  - pg_recvlogical (output to /dev/null),
  - `cdc run --endpos` with a stdout subscription on the table (stdout to /dev/null),
  - `cdc run --endpos` with a Kafka subscription into the librdkafka mock cluster, in each record
    format: protobuf (the default; also with kafka.exactly_once, and without cdc's headers), json,
    debezium and avro (these three over TCP only; avro's schemas in tests/registry_double.py, run
    as a process of its own),
  - `cdc run --endpos` with a NATS subscription into Debian's nats-server with JetStream (a stream
    of its own per run, created by cdc, checked to hold every row, deleted after; over TCP only;
    also without cdc's headers),
  - `cdc run` with a socket subscription (spooled under state_dir) and, started as soon as the
    subscriber socket exists, `cdc tail --count ROWS` (stdout to /dev/null) acking every event;
    timed from cdc's start until tail exits with every event, then cdc gets SIGTERM,
all with the pgoutput options cdc uses on this server (proto_version 3, messages, streaming,
two_phase on PostgreSQL 15; --pg-version picks another server of tests/pg.py; the SQL interface
takes the same options and streams a large transaction as a walsender does). Every consumer drains
over two connections to the server: its Unix socket (host=<socket directory>) and loopback TCP
(host=127.0.0.1). The consumers run one after the other, never together (the machine has two
cores). Each is timed from start to exit; peak RSS is cdc's (pg_recvlogical's), never tail's.

Each consumer drains the backlog --repeat times (default 3) over each connection, each time from a
slot of its own, the consumers taking turns (run 1 of every consumer and connection, then run 2,
...); the tables show the median run, and the ratios of every path to the server's decoding and
to pg_recvlogical over the same connection, from the same runs.

Then latency at a steady 5,000 single-row transactions/s (pgbench --rate, synchronous commit):
commit time to Kafka delivery report (measured by cdc itself), and commit time to a Python consumer
of the subscriber socket (cdc_client via tests/subscriber_helpers.py, acking each Delivery) reading the event,
measured by that consumer from the event's commit_time (same machine, same clock).

Besides, on the same backlogs and in turn with the others: wal2json (format-version 2) through
pg_recvlogical, from a wal2json slot made at the same point (over TCP only; Debian's PostgreSQL 15
only: the other versions' servers have no wal2json).

Sections (--only, comma-separated; default all; "peers" = drain,trigger and "growth" =
subscriptions,consumers,tables):
  drain          the backlogs above;
  latency        the two latency runs above;
  trigger        the seeds' design (seeds 000 and 002) rebuilt on PostgreSQL: a trigger writing
                 one event_log row per subscription per change, drained by 1 and 4 Python
                 workers claiming with FOR UPDATE SKIP LOCKED (1 and 100 rows per claim); the
                 WAL each change costs with and without the trigger (pg_current_wal_lsn), the WAL
                 the workers' deletes cost, and cdc with 1 and 4 shared `cdc tail` consumers on
                 the same workload;
  subscriptions  1, 10, 100, 1,000 stdout subscriptions on one table: every second one with a
                 where that never matches; all but one with it; all but one on other tables;
  consumers      1, 10, 100 shared `cdc tail` consumers on one socket subscription;
  tables         1, 10, 100, 1,000 tables in the publication, one busy and the rest quiet.
The growth and trigger sections run each point once.

Writes build/bench/results.md (with the machine: nproc, memory, CPU model, PostgreSQL version,
date), results.json, latency_socket_us.txt (the socket consumer's samples) and the charts
throughput.png, latency_cdf.png and growth.png (report.py, matplotlib).

Options: --scale 0.1 for a quick run (every workload), --only SECTIONS, --repeat N, --out DIR,
--note TEXT (a line in results.md), --keep to leave the server's temp dir (printed) in place.
"""

import argparse
import io
import json
import math
import re
import select
import shlex
import shutil
import signal
from statistics import median
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import psycopg2.errors  # noqa: E402
from pg import TempPostgres  # noqa: E402
from nats_fixtures import NatsServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CDC_BIN = os.environ.get("CDC_BIN", os.path.join(ROOT, "build", "cdc"))
KAFKA_MOCK_BIN = os.environ.get("KAFKA_MOCK_BIN", os.path.join(ROOT, "build", "tests", "kafka_mock"))
GNU_TIME = "/usr/bin/time"  # Debian package "time" (deploy/deps.sh bench)
T0 = time.monotonic()


# The bench counts rows (as pg_recvlogical does): its subscriptions leave out schema and DDL events.
ROW_OPS = "insert, update, delete, truncate"


def progress(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def pgoutput_options(server_version):
    """The START_REPLICATION options cdc sends to this server version (cdc/source/source.c)."""
    if server_version >= 160000:
        return {"proto_version": "4", "messages": "true", "streaming": "parallel",
                "two_phase": "on"}
    if server_version >= 150000:
        return {"proto_version": "3", "messages": "true", "streaming": "on", "two_phase": "on"}
    if server_version >= 140000:
        return {"proto_version": "2", "messages": "true", "streaming": "on"}
    return {"proto_version": "1"}


# GNU time's report of the program it ran: peak RSS (KiB), then user and system CPU seconds (all
# its threads). Written to "<stderr path>.rss".
TIME_FORMAT = "%M %U %S"


def time_report(path):
    """(peak RSS in MiB, CPU seconds) from GNU time's report at path."""
    with open(path) as f:
        # GNU time writes "Command exited with non-zero status N" before the figures on failure.
        kib, user, system = f.read().split()[-3:]
    return int(kib) / 1024.0, float(user) + float(system)


def timed_run(args, stdout, stderr_path):
    """Runs args to completion; returns (exit code, seconds, peak RSS in MiB, CPU seconds).

    The peak RSS and CPU come from GNU time (%M, %U + %S), not from os.wait4(): Linux carries a
    process's RSS high-water mark across execve(), so a direct child of this Python process would
    report at least Python's own RSS. GNU time is small, so what it measures is the program's own."""
    rss_path = stderr_path + ".rss"
    with open(stderr_path, "wb") as err:
        start = time.monotonic()
        p = subprocess.Popen([GNU_TIME, "-f", TIME_FORMAT, "-o", rss_path] + args, stdout=stdout,
                             stderr=err, stdin=subprocess.DEVNULL)
        rc = p.wait()
        elapsed = time.monotonic() - start
    return (rc, elapsed) + time_report(rss_path)


class ServerCPU:
    """The CPU the server spends on one drain, from the postmaster's reaped children's CPU
    (cutime + cstime in /proc/<postmaster>/stat) before and after: it grows when a backend exits
    and the postmaster waits for it, so every process the drain started must be gone first.
    A thread samples the postmaster's children meanwhile (every 50 ms), so that the CPU of those
    that are not walsenders (cdc's second, non-replication connection; psql's backend for the
    server's own decoding) is told apart: walsender = reaped - others."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pg):
        with open(os.path.join(pg.datadir, "postmaster.pid")) as f:
            self.pid = int(f.readline())

    def _reaped(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / self.TICK  # cutime, cstime

    def _children(self):
        with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
            return set(f.read().split())

    @staticmethod
    def _sample(child):
        """(walsender?, CPU seconds) of a child, or None once it is gone (or a zombie)."""
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        if not cmd:  # a zombie: its last sample stands
            return None
        return cmd.startswith(b"postgres: walsender"), (int(fields[11]) + int(fields[12])) / ServerCPU.TICK

    def start(self):
        import threading
        self.before = self._children()
        self.seen = {}
        self.cpu0 = self._reaped()
        self.running = True

        def sample():
            while self.running:
                try:
                    kids = self._children() - self.before
                except OSError:
                    return
                for k in kids:
                    s = self._sample(k)
                    if s:
                        self.seen[k] = s
                time.sleep(0.05)
        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()

    def stop(self, timeout=30):
        """(walsender CPU seconds, other backends' CPU seconds) once every process the drain
        started has exited and been reaped."""
        deadline = time.monotonic() + timeout
        while self._children() - self.before:
            if time.monotonic() > deadline:
                sys.exit(f"bench: the server's processes {sorted(self._children() - self.before)} "
                         f"did not exit within {timeout}s of the drain's end")
            time.sleep(0.01)
        self.running = False
        self.thread.join()
        total = self._reaped() - self.cpu0
        others = sum(cpu for walsender, cpu in self.seen.values() if not walsender)
        return max(0.0, total - others), others


def child_pid(pid):
    """The pid of pid's only child (the program GNU time runs)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN
        kids = []
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/stat") as f:
                    if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(d)
            except (OSError, IndexError, ValueError):
                pass
    if len(kids) != 1:
        raise RuntimeError(f"process {pid} has children {kids}, not one")
    return int(kids[0])


def stop_cdc(p, err_path, timeout=120):
    """SIGTERM to the cdc that GNU time process p runs; exits the bench unless cdc exits 0.
    Returns (cdc's peak RSS in MiB, its CPU seconds)."""
    os.kill(child_pid(p.pid), signal.SIGTERM)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit(f"bench: cdc did not exit within {timeout}s of SIGTERM:\n{tail(err_path)}")
    if rc != 0:
        sys.exit(f"bench: cdc exited {rc} on SIGTERM:\n{tail(err_path)}")
    return time_report(err_path + ".rss")


def wait_socket(path, p, err_path, since, timeout=60):
    """Waits for the Unix socket path to appear while process p runs."""
    while not os.path.exists(path):
        if p.poll() is not None:
            sys.exit(f"bench: cdc exited {p.returncode} before making {path}:\n{tail(err_path)}")
        if time.monotonic() - since > timeout:
            sys.exit(f"bench: no {path} after {timeout}s:\n{tail(err_path)}")
        time.sleep(0.002)


def socket_run(cdc_cmd, sock, rows, err_path):
    """Starts cdc_cmd (under GNU time) and, once sock exists, `cdc tail --count rows` of the same
    binary; returns (seconds from cdc's start until tail exits with every event, cdc's peak RSS in
    MiB, cdc's CPU seconds) after stopping cdc with SIGTERM."""
    tail_err = err_path + ".tail"
    with open(err_path, "wb") as err:
        start = time.monotonic()
        cdc = subprocess.Popen([GNU_TIME, "-f", TIME_FORMAT, "-o", err_path + ".rss"] + cdc_cmd,
                               stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    timeout = 120
    cmd = [cdc_cmd[0], "tail", "-s", sock, "bench", "--count", str(rows), "--timeout", str(timeout)]
    for attempt in range(100):
        wait_socket(sock, cdc, err_path, start)
        with open(tail_err, "wb") as terr:
            tail_start = time.monotonic()
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=terr,
                                stdin=subprocess.DEVNULL).returncode
        if rc == 0:
            break
        # bind() makes the file before listen(): a connect() in between is refused. Try again.
        with open(tail_err, errors="replace") as f:
            refused = "cannot connect" in f.read()
        if not refused or cdc.poll() is not None:
            break
        time.sleep(0.005)
    secs = time.monotonic() - start
    if rc != 0:
        cdc.kill()
        sys.exit(f"bench: cdc tail exited {rc}:\n{tail(tail_err)}\ncdc:\n{tail(err_path)}")
    # tail also exits 0 after --timeout seconds without an event, and only then takes that long.
    if time.monotonic() - tail_start >= timeout:
        cdc.kill()
        sys.exit(f"bench: cdc tail timed out before {rows} events:\n{tail(err_path)}")
    return (secs,) + stop_cdc(cdc, err_path)


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes, the terminating NUL included
SHORT_DIRS = []  # socket dirs made outside the work dir, removed with it


def socket_dir(state_dir):
    """Where a run's sockets go: its state dir, or a short temp dir when a socket path there would
    be too long for a Unix socket (a long $TMPDIR)."""
    if len(os.path.join(state_dir, "events.sock").encode()) <= SUN_PATH_MAX:
        return state_dir
    SHORT_DIRS.append(tempfile.mkdtemp(prefix="cdcb-", dir="/tmp"))
    return SHORT_DIRS[-1]


def write_config(path, pg, slot, pub, table, state_dir, sink="stdout", kafka=None, exactly_once=False,
                 sub=None, dsn=None, nats=None, registry=None):
    """A cdc config with one subscription bench on table, to sink (stdout, kafka at bootstrap
    kafka, with kafka.exactly_once if asked and the subscription's keys sub, e.g. a record format
    (format avro: its schemas in the registry at URL registry), nats with nats = (server url, stream
    name), or socket), connecting with dsn (pg.dsn, loopback TCP, unless given). Returns the
    subscriber socket's path."""
    sub = sub or {}
    socks = socket_dir(state_dir)
    events_sock = os.path.join(socks, "events.sock")
    with open(path, "w") as f:
        f.write(
            "source:\n"
            f'  dsn: "{dsn or pg.dsn}"\n'
            f"  slot: {slot}\n"
            f"  publication: {pub}\n"
            "  create: false\n"
            f"state_dir: {state_dir}\n"
            "status:\n"
            f"  socket: {os.path.join(socks, 'status.sock')}\n"
            "subscribers:\n"
            f"  socket: {events_sock}\n"
            + (f'kafka:\n  brokers: "{kafka}"\n' if kafka else "")
            + ("  exactly_once: true\n" if exactly_once else "")
            + (f'  schema_registry: {{url: "{registry}"}}\n' if sub.get("format") == "avro" else "")
            + (f'nats:\n  servers: "{nats[0]}"\n  stream: {nats[1]}\n  create: true\n' if nats else "")
            + "subscriptions:\n"
            "  - name: bench\n"
            f'    tables: ["public.{table}"]\n'
            f"    operations: [{ROW_OPS}]\n"
            f"    sink: {sink}\n"
            + "".join(f"    {k}: {v}\n" for k, v in sub.items())
            + (f'    subject: "{nats[1]}.{{table}}"\n' if nats else ""))
    return events_sock


def start_kafka_mock(work):
    """The librdkafka mock cluster program (make builds it); returns (process, bootstrap)."""
    p = subprocess.Popen([KAFKA_MOCK_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=open(os.path.join(work, "kafka_mock.stderr"), "wb"), text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("bootstrap="):
        sys.exit(f"bench: {KAFKA_MOCK_BIN} did not start: {line!r}")
    return p, line.split("=", 1)[1]


# Created before any run, as a deployment's topics are: the mock creates a topic on its first use,
# which held the first run of a backlog up to a second.
BENCH_TOPICS = ("cdc.public.bench_a", "cdc.public.bench_b", "cdc.positions")


def create_topics(mock, names):
    """Creates each topic in the mock cluster (its command channel: one line in, one answer out)."""
    for name in names:
        mock.stdin.write(f"topic {name}\n")
        mock.stdin.flush()
        answer = mock.stdout.readline().strip()
        if answer != "ok":
            sys.exit(f"bench: kafka_mock could not create {name}: {answer!r}")


def slot_backlog(pg, slot, endpos, pub, plugin="pgoutput"):
    """Messages left in slot up to endpos, once the consumer's walsender has let go of it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if plugin == "wal2json":
                return pg.sql("select count(*) from pg_logical_slot_peek_changes("
                              "%s, %s, null, 'format-version', '2')", (slot, endpos))[0][0]
            return pg.sql("select count(*) from pg_logical_slot_peek_binary_changes("
                          "%s, %s, null, 'proto_version', '1', 'publication_names', %s)",
                          (slot, endpos, pub))[0][0]
        except psycopg2.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def has_wal2json(pg):
    """Whether the server has the wal2json plugin: Debian's PostgreSQL 15 (postgresql-15-wal2json),
    not the npm packages of the other versions."""
    try:
        pg.sql("select pg_create_logical_replication_slot('bench_wal2json_probe', 'wal2json')")
    except psycopg2.Error:
        return False
    pg.sql("select pg_drop_replication_slot('bench_wal2json_probe')")
    return True


# The paths' subscription keys other than the default's: Kafka's record formats, and Kafka and NATS
# without cdc's headers.
SUB_KEYS = {"cdc_kafka_json": {"format": "json"}, "cdc_kafka_debezium": {"format": "debezium"},
            "cdc_kafka_avro": {"format": "avro"}, "cdc_kafka_bare": {"cdc_headers": "false"},
            "cdc_nats_bare": {"cdc_headers": "false"}}


def start_registry(work):
    """tests/registry_double.py as a process of its own (format avro's schemas); (process, url)."""
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "registry_double.py"), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(work, "registry.stderr"), "wb"),
                         text=True)
    url = p.stdout.readline().strip()
    if not url.startswith("http://"):
        sys.exit(f"bench: the schema registry double did not start: {url!r}")
    return p, url


def plugin_of(consumer):
    return "wal2json" if consumer == "wal2json" else "pgoutput"


# The cdc paths every backlog is drained through over both connections.
CDC_PATHS = ("cdc_stdout", "cdc_kafka", "cdc_kafka_eo", "cdc_socket")


def base_of(consumer):
    """cdc_kafka -> base_kafka: the same path through the --baseline binary."""
    return "base_" + consumer[len("cdc_"):]


def path_of(consumer):
    """base_kafka -> cdc_kafka: the path a baseline consumer runs (others are their own)."""
    return "cdc_" + consumer[len("base_"):] if consumer.startswith("base_") else consumer


# ... and the drain section's others. With --baseline, the older binary runs each of them too, as
# base_<path>.
DRAIN_PATHS = CDC_PATHS + ("cdc_kafka_bare", "cdc_kafka_json", "cdc_kafka_debezium", "cdc_kafka_avro", "cdc_nats",
                            "cdc_nats_bare")


def drain_consumers(pg, baseline, paths=None):
    """Every consumer of the drain section, in the order they take turns: the yardsticks, then the
    cdc paths (only those named in paths, if given)."""
    consumers = ("server", "pg_recvlogical", "wal2json") + tuple(c for c in DRAIN_PATHS
                                                                 if not paths or c in paths)
    if baseline:
        consumers += tuple(base_of(c) for c in DRAIN_PATHS if not paths or c in paths)
    if not has_wal2json(pg):
        progress(f"no wal2json on PostgreSQL {pg.version} (Debian's 15 has it): drained without it")
        consumers = tuple(c for c in consumers if c != "wal2json")
    return consumers


def drain_backlogs(args, pg, work, kafka, nats, registry):
    """Creates both backlogs, then drains each with every consumer, --repeat times, taking turns.
    Each drain records its wall time, the consumer's peak RSS and CPU (GNU time: user + system of
    all its threads) and the server's CPU for it (ServerCPU: the walsender's, and the other
    backends' the consumer had)."""
    big_rows = int(1_000_000 * args.scale)
    small_txns = int(100_000 * args.scale)
    opts = pgoutput_options(int(pg.sql("show server_version_num")[0][0]))
    recvlogical = os.path.join(pg.client_bindir, "pg_recvlogical")
    progress("pgoutput options " + " ".join(f"{k}={v}" for k, v in opts.items()))
    backlogs = [
        ("a", "1 txn x %d rows" % big_rows, big_rows,
         f"insert into bench_a (id, name, amount, created) "
         f"select g, 'customer ' || g, (g % 100000) / 100.0, now() "
         f"from generate_series(1, {big_rows}) g"),
        ("b", "%d txns x 1 row" % small_txns, small_txns,
         f"do $$ begin for i in 1..{small_txns} loop "
         f"insert into bench_b (id, name, amount, created) "
         f"values (i, 'customer ' || i, (i % 100000) / 100.0, now()); commit; "
         f"end loop; end $$"),
    ]
    consumers = drain_consumers(pg, args.baseline, args.paths)
    # Compared on one connection: another plugin, other record formats.
    tcp_only = ("wal2json", "cdc_kafka_json", "cdc_kafka_debezium", "cdc_kafka_avro", "cdc_nats", "cdc_nats_bare")
    # What the server pays to decode a backlog in its own process, with nothing sent: the ceiling
    # of every client. The same options as the others, streaming included.
    server_sql = ("set work_mem = '1GB'; select count(*) from pg_logical_slot_get_binary_changes("
                  "'{slot}', '{endpos}', NULL, " +
                  ", ".join(f"'{k}', '{v}'" for k, v in opts.items()) + ", 'publication_names', '{pub}')")
    conns = (("unix", f"host={pg.sockdir} port={pg.port} dbname=postgres user=postgres"),
             ("tcp", pg.dsn))
    plan = []
    for name, label, rows, gen in backlogs:
        table, pub = f"bench_{name}", f"bench_pub_{name}"
        # No autovacuum worker may start (and exit) during a drain: its CPU would count as the
        # server's.
        pg.sql(f"create table {table} (id int8 primary key, name text not null, "
               "amount numeric(12,2), created timestamptz not null) "
               "with (autovacuum_enabled = off, toast.autovacuum_enabled = off)")
        pg.sql(f"create publication {pub} for table {table}")
        slots = [{(c, conn): f"bench_{name}_{c}_{conn}_{i}" for c in consumers for conn, _ in conns
                  if path_of(c) not in tcp_only or conn == "tcp"}
                 for i in range(args.repeat)]
        for run in slots:
            for (c, _), slot in run.items():
                pg.sql("select pg_create_logical_replication_slot(%s, %s)", (slot, plugin_of(c)))
        progress(f"backlog {name}: writing {label}")
        t = time.monotonic()
        pg.sql(gen)
        endpos = pg.current_wal_lsn()
        progress(f"backlog {name}: written in {time.monotonic() - t:.1f}s, up to {endpos}")
        plan.append((name, label, rows, table, pub, slots, endpos))
    settle(pg)

    meter = ServerCPU(pg)
    results = []
    for name, label, rows, table, pub, slots, endpos in plan:
        runs = {key: [] for key in slots[0]}
        for i, run in enumerate(slots):
            for (c, conn), slot in run.items():
                dsn = dict(conns)[conn]
                tag = f"{c}_{conn}_{name}_{i}"
                err = os.path.join(work, f"{tag}.stderr")
                binary = args.baseline if c.startswith("base_") else CDC_BIN
                if c == "server":
                    cmd = [os.path.join(pg.client_bindir, "psql"), "-X", "-q", "-d", dsn,
                           "-v", "ON_ERROR_STOP=1", "-c",
                           server_sql.format(slot=slot, endpos=endpos, pub=pub)]
                elif c == "pg_recvlogical":
                    cmd = [recvlogical, "-d", dsn, "--start", "-S", slot, "-f", "/dev/null",
                           "--endpos", endpos, "--no-loop", "-o", f"publication_names={pub}"]
                    for k, v in opts.items():
                        cmd += ["-o", f"{k}={v}"]
                elif c == "wal2json":
                    # One JSON document per change (format 2), like pgoutput's one message per
                    # change; wal2json cannot stream, so the server decodes a large transaction
                    # only at its commit (spilling it to pg_replslot past logical_decoding_work_mem).
                    cmd = [recvlogical, "-d", dsn, "--start", "-S", slot, "-f", "/dev/null",
                           "--endpos", endpos, "--no-loop", "-o", "format-version=2",
                           "-o", f"add-tables=public.{table}"]
                else:
                    state = os.path.join(work, f"state_{tag}")
                    os.makedirs(state)
                    cfg = os.path.join(work, f"{tag}.yaml")
                    sink = c.split("_")[1]
                    # NATS: a stream per run (the same changes have the same Nats-Msg-Id in every
                    # run, which one stream's duplicate window would drop)
                    sock = write_config(cfg, pg, slot, pub, table, state, sink,
                                        kafka if sink == "kafka" else None, c.endswith("_kafka_eo"),
                                        SUB_KEYS.get(path_of(c)), dsn=dsn,
                                        nats=(nats.url, tag.upper()) if sink == "nats" else None,
                                        registry=registry)
                    cmd = [binary, "run", "-c", cfg, "--endpos", endpos]
                meter.start()
                if c.endswith("_socket"):
                    # No --endpos: cdc serves the spool until the consumer has every event.
                    secs, rss, cpu = socket_run([binary, "run", "-c", cfg], sock, rows, err)
                else:
                    rc, secs, rss, cpu = timed_run(cmd, subprocess.DEVNULL, err)
                    if rc != 0:
                        sys.exit(f"bench: {c} over {conn} exited {rc}:\n{tail(err)}")
                walsender, others = meter.stop()
                # The server's own decoding runs in psql's backend, not a walsender.
                runs[(c, conn)].append({"secs": secs, "rss": rss, "cpu": cpu,
                                        "server_cpu": others if c == "server" else walsender})
                if path_of(c).startswith("cdc_nats"):  # every message is in the stream: its disk goes
                    held = nats.admin("info", tag.upper())["state"]["messages"]
                    if held != rows:
                        sys.exit(f"bench: stream {tag.upper()} holds {held} messages, not {rows}")
                    nats.admin("delete", tag.upper())
                # It consumed the whole backlog: nothing is left to decode in its slot up to
                # endpos (the confirmed position itself may stop short of endpos, at the last commit).
                left = slot_backlog(pg, slot, endpos, pub, plugin_of(c))
                if left:
                    sys.exit(f"bench: slot {slot} still has {left} messages before {endpos}")
            progress(f"backlog {name}, run {i + 1}/{len(slots)}: " +
                     ", ".join(f"{c}/{conn} {runs[(c, conn)][-1]['secs']:.2f}s" for c, conn in run))
        for conn, _ in conns:
            got = {c: r for (c, cn), r in runs.items() if cn == conn}
            results.append((name, label, rows, conn, {c: drain_figures(r, got.get("pg_recvlogical"))
                                                      for c, r in got.items()}))
    return results


def drain_figures(runs, recvlogical):
    """A consumer's figures over its runs on one backlog and connection: medians of the wall time
    and CPU, the highest peak RSS, and the two ratios per round (run i of this consumer against
    run i of pg_recvlogical on the same connection), their medians: speed (pg_recvlogical's seconds
    / this consumer's) and cost (this consumer's CPU / the server's CPU for the same drain)."""
    out = {"secs": median(x["secs"] for x in runs), "rss": max(x["rss"] for x in runs),
           "cpu": median(x["cpu"] for x in runs), "server_cpu": median(x["server_cpu"] for x in runs),
           "runs": [x["secs"] for x in runs], "rounds": runs,
           "cost": median(x["cpu"] / x["server_cpu"] if x["server_cpu"] else math.inf for x in runs)}
    if recvlogical:
        out["speed"] = median(p["secs"] / x["secs"] for p, x in zip(recvlogical, runs))
    return out


def http_request(sock_path, method, path, body=None, timeout=10):
    """method path (with body) on cdc's status socket (HTTP/1.0: the server closes after the
    answer); exits the bench unless the answer is 200. Returns the answer's body."""
    import socket
    data = (body or "").encode()
    length = f"Content-Length: {len(data)}\r\n" if body is not None else ""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(f"{method} {path} HTTP/1.0\r\nHost: cdc\r\n{length}\r\n".encode() + data)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    head, _, answer = b"".join(chunks).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n")[0]:
        sys.exit(f"bench: {method} {path} on {sock_path}: {head[:200]!r} {answer[:300]!r}")
    return answer.decode()


def http_get(sock_path, path, timeout=10):
    """GET path on cdc's status socket."""
    return http_request(sock_path, "GET", path, timeout=timeout)


BUCKET_RE = re.compile(r'^cdc_delivery_latency_seconds_bucket\{sink="(\w+)",le="([^"]+)"\} (\d+)$', re.M)
RECV_RE = re.compile(r'^cdc_source_receive_latency_seconds_bucket\{le="([^"]+)"\} (\d+)$', re.M)


def latency_buckets(metrics, sink):
    """A histogram of cdc's in the text of GET /metrics: [(le seconds, cumulative count)], the last
    le being inf. sink's from a transaction's commit to its delivery; with sink None, from the
    commit to cdc reading it from the slot (the server's share of every sink's latency)."""
    if sink is None:
        return [(float(le), int(n)) for le, n in RECV_RE.findall(metrics)]
    return [(float(le), int(n)) for s, le, n in BUCKET_RE.findall(metrics) if s == sink]


def wait_published(status_sock, sink, count, timeout=10):
    """cdc publishes its figures every second: waits until the histogram holds count samples. The
    commit-to-read one (sink None) is None from a cdc too old to have it (a --baseline), whose
    figures are out without it."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = http_get(status_sock, "/metrics")
        b = latency_buckets(metrics, sink)
        if b and b[-1][1] >= count:
            return b
        if sink is None and not b and BUCKET_RE.search(metrics):
            return None
        if time.monotonic() > deadline:
            sys.exit(f"bench: /metrics shows {b[-1][1] if b else 0} {sink or 'commit-to-read'} "
                     f"latency samples, not {count}")
        time.sleep(0.2)


def p99_ms(before, after, q=0.99):
    """The q-quantile (p99) of the samples between two cumulative histograms, as the upper bound of
    the bucket it falls in (ms); None when the interval has no sample. q=1: the highest bucket with
    a sample."""
    if not after:
        return None
    counts = [(le, n - (before[i][1] if before and len(before) == len(after) else 0))
              for i, (le, n) in enumerate(after)]
    total = counts[-1][1]
    if total <= 0:
        return None
    want = q * total
    for le, n in counts:
        if n >= want:
            return le * 1000.0 if le != float("inf") else float("inf")
    return None


# cdc's Kafka log line at its stop (latency_p999_ms since perf35; an older --baseline has none).
LATENCY_RE = re.compile(r"latency_p50_ms=([0-9.]+) latency_p99_ms=([0-9.]+)(?: latency_p999_ms=([0-9.]+))? "
                        r"latency_max_ms=([0-9.]+)")


def wait_ready(status_sock, p, err_path, timeout=60):
    """Waits until cdc (process p) says ready on GET /readyz: streaming, every sink able to take
    changes."""
    import socket
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(status_sock)
                s.sendall(b"GET /readyz HTTP/1.0\r\nHost: cdc\r\n\r\n")
                if s.recv(64).split(b"\r\n")[0].split()[1:2] == [b"200"]:
                    return
        except (FileNotFoundError, ConnectionRefusedError):  # not listening yet
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"bench: cdc not ready within {timeout}s:\n{tail(err_path)}")
        time.sleep(0.02)


def run_pgbench(pg, work, table, rate, seconds):
    """Single-row insert transactions into table at rate/s for seconds; returns pgbench's tps."""
    script = os.path.join(work, f"latency_{table}.sql")
    with open(script, "w") as f:
        f.write(f"insert into {table} (name, amount, created) values ('customer', 12.50, now());\n")
    out = subprocess.run([os.path.join(pg.client_bindir, "pgbench"), "-n", "-R", str(rate), "-T", str(seconds),
                          "-c", "4", "-j", "2", "-f", script, pg.dsn],
                         capture_output=True, text=True,
                         # Commits reach the walsender only once flushed: with the test server's
                         # asynchronous commit that waits for the WAL writer (200 ms).
                         env=dict(os.environ, PGOPTIONS="-c synchronous_commit=on"))
    if out.returncode != 0:
        sys.exit(f"bench: pgbench failed:\n{out.stderr[-2000:]}")
    tps = re.search(r"tps = ([0-9.]+)", out.stdout)
    return float(tps.group(1)) if tps else float("nan")


def kafka_latency(args, pg, work, kafka, tag, binary, rate=5000, seconds=10, exactly_once=False):
    """Commit time to delivery report (exactly once: to the Kafka commit, when a read-committed
    consumer can see it) at a steady rate of single-row transactions (pgbench --rate), measured by
    cdc itself (its kafka log line at stop), into table tag (its topic made before the run). The
    warm-up transaction is written once cdc is ready, so that the run's maximum is not cdc's start
    (it was, before: 206-222 ms in every run); its latency is kept apart (warmup_max), and the
    maximum is the run's when it is higher."""
    t = tag
    pg.sql(f"create table {t} (id bigserial primary key, name text not null, "
           "amount numeric(12,2), created timestamptz not null)")
    pg.sql(f"create publication {t}_pub for table {t}")
    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (t,))
    state = os.path.join(work, f"state_{t}")
    os.makedirs(state)
    cfg = os.path.join(work, f"cdc_{t}.yaml")
    sock_l = write_config(cfg, pg, t, f"{t}_pub", t, state, "kafka", kafka, exactly_once)
    err_path = os.path.join(work, f"cdc_{t}.stderr")
    cdc = subprocess.Popen([GNU_TIME, "-f", TIME_FORMAT, "-o", err_path + ".rss", binary, "run", "-c", cfg],
                           stdout=subprocess.DEVNULL, stderr=open(err_path, "wb"), stdin=subprocess.DEVNULL)

    def confirmed_past(lsn):
        row = pg.sql("select confirmed_flush_lsn >= %s::pg_lsn from pg_replication_slots "
                     "where slot_name = %s", (lsn, t))
        return row and row[0][0]

    def wait_confirmed(lsn, timeout):
        deadline = time.monotonic() + timeout
        while not confirmed_past(lsn):
            if cdc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"bench: cdc did not confirm {lsn}:\n{tail(err_path)}")
            time.sleep(0.05)

    status_sock = os.path.join(os.path.dirname(sock_l), "status.sock")
    wait_ready(status_sock, cdc, err_path)
    # Warm up: topic metadata and the idempotent producer's id, before the clock runs.
    pg.sql(f"insert into {t} (name, amount, created) values ('warm-up', 0, now())")
    wait_confirmed(pg.current_wal_lsn(), 60)
    # The histogram behind cdc's latency line, before and after the run: the difference is the
    # distribution of the run's events (16 buckets; kept for the CDF in results).
    before = wait_published(status_sock, "kafka", 1)
    read_before = wait_published(status_sock, None, 1)
    warmup_max = json.loads(http_get(status_sock, "/status"))["latency_ms"]["kafka"]["max"]
    progress(f"latency: {rate} transactions/s for {seconds}s through {os.path.basename(binary)} into the "
             f"mock cluster{' (exactly once)' if exactly_once else ''}")
    tps = run_pgbench(pg, work, t, rate, seconds)
    wait_confirmed(pg.current_wal_lsn(), 120)
    total = pg.sql(f"select count(*) from {t}")[0][0]
    after = wait_published(status_sock, "kafka", total)
    read_p99 = p99_ms(read_before, wait_published(status_sock, None, total)) if read_before else None
    buckets = [(le, n - n0) for (le, n), (_, n0) in zip(after, before)]
    rss, cpu = stop_cdc(cdc, err_path, 60)
    with open(err_path) as f:
        m = LATENCY_RE.findall(f.read())
    if not m:
        sys.exit(f"bench: no latency line from cdc:\n{tail(err_path)}")
    p50, p99, p999, mx = (float(x) if x else None for x in m[-1])
    # cdc's maximum is the whole process's: where it is the warm-up's, the run's own is bounded by the
    # highest bucket the run's events fell in
    return {"tps": tps, "p50": p50, "p99": p99, "p999": p999, "max": mx, "warmup_max": warmup_max,
            "run_max": p99_ms(before, after, q=1), "read_p99": read_p99, "buckets": buckets, "rss": rss,
            "cpu": cpu}


def latency_runs(args):
    """The latency runs in the order they take turns: (table, binary, path) for each run of each
    path, the --baseline binary's beside the new one's."""
    binaries = [("", CDC_BIN)] + ([("b", args.baseline)] if args.baseline else [])
    return [(f"bench_{b}{kind}{i}", binary, path)
            for i in range(args.latency_runs) for b, binary in binaries
            for kind, path in (("l", "kafka"), ("le", "kafka_eo"), ("s", "socket"))]


def latencies(args, pg, work, kafka):
    """--latency-runs runs of each latency path (Kafka, Kafka exactly once, socket), taking turns;
    with --baseline, the older binary's runs beside each. Returns {path: [run figures]} (the
    baseline's paths as base_<path>) and the socket consumer's samples of the last run."""
    out = {}
    for table, binary, path in latency_runs(args):
        key = path if binary == CDC_BIN else "base_" + path
        if path == "socket":
            x, samples, _ = socket_latency(args, pg, work, tag=table[len("bench_"):], binary=binary)
            if binary == CDC_BIN:  # the consumer's samples (µs), kept for the CDF
                with open(os.path.join(args.out, "latency_socket_us.txt"), "w") as f:
                    f.writelines(f"{us}\n" for us in samples)
                out["socket_samples_file"] = "latency_socket_us.txt"
        else:
            x = kafka_latency(args, pg, work, kafka, table, binary, exactly_once=path == "kafka_eo")
        out.setdefault(key, []).append(x)
        progress(f"latency {key} run {len(out[key])}: p50 {x['p50']:.2f} ms, p99 {x['p99']:.2f} ms, "
                 f"max {x['max']:.2f} ms")
    return out


def read_line(p, timeout, what, err_path):
    """The next line process p prints (its stdout a text pipe), waiting at most timeout seconds."""
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if ready else ""
    if not line:
        p.kill()
        sys.exit(f"bench: latency consumer: no {what} within {timeout}s:\n{tail(err_path)}")
    return line.split()


def percentile(sorted_values, q):
    """Nearest rank."""
    return sorted_values[max(0, math.ceil(len(sorted_values) * q) - 1)]


def socket_latency(args, pg, work, rate=5000, seconds=10, warmup=200, tag="s", also=(), extra_yaml="",
                   binary=None, during=None):
    """Commit time to a Python consumer of the subscriber socket at a steady rate of single-row
    transactions (pgbench --rate): the consumer (latency_consumer, a process of its own) notes
    the time each Delivery is read, acks it, and reports every event's receive time minus its
    commit_time. The first warmup events (connection, first spool segment) are left out. also:
    more tables for the publication, extra_yaml: appended to the config (more subscriptions),
    during: called with the status socket once warm, what it returns stopped (stop()) when the
    load ends. Returns ({tps, p50, p99, p999, max, rss, cpu}, the latencies in µs sorted, what
    during returned)."""
    table, pub = f"bench_{tag}", f"bench_pub_{tag}"
    pg.sql(f"create table {table} (id bigserial primary key, name text not null, "
           "amount numeric(12,2), created timestamptz not null)")
    pg.sql(f"create publication {pub} for table " + ", ".join((table,) + tuple(also)))
    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (table,))
    state = os.path.join(work, f"state_{tag}")
    os.makedirs(state)
    cfg = os.path.join(work, f"cdc_{tag}.yaml")
    sock = write_config(cfg, pg, table, pub, table, state, "socket")
    with open(cfg, "a") as f:
        f.write(extra_yaml)
    err_path = os.path.join(work, f"cdc_{tag}.stderr")
    cons_err = os.path.join(work, f"latency_consumer_{tag}.stderr")
    out_path = os.path.join(work, f"latency_consumer_{tag}.txt")
    start = time.monotonic()
    cdc = subprocess.Popen([GNU_TIME, "-f", TIME_FORMAT, "-o", err_path + ".rss", binary or CDC_BIN, "run",
                            "-c", cfg], stdout=subprocess.DEVNULL, stderr=open(err_path, "wb"),
                           stdin=subprocess.DEVNULL)
    consumer = None
    try:
        wait_socket(sock, cdc, err_path, start)
        # TMPDIR: cdc_client compiles the .proto files into a temp dir it leaves behind.
        consumer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--latency-consumer",
                                     sock, str(warmup), out_path],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=open(cons_err, "wb"), text=True,
                                    env=dict(os.environ, TMPDIR=work))
        read_line(consumer, 60, "subscription", cons_err)
        pg.sql(f"do $$ begin for i in 1..{warmup} loop insert into {table} (name, amount, created) "
               f"values ('warm-up', 0, now()); commit; end loop; end $$")
        read_line(consumer, 60, "warm-up events", cons_err)
        progress(f"latency: {rate} transactions/s for {seconds}s through "
                 f"{os.path.basename(binary or CDC_BIN)} to a socket consumer")
        status_sock = os.path.join(os.path.dirname(sock), "status.sock")
        read_before = wait_published(status_sock, None, warmup)
        beside = during(status_sock) if during else None
        tps = run_pgbench(pg, work, table, rate, seconds)
        if beside:
            beside.stop()
        total = pg.sql(f"select count(*) from {table}")[0][0]
        consumer.stdin.write(f"{total}\n")
        consumer.stdin.flush()
        done = dict(kv.split("=") for kv in read_line(consumer, 120, "end of the events", cons_err)[1:])
        if consumer.wait(30) != 0:
            sys.exit(f"bench: latency consumer exited {consumer.returncode}:\n{tail(cons_err)}")
        read_p99 = p99_ms(read_before, wait_published(status_sock, None, total)) if read_before else None
        rss, cpu = stop_cdc(cdc, err_path, 60)
    finally:  # on failure: nothing left running
        for p in (consumer, cdc):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    lat = {}
    with open(out_path) as f:
        for line in f:
            offset, us = line.split()
            lat.setdefault(int(offset), int(us))  # a redelivery does not count again
    if sorted(lat) != list(range(warmup + 1, total + 1)):
        sys.exit(f"bench: latency consumer got {len(lat)} distinct events past the warm-up, "
                 f"not offsets {warmup + 1}..{total}")
    v = sorted(lat.values())
    progress(f"latency: socket consumer used {float(done['cpu']):.1f}s of CPU in "
             f"{float(done['wall']):.1f}s for {len(v)} events in {done['deliveries']} deliveries")
    return ({"tps": tps, "p50": percentile(v, 0.5) / 1000, "p99": percentile(v, 0.99) / 1000,
             "p999": percentile(v, 0.999) / 1000, "max": v[-1] / 1000, "read_p99": read_p99,
             "rss": rss, "cpu": cpu},
            v, beside)


def latency_consumer(sock, warmup, out_path):
    """The measuring consumer of socket_latency, run as `bench.py --latency-consumer SOCK WARMUP
    OUT`. Prints "subscribed", then "warm" once offset warmup arrived; reads the number of events
    to expect on stdin; once they are all in, writes "offset latency_us" lines to OUT (events past
    the warm-up) and prints "done cpu=S wall=S deliveries=N"."""
    import resource
    import subscriber_helpers as sc

    deadline = time.monotonic() + 60
    while True:
        try:
            s = sc.Subscriber(sock, "bench", consumer="bench-latency")
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    print("subscribed", flush=True)
    offsets, lats = [], []
    target, top, deliveries, stdin_open = None, 0, 0, True
    t0 = cpu0 = None
    while target is None or top < target:
        f = s.recv(0.05 if target is None else 120)
        now = time.time_ns() // 1000  # right when the frame is read: the receive time of its events
        if f is None:
            if s.closed:
                sys.exit("latency consumer: cdc closed the connection")
            if target is not None:
                sys.exit(f"latency consumer: no event for 120s; got up to {top} of {target}")
        else:
            kind = f.WhichOneof("kind")
            if kind == "error":
                raise sc.ServerError(f.error)
            if kind == "delivery":
                events = f.delivery.events
                s.ack([max(e.offset for e in events)])  # failover: cumulative, the highest
                deliveries += 1
                for e in events:
                    if e.offset > warmup:
                        offsets.append(e.offset)
                        lats.append(now - e.commit_time)
                    top = max(top, e.offset)
                if t0 is None and top >= warmup:
                    t0, r = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
                    cpu0 = r.ru_utime + r.ru_stime
                    deliveries = 0
                    print("warm", flush=True)
        if target is None and stdin_open and (f is None or deliveries % 256 == 0) and \
                select.select([sys.stdin], [], [], 0)[0]:
            line = sys.stdin.readline()
            stdin_open = bool(line)
            target = int(line) if line.strip() else None
    r = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.monotonic() - t0
    s.close()
    with open(out_path, "w") as out:
        out.writelines(f"{o} {us}\n" for o, us in zip(offsets, lats))
    print(f"done cpu={r.ru_utime + r.ru_stime - cpu0:.3f} wall={wall:.3f} deliveries={deliveries}",
          flush=True)


# --- growth and peers: helpers ------------------------------------------------------------------

BENCH_COLUMNS = "(id int8 primary key, name text not null, amount numeric(12,2), created timestamptz not null)"


def cdc_config(path, pg, slot, pub, state_dir, subscriptions, backfill=None):
    """A cdc config on slot/pub with the given subscriptions (dicts of YAML scalars, lists as
    Python lists) and backfill section (a dict). Returns (subscriber socket, status socket)."""
    socks = socket_dir(state_dir)
    lines = ["source:", f'  dsn: "{pg.dsn}"', f"  slot: {slot}", f"  publication: {pub}",
             "  create: false", f"state_dir: {state_dir}", "status:",
             f"  socket: {os.path.join(socks, 'status.sock')}", "subscribers:",
             f"  socket: {os.path.join(socks, 'events.sock')}", "subscriptions:"]
    for sub in subscriptions:
        first = True
        sub = dict(sub, operations=sub.get("operations", ROW_OPS.split(", ")))
        for k, v in sub.items():
            if isinstance(v, list):
                v = "[" + ", ".join(f'"{x}"' for x in v) + "]"
            elif k == "where":
                v = f'"{v}"'
            lines.append(("  - " if first else "    ") + f"{k}: {v}")
            first = False
    if backfill:
        lines += ["backfill:"] + [f"  {k}: {v}" for k, v in backfill.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return os.path.join(socks, "events.sock"), os.path.join(socks, "status.sock")


def batched_inserts(table, rows, per_txn, first_id=1):
    """A DO block inserting rows rows into table, per_txn rows per transaction."""
    return (f"do $$ begin for i in 0..{rows - 1} loop "
            f"insert into {table} (id, name, amount, created) "
            f"values (i + {first_id}, 'customer ' || i, (i % 100000) / 100.0, now()); "
            f"if i % {per_txn} = {per_txn - 1} then commit; end if; end loop; end $$")


def settle(pg):
    """The tables just loaded on disk before anything is measured. Else the kernel writes their pages
    back about 30 s after the load, in the middle of a run, and the socket spool's group commit (an
    fsync) waits for that: 500 ms in a backfill latency run, whose p99 was 364 ms against 20-27 ms in
    the others, its read p99 10 ms."""
    pg.sql("checkpoint")
    os.sync()


def new_slot(pg, slot):
    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def drop_slot(pg, slot):
    deadline = time.monotonic() + 30
    while True:
        try:
            pg.sql("select pg_drop_replication_slot(%s)", (slot,))
            return
        except psycopg2.errors.ObjectInUse:  # the walsender has not let go yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stdout_run(pg, work, tag, slot, pub, endpos, subscriptions):
    """`cdc run --endpos` with stdout subscriptions (to /dev/null); returns (seconds, RSS MiB)."""
    state = os.path.join(work, f"state_{tag}")
    os.makedirs(state)
    cfg = os.path.join(work, f"{tag}.yaml")
    cdc_config(cfg, pg, slot, pub, state, subscriptions)
    err = os.path.join(work, f"{tag}.stderr")
    rc, secs, rss, _ = timed_run([CDC_BIN, "run", "-c", cfg, "--endpos", endpos], subprocess.DEVNULL, err)
    if rc != 0:
        sys.exit(f"bench: cdc ({tag}) exited {rc}:\n{tail(err)}")
    return secs, rss


def timed_cdc(pg, work, tag, slot, pub, subscriptions, backfill=None):
    """Starts `cdc run` (under GNU time, for its peak RSS) with subscriptions (and a backfill
    section) on slot/pub; returns (the process, subscriber socket, status socket, stderr path, start
    time)."""
    state = os.path.join(work, f"state_{tag}")
    os.makedirs(state)
    cfg = os.path.join(work, f"{tag}.yaml")
    sock, status_sock = cdc_config(cfg, pg, slot, pub, state, subscriptions, backfill)
    err = os.path.join(work, f"{tag}.stderr")
    start = time.monotonic()
    with open(err, "wb") as e:
        p = subprocess.Popen([GNU_TIME, "-f", TIME_FORMAT, "-o", err + ".rss", CDC_BIN, "run", "-c", cfg],
                             stdout=subprocess.DEVNULL, stderr=e, stdin=subprocess.DEVNULL)
    return p, sock, status_sock, err, start


def shared_run(pg, work, tag, slot, pub, table, rows, consumers):
    """`cdc run` with one socket subscription (consumers: shared) and, once its socket exists,
    `consumers` processes of `cdc tail` on it, each acking what it prints to a pipe this process
    reads. Timed from cdc's start until the tails together have printed rows events; returns
    (seconds, cdc's peak RSS in MiB, events printed)."""
    cdc, sock, _, err, start = timed_cdc(pg, work, tag, slot, pub,
                                         [{"name": "bench", "tables": [f"public.{table}"],
                                           "sink": "socket", "consumers": "shared"}])
    tails, fds, got = [], {}, 0

    def start_tail(i):
        t = subprocess.Popen([CDC_BIN, "tail", "-s", sock, "bench", "--consumer", f"c{i}",
                              "--timeout", "300"], stdout=subprocess.PIPE,
                             stderr=open(f"{err}.tail{i}", "wb"), stdin=subprocess.DEVNULL)
        tails.append(t)
        fds[t.stdout.fileno()] = (t, i)

    try:
        wait_socket(sock, cdc, err, start)
        for i in range(consumers):
            start_tail(i)
        while got < rows:
            if cdc.poll() is not None:
                sys.exit(f"bench: cdc ({tag}) exited {cdc.returncode}:\n{tail(err)}")
            if time.monotonic() - start > 300 or not fds:
                sys.exit(f"bench: {tag}: {got} of {rows} events after "
                         f"{time.monotonic() - start:.0f}s\n{tail(err)}")
            ready, _, _ = select.select(list(fds), [], [], 1)
            for fd in ready:
                b = os.read(fd, 1 << 20)
                got += b.count(b"\n")
                if not b:
                    t, i = fds.pop(fd)
                    t.wait()
                    # bind() makes the file before listen(): a connect() in between is refused.
                    with open(f"{err}.tail{i}", errors="replace") as f:
                        if "cannot connect" in f.read():
                            time.sleep(0.005)
                            start_tail(i)
                            continue
                    sys.exit(f"bench: {tag}: cdc tail c{i} exited {t.returncode}:\n"
                             f"{tail(f'{err}.tail{i}')}")
        secs = time.monotonic() - start
    finally:
        for t in tails:
            if t.poll() is None:
                t.terminate()
                t.wait()
            t.stdout.close()
        if cdc.poll() is not None and cdc.returncode != 0:
            sys.exit(f"bench: cdc ({tag}) exited {cdc.returncode}:\n{tail(err)}")
    return secs, stop_cdc(cdc, err)[0], got


# --- growth ---------------------------------------------------------------------------------------

# The N - 1 subscriptions beside the first, by variant (report.py describes each): the i-th one.
SUBSCRIPTION_VARIANTS = {
    "half": lambda i: {"where": "new.amount < 0"} if i % 2 else {},
    "where": lambda i: {"where": "new.amount < 0"} if i else {},
    "other": lambda i: {"tables": [f"public.other_{i}"]} if i else {},
}


def growth_subscriptions(args, pg, work, counts=(1, 10, 100, 1000)):
    """One table, N stdout subscriptions, in three variants (SUBSCRIPTION_VARIANTS): every second
    one with a where that never matches (amount is never negative), all but one with it, all but one
    on other tables. Only the matching ones should cost: events out, not subscriptions, set the
    pace. Backlog: rows in 100-row transactions, one slot per variant and N made before it.
    Returns {variant: [(N, matching subscriptions, rows, seconds, RSS)]}."""
    rows = max(1000, int(50_000 * args.scale))
    pg.sql(f"create table bench_gs {BENCH_COLUMNS}")
    pg.sql("create publication bench_pub_gs for table bench_gs")
    # variant "other"'s tables: they exist (cdc refuses a subscription to a table that does not)
    # and get no rows
    pg.sql("; ".join(f"create table other_{i} (id int primary key)" for i in range(1, max(counts))))
    for v in SUBSCRIPTION_VARIANTS:
        for n in counts:
            new_slot(pg, f"bench_gs_{v}_{n}")
    progress(f"subscriptions: writing {rows:,} rows in 100-row transactions")
    pg.sql(batched_inserts("bench_gs", rows, 100))
    endpos = pg.current_wal_lsn()
    out = {}
    for v, extra in SUBSCRIPTION_VARIANTS.items():
        out[v] = []
        for n in counts:
            subs = [dict({"name": f"s{i}", "tables": ["public.bench_gs"], "sink": "stdout"}, **extra(i))
                    for i in range(n)]
            secs, rss = stdout_run(pg, work, f"gs_{v}_{n}", f"bench_gs_{v}_{n}", "bench_pub_gs", endpos,
                                   subs)
            drop_slot(pg, f"bench_gs_{v}_{n}")
            matching = (n + 1) // 2 if v == "half" else 1
            progress(f"subscriptions ({v}): {n} ({matching} matching): {secs:.2f}s, {rss:.1f} MiB")
            out[v].append((n, matching, rows, secs, rss))
    return out


def growth_consumers(args, pg, work, counts=(1, 10, 100)):
    """One socket subscription (consumers: shared), N `cdc tail` consumers all acking. Backlog:
    rows in 100-row transactions. Returns [(N, rows, seconds, RSS, events printed)]."""
    rows = max(1000, int(100_000 * args.scale))
    pg.sql(f"create table bench_gc {BENCH_COLUMNS}")
    pg.sql("create publication bench_pub_gc for table bench_gc")
    for n in counts:
        new_slot(pg, f"bench_gc_{n}")
    progress(f"consumers: writing {rows:,} rows in 100-row transactions")
    pg.sql(batched_inserts("bench_gc", rows, 100))
    out = []
    for n in counts:
        secs, rss, got = shared_run(pg, work, f"gc_{n}", f"bench_gc_{n}", "bench_pub_gc",
                                    "bench_gc", rows, n)
        drop_slot(pg, f"bench_gc_{n}")
        progress(f"consumers: {n} shared: {secs:.2f}s, {rss:.1f} MiB, {got - rows} duplicates")
        out.append((n, rows, secs, rss, got))
    return out


def growth_tables(args, pg, work, counts=(1, 10, 100, 1000)):
    """N tables in the publication, one subscription on all of them (a glob): one row in each
    quiet table (so cdc sees every relation), then rows in the busy one in 100-row transactions.
    Returns [(N, rows, seconds, RSS)]."""
    rows = max(1000, int(100_000 * args.scale))
    out = []
    for n in counts:
        names = [f"bench_gt{n}_{i}" for i in range(n)]
        pg.sql("; ".join(f"create table {t} {BENCH_COLUMNS}" for t in names))
        pg.sql(f"create publication bench_pub_gt{n} for table {', '.join(names)}")
        new_slot(pg, f"bench_gt_{n}")
        pg.sql("; ".join(f"insert into {t} values (0, 'quiet', 0, now())" for t in names[1:]) or "select 1")
        pg.sql(batched_inserts(names[0], rows, 100))
        endpos = pg.current_wal_lsn()
        secs, rss = stdout_run(pg, work, f"gt_{n}", f"bench_gt_{n}", f"bench_pub_gt{n}", endpos,
                               [{"name": "all", "tables": [f"public.bench_gt{n}_*"], "sink": "stdout"}])
        drop_slot(pg, f"bench_gt_{n}")
        progress(f"tables: {n} in the publication: {secs:.2f}s, {rss:.1f} MiB")
        out.append((n, rows + n - 1, secs, rss))
    return out


# --- the seeds' design on PostgreSQL: a trigger-fed event log and SKIP LOCKED workers -------------

TRIGGER_SCHEMA = """
create table event_subscriber (sub_id serial primary key, target_table text not null,
                               action char(1) not null, tag text);
create table event_log (log_id bigserial primary key, sub_id int not null, pk int8 not null,
                        work_update timestamptz);
create index event_log_sub_id on event_log (sub_id);
create function event_log_write() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    insert into event_log (sub_id, pk) select sub_id, old.id from event_subscriber
      where target_table = tg_table_name and action = 'D';
    return old;
  end if;
  insert into event_log (sub_id, pk) select sub_id, new.id from event_subscriber
    where target_table = tg_table_name and action = left(tg_op, 1);
  return new;
end $$;
"""


def proc_cpu(pid):
    """User plus system CPU seconds of process pid so far (/proc/PID/stat), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackendCPU:
    """The CPU of the server's backends whose application_name is name, sampled every 20 ms while
    it runs (a backend's last sample stands for it once it exits): their sum in seconds."""

    def __init__(self, pg, name):
        self.conn = psycopg2.connect(pg.dsn)
        self.conn.autocommit = True
        self.name, self.last = name, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            with self.conn.cursor() as cur:
                cur.execute("select pid from pg_stat_activity where application_name = %s", (self.name,))
                for (pid,) in cur.fetchall():
                    cpu = proc_cpu(pid)
                    if cpu is not None:
                        self.last[pid] = cpu
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self.conn.close()
        return sum(self.last.values())


def copy_server_cpu(pg, table):
    """The server's CPU seconds for `COPY (SELECT * FROM table) TO STDOUT` (psql \\copy's statement),
    from its backend's /proc/PID/stat before and after, the rows thrown away by the client."""
    conn = psycopg2.connect(pg.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("select pg_backend_pid()")
            pid = cur.fetchone()[0]
            before = proc_cpu(pid)

            class Null(io.RawIOBase):
                def writable(self):
                    return True

                def write(self, b):
                    return len(b)
            cur.copy_expert(f"copy (select * from {table}) to stdout", Null())
            return proc_cpu(pid) - before
    finally:
        conn.close()


def backfill_run(pg, work, tag, table, extra=None):
    """`cdc run` with one stdout subscription (to /dev/null) on table with `snapshot: true`, until
    its backfill is done: (seconds from cdc's start, cdc's peak RSS in MiB, cdc's CPU seconds, the
    CPU seconds of the server's backends that read for it). extra: the config's backfill section."""
    slot = f"bench_{tag}"
    new_slot(pg, slot)
    server = BackendCPU(pg, "cdc backfill")
    p, _, status_sock, err, start = timed_cdc(pg, work, tag, slot, f"bench_pub_{table}",
                                              [{"name": "bench", "tables": [f"public.{table}"],
                                                "sink": "stdout", "snapshot": "true"}], backfill=extra)
    wait_socket(status_sock, p, err, start)
    backfills_done(status_sock, p, err)
    secs = time.monotonic() - start
    rss, cpu = stop_cdc(p, err)
    drop_slot(pg, slot)
    return secs, rss, cpu, server.stop()


def backfills_done(status_sock, p, err, pause=0.02):
    """Waits until every backfill of the cdc that p runs is done; exits the bench if one fails or
    is cancelled, or cdc exits."""
    while True:
        try:
            states = [b["state"] for b in json.loads(http_get(status_sock, "/backfills"))]
        except ConnectionRefusedError:  # the socket file exists a moment before it listens
            states = []
        if states and all(st == "done" for st in states):
            return
        if p.poll() is not None or any(st in ("failed", "cancelled") for st in states):
            sys.exit(f"bench: backfill {states}:\n{tail(err)}")
        time.sleep(pause)


class Rebackfill:
    """While running: a backfill of subscription sub at full speed at every moment, a new one
    asked for (POST) as soon as the last is done. Counts the backfills and their rows."""

    def __init__(self, status_sock, sub):
        self.sock, self.sub, self.done, self.rows = status_sock, sub, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        seen = set()
        while not self._stop.is_set():
            bfs = json.loads(http_get(self.sock, "/backfills"))
            for b in bfs:
                if b["state"] == "done" and b["id"] not in seen:
                    seen.add(b["id"])
                    self.done += 1
                    self.rows += b["rows_read"]
            if not any(b["state"] in ("queued", "running") for b in bfs):
                http_request(self.sock, "POST", f"/subscriptions/{self.sub}/backfill", "{}")
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(30)


def backfills(args, pg, work):
    """A backfill of a table into the stdout sink against reading it with psql's \\copy (the cost of
    just reading it), with the CPU per row of cdc, of the server's backends that read for it, and of
    the server for psql's COPY; peak RSS on a table 10 times smaller; and the socket latency of live
    single-row transactions at 1,000/s while backfills of the large table run at full speed, one
    after another, for the whole run. Medians of args.repeat."""
    sizes = {"bf_small": int(100_000 * args.scale), "bf_big": int(1_000_000 * args.scale)}
    for table, rows in sizes.items():
        pg.sql(f"create table {table} (id int8 primary key, name text not null, "
               "amount numeric(12,2), created timestamptz not null)")
        pg.sql(f"insert into {table} select g, 'customer ' || g, (g % 100000) / 100.0, now() "
               f"from generate_series(1, {rows}) g")
        pg.sql(f"vacuum analyze {table}")
        pg.sql(f"create publication bench_pub_{table} for table {table}")
    settle(pg)
    psql = os.path.join(pg.client_bindir, "psql")
    copy, copy_cpu, runs = [], [], {t: [] for t in sizes}
    for i in range(args.repeat):
        t = time.monotonic()
        subprocess.run([psql, "-d", pg.dsn, "-qAtc", r"\copy (select * from bf_big) to /dev/null"],
                       check=True)
        copy.append(time.monotonic() - t)
        copy_cpu.append(copy_server_cpu(pg, "bf_big"))
        for table in sizes:
            runs[table].append(backfill_run(pg, work, f"{table}_{i}", table))
        big = runs["bf_big"][-1]
        progress(f"backfill, run {i + 1}/{args.repeat}: psql \\copy {copy[-1]:.2f}s (server CPU "
                 f"{copy_cpu[-1]:.2f}s), " + ", ".join(f"{t} {runs[t][-1][0]:.2f}s" for t in sizes) +
                 f" (bf_big: cdc CPU {big[2]:.2f}s, its server backends {big[3]:.2f}s)")
    progress("backfill: live transactions at 1000/s to a socket consumer while bf_big is backfilled "
             "at full speed, again and again")
    extra = "  - name: snapshot\n    tables: [\"public.bf_big\"]\n    sink: stdout\n"
    lats = []
    for i in range(args.repeat):
        lat, _, again = socket_latency(args, pg, work, rate=1000, tag=f"lb{i}", also=("bf_big",),
                                       extra_yaml=extra, during=lambda sock: Rebackfill(sock, "snapshot"))
        lats.append({k: lat[k] for k in ("tps", "p50", "p99", "p999", "max", "read_p99")} |
                    {"backfills": again.done, "backfill_rows": again.rows})
        progress(f"backfill latency run {i + 1}/{args.repeat}: p99 {lat['p99']:.2f} ms (read p99 ≤ "
                 f"{lat['read_p99']} ms), max {lat['max']:.2f} ms, {again.done} backfills "
                 f"({again.rows:,} rows) meanwhile")
    big = sizes["bf_big"]
    return {"rows": sizes, "repeat": args.repeat, "copy_secs": median(copy),
            "copy_server_cpu_us": median(c / big * 1e6 for c in copy_cpu),
            "cdc": {t: {"secs": median(r[0] for r in runs[t]), "rss": max(r[1] for r in runs[t]),
                        "cpu_us": median(r[2] / sizes[t] * 1e6 for r in runs[t]),
                        "server_cpu_us": median(r[3] / sizes[t] * 1e6 for r in runs[t])}
                    for t in sizes},
            "latency": {k: median(x[k] for x in lats) for k in ("tps", "p50", "p99", "p999", "max")}
            | {"runs": lats}}


def wal_of(pg, sql):
    """Bytes of WAL and seconds that sql takes, from a checkpoint (both sides pay the same
    first-touch full-page images)."""
    pg.sql("checkpoint")
    lsn0 = pg.current_wal_lsn()
    t = time.monotonic()
    pg.sql(sql)
    secs = time.monotonic() - t
    lsn1 = pg.current_wal_lsn()
    return pg.sql("select %s::pg_lsn - %s::pg_lsn", (lsn1, lsn0))[0][0], secs


def trigger_queue(args, pg, work):
    """Seeds 000 and 002 on PostgreSQL. Two tables with the bench columns: trig_plain (what cdc
    needs: nothing) and trig_src (an AFTER INSERT/UPDATE/DELETE trigger writes one event_log row
    per subscription, here one). The same workloads on each, WAL measured with
    pg_current_wal_lsn(); then the event log of the single-row workload is drained by 1 and 4
    workers (this file, --trigger-worker), claiming with FOR UPDATE SKIP LOCKED, deleting the
    claimed rows and reading the changed rows, one transaction per claim, 1 row per claim (as in
    the seeds) and 100. cdc on trig_plain's identical workload: a socket subscription with
    shared consumers, 1 and 4 `cdc tail`."""
    txns = max(1000, int(50_000 * args.scale))
    big = max(1000, int(200_000 * args.scale))
    pg.sql(f"create table trig_plain {BENCH_COLUMNS}; create table trig_src {BENCH_COLUMNS}")
    pg.sql(TRIGGER_SCHEMA)
    pg.sql("create trigger trig_src_event after insert or update or delete on trig_src "
           "for each row execute function event_log_write()")
    pg.sql("insert into event_subscriber (target_table, action, tag) values ('trig_src', 'I', 'bench')")
    pg.sql("create publication bench_pub_tq for table trig_plain")
    wal = {}
    progress(f"trigger queue: WAL of {big:,} rows in 1 transaction and {txns:,} single-row "
             "transactions, with and without the trigger")
    for table in ("trig_plain", "trig_src"):
        wal[table, "big"] = wal_of(pg, f"insert into {table} (id, name, amount, created) "
                                       f"select g, 'customer ' || g, (g % 100000) / 100.0, now() "
                                       f"from generate_series(1, {big}) g")
    pg.sql("truncate trig_plain, trig_src, event_log")
    for n in (1, 4):  # cdc's slots see only the single-row workload
        new_slot(pg, f"bench_tq_{n}")
    for table in ("trig_plain", "trig_src"):
        wal[table, "small"] = wal_of(pg, batched_inserts(table, txns, 1))
    pg.sql("create table event_log_copy as select * from event_log")
    dsn = pg.dsn
    workers = []
    for nw, batch in ((1, 1), (4, 1), (1, 100), (4, 100)):
        pg.sql("truncate event_log; insert into event_log select * from event_log_copy")
        pg.sql("vacuum analyze event_log")
        pg.sql("checkpoint")
        lsn0 = pg.current_wal_lsn()
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--trigger-worker",
                                   dsn, "1", str(batch)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(os.path.join(work, f"worker_{nw}_{batch}_{i}.stderr"), "wb"),
                                  text=True) for i in range(nw)]
        for i, p in enumerate(procs):
            read_line(p, 30, "ready", os.path.join(work, f"worker_{nw}_{batch}_{i}.stderr"))
        t = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        done = 0
        for i, p in enumerate(procs):
            line = read_line(p, 600, "count", os.path.join(work, f"worker_{nw}_{batch}_{i}.stderr"))
            done += int(line[1])
            p.wait(30)
        secs = time.monotonic() - t
        left = pg.sql("select count(*) from event_log")[0][0]
        if done != txns or left:
            sys.exit(f"bench: {nw} workers took {done} events of {txns}, {left} left")
        wal_bytes = pg.sql("select %s::pg_lsn - %s::pg_lsn", (pg.current_wal_lsn(), lsn0))[0][0]
        progress(f"trigger queue: {nw} worker(s) x {batch}/claim: {secs:.2f}s, "
                 f"{float(wal_bytes) / txns:.0f} WAL bytes per event consumed")
        workers.append((nw, batch, txns, secs, float(wal_bytes)))
    cdc_runs = []
    for n in (1, 4):
        secs, rss, got = shared_run(pg, work, f"tq_{n}", f"bench_tq_{n}", "bench_pub_tq",
                                    "trig_plain", txns, n)
        drop_slot(pg, f"bench_tq_{n}")
        progress(f"trigger queue: cdc, {n} shared cdc tail: {secs:.2f}s")
        cdc_runs.append((n, txns, secs, rss))
    return {"txns": txns, "big": big, "wal": {f"{k[0]}/{k[1]}": (float(v[0]), v[1]) for k, v in wal.items()},
            "workers": workers, "cdc": cdc_runs}


def trigger_worker(dsn, sub_id, batch):
    """A worker of the trigger design, run as `bench.py --trigger-worker DSN SUB BATCH`: prints
    "ready", waits for a line on stdin, then claims up to BATCH events of subscription SUB at a
    time (oldest first, SKIP LOCKED), deletes them and reads their rows in the same transaction,
    until a claim finds nothing; prints "count N"."""
    import psycopg2
    con = psycopg2.connect(dsn)
    cur = con.cursor()
    print("ready", flush=True)
    sys.stdin.readline()
    n = 0
    while True:
        cur.execute("delete from event_log e using (select log_id from event_log where sub_id = %s "
                    "order by log_id limit %s for update skip locked) c "
                    "where e.log_id = c.log_id returning e.pk", (sub_id, batch))
        pks = [r[0] for r in cur.fetchall()]
        if not pks:
            con.commit()
            break
        cur.execute("select id, name, amount, created from trig_src where id = any(%s)", (pks,))
        cur.fetchall()
        con.commit()
        n += len(pks)
    print(f"count {n}", flush=True)


SECTIONS = ("drain", "latency", "backfill", "trigger", "subscriptions", "consumers", "tables", "scale")
# scale (backfill_scale.py: a 10 GB table) only when asked for
ALIASES = {"peers": ("drain", "trigger"), "growth": ("subscriptions", "consumers", "tables"),
           "all": SECTIONS[:-1]}


def sections_of(spec):
    out = []
    for name in spec.split(","):
        name = name.strip()
        for s in ALIASES.get(name, (name,)):
            if s not in SECTIONS:
                sys.exit(f"bench: unknown section {s!r} (sections: {', '.join(SECTIONS)}; "
                         f"aliases: {', '.join(ALIASES)})")
            if s not in out:
                out.append(s)
    return [s for s in SECTIONS if s in out]


def machine(pg):
    def first(path, key):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return "?"

    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "nproc": os.cpu_count(),
            "cpu": first("/proc/cpuinfo", "model name"),
            "mem_gib": int(first("/proc/meminfo", "MemTotal").split()[0]) / 1024 / 1024,
            "kernel": "Linux " + os.uname().release,
            "postgres": pg.sql("select version()")[0][0].split(" on ")[0],
            "cdc": out([CDC_BIN, "--version"]) or "?", "git": out(["git", "rev-parse", "--short", "HEAD"]),
            "command": shlex.join(["tests/bench/bench.py"] + sys.argv[1:])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every workload size")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--repeat", type=int, default=3, help="runs per consumer (median reported)")
    ap.add_argument("--only", default="all",
                    help="comma-separated sections: " + ", ".join(SECTIONS) +
                    "; peers = drain,trigger; growth = subscriptions,consumers,tables")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"),
                    help="where results.md, results.json and the PNGs go")
    ap.add_argument("--note", default="", help="a line for results.md (e.g. how busy the machine was)")
    ap.add_argument("--paths", type=lambda v: v.split(","), default=None,
                    help="comma-separated cdc paths the drain section runs (default all: " +
                         ", ".join(DRAIN_PATHS) + "); pg_recvlogical and the others always run")
    ap.add_argument("--latency-runs", type=int, default=5,
                    help="runs of each latency path, taking turns (the table shows each)")
    ap.add_argument("--baseline", default=None, metavar="CDC",
                    help="an older cdc binary that also drains each backlog and runs the latency "
                         "paths, in turn with the new one (make bench BENCH_BASE=<git rev> builds one)")
    ap.add_argument("--scale-rows", type=int, default=50_000_000,
                    help="rows of the scale section's table (about 200 bytes each)")
    ap.add_argument("--scale-rate", type=int, default=500,
                    help="transactions/s into another table while the scale section's backfill runs")
    ap.add_argument("--scale-backfill", default="", metavar="KEY=VALUE,...",
                    help="the scale section's backfill settings (e.g. max_rows=20000,parallel=2; "
                         "default cdc's)")
    ap.add_argument("--pg-version", type=int, default=None,
                    help="PostgreSQL major version (tests/pg.py: 14 to 18; default Debian's, the one "
                         "with wal2json)")
    args = ap.parse_args()
    sections = sections_of(args.only)
    for binary in (CDC_BIN, KAFKA_MOCK_BIN, GNU_TIME) + ((args.baseline,) if args.baseline else ()):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            sys.exit(f"bench: {binary} missing (make bench builds and installs what it needs)")
    os.makedirs(args.out, exist_ok=True)

    unknown = [c for c in args.paths or () if c not in DRAIN_PATHS]
    if unknown:
        sys.exit(f"bench: unknown path {unknown[0]!r} (paths: {', '.join(DRAIN_PATHS)})")
    work = tempfile.mkdtemp(prefix="cdc-bench-")
    progress(f"sections {','.join(sections)}; starting PostgreSQL and the Kafka mock cluster "
             f"(work dir {work})")
    mock, kafka = start_kafka_mock(work)
    registry_proc, registry = start_registry(work)
    nats = NatsServer()
    create_topics(mock, BENCH_TOPICS + tuple(f"cdc.public.{t}" for t, _, _ in latency_runs(args)))
    results = {"args": {"scale": args.scale, "repeat": args.repeat, "only": sections}}
    try:
        # Server defaults but for logical decoding and crash safety we do not need in a benchmark;
        # logical_decoding_work_mem stays at its default (64MB). Slots: one per drain consumer, run
        # and backlog (25 with --baseline), three per latency run and binary, 16 for the backfill
        # and trigger sections' cdc runs (a run with --baseline ran out of slots in the growth
        # sections without them), and the growth sections' (dropped after use, at most 4 per
        # subscription variant at a time).
        slots = 25 * args.repeat * 2 + 3 * args.latency_runs * 2 + 16 + 4 * len(SUBSCRIPTION_VARIANTS)
        with TempPostgres(version=args.pg_version, max_wal_size="4GB", checkpoint_timeout="30min",
                          max_replication_slots=max(20, slots)) as pg:
            results["machine"] = machine(pg)
            results["machine"]["note"] = args.note
            if "drain" in sections:
                results["drain"] = [
                    {"name": name, "label": label, "rows": rows, "conn": conn, "consumers": r}
                    for name, label, rows, conn, r in drain_backlogs(args, pg, work, kafka, nats, registry)]
            if "latency" in sections:
                results["latency"] = latencies(args, pg, work, kafka)
            if "backfill" in sections:
                results["backfill"] = backfills(args, pg, work)
            if "trigger" in sections:
                results["trigger"] = trigger_queue(args, pg, work)
            if "subscriptions" in sections:
                variants = growth_subscriptions(args, pg, work)
                results["subscriptions"] = variants.pop("half")
                results.update({f"subscriptions_{v}": r for v, r in variants.items()})
            if "consumers" in sections:
                results["consumers"] = growth_consumers(args, pg, work)
            if "tables" in sections:
                results["tables"] = growth_tables(args, pg, work)
            if "scale" in sections:
                import backfill_scale
                results["scale"] = backfill_scale.run(args, pg, work)
    finally:
        mock.stdin.close()
        mock.wait(30)
        registry_proc.terminate()
        registry_proc.wait(30)
        nats.close()

    if args.keep:
        progress(f"kept {work}")
    else:
        for d in [work] + SHORT_DIRS:
            shutil.rmtree(d, ignore_errors=True)

    import report
    md = report.write(results, args.out)
    print()
    print(md)
    progress(f"wrote {os.path.join(args.out, 'results.md')} and its charts")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--latency-consumer"]:
        latency_consumer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1:2] == ["--trigger-worker"]:
        trigger_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
