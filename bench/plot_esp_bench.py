#!/usr/bin/python3
"""Plots the ESP engine micro benchmark: payload Gbit/s per inner packet size, espgw next to
raw ipsec-mb, one panel per algorithm (rows) and direction (columns).

Usage: plot_esp_bench.py [bench/results/esp_bench.json] [docs/img/esp_bench.png]

Reads Google Benchmark JSON written by bench/run_esp_bench.sh. Uses the "median" aggregate
of each benchmark when there is one, otherwise the median of its individual runs.
Benchmark names are <impl>/<algorithm>/<direction>/<size>[/real_time], with impl "raw" or
"espgw"; raw's encrypt/decrypt pair with espgw's encap/decap.
"""
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ALGORITHMS = ["AES-128-GCM", "AES-256-GCM", "ChaCha20-Poly1305"]
DIRECTIONS = ["encap", "decap", "roundtrip"]
RAW_DIRECTION = {"encrypt": "encap", "decrypt": "decap", "roundtrip": "roundtrip"}
COLORS = {"espgw": "#1f77b4", "raw": "#bbbbbb"}


def load(path):
    with open(path) as f:
        data = json.load(f)
    medians = {}
    runs = defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        parts = b.get("run_name", b["name"]).split("/")
        if len(parts) < 4:
            continue
        impl, algorithm, direction, size = parts[:4]
        if impl == "raw":
            direction = RAW_DIRECTION.get(direction, direction)
        key = (impl, algorithm, direction, int(size))
        gbps = b["bytes_per_second"] * 8 / 1e9
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[key] = gbps
        else:
            runs[key].append(gbps)
    result = dict(medians)
    for key, values in runs.items():
        result.setdefault(key, statistics.median(values))
    return result, data.get("context", {})


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/esp_bench.json"
    target = sys.argv[2] if len(sys.argv) > 2 else "docs/img/esp_bench.png"
    values, context = load(source)
    sizes = sorted({key[3] for key in values})
    if not sizes:
        sys.exit(f"{source}: no benchmark results")

    fig, axes = plt.subplots(len(ALGORITHMS), len(DIRECTIONS), figsize=(13, 10), squeeze=False)
    width = 0.38
    for row, algorithm in enumerate(ALGORITHMS):
        for col, direction in enumerate(DIRECTIONS):
            ax = axes[row][col]
            for i, impl in enumerate(["espgw", "raw"]):
                xs, ys = [], []
                for j, size in enumerate(sizes):
                    v = values.get((impl, algorithm, direction, size))
                    if v is not None:
                        xs.append(j + (i - 0.5) * width)
                        ys.append(v)
                label = "espgw" if impl == "espgw" else "raw ipsec-mb"
                bars = ax.bar(xs, ys, width, label=label, color=COLORS[impl])
                ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
            ticks = []
            for size in sizes:
                e = values.get(("espgw", algorithm, direction, size))
                r = values.get(("raw", algorithm, direction, size))
                ticks.append(f"{size} B" + (f"\nespgw/raw {e / r:.2f}" if e and r else ""))
            ax.set_xticks(range(len(sizes)), ticks, fontsize=8)
            ax.set_title(f"{algorithm} {direction}", fontsize=10)
            if col == 0:
                ax.set_ylabel("inner payload Gbit/s")
            ax.margins(y=0.15)
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    host = context.get("host_name", "")
    date = context.get("date", "")
    fig.suptitle("ESP engine vs raw ipsec-mb, one thread, median of repetitions "
                 "(espgw/raw throughput ratio under each size)\n"
                 f"{host} {date}, {context.get('num_cpus', '?')} CPUs "
                 f"@ {context.get('mhz_per_cpu', '?')} MHz, "
                 f"ipsec-mb {context.get('ipsec_mb_version', '?')} "
                 f"({context.get('ipsec_mb_arch', '?')})", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
