#!/usr/bin/env bash
# Site-to-site benchmark: one run measures every data path side by side in the same
# 4-namespace topology, each path set up and torn down in turn:
#
#   lanA 10.1.0.2 ── gwA ══ WAN 192.0.2.0/24 (veth) ══ gwB ── lanB 10.2.0.2
#
#   plain         plain routing, no IPsec (gwA and gwB route the LANs over the WAN)
#   espgw         espgw with static SAs, AES-128-GCM, ESP in UDP 4500
#   espgw-raw     the same with raw ESP (IP protocol 50)
#   libipsec      strongSwan 5.9.8 charon with kernel-libipsec (its userspace ESP),
#                 PSK IKEv2, AES-128-GCM, ESP in UDP (the only mode it speaks)
#   wireguard-go  Debian's wireguard-go, MTU 1420
#
# For each path: idle ping; iperf3 TCP lanA→lanB and lanB→lanA (-R), -P1 and -P4, with
# the congestion control stated in BENCH_CC (default cubic, per socket: the host
# default here is bbr, which retransmits heavily on these paths); ping under load (every
# 0.2 s from lanA to lanB while the lanA→lanB -P4 run goes on); CPU use of the gateway
# processes and of the whole machine during each run. A tunnel path is only measured
# after a ping has gone through its tunnel device (the gateways have no other route
# between the LANs).
#
# Writes bench/results/site_to_site.json, prints a table with the ratios the project's
# targets name (docs: /work/shared/GUIDE.md section 5), and draws
# docs/img/site_to_site.png with bench/plot_site_to_site.py.
#
# Usage: bench/site_to_site_bench.sh            (as root)
# Environment:
#   BENCH_SECONDS=10        iperf3 duration of each run
#   BENCH_PATHS="plain espgw espgw-raw libipsec wireguard-go"   which paths, in order
#   BENCH_CC=cubic          TCP congestion control (iperf3 -C)
#   BENCH_WAN_MTU=1500      MTU of the WAN veth between the gateways; espgw derives its
#                           tunnel MTU from it
#   BENCH_LAN_MTU=1500      MTU of the LAN veths (with the WAN at 9000 too: jumbo end to end)
#   BENCH_PING_COUNT=20     idle pings per path
#   BENCH_OUT=bench/results/site_to_site.json
#   BENCH_PLOT=docs/img/site_to_site.png   (empty: no plot)
#   BENCH_KEEP=1            keep the work directory (configs, logs, raw JSON)
#   ESPGW=path/to/espgw     default build/s2sbench/esp_engine/daemon/espgw, built if absent
#   ESPGW_WORKERS=0 ESPGW_TUN_QUEUES=1   espgw.conf settings (0 workers: one per CPU)
#   ESPGW_EXTRA_CONF="key = value"       more espgw.conf lines (e.g. socket-buffer, pool-packets)
#
# Namespaces are named per run (s2s<PID>-<n>-...); everything this script starts is
# stopped and every namespace removed on exit, on failure and on Ctrl-C. Only PIDs this
# script started are signalled (each checked against its recorded start time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_PATHS=${BENCH_PATHS:-plain espgw espgw-raw libipsec wireguard-go}
BENCH_CC=${BENCH_CC:-cubic}
BENCH_PING_COUNT=${BENCH_PING_COUNT:-20}
BENCH_OUT=${BENCH_OUT:-$ROOT/bench/results/site_to_site.json}
BENCH_PLOT=${BENCH_PLOT-$ROOT/docs/img/site_to_site.png}
ESPGW_WORKERS=${ESPGW_WORKERS:-0}
ESPGW_TUN_QUEUES=${ESPGW_TUN_QUEUES:-1}
CHARON=/usr/lib/ipsec/charon
PYTHON=/usr/bin/python3  # the one with matplotlib (see GUIDE 4.3)
STRONGSWAN_TEMPLATES=$ROOT/bench/strongswan

RUN=s2s$$
WORK=$(mktemp -d /tmp/espgw-s2s-bench.XXXXXX)
RESULTS=$WORK/results
PID_FILE=$WORK/pids  # "PID STARTTIME" of every process we started and not yet reaped
NS_FILE=$WORK/netns  # every namespace we created and not yet deleted
: >"$PID_FILE"
: >"$NS_FILE"
mkdir -p "$RESULTS"

log() { printf '[s2s-bench] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- process bookkeeping

start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }

track() {  # track PID: remember a process we started, so cleanup stops it
  local t
  t=$(start_time "$1")
  [[ -n $t ]] && echo "$1 $t" >>"$PID_FILE"
  return 0
}

ours() {  # ours PID STARTTIME: still the process we started (not a reused PID)
  [[ -n $1 && "$(start_time "$1")" == "$2" ]]
}

stop_tracked() {
  local pid t alive=()
  while read -r pid t; do
    if ours "$pid" "$t"; then kill -TERM "$pid" 2>/dev/null || true; alive+=("$pid $t"); fi
  done <"$PID_FILE"
  for _ in $(seq 1 30); do  # up to 3 s for a clean exit (espgw removes its routes)
    local left=()
    for entry in "${alive[@]}"; do
      read -r pid t <<<"$entry"
      ours "$pid" "$t" && left+=("$entry")
    done
    alive=("${left[@]}")
    ((${#alive[@]} == 0)) && break
    sleep 0.1
  done
  for entry in "${alive[@]}"; do
    read -r pid t <<<"$entry"
    ours "$pid" "$t" && kill -KILL "$pid" 2>/dev/null || true
  done
  for entry in "${alive[@]}"; do read -r pid t <<<"$entry"; wait "$pid" 2>/dev/null || true; done
  : >"$PID_FILE"
}

teardown_path() {
  stop_tracked
  local ns
  while read -r ns; do [[ -n $ns ]] && ip netns del "$ns" 2>/dev/null || true; done <"$NS_FILE"
  : >"$NS_FILE"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  teardown_path
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

# ---------------------------------------------------------------- topology

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

setup_topology() {  # setup_topology INDEX: sets LANA GWA GWB LANB
  local i=$1 ns
  LANA=$RUN-$i-lanA GWA=$RUN-$i-gwA GWB=$RUN-$i-gwB LANB=$RUN-$i-lanB
  for ns in "$LANA" "$GWA" "$GWB" "$LANB"; do
    ip netns add "$ns"
    echo "$ns" >>"$NS_FILE"
    ip -n "$ns" link set lo up
  done
  ip -n "$LANA" link add eth0 type veth peer name lan0 netns "$GWA"
  ip -n "$LANB" link add eth0 type veth peer name lan0 netns "$GWB"
  ip -n "$GWA" link add wan0 type veth peer name wan0 netns "$GWB"
  for ns in "$GWA" "$GWB"; do in_ns "$ns" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'; done
  ip -n "$LANA" addr add 10.1.0.2/16 dev eth0
  ip -n "$GWA" addr add 10.1.0.1/16 dev lan0
  ip -n "$GWA" addr add 192.0.2.1/24 dev wan0
  ip -n "$GWB" addr add 192.0.2.2/24 dev wan0
  ip -n "$GWB" addr add 10.2.0.1/16 dev lan0
  ip -n "$LANB" addr add 10.2.0.2/16 dev eth0
  for ns in "$LANA" "$LANB"; do
    ip -n "$ns" link set eth0 mtu "${BENCH_LAN_MTU:-1500}"
    ip -n "$ns" link set eth0 up
  done
  for ns in "$GWA" "$GWB"; do
    ip -n "$ns" link set lan0 mtu "${BENCH_LAN_MTU:-1500}"
    ip -n "$ns" link set wan0 mtu "${BENCH_WAN_MTU:-1500}"
    ip -n "$ns" link set lan0 up
    ip -n "$ns" link set wan0 up
  done
  ip -n "$LANA" route add default via 10.1.0.1
  ip -n "$LANB" route add default via 10.2.0.1
}

# Background process in a namespace; `$!` is the process itself because ip netns exec,
# unshare (without --fork) and `sh -c '... && exec ...'` all exec.
spawn() {  # spawn LOGFILE CMD...: sets SPAWNED
  "${@:2}" >"$1" 2>&1 &
  SPAWNED=$!
  sleep 0.05
  track "$SPAWNED"
}

tracked() {  # tracked CMD...: run CMD in the background, tracked, and wait for it
  "$@" &
  local pid=$!
  track "$pid"
  wait "$pid"
}

wait_for() {  # wait_for SECONDS CMD...: poll every 0.1 s until CMD succeeds
  local tries=$(($1 * 10))
  shift
  for _ in $(seq 1 "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

path_fail() {  # inside a path's subshell: record why, show the logs, leave the subshell
  echo "$*" >"$PATH_RESULTS/error.txt"
  log "path $PATH_NAME FAILED: $*"
  local f
  for f in "$WORK"/"$PATH_NAME"-*.log; do
    [[ -f $f ]] || continue
    log "--- tail of $(basename "$f")"
    tail -n 15 "$f" >&2 || true
  done
  exit 1
}

meta() { printf '%s=%s\n' "$1" "$2" >>"$PATH_RESULTS/meta.txt"; }

GW_PIDS=()  # "gwA:PID" "gwB:PID" of the processes that carry the path's data plane

# ---------------------------------------------------------------- paths

setup_plain() {
  ip -n "$GWA" route add 10.2.0.0/16 via 192.0.2.2 dev wan0
  ip -n "$GWB" route add 10.1.0.0/16 via 192.0.2.1 dev wan0
  meta tunnel_interface ""
  meta description "plain routing over the WAN veth, no IPsec"
}

ensure_espgw() {
  ESPGW=${ESPGW:-$ROOT/build/s2sbench/esp_engine/daemon/espgw}
  [[ -x $ESPGW ]] && return 0
  log "building espgw in build/s2sbench"
  cmake -S "$ROOT" -B "$ROOT/build/s2sbench" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DESPGW_BUILD_TESTS=OFF -DESPGW_BUILD_BENCH=OFF >/dev/null
  ninja -C "$ROOT/build/s2sbench" -j2 espgw >/dev/null
  [[ -x $ESPGW ]]
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

setup_espgw() {  # setup_espgw udp|raw
  local mode=$1 udp="" a=192.0.2.1 b=192.0.2.2 key_ab key_ba side
  [[ $mode == udp ]] && udp="udp 4500:4500"
  ensure_espgw || path_fail "espgw binary $ESPGW missing and the build failed"
  key_ab=$(random_hex 20) key_ba=$(random_hex 20)
  cat >"$WORK/$PATH_NAME-static-a.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
sa in spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
policy out local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
policy fwd local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
EOS
  cat >"$WORK/$PATH_NAME-static-b.conf" <<EOS
sa out spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
sa in spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
policy out local 10.2.0.0/16 remote 10.1.0.0/16 action protect reqid 1
policy fwd local 10.2.0.0/16 remote 10.1.0.0/16 action protect reqid 1
EOS
  chmod 600 "$WORK/$PATH_NAME"-static-*.conf
  for side in a b; do
    local ns=$GWA local_address=$a
    [[ $side == b ]] && ns=$GWB local_address=$b
    cat >"$WORK/$PATH_NAME-espgw-$side.conf" <<EOS
tun-name = espgw0
tun-queues = $ESPGW_TUN_QUEUES
local-address = $local_address
static-sa-file = $PATH_NAME-static-$side.conf
workers = $ESPGW_WORKERS
log-level = info
${ESPGW_EXTRA_CONF:-}
EOS
    spawn "$WORK/$PATH_NAME-espgw-$side.log" ip netns exec "$ns" "$ESPGW" -c "$WORK/$PATH_NAME-espgw-$side.conf"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    wait_for 5 sh -c "ip -n '$ns' link show espgw0 | grep -q UP" ||
      path_fail "espgw in gw${side^^} did not bring espgw0 up"
  done
  meta tunnel_interface espgw0
  if [[ $mode == udp ]]; then
    meta description "espgw, static SAs, AES-128-GCM, ESP in UDP 4500, workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  else
    meta description "espgw, static SAs, AES-128-GCM, raw ESP (IP proto 50), workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  fi
}

swan() {  # swanctl with a minimal plugin list (bench/strongswan/swanctl-client.conf)
  STRONGSWAN_CONF=$STRONGSWAN_TEMPLATES/swanctl-client.conf swanctl "$@"
}

fill_template() {  # fill_template TEMPLATE OUT KEY=VALUE...
  local template=$1 out=$2 expr=() kv
  shift 2
  for kv in "$@"; do expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  sed "${expr[@]}" "$template" >"$out"
  if grep -q '@[A-Z_]*@' "$out"; then path_fail "unfilled placeholder in $out"; fi
}

setup_libipsec() {
  local psk side
  psk=$(random_hex 24)
  for side in a b; do
    local ns=$GWA local_addr=192.0.2.1 remote_addr=192.0.2.2 local_ts=10.1.0.0/16 remote_ts=10.2.0.0/16
    [[ $side == b ]] && ns=$GWB local_addr=192.0.2.2 remote_addr=192.0.2.1 local_ts=10.2.0.0/16 remote_ts=10.1.0.0/16
    local other=b
    [[ $side == b ]] && other=a
    local sock=$WORK/charon-$side.vici
    fill_template "$STRONGSWAN_TEMPLATES/strongswan.conf.in" "$WORK/strongswan-$side.conf" \
      "VICI_SOCKET=$sock" "LOG_FILE=$WORK/$PATH_NAME-charon-$side.log"
    fill_template "$STRONGSWAN_TEMPLATES/swanctl.conf.in" "$WORK/swanctl-$side.conf" \
      "LOCAL_ADDR=$local_addr" "REMOTE_ADDR=$remote_addr" "LOCAL_TS=$local_ts" "REMOTE_TS=$remote_ts" \
      "LOCAL_ID=gw$side.s2s.test" "REMOTE_ID=gw$other.s2s.test" "PSK=$psk"
    chmod 600 "$WORK/swanctl-$side.conf"
    # A private mount namespace with its own /run: charon's pid file path is compiled in.
    spawn "$WORK/$PATH_NAME-charon-$side.out" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs charon-run /run && exec env STRONGSWAN_CONF="$1" "$2"' sh "$WORK/strongswan-$side.conf" "$CHARON"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    wait_for 10 test -S "$sock" || path_fail "charon in gw${side^^} did not open its VICI socket $sock"
    swan --load-all --uri "unix://$sock" --file "$WORK/swanctl-$side.conf" >"$WORK/$PATH_NAME-swanctl-load-$side.log" 2>&1 ||
      path_fail "swanctl --load-all failed for gw${side^^}: $(tail -n 3 "$WORK/$PATH_NAME-swanctl-load-$side.log")"
  done
  swan --initiate --uri "unix://$WORK/charon-a.vici" --child net --timeout 20 >"$WORK/$PATH_NAME-swanctl-initiate.log" 2>&1 ||
    path_fail "swanctl --initiate failed: $(tail -n 3 "$WORK/$PATH_NAME-swanctl-initiate.log")"
  wait_for 5 ip -n "$GWA" link show ipsec0 || path_fail "kernel-libipsec created no ipsec0 in gwA"
  # charon installs the routes to the remote subnet through ipsec0 in table 220.
  wait_for 5 sh -c "ip -n '$GWA' route show table 220 | grep -q '10.2.0.0/16.*ipsec0'" ||
    path_fail "no route to 10.2.0.0/16 via ipsec0 in gwA table 220: $(ip -n "$GWA" route show table all | grep -v local)"
  wait_for 5 sh -c "ip -n '$GWB' route show table 220 | grep -q '10.1.0.0/16.*ipsec0'" ||
    path_fail "no route to 10.1.0.0/16 via ipsec0 in gwB table 220"
  meta routes_gwA "$(ip -n "$GWA" route show table 220 | tr '\n' ';')"
  meta routes_gwB "$(ip -n "$GWB" route show table 220 | tr '\n' ';')"
  swan --list-sas --uri "unix://$WORK/charon-a.vici" >"$WORK/$PATH_NAME-list-sas-before.txt" 2>&1 || true
  meta tunnel_interface ipsec0
  meta description "strongSwan $($CHARON --version 2>&1 | awk '{print $NF}' | head -1) charon + kernel-libipsec, IKEv2 PSK, AES-128-GCM, ESP in UDP 4500 (encap = yes)"
}

setup_wireguard() {
  local side priv_a priv_b pub_a pub_b
  priv_a=$(wg genkey) priv_b=$(wg genkey)
  pub_a=$(wg pubkey <<<"$priv_a") pub_b=$(wg pubkey <<<"$priv_b")
  for side in a b; do
    local ns=$GWA priv=$priv_a peer=$pub_b endpoint=192.0.2.2 remote_lan=10.2.0.0/16
    [[ $side == b ]] && ns=$GWB priv=$priv_b peer=$pub_a endpoint=192.0.2.1 remote_lan=10.1.0.0/16
    printf '%s\n' "$priv" >"$WORK/wg-$side.key"
    chmod 600 "$WORK/wg-$side.key"
    # wireguard-go's UAPI socket path is fixed (/var/run/wireguard): a private /run each.
    spawn "$WORK/$PATH_NAME-wireguard-go-$side.log" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs wg-run /run && exec env WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go -f wg0'
    local pid=$SPAWNED
    GW_PIDS+=("gw${side^^}:$pid")
    wait_for 5 nsenter -t "$pid" -m test -S /run/wireguard/wg0.sock ||
      path_fail "wireguard-go in gw${side^^} did not open its UAPI socket"
    # `wg` must see the same private /run: enter the daemon's mount and network namespaces.
    nsenter -t "$pid" -m -n wg set wg0 private-key "$WORK/wg-$side.key" listen-port 51820 \
      peer "$peer" endpoint "$endpoint:51820" allowed-ips "$remote_lan" ||
      path_fail "wg set failed in gw${side^^}"
    ip -n "$ns" link set wg0 up
    ip -n "$ns" route add "$remote_lan" dev wg0
  done
  meta tunnel_interface wg0
  meta description "wireguard-go $(wireguard-go --version 2>/dev/null | awk 'NR==1{print $2}') (Debian), ChaCha20-Poly1305, UDP 51820"
}

# ---------------------------------------------------------------- measurements

tunnel_tx_packets() { in_ns "$GWA" cat "/sys/class/net/$1/statistics/tx_packets"; }

verify_path() {  # ping both ways; for a tunnel, the pings must have left through it
  local iface=$1 before after
  [[ -n $iface ]] && before=$(tunnel_tx_packets "$iface")
  # The first packets may race the tunnel's last setup steps; allow a few tries.
  wait_for 5 in_ns "$LANA" ping -c 1 -W 1 10.2.0.2 || path_fail "no ping from lanA to lanB"
  in_ns "$LANA" ping -c 5 -i 0.2 -W 2 10.2.0.2 >"$PATH_RESULTS/verify-ping.txt" 2>&1 ||
    path_fail "ping lanA→lanB failed: $(tail -n 2 "$PATH_RESULTS/verify-ping.txt")"
  in_ns "$LANB" ping -c 3 -i 0.2 -W 2 10.1.0.2 >>"$PATH_RESULTS/verify-ping.txt" 2>&1 ||
    path_fail "ping lanB→lanA failed"
  if [[ -n $iface ]]; then
    after=$(tunnel_tx_packets "$iface")
    ((after - before >= 6)) || path_fail "pings did not go through $iface (tx packets $before → $after)"
    meta tunnel_mtu "$(in_ns "$GWA" cat "/sys/class/net/$iface/mtu")"
    meta verified "ping lanA↔lanB through $iface ($((after - before)) packets sent on it in gwA)"
  else
    meta tunnel_mtu "$(in_ns "$GWA" cat /sys/class/net/wan0/mtu)"
    meta verified "ping lanA↔lanB over the WAN"
  fi
}

cpu_snapshot() {  # one line: uptime, /proc/stat busy and total jiffies, then gw:ticks...
  local line entry name pid
  line="$(awk '{print $1}' /proc/uptime) $(awk '/^cpu /{t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t}' /proc/stat)"
  for entry in "${GW_PIDS[@]}"; do
    name=${entry%%:*} pid=${entry#*:}
    line+=" $name:$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo -1)"
  done
  echo "$line"
}

start_iperf_server() {  # one-shot server in lanB; absolute paths for -I/--logfile (GUIDE 4.4)
  local pidfile=$WORK/iperf-server.pid
  rm -f "$pidfile"
  in_ns "$LANB" iperf3 -s -1 -D -I "$pidfile" --logfile "$WORK/$PATH_NAME-iperf3-server.log" ||
    path_fail "iperf3 server did not start"
  wait_for 5 test -s "$pidfile" || path_fail "iperf3 server wrote no pid file"
  track "$(cat "$pidfile")"
  wait_for 5 sh -c "ip netns exec '$LANB' ss -Hltn 'sport = :5201' | grep -q ." ||
    path_fail "iperf3 server is not listening"
}

run_iperf() {  # run_iperf NAME STREAMS [-R]: one iperf3 run, JSON and CPU use saved
  local name=$1 streams=$2 reverse=${3:-} out=$PATH_RESULTS/$1
  start_iperf_server
  local -a client=(ip netns exec "$LANA" timeout $((BENCH_SECONDS + 30)) iperf3 -c 10.2.0.2
    -t "$BENCH_SECONDS" -P "$streams" -C "$BENCH_CC" -J)
  [[ -n $reverse ]] && client+=("$reverse")
  log "  $name: iperf3 -P$streams ${reverse:-} -t $BENCH_SECONDS -C $BENCH_CC"
  cpu_snapshot >"$out.cpu"
  # In the background and tracked, so that an interrupt stops it at once (`wait` returns
  # on a trapped signal; a foreground command would first have to finish).
  "${client[@]}" >"$out.json" 2>"$out.err" &
  local client_pid=$!
  track "$client_pid"
  if [[ $name == a_to_b_P4 ]]; then
    # Ping under load: from 1 s after the start until about 1 s before the end.
    sleep 1
    local count=$(((BENCH_SECONDS - 2) * 5))
    ((count < 5)) && count=5
    tracked in_ns "$LANA" ping -c "$count" -i 0.2 -W 2 10.2.0.2 >"$PATH_RESULTS/ping-load.txt" 2>&1 || true
  fi
  wait "$client_pid" || echo "iperf3 exit status $?" >>"$out.err"
  cpu_snapshot >>"$out.cpu"
  stop_tracked_iperf_server
  sleep 0.5
}

stop_tracked_iperf_server() {
  local pid
  pid=$(cat "$WORK/iperf-server.pid" 2>/dev/null || true)
  [[ -n $pid ]] && grep -q "^$pid " "$PID_FILE" && kill "$pid" 2>/dev/null || true
  return 0
}

measure_path() {
  tracked in_ns "$LANA" ping -c "$BENCH_PING_COUNT" -i 0.2 -W 2 10.2.0.2 >"$PATH_RESULTS/ping-idle.txt" 2>&1 || true
  run_iperf a_to_b_P1 1
  run_iperf a_to_b_P4 4
  run_iperf b_to_a_P1 1 -R
  run_iperf b_to_a_P4 4 -R
  meta gateway_processes "${GW_PIDS[*]}"
}

run_path() {  # in a subshell: set up, verify, measure; the parent tears down
  local index=$1
  setup_topology "$index"
  case $PATH_NAME in
    plain) setup_plain ;;
    espgw) setup_espgw udp ;;
    espgw-raw) setup_espgw raw ;;
    libipsec) setup_libipsec ;;
    wireguard-go) setup_wireguard ;;
    *) path_fail "unknown path '$PATH_NAME'" ;;
  esac
  local iface
  iface=$(sed -n 's/^tunnel_interface=//p' "$PATH_RESULTS/meta.txt" | tail -n 1)
  verify_path "$iface"
  measure_path
  if [[ $PATH_NAME == espgw* ]]; then  # SIGUSR1: espgw logs its SA counters and drop reasons
    local entry
    for entry in "${GW_PIDS[@]}"; do
      local side=${entry%%:*} lines_before letter
      letter=${side: -1}
      local daemon_log=$WORK/$PATH_NAME-espgw-${letter,,}.log
      lines_before=$(wc -l <"$daemon_log")
      kill -USR1 "${entry#*:}"
      sleep 0.3
      tail -n +$((lines_before + 1)) "$daemon_log" >"$PATH_RESULTS/counters-$side.txt"
    done
  fi
  if [[ $PATH_NAME == libipsec ]]; then
    swan --list-sas --uri "unix://$WORK/charon-a.vici" >"$PATH_RESULTS/list-sas-after.txt" 2>&1 || true
  fi
}

# ---------------------------------------------------------------- main

[[ $(id -u) == 0 ]] || { log "needs root (network namespaces)"; exit 1; }
for tool in iperf3 ping ip unshare nsenter swanctl wg wireguard-go "$CHARON" "$PYTHON"; do
  command -v "$tool" >/dev/null || { log "missing $tool: run tools/install-deps.sh"; exit 1; }
done
read -r -a PATHS <<<"$BENCH_PATHS"
log "paths: ${PATHS[*]}; iperf3 ${BENCH_SECONDS} s per run, -C $BENCH_CC; work dir $WORK"

index=0
for PATH_NAME in "${PATHS[@]}"; do
  index=$((index + 1))
  PATH_RESULTS=$RESULTS/$PATH_NAME
  mkdir -p "$PATH_RESULTS"
  log "=== path $PATH_NAME ==="
  GW_PIDS=()
  set +e
  (
    set -e
    # The parent's cleanup stops this subshell with SIGTERM (traps are reset in a
    # subshell): leave as soon as the running command returns.
    trap 'exit 143' TERM
    run_path "$index"
  ) &
  PATH_PID=$!
  track "$PATH_PID"
  # `wait` returns as soon as a trapped signal arrives, so an interrupt cleans up at once.
  wait "$PATH_PID"
  status=$?
  set -e
  ((status == 130 || status == 143)) && exit "$status"
  if ((status == 0)); then echo ok >"$PATH_RESULTS/status"; else echo failed >"$PATH_RESULTS/status"; fi
  [[ $status != 0 && ! -s $PATH_RESULTS/error.txt ]] && echo "setup failed (exit status $status)" >"$PATH_RESULTS/error.txt"
  teardown_path
done

mkdir -p "$(dirname "$BENCH_OUT")"
ESPGW_BIN=${ESPGW:-$ROOT/build/s2sbench/esp_engine/daemon/espgw}
"$PYTHON" - "$RESULTS" "$BENCH_OUT" <<EOF
import json, os, re, statistics, subprocess, sys, datetime, platform

results_dir, out_path = sys.argv[1], sys.argv[2]
paths = "$BENCH_PATHS".split()
seconds, cc = int("$BENCH_SECONDS"), "$BENCH_CC"
clk_tck = os.sysconf("SC_CLK_TCK")

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return ""

def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()

def parse_ping(path):
    if not os.path.exists(path):
        return None
    text = open(path).read()
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", text)]
    m = re.search(r"(\d+) packets transmitted, (\d+) received", text)
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (None, len(rtts))
    if not rtts:
        return {"sent": sent, "received": received, "median_ms": None}
    return {"sent": sent, "received": received, "median_ms": round(statistics.median(rtts), 3),
            "min_ms": min(rtts), "max_ms": max(rtts), "mean_ms": round(statistics.mean(rtts), 3)}

def parse_cpu(path):
    try:
        first, second = [l.split() for l in open(path).read().splitlines()[:2]]
    except Exception:
        return None
    elapsed = float(second[0]) - float(first[0])
    busy = int(second[1]) - int(first[1])
    total = int(second[2]) - int(first[2])
    out = {"elapsed_s": round(elapsed, 2),
           "machine_busy_pct": round(100.0 * busy / total, 1) if total > 0 else None,
           "gateways_pct_of_one_cpu": {}}
    for a, b in zip(first[3:], second[3:]):
        name, t0 = a.split(":"); _, t1 = b.split(":")
        if int(t0) >= 0 and int(t1) >= 0 and elapsed > 0:
            out["gateways_pct_of_one_cpu"][name] = round(100.0 * (int(t1) - int(t0)) / clk_tck / elapsed, 1)
    return out

def parse_iperf(base):
    entry = {}
    try:
        data = json.load(open(base + ".json"))
    except Exception as e:
        err = open(base + ".err").read().strip() if os.path.exists(base + ".err") else ""
        return {"error": f"no iperf3 JSON ({e}) {err}".strip()}
    if "error" in data:
        entry["error"] = data["error"]
    end = data.get("end", {})
    recv, sent = end.get("sum_received", {}), end.get("sum_sent", {})
    if recv.get("bits_per_second"):
        entry["gbit_s"] = round(recv["bits_per_second"] / 1e9, 4)
    if sent.get("bits_per_second"):
        entry["sender_gbit_s"] = round(sent["bits_per_second"] / 1e9, 4)
    if "retransmits" in sent:
        entry["retransmits"] = sent["retransmits"]
    entry["bytes_received"] = recv.get("bytes")
    entry["sender_congestion_control"] = end.get("sender_tcp_congestion")
    start = data.get("start", {}).get("test_start", {})
    entry["streams"] = start.get("num_streams")
    entry["reverse"] = bool(start.get("reverse"))
    entry["seconds"] = start.get("duration")
    cpu = end.get("cpu_utilization_percent")
    if cpu:
        entry["iperf3_cpu_pct"] = {k: round(v, 1) for k, v in cpu.items() if k in ("host_total", "remote_total")}
    c = parse_cpu(base + ".cpu")
    if c:
        entry["cpu"] = c
    return entry

tests = ["a_to_b_P1", "a_to_b_P4", "b_to_a_P1", "b_to_a_P4"]
report = {
    "benchmark": "site_to_site",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "host": platform.node(),
    "kernel": platform.release(),
    "cpu_model": cpu_model(),
    "cpus": os.cpu_count(),
    "congestion_control": cc,
    "default_congestion_control": sh("cat /proc/sys/net/ipv4/tcp_congestion_control"),
    "duration_s": seconds,
    "ping_interval_s": 0.2,
    "ping_under_load": "ping -i 0.2 lanA→lanB during the a_to_b_P4 run, from 1 s after its start",
    "topology": "lanA 10.1.0.2 — gwA 192.0.2.1 — WAN veth 192.0.2.0/24 — gwB 192.0.2.2 — lanB 10.2.0.2, one netns each, MTU 1500",
    "throughput": "iperf3 TCP receiver-side Gbit/s (end.sum_received); a_to_b = lanA→lanB, b_to_a = lanB→lanA (-R)",
    "versions": {
        "iperf3": sh("iperf3 --version | head -1"),
        "strongswan": sh("$CHARON --version 2>&1 | head -1"),
        "wireguard_go": sh("wireguard-go --version | head -1"),
        "espgw_git": sh("git -C '$ROOT' rev-parse --short HEAD") + (" (dirty)" if sh("git -C '$ROOT' status --porcelain --untracked-files=no") else ""),
    },
    "espgw": {"binary": "$ESPGW_BIN", "workers": int("$ESPGW_WORKERS"), "tun_queues": int("$ESPGW_TUN_QUEUES")},
    "paths": {},
}
for p in paths:
    d = os.path.join(results_dir, p)
    entry = {"status": open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "not run"}
    if os.path.exists(os.path.join(d, "error.txt")):
        entry["error"] = open(os.path.join(d, "error.txt")).read().strip()
    if os.path.exists(os.path.join(d, "meta.txt")):
        for line in open(os.path.join(d, "meta.txt")):
            k, _, v = line.rstrip("\n").partition("=")
            entry[k] = int(v) if k == "tunnel_mtu" and v.isdigit() else v
    entry["ping_idle"] = parse_ping(os.path.join(d, "ping-idle.txt"))
    entry["ping_under_load"] = parse_ping(os.path.join(d, "ping-load.txt"))
    for side in ("gwA", "gwB"):
        f = os.path.join(d, f"counters-{side}.txt")
        if os.path.exists(f):
            entry.setdefault("espgw_counters", {})[side] = [l.split(": ", 1)[-1] for l in open(f).read().splitlines()]
    entry["tests"] = {t: parse_iperf(os.path.join(d, t)) for t in tests if os.path.exists(os.path.join(d, t + ".json"))}
    report["paths"][p] = entry

def gbit(p, t):
    return report["paths"].get(p, {}).get("tests", {}).get(t, {}).get("gbit_s")

def ratio(a, b):
    return round(a / b, 3) if a and b else None

summary = {}
for other, key in (("libipsec", "espgw_over_kernel_libipsec"), ("wireguard-go", "espgw_over_wireguard_go"),
                   ("plain", "espgw_over_plain")):
    summary[key] = {t: ratio(gbit("espgw", t), gbit(other, t)) for t in tests}
lat = lambda p, k: (report["paths"].get(p, {}).get(k) or {}).get("median_ms")
e_load, p_idle = lat("espgw", "ping_under_load"), lat("plain", "ping_idle")
summary["espgw_added_latency_under_load_ms"] = round(e_load - p_idle, 3) if e_load is not None and p_idle is not None else None
summary["targets"] = {
    "espgw >= 10x kernel-libipsec (a_to_b_P4)": summary["espgw_over_kernel_libipsec"]["a_to_b_P4"],
    "espgw >= 0.5x plain (a_to_b_P4)": summary["espgw_over_plain"]["a_to_b_P4"],
    "espgw > wireguard-go (a_to_b_P4)": summary["espgw_over_wireguard_go"]["a_to_b_P4"],
    "added latency under load <= 1 ms": summary["espgw_added_latency_under_load_ms"],
}
report["summary"] = summary
with open(out_path, "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")

# ---- table
def fmt(v, spec="{:.2f}"):
    return spec.format(v) if isinstance(v, (int, float)) else "-"
print()
print(f"site-to-site, {report['date']}, {report['cpu_model']}, {report['cpus']} CPUs, kernel {report['kernel']}")
print(f"iperf3 TCP -C {cc}, {seconds} s per run; Gbit/s at the receiver; ping median ms (load: during A→B -P4)")
hdr = f"{'path':<13} {'A→B P1':>8} {'A→B P4':>8} {'B→A P1':>8} {'B→A P4':>8} {'idle ms':>8} {'load ms':>8} {'mtu':>5}  {'gw CPU% A/B (A→B P4)':<22} status"
print(hdr)
print("-" * len(hdr))
for p in paths:
    e = report["paths"][p]
    cpu = e.get("tests", {}).get("a_to_b_P4", {}).get("cpu", {}).get("gateways_pct_of_one_cpu", {})
    cpu_s = "/".join(fmt(cpu.get(g), "{:.0f}") for g in ("gwA", "gwB")) if cpu else "-"
    status = e["status"] + (": " + e["error"] if e.get("error") else "")
    print(f"{p:<13} " + " ".join(f"{fmt(gbit(p, t)):>8}" for t in tests)
          + f" {fmt(lat(p, 'ping_idle'), '{:.3f}'):>8} {fmt(lat(p, 'ping_under_load'), '{:.3f}'):>8} {fmt(e.get('tunnel_mtu'), '{}'):>5}  {cpu_s:<22} {status}")
print()
for key, label in (("espgw_over_kernel_libipsec", "espgw / kernel-libipsec"), ("espgw_over_plain", "espgw / plain"),
                   ("espgw_over_wireguard_go", "espgw / wireguard-go")):
    print(f"{label:<25} " + "  ".join(f"{t.replace('a_to_b_', 'A→B ').replace('b_to_a_', 'B→A ')} {fmt(summary[key][t]):>5}" for t in tests))
print(f"{'espgw added latency':<25} {fmt(summary['espgw_added_latency_under_load_ms'], '{:.3f}')} ms (espgw ping under load − plain idle ping)")
print(f"results: {out_path}")
EOF

if [[ -n $BENCH_PLOT ]]; then
  "$PYTHON" "$ROOT/bench/plot_site_to_site.py" "$BENCH_OUT" "$BENCH_PLOT" || log "plot failed"
fi

failed=$(cat "$RESULTS"/*/status 2>/dev/null | grep -cx failed || true)
if ((failed > 0)); then log "$failed path(s) failed; see the table and $BENCH_OUT"; exit 1; fi
