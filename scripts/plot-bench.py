#!/usr/bin/env python3
"""Draws the JSON lines of `rtft-bench` as a bar chart.

usage: plot-bench.py RESULTS.jsonl OUT.png

For `ckpt` results: persist bandwidth of raw / naive / rt-ft per configuration (bytes, tensors,
state), with rt-ft's capture bandwidth and the blocking times annotated. Exits 3 without
matplotlib, so the caller can print a note instead of failing.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def label(r):
    gib = r["bytes"] / 2**30
    return f'{gib:.3g} GiB / {r["tensors"]} t ({r["state"]})'


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
    rows = [r for r in load(sys.argv[1]) if r.get("name") == "ckpt"]
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
