#!/usr/bin/env python3
"""Plots bench/scaling_bench.sh's JSON: establishment time, install rate and memory per SA
against the number of CHILD_SAs, and ECMP throughput and fairness against the number of
IKE_SAs. The tunnels load (aggregate throughput through 1 to 1,000 tunnels at once) gets a
figure of its own: TARGET itself when the file holds nothing else, otherwise next to it
(TARGET's name with "_tunnels")."""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_tunnels(data, tunnels, target):
    # Several runs of a size (interleaved rounds): the median, with the runs' range.
    sizes = sorted({r["tunnels"] for r in tunnels})
    runs = {t: [r for r in tunnels if r["tunnels"] == t] for t in sizes}

    def median_of(t, field):
        return statistics.median(r[field] or 0 for r in runs[t])

    fig, ax = plt.subplots(figsize=(8, 4.5))
    rounds = max(len(v) for v in runs.values())
    what = f", medians of {rounds} runs" if rounds > 1 else ""
    fig.suptitle(f"espgw: UDP through many tunnels at once ({data['cpus']} CPUs, {data['date'][:10]}{what})")
    x = [str(t) for t in sizes]
    delivered = [median_of(t, "throughput_gbps") for t in sizes]
    low = [d - min(r["throughput_gbps"] or 0 for r in runs[t]) for d, t in zip(delivered, sizes)]
    high = [max(r["throughput_gbps"] or 0 for r in runs[t]) - d for d, t in zip(delivered, sizes)]
    ax.bar(x, delivered, color="#1565c0", yerr=[low, high], capsize=4,
           label="delivered to lanB (all tunnels)")
    ax.plot(x, [median_of(t, "sent_gbps") for t in sizes], "s--", color="grey", label="offered by lanA")
    ax.set_xlabel("tunnels (SA pairs, one remote /32 each)")
    ax.set_ylabel("aggregate UDP payload, Gbit/s")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left")
    twin = ax.twinx()
    twin.plot(x, [median_of(t, "jain_fairness") for t in sizes], "o-", color="#c62828")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("Jain fairness over outbound SAs", color="#c62828")
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"wrote {target}")


def main(source, target):
    data = json.load(open(source))
    tunnels = [r for r in data["results"] if r["kind"] == "tunnels"]
    if tunnels:
        others = [r for r in data["results"] if r["kind"] != "tunnels"]
        stem, dot, ext = target.rpartition(".")
        plot_tunnels(data, tunnels, target if not others else f"{stem}_tunnels{dot}{ext}")
        if not others:
            return
    children = [r for r in data["results"] if r["kind"] == "children"]
    pairs = [r for r in data["results"] if r["kind"] == "pairs"]
    control = [r for r in data["results"] if r["kind"] == "control"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    fig.suptitle(f"espgw under charon: scaling ({data['cpus']} CPUs, {data['date'][:10]})")

    n = [r["child_sas"] for r in children]
    ax = axes[0][0]
    ax.plot(n, [r["establish_seconds"] for r in children], "o-")
    ax.set_xscale("log")
    ax.set_xlabel("CHILD_SAs (1000 per IKE_SA)")
    ax.set_ylabel("seconds until espgw holds all SAs")
    ax.grid(True, alpha=0.3)

    ax = axes[0][1]
    rates = [(r["child_sas"], r["install_rate_sas_per_second"]) for r in children
             if r["install_rate_sas_per_second"]]
    if rates:
        ax.plot([x for x, _ in rates], [y for _, y in rates], "o-", label="with charon (IKE included)")
    if control:
        ax.plot([r["child_sas"] for r in control], [r["install_rate_sas_per_second"] for r in control],
                "s", color="#2e7d32", label="espgw's control socket alone")
    ax.axhline(2000, color="grey", linestyle="--", label="target 2000 SAs/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("CHILD_SAs (1000 per IKE_SA)")
    ax.set_ylabel("SAs installed per second")
    ax.legend()
    ax.grid(True, alpha=0.3)

    ax = axes[1][0]
    marginal = [(r["child_sas"], r["marginal_bytes_per_sa"] / 1024) for r in children
                if r.get("marginal_bytes_per_sa")]
    if marginal:
        ax.plot([x for x, _ in marginal], [y for _, y in marginal], "o-",
                label="with charon, growth beyond the smallest run")
    if control:
        ax.plot([r["child_sas"] for r in control], [r["bytes_per_sa"] / 1024 for r in control],
                "s", color="#2e7d32", label="control socket alone, growth from empty")
    ax.axhline(4, color="grey", linestyle="--", label="target 4 KiB")
    ax.set_xscale("log")
    ax.set_xlabel("CHILD_SAs (1000 per IKE_SA)")
    ax.set_ylabel("espgw RSS growth per SA, KiB")
    ax.legend()
    ax.grid(True, alpha=0.3)

    ax = axes[1][1]
    m = [r["ike_sas"] for r in pairs]
    ax.bar([str(x) for x in m], [r["throughput_gbps"] or 0 for r in pairs], color="#1565c0")
    ax.set_xlabel("ECMP members (IKE_SAs, one CHILD_SA each)")
    ax.set_ylabel("aggregate TCP Gbit/s")
    twin = ax.twinx()
    twin.plot([str(x) for x in m], [r["jain_fairness"] or 0 for r in pairs], "o-", color="#c62828")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("Jain fairness over members", color="#c62828")
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
