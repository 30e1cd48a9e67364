#!/usr/bin/env bash
# README command 1: install the dependencies, build, and run the site-to-site demo (two
# charons with the espgw plugin and two espgw gateways in network namespaces, the tunnel
# brought up with swanctl; tools/site_to_site_demo.sh), followed by the engine benchmark
# against raw ipsec-mb measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release

echo "=== site-to-site demo ==="
bash tools/site_to_site_demo.sh build/release 5
echo "=== ESP engine benchmark (AES-128-GCM, ipsec-mb; ratio = raw time / espgw time) ==="
build/release/bench/espgw_esp_bench --benchmark_filter='AES-128-GCM/.*/1400' \
  --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true
