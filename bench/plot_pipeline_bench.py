#!/usr/bin/python3
"""Plots the pipeline benchmark: inner-packet Gbit/s against worker count for 1 SA and
64 SAs, with the raw ipsec-mb single-thread throughput times the worker count as the
ceiling; and, beside it, CPU time per packet (all threads, and without the feeder thread)
against the raw crypto time per packet.

Usage: plot_pipeline_bench.py [bench/results/pipeline_bench.json] [docs/img/pipeline_scaling.png]

Reads Google Benchmark JSON written by bench/run_pipeline_bench.sh. Uses the "median"
aggregate of each benchmark when there is one, otherwise the median of its individual runs.
Benchmark names: pipeline/sas:<S>/workers:<W>/... and raw/AES-128-GCM/roundtrip/1400/...
"""
import json
import os
import re
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RAW = "raw/AES-128-GCM/roundtrip/1400"
FLOOR = re.compile(r"^floor/engine_with_copies/sas:(\d+)/")
PIPELINE = re.compile(r"^pipeline/sas:(\d+)/workers:(\d+)")
INLINE = re.compile(r"^pipeline/sas:(\d+)/inline/")  # no workers: the feeder alone
# N feeders at once, each running its own packets to completion
# Feeders sharing the group's SAs; the reader_per_sa variant is left to the text summary.
INLINE_THREADS = re.compile(r"^pipeline/sas:(\d+)/inline_threads:(\d+)(?=/process_time|/real_time|$)")
COUNTERS = ["Gbps", "cpu_ns_per_packet", "worker_cpu_ns_per_packet", "ns_per_packet"]
COLORS = {1: "#1f77b4", 64: "#ff7f0e"}


def load(path):
    with open(path) as f:
        data = json.load(f)
    medians = {}
    runs = defaultdict(lambda: defaultdict(list))
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        values = {k: b[k] for k in COUNTERS if k in b}
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = values
        else:
            for k, v in values.items():
                runs[name][k].append(v)
    result = {}
    for name, values in runs.items():
        result[name] = {k: statistics.median(v) for k, v in values.items()}
    result.update(medians)
    return result, data.get("context", {})


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/pipeline_bench.json"
    target = sys.argv[2] if len(sys.argv) > 2 else "docs/img/pipeline_scaling.png"
    values, context = load(source)
    raw = next((v for n, v in values.items() if n.startswith(RAW)), None)
    series = defaultdict(dict)  # sas -> workers -> values
    inline = {}  # sas -> values of the run-to-completion case (no workers)
    inline_threads = defaultdict(dict)  # sas -> feeders -> values
    for name, v in values.items():
        m = PIPELINE.match(name)
        if m:
            series[int(m.group(1))][int(m.group(2))] = v
        m = INLINE.match(name)
        if m:
            inline[int(m.group(1))] = v
        m = INLINE_THREADS.match(name)
        if m:
            inline_threads[int(m.group(1))][int(m.group(2))] = v
    if not series:
        sys.exit(f"{source}: no pipeline results")

    fig, (ax_tp, ax_cpu) = plt.subplots(1, 2, figsize=(12, 4.8))
    all_workers = sorted({w for s in series.values() for w in s})
    if raw and "Gbps" in raw:
        ax_tp.plot(all_workers, [raw["Gbps"] * w for w in all_workers], "--", color="#888888",
                   label=f"raw ipsec-mb x workers ({raw['Gbps']:.1f} Gbit/s per thread)")
    for sas in sorted(series):
        ws = sorted(series[sas])
        ax_tp.plot(ws, [series[sas][w].get("Gbps", 0) for w in ws], "o-", color=COLORS.get(sas),
                   label=f"pipeline, {sas} SA{'s' if sas > 1 else ''}")
        ax_cpu.plot(ws, [series[sas][w].get("cpu_ns_per_packet", 0) for w in ws], "o-",
                    color=COLORS.get(sas), label=f"{sas} SA{'s' if sas > 1 else ''}: all threads")
        ax_cpu.plot(ws, [series[sas][w].get("worker_cpu_ns_per_packet", 0) for w in ws], "s:",
                    color=COLORS.get(sas),
                    label=f"{sas} SA{'s' if sas > 1 else ''}: without the feeder")
    # Run to completion (no workers, the feeder alone) at x = 0.
    for sas, v in sorted(inline.items()):
        ax_tp.plot([0], [v.get("Gbps", 0)], "*", markersize=12, color=COLORS.get(sas),
                   label=f"{sas} SA{'s' if sas > 1 else ''}, no workers (run to completion)")
        ax_cpu.plot([0], [v.get("cpu_ns_per_packet", 0)], "*", markersize=12,
                    color=COLORS.get(sas))
    # N feeders running to completion at x = N, joined to the single feeder's point.
    for sas, by_n in sorted(inline_threads.items()):
        ns = sorted(by_n)
        xs = ([1] if sas in inline else []) + ns
        first = [inline[sas]] if sas in inline else []
        points = first + [by_n[n] for n in ns]
        ax_tp.plot(xs, [p.get("Gbps", 0) for p in points], "^--", color=COLORS.get(sas),
                   label=f"{sas} SA{'s' if sas > 1 else ''}, N feeders running to completion")
        ax_cpu.plot(xs, [p.get("cpu_ns_per_packet", 0) for p in points], "^--",
                    color=COLORS.get(sas))
    if inline:
        all_workers = [0] + all_workers
    if raw and "ns_per_packet" in raw:
        ax_cpu.axhline(raw["ns_per_packet"], linestyle="--", color="#888888",
                       label=f"raw encrypt + decrypt ({raw['ns_per_packet']:.0f} ns)")
    for name, v in sorted(values.items()):
        m = FLOOR.match(name)
        if m and "ns_per_packet" in v:
            sas = int(m.group(1))
            ax_cpu.axhline(v["ns_per_packet"], linestyle=":", color=COLORS.get(sas),
                           label=f"{sas} SA{'s' if sas > 1 else ''}: no pipeline, engine + copies "
                                 f"({v['ns_per_packet']:.0f} ns)")
    cpus = context.get("num_cpus", "?")
    ax_tp.set_title(f"Throughput, 1400 B AES-128-GCM, encrypt + decrypt ({cpus} CPUs)")
    ax_tp.set_xlabel("workers (plus one feeder; 0: the feeder alone), or feeders (triangles)")
    ax_tp.set_ylabel("inner Gbit/s")
    ax_tp.set_xticks(all_workers)
    ax_tp.set_ylim(bottom=0)
    ax_tp.grid(alpha=0.3)
    ax_tp.legend(fontsize=8)
    ax_cpu.set_title("Process CPU time per packet")
    ax_cpu.set_xlabel("workers (plus one feeder; 0: the feeder alone), or feeders (triangles)")
    ax_cpu.set_ylabel("CPU ns per packet")
    ax_cpu.set_xticks(all_workers)
    ax_cpu.set_ylim(bottom=0)
    ax_cpu.grid(alpha=0.3)
    ax_cpu.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
