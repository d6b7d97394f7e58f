"""backfill_scale.py: make bench's `scale` section (not in `all`): a backfill of a large table,
about 10 GB at the default 50,000,000 rows (each about 200 bytes), read by cdc into a stdout
subscription (to /dev/null) while a light load (--scale-rate single-row transactions/s into another
table of the publication) keeps the stream busy. Every 2 seconds it samples cdc's RSS, the oldest
open transaction of cdc's backfill connections (pg_stat_activity's xact_start), the WAL the slot
holds back (the server's position minus the slot's restart_lsn) and the rows read; the same table
is read once with psql's \\copy to /dev/null. Reported: rows/s and the ratio to psql's, RSS after the
first minute against the first minute's (flat: within 10%), the longest transaction, the largest
WAL held back.

    make bench BENCH_ARGS="--only scale"                          # 50,000,000 rows (the full run)
    make bench BENCH_ARGS="--only scale --scale-rows 2000000"     # a short run, about a minute
    make bench BENCH_ARGS="--only scale --scale-backfill max_rows=20000"   # other backfill settings
"""

import os
import subprocess
import sys
import threading
import time

import bench


def create(pg, table, rows):
    """The table, filled in batches of 5,000,000 rows (each a transaction), its key added last."""
    pg.sql(f"create table {table} (id int8 not null, name text not null, amount numeric(12,2), "
           "created timestamptz not null, note text not null)")
    step = 5_000_000
    for lo in range(1, rows + 1, step):
        hi = min(lo + step - 1, rows)
        pg.sql(f"insert into {table} select g, 'customer ' || g, (g % 100000) / 100.0, now(), "
               f"repeat(md5(g::text), 4) from generate_series({lo}, {hi}) g")
        bench.progress(f"scale: {hi:,} of {rows:,} rows")
    pg.sql(f"alter table {table} add primary key (id)")
    pg.sql(f"vacuum analyze {table}")
    return pg.sql(f"select pg_total_relation_size('{table}')")[0][0]


class Sampler:
    """Every 2 s: cdc's RSS, the oldest open transaction of its backfill connections, the WAL the
    slot holds back, the rows read so far."""

    def __init__(self, pg, pid, slot, status_sock):
        self.pg_conn = bench.psycopg2.connect(pg.dsn)
        self.pg_conn.autocommit = True
        self.pid, self.slot, self.sock, self.t0 = pid, slot, status_sock, time.monotonic()
        self.rows = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _one(self):
        with open(f"/proc/{self.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        with self.pg_conn.cursor() as cur:
            # A chunk is one query string (its snapshot, then its COPY) in a transaction of its own:
            # a transaction that began before its statement, or one left open between statements,
            # would hold more than one chunk. (Until 2026-11-29 this looked for a query that begins
            # with COPY, which a chunk's no longer does: it counted none.)
            chunk = "query like '%; COPY (SELECT %'"
            cur.execute("select coalesce(max(extract(epoch from clock_timestamp() - xact_start)), 0), "
                        "count(*) filter (where state like 'idle in transaction%' or state = 'active' "
                        f"and {chunk} and xact_start < query_start), "
                        f"count(*) filter (where state = 'active' and {chunk}) "
                        "from pg_stat_activity where application_name = 'cdc backfill'")
            xact, spanning, active = cur.fetchone()
            xact = float(xact)
            cur.execute("select pg_current_wal_lsn() - restart_lsn from pg_replication_slots "
                        "where slot_name = %s", (self.slot,))
            held = int(cur.fetchone()[0])
        try:
            read = sum(b["rows_read"] for b in bench.json.loads(bench.http_get(self.sock, "/backfills")))
        except (OSError, ValueError):
            read = None
        self.rows.append({"t": time.monotonic() - self.t0, "rss": rss, "xact": xact, "spanning": spanning,
                          "active": active, "held": held, "read": read})

    def _run(self):
        while not self._stop.is_set():
            try:
                self._one()
            except (OSError, StopIteration):
                return  # cdc is gone
            self._stop.wait(2.0)

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self.pg_conn.close()


def run(args, pg, work):
    table, side, rows = "bf_scale", "bf_scale_live", args.scale_rows
    size = create(pg, table, rows)
    pg.sql(f"create table {side} (id bigserial primary key, name text not null, amount numeric(12,2), "
           "created timestamptz not null)")
    pg.sql(f"create publication bench_pub_scale for table {table}, {side}")
    psql = os.path.join(pg.client_bindir, "psql")
    t = time.monotonic()
    subprocess.run([psql, "-d", pg.dsn, "-qAtc", f"\\copy (select * from {table}) to /dev/null"], check=True)
    copy_secs = time.monotonic() - t
    bench.progress(f"scale: psql \\copy of {rows:,} rows ({size / 2**30:.1f} GiB with its index) in "
                   f"{copy_secs:.1f}s")
    slot = "bench_scale"
    bench.new_slot(pg, slot)
    p, _, status_sock, err, start = bench.timed_cdc(
        pg, work, "scale", slot, "bench_pub_scale",
        [{"name": "scale", "tables": [f"public.{table}"], "sink": "stdout", "snapshot": "true"},
         {"name": "live", "tables": [f"public.{side}"], "sink": "stdout"}],
        backfill=settings(args.scale_backfill))
    bench.wait_socket(status_sock, p, err, start)
    sampler = Sampler(pg, bench.child_pid(p.pid), slot, status_sock)
    script = os.path.join(work, "scale_load.sql")
    with open(script, "w") as f:
        f.write(f"insert into {side} (name, amount, created) values ('customer', 12.50, now());\n")
    load = subprocess.Popen([os.path.join(pg.client_bindir, "pgbench"), "-n", "-R", str(args.scale_rate),
                             "-T", "86400", "-c", "2", "-j", "1", "-f", script, pg.dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PGOPTIONS="-c synchronous_commit=on"))
    bench.backfills_done(status_sock, p, err, pause=0.5)
    secs = time.monotonic() - start
    sampler.stop()
    load.terminate()
    load.wait(30)
    peak, cpu = bench.stop_cdc(p, err)
    bench.drop_slot(pg, slot)
    samples = sampler.rows
    first = [s["rss"] for s in samples if s["t"] <= 60] or [samples[0]["rss"]]
    later = [s["rss"] for s in samples if s["t"] > 60]
    return {"rows": rows, "bytes": size, "copy_secs": copy_secs, "secs": secs, "peak_rss": peak, "cpu": cpu,
            "rss_first_minute": max(first), "rss_after": max(later) if later else None,
            "rss_after_min": min(later) if later else None, "longest_xact": max(s["xact"] for s in samples),
            "spanning": sum(s["spanning"] for s in samples), "active": sum(s["active"] for s in samples),
            "max_held": max(s["held"] for s in samples), "held_by_quarter": quarters(samples, "held"),
            "rate": args.scale_rate, "backfill": args.scale_backfill, "samples": samples}


def settings(spec):
    """--scale-backfill's KEY=VALUE,... as a dict (None when empty: cdc's defaults)."""
    pairs = [p.split("=", 1) for p in spec.split(",") if p]
    if any(len(p) != 2 for p in pairs):
        sys.exit(f"bench: --scale-backfill wants KEY=VALUE,...: {spec!r}")
    return dict(pairs) or None


def quarters(samples, key):
    """The largest value of key in each quarter of the run (bounded: the last no larger than the
    first's order)."""
    n = len(samples)
    return [max(s[key] for s in samples[n * i // 4:max(n * (i + 1) // 4, n * i // 4 + 1)]) for i in range(4)]


def markdown(s):
    rows = s["rows"]
    if s["rss_after"] is None:
        rss = f"at most {s['rss_first_minute']:.1f} MiB (the run took less than a minute)"
    else:
        flat = s["rss_after"] <= 1.1 * s["rss_first_minute"] and s["rss_after"] <= 1.1 * s["rss_after_min"]
        rss = (f"at most {s['rss_first_minute']:.1f} MiB in the first minute, {s['rss_after_min']:.1f} to "
               f"{s['rss_after']:.1f} MiB after it ({'flat' if flat else 'NOT flat'}: within 10%)")
    if s["spanning"] == 0:
        xacts = (f"none of the {s['active']:,} chunk COPYs seen running was in a transaction begun before it, "
                 "and no backfill connection was seen idle in a transaction: each transaction was one "
                 "chunk's COPY")
    else:
        xacts = (f"{s['spanning']:,} times a backfill connection was seen idle in a transaction or running a "
                 f"COPY in a transaction begun before it ({s['active']:,} COPYs seen): a transaction longer "
                 "than one chunk")
    held = ", ".join(f"{h / 2**20:.1f}" for h in s["held_by_quarter"])
    return ["## A large table", "",
            f"A backfill of {rows:,} rows ({s['bytes'] / 2**30:.1f} GiB with its index) into a stdout "
            f"subscription (to /dev/null{'; backfill: ' + s['backfill'] if s.get('backfill') else ''}) while "
            f"{s['rate']:,} single-row transactions/s go to another table "
            f"of the publication: {int(rows / s['secs']):,} rows/s, **{s['copy_secs'] / s['secs']:.2f}** of "
            f"psql \\copy's {int(rows / s['copy_secs']):,} rows/s; cdc's CPU {s['cpu'] / rows * 1e6:.2f} µs "
            f"per row. cdc's RSS: {rss}, peak {s['peak_rss']:.1f} MiB. The longest transaction of cdc's "
            f"backfill connections: {s['longest_xact']:.2f} s; {xacts}. The most WAL the slot held back: "
            f"{s['max_held'] / 2**20:.1f} MiB (the most in each quarter of the run: {held} MiB). Sampled "
            "every 2 s.", ""]
