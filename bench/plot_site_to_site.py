#!/usr/bin/python3
"""Draws bench/results/site_to_site.json (written by bench/site_to_site_bench.sh).

Top: iperf3 TCP throughput, grouped by test (direction x streams), one bar per path, on
a log scale because plain routing and kernel-libipsec are two orders of magnitude apart.
Middle: median ping, idle and under load, per path (log scale).
Bottom (when the results have them): CPU cycles per ESP packet of each espgw gateway
(gwA solid, gwB hatched) per test: its CPU time x cpu_clock_mhz / the ESP packets it sent
and received. Results without the field (older runs, or no espgw path) get no third panel.

Usage: /usr/bin/python3 bench/plot_site_to_site.py [RESULTS_JSON] [OUTPUT_PNG]
Defaults: bench/results/site_to_site.json and docs/img/site_to_site.png.
"""
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = [("a_to_b_P1", "lanA→lanB  -P1"), ("a_to_b_P4", "lanA→lanB  -P4"),
         ("b_to_a_P1", "lanB→lanA  -P1"), ("b_to_a_P4", "lanB→lanA  -P4")]
LABELS = {"plain": "plain routing", "espgw": "espgw (ESP in UDP)", "espgw-raw": "espgw (raw ESP)",
          "espgw-jumbo": "espgw (jumbo segments)",
          "espgw-workers": "espgw (workers on)",
          "espgw-charon": "espgw + charon (ESP in UDP)", "espgw-charon-ecmp2": "espgw + charon (ECMP, 2 CHILD_SAs)",
          "espgw-charon-ecmp4": "espgw + charon (ECMP, 4 CHILD_SAs)", "libipsec": "strongSwan kernel-libipsec",
          "wireguard-go": "wireguard-go"}
COLORS = {"plain": "#9e9e9e", "espgw": "#1565c0", "espgw-raw": "#64b5f6", "espgw-jumbo": "#00897b", "espgw-workers": "#5e35b1",
          "espgw-charon": "#6a1b9a", "espgw-charon-ecmp2": "#9c27b0", "espgw-charon-ecmp4": "#ce93d8",
          "libipsec": "#c62828", "wireguard-go": "#2e7d32"}


def value_label(v, unit=""):
    if v >= 10:
        return f"{v:.0f}{unit}"
    if v >= 1:
        return f"{v:.1f}{unit}"
    return f"{v:.2f}{unit}"


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench/results/site_to_site.json")
    dst = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs/img/site_to_site.png")
    report = json.load(open(src))
    paths = [p for p, e in report["paths"].items() if e.get("tests")]
    if not paths:
        sys.exit("no path has results")

    def cycles(p, t):
        return report["paths"][p]["tests"].get(t, {}).get("cycles_per_esp_packet") or {}
    esp_paths = [p for p in paths if any(v for t, _ in TESTS for v in cycles(p, t).values())]
    if esp_paths:
        fig, (ax, lat, cyc) = plt.subplots(3, 1, figsize=(11, 12), gridspec_kw={"height_ratios": [3, 2, 2]})
    else:
        fig, (ax, lat) = plt.subplots(2, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [3, 2]})
    width = 0.8 / len(paths)
    for i, p in enumerate(paths):
        tests = report["paths"][p]["tests"]
        xs, ys = [], []
        for j, (t, _) in enumerate(TESTS):
            v = tests.get(t, {}).get("gbit_s")
            if v:
                xs.append(j + (i - (len(paths) - 1) / 2) * width)
                ys.append(v)
        bars = ax.bar(xs, ys, width, label=LABELS.get(p, p), color=COLORS.get(p))
        for b, v in zip(bars, ys):
            ax.annotate(value_label(v), (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 1), textcoords="offset points")
    values = [t.get("gbit_s") for p in paths for t in report["paths"][p]["tests"].values() if t.get("gbit_s")]
    if values:
        ax.set_ylim(min(values) / 2, max(values) * 2)
    ax.set_xticks(range(len(TESTS)))
    ax.set_xticklabels([label for _, label in TESTS])
    ax.set_yscale("log")
    ax.set_ylabel("TCP throughput, Gbit/s (log)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=min(len(paths), 3))
    # "LAN MTU 1500, WAN MTU 9000" when the run says so (runs before 1 Dec 2026 do not).
    mtus = re.search(r"LAN MTU \d+, WAN MTU \d+", report.get("topology", ""))
    ax.set_title(f"Site-to-site over veth: iperf3 TCP -C {report['congestion_control']}, "
                 f"{report['duration_s']} s per run{', ' + mtus.group(0) if mtus else ''}\n"
                 f"{report['cpu_model']}, {report['cpus']} CPUs, "
                 f"kernel {report['kernel']}, {report['date'][:10]}", fontsize=10)

    width = 0.38
    for k, (key, label, hatch) in enumerate((("ping_idle", "idle", ""),
                                              ("ping_under_load", "under load (A→B -P4)", "//"))):
        xs, ys, cs = [], [], []
        for i, p in enumerate(paths):
            v = (report["paths"][p].get(key) or {}).get("median_ms")
            if v:
                xs.append(i + (k - 0.5) * width)
                ys.append(v)
                cs.append(COLORS.get(p))
        bars = lat.bar(xs, ys, width, color=cs, hatch=hatch, edgecolor="black", linewidth=0.5,
                       label=label)
        for b, v in zip(bars, ys):
            lat.annotate(value_label(v), (b.get_x() + b.get_width() / 2, v), ha="center",
                         va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
    lat.set_xticks(range(len(paths)))
    # Six paths side by side: the parenthesised detail on a second line.
    lat.set_xticklabels([LABELS.get(p, p).replace(" (", "\n(") for p in paths], fontsize=8)
    lat.set_yscale("log")
    lat.set_ylabel("median ping lanA→lanB, ms (log)")
    lat.grid(axis="y", which="both", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch=h)
               for h in ("", "//")]
    lat.legend(handles, ["idle", "under load (lanA→lanB -P4)"], fontsize=8, loc="upper left")

    if esp_paths:
        width = 0.8 / (2 * len(esp_paths))
        for i, p in enumerate(esp_paths):
            for k, (gw, hatch) in enumerate((("gwA", ""), ("gwB", "//"))):
                xs, ys = [], []
                for j, (t, _) in enumerate(TESTS):
                    v = cycles(p, t).get(gw)
                    if v:
                        xs.append(j + (2 * i + k - (2 * len(esp_paths) - 1) / 2) * width)
                        ys.append(v)
                bars = cyc.bar(xs, ys, width, color=COLORS.get(p), hatch=hatch, edgecolor="black",
                               linewidth=0.5, label=LABELS.get(p, p) if k == 0 else None)
                for b, v in zip(bars, ys):
                    cyc.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                                 fontsize=6, xytext=(0, 1), textcoords="offset points")
        top = max((v for p in esp_paths for t, _ in TESTS for v in cycles(p, t).values() if v), default=0)
        if top:
            cyc.set_ylim(0, top * 1.3)  # room for the legend above the bars
        cyc.set_xticks(range(len(TESTS)))
        cyc.set_xticklabels([label for _, label in TESTS])
        mhz = report.get("cpu_clock_mhz")
        cyc.set_ylabel("CPU cycles per ESP packet\n(gateway CPU time x clock / ESP sent + received)", fontsize=8)
        cyc.set_title(f"espgw gateways: gwA solid, gwB hatched; clock {mhz:.0f} MHz (/proc/cpuinfo)" if mhz
                      else "espgw gateways: gwA solid, gwB hatched", fontsize=9)
        cyc.grid(axis="y", alpha=0.3)
        cyc.legend(fontsize=8, loc="upper left", ncol=min(len(esp_paths), 3))

    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    fig.savefig(dst, dpi=120)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
