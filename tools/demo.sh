#!/usr/bin/env bash
# README command 1. Until the site-to-site demo exists (it needs the daemon, issue
# "Gateway I/O"), this installs the dependencies, builds, runs the engine's self-test
# (published vectors, the encap/decap matrix, malformed-packet drops) and the two
# benchmarks, which print espgw's throughput next to raw ipsec-mb measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release

echo "=== self-test ==="
build/release/tests/espgw_unit_tests \
  --gtest_filter='Documents/*:Matrix/*:DecapDrops.*:EncapDrops.*' --gtest_brief=1
echo "=== ESP engine benchmark (AES-128-GCM, ipsec-mb; ratio = raw time / espgw time) ==="
build/release/bench/espgw_esp_bench --benchmark_filter='AES-128-GCM/.*/1400' \
  --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true
echo "=== parallel pipeline benchmark (encrypt -> decrypt -> in-order delivery, in memory) ==="
build/release/bench/espgw_pipeline_bench --benchmark_min_time=0.2 \
  --benchmark_filter='raw|pipeline'
