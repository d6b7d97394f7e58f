"""dashboard.py: the panels of deploy/monitoring/cdc-dashboard.json: their queries (which
tests/integration/test_monitoring.py runs in a real Prometheus), and a picture of them drawn with
matplotlib from a Prometheus's answers to those same queries (docs/monitoring/dashboard.png).

test_monitoring.py draws the picture from its own Prometheus at the end of its run when
CDC_DASHBOARD_PNG names the file to write. By hand, against any Prometheus that scrapes cdc:

    python3 tests/monitoring/dashboard.py --prometheus http://127.0.0.1:9090 --minutes 60 --out dash.png

Drawing needs matplotlib (Debian's python3-matplotlib, in deploy/deps.sh's bench packages); the
queries alone do not.
"""

import argparse
import json
import math
import os
import re
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(ROOT, "deploy", "monitoring", "cdc-dashboard.json")


def panels(rate_interval="10s"):
    """Each panel: title, unit, gridPos, and its targets as (expr, legendFormat), with Grafana's
    $__rate_interval given as rate_interval."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    return [{"title": p["title"], "unit": p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"),
             "grid": p["gridPos"],
             "targets": [(t["expr"].replace("$__rate_interval", rate_interval), t.get("legendFormat", ""))
                         for t in p["targets"]]} for p in dash["panels"]]


def query_range(prometheus, expr, start, end, step):
    """[(labels, [(unix time, value)...])...]: Prometheus's /api/v1/query_range answer."""
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{q}", timeout=30) as r:
        answer = json.loads(r.read())
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in answer["data"]["result"]]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or \
        ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")


def _bytes(v, _=None):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" or v == int(v) else f"{v:.1f} {unit}"
        v /= 1024


def _seconds(v, _=None):
    return f"{v * 1000:.0f} ms" if 0 < abs(v) < 1 else f"{v:g} s"


FORMATS = {"bytes": _bytes, "s": _seconds, "ops": lambda v, _=None: f"{v:g}/s",
           "percentunit": lambda v, _=None: f"{v * 100:.0f}%", "short": lambda v, _=None: f"{v:g}"}


def draw(prometheus, start, end, out, step=1):
    """Draws every panel, laid out as on the dashboard (gridPos: 24 columns), from query_range
    over [start, end] (Unix times); writes a PNG to out. A gap in a series stays a gap."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ps = panels()
    height = max(p["grid"]["y"] + p["grid"]["h"] for p in ps)
    fig = plt.figure(figsize=(12, height * 0.3), dpi=64)
    for p in ps:
        g = p["grid"]
        ax = fig.add_axes([g["x"] / 24 + 0.055, 1 - (g["y"] + g["h"]) / height + 0.22 * g["h"] / height,
                           g["w"] / 24 - 0.075, g["h"] / height * 0.66])
        ax.set_title(p["title"], fontsize=10, loc="left")
        for expr, fmt in p["targets"]:
            for labels, values in query_range(prometheus, expr, start, end, step):
                xs, ys = [], []
                for t, v in values:
                    if xs and t - (xs[-1] + start) > 2 * step:
                        xs.append(math.nan)
                        ys.append(math.nan)
                    xs.append(t - start)
                    ys.append(v if math.isfinite(v) else math.nan)
                ax.plot(xs, ys, linewidth=1.2, label=legend(fmt, labels))
        ax.set_xlim(0, end - start)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f} s"))
        ax.yaxis.set_major_formatter(FuncFormatter(FORMATS.get(p["unit"], FORMATS["short"])))
        ax.yaxis.set_major_locator(MaxNLocator(4))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper left", framealpha=0.6, handlelength=1)
    fig.savefig(out)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Draws the panels of cdc-dashboard.json from a Prometheus into a PNG.")
    ap.add_argument("--prometheus", required=True, help="Prometheus's address, http://HOST:PORT")
    ap.add_argument("--minutes", type=float, default=60, help="how far back from now (default 60)")
    ap.add_argument("--step", type=float, default=None, help="seconds between points (default: minutes/4)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    a = ap.parse_args()
    end = time.time()
    draw(a.prometheus.rstrip("/"), end - a.minutes * 60, end, a.out, a.step or max(1.0, a.minutes / 4))


if __name__ == "__main__":
    main()
