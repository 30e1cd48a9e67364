#!/usr/bin/env bash
# The cost of one `espgwctl metrics` export with many SAs: one espgw (static SAs, no
# traffic, in a network namespace of its own) holding T tunnels (2T SAs), and the
# median wall time of 7 exports with per-SA series, without them (--no-sa-series), and of
# `espgwctl sas` (the table) for comparison, with the size and series count of the export.
# Needs root; run under the netns lock.
#   bench/metrics_cost.sh [BUILD_DIR] [TUNNELS]   (defaults: build/release 5000)
set -euo pipefail
BUILD=${1:-build/release}
TUNNELS=${2:-5000}
ESPGW=$BUILD/daemon/espgw
ESPGWCTL=$BUILD/daemon/espgwctl
WORK=$(mktemp -d /tmp/espgw-metrics-cost.XXXXXX)
cleanup() {
  [[ -n ${PID:-} ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
/usr/bin/python3 - "$TUNNELS" "$WORK/static.conf" <<'PY'
import ipaddress, os, sys
count, path = int(sys.argv[1]), sys.argv[2]
first = ipaddress.ip_address("10.2.100.1")
lines = []
for i in range(count):
    reqid, host = i + 1, f"{first + i}/32"
    lines += [f"sa out spi {0x10000 + i} aes-gcm-128 key {os.urandom(20).hex()} src 127.0.0.1 dst 127.0.0.2 reqid {reqid}",
              f"sa in spi {0x20000 + i} aes-gcm-128 key {os.urandom(20).hex()} src 127.0.0.2 dst 127.0.0.1 reqid {reqid}",
              f"policy out local 10.1.0.0/16 remote {host} action protect reqid {reqid}",
              f"policy fwd local 10.1.0.0/16 remote {host} action protect reqid {reqid}"]
with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    f.write("\n".join(lines) + "\n")
PY
cat >"$WORK/espgw.conf" <<EOS
tun-name = espgwcost0
local-address = 127.0.0.1
state-dir = state
static-sa-file = static.conf
control-socket = $WORK/control.sock
ike-port = 0
workers = 1
EOS
unshare --net "$ESPGW" -c "$WORK/espgw.conf" >"$WORK/espgw.log" 2>&1 &
PID=$!
for _ in $(seq 600); do
  grep -q "gateway up" "$WORK/espgw.log" && [[ -S $WORK/control.sock ]] && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/espgw.log"; exit 1; }
  sleep 0.1
done
CTL=("$ESPGWCTL" --socket "$WORK/control.sock")
median_ms() {  # median_ms COMMAND...: the median wall time of 7 runs, in ms
  local times=() i start
  for i in 1 2 3 4 5 6 7; do
    start=$(date +%s%N)
    "$@" >/dev/null
    times+=($((($(date +%s%N) - start) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 4p | awk '{printf "%.1f", $1 / 1000}'
}
sas=$("${CTL[@]}" --json stats | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["sas"])')
"${CTL[@]}" metrics >"$WORK/metrics.om"
echo "SAs: $sas"
echo "metrics: $(median_ms "${CTL[@]}" metrics) ms, $(wc -c <"$WORK/metrics.om") bytes," \
  "$(grep -vc '^#' "$WORK/metrics.om") series"
echo "metrics --no-sa-series: $(median_ms "${CTL[@]}" metrics --no-sa-series) ms"
echo "sas (table): $(median_ms "${CTL[@]}" sas) ms"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) vCPUs"
