#!/bin/bash
# Compares two builds of the pipeline benchmark (bench/pipeline_bench.cpp) on a small,
# noisy machine: both binaries run at the same time, one per CPU, and swap CPUs every
# round, so both see the same neighbours; each is judged by its own process's ratio to
# raw ipsec-mb (of_raw), measured in the same run. Alternating runs of one build after
# the other moved by 0.2-0.4 of raw between rounds on the shared hosts; this way the two
# builds' medians are comparable to a percent or two.
#
# Usage: bench/ab_pipeline_bench.sh OLD_BINARY NEW_BINARY [ROUNDS]
#   e.g. cp build/release/bench/espgw_pipeline_bench /tmp/old   (before the change)
#        cmake --build build/release --target espgw_pipeline_bench
#        bench/ab_pipeline_bench.sh /tmp/old build/release/bench/espgw_pipeline_bench 12
# Environment: AB_FILTER (benchmark filter; default raw + the inline cases of 1 and 64
# SAs), AB_MIN_TIME (default 0.25), AB_CPUS (two CPUs, default "0 1"), AB_SPLIT=1 (both
# builds must know --pipeline_time_crypto: also compares rest/cipher, the engine's own
# time per ns of cipher, which repeats far better than of_raw: lower is better).
# Prints, per case, each build's median of_raw and the rounds' values.
set -eu

old=$1
new=$2
rounds=${3:-8}
filter=${AB_FILTER:-'raw/AES-128-GCM/roundtrip/1400/real_time|pipeline/sas:(1|64)/inline/'}
min_time=${AB_MIN_TIME:-0.25}
read -r cpu_a cpu_b <<<"${AB_CPUS:-0 1}"
split_flag=()
[ "${AB_SPLIT:-0}" = 1 ] && split_flag=(--pipeline_time_crypto)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then first=$cpu_a second=$cpu_b; else first=$cpu_b second=$cpu_a; fi
  taskset -c "$first" "$old" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
    "${split_flag[@]}" >"$work/old.$round" 2>&1 &
  taskset -c "$second" "$new" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
    "${split_flag[@]}" >"$work/new.$round" 2>&1 &
  wait
  for build in old new; do
    # The summary table: "SAs: N" starts a section, its rows are "case Gbit/s ... of_raw".
    awk -v build=$build '/^SAs: /{sas=$2} /^ *(inline|inl x[0-9]+|[0-9]+) /{
      row=$1; if ($1 == "inl") row="inl_" $2; col=(row ~ /^inl_x/) ? 9 : 8;
      print build, "sas" sas, row, $col}
      /^  pipeline\/sas:/{split($1, p, "/"); sub("sas:", "", p[2]); row=p[3];
      if (row ~ /^inline_threads:/) { sub("inline_threads:", "inl_x", row); if (p[4] != "") row="own_x" substr(row, 6) }
      print build, "sas" p[2], row "/rest", $6; print build, "sas" p[2], row "/cipher", $5}' "$work/$build.$round" >>"$work/values"
  done
done

python3 - "$work/values" <<'EOF'
import collections, statistics, sys
values = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build, sas, row, of_raw = line.split()
    values[(sas, row, build)].append(float(of_raw))
for sas, row in sorted({(k[0], k[1]) for k in values}):
    old, new = values[(sas, row, "old")], values[(sas, row, "new")]
    metric = "rest/cipher" if row.endswith("/rest") else "cipher/raw" if row.endswith("/cipher") else "of_raw"
    print(f"{sas:6} {row:12} {metric} old {statistics.median(old):.3f}  new {statistics.median(new):.3f}"
          f"   old: {' '.join(f'{v:.3f}' for v in old)}   new: {' '.join(f'{v:.3f}' for v in new)}")
EOF
