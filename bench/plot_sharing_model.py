#!/usr/bin/python3
"""One SA across cores: the measured sharing ratios and the model's projection.

Usage: plot_sharing_model.py SHARING_JSON SERIAL_JSON OUT_PNG OUT_MODEL_JSON [--transfer-ns N]

Reads the two Google Benchmark JSON files bench/sharing_bench.sh writes (medians of
interleaved repetitions). The model (docs/performance.md, "One SA over many cores"):
the one-reader case's serial sections give the hold time per packet (hold) and the
section entries per packet (entries), but for the sequence number, which a reader alone
on an SA takes per packet on lines no other core touches, and threads that share the SA
per batch: that section's hold and entries come from two readers sharing one SA. With N
cores interleaving on one SA each entry is
another core's with probability (N-1)/N and then moves the section's cache line once
(transfer), so
    s(N) = hold + entries * (N-1)/N * transfer
    speed-up(N) = T1 / (s(N) + (T1 - hold) / N)       T1 = one reader's CPU ns per packet
and with workers behind one reader (the reader's share r of the work stays on one core and
takes every sequence number itself, the rest goes to N-1 workers, which pass the per-batch
sections among them):
    workers(N) = T1 / max(r, s_w(N), (W1 - r) / (N - 1))  W1 = CPU ns per packet, 1 worker
where r and W1 leave out the time the reader spent waiting for room (it yields, and on
a CPU of its own that burns what it waits).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RAW1 = "raw/AES-128-GCM/roundtrip/1400/real_time"
RAW2 = "raw/AES-128-GCM/roundtrip/1400/parallel:2/real_time/threads:2"
HANDOFF = "handoff/cache_line_round_trip/after_pipeline/real_time"
INLINE = "pipeline/sas:1/inline/process_time/real_time"
WORKER1 = "pipeline/sas:1/workers:1/process_time/real_time"
SHARED1 = "pipeline/sas:1/inline_threads:2/process_time/real_time"
OWN2 = "pipeline/sas:2/inline_threads:2/reader_per_sa/process_time/real_time"
SHARED4 = "pipeline/sas:4/inline_threads:2/process_time/real_time"
OWN4 = "pipeline/sas:4/inline_threads:2/reader_per_sa/process_time/real_time"
SECTIONS = ["sequence", "replay_commit", "release_lock", "delivery"]
CORES = [1, 2, 4, 8, 16, 32, 64]


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        out[b.get("run_name", b["name"])] = b
    return out


def main():
    args = sys.argv[1:]
    transfer_override = None
    if "--transfer-ns" in args:
        i = args.index("--transfer-ns")
        transfer_override = float(args[i + 1])
        del args[i:i + 2]
    sharing_path, serial_path, out_png, out_json = args
    m = medians(sharing_path)
    s = medians(serial_path)

    def gbps(name):
        return m[name]["Gbps"] if name in m else None

    ratios = {}
    if gbps(SHARED1) and gbps(OWN2):
        ratios["one SA shared by 2 / SAs of their own"] = gbps(SHARED1) / gbps(OWN2)
    if gbps(SHARED4) and gbps(OWN4):
        ratios["group of 4 shared by 2 / 4 SAs split"] = gbps(SHARED4) / gbps(OWN4)
    raw_speedup = gbps(RAW2) / gbps(RAW1) if gbps(RAW1) and gbps(RAW2) else None
    if gbps(OWN2) and gbps(INLINE) and raw_speedup:
        ratios["own SAs' speed-up / raw's"] = gbps(OWN2) / gbps(INLINE) / raw_speedup

    transfer = transfer_override
    if transfer is None:
        # The fastest chunk of round trips: the median includes descheduled threads.
        transfer = s[HANDOFF].get("fastest_ns", s[HANDOFF]["real_time"]) / 2 if HANDOFF in s else 0.0
    # The other sections' holds in the shared run also hold the line transfers inside
    # them, which the model adds per entry: those come from the reader alone.
    one = s[INLINE]
    source = {x: s[SHARED1] if x == "sequence" else one for x in SECTIONS}
    hold = sum(source[x].get(f"serial_{x}_hold_ns", 0) for x in SECTIONS)
    entries = {x: source[x].get(f"serial_{x}_entries", 0) for x in SECTIONS}
    t1 = one["cpu_ns_per_packet"]

    def speedup(n, entry_total):
        serial = hold + entry_total * (n - 1) / n * transfer
        return t1 / (serial + (t1 - hold) / n)

    # Shared, the sequence number is taken once per reader batch and SA
    # (Pipeline::number_slot): the measured entries already say so.
    today = {n: speedup(n, sum(entries.values())) for n in CORES}
    # Workers behind one reader: the reader alone takes the sequence numbers (no hand-over);
    # the per-batch sections pass among the N-1 workers.
    def workers_bound(n):
        # While the worker is behind, the reader waits for room by yielding, which on a
        # CPU of its own burns the time it waits: that is not work one more core removes.
        one_worker = m[WORKER1]
        waited = one_worker["feeder_wait"] * one_worker["ns_per_packet"]
        w1 = one_worker["cpu_ns_per_packet"] - waited
        r = max(0.0, one_worker["feeder_cpu_ns_per_packet"] - waited)
        moving = sum(entries.values()) - entries["sequence"]
        serial = hold + (moving * (n - 2) / (n - 1) * transfer if n > 2 else 0.0)
        return max(r, serial, (w1 - r) / (n - 1))

    workers = {}
    overtake = None
    if WORKER1 in m and INLINE in m:
        t1_run = m[INLINE]["cpu_ns_per_packet"]
        workers = {n: t1_run / workers_bound(n) for n in CORES if n > 1}
        overtake = next((n for n in range(2, 257) if t1_run / workers_bound(n) > 1.0), None)
    model = {"t1_cpu_ns": t1, "hold_ns": hold, "entries_per_packet": entries,
             "transfer_ns": transfer, "ratios": ratios, "raw_two_thread_speedup": raw_speedup,
             "speedup_one_sa": today,
             "speedup_workers_one_reader": workers, "workers_overtake_inline_at_cores": overtake}
    with open(out_json, "w") as f:
        json.dump(model, f, indent=2)
    for k, v in ratios.items():
        print(f"{k:45s} {v:.3f}")
    print(f"T1 {t1:.1f} ns, serial hold {hold:.1f} ns, entries {sum(entries.values()):.3f} "
          f"per packet, transfer {transfer:.0f} ns")
    print("cores        " + " ".join(f"{n:6d}" for n in CORES))
    print("one SA       " + " ".join(f"{today[n]:6.2f}" for n in CORES))
    if workers:
        print("workers      " + "       " + " ".join(f"{workers[n]:6.2f}" for n in CORES[1:]))
    print(f"workers overtake inline (one tunnel, one reader) at {overtake} cores")

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names = list(ratios)
    left.bar(range(len(names)), [ratios[k] for k in names], color="#1565c0")
    left.axhline(0.9, color="#c62828", linestyle="--", label="target 0.9")
    left.set_xticks(range(len(names)))
    left.set_xticklabels([k.replace(" / ", "\n/ ") for k in names], fontsize=8)
    left.set_ylabel("ratio, same run (medians)")
    left.set_title("Two readers: sharing and parallel efficiency")
    left.legend()
    right.plot(CORES, CORES, color="#2e7d32", label="per-CPU SAs (Linux): linear")
    right.fill_between(CORES, 4.5, 5.0, color="#ff9800", alpha=0.3,
                       label="Linux pcrypt, one SA: 1 -> 4.5-5 Gbit/s")
    right.plot(CORES, [today[n] for n in CORES], "o-", color="#1565c0",
               label="espgw, one SA shared (model from measured sections)")
    if workers:
        right.plot(CORES[1:], [workers[n] for n in CORES[1:]], "^-", color="#5e35b1",
                   label="espgw, one reader + N-1 workers (model)")
    right.axhline(1.0, color="#9e9e9e", linestyle=":", label="inline: one reader, one core per tunnel")
    right.set_xscale("log", base=2)
    right.set_yscale("log", base=2)
    right.set_xticks(CORES)
    right.set_xticklabels([str(n) for n in CORES])
    right.set_xlabel("cores")
    right.set_ylabel("speed-up of one SA over one core")
    right.set_title(f"One SA over N cores (transfer {transfer:.0f} ns, T1 {t1:.0f} ns)")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


if __name__ == "__main__":
    main()
