"""report.py: renders bench.py's results as markdown (results.md) and PNG charts (matplotlib, Agg).

Pure: takes the results dict bench.py builds (also saved as results.json) and writes files;
`python3 tests/bench/report.py build/bench/results.json` redraws from a saved run.
"""

import json
import os
import sys

CONSUMERS = (("server", "server's decoding (SQL)"), ("pg_recvlogical", "pg_recvlogical (pgoutput)"), ("wal2json", "pg_recvlogical (wal2json)"),
             ("cdc_stdout", "cdc → stdout"), ("cdc_kafka", "cdc → Kafka (mock)"),
             ("cdc_kafka_bare", "cdc → Kafka without cdc_headers (mock)"),
             ("cdc_kafka_eo", "cdc → Kafka exactly once (mock)"),
             ("cdc_kafka_json", "cdc → Kafka format json (mock)"),
             ("cdc_kafka_debezium", "cdc → Kafka format debezium (mock)"),
             ("cdc_kafka_avro", "cdc → Kafka format avro (mock, registry double)"),
             ("cdc_nats", "cdc → NATS JetStream (nats-server)"),
             ("cdc_nats_bare", "cdc → NATS JetStream without cdc_headers (nats-server)"),
             ("cdc_socket", "cdc → socket → cdc tail"),
             ("base_stdout", "baseline cdc → stdout"), ("base_kafka", "baseline cdc → Kafka (mock)"),
             ("base_kafka_eo", "baseline cdc → Kafka exactly once (mock)"),
             ("base_socket", "baseline cdc → socket → cdc tail"))
# The paths of the speed and cost table, each with its baseline's beside it when there is one.
PATHS = (("cdc_stdout", "stdout"), ("cdc_socket", "socket → spool → cdc tail"), ("cdc_kafka", "Kafka (mock)"),
         ("cdc_kafka_bare", "Kafka, `cdc_headers: false`"), ("cdc_kafka_eo", "Kafka exactly once (mock)"), ("cdc_kafka_json", "Kafka, format json"),
         ("cdc_kafka_debezium", "Kafka, format debezium"), ("cdc_nats", "NATS JetStream (nats-server)"),
         ("cdc_nats_bare", "NATS, `cdc_headers: false`"))
LATENCY_PATHS = (("kafka", "Kafka delivery report (mock cluster), measured by cdc"),
                 ("kafka_eo", "Kafka exactly once: to the Kafka commit (mock cluster), measured by cdc"),
                 ("socket", "socket, read by a Python consumer that acks"))
# The Kafka record formats, each beside the default (protobuf) of the same run.
FORMATS = (("cdc_kafka", "protobuf"), ("cdc_kafka_json", "json"), ("cdc_kafka_debezium", "debezium"),
           ("cdc_kafka_avro", "avro"))


def table(hdr, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(hdr) - 1)
    out = ["| " + " | ".join(hdr) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def n0(x):
    return f"{x:,.0f}"


def speed_and_cost(r):
    """The drain section's first table: for every path and connection, speed (pg_recvlogical's
    seconds / the path's, same connection, same round) and cost (cdc's CPU / the walsender's CPU for
    the same drain), medians of the rounds, with the CPU seconds, wall time and peak RSS."""
    md = ["### Speed and cost", "",
          "**speed**: pg_recvlogical's seconds (to /dev/null, cdc's pgoutput options) / the path's "
          "seconds, on the same connection in the same round; 1 or more: cdc drains as fast as the "
          "walsender sends. **cost**: the consumer's CPU seconds (user + system, all its threads; for "
          "the socket path cdc's, not `cdc tail`'s) / the walsender's CPU seconds for the same drain "
          "(the postmaster's reaped children's CPU before and after, less the consumer's other "
          "backends); below 1, the consumer needs less CPU than the server spends sending, so with a "
          "core for each it is never the limit. Both are medians of the per-round ratios. "
          "**walsender busy**: its CPU / the drain's wall time (near 100%: the walsender is the "
          "limit). The server's decoding (SQL, no client) is a figure, not a goal: it sends nothing.",
          ""]
    hdr = ["backlog", "conn", "path", "speed", "cost", "CPU (s)", "walsender CPU (s)", "walsender busy",
           "seconds", "peak RSS"]
    rows = []
    for b in r["drain"]:
        c = b["consumers"]
        if "cpu" not in c.get("pg_recvlogical", {}):
            return []  # a saved run from before the CPU was measured
        lead = [f"{b['name']}: {b['label']}", b.get("conn", "tcp")]

        def row(key, label):
            x = c[key]
            speed = f"{x['speed']:.2f}" if "speed" in x else "—"
            return lead + [label, speed, f"{x['cost']:.2f}", f"{x['cpu']:.2f}", f"{x['server_cpu']:.2f}",
                           f"{100 * x['server_cpu'] / x['secs']:.0f}%", f"{x['secs']:.2f}",
                           f"{x['rss']:.1f} MiB"]
        if "server" in c:
            x = c["server"]
            rows.append(lead + ["server's decoding (SQL, no client; its backend's CPU)", "—", "—", "—",
                                f"{x['server_cpu']:.2f}", "—", f"{x['secs']:.2f}", "—"])
        rows.append(row("pg_recvlogical", "pg_recvlogical"))
        for key, label in PATHS:
            if key in c:
                rows.append(row(key, "cdc → " + label))
            base = "base_" + key[len("cdc_"):]
            if base in c:
                rows.append(row(base, "baseline cdc → " + label))
    return md + [table(hdr, rows, ["---"] * 3 + ["---:"] * 7), ""]


def run_max(x, digits=2):
    """A latency run's maximum as the report writes it (to digits decimals), in ms without the unit. A Kafka run's is cdc's,
    over the whole process: where that is its warm-up's, the run's own is bounded by the highest bucket
    its events fell in (run_max; a saved run from before has the warm-up's alone). (text, whether it
    is the warm-up's)."""
    if x.get("warmup_max") is None or x["max"] > x["warmup_max"] + 0.01:
        return f"{x['max']:.{digits}f}", False
    return (f"≤ {x['run_max']:g}" if x.get("run_max") is not None else f"≤ {x['max']:.{digits}f}"), True


def latency_tables(lat):
    """Each latency run of each path (p50, p99, p99.9, max), and a line per path with the runs'
    p99s and maxima side by side."""
    md = ["## Latency, commit to delivery", "",
          "Single-row transactions at a steady rate (pgbench --rate, synchronous_commit=on), each path "
          "in turn, run after run. Kafka's figures are cdc's own histogram (a p99 reads as its "
          "bucket's upper bound, within 6%); the warm-up transaction is written once cdc says ready, "
          "and where cdc's maximum is the warm-up's, the run's own shows as ≤ the highest bucket the "
          "run's events fell in (with the warm-up's beside it). The socket's are every "
          "event's latency as its consumer read it, less the first 200. *Read p99*: the same run's "
          "p99 from each transaction's commit to cdc reading it from the slot (cdc's histogram, a "
          "bucket's upper bound): the server's share, which no client of the slot can go below.", ""]
    rows = []
    keys = [(k, lb) for k, lb in LATENCY_PATHS] + [("base_" + k, "baseline: " + lb) for k, lb in LATENCY_PATHS]
    for key, label in keys:
        runs = lat.get(key)
        if isinstance(runs, dict):  # a saved run from before there were several runs
            runs = [runs]
        for i, x in enumerate(runs or []):
            text, warmup = run_max(x)
            mx = f"{text} ms" + (f" (warm-up {x['max']:.0f} ms)" if warmup and x.get("run_max") is not None
                                 else " (warm-up)" if warmup else "")
            rows.append([label if i == 0 else "", i + 1, n0(x["tps"]), f"{x['p50']:.2f} ms", f"{x['p99']:.2f} ms",
                         f"{x['p999']:.2f} ms" if x.get("p999") is not None else "—", mx,
                         f"≤ {x['read_p99']:g} ms" if x.get("read_p99") is not None else "—",
                         f"{x['rss']:.1f} MiB" if "rss" in x else "—"])
    md += [table(["path", "run", "rate (pgbench tps)", "p50", "p99", "p99.9", "max", "read p99", "peak RSS"],
                 rows), ""]
    for key, label in keys:
        runs = lat.get(key)
        if isinstance(runs, list) and len(runs) > 1:
            reads = [x.get("read_p99") for x in runs]
            md += [f"- {label}: p99 " + ", ".join(f"{x['p99']:.2f}" for x in runs) + " ms; max " +
                   ", ".join(run_max(x, 1)[0] for x in runs) + " ms" +
                   ("; read p99 ≤ " + ", ".join(f"{r:g}" for r in reads) + " ms" if None not in reads else "") + "."]
    return md + ["", "![latency CDF](latency_cdf.png)", ""]


def markdown(r):
    m = r["machine"]
    md = [f"# cdc benchmark ({m['date']})", "",
          f"Machine: {m['cpu']}, {m['nproc']} CPUs (`nproc`), {m['mem_gib']:.1f} GiB RAM, "
          f"{m['kernel']}; {m['postgres']}; cdc {m['cdc']} (git {m['git']}). "
          f"Command: `{m['command']}`.", ""]
    if m.get("note"):
        md += [m["note"], ""]
    if "drain" in r:
        wal2json = any("wal2json" in b["consumers"] for b in r["drain"])  # not on every server
        md += ["## Draining a backlog", "",
               f"Median of {r['args']['repeat']} runs per consumer and connection, each from a slot "
               "of its own made before the backlog was written, the consumers taking turns. "
               "server: the server's own decoding with no client (`select count(*) from "
               "pg_logical_slot_get_binary_changes(...)` with the same pgoutput options, through "
               "psql): what the server pays to decode, with none of a walsender's sending (one send() "
               "per message), so a bound no client reaches. unix: the server's Unix socket; tcp: "
               "127.0.0.1." + (" wal2json: format-version 2 (one JSON document per change), add-tables "
                              "on the backlog's table, through pg_recvlogical to /dev/null, over TCP "
                              "only." if wal2json else ""), ""]
        md += speed_and_cost(r)
        # A saved run from before a consumer was added has no column for it.
        consumers = [(k, lb) for k, lb in CONSUMERS if any(k in b["consumers"] for b in r["drain"])]

        def cells(fn):
            rows = []
            for b in r["drain"]:
                row = [f"{b['name']}: {b['label']}", b.get("conn", "tcp")]
                row += [fn(b, k) if k in b["consumers"] else "—" for k, _ in consumers]
                rows.append(row)
            return table(["backlog", "conn"] + [lb for _, lb in consumers], rows)

        def ratio(base):
            def fn(b, k):
                if base not in b["consumers"]:
                    return "—"
                return f"{b['consumers'][base]['secs'] / b['consumers'][k]['secs']:.2f}"
            return fn

        def spread(b, k):
            runs = b["consumers"][k].get("runs")
            secs = f"{b['consumers'][k]['secs']:.2f} s"
            return f"{secs} ({min(runs):.2f}-{max(runs):.2f})" if runs else secs

        md += ["Events per second:", "", cells(lambda b, k: n0(b["rows"] / b["consumers"][k]["secs"])), "",
               "Ratio to the server's own decoding (its time / the path's time; 1 is the ceiling):", "",
               cells(ratio("server")), "",
               "Ratio to pg_recvlogical (its time / the path's time):", "", cells(ratio("pg_recvlogical")), "",
               "Seconds, median (fastest-slowest run):", "", cells(spread), "",
               "Peak RSS (highest of the runs; for the socket: cdc's, not tail's; for the server: "
               "psql's, the decoding runs in the server):", "",
               cells(lambda b, k: f"{b['consumers'][k]['rss']:.1f} MiB"), ""]
        if wal2json:
            md += ["(wal2json's RSS is pg_recvlogical's; the plugin runs in the server's walsender.)", ""]
        # The other formats drain over TCP only: the rows of the connections that have them.
        formats = [(k, f) for k, f in FORMATS if any(k in b["consumers"] for b in r["drain"])]
        with_formats = [b for b in r["drain"] if all(k in b["consumers"] for k, _ in formats)]
        if len(formats) > 1:
            md += ["Kafka record formats (`format:`), each beside protobuf of the same run: events/s, "
                   "the ratio to protobuf's, and peak RSS.", ""]
            hdr = ["backlog"] + [h for k, f in formats
                                 for h in ((f"{f} ev/s",) + (() if k == "cdc_kafka" else (f"{f} / protobuf",))
                                           + (f"{f} RSS",))]
            rows = []
            for b in with_formats:
                base = b["consumers"]["cdc_kafka"]["secs"]
                row = [f"{b['name']}: {b['label']} ({b.get('conn', 'tcp')})"]
                for k, _ in formats:
                    c = b["consumers"][k]
                    row += [n0(b["rows"] / c["secs"])] + ([] if k == "cdc_kafka" else [f"{base / c['secs']:.2f}"])
                    row += [f"{c['rss']:.1f} MiB"]
                rows.append(row)
            md += [table(hdr, rows), ""]
    if "latency" in r:
        md += latency_tables(r["latency"])
    if "backfill" in r:
        b = r["backfill"]
        big, small = b["rows"]["bf_big"], b["rows"]["bf_small"]
        c = b["cdc"]["bf_big"]
        md += ["## Backfills", "",
               f"A `snapshot: true` stdout subscription (to /dev/null) on a table of {big:,} rows "
               "(4 columns), timed from cdc's start until `GET /backfills` says done, against `psql "
               "-c \"\\copy (select * from t) to /dev/null\"` on the same table (the cost of just "
               f"reading it); median of {b['repeat']}. CPU per row: cdc's own (user and system, all "
               "its threads), the server's backends that read for it (`application_name` `cdc "
               "backfill`, sampled every 20 ms), and the server's for the same `COPY` psql runs "
               f"(its backend's). Peak RSS also on a table of {small:,} rows.", ""]
        rows = [[f"{b['rows'][t]:,} rows", n0(b["rows"][t] / b["cdc"][t]["secs"]),
                 f"{b['cdc'][t]['cpu_us']:.2f} µs", f"{b['cdc'][t]['server_cpu_us']:.2f} µs",
                 f"{b['cdc'][t]['rss']:.1f} MiB"] for t in ("bf_small", "bf_big")]
        md += [table(["table", "cdc backfill rows/s", "cdc CPU per row", "its server backends' CPU per row",
                      "cdc peak RSS"], rows), "",
               f"psql \\copy: {n0(big / b['copy_secs'])} rows/s, the server's CPU per row for its `COPY` "
               f"{b['copy_server_cpu_us']:.2f} µs. cdc backfill / copy: "
               f"**{b['copy_secs'] / c['secs']:.2f}**; cdc's CPU per row / the server's for the copy: "
               f"**{c['cpu_us'] / b['copy_server_cpu_us']:.2f}**.", ""]
        x = b["latency"]
        p99s = ", ".join(f"{y['p99']:.1f}" for y in x["runs"])
        reads = [y.get("read_p99") for y in x["runs"]]
        read = ("; their read p99 (commit to cdc's read, the server's share) ≤ " +
                ", ".join(f"{r:g}" for r in reads) + " ms") if None not in reads else ""
        md += [f"Live single-row transactions at 1,000/s to a socket consumer while backfills of the "
               f"{big:,}-row table run at full speed in the same cdc, one after another for the whole "
               f"run (median of {len(x['runs'])} runs; backfills during each: "
               f"{', '.join(str(y['backfills']) for y in x['runs'])}): {n0(x['tps'])} tps, p50 "
               f"{x['p50']:.2f} ms, p99 **{x['p99']:.2f} ms**, max {x['max']:.2f} ms. The runs' p99 "
               f"{p99s} ms{read}.", ""]
    if "scale" in r:
        import backfill_scale
        md += backfill_scale.markdown(r["scale"])
    if "trigger" in r:
        t = r["trigger"]
        w = t["wal"]
        md += ["## The seeds' design on PostgreSQL: trigger, event log, SKIP LOCKED workers", "",
               "An AFTER INSERT/UPDATE/DELETE row trigger writes one `event_log (log_id bigserial, "
               "sub_id, pk, work_update)` row per matching row of `event_subscriber` (here one "
               "subscription); an index on `sub_id`. The same workloads on a twin table without "
               "the trigger (all cdc needs), each from a checkpoint; WAL from "
               "`pg_current_wal_lsn()` before and after.", ""]
        rows = []
        for kind, label, n in (("big", f"1 txn x {t['big']:,} rows", t["big"]),
                               ("small", f"{t['txns']:,} txns x 1 row", t["txns"])):
            pb, ps = w[f"trig_plain/{kind}"]
            tb, ts = w[f"trig_src/{kind}"]
            rows.append([label, f"{pb / n:,.0f}", f"{tb / n:,.0f}", f"+{(tb - pb) / n:,.0f}",
                         f"{tb / pb:.2f}x", f"{ps:.2f}s / {ts:.2f}s"])
        md += [table(["workload", "WAL bytes/change, no trigger (cdc)", "with trigger",
                      "extra per change", "WAL x", "write time without / with"], rows), "",
               f"Delivering the {t['txns']:,} events of the single-row workload. Workers: Python "
               "(psycopg2) processes, each looping over one transaction per claim: `DELETE FROM "
               "event_log USING (SELECT log_id ... ORDER BY log_id LIMIT k FOR UPDATE SKIP LOCKED)"
               " RETURNING pk`, then reading the claimed rows from the table (cdc delivers the "
               "row, so the workers fetch it too); k = 1 as in the seeds, and k = 100. cdc: the "
               "same workload on the twin table, a socket subscription with `consumers: shared` "
               "and 1 or 4 `cdc tail` processes acking every event (JSON to a pipe), timed from "
               "cdc's start (it reads the slot's backlog) until every event is printed.", ""]
        rows = []
        for nw, batch, n, secs, walb in t["workers"]:
            rows.append([f"trigger + event log, {nw} worker{'s' if nw > 1 else ''}, {batch}/claim",
                         n0(n / secs), f"{walb / n:,.0f}"])
        for nc, n, secs, rss in t["cdc"]:
            rows.append([f"cdc, socket, {nc} shared consumer{'s' if nc > 1 else ''}", n0(n / secs), "0"])
        md += [table(["consumer", "events/s", "WAL bytes written per event consumed"], rows), ""]
    growth = []
    # What the subscriptions beside the first are, by variant (bench.py SUBSCRIPTION_VARIANTS).
    SUBSCRIPTION_OTHERS = {
        "half": "every second one has `where: \"new.amount < 0\"`, which never matches",
        "where": "all but the first have `where: \"new.amount < 0\"`, which never matches",
        "other": "all but the first are on other tables (`public.other_N`, not in the publication)"}
    for key, v in (("subscriptions", "half"), ("subscriptions_where", "where"), ("subscriptions_other", "other")):
        if key not in r:
            continue
        rows = [[n, m_, n0(rows_), n0(rows_ / secs), n0(rows_ * m_ / secs), f"{rss:.1f} MiB"]
                for n, m_, rows_, secs, rss in r[key]]
        growth += ["### Subscriptions on one table" + ("" if v == "half" else f" ({v})"), "",
                   f"N stdout subscriptions (to /dev/null) on one table; {SUBSCRIPTION_OTHERS[v]}. "
                   f"Backlog: {rows[0][2]} rows in 100-row transactions; `cdc run --endpos`.", "",
                   table(["subscriptions", "matching", "rows", "rows/s", "events out/s", "peak RSS"], rows), ""]
    if "consumers" in r:
        rows = [[n, n0(rows_), n0(rows_ / secs), got - rows_, f"{rss:.1f} MiB"]
                for n, rows_, secs, rss, got in r["consumers"]]
        growth += ["### Consumers on one socket subscription", "",
                   "`consumers: shared`: N `cdc tail` processes, all attached and acking, each "
                   "event to one of them. Timed from cdc's start (backlog in the slot, 100-row "
                   "transactions) until the consumers together printed every event.", "",
                   table(["consumers", "events", "events/s", "duplicates", "cdc peak RSS"], rows), ""]
    if "tables" in r:
        rows = [[n, n0(rows_), n0(rows_ / secs), f"{rss:.1f} MiB"] for n, rows_, secs, rss in r["tables"]]
        growth += ["### Tables in the publication", "",
                   "N tables in the publication, one stdout subscription on all of them (a glob); "
                   "one row in each quiet table, then the backlog in the busy one (100-row "
                   "transactions).", "",
                   table(["tables", "events", "events/s", "peak RSS"], rows), ""]
    if growth:
        md += ["## How cost grows", "", "One run per point.", ""] + growth + ["![growth](growth.png)", ""]
    if "drain" in r or "trigger" in r:
        md += ["![throughput](throughput.png)", ""]
    return "\n".join(md)


def plots(r, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    colors = ["#17becf", "#7f7f7f", "#bcbd22", "#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#2ca02c"]
    if "drain" in r or "trigger" in r:
        panels = [k for k in ("drain", "trigger") if k in r]
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
        for ax, key in zip(axes[0], panels):
            if key == "drain":
                drained = [(c, lb) for c, lb in CONSUMERS if all(c in b["consumers"] for b in r["drain"])]
                width = 0.8 / len(drained)
                for i, (c, label) in enumerate(drained):
                    xs = [j + (i - (len(drained) - 1) / 2) * width for j in range(len(r["drain"]))]
                    ys = [b["rows"] / b["consumers"][c]["secs"] / 1000 for b in r["drain"]]
                    bars = ax.bar(xs, ys, width, label=label, color=colors[i % len(colors)])
                    ax.bar_label(bars, fmt="%.0f", fontsize=6)
                ax.set_xticks(range(len(r["drain"])))
                ax.set_xticklabels([f"{b['label']}\n{b.get('conn', 'tcp')}" for b in r["drain"]])
                ax.set_ylabel("thousand events/s")
                ax.set_title("Draining a backlog")
                ax.legend(fontsize=7)
            else:
                t = r["trigger"]
                labels, ys, cs = [], [], []
                for nw, batch, n, secs, _ in t["workers"]:
                    labels.append(f"trigger queue\n{nw}w x {batch}/claim")
                    ys.append(n / secs)
                    cs.append("#d62728")
                for nc, n, secs, _ in t["cdc"]:
                    labels.append(f"cdc socket\n{nc} shared")
                    ys.append(n / secs)
                    cs.append("#2ca02c")
                bars = ax.bar(range(len(ys)), [y / 1000 for y in ys], color=cs)
                ax.bar_label(bars, fmt="%.1f", fontsize=7)
                ax.set_xticks(range(len(ys)))
                ax.set_xticklabels(labels, fontsize=7)
                ax.set_ylabel("thousand events/s")
                ax.set_title(f"{t['txns']:,} single-row transactions: trigger design vs cdc")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=90)
        plt.close(fig)
        made.append("throughput.png")
    if "latency" in r:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        lat = r["latency"]
        if lat.get("socket_samples_file"):
            with open(os.path.join(out_dir, lat["socket_samples_file"])) as f:
                v = sorted(int(line.split()[-1]) / 1000 for line in f if line.strip())
            ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], color="#2ca02c",
                    label=f"socket → Python consumer ({len(v):,} events)")
        kafka = lat.get("kafka")
        kafka = kafka[0] if isinstance(kafka, list) else kafka
        if kafka and kafka.get("buckets"):
            b = kafka["buckets"]
            total = b[-1][1]
            pts = []
            for le, n in b:  # up to the first bucket holding every event
                if le != float("inf") and total:
                    pts.append((le * 1000, n / total))
                    if n == total:
                        break
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", marker="o", ms=3,
                    color="#ff7f0e", label=f"Kafka delivery report ({total:,} events; cdc's histogram buckets)")
        ax.set_xscale("log")
        ax.set_xlabel("commit to delivery, ms (log scale)")
        ax.set_ylabel("fraction of events")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title("Latency at a steady rate of single-row transactions")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "latency_cdf.png"), dpi=90)
        plt.close(fig)
        made.append("latency_cdf.png")
    panels = []
    if "subscriptions" in r:
        panels.append(("subscriptions on one table", [p[0] for p in r["subscriptions"]],
                       [p[2] * p[1] / p[3] for p in r["subscriptions"]], [p[4] for p in r["subscriptions"]],
                       "events out/s", [p[2] / p[3] for p in r["subscriptions"]]))
    if "consumers" in r:
        panels.append(("shared consumers on one subscription", [p[0] for p in r["consumers"]],
                       [p[1] / p[2] for p in r["consumers"]], [p[3] for p in r["consumers"]],
                       "events/s", None))
    if "tables" in r:
        panels.append(("tables in the publication", [p[0] for p in r["tables"]],
                       [p[1] / p[2] for p in r["tables"]], [p[3] for p in r["tables"]], "events/s", None))
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
        for ax, (title, xs, ys, rss, ylabel, rows_s) in zip(axes[0], panels):
            ax.plot(xs, [y / 1000 for y in ys], "o-", color="#1f77b4", label=ylabel)
            if rows_s:
                ax.plot(xs, [y / 1000 for y in rows_s], "s--", color="#17becf", label="source rows/s")
            ax.set_xscale("log")
            if rows_s:  # events out grow with the matching subscriptions: a log scale shows both
                ax.set_yscale("log")
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.set_ylabel("thousand per second")
            if not rows_s:
                ax.set_ylim(bottom=0)
            ax.set_title(title, fontsize=10)
            ax2 = ax.twinx()
            ax2.plot(xs, rss, "^:", color="#d62728", label="cdc peak RSS")
            ax2.set_ylabel("MiB", color="#d62728")
            ax2.set_ylim(bottom=0)
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "growth.png"), dpi=90)
        plt.close(fig)
        made.append("growth.png")
    return made


def write(r, out_dir):
    """Writes results.json, results.md and the PNGs into out_dir; returns the markdown."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(r, f, indent=1)
    md = markdown(r)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(md + "\n")
    try:
        plots(r, out_dir)
    except ImportError as e:
        print(f"bench: no charts ({e}); deploy/deps.sh bench installs python3-matplotlib",
              file=sys.stderr)
    return md


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "build/bench/results.json"
    with open(path) as f:
        print(write(json.load(f), os.path.dirname(os.path.abspath(path))))
