#!/usr/bin/env python3
"""Instructions and simulated L1 misses per packet, per function, from callgrind files.

Usage: per_packet_costs.py BASE.callgrind [NEW.callgrind] [ROWS]

bench/count_pipeline_costs.sh writes the files. Self cost per function (callgrind_annotate
--inclusive=no) is divided by the number of calls to SaCrypto::seal in the same file: one
per packet in the pipeline benchmark, so runs of different lengths compare. With two
files, prints both side by side, largest differences first.
"""
import re
import subprocess
import sys

EVENTS = ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
IR, D1MR, D1MW, DLMR, DLMW = (EVENTS.index(e) for e in ("Ir", "D1mr", "D1mw", "DLmr", "DLmw"))


def packets(path):
    """Calls to SaCrypto::seal recorded in a callgrind file."""
    lines = open(path).read().split("\n")
    names = {}
    for line in lines:
        m = re.match(r"^c?fn=\((\d+)\) (.*)$", line)
        if m:
            names[m.group(1)] = m.group(2)
    seal = {k for k, v in names.items() if v.startswith("espgw::esp::SaCrypto::seal")}
    calls = 0
    for i, line in enumerate(lines):
        m = re.match(r"^cfn=\((\d+)\)", line)
        if m and m.group(1) in seal and i + 1 < len(lines) and lines[i + 1].startswith("calls="):
            calls += int(lines[i + 1].split()[0].split("=")[1])
    if calls == 0:
        sys.exit(f"{path}: no calls to SaCrypto::seal (was --cache-sim=yes set, and the toggle right?)")
    return calls


def self_costs(path):
    """function -> the nine event counts, self cost."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", path],
        capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.split("\n"):
        fields = re.sub(r"\(\s*[\d.]+%\)", "", line).split()
        if len(fields) < 10 or not re.match(r"^[\d,.]+$", fields[0]):
            continue
        values = [0 if f == "." else int(f.replace(",", "")) for f in fields[:9]]
        name = " ".join(fields[9:])
        if name == "PROGRAM TOTALS":
            continue
        name = re.sub(r" \[.*\]$", "", name)
        if ":" in name and not name.startswith("espgw"):
            name = name.split(":", 1)[1]  # drop the source file
        name = re.sub(r"\(.*", "", name)[:80]  # drop the parameter list
        total = costs.setdefault(name, [0] * 9)
        for i in range(9):
            total[i] += values[i]
    return costs


def main():
    args = sys.argv[1:]
    rows = int(args.pop()) if args and args[-1].isdigit() else 40
    if not args:
        sys.exit(__doc__)
    runs = [(path, packets(path), self_costs(path)) for path in args]

    def total(costs, n, events):
        return sum(sum(v[e] for e in events) for v in costs.values()) / n

    for path, n, costs in runs:
        print(f"{path}: {n} packets; per packet {total(costs, n, [IR]):.0f} instructions, "
              f"{total(costs, n, [D1MR, D1MW]):.2f} L1 misses, "
              f"{total(costs, n, [DLMR, DLMW]):.2f} LL misses")
    names = set().union(*(costs for _, _, costs in runs))
    table = []
    for name in names:
        row = []
        for _, n, costs in runs:
            v = costs.get(name, [0] * 9)
            row += [v[IR] / n, (v[D1MR] + v[D1MW]) / n]
        table.append((name, row))
    if len(runs) == 2:
        table.sort(key=lambda r: -(abs(r[1][2] - r[1][0]) + 60 * abs(r[1][3] - r[1][1])))
    else:
        table.sort(key=lambda r: -(r[1][0] + 60 * r[1][1]))
    header = "".join(f"{'instr':>9} {'L1 miss':>8}" for _ in runs)
    print(f"\n{header}  function (per packet, self cost)")
    for name, row in table[:rows]:
        print("".join(f"{row[i]:9.1f} {row[i + 1]:8.2f}" for i in range(0, len(row), 2)) + "  " + name)


if __name__ == "__main__":
    main()
