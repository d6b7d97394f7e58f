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
from statistics import median
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from pg import TempPostgres  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CDC_BIN = os.environ.get("CDC_BIN", os.path.join(ROOT, "build", "cdc"))
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


def write_config(path, pg, slot, pub, table, state_dir):
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
            "subscriptions:\n"
            "  - name: bench\n"
            f'    tables: ["public.{table}"]\n'
            "    sink: stdout\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies both backlog sizes")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--repeat", type=int, default=3, help="runs per consumer (median reported)")
    args = ap.parse_args()
    big_rows = int(1_000_000 * args.scale)
    small_txns = int(100_000 * args.scale)

    if not os.access(CDC_BIN, os.X_OK) or not os.path.isfile(CDC_BIN):
        sys.exit(f"bench: {CDC_BIN} not built (run make)")
    if not os.access(GNU_TIME, os.X_OK):
        sys.exit(f"bench: {GNU_TIME} missing (deploy/deps.sh bench installs it)")

    work = tempfile.mkdtemp(prefix="cdc-bench-")
    progress(f"starting PostgreSQL (work dir {work})")
    # Server defaults but for logical decoding and crash safety we do not need in a benchmark;
    # logical_decoding_work_mem stays at its default (64MB).
    with TempPostgres(max_wal_size="4GB", checkpoint_timeout="30min") as pg:
        version = int(pg.sql("show server_version_num")[0][0])
        opts = pgoutput_options(version)
        recvlogical = os.path.join(pg.bindir, "pg_recvlogical")
        progress(f"PostgreSQL {version} at {pg.dsn}; pgoutput options "
                 + " ".join(f"{k}={v}" for k, v in opts.items()))

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
        plan = []
        for name, label, rows, gen in backlogs:
            table, pub = f"bench_{name}", f"bench_pub_{name}"
            pg.sql(f"create table {table} (id int8 primary key, name text not null, "
                   "amount numeric(12,2), created timestamptz not null)")
            pg.sql(f"create publication {pub} for table {table}")
            slots = [(f"bench_{name}_recvlogical_{i}", f"bench_{name}_cdc_{i}") for i in range(args.repeat)]
            for pair in slots:
                for s in pair:
                    pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (s,))
            progress(f"backlog {name}: writing {label}")
            t = time.monotonic()
            pg.sql(gen)
            endpos = pg.current_wal_lsn()
            progress(f"backlog {name}: written in {time.monotonic() - t:.1f}s, up to {endpos}")
            plan.append((name, label, rows, table, pub, slots, endpos))

        results = []
        for name, label, rows, table, pub, slots, endpos in plan:
            runs_r, runs_c = [], []
            for i, (slot_r, slot_c) in enumerate(slots):
                cmd = [recvlogical, "-d", pg.dsn, "--start", "-S", slot_r, "-f", "/dev/null",
                       "--endpos", endpos, "--no-loop", "-o", f"publication_names={pub}"]
                for k, v in opts.items():
                    cmd += ["-o", f"{k}={v}"]
                err = os.path.join(work, f"recvlogical_{name}_{i}.stderr")
                rc, secs, rss = timed_run(cmd, subprocess.DEVNULL, err)
                if rc != 0:
                    sys.exit(f"bench: pg_recvlogical exited {rc}:\n{tail(err)}")
                runs_r.append((secs, rss))

                state = os.path.join(work, f"state_{name}_{i}")
                os.makedirs(state)
                cfg = os.path.join(work, f"cdc_{name}_{i}.yaml")
                write_config(cfg, pg, slot_c, pub, table, state)
                err = os.path.join(work, f"cdc_{name}_{i}.stderr")
                rc, secs, rss = timed_run([CDC_BIN, "run", "-c", cfg, "--endpos", endpos],
                                          subprocess.DEVNULL, err)
                if rc != 0:
                    sys.exit(f"bench: cdc exited {rc}:\n{tail(err)}")
                runs_c.append((secs, rss))
                progress(f"backlog {name}, run {i + 1}/{len(slots)}: pg_recvlogical "
                         f"{runs_r[-1][0]:.2f}s, cdc {secs:.2f}s")

                # Both consumed the whole backlog: nothing is left to decode in their slots up to
                # endpos (the confirmed position itself may stop short of endpos, at the last commit).
                for s in (slot_r, slot_c):
                    left = pg.sql("select count(*) from pg_logical_slot_peek_binary_changes("
                                  "%s, %s, null, 'proto_version', '1', 'publication_names', %s)",
                                  (s, endpos, pub))[0][0]
                    if left:
                        sys.exit(f"bench: slot {s} still has {left} messages before {endpos}")
            secs_r, secs_c = median([r[0] for r in runs_r]), median([r[0] for r in runs_c])
            rss_r, rss_c = max(r[1] for r in runs_r), max(r[1] for r in runs_c)
            results.append((name, label, rows, secs_r, secs_c, rss_r, rss_c))

    if args.keep:
        progress(f"kept {work}")
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"median of {args.repeat} runs per consumer; peak RSS: the highest of them")
    hdr = ("backlog", "rows", "pg_recvlogical ev/s", "cdc ev/s", "cdc/pg_recvlogical",
           "cdc peak RSS", "pg_recvlogical RSS")
    rows_out = []
    for name, label, rows, secs_r, secs_c, rss_r, rss_c in results:
        rows_out.append((f"{name}: {label}", f"{rows:,}", f"{rows / secs_r:,.0f}",
                         f"{rows / secs_c:,.0f}", f"{secs_r / secs_c:.2f}",
                         f"{rss_c:.1f} MiB", f"{rss_r:.1f} MiB"))
    widths = [max(len(r[i]) for r in rows_out + [hdr]) for i in range(len(hdr))]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths))))
    for r in rows_out:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
