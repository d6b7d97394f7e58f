"""bench.py (`make bench`): how fast cdc drains a slot compared with pg_recvlogical.

Two backlogs, each created before any consumer runs:
  a) one transaction inserting 1,000,000 rows (the server streams it: larger than
     logical_decoding_work_mem, default 64MB);
  b) 100,000 single-row transactions (a DO block that COMMITs after every row).
Before each backlog is written, two pgoutput slots are created at the same point; afterwards one is
drained by pg_recvlogical (output to /dev/null) and the other by `cdc run --endpos` with a stdout
subscription on the table (stdout to /dev/null), both with the pgoutput options cdc uses on this
server (proto_version 3, messages, streaming, two_phase on PostgreSQL 15). The consumers run one
after the other, never together (the machine has two cores). Each is timed from start to exit.

Each consumer drains the backlog --repeat times (default 3, each from a slot of its own, the two
consumers taking turns); the table shows the median run. Prints one progress line per phase, then
a table: rows, events/s of each consumer, the ratio cdc / pg_recvlogical, and peak RSS. Options:
--scale 0.1 for a quick run, --keep to leave the server's temp dir (printed) in place.
"""

import argparse
import re
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
    """The START_REPLICATION options cdc sends to this server version (cdc/source.c)."""
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


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def write_config(path, pg, slot, pub, table, state_dir, kafka=None):
    """A cdc config with one subscription on table: to stdout, or to Kafka at bootstrap kafka."""
    with open(path, "w") as f:
        f.write(
            "source:\n"
            f'  dsn: "{pg.dsn}"\n'
            f"  slot: {slot}\n"
            f"  publication: {pub}\n"
            "  create: false\n"
            f"state_dir: {state_dir}\n"
            "status:\n"
            f"  socket: {os.path.join(state_dir, 'status.sock')}\n"
            "subscribers:\n"
            f"  socket: {os.path.join(state_dir, 'events.sock')}\n"
            + (f'kafka:\n  brokers: "{kafka}"\n' if kafka else "")
            + "subscriptions:\n"
            "  - name: bench\n"
            f'    tables: ["public.{table}"]\n'
            f"    sink: {'kafka' if kafka else 'stdout'}\n")


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
    consumers = ("pg_recvlogical", "cdc_stdout", "cdc_kafka")
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
                    write_config(cfg, pg, slot, pub, table, state,
                                 kafka if c == "cdc_kafka" else None)
                    cmd = [CDC_BIN, "run", "-c", cfg, "--endpos", endpos]
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
    write_config(cfg, pg, "bench_l", "bench_pub_l", "bench_l", state, kafka)
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
    script = os.path.join(work, "latency.sql")
    with open(script, "w") as f:
        f.write("insert into bench_l (name, amount, created) values ('customer', 12.50, now());\n")
    progress(f"latency: {rate} transactions/s for {seconds}s through cdc into the mock cluster")
    out = subprocess.run([os.path.join(pg.bindir, "pgbench"), "-n", "-R", str(rate), "-T", str(seconds),
                          "-c", "4", "-j", "2", "-f", script, pg.dsn],
                         capture_output=True, text=True,
                         # Commits reach the walsender only once flushed: with the test server's
                         # asynchronous commit that waits for the WAL writer (200 ms).
                         env=dict(os.environ, PGOPTIONS="-c synchronous_commit=on"))
    if out.returncode != 0:
        sys.exit(f"bench: pgbench failed:\n{out.stderr[-2000:]}")
    tps = re.search(r"tps = ([0-9.]+)", out.stdout)
    wait_confirmed(pg.current_wal_lsn(), 120)
    cdc.send_signal(signal.SIGTERM)
    if cdc.wait(60) != 0:
        sys.exit(f"bench: cdc exited {cdc.returncode}:\n{tail(err_path)}")
    with open(err_path) as f:
        m = LATENCY_RE.findall(f.read())
    if not m:
        sys.exit(f"bench: no latency line from cdc:\n{tail(err_path)}")
    p50, p99, mx = (float(x) for x in m[-1])
    return float(tps.group(1)) if tps else float("nan"), p50, p99, mx


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
        # logical_decoding_work_mem stays at its default (64MB).
        with TempPostgres(max_wal_size="4GB", checkpoint_timeout="30min") as pg:
            results = drain_backlogs(args, pg, work, kafka)
            latency = kafka_latency(args, pg, work, kafka)
    finally:
        mock.stdin.close()
        mock.wait(30)

    if args.keep:
        progress(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"Draining a backlog: median of {args.repeat} runs per consumer (peak RSS: the highest)")
    rows_out = []
    for name, label, rows, r in results:
        base = rows / r["pg_recvlogical"][0]
        rows_out.append((f"{name}: {label}", f"{rows:,}", f"{base:,.0f}",
                         f"{rows / r['cdc_stdout'][0]:,.0f}", f"{r['pg_recvlogical'][0] / r['cdc_stdout'][0]:.2f}",
                         f"{rows / r['cdc_kafka'][0]:,.0f}", f"{r['pg_recvlogical'][0] / r['cdc_kafka'][0]:.2f}",
                         f"{r['cdc_stdout'][1]:.1f} MiB", f"{r['cdc_kafka'][1]:.1f} MiB",
                         f"{r['pg_recvlogical'][1]:.1f} MiB"))
    print_table(("backlog", "rows", "pg_recvlogical ev/s", "cdc->stdout ev/s", "ratio", "cdc->kafka ev/s",
                 "ratio", "RSS stdout", "RSS kafka", "RSS pg_recvlogical"), rows_out)
    tps, p50, p99, mx = latency
    print()
    print("Commit time to Kafka delivery report (mock cluster), single-row transactions:")
    print_table(("rate (pgbench tps)", "p50", "p99", "max"),
                [(f"{tps:,.0f}", f"{p50:.2f} ms", f"{p99:.2f} ms", f"{mx:.2f} ms")])


if __name__ == "__main__":
    main()
