#!/bin/sh
# Runs the ESP engine micro benchmark (bench/esp_bench.cpp): espgw encap/decap against raw
# ipsec-mb, 5 repetitions, medians. Writes
#   bench/results/esp_bench.json   Google Benchmark JSON (aggregates only)
#   bench/results/esp_ratios.txt   espgw/raw ratio table (from the medians)
#   bench/results/esp_bench.txt    console output
# and, when matplotlib is available, docs/img/esp_bench.png (bench/plot_esp_bench.py).
#
# Extra arguments go to the binary, e.g. a quick check:
#   bench/run_esp_bench.sh --benchmark_min_time=0.05
# or one algorithm:
#   bench/run_esp_bench.sh --benchmark_filter=AES-128-GCM
# Environment: BUILD_DIR (default build/release), JOBS (ninja -j, default 2).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build/release}
binary="$build_dir/bench/espgw_esp_bench"

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake --preset release
fi
ninja -C "$build_dir" -j "${JOBS:-2}" espgw_esp_bench

mkdir -p bench/results
# Random interleaving runs the repetitions of all benchmarks in random order, so that a raw
# benchmark and its espgw counterpart see the same background load on average (side by side,
# in one run).
"$binary" \
  --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true \
  --benchmark_out=bench/results/esp_bench.json \
  --benchmark_out_format=json \
  --esp_ratios_out=bench/results/esp_ratios.txt \
  "$@" | tee bench/results/esp_bench.txt

if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 bench/plot_esp_bench.py bench/results/esp_bench.json docs/img/esp_bench.png
else
  echo "matplotlib missing (apt-get install -y python3-matplotlib): no plot" >&2
fi
