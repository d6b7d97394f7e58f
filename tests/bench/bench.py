"""bench.py (`make bench`): how fast cdc drains a slot compared with pg_recvlogical.

Two backlogs, each created before any consumer runs:
  a) one transaction inserting 1,000,000 rows (the server streams it: larger than
     logical_decoding_work_mem, default 64MB);
  b) 100,000 single-row transactions (a DO block that COMMITs after every row).
Before each backlog is written, pgoutput slots are created at the same point, one per consumer;
afterwards they are drained by
  - pg_recvlogical (output to /dev/null),
  - `cdc run --endpos` with a stdout subscription on the table (stdout to /dev/null),
  - `cdc run --endpos` with a Kafka subscription into the librdkafka mock cluster,
  - `cdc run` with a socket subscription (spooled under state_dir) and, started as soon as the
    subscriber socket exists, `cdc tail --count ROWS` (stdout to /dev/null) acking every event;
    timed from cdc's start until tail exits with every event, then cdc gets SIGTERM,
all with the pgoutput options cdc uses on this server (proto_version 3, messages, streaming,
two_phase on PostgreSQL 15). The consumers run one after the other, never together (the machine has
two cores). Each is timed from start to exit; peak RSS is cdc's (pg_recvlogical's), never tail's.

Each consumer drains the backlog --repeat times (default 3, each from a slot of its own, the
consumers taking turns); the table shows the median run. Prints one progress line per phase, then
a table: rows, events/s of each consumer and the ratio cdc / pg_recvlogical; and one of peak RSS.

Then latency at a steady 5,000 single-row transactions/s (pgbench --rate, synchronous commit):
commit time to Kafka delivery report (measured by cdc itself), and commit time to a Python consumer
of the subscriber socket (tests/subscriber_client.py, acking each Delivery) reading the event,
measured by that consumer from the event's commit_time (same machine, same clock).

Options: --scale 0.1 for a quick run, --keep to leave the server's temp dir (printed) in place.
"""

import argparse
import math
import re
import select
import shutil
import signal
from statistics import median
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import psycopg2.errors  # noqa: E402
from pg import TempPostgres  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CDC_BIN = os.environ.get("CDC_BIN", os.path.join(ROOT, "build", "cdc"))
KAFKA_MOCK_BIN = os.environ.get("KAFKA_MOCK_BIN", os.path.join(ROOT, "build", "tests", "kafka_mock"))
GNU_TIME = "/usr/bin/time"  # Debian package "time" (deploy/deps.sh bench)
T0 = time.monotonic()


def progress(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def pgoutput_options(server_version):
    """The START_REPLICATION options cdc sends to this server version (cdc/daemon/source.c)."""
    if server_version >= 160000:
        return {"proto_version": "4", "messages": "true", "streaming": "parallel",
                "two_phase": "on"}
    if server_version >= 150000:
        return {"proto_version": "3", "messages": "true", "streaming": "on", "two_phase": "on"}
    if server_version >= 140000:
        return {"proto_version": "2", "messages": "true", "streaming": "on"}
    return {"proto_version": "1"}


def timed_run(args, stdout, stderr_path):
    """Runs args to completion; returns (exit code, seconds, peak RSS in MiB).

    The peak RSS comes from GNU time (%M), not from os.wait4(): Linux carries a process's RSS
    high-water mark across execve(), so a direct child of this Python process would report at
    least Python's own RSS. GNU time is small, so what it measures is the program's own."""
    rss_path = stderr_path + ".rss"
    with open(stderr_path, "wb") as err:
        start = time.monotonic()
        p = subprocess.Popen([GNU_TIME, "-f", "%M", "-o", rss_path] + args, stdout=stdout,
                             stderr=err, stdin=subprocess.DEVNULL)
        rc = p.wait()
        elapsed = time.monotonic() - start
    with open(rss_path) as f:
        # GNU time writes "Command exited with non-zero status N" before %M on failure.
        kib = int(f.read().split()[-1])
    return rc, elapsed, kib / 1024.0


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
    Returns cdc's peak RSS in MiB."""
    os.kill(child_pid(p.pid), signal.SIGTERM)
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit(f"bench: cdc did not exit within {timeout}s of SIGTERM:\n{tail(err_path)}")
    if rc != 0:
        sys.exit(f"bench: cdc exited {rc} on SIGTERM:\n{tail(err_path)}")
    with open(err_path + ".rss") as f:
        return int(f.read().split()[-1]) / 1024.0


def wait_socket(path, p, err_path, since, timeout=60):
    """Waits for the Unix socket path to appear while process p runs."""
    while not os.path.exists(path):
        if p.poll() is not None:
            sys.exit(f"bench: cdc exited {p.returncode} before making {path}:\n{tail(err_path)}")
        if time.monotonic() - since > timeout:
            sys.exit(f"bench: no {path} after {timeout}s:\n{tail(err_path)}")
        time.sleep(0.002)


def socket_run(cdc_cmd, sock, rows, err_path):
    """Starts cdc_cmd (under GNU time) and, once sock exists, `cdc tail --count rows`; returns
    (seconds from cdc's start until tail exits with every event, cdc's peak RSS in MiB) after
    stopping cdc with SIGTERM."""
    tail_err = err_path + ".tail"
    with open(err_path, "wb") as err:
        start = time.monotonic()
        cdc = subprocess.Popen([GNU_TIME, "-f", "%M", "-o", err_path + ".rss"] + cdc_cmd,
                               stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    timeout = 120
    cmd = [CDC_BIN, "tail", "-s", sock, "bench", "--count", str(rows), "--timeout", str(timeout)]
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
    return secs, stop_cdc(cdc, err_path)


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


def write_config(path, pg, slot, pub, table, state_dir, sink="stdout", kafka=None):
    """A cdc config with one subscription bench on table, to sink (stdout, kafka at bootstrap
    kafka, or socket). Returns the subscriber socket's path."""
    socks = socket_dir(state_dir)
    events_sock = os.path.join(socks, "events.sock")
    with open(path, "w") as f:
        f.write(
            "source:\n"
            f'  dsn: "{pg.dsn}"\n'
            f"  slot: {slot}\n"
            f"  publication: {pub}\n"
            "  create: false\n"
            f"state_dir: {state_dir}\n"
            "status:\n"
            f"  socket: {os.path.join(socks, 'status.sock')}\n"
            "subscribers:\n"
            f"  socket: {events_sock}\n"
            + (f'kafka:\n  brokers: "{kafka}"\n' if kafka else "")
            + "subscriptions:\n"
            "  - name: bench\n"
            f'    tables: ["public.{table}"]\n'
            f"    sink: {sink}\n")
    return events_sock


def start_kafka_mock(work):
    """The librdkafka mock cluster program (make builds it); returns (process, bootstrap)."""
    p = subprocess.Popen([KAFKA_MOCK_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=open(os.path.join(work, "kafka_mock.stderr"), "wb"), text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("bootstrap="):
        sys.exit(f"bench: {KAFKA_MOCK_BIN} did not start: {line!r}")
    return p, line.split("=", 1)[1]


def slot_backlog(pg, slot, endpos, pub):
    """Messages left in slot up to endpos, once the consumer's walsender has let go of it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return pg.sql("select count(*) from pg_logical_slot_peek_binary_changes("
                          "%s, %s, null, 'proto_version', '1', 'publication_names', %s)",
                          (slot, endpos, pub))[0][0]
        except psycopg2.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def drain_backlogs(args, pg, work, kafka):
    """Creates both backlogs, then drains each with every consumer, --repeat times, taking turns."""
    big_rows = int(1_000_000 * args.scale)
    small_txns = int(100_000 * args.scale)
    opts = pgoutput_options(int(pg.sql("show server_version_num")[0][0]))
    recvlogical = os.path.join(pg.bindir, "pg_recvlogical")
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
    consumers = ("pg_recvlogical", "cdc_stdout", "cdc_kafka", "cdc_socket")
    plan = []
    for name, label, rows, gen in backlogs:
        table, pub = f"bench_{name}", f"bench_pub_{name}"
        pg.sql(f"create table {table} (id int8 primary key, name text not null, "
               "amount numeric(12,2), created timestamptz not null)")
        pg.sql(f"create publication {pub} for table {table}")
        slots = [{c: f"bench_{name}_{c}_{i}" for c in consumers} for i in range(args.repeat)]
        for run in slots:
            for slot in run.values():
                pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        progress(f"backlog {name}: writing {label}")
        t = time.monotonic()
        pg.sql(gen)
        endpos = pg.current_wal_lsn()
        progress(f"backlog {name}: written in {time.monotonic() - t:.1f}s, up to {endpos}")
        plan.append((name, label, rows, table, pub, slots, endpos))

    results = []
    for name, label, rows, table, pub, slots, endpos in plan:
        runs = {c: [] for c in consumers}
        for i, run in enumerate(slots):
            for c in consumers:
                slot = run[c]
                err = os.path.join(work, f"{c}_{name}_{i}.stderr")
                if c == "pg_recvlogical":
                    cmd = [recvlogical, "-d", pg.dsn, "--start", "-S", slot, "-f", "/dev/null",
                           "--endpos", endpos, "--no-loop", "-o", f"publication_names={pub}"]
                    for k, v in opts.items():
                        cmd += ["-o", f"{k}={v}"]
                else:
                    state = os.path.join(work, f"state_{c}_{name}_{i}")
                    os.makedirs(state)
                    cfg = os.path.join(work, f"{c}_{name}_{i}.yaml")
                    sink = c.split("_", 1)[1]
                    sock = write_config(cfg, pg, slot, pub, table, state, sink,
                                        kafka if sink == "kafka" else None)
                    cmd = [CDC_BIN, "run", "-c", cfg, "--endpos", endpos]
                if c == "cdc_socket":
                    # No --endpos: cdc serves the spool until the consumer has every event.
                    secs, rss = socket_run([CDC_BIN, "run", "-c", cfg], sock, rows, err)
                else:
                    rc, secs, rss = timed_run(cmd, subprocess.DEVNULL, err)
                    if rc != 0:
                        sys.exit(f"bench: {c} exited {rc}:\n{tail(err)}")
                runs[c].append((secs, rss))
                # It consumed the whole backlog: nothing is left to decode in its slot up to
                # endpos (the confirmed position itself may stop short of endpos, at the last commit).
                left = slot_backlog(pg, slot, endpos, pub)
                if left:
                    sys.exit(f"bench: slot {slot} still has {left} messages before {endpos}")
            progress(f"backlog {name}, run {i + 1}/{len(slots)}: " +
                     ", ".join(f"{c} {runs[c][-1][0]:.2f}s" for c in consumers))
        results.append((name, label, rows,
                        {c: (median([r[0] for r in runs[c]]), max(r[1] for r in runs[c])) for c in consumers}))
    return results


LATENCY_RE = re.compile(r"latency_p50_ms=([0-9.]+) latency_p99_ms=([0-9.]+) latency_max_ms=([0-9.]+)")


def run_pgbench(pg, work, table, rate, seconds):
    """Single-row insert transactions into table at rate/s for seconds; returns pgbench's tps."""
    script = os.path.join(work, f"latency_{table}.sql")
    with open(script, "w") as f:
        f.write(f"insert into {table} (name, amount, created) values ('customer', 12.50, now());\n")
    out = subprocess.run([os.path.join(pg.bindir, "pgbench"), "-n", "-R", str(rate), "-T", str(seconds),
                          "-c", "4", "-j", "2", "-f", script, pg.dsn],
                         capture_output=True, text=True,
                         # Commits reach the walsender only once flushed: with the test server's
                         # asynchronous commit that waits for the WAL writer (200 ms).
                         env=dict(os.environ, PGOPTIONS="-c synchronous_commit=on"))
    if out.returncode != 0:
        sys.exit(f"bench: pgbench failed:\n{out.stderr[-2000:]}")
    tps = re.search(r"tps = ([0-9.]+)", out.stdout)
    return float(tps.group(1)) if tps else float("nan")


def kafka_latency(args, pg, work, kafka, rate=5000, seconds=10):
    """Commit time to delivery report at a steady rate of single-row transactions (pgbench
    --rate), measured by cdc itself (its kafka log line at stop)."""
    pg.sql("create table bench_l (id bigserial primary key, name text not null, "
           "amount numeric(12,2), created timestamptz not null)")
    pg.sql("create publication bench_pub_l for table bench_l")
    pg.sql("select pg_create_logical_replication_slot('bench_l', 'pgoutput')")
    state = os.path.join(work, "state_l")
    os.makedirs(state)
    cfg = os.path.join(work, "cdc_l.yaml")
    write_config(cfg, pg, "bench_l", "bench_pub_l", "bench_l", state, "kafka", kafka)
    err_path = os.path.join(work, "cdc_l.stderr")
    cdc = subprocess.Popen([CDC_BIN, "run", "-c", cfg], stdout=subprocess.DEVNULL,
                           stderr=open(err_path, "wb"), stdin=subprocess.DEVNULL)

    def confirmed_past(lsn):
        row = pg.sql("select confirmed_flush_lsn >= %s::pg_lsn from pg_replication_slots "
                     "where slot_name = 'bench_l'", (lsn,))
        return row and row[0][0]

    def wait_confirmed(lsn, timeout):
        deadline = time.monotonic() + timeout
        while not confirmed_past(lsn):
            if cdc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"bench: cdc did not confirm {lsn}:\n{tail(err_path)}")
            time.sleep(0.05)

    # Warm up: topic metadata and the idempotent producer's id, before the clock runs.
    pg.sql("insert into bench_l (name, amount, created) values ('warm-up', 0, now())")
    wait_confirmed(pg.current_wal_lsn(), 60)
    progress(f"latency: {rate} transactions/s for {seconds}s through cdc into the mock cluster")
    tps = run_pgbench(pg, work, "bench_l", rate, seconds)
    wait_confirmed(pg.current_wal_lsn(), 120)
    cdc.send_signal(signal.SIGTERM)
    if cdc.wait(60) != 0:
        sys.exit(f"bench: cdc exited {cdc.returncode}:\n{tail(err_path)}")
    with open(err_path) as f:
        m = LATENCY_RE.findall(f.read())
    if not m:
        sys.exit(f"bench: no latency line from cdc:\n{tail(err_path)}")
    p50, p99, mx = (float(x) for x in m[-1])
    return tps, p50, p99, mx


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


def socket_latency(args, pg, work, rate=5000, seconds=10, warmup=200):
    """Commit time to a Python consumer of the subscriber socket at a steady rate of single-row
    transactions (pgbench --rate): the consumer (latency_consumer, a process of its own) notes
    the time each Delivery is read, acks it, and reports every event's receive time minus its
    commit_time. The first warmup events (connection, first spool segment) are left out."""
    pg.sql("create table bench_s (id bigserial primary key, name text not null, "
           "amount numeric(12,2), created timestamptz not null)")
    pg.sql("create publication bench_pub_s for table bench_s")
    pg.sql("select pg_create_logical_replication_slot('bench_s', 'pgoutput')")
    state = os.path.join(work, "state_s")
    os.makedirs(state)
    cfg = os.path.join(work, "cdc_s.yaml")
    sock = write_config(cfg, pg, "bench_s", "bench_pub_s", "bench_s", state, "socket")
    err_path = os.path.join(work, "cdc_s.stderr")
    cons_err = os.path.join(work, "latency_consumer.stderr")
    out_path = os.path.join(work, "latency_consumer.txt")
    start = time.monotonic()
    cdc = subprocess.Popen([CDC_BIN, "run", "-c", cfg], stdout=subprocess.DEVNULL,
                           stderr=open(err_path, "wb"), stdin=subprocess.DEVNULL)
    consumer = None
    try:
        wait_socket(sock, cdc, err_path, start)
        # TMPDIR: subscriber_client compiles the .proto files into a temp dir it leaves behind.
        consumer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--latency-consumer",
                                     sock, str(warmup), out_path],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=open(cons_err, "wb"), text=True,
                                    env=dict(os.environ, TMPDIR=work))
        read_line(consumer, 60, "subscription", cons_err)
        pg.sql(f"do $$ begin for i in 1..{warmup} loop insert into bench_s (name, amount, created) "
               f"values ('warm-up', 0, now()); commit; end loop; end $$")
        read_line(consumer, 60, "warm-up events", cons_err)
        progress(f"latency: {rate} transactions/s for {seconds}s through cdc to a socket consumer")
        tps = run_pgbench(pg, work, "bench_s", rate, seconds)
        total = pg.sql("select count(*) from bench_s")[0][0]
        consumer.stdin.write(f"{total}\n")
        consumer.stdin.flush()
        done = dict(kv.split("=") for kv in read_line(consumer, 120, "end of the events", cons_err)[1:])
        if consumer.wait(30) != 0:
            sys.exit(f"bench: latency consumer exited {consumer.returncode}:\n{tail(cons_err)}")
        cdc.send_signal(signal.SIGTERM)
        if cdc.wait(60) != 0:
            sys.exit(f"bench: cdc exited {cdc.returncode}:\n{tail(err_path)}")
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
    p50, p99, mx = (percentile(v, 0.5) / 1000, percentile(v, 0.99) / 1000, v[-1] / 1000)
    progress(f"latency: socket consumer used {float(done['cpu']):.1f}s of CPU in "
             f"{float(done['wall']):.1f}s for {len(v)} events in {done['deliveries']} deliveries")
    return tps, p50, p99, mx


def latency_consumer(sock, warmup, out_path):
    """The measuring consumer of socket_latency, run as `bench.py --latency-consumer SOCK WARMUP
    OUT`. Prints "subscribed", then "warm" once offset warmup arrived; reads the number of events
    to expect on stdin; once they are all in, writes "offset latency_us" lines to OUT (events past
    the warm-up) and prints "done cpu=S wall=S deliveries=N"."""
    import resource
    import subscriber_client as sc

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


def print_table(hdr, rows_out):
    widths = [max(len(r[i]) for r in rows_out + [hdr]) for i in range(len(hdr))]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    for r in rows_out:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies both backlog sizes")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--repeat", type=int, default=3, help="runs per consumer (median reported)")
    args = ap.parse_args()
    for binary in (CDC_BIN, KAFKA_MOCK_BIN, GNU_TIME):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            sys.exit(f"bench: {binary} missing (make bench builds and installs what it needs)")

    work = tempfile.mkdtemp(prefix="cdc-bench-")
    progress(f"starting PostgreSQL and the Kafka mock cluster (work dir {work})")
    mock, kafka = start_kafka_mock(work)
    try:
        # Server defaults but for logical decoding and crash safety we do not need in a benchmark;
        # logical_decoding_work_mem stays at its default (64MB). Slots: one per consumer, run and
        # backlog (4 x 3 x 2 by default), and two for latency.
        slots = 4 * args.repeat * 2 + 2
        with TempPostgres(max_wal_size="4GB", checkpoint_timeout="30min",
                          max_replication_slots=max(20, slots)) as pg:
            results = drain_backlogs(args, pg, work, kafka)
            latency = kafka_latency(args, pg, work, kafka)
            socket_lat = socket_latency(args, pg, work)
    finally:
        mock.stdin.close()
        mock.wait(30)

    if args.keep:
        progress(f"kept {work}")
    else:
        for d in [work] + SHORT_DIRS:
            shutil.rmtree(d, ignore_errors=True)

    print()
    print(f"Draining a backlog: median of {args.repeat} runs per consumer; ratio: to pg_recvlogical")
    rows_out = []
    for name, label, rows, r in results:
        base = r["pg_recvlogical"][0]
        row = [f"{name}: {label}", f"{rows:,}", f"{rows / base:,.0f}"]
        for c in ("cdc_stdout", "cdc_kafka", "cdc_socket"):
            row += [f"{rows / r[c][0]:,.0f}", f"{base / r[c][0]:.2f}"]
        rows_out.append(row)
    print_table(("backlog", "rows", "pg_recvlogical ev/s", "cdc->stdout ev/s", "ratio", "cdc->kafka ev/s",
                 "ratio", "cdc->socket->tail ev/s", "ratio"), rows_out)
    print()
    print("Peak RSS (the highest of the runs; for the socket: cdc's, not tail's)")
    print_table(("backlog", "RSS stdout", "RSS kafka", "RSS socket", "RSS pg_recvlogical"),
                [[f"{name}: {label}"] + [f"{r[c][1]:.1f} MiB" for c in
                                         ("cdc_stdout", "cdc_kafka", "cdc_socket", "pg_recvlogical")]
                 for name, label, rows, r in results])
    print()
    print("Commit time to delivery, single-row transactions:")
    print_table(("path", "rate (pgbench tps)", "p50", "p99", "max"),
                [(what, f"{tps:,.0f}", f"{p50:.2f} ms", f"{p99:.2f} ms", f"{mx:.2f} ms")
                 for what, (tps, p50, p99, mx) in
                 (("Kafka delivery report (mock cluster)", latency),
                  ("socket, read by a Python consumer", socket_lat))])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--latency-consumer"]:
        latency_consumer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
