#!/usr/bin/env bash
# Multi-tunnel scaling harness: espgw under two charons (the espgw plugin) in the
# four-namespace topology of tests/netns/lib.sh, at growing numbers of SAs.
#
#   children  N CHILD_SAs (N in SCALE_CHILDREN, default 1 10 100 1000 5000), each child
#             config with its own traffic selector (remote UDP port 20000+i), on one
#             IKE_SA per SCALE_CHILDREN_PER_IKE (1000) children, all started by charon
#             when the config is loaded (start_action = start). Measures the time until espgw holds all 2N SAs, the rate at which
#             the plugin installed them (espgw's log timestamps of the first and last
#             install), and espgw's memory per SA (VmRSS growth / 2N).
#   control   espgw alone, no charon: bench/control_install_bench.cpp sends the plugin's
#             requests for N CHILD_SAs (N in SCALE_CONTROL, default 5000: 10,000 SAs)
#             straight to espgw's control socket, one at a time, then deletes them.
#             Measures espgw's own install and removal rates and memory per SA, apart
#             from what IKE and charon cost.
#   pairs     M IKE_SAs (M in SCALE_PAIRS, default 1 2 4 8), each with one CHILD_SA of the
#             same child config (espgw's parallel-child; reuse_ikesa = no): the ECMP
#             group of M members. Measures the time to establish them, the aggregate
#             iperf3 TCP throughput with SCALE_FLOWS (16) flows for SCALE_SECONDS (5), and
#             how fairly the flows' packets spread over the M outbound SAs (Jain's index,
#             1 = even).
#   tunnels   T tunnels (T in SCALE_TUNNELS, default 1 10 100 1000) between two espgw
#             from static SA files, no charon: an SA pair per tunnel with its own keys and
#             reqid, and out and fwd policies from lanA's 10.1.0.0/16 to one remote host of
#             its own (10.2.100.1 onwards, /32). espgw_udp_spray (bench/udp_spray.cpp) sends
#             1400-byte UDP datagrams from lanA to all T hosts round robin for
#             SCALE_TUNNEL_SECONDS (5) and counts what reaches lanB. Measures the aggregate
#             throughput delivered through all tunnels together (flat as T grows when
#             nothing per packet grows with the number of tunnels) and how evenly the
#             outbound SAs carried it (Jain's index over the T SAs).
#
# Writes SCALE_OUT (bench/results/scaling.json) and SCALE_PLOT (docs/img/scaling.png,
# empty: no plot). Needs root; builds nothing: BUILD (default build/release) must hold
# espgw, espgwctl and the plugin. Namespaces and processes are removed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(readlink -f "${BUILD:-$ROOT/build/release}")
ESPGW=$BUILD/daemon/espgw
ESPGWCTL=$BUILD/daemon/espgwctl
PLUGIN=$BUILD/vici_bridge/charon_plugin/libstrongswan-espgw.so
SCALE_CHILDREN=${SCALE_CHILDREN-1 10 100 1000 5000}
SCALE_PAIRS=${SCALE_PAIRS-1 2 4 8}
SCALE_TUNNELS=${SCALE_TUNNELS-1 10 100 1000}
SCALE_TUNNEL_SECONDS=${SCALE_TUNNEL_SECONDS:-5}
SPRAY=$BUILD/bench/espgw_udp_spray
SCALE_CHILDREN_PER_IKE=${SCALE_CHILDREN_PER_IKE:-1000}
SCALE_CONTROL=${SCALE_CONTROL-5000}
INSTALL_BENCH=$BUILD/bench/espgw_control_install_bench
SCALE_FLOWS=${SCALE_FLOWS:-16}
SCALE_SECONDS=${SCALE_SECONDS:-5}
SCALE_OUT=${SCALE_OUT:-$ROOT/bench/results/scaling.json}
SCALE_PLOT=${SCALE_PLOT-$ROOT/docs/img/scaling.png}
for f in "$ESPGW" "$ESPGWCTL" "$PLUGIN" ${SCALE_CONTROL:+"$INSTALL_BENCH"} ${SCALE_TUNNELS:+"$SPRAY"}; do
  [[ -e $f ]] || { echo "missing $f: build first (cmake --preset release && cmake --build build/release)" >&2; exit 1; }
done

# shellcheck source=tests/netns/lib.sh
source "$ROOT/tests/netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$ROOT/tests/charon/charon_lib.sh"
trap 'stop_charons; cleanup' EXIT
log() { printf '[scaling] %s\n' "$*"; }
RESULTS=$WORK/results.jsonl
: >"$RESULTS"

now() { date +%s.%N; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
charon_sas() { espgw_json "$1" stats 'd["charon-sas"]' 2>/dev/null || echo 0; }
sas_at_least_n() { local n; n=$(charon_sas "$1") && ((n >= $2)); }

stop_daemons() {  # everything start_espgw/start_charon started, by PID: charons first
  stop_charons
  for pid in "${ESPGW_PID[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${ESPGW_PID[@]}"; do wait "$pid" 2>/dev/null || true; done
  ESPGW_PID=()
  rm -f "$WORK"/espgw-*.log "$WORK"/charon-*.log
}

# swanctl.conf with N children of distinct selectors (remote UDP port 20000+i), at most
# SCALE_CHILDREN_PER_IKE (1000) per connection: a bigger connection's load-conn message
# outgrows VICI's 512 KiB limit, and beyond that many CHILD_SAs a gateway has more peers.
write_children_conf() {  # write_children_conf SIDE N START_ACTION
  local side=$1 n=$2 start=$3 local_ts remote_ts i port children="" connections=()
  read -r local_ts remote_ts <<<"$(side_subnets "$side")"
  for ((i = 1; i <= n; i++)); do
    if ((i > 1 && (i - 1) % SCALE_CHILDREN_PER_IKE == 0)); then
      connections+=("$children")
      children=""
    fi
    port=$((20000 + i))
    # The port is on gwB's side of the selector: remote for gwA, local for gwB.
    if [[ $side == a ]]; then children+="      c$i {
        local_ts = $local_ts
        remote_ts = $remote_ts[udp/$port]"
    else children+="      c$i {
        local_ts = $local_ts[udp/$port]
        remote_ts = $remote_ts"
    fi
    children+="
        esp_proposals = aes128gcm16
        start_action = $start
      }
"
  done
  connections+=("$children")
  write_swanctl_children "$side" yes "${connections[@]}"
}

# Install timestamps (seconds of the day) of the first and last SA espgw installed.
install_span() {  # install_span SIDE -> "FIRST LAST COUNT"
  /usr/bin/python3 - "$WORK/espgw-$1.log" <<'PY'
import re, sys
stamps = []
for line in open(sys.argv[1]):
    m = re.match(r"(\d+):(\d+):(\d+\.\d+) espgw info: SA (in|out) spi \S+ .* installed", line)
    if m:
        stamps.append(int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)))
print(min(stamps, default=0), max(stamps, default=0), len(stamps))
PY
}

run_children() {  # run_children N
  local n=$1 rss_before rss_after t0 t1 timeout=$((30 + n / 10))
  start_espgw a
  start_espgw b
  start_charon a espgw
  start_charon b espgw
  write_children_conf b "$n" none
  write_children_conf a "$n" start
  load_swanctl b
  rss_before=$(rss_kib "${ESPGW_PID[a]}")
  t0=$(now)
  load_swanctl a  # start_action = start: charon initiates every child
  local ok=true
  wait_until "$timeout" sas_at_least_n a $((2 * n)) || ok=false
  t1=$(now)
  sleep 1  # let allocations settle before reading RSS
  rss_after=$(rss_kib "${ESPGW_PID[a]}")
  local have first last count
  have=$(charon_sas a)
  read -r first last count <<<"$(install_span a)"
  /usr/bin/python3 - "$n" "$have" "$ok" "$t0" "$t1" "$first" "$last" "$count" "$rss_before" "$rss_after" >>"$RESULTS" <<'PY'
import json, sys
n, have, ok, t0, t1, first, last, count, rss0, rss1 = sys.argv[1:]
n, have, count = int(n), int(have), int(count)
span = float(last) - float(first)
print(json.dumps({
    "kind": "children", "child_sas": n, "sas_expected": 2 * n, "sas_installed": have,
    "complete": ok == "true", "establish_seconds": round(float(t1) - float(t0), 3),
    "install_span_seconds": round(span, 3),
    "install_rate_sas_per_second": round((count - 1) / span, 1) if count > 1 and span > 0 else None,
    "rss_kib_before": int(rss0), "rss_kib_after": int(rss1),
    "bytes_per_sa": round((int(rss1) - int(rss0)) * 1024 / max(have, 1), 1),
}))
PY
  log "children $n: $(tail -1 "$RESULTS")"
  stop_daemons
}

run_control() {  # run_control N: N CHILD_SAs' requests straight to espgw's control socket
  start_espgw a
  if ! "$INSTALL_BENCH" "$WORK/espgw-a.ctl" "$1" "${ESPGW_PID[a]}" >>"$RESULTS" 2>"$WORK/control.err"; then
    log "control $1 failed: $(cat "$WORK/control.err")"
  fi
  log "control $1: $(tail -1 "$RESULTS")"
  stop_daemons
}

run_pairs() {  # run_pairs M
  local m=$1 t0 t1
  start_ecmp_pair "$m"
  t0=$(now)
  load_swanctl a  # espgw's parallel-child brings up the M CHILD_SAs
  local ok=true
  wait_until $((20 + m * 2)) sas_at_least_n a $((2 * m)) || ok=false
  t1=$(now)
  in_ns "$LANB" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$LANB' ss -Hltn 'sport = :5201' | grep -q ."
  in_ns "$LANA" timeout $((SCALE_SECONDS + 20)) iperf3 -c 10.2.0.2 -t "$SCALE_SECONDS" \
    -P "$SCALE_FLOWS" -C cubic -J >"$WORK/iperf.json" 2>/dev/null || true
  kill "$(cat "$WORK/iperf.pid" 2>/dev/null)" 2>/dev/null || true
  espgwctl_on a --json sas >"$WORK/sas.json" || echo '{}' >"$WORK/sas.json"
  /usr/bin/python3 - "$m" "$ok" "$t0" "$t1" "$WORK/iperf.json" "$WORK/sas.json" >>"$RESULTS" <<'PY'
import json, sys
m, ok, t0, t1, iperf_path, sas_path = sys.argv[1:]
m = int(m)
try:
    gbps = json.load(open(iperf_path))["end"]["sum_received"]["bits_per_second"] / 1e9
except Exception:
    gbps = None
sas = json.load(open(sas_path)).get("sas", {})
packets = [int(s["packets"]) for s in sas.values() if s.get("direction") == "out"]
total = sum(packets)
jain = (total * total) / (len(packets) * sum(p * p for p in packets)) if packets and total else None
print(json.dumps({
    "kind": "pairs", "ike_sas": m, "complete": ok == "true",
    "establish_seconds": round(float(t1) - float(t0), 3), "flows": int(__import__("os").environ.get("SCALE_FLOWS", "16")),
    "throughput_gbps": round(gbps, 3) if gbps is not None else None,
    "outbound_packets_per_sa": packets, "jain_fairness": round(jain, 4) if jain else None,
}))
PY
  log "pairs $m: $(tail -1 "$RESULTS")"
  stop_daemons
}

# Static SA files for T tunnels (write_configs's espgw.conf, UDP-encapsulated ESP): tunnel
# i carries lanA 10.1.0.0/16 <-> the single host 10.2.100.1 + i behind gwB.
write_tunnel_files() {  # write_tunnel_files T
  /usr/bin/python3 - "$1" "$WORK/static-a.conf" "$WORK/static-b.conf" <<'PY'
import ipaddress, os, sys
count, path_a, path_b = int(sys.argv[1]), sys.argv[2], sys.argv[3]
a, b, lan_a = "192.0.2.1", "192.0.2.2", "10.1.0.0/16"
first = ipaddress.ip_address("10.2.100.1")
lines_a, lines_b = [], []
for i in range(count):
    reqid, host = i + 1, f"{first + i}/32"
    spi_ab, spi_ba = 0x10000 + i, 0x20000 + i
    key_ab, key_ba = os.urandom(20).hex(), os.urandom(20).hex()
    lines_a += [f"sa out spi {spi_ab} aes-gcm-128 key {key_ab} src {a} dst {b} udp 4500:4500 reqid {reqid}",
                f"sa in spi {spi_ba} aes-gcm-128 key {key_ba} src {b} dst {a} udp 4500:4500 reqid {reqid}"]
    lines_b += [f"sa out spi {spi_ba} aes-gcm-128 key {key_ba} src {b} dst {a} udp 4500:4500 reqid {reqid}",
                f"sa in spi {spi_ab} aes-gcm-128 key {key_ab} src {a} dst {b} udp 4500:4500 reqid {reqid}"]
    for direction in ("out", "fwd"):
        lines_a.append(f"policy {direction} local {lan_a} remote {host} action protect reqid {reqid}")
        lines_b.append(f"policy {direction} local {host} remote {lan_a} action protect reqid {reqid}")
for path, lines in ((path_a, lines_a), (path_b, lines_b)):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("\n".join(lines) + "\n")
PY
}

run_tunnels() {  # run_tunnels T
  local t=$1 side
  write_configs udp 4
  write_tunnel_files "$t"
  for side in a b; do  # two daemons on one host: a state directory each
    mkdir -p "$WORK/state-$side"
    echo "state-dir = $WORK/state-$side" >>"$WORK/espgw-$side.conf"
    echo "control-socket = $WORK/espgw-$side.ctl" >>"$WORK/espgw-$side.conf"
  done
  start_gateway "$GWA" a
  start_gateway "$GWB" b
  wait_until 30 sas_at_least_n_static a $((2 * t))
  # The remote hosts are addresses of lanB, routed there by gwB (no neighbour entry each).
  tunnel_hosts add "$t" | ip -n "$LANB" -batch -
  ip -n "$GWB" route replace 10.2.96.0/19 via 10.2.0.2
  in_ns "$LANB" "$SPRAY" receive 9000 "$SCALE_TUNNEL_SECONDS" >"$WORK/receive.json" &
  local receiver=$!
  sleep 0.5
  in_ns "$LANA" "$SPRAY" send 10.2.100.1 "$t" 9000 "$((SCALE_TUNNEL_SECONDS + 1))" >"$WORK/send.json"
  wait "$receiver" || true
  espgwctl_on a --json sas >"$WORK/sas.json" || echo '{}' >"$WORK/sas.json"
  /usr/bin/python3 - "$t" "$WORK/send.json" "$WORK/receive.json" "$WORK/sas.json" >>"$RESULTS" <<'PY'
import json, sys
t, send_path, receive_path, sas_path = sys.argv[1:]
send = json.load(open(send_path))
received = json.load(open(receive_path))
sas = json.load(open(sas_path)).get("sas", {})
packets = [int(s["packets"]) for s in sas.values() if s.get("direction") == "out"]
total = sum(packets)
jain = (total * total) / (len(packets) * sum(p * p for p in packets)) if packets and total else None
print(json.dumps({
    "kind": "tunnels", "tunnels": int(t), "outbound_sas": len(packets),
    "sas_with_traffic": sum(1 for p in packets if p), "sent_gbps": send["gbps"],
    "throughput_gbps": received["gbps"], "received_packets": received["packets"],
    "sent_packets": send["packets"], "jain_fairness": round(jain, 4) if jain else None,
}))
PY
  log "tunnels $t: $(tail -1 "$RESULTS")"
  for side in a b; do
    eval "kill -TERM \$PID_$side" 2>/dev/null || true
    eval "wait \$PID_$side" 2>/dev/null || true
  done
  tunnel_hosts del "$t" | ip -n "$LANB" -batch -
  ip -n "$GWB" route del 10.2.96.0/19 2>/dev/null || true
  rm -f "$WORK"/espgw-*.log "$WORK"/espgw-*.ctl
}
tunnel_hosts() {  # tunnel_hosts add|del T: `ip -batch` lines for the T remote hosts
  /usr/bin/python3 -c '
import ipaddress, sys
first = ipaddress.ip_address("10.2.100.1")
for i in range(int(sys.argv[2])):
    print(f"addr {sys.argv[1]} {first + i}/32 dev eth0")' "$1" "$2"
}
sas_at_least_n_static() { local n; n=$(espgw_json "$1" stats 'd["sas"]' 2>/dev/null) && ((n >= $2)); }

export SCALE_FLOWS
log "topology, then children: $SCALE_CHILDREN; control: $SCALE_CONTROL; pairs: $SCALE_PAIRS; tunnels: $SCALE_TUNNELS"
setup_topology
for n in $SCALE_CHILDREN; do run_children "$n"; done
for n in $SCALE_CONTROL; do run_control "$n"; done
for m in $SCALE_PAIRS; do run_pairs "$m"; done
for t in $SCALE_TUNNELS; do run_tunnels "$t"; done

mkdir -p "$(dirname "$SCALE_OUT")"
/usr/bin/python3 - "$RESULTS" "$SCALE_OUT" <<'PY'
import json, os, platform, sys, time
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
# Memory per SA at the margin: growth from the smallest run, so that one-off allocations
# (sockets, per-thread state, the first SA) do not count.
children = sorted((r for r in rows if r["kind"] == "children"), key=lambda r: r["child_sas"])
if children:
    base = children[0]
    for r in children[1:]:
        extra = r["sas_installed"] - base["sas_installed"]
        if extra > 0:
            r["marginal_bytes_per_sa"] = round((r["rss_kib_after"] - base["rss_kib_after"]) * 1024 / extra, 1)
out = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kernel": platform.release(),
    "cpus": os.cpu_count(), "results": rows,
}
json.dump(out, open(sys.argv[2], "w"), indent=2)
print(f"results: {sys.argv[2]}")
PY
if [[ -n $SCALE_PLOT ]]; then
  /usr/bin/python3 "$ROOT/bench/plot_scaling.py" "$SCALE_OUT" "$SCALE_PLOT"
fi
