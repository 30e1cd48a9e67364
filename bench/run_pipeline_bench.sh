#!/bin/sh
# Runs the parallel pipeline benchmark (bench/pipeline_bench.cpp): classify -> encrypt ->
# loopback -> decrypt -> reorder -> deliver through esp_engine/pipeline, 1 and 64 SAs,
# 1..N workers, against raw single-thread ipsec-mb in the same binary; 3 repetitions,
# medians. Writes
#   bench/results/pipeline_bench.json    Google Benchmark JSON (aggregates only)
#   bench/results/pipeline_summary.txt   the summary table (Gbit/s, Mpps, scaling, fraction
#                                        of raw, CPU ns per packet, reorder buffer cost)
#   bench/results/pipeline_bench.txt     console output
# and, when matplotlib is available, docs/img/pipeline_scaling.png
# (bench/plot_pipeline_bench.py).
#
# The feeder (the benchmark thread) is a busy thread besides the workers: with as many
# workers as CPUs the machine is oversubscribed; see the note in the summary.
#
# Extra arguments go to the binary, e.g. a quick check:
#   bench/run_pipeline_bench.sh --benchmark_min_time=0.05
# or chosen worker counts on a big machine:
#   bench/run_pipeline_bench.sh --pipeline_workers=1,2,4,8,12,16
# Environment: BUILD_DIR (default build/release), JOBS (ninja -j, default 2).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build/release}
binary="$build_dir/bench/espgw_pipeline_bench"

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake --preset release
fi
ninja -C "$build_dir" -j "${JOBS:-2}" espgw_pipeline_bench

mkdir -p bench/results
"$binary" \
  --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true \
  --benchmark_out=bench/results/pipeline_bench.json \
  --benchmark_out_format=json \
  --pipeline_summary_out=bench/results/pipeline_summary.txt \
  "$@" | tee bench/results/pipeline_bench.txt

if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 bench/plot_pipeline_bench.py bench/results/pipeline_bench.json \
    docs/img/pipeline_scaling.png
else
  echo "matplotlib missing (apt-get install -y python3-matplotlib): no plot" >&2
fi
