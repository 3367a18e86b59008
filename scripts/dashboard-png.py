#!/usr/bin/env python3
"""Renders the panels of the router's overview dashboard to a PNG (docs/img/).

    python3 scripts/dashboard-png.py [--secs 60] [--json FILE] [--out docs/img/router-overview.png]

Runs the dashboard test (kthena-router/tests/it/dashboards.rs) with
KTHENA_DASHBOARD_RANGE_OUT set: it starts a real Prometheus, two kthena-router processes and
kthena-sim engines, runs its mixed workload for --secs seconds, checks every dashboard
expression, and writes the range queries (one point a second) of the overview dashboard's
panels to a JSON file. This script then plots that file as a grid of panels titled as the
dashboard's. With --json FILE it only plots an existing file. Needs what the test needs
(`source scripts/services.sh && ensure_services`) and matplotlib (installed with pip when
missing; CI does not run this script).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST = "dashboards::every_dashboard_expression_returns_series"


def run_test(secs, out):
    """Runs the dashboard test with its range output written to `out`."""
    env = dict(os.environ, KTHENA_DASHBOARD_RANGE_OUT=out, KTHENA_DASHBOARD_WORKLOAD_SECS=str(secs))
    cmd = ["cargo", "test", "-p", "kthena-router", "--all-features", "--test", "it", "--",
           "--exact", TEST]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def pyplot():
    """matplotlib.pyplot with the Agg backend, installed with pip when missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


UNITS = {"s": "seconds", "reqps": "requests/s", "percentunit": "ratio", "short": "", "ops": "ops/s"}


def plot(doc, out):
    """One subplot per panel (two columns), x in seconds since the first point."""
    plt = pyplot()
    panels = doc["panels"]
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(12, 2.6 * rows), squeeze=False)
    t0 = min((float(v[0]) for p in panels for s in p["series"] for v in s["values"]), default=0)
    for ax, p in zip(axes.flat, panels):
        for s in p["series"]:
            xs = [float(v[0]) - t0 for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            ax.plot(xs, ys, linewidth=1.2, label=s["legend"] or None)
        ax.set_title(p["title"], fontsize=10)
        ax.set_ylabel(UNITS.get(p.get("unit") or "", p.get("unit") or ""), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if any(s["legend"] for s in p["series"]):
            ax.legend(fontsize=6, loc="upper left", ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds", fontsize=8)
    fig.suptitle(doc["title"], fontsize=12)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=72)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--secs", type=int, default=60, help="workload duration (seconds)")
    ap.add_argument("--json", help="plot this file instead of running the test")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/img/router-overview.png"))
    args = ap.parse_args()
    path = args.json
    if path is None:
        path = os.path.join(tempfile.mkdtemp(), "ranges.json")
        run_test(args.secs, path)
    with open(path) as f:
        plot(json.load(f), args.out)


if __name__ == "__main__":
    main()
