#!/usr/bin/env python3
"""Draws the JSON lines of `rtft-bench` as a chart.

usage: plot-bench.py RESULTS.jsonl OUT.png

For `ckpt` results: persist bandwidth of raw / naive / rt-ft per configuration (bytes, tensors,
state), with rt-ft's capture bandwidth and the blocking times annotated. For `goodput` results:
ETTR against GPU count for rt-ft and checkpoint-restart (mean and standard deviation over the
simulated jobs), lost_ratio annotated. Exits 3 without matplotlib, so the caller can print a note
instead of failing.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def label(r):
    gib = r["bytes"] / 2**30
    return f'{gib:.3g} GiB / {r["tensors"]} t ({r["state"]})'


def plot_goodput(plt, rows, out):
    rows = sorted(rows, key=lambda r: r["gpus"])
    gpus = [r["gpus"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for key, label in (("rtft_ettr", "rt-ft"), ("restart_ettr", "checkpoint-restart")):
        ax.errorbar(gpus, [r[key] for r in rows], yerr=[r[key + "_sd"] for r in rows],
                    marker="o", capsize=3, label=label)
    for r in rows:
        if r.get("lost_ratio") is not None:
            ax.annotate(f'lost ratio {r["lost_ratio"]:.3f}', (r["gpus"], r["rtft_ettr"]),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.margins(x=0.15, y=0.15)
    ax.set_xticks(gpus)
    ax.set_xticklabels([str(g) for g in gpus])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("ETTR (useful training time / wall time)")
    first = rows[0]
    ax.set_title(f'rtft-bench goodput: {first["jobs"]} jobs per point, seed {first["seed"]}')
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot-bench.py: matplotlib is not installed", file=sys.stderr)
        return 3
    results = load(sys.argv[1])
    goodput = [r for r in results if r.get("name") == "goodput"]
    if goodput:
        return plot_goodput(plt, goodput, sys.argv[2])
    rows = [r for r in results if r.get("name") == "ckpt"]
    configs = []
    for r in rows:
        key = (r["bytes"], r["tensors"], r["state"])
        if key not in configs:
            configs.append(key)
    variants = ["raw", "naive", "rtft"]
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(configs)), 4.5))
    for vi, v in enumerate(variants):
        xs, ys, notes = [], [], []
        for ci, key in enumerate(configs):
            for r in rows:
                if (r["bytes"], r["tensors"], r["state"]) == key and r["variant"] == v:
                    xs.append(ci + (vi - 1) * width)
                    ys.append(r["persist_gbps"])
                    notes.append(f'{r["blocking_s"]:.2f}s')
        bars = ax.bar(xs, ys, width, label=f"{v} persist")
        for b, n in zip(bars, notes):
            ax.annotate(n, (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([label(dict(bytes=b, tensors=t, state=s)) for b, t, s in configs],
                       fontsize=8)
    ax.set_ylabel("GB/s (bar labels: blocking time)")
    ax.set_title("rtft-bench ckpt: persist bandwidth")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
