"""soak.py (`make soak DURATION=SECONDS`): cdc under a steady load for a long time, sampled.

A steady --rate (2,000) single-row transactions/s (pgbench --rate, synchronous commit; four in five
insert a row, one in five updates one) runs for the whole duration into two cdc processes on two
slots of one PostgreSQL server:
  A: a stdout subscription (to /dev/null), a Kafka one (at least once, into the librdkafka mock
     cluster) and a socket one (`consumers: shared`) read by two `cdc tail` consumers that ack;
  B: a Kafka subscription with kafka.exactly_once.
At 40% of the duration a backfill of a --backfill-rows (500,000) row table starts on A; at 60% A is
restarted (SIGTERM, then started again, its consumers with it). Every --interval (10) seconds each
cdc's RSS and open descriptors, A's spool bytes, each slot's lag (bytes from the server's WAL
position to the slot's confirmed position) and the p99 of commit-to-delivery latency over the
interval for Kafka (to the delivery report; exactly once: to the commit) and the socket subscription
(to durably spooled), from cdc's own histograms on /metrics, are sampled (their buckets are coarse:
a p99 reads as the bucket's upper bound).

To tell where a latency jump comes from, each sample also has pgbench's mean commit latency over
the interval (`lat_pgbench`, start to commit without pgbench's schedule lag: the server's side),
the most any tick of each cdc's event loop came late in it (`loop_a`, `loop_b`: from
cdc_event_loop_lag_seconds; a jump with the loops on time was not cdc's loop holding them up), and
the p99 from a commit to cdc reading it from the slot (`recv_a`, `recv_b`: from
cdc_source_receive_latency_seconds; a jump there came late from the server), the longest group
commit of A's spools (`sync_a`: from cdc_socket_spool_sync_seconds, the writes and fsyncs a socket
transaction waits for; a socket jump with it is the disk's), and the run lists the server's autovacuums and
checkpoints (log_autovacuum_min_duration=0, log_checkpoints) and A's spool segment turnovers (a
drop of the spool's size). A jump is a sample whose p99 is more than one histogram bucket above the
run's median for that sink; soak.md lists each with what happened in its interval, and the picture
marks them (red: autovacuum of soak_t, blue: a spool turnover, black: a checkpoint).

Writes OUT/soak.md (the samples as a table and the verdict), soak.json and soak.png (matplotlib).
Flat means: after the warm-up (the first --warmup seconds, 60), the median of the last quarter of
the run is within 10% of the first quarter's (or within a small absolute slack: 2 MiB of RSS, 4
descriptors, 1 MiB of spool or of lag, 5 ms of p99). The verdict is printed; it is a measurement,
and the run exits 0 whatever it says (exit 1 only when the run itself fails).

    make soak DURATION=1800                       # 30 minutes
    CDC_PG_VERSION=17 /usr/bin/python3 tests/bench/soak.py --duration 300 --out build/soak
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import bench  # noqa: E402
from pg import TempPostgres  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CDC_BIN = bench.CDC_BIN
T0 = time.monotonic()
LOOP_RE = re.compile(r'^cdc_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\d+)$', re.M)
SYNC_RE = re.compile(r'^cdc_socket_spool_sync_seconds_bucket\{le="([^"]+)"\} (\d+)$', re.M)
# Per process, the most its event loop's ticks came late in the interval, and the p99 from a commit to
# cdc reading it from the slot (ms, the buckets' upper bounds): a latency jump with the loop on time
# was not cdc's loop; one whose commits were read late came late from the server. And the longest group
# commit of A's spools (ms).
LOOPS = ("loop_a", "loop_b", "recv_a", "recv_b", "sync_a")
# Figures, their unit and the absolute slack under which a difference is not a trend.
FIGURES = [("rss_a", "MiB", 2.0), ("rss_b", "MiB", 2.0), ("fds_a", "", 4), ("fds_b", "", 4),
           ("spool_a", "MiB", 1.0), ("lag_a", "MiB", 1.0), ("lag_b", "MiB", 1.0),
           ("p99_kafka", "ms", 5.0), ("p99_socket", "ms", 5.0),
           ("p99_kafka_eo", "ms", 5.0), ("lat_pgbench", "ms", 5.0)]
P99S = ("p99_kafka", "p99_socket", "p99_kafka_eo")
PGBENCH_RE = re.compile(r"^progress: ([\d.]+) s, [\d.]+ tps, lat ([\d.]+) ms .*?, lag ([\d.]+) ms", re.M)
# The server log's lines about what may stall it, and their kinds.
SERVER_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC .*?(automatic (?:aggressive )?vacuum of table "
                       r'"postgres\.public\.soak_t"|automatic analyze of table "postgres\.public\.soak_t"|'
                       r"checkpoint starting|checkpoint complete)", re.M)


def progress(msg):
    print(f"[{time.monotonic() - T0:8.1f}s] {msg}", flush=True)


def fail(msg):
    sys.exit(f"soak: {msg}")


class Cdc:
    """One `cdc run` process on its own config; restartable."""

    def __init__(self, work, name, cfg, status_sock):
        self.work, self.name, self.cfg, self.status_sock = work, name, cfg, status_sock
        self.p = None
        self.starts = 0

    def start(self):
        self.starts += 1
        err = os.path.join(self.work, f"{self.name}.{self.starts}.stderr")
        self.err = err
        self.p = subprocess.Popen([CDC_BIN, "run", "-c", self.cfg], stdout=subprocess.DEVNULL,
                                  stderr=open(err, "wb"), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.status_sock):
            if self.p.poll() is not None or time.monotonic() > deadline:
                fail(f"cdc {self.name} did not start:\n{bench.tail(err)}")
            time.sleep(0.05)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            fail(f"cdc {self.name} did not stop within 120 s of SIGTERM:\n{bench.tail(self.err)}")
        if rc != 0:
            fail(f"cdc {self.name} exited {rc} on SIGTERM:\n{bench.tail(self.err)}")

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def rss_mib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            kib = int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))
        return kib / 1024.0

    def fds(self):
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def buckets(self):
        """{sink: [(le, cumulative count)]} from /metrics; {} while it answers nothing."""
        try:
            text = bench.http_get(self.status_sock, "/metrics")
        except OSError:
            return {}
        out = {}
        for sink, le, n in bench.BUCKET_RE.findall(text):
            out.setdefault(sink, []).append((float(le), int(n)))
        out["event loop"] = [(float(le), int(n)) for le, n in LOOP_RE.findall(text)]
        out["received"] = [(float(le), int(n)) for le, n in bench.RECV_RE.findall(text)]
        out["spool sync"] = [(float(le), int(n)) for le, n in SYNC_RE.findall(text)]
        return out


def pgbench_latency(path):
    """[(seconds since pgbench started, mean latency in ms over its last progress interval)]: from
    a transaction's start to its commit, without pgbench's own schedule lag (-R)."""
    try:
        with open(path, errors="replace") as f:
            return [(float(t), round(float(ms) - float(lag), 3)) for t, ms, lag in PGBENCH_RE.findall(f.read())]
    except OSError:
        return []


def server_events(logfile, wall0):
    """[(seconds since the load started, kind)] of the autovacuums of soak_t and the checkpoints."""
    import calendar
    out = []
    with open(logfile, errors="replace") as f:
        for stamp, what in SERVER_RE.findall(f.read()):
            day, frac = stamp.split(".")
            at = calendar.timegm(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + float("0." + frac)
            kind = "checkpoint" if what.startswith("checkpoint") else \
                "autovacuum" if "vacuum" in what else "autoanalyze"
            out.append((round(at - wall0, 1), kind))
    return out


def jumps(rows, events, interval, bounds):
    """The samples whose p99 (some sink) is more than one bucket above that sink's median, each with
    what happened in its interval: [(t, {sink: p99}, [event kinds])]. bounds: the histogram's bucket
    bounds (ms). A spool turnover is a drop of A's spool by more than 10 MiB."""
    def bucket(ms):
        return next((i for i, b in enumerate(bounds) if ms <= b), len(bounds))
    med = {k: median(bucket(r[k]) for r in rows if r.get(k) is not None) for k in P99S
           if any(r.get(k) is not None for r in rows)}
    turns = [r["t"] for i, r in enumerate(rows) if i and r["spool_a"] < rows[i - 1]["spool_a"] - 10]
    out = []
    for r in rows:
        high = {k: r[k] for k in med if r.get(k) is not None and bucket(r[k]) > med[k] + 1}
        if not high:
            continue
        near = sorted({kind for at, kind in events if r["t"] - interval < at <= r["t"]} |
                      ({"spool turnover"} if r["t"] in turns else set()))
        out.append((r["t"], high, near))
    return out, turns


class Tails:
    """`cdc tail` consumers of a shared socket subscription, started again when they end (cdc's
    restart closes their connections)."""

    def __init__(self, work, sock, sub, n):
        self.work, self.sock, self.sub, self.n = work, sock, sub, n
        self.procs = [None] * n
        self.stopping = False

    def keep_running(self):
        for i, p in enumerate(self.procs):
            if self.stopping or (p is not None and p.poll() is None):
                continue
            self.procs[i] = subprocess.Popen(
                [CDC_BIN, "tail", "-s", self.sock, self.sub, "--consumer", f"soak{i}", "--timeout", "86400"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, f"tail{i}.stderr"), "ab"),
                stdin=subprocess.DEVNULL)

    def stop(self):
        self.stopping = True
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(30)


def config(path, pg, slot, pub, state_dir, kafka, subs, exactly_once=False):
    socks = bench.socket_dir(state_dir)
    status_sock, events_sock = os.path.join(socks, "status.sock"), os.path.join(socks, "events.sock")
    with open(path, "w") as f:
        f.write(f'source:\n  dsn: "{pg.dsn}"\n  slot: {slot}\n  publication: {pub}\n'
                f"state_dir: {state_dir}\nstatus:\n  socket: {status_sock}\n"
                f"subscribers:\n  socket: {events_sock}\n"
                f'kafka:\n  brokers: "{kafka}"\n  exactly_once: {"true" if exactly_once else "false"}\n'
                "subscriptions:\n" + subs)
    return status_sock, events_sock


def pgbench_script(work, table, keys):
    path = os.path.join(work, "soak.sql")
    with open(path, "w") as f:
        f.write(f"\\set k random(1, {keys})\n"
                "\\set r random(1, 5)\n"
                f"\\if :r = 5\nupdate {table} set v = v + 1, created = now() where id = :k;\n"
                f"\\else\ninsert into {table} (k, v, created) values (:k, 0, now());\n\\endif\n")
    return path


def sample(pg, a, b, state_a, t0):
    row = {"t": round(time.monotonic() - t0, 1)}
    for name, c in (("a", a), ("b", b)):
        row[f"rss_{name}"] = round(c.rss_mib(), 2) if c.alive() else None
        row[f"fds_{name}"] = c.fds() if c.alive() else None
    spool = 0
    for root, _, files in os.walk(os.path.join(state_a, "spool")):
        for fn in files:
            try:
                spool += os.path.getsize(os.path.join(root, fn))
            except OSError:
                pass
    row["spool_a"] = round(spool / 2**20, 2)
    for slot, key in (("soak_a", "lag_a"), ("soak_b", "lag_b")):
        lag = pg.sql("select pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) "
                     "from pg_replication_slots where slot_name = %s", (slot,))[0][0]
        row[key] = round(float(lag) / 2**20, 3)
    return row


def flat_verdict(rows, warmup):
    """Per figure: the medians of the first and last quarter after warm-up, and whether flat."""
    begin = warmup  # sample times are seconds since the load started
    span = rows[-1]["t"] - begin
    out = {}
    for fig, unit, slack in FIGURES:
        first = [r[fig] for r in rows if r.get(fig) is not None and begin <= r["t"] < begin + span / 4]
        last = [r[fig] for r in rows if r.get(fig) is not None and r["t"] >= begin + 3 * span / 4]
        if not first or not last:
            out[fig] = {"first": None, "last": None, "flat": None}
            continue
        f, l_ = median(first), median(last)
        flat = abs(l_ - f) <= max(0.10 * abs(f), slack)
        out[fig] = {"first": round(f, 3), "last": round(l_, 3), "flat": flat, "unit": unit}
    return out


def write_results(out, rows, verdict, meta, found=(), turns=(), events=()):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump({"meta": meta, "samples": rows, "verdict": verdict}, f, indent=1)
    cols = ["t"] + [f for f, _, _ in FIGURES] + list(LOOPS)
    lines = [f"# Soak: {meta['duration']} s at {meta['rate']} transactions/s",
             "",
             f"{meta['date']}, git {meta['git']}, PostgreSQL {meta['pg_version']}, "
             f"{meta['events']} rows written, backfill of {meta['backfill_rows']} rows at "
             f"{meta['backfill_at']} s, cdc A restarted at {meta['restart_at']} s.",
             "",
             "| figure | first quarter | last quarter | flat |",
             "|---|---:|---:|---|"]
    for fig, unit, _ in FIGURES:
        v = verdict[fig]
        lines.append(f"| {fig} ({unit or 'count'}) | {v['first']} | {v['last']} | "
                     f"{'yes' if v['flat'] else 'no' if v['flat'] is False else 'n/a'} |")
    lines += ["", f"p99 more than one bucket above its median (sink by sink): {len(found)} of {len(rows)} samples. "
              f"Server events in the run: {sum(k == 'autovacuum' for _, k in events)} autovacuums and "
              f"{sum(k == 'autoanalyze' for _, k in events)} autoanalyzes of soak_t, "
              f"{sum(k == 'checkpoint' for _, k in events) // 2} checkpoints; {len(turns)} spool turnovers.", ""]
    if found:
        lines += ["| t | p99 above (ms) | pgbench latency (ms) | event loop late, A / B (ms) | "
                  "commit to read, p99 A / B (ms) | A's longest spool group commit (ms) | in the interval |",
                  "|---:|---|---:|---:|---:|---:|---|"]
        at = {r["t"]: r for r in rows}
        for t, high, near in found:
            lines.append(f"| {t} | {', '.join(f'{k}={v}' for k, v in high.items())} | {at[t].get('lat_pgbench')} | "
                         f"{at[t].get('loop_a')} / {at[t].get('loop_b')} | "
                         f"{at[t].get('recv_a')} / {at[t].get('recv_b')} | {at[t].get('sync_a')} | "
                         f"{', '.join(near) or '-'} |")
    lines += ["", "Samples (MiB, ms):", "", "| " + " | ".join(cols) + " |",
              "|" + "---:|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in cols) + " |")
    with open(os.path.join(out, "soak.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("RSS (MiB)", ["rss_a", "rss_b"]), ("open descriptors", ["fds_a", "fds_b"]),
              ("spool (MiB)", ["spool_a"]), ("slot lag (MiB)", ["lag_a", "lag_b"]),
              ("p99 commit to delivery (ms)", ["p99_kafka", "p99_socket", "p99_kafka_eo", "lat_pgbench"]),
              ("event loop ticks late, most in the interval (ms)", ["loop_a", "loop_b"]),
              ("p99 commit to read from the slot (ms)", ["recv_a", "recv_b"]),
              ("longest spool group commit of A (ms)", ["sync_a"])]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.2 * len(panels)), sharex=True)
    for ax, (title, keys) in zip(axes, panels):
        for k in keys:
            pts = [(r["t"] / 60, r[k]) for r in rows if r.get(k) is not None and r[k] != float("inf")]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=k, linewidth=1)
        for at, what in ((meta["backfill_at"], "backfill"), (meta["restart_at"], "restart")):
            ax.axvline(at / 60, color="grey", linestyle=":", linewidth=1)
        if keys[0].startswith("p99"):  # what may cause a jump: autovacuum, spool turnover, checkpoint
            for at, kind in events:
                if kind != "autoanalyze":
                    ax.axvline(at / 60, color="red" if kind == "autovacuum" else "black", alpha=0.25, linewidth=1)
            for at in turns:
                ax.axvline(at / 60, color="blue", alpha=0.25, linewidth=1)
        ax.set_ylabel(title, fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (dotted: backfill start, cdc A restart)")
    fig.suptitle(f"cdc soak: {meta['rate']} tx/s for {meta['duration'] // 60} min", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak.png"), dpi=80)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=600)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--backfill-rows", type=int, default=500_000)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "soak"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cdc-soak-")
    progress(f"work dir {work}; PostgreSQL, the Kafka mock cluster")
    mock, kafka = bench.start_kafka_mock(work)
    bench.create_topics(mock, ("cdc.public.soak_t", "soak.eo", "cdc.positions"))
    tails = None
    cdcs = []
    pgb = None
    try:
        with TempPostgres(max_wal_size="4GB", checkpoint_timeout="30min", log_checkpoints=True,
                          log_autovacuum_min_duration=0) as pg:
            keys = 100_000
            pg.sql("create table soak_t (id bigserial primary key, k int not null, v int not null, "
                   "created timestamptz not null)")
            pg.sql(f"insert into soak_t (k, v, created) select g, 0, now() from generate_series(1, {keys}) g")
            pg.sql("create table soak_bf (id int8 primary key, name text not null, amount numeric(12,2), "
                   "created timestamptz not null)")
            pg.sql(f"insert into soak_bf select g, 'customer ' || g, (g % 100000) / 100.0, now() "
                   f"from generate_series(1, {args.backfill_rows}) g")
            pg.sql("create publication soak_pub for table soak_t, soak_bf")
            bench.settle(pg)
            for slot in ("soak_a", "soak_b"):
                pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            state_a, state_b = os.path.join(work, "state_a"), os.path.join(work, "state_b")
            os.makedirs(state_a)
            os.makedirs(state_b)
            subs_a = ('  - name: s_stdout\n    tables: ["public.soak_t"]\n    sink: stdout\n'
                      '  - name: s_kafka\n    tables: ["public.soak_t"]\n    sink: kafka\n'
                      '  - name: s_socket\n    tables: ["public.soak_t"]\n    sink: socket\n'
                      '    consumers: shared\n    ack_timeout: 30s\n'
                      '  - name: s_bf\n    tables: ["public.soak_bf"]\n    sink: stdout\n')
            subs_b = '  - name: s_eo\n    tables: ["public.soak_t"]\n    sink: kafka\n    topic: soak.eo\n'
            cfg_a, cfg_b = os.path.join(work, "a.yaml"), os.path.join(work, "b.yaml")
            status_a, events_a = config(cfg_a, pg, "soak_a", "soak_pub", state_a, kafka, subs_a)
            status_b, _ = config(cfg_b, pg, "soak_b", "soak_pub", state_b, kafka, subs_b, exactly_once=True)
            a, b = Cdc(work, "a", cfg_a, status_a), Cdc(work, "b", cfg_b, status_b)
            cdcs = [a, b]
            a.start()
            b.start()
            tails = Tails(work, events_a, "s_socket", args.consumers)
            tails.keep_running()
            script = pgbench_script(work, "soak_t", keys)
            progress(f"load: {args.rate} transactions/s for {args.duration} s")
            start_load, wall0 = time.monotonic(), time.time()
            pgb = subprocess.Popen([os.path.join(pg.client_bindir, "pgbench"), "-n", "-R", str(args.rate),
                                    "-T", str(args.duration), "-c", "4", "-j", "2",
                                    f"--progress={max(1, round(args.interval))}", "-f", script, pg.dsn],
                                   stdout=open(os.path.join(work, "pgbench.out"), "wb"),
                                   stderr=subprocess.STDOUT,
                                   env=dict(os.environ, PGOPTIONS="-c synchronous_commit=on"))
            backfill_at, restart_at = 0.4 * args.duration, 0.6 * args.duration
            backfilled = restarted = False
            rows, bounds = [], []
            last = {"a": a.buckets(), "b": b.buckets()}
            next_sample = time.monotonic() + args.interval
            while pgb.poll() is None:
                time.sleep(max(0.0, min(1.0, next_sample - time.monotonic())))
                tails.keep_running()
                for c in cdcs:
                    if not c.alive():
                        fail(f"cdc {c.name} exited {c.p.returncode}:\n{bench.tail(c.err)}")
                elapsed = time.monotonic() - start_load
                if not backfilled and elapsed >= backfill_at:
                    backfilled = True
                    out = subprocess.run([CDC_BIN, "backfill", "-s", status_a, "s_bf"], capture_output=True,
                                         text=True)
                    if out.returncode != 0:
                        fail(f"cdc backfill: {out.stdout}{out.stderr}")
                    progress(f"backfill of {args.backfill_rows} rows started: {out.stdout.strip()}")
                if not restarted and elapsed >= restart_at:
                    restarted = True
                    progress("restarting cdc A")
                    a.stop()
                    a.start()
                    last["a"] = a.buckets()
                if time.monotonic() < next_sample:
                    continue
                next_sample += args.interval
                row = sample(pg, a, b, state_a, start_load)
                now = {"a": a.buckets(), "b": b.buckets()}
                for sink, key in (("kafka", "p99_kafka"), ("socket", "p99_socket")):
                    row[key] = bench.p99_ms(last["a"].get(sink), now["a"].get(sink))
                row["p99_kafka_eo"] = bench.p99_ms(last["b"].get("kafka"), now["b"].get("kafka"))
                for name in ("a", "b"):
                    row[f"loop_{name}"] = bench.p99_ms(last[name].get("event loop"), now[name].get("event loop"), q=1)
                    row[f"recv_{name}"] = bench.p99_ms(last[name].get("received"), now[name].get("received"))
                row["sync_a"] = bench.p99_ms(last["a"].get("spool sync"), now["a"].get("spool sync"), q=1)
                lat = [ms for t, ms in pgbench_latency(os.path.join(work, "pgbench.out")) if t <= row["t"] + 0.5]
                row["lat_pgbench"] = lat[-1] if lat else None
                if now["a"].get("kafka"):
                    bounds = [le * 1000.0 for le, _ in now["a"]["kafka"] if le != float("inf")]
                last = now
                rows.append(row)
                progress(" ".join(f"{k}={v}" for k, v in row.items()))
            if pgb.returncode != 0:
                fail(f"pgbench exited {pgb.returncode}:\n{bench.tail(os.path.join(work, 'pgbench.out'))}")
            events = pg.sql("select count(*) from soak_t")[0][0] - keys
            backfills = json.loads(bench.http_get(status_a, "/backfills"))
            tails.stop()
            a.stop()
            b.stop()
            cdcs = []
            verdict = flat_verdict(rows, args.warmup)
            logged = server_events(pg.logfile, wall0)
            found, turns = jumps(rows, logged, args.interval, bounds)
            git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
            meta = {"duration": args.duration, "rate": args.rate, "interval": args.interval,
                    "backfill_rows": args.backfill_rows, "backfill_at": round(backfill_at),
                    "restart_at": round(restart_at), "events": events, "pg_version": pg.version,
                    "git": git, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "backfills": [(x.get("state"), x.get("rows_delivered", x.get("rows_emitted"))) for x in backfills]}
            write_results(args.out, rows, verdict, meta, found, turns, logged)
            progress(f"p99 more than one bucket above its median in {len(found)} of {len(rows)} samples")
            for fig, v in verdict.items():
                progress(f"{fig}: first quarter {v['first']}, last quarter {v['last']}: "
                         f"{'flat' if v['flat'] else 'NOT flat' if v['flat'] is False else 'no samples'}")
            progress(f"wrote {args.out}/soak.md, soak.json, soak.png")
    finally:
        if tails:
            tails.stop()
        for c in cdcs:
            if c.alive():
                c.p.kill()
        if pgb is not None and pgb.poll() is None:
            pgb.kill()
        mock.stdin.close()
        mock.wait(30)
        shutil.rmtree(work, ignore_errors=True)
        for d in bench.SHORT_DIRS:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
