#!/usr/bin/env bash
# Isolation under attack (docs/security_isolation.md): 10^6 hostile datagrams (tests/netns/storm.py:
# random bytes, forged ESP on the real SPI, unknown SPIs, truncated headers, IKE-marker
# garbage, keepalives, oversized datagrams, garbage to UDP 500) at gwB of the netns
# topology of tests/netns/lib.sh (static SAs, ESP in UDP, 2 workers per gateway; gwB with
# a control socket and no charon), once paced at 50,000/s and once unpaced, while lanA
# pings lanB 100 times a second. Per storm: what was sent and how fast, where every
# datagram ended (espgw's counters and the kernel's), the pings' loss, and gwB's RSS
# before and after. A warm-up storm of 100,000 comes first, so that the two measured
# ones start from a gateway whose pools and buffers have their size.
#
#   bash bench/storm_bench.sh            (root; about a minute)
#   STORM_COUNT=1000000 STORM_RATES="50000 0" BENCH_OUT=bench/results/storm.json
#   ESPGW=path/to/espgw   default build/storm/daemon/espgw, built if absent
#   ESPGWCTL=path/to/espgwctl   default: the espgwctl of ESPGW's build tree
#
# Writes BENCH_OUT (JSON, one object per storm) and prints a table.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
STORM_COUNT=${STORM_COUNT:-1000000}
STORM_RATES=${STORM_RATES:-50000 0}
BENCH_OUT=${BENCH_OUT:-$ROOT/bench/results/storm.json}
if [[ -z ${ESPGW:-} ]]; then
  ESPGW=$ROOT/build/storm/daemon/espgw
  if [[ ! -x $ESPGW ]]; then
    cmake -S "$ROOT" -B "$ROOT/build/storm" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$ROOT/build/storm" --target espgw espgwctl >/dev/null
  fi
fi
ESPGW=$(readlink -f "$ESPGW")
ESPGWCTL=${ESPGWCTL:-$(dirname "$ESPGW")/../../daemon/espgwctl}
HERE=$ROOT/tests/netns  # lib.sh finds storm.py there
# shellcheck source=tests/netns/lib.sh
source "$HERE/lib.sh"

setup_topology
storm_configs
start_gateway "$GWA" a
start_gateway "$GWB" b
in_ns "$LANA" ping -c 20 -i 0.01 -W 1 10.2.0.2 >/dev/null
rss_start=$(vm_rss_kib "$PID_b")
storm_round warmup 100000 50000
rows=()
for rate in $STORM_RATES; do
  rss_before=$(vm_rss_kib "$PID_b")
  storm_round "storm-$rate" "$STORM_COUNT" "$rate"
  rss_after=$(vm_rss_kib "$PID_b")
  up=yes
  kill -0 "$PID_b" 2>/dev/null || up=no
  read -r received transmitted < <(ping_loss "storm-$rate")
  rows+=("$(/usr/bin/python3 - "$WORK/storm-$rate.storm" "$WORK/storm-$rate.account" \
    "$rate" "$rss_start" "$rss_before" "$rss_after" "$up" "${received:-0}" "${transmitted:-0}" <<'PY'
import json, sys
storm = json.load(open(sys.argv[1]))
account = json.load(open(sys.argv[2]))
rate, rss_start, rss_before, rss_after = (int(x) for x in sys.argv[3:7])
received, transmitted = int(sys.argv[8]), int(sys.argv[9])
print(json.dumps({
    "rate_asked": rate, "sent": storm["sent"], "seconds": storm["seconds"],
    "rate_reached": storm["rate"], "per_class": storm["per_class"],
    "accounted": account["accounted"], "unaccounted": account["unaccounted"],
    "kernel_drops": account["kernel_drops"], "breakdown": account["breakdown"],
    "gateway_up": sys.argv[7] == "yes",
    "rss_kib": {"start": rss_start, "before": rss_before, "after": rss_after},
    "ping": {"transmitted": transmitted, "received": received,
             "loss_percent": round(100 * (1 - received / transmitted), 2) if transmitted else None},
}))
PY
)")
done
stop_gateway "$GWA" a
stop_gateway "$GWB" b
PIDS=()
mkdir -p "$(dirname "$BENCH_OUT")"
printf '%s\n' "${rows[@]}" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin if line.strip()]
json.dump({"benchmark": "storm", "count": rows[0]["sent"] if rows else 0, "storms": rows},
          open(sys.argv[1], "w"), indent=1)
print("| rate asked | sent | reached/s | accounted | unaccounted | kernel drops | ping loss | RSS before -> after (KiB) | up |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %d | %d | %d | %d | %d | %s%% (%d/%d) | %d -> %d | %s |" % (
        r["rate_asked"] or "unpaced", r["sent"], r["rate_reached"], r["accounted"],
        r["unaccounted"], r["kernel_drops"], r["ping"]["loss_percent"],
        r["ping"]["transmitted"] - r["ping"]["received"], r["ping"]["transmitted"],
        r["rss_kib"]["before"], r["rss_kib"]["after"], "yes" if r["gateway_up"] else "NO"))
for r in rows:
    print("breakdown (%s): %s" % (r["rate_asked"] or "unpaced", json.dumps(r["breakdown"])))
' "$BENCH_OUT"
