#!/bin/sh
# One SA across cores: every figure of docs/performance.md "One SA over many cores" in one
# command. Two runs of the pipeline benchmark (bench/pipeline_bench.cpp), readers running to
# completion, AES-128-GCM, 1400 bytes, both directions:
#   1. throughput, ROUNDS repetitions in random interleaving (medians): one reader on one
#      SA; two readers sharing one SA, sharing an ECMP group of 4, and on SAs of their own
#      (2 SAs, 4 SAs); one worker behind one reader; raw ipsec-mb in one and two threads.
#      -> bench/results/sharing.json, sharing_summary.txt (the ratios against the targets)
#   2. the same cases of one SA with --pipeline_time_serial (the serial sections timed, which
#      slows them, so apart from run 1), SERIAL_ROUNDS repetitions
#      -> bench/results/sharing_serial.json, sharing_serial_summary.txt
# then bench/plot_sharing_model.py: the model's projection to 64 cores, beside pcrypt and
# per-CPU SAs -> docs/img/sharing_model.png, bench/results/sharing_model.json.
#
# Run it under the benchmark lock on a quiet machine:
#   flock /tmp/espgw-netns.lock bench/sharing_bench.sh
# Environment: BUILD_DIR (default build/release), ROUNDS (default 9), SERIAL_ROUNDS
# (default 5), MIN_TIME (default 0.3 s per case), TRANSFER_NS (the one-way cache-line
# transfer the model assumes; default: half the fastest bounce round trip of the run).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build/release}
binary="$build_dir/bench/espgw_pipeline_bench"
[ -f "$build_dir/build.ninja" ] || cmake --preset release
ninja -C "$build_dir" -j "${JOBS:-2}" espgw_pipeline_bench

transfer=""
[ -n "${TRANSFER_NS:-}" ] && transfer="--pipeline_transfer_ns=$TRANSFER_NS"
mkdir -p bench/results
common="--pipeline_sas=1,2,4 --pipeline_workers=1,2 --benchmark_min_time=${MIN_TIME:-0.3}
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
  --benchmark_out_format=json"

# shellcheck disable=SC2086  # $common and $transfer are lists of flags
"$binary" $common $transfer --benchmark_repetitions="${ROUNDS:-9}" \
  --benchmark_filter='^raw/|^handoff/|^pipeline/sas:1/(inline|workers:1)/|inline_threads:2' \
  --benchmark_out=bench/results/sharing.json \
  --pipeline_summary_out=bench/results/sharing_summary.txt >/dev/null
# shellcheck disable=SC2086
"$binary" $common $transfer --benchmark_repetitions="${SERIAL_ROUNDS:-5}" --pipeline_time_serial \
  --benchmark_filter='^raw/|^handoff/|^pipeline/sas:1/(inline/|inline_threads:2)' \
  --benchmark_out=bench/results/sharing_serial.json \
  --pipeline_summary_out=bench/results/sharing_serial_summary.txt >/dev/null

sed -n '/^Sharing/,/^$/p' bench/results/sharing_summary.txt
sed -n '/^Serial sections/,/^$/p' bench/results/sharing_serial_summary.txt
/usr/bin/python3 bench/plot_sharing_model.py bench/results/sharing.json \
  bench/results/sharing_serial.json docs/img/sharing_model.png bench/results/sharing_model.json \
  ${TRANSFER_NS:+--transfer-ns "$TRANSFER_NS"}
