#!/bin/bash
# Instructions and L1 misses per packet of the in-memory pipeline, counted rather than
# timed: callgrind with its cache simulation runs the pipeline benchmark's inline cases
# (one thread, run to completion), counting only the feeder's batches (the set-up, the
# pool touch and the rig, stay out). The counts do not depend on the host's noise, which
# on this project's shared 2-vCPU VMs hides differences below ~3% in timed runs
# (bench/ab_pipeline_bench.sh). Simulated caches: 32 KiB 8-way L1 data, 512 KiB 8-way
# "LL" (the Zen 3 L2 size; valgrind calls the last level it simulates LL).
#
# Usage: bench/count_pipeline_costs.sh [BINARY] [OUT_DIR]
#   BINARY   default build/release/bench/espgw_pipeline_bench
#   OUT_DIR  default /tmp/pipeline-costs; gets sas1.callgrind and sas64.callgrind
# Then: bench/per_packet_costs.py OUT/sas1.callgrind OUT/sas64.callgrind  (1 SA against
# 64), or the same case of two builds against each other. About 20 s per case. A short run
# still includes each rig's first packet per flow, which scores every ECMP member
# (SaGroup::score looks larger than in a long run).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/build/release/bench/espgw_pipeline_bench}
out=${2:-/tmp/pipeline-costs}
command -v valgrind >/dev/null || { echo "needs valgrind: run tools/install-deps.sh" >&2; exit 1; }
mkdir -p "$out"
for sas in 1 64; do
  valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=524288,8,64 \
    --toggle-collect='*pipeline_bench*Feeder*' --callgrind-out-file="$out/sas$sas.callgrind" \
    "$binary" --benchmark_filter="pipeline/sas:$sas/inline/" --benchmark_min_time=2 \
    >/dev/null 2>&1
done
python3 "$root/bench/per_packet_costs.py" "$out/sas1.callgrind" "$out/sas64.callgrind" 30
