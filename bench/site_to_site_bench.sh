#!/usr/bin/env bash
# Site-to-site benchmark: one run measures every data path side by side in the same
# 4-namespace topology, each path set up and torn down in turn:
#
#   lanA 10.1.0.2 ── gwA ══ WAN 192.0.2.0/24 (veth) ══ gwB ── lanB 10.2.0.2
#
#   plain         plain routing, no IPsec (gwA and gwB route the LANs over the WAN)
#   espgw         espgw with static SAs, AES-128-GCM, ESP in UDP 4500
#   espgw-raw     the same with raw ESP (IP protocol 50)
#   espgw-jumbo   espgw with jumbo-segments = yes (not in the default list: it differs from
#                 espgw only when the WAN's MTU exceeds the LANs', e.g. BENCH_WAN_MTU=9000)
#   espgw-charon  espgw managed by strongSwan: two espgw daemons with a control socket
#                 and two charons with the espgw plugin (LD_PRELOAD), PSK IKEv2 through
#                 swanctl --initiate, AES-128-GCM, ESP in UDP (encap = yes, like espgw
#                 and libipsec); the same swanctl.conf as libipsec, only the data plane differs
#   espgw-charon-ecmpN  the same with N parallel CHILD_SAs (espgw's parallel-child = net N
#                 on gwA, reuse_ikesa = no: N IKE_SAs with one CHILD_SA each), flows
#                 hashed over the N outbound SAs; espgw-charon is N = 1
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
# targets name (docs/performance.md), and draws
# docs/img/site_to_site.png with bench/plot_site_to_site.py.
#
# Usage: bench/site_to_site_bench.sh            (as root)
# Environment:
#   BENCH_SECONDS=10        iperf3 duration of each run
#   BENCH_PATHS="plain espgw espgw-raw espgw-charon espgw-charon-ecmp2 espgw-charon-ecmp4 libipsec wireguard-go"
#   BENCH_CC=cubic          TCP congestion control (iperf3 -C)
#   BENCH_WAN_MTU=1500      MTU of the WAN veth between the gateways; espgw derives its
#                           tunnel MTU from it
#   BENCH_LAN_MTU=1500      MTU of the LAN veths (with the WAN at 9000 too: jumbo end to end)
#   BENCH_PING_COUNT=20     idle pings per path
#   BENCH_OUT=bench/results/site_to_site.json
#   BENCH_PLOT=docs/img/site_to_site.png   (empty: no plot)
#   BENCH_KEEP=1            keep the work directory (configs, logs, raw JSON)
#   BENCH_PROFILE=1         profile the whole machine (perf record -a -g) during each path's
#                           lanA→lanB -P4 run and save, next to the JSON, the share of CPU
#                           per thread name (espgw's threads are named by role: tun-rx-0,
#                           wan-rx-udp0, crypto-N; docs/gateway.md) and the hottest functions
#                           (BENCH_OUT with .json replaced by -profile.txt). perf costs
#                           throughput: take the throughput figures from a run without it.
#   ESPGW=path/to/espgw     default build/s2sbench/daemon/espgw, built if absent
#   ESPGWCTL=path/to/espgwctl   (espgw-charon) default: the espgwctl of ESPGW's build tree,
#                           BUILD/daemon/espgwctl (built if absent in build/s2sbench)
#   PLUGIN=path/to/libstrongswan-espgw.so   (espgw-charon) default: ESPGW's build tree,
#                           BUILD/vici_bridge/charon_plugin/libstrongswan-espgw.so (likewise)
#   ESPGW_WORKERS=auto ESPGW_TUN_QUEUES=1   espgw.conf settings. auto: the CPUs divided
#                           among the two gateways that share them here, or inline (no
#                           workers, readers run to completion) when that is 1 or less,
#                           as on 2 vCPUs; 0: one per CPU for each gateway, as espgw
#                           does by default on a machine of its own
#   ESPGW_EXTRA_CONF="key = value"       more espgw.conf lines (e.g. socket-buffer, pool-packets)
#
# Namespaces are named per run (s2s<PID>-<n>-...); everything this script starts is
# stopped and every namespace removed on exit, on failure and on Ctrl-C. Only PIDs this
# script started are signalled (each checked against its recorded start time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_PATHS=${BENCH_PATHS:-plain espgw espgw-raw espgw-charon espgw-charon-ecmp2 espgw-charon-ecmp4 libipsec wireguard-go}
BENCH_CC=${BENCH_CC:-cubic}
BENCH_PING_COUNT=${BENCH_PING_COUNT:-20}
BENCH_OUT=${BENCH_OUT:-$ROOT/bench/results/site_to_site.json}
BENCH_PLOT=${BENCH_PLOT-$ROOT/docs/img/site_to_site.png}
ESPGW_WORKERS=${ESPGW_WORKERS:-auto}
# Both gateways, both iperf3 ends and the kernel's forwarding share this machine's CPUs.
# espgw's default (a worker per CPU) is meant for a gateway with a machine of its own;
# here two of them would each run a worker per CPU and hand packets between more threads
# than there are CPUs. Measured on 2 vCPUs (docs/performance.md): one worker each gave
# more throughput, lower latency and less CPU than two each, and no workers at all
# (the readers run to completion) more again. So: the CPUs divided among the gateways,
# and run to completion when that leaves a gateway one CPU or less.
if [[ $ESPGW_WORKERS == auto ]]; then
  ESPGW_WORKERS=$(($(nproc) / 2))
  ((ESPGW_WORKERS > 1)) || ESPGW_WORKERS=inline
fi
ESPGW_TUN_QUEUES=${ESPGW_TUN_QUEUES:-1}
ESPGW=${ESPGW:-$ROOT/build/s2sbench/daemon/espgw}
# The plugin and espgwctl come from the same build tree as ESPGW unless given.
ESPGW_BUILD_DIR=$ROOT/build/s2sbench
[[ $ESPGW == */daemon/espgw ]] && ESPGW_BUILD_DIR=${ESPGW%/daemon/espgw}
ESPGWCTL=${ESPGWCTL:-$ESPGW_BUILD_DIR/daemon/espgwctl}
PLUGIN=${PLUGIN:-$ESPGW_BUILD_DIR/vici_bridge/charon_plugin/libstrongswan-espgw.so}
CHARON=/usr/lib/ipsec/charon
PYTHON=/usr/bin/python3  # Debian's, which has matplotlib and scapy; another may be first on PATH
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

alive() {  # alive PID: running (not exited, not a zombie waiting to be reaped)
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [[ -n $state && $state != Z ]]
}

wait_while_alive() {  # wait_while_alive SECONDS PID CMD...: wait_for, giving up (status 2) once PID exits
  local tries=$(($1 * 10)) pid=$2
  shift 2
  for _ in $(seq 1 "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    alive "$pid" || return 2
    sleep 0.1
  done
  return 1
}

first_error() {  # first_error FILE: the first line of a log that says what went wrong
  grep -m1 -iE 'error|fail|abort|refused|unable' "$1" 2>/dev/null || tail -n 1 "$1" 2>/dev/null || true
}

path_fail() {  # inside a path's subshell: record why, show the logs, leave the subshell
  echo "$*" >"$PATH_RESULTS/error.txt"
  log "path $PATH_NAME FAILED: $*"
  local f
  for f in "$WORK"/"$PATH_NAME"-*.log; do
    # Only this path's logs: "espgw-*" also matches the logs of espgw-raw and espgw-charon.
    [[ -f $f && $f -nt $PATH_RESULTS/started ]] || continue
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

build_s2sbench() {  # build_s2sbench TARGET...: in build/s2sbench, the default build tree
  log "building $* in build/s2sbench"
  cmake -S "$ROOT" -B "$ROOT/build/s2sbench" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DESPGW_BUILD_TESTS=OFF -DESPGW_BUILD_BENCH=OFF >/dev/null
  ninja -C "$ROOT/build/s2sbench" -j2 "$@" >/dev/null
}

ensure_espgw() {
  [[ -x $ESPGW ]] && return 0
  build_s2sbench espgw
  [[ -x $ESPGW ]]
}

ensure_charon_tools() {  # espgw, espgwctl and the charon plugin, as absolute paths
  if [[ ! -x $ESPGW || ! -x $ESPGWCTL || ! -f $PLUGIN ]]; then
    build_s2sbench espgw espgwctl strongswan_espgw ||
      path_fail "building espgw, espgwctl and the charon plugin in build/s2sbench failed"
  fi
  [[ -x $ESPGW ]] || path_fail "espgw binary $ESPGW missing"
  [[ -x $ESPGWCTL ]] || path_fail "espgwctl binary $ESPGWCTL missing (set ESPGWCTL)"
  [[ -f $PLUGIN ]] || path_fail "charon plugin $PLUGIN missing (set PLUGIN)"
  # charon gets the plugin through LD_PRELOAD: an absolute path, whatever the cwd.
  ESPGW=$(readlink -f "$ESPGW") ESPGWCTL=$(readlink -f "$ESPGWCTL") PLUGIN=$(readlink -f "$PLUGIN")
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

# The same espgw.conf for every espgw path; only where the SAs come from differs.
write_espgw_conf() {  # write_espgw_conf FILE LOCAL_ADDRESS SA_SOURCE_LINE [PATH_LINES]
  cat >"$1" <<EOS
tun-name = espgw0
tun-queues = $ESPGW_TUN_QUEUES
local-address = $2
state-dir = ${1%.conf}.state
$3
workers = $ESPGW_WORKERS
log-level = info
${4:-}
${ESPGW_EXTRA_CONF:-}
EOS
}

setup_espgw() {  # setup_espgw udp|raw [PATH_LINES]
  local mode=$1 path_lines=${2:-} udp="" a=192.0.2.1 b=192.0.2.2 key_ab key_ba side
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
    write_espgw_conf "$WORK/$PATH_NAME-espgw-$side.conf" "$local_address" \
      "static-sa-file = $PATH_NAME-static-$side.conf" "$path_lines"
    spawn "$WORK/$PATH_NAME-espgw-$side.log" ip netns exec "$ns" "$ESPGW" -c "$WORK/$PATH_NAME-espgw-$side.conf"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    wait_for 5 sh -c "ip -n '$ns' link show espgw0 | grep -q UP" ||
      path_fail "espgw in gw${side^^} did not bring espgw0 up"
  done
  meta tunnel_interface espgw0
  if [[ -n $path_lines ]]; then
    meta description "espgw, static SAs, AES-128-GCM, ESP in UDP 4500, $path_lines, workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  elif [[ $mode == udp ]]; then
    meta description "espgw, static SAs, AES-128-GCM, ESP in UDP 4500, workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  else
    meta description "espgw, static SAs, AES-128-GCM, raw ESP (IP proto 50), workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  fi
}

swan() {  # swanctl with a minimal plugin list (bench/strongswan/swanctl-client.conf)
  STRONGSWAN_CONF=$STRONGSWAN_TEMPLATES/swanctl-client.conf swanctl "$@"
}
# The same as a plain command, for `tracked` (which then tracks swanctl itself, so that an
# interrupt stops a pending --initiate at once).
SWANCTL=(env "STRONGSWAN_CONF=$STRONGSWAN_TEMPLATES/swanctl-client.conf" swanctl)

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

# espgw under charon: each gateway runs espgw (control socket, no SAs of its own) and a
# charon with the espgw plugin, which hands espgw the SAs and carries IKE through espgw's
# WAN socket. The tunnel is the libipsec path's: same swanctl.conf, same PSK IKEv2,
# AES-128-GCM, encap = yes, brought up with swanctl --initiate.
setup_espgw_charon() {  # setup_espgw_charon [MEMBERS]: MEMBERS > 1 makes an ECMP group
  local members=${1:-1} psk side
  ensure_charon_tools
  psk=$(random_hex 24)
  for side in a b; do
    local ns=$GWA local_addr=192.0.2.1 remote_addr=192.0.2.2 local_ts=10.1.0.0/16 remote_ts=10.2.0.0/16 other=b
    [[ $side == b ]] && ns=$GWB local_addr=192.0.2.2 remote_addr=192.0.2.1 local_ts=10.2.0.0/16 remote_ts=10.1.0.0/16 other=a
    local ctl=$WORK/$PATH_NAME-espgw-$side.ctl sock=$WORK/$PATH_NAME-charon-$side.vici
    local ecmp_conf="" reuse_ikesa=yes
    if ((members > 1)) && [[ $side == a ]]; then
      ecmp_conf=$'\n'"charon-vici = unix://$sock"$'\n'"parallel-child = net $members"
      reuse_ikesa=no
    fi
    write_espgw_conf "$WORK/$PATH_NAME-espgw-$side.conf" "$local_addr" "control-socket = $ctl$ecmp_conf"
    spawn "$WORK/$PATH_NAME-espgw-$side.log" ip netns exec "$ns" "$ESPGW" -c "$WORK/$PATH_NAME-espgw-$side.conf"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    wait_while_alive 10 "$SPAWNED" test -S "$ctl" ||
      path_fail "espgw in gw${side^^} did not open its control socket $ctl: $(first_error "$WORK/$PATH_NAME-espgw-$side.log")"
    fill_template "$STRONGSWAN_TEMPLATES/strongswan-espgw.conf.in" "$WORK/$PATH_NAME-strongswan-$side.conf" \
      "ESPGW_SOCKET=$ctl" "VICI_SOCKET=$sock" "LOG_FILE=$WORK/$PATH_NAME-charon-$side.log" \
      "REUSE_IKESA=$reuse_ikesa"
    fill_template "$STRONGSWAN_TEMPLATES/swanctl.conf.in" "$WORK/$PATH_NAME-swanctl-$side.conf" \
      "LOCAL_ADDR=$local_addr" "REMOTE_ADDR=$remote_addr" "LOCAL_TS=$local_ts" "REMOTE_TS=$remote_ts" \
      "LOCAL_ID=gw$side.s2s.test" "REMOTE_ID=gw$other.s2s.test" "PSK=$psk"
    chmod 600 "$WORK/$PATH_NAME-swanctl-$side.conf"
    # A private mount namespace with its own /run (charon's pid file path is compiled in);
    # the plugin through LD_PRELOAD, so nothing is installed on the system.
    spawn "$WORK/$PATH_NAME-charon-$side.out" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs charon-run /run && exec env STRONGSWAN_CONF="$1" LD_PRELOAD="$2" "$3"' \
      sh "$WORK/$PATH_NAME-strongswan-$side.conf" "$PLUGIN" "$CHARON"
    GW_PIDS+=("charon${side^^}:$SPAWNED")
    # Answering on VICI, not only the socket file: charon creates it before it may abort
    # (e.g. when the plugin is missing: "unmet dependency: CUSTOM:socket").
    wait_while_alive 10 "$SPAWNED" swan --stats --uri "unix://$sock" ||
      path_fail "charon in gw${side^^} is not answering on $sock: $(first_error "$WORK/$PATH_NAME-charon-$side.log")"
    tracked "${SWANCTL[@]}" --load-all --uri "unix://$sock" --file "$WORK/$PATH_NAME-swanctl-$side.conf" \
      >"$WORK/$PATH_NAME-swanctl-load-$side.log" 2>&1 ||
      path_fail "swanctl --load-all failed for gw${side^^}: $(first_error "$WORK/$PATH_NAME-swanctl-load-$side.log")"
  done
  if ((members > 1)); then
    # espgw brings the group up by itself once charon has the config (parallel-child).
    wait_for 30 ecmp_members_at_least "$WORK/$PATH_NAME-espgw-a.ctl" "$members" ||
      path_fail "espgw in gwA did not bring up $members CHILD_SAs of 'net': $(first_error "$WORK/$PATH_NAME-espgw-a.log")"
    meta ecmp_members "$members"
  else
    tracked "${SWANCTL[@]}" --initiate --uri "unix://$WORK/$PATH_NAME-charon-a.vici" --child net --timeout 20 \
      >"$WORK/$PATH_NAME-swanctl-initiate.log" 2>&1 ||
      path_fail "swanctl --initiate failed: $(first_error "$WORK/$PATH_NAME-swanctl-initiate.log")"
  fi
  # espgw installs the routes to the remote subnet itself, through espgw0 (proto 245).
  wait_for 5 sh -c "ip -n '$GWA' route show table all proto 245 | grep -q '10.2.0.0/16.*espgw0'" ||
    path_fail "espgw installed no route to 10.2.0.0/16 via espgw0 in gwA: $(ip -n "$GWA" route show table all | grep -v local)"
  wait_for 5 sh -c "ip -n '$GWB' route show table all proto 245 | grep -q '10.1.0.0/16.*espgw0'" ||
    path_fail "espgw installed no route to 10.1.0.0/16 via espgw0 in gwB"
  meta routes_gwA "$(ip -n "$GWA" route show table all proto 245 | tr '\n' ';')"
  meta routes_gwB "$(ip -n "$GWB" route show table all proto 245 | tr '\n' ';')"
  # The CHILD_SA as charon installed it (SPIs, ESP proposal, encapsulation), for the JSON.
  for side in a b; do
    swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-$side.vici" --raw \
      >"$PATH_RESULTS/list-sas-before-gw${side^^}.raw" 2>&1 || true
  done
  swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-a.vici" >"$PATH_RESULTS/list-sas-before-gwA.txt" 2>&1 || true
  meta tunnel_interface espgw0
  meta managed_by "charon: strongSwan $($CHARON --version 2>&1 | awk '{print $NF}' | head -1) with the espgw plugin (LD_PRELOAD), tunnel up by swanctl --initiate"
  meta charon_plugins "$(sed -n 's/^ *load = //p' "$STRONGSWAN_TEMPLATES/strongswan-espgw.conf.in" | head -1)"
  meta plugin "$PLUGIN"
  meta espgwctl "$ESPGWCTL"
  meta espgw "$ESPGW"
  meta description "espgw under strongSwan charon (espgw plugin), IKEv2 PSK, AES-128-GCM, ESP in UDP 4500 (encap = yes), $members CHILD_SA(s) in the ECMP group, workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
}

ecmp_members_at_least() {  # ecmp_members_at_least CONTROL_SOCKET N: an SA group of >= N members
  "$ESPGWCTL" --socket "$1" --json sas 2>/dev/null | "$PYTHON" -c '
import json, sys
groups = json.load(sys.stdin).get("groups", {})
sys.exit(0 if any(len(g.get("members", [])) >= int(sys.argv[1]) for g in groups.values()) else 1)' "$2"
}

# After the measurements: what charon and espgw hold now (the SA byte and packet counters
# charon reads from espgw, and espgw's own counters and drop reasons per SA and engine).
collect_espgw_charon() {
  local side
  for side in a b; do
    swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-$side.vici" --raw \
      >"$PATH_RESULTS/list-sas-after-gw${side^^}.raw" 2>&1 || true
    tracked "$ESPGWCTL" --socket "$WORK/$PATH_NAME-espgw-$side.ctl" --json status \
      >"$PATH_RESULTS/espgwctl-status-gw${side^^}.json" 2>"$PATH_RESULTS/espgwctl-status-gw${side^^}.err" || true
  done
  swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-a.vici" >"$PATH_RESULTS/list-sas-after-gwA.txt" 2>&1 || true
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

start_iperf_server() {  # one-shot server in lanB; absolute paths for -I/--logfile (iperf3 -D exits silently without them)
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
    local profiler=""
    if [[ -n ${BENCH_PROFILE:-} ]]; then
      perf record -a -g -F 499 -o "$PATH_RESULTS/perf.data" -- sleep $((BENCH_SECONDS - 3)) \
        >"$PATH_RESULTS/perf-record.log" 2>&1 &
      profiler=$!
      track "$profiler"
    fi
    local count=$(((BENCH_SECONDS - 2) * 5))
    ((count < 5)) && count=5
    tracked in_ns "$LANA" ping -c "$count" -i 0.2 -W 2 10.2.0.2 >"$PATH_RESULTS/ping-load.txt" 2>&1 || true
    [[ -n $profiler ]] && { wait "$profiler" || true; }
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
    espgw-jumbo) setup_espgw udp "jumbo-segments = yes" ;;
    espgw-charon) setup_espgw_charon 1 ;;
    espgw-charon-ecmp[0-9]*) setup_espgw_charon "${PATH_NAME#espgw-charon-ecmp}" ;;
    libipsec) setup_libipsec ;;
    wireguard-go) setup_wireguard ;;
    *) path_fail "unknown path '$PATH_NAME'" ;;
  esac
  local iface
  iface=$(sed -n 's/^tunnel_interface=//p' "$PATH_RESULTS/meta.txt" | tail -n 1)
  verify_path "$iface"
  measure_path
  if [[ $PATH_NAME == espgw || $PATH_NAME == espgw-raw || $PATH_NAME == espgw-jumbo ]]; then  # SIGUSR1: espgw logs its SA counters and drop reasons
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
  [[ $PATH_NAME == espgw-charon* ]] && collect_espgw_charon
  return 0
}

# ---------------------------------------------------------------- main

[[ $(id -u) == 0 ]] || { log "needs root (network namespaces)"; exit 1; }
for tool in iperf3 ping ip unshare nsenter swanctl wg wireguard-go "$CHARON" "$PYTHON"; do
  command -v "$tool" >/dev/null || { log "missing $tool: run tools/install-deps.sh"; exit 1; }
done
if [[ -n ${BENCH_PROFILE:-} ]] && ! command -v perf >/dev/null; then
  log "BENCH_PROFILE needs perf: run tools/install-deps.sh"
  exit 1
fi
read -r -a PATHS <<<"$BENCH_PATHS"
log "paths: ${PATHS[*]}; iperf3 ${BENCH_SECONDS} s per run, -C $BENCH_CC; work dir $WORK"

index=0
for PATH_NAME in "${PATHS[@]}"; do
  index=$((index + 1))
  PATH_RESULTS=$RESULTS/$PATH_NAME
  mkdir -p "$PATH_RESULTS"
  : >"$PATH_RESULTS/started"
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
if [[ -n ${BENCH_PROFILE:-} ]]; then
  PROFILE_OUT=${BENCH_OUT%.json}-profile.txt
  for PATH_NAME in "${PATHS[@]}"; do
    data=$RESULTS/$PATH_NAME/perf.data
    [[ -f $data ]] || continue
    echo "=== $PATH_NAME: CPU samples by thread name (lanA→lanB -P4, whole machine, $(nproc) CPUs) ==="
    perf report -i "$data" --no-children --sort comm -g none --stdio --percent-limit 1 2>/dev/null | grep '%' || true
    echo "=== $PATH_NAME: hottest functions (thread name, object, symbol) ==="
    perf report -i "$data" --no-children --sort comm,dso,sym -g none --stdio --percent-limit 0.7 2>/dev/null |
      grep '%' | head -30 || true
    echo
  done >"$PROFILE_OUT"
  log "profile: $PROFILE_OUT"
fi
ESPGW_BIN=${ESPGW:-$ROOT/build/s2sbench/daemon/espgw}
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

def parse_vici_raw(text):
    """swanctl --list-sas --raw: 'list-sa event {s2s {k=v ... child-sas {net-1 {...}}}}'
    as nested dicts (lists 'k [a b]' as Python lists); one dict per event or reply."""
    tokens = re.findall(r"[^\s{}\[\]=]+=[^\s{}\[\]]*|[^\s{}\[\]]+|[{}\[\]]", text)
    pos = 0
    def section():
        nonlocal pos
        out = {}
        while pos < len(tokens) and tokens[pos] != "}":
            tok = tokens[pos]; pos += 1
            if "=" in tok:
                k, _, v = tok.partition("=")
                out[k] = v
            elif pos < len(tokens) and tokens[pos] == "{":
                pos += 1
                out[tok] = section()
                pos += 1  # the closing brace
            elif pos < len(tokens) and tokens[pos] == "[":
                pos += 1
                items = []
                while pos < len(tokens) and tokens[pos] != "]":
                    items.append(tokens[pos]); pos += 1
                pos += 1
                out[tok] = items
        return out
    events = []
    while pos < len(tokens):
        # an event or reply: '<name words> {' ... '}'
        while pos < len(tokens) and tokens[pos] != "{":
            pos += 1
        if pos >= len(tokens):
            break
        pos += 1
        events.append(section())
        pos += 1
    return events

def charon_sa(path):
    """The IKE_SA and CHILD_SA charon reports, from a saved swanctl --list-sas --raw."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    for event in parse_vici_raw(text):
        for ike_name, ike in event.items():
            if not isinstance(ike, dict) or "child-sas" not in ike:
                continue
            children = [c for c in ike["child-sas"].values() if isinstance(c, dict)]
            child = next((c for c in children if c.get("state") == "INSTALLED"), children[0] if children else {})
            def alg(d):
                a = d.get("encr-alg")
                return f"{a}-{d['encr-keysize']}" if a and d.get("encr-keysize") else a
            def num(v):
                return int(v) if isinstance(v, str) and v.isdigit() else v
            return {
                "ike_sa": {"name": ike_name, "state": ike.get("state"), "version": num(ike.get("version")),
                           "proposal": "/".join(x for x in (alg(ike), ike.get("prf-alg"), ike.get("dh-group")) if x),
                           "local": f"{ike.get('local-host')}[{ike.get('local-port')}]",
                           "remote": f"{ike.get('remote-host')}[{ike.get('remote-port')}]",
                           "nat_any": ike.get("nat-any"), "spi_i": ike.get("initiator-spi"),
                           "spi_r": ike.get("responder-spi")},
                "child_sa": {"name": child.get("name"), "state": child.get("state"), "reqid": num(child.get("reqid")),
                             "mode": child.get("mode"), "protocol": child.get("protocol"),
                             "encap": child.get("encap", "no"), "esp_proposal": alg(child),
                             "spi_in": child.get("spi-in"), "spi_out": child.get("spi-out"),
                             "local_ts": child.get("local-ts"), "remote_ts": child.get("remote-ts"),
                             "bytes_in": num(child.get("bytes-in")), "packets_in": num(child.get("packets-in")),
                             "bytes_out": num(child.get("bytes-out")), "packets_out": num(child.get("packets-out"))},
                "child_sas_listed": len(children),
            }
    return {"error": "no IKE_SA with a CHILD_SA in swanctl --list-sas", "raw": text.strip()[:500]}

def espgwctl_status(path):
    """espgwctl --json status, with its drop counters summed (SAs and engine)."""
    if not os.path.exists(path):
        return None
    try:
        status = json.load(open(path))
    except Exception as e:
        err = path[:-5] + ".err"
        return {"error": f"espgwctl --json status: {e} {open(err).read().strip() if os.path.exists(err) else ''}".strip()}
    sas = (status.get("list-sas") or {}).get("sas") or {}
    sa_drops = {}
    for name, sa in sas.items():
        for reason, v in (sa.get("drops") or {}).items():
            if str(v).isdigit() and int(v):
                sa_drops[f"{name}/{reason}"] = int(v)
    stats = status.get("stats") or {}
    def nonzero(d, only=lambda k: True):
        return {k: int(v) for k, v in (d or {}).items() if only(k) and str(v).isdigit() and int(v)}
    engine, gateway = nonzero(stats.get("engine-drops")), nonzero(stats.get("gateway-drops"))
    wan = nonzero(stats.get("wan"), lambda k: k.endswith("kernel-drops"))  # the socket's receive buffer
    return {"drops_total": sum(sa_drops.values()) + sum(engine.values()) + sum(gateway.values()) + sum(wan.values()),
            "sa_drops": sa_drops, "engine_drops": engine, "gateway_drops": gateway, "wan_kernel_drops": wan,
            "sa_packets": {name: {k: sa.get(k) for k in ("direction", "spi", "packets", "bytes", "origin") if k in sa}
                           for name, sa in sas.items()},
            "status": status}

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
    "topology": "lanA 10.1.0.2 — gwA 192.0.2.1 — WAN veth 192.0.2.0/24 — gwB 192.0.2.2 — lanB 10.2.0.2, one netns each, " + f"LAN MTU {os.environ.get('BENCH_LAN_MTU', '1500')}, WAN MTU {os.environ.get('BENCH_WAN_MTU', '1500')}",
    "throughput": "iperf3 TCP receiver-side Gbit/s (end.sum_received); a_to_b = lanA→lanB, b_to_a = lanB→lanA (-R)",
    "versions": {
        "iperf3": sh("iperf3 --version | head -1"),
        "strongswan": sh("$CHARON --version 2>&1 | head -1"),
        "wireguard_go": sh("wireguard-go --version | head -1"),
        "espgw_git": sh("git -C '$ROOT' rev-parse --short HEAD") + (" (dirty)" if sh("git -C '$ROOT' status --porcelain --untracked-files=no") else ""),
    },
    "espgw": {"binary": "$ESPGW_BIN", "workers": int("$ESPGW_WORKERS") if "$ESPGW_WORKERS".isdigit() else "$ESPGW_WORKERS", "tun_queues": int("$ESPGW_TUN_QUEUES"),
              "espgwctl": "$ESPGWCTL", "charon_plugin": "$PLUGIN"},
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
    for side in ("gwA", "gwB"):
        before = charon_sa(os.path.join(d, f"list-sas-before-{side}.raw"))
        if before is not None:
            after = charon_sa(os.path.join(d, f"list-sas-after-{side}.raw"))
            entry.setdefault("charon_sas", {})[side] = {"after_setup": before, "after_run": after}
        st = espgwctl_status(os.path.join(d, f"espgwctl-status-{side}.json"))
        if st is not None:
            entry.setdefault("espgwctl_after_run", {})[side] = st
    cs = entry.get("charon_sas", {})
    if "gwA" in cs and "gwB" in cs:
        a = (cs["gwA"]["after_setup"] or {}).get("child_sa", {})
        b = (cs["gwB"]["after_setup"] or {}).get("child_sa", {})
        entry["charon_spis_match"] = bool(a.get("spi_out")) and a.get("spi_out") == b.get("spi_in") and a.get("spi_in") == b.get("spi_out")
    entry["tests"] = {t: parse_iperf(os.path.join(d, t)) for t in tests if os.path.exists(os.path.join(d, t + ".json"))}
    report["paths"][p] = entry

def gbit(p, t):
    return report["paths"].get(p, {}).get("tests", {}).get(t, {}).get("gbit_s")

def ratio(a, b):
    return round(a / b, 3) if a and b else None

summary = {}
# (path, key prefix): espgw with static SAs, espgw managed by charon, and its ECMP paths
MINE = [("espgw", "espgw"), ("espgw-charon", "espgw_charon")] + [
    (p, p.replace("-", "_")) for p in paths if p.startswith("espgw-charon-ecmp")]
RATIO_OTHERS = (("libipsec", "kernel_libipsec"), ("wireguard-go", "wireguard_go"), ("plain", "plain"))
for mine, prefix in MINE:
    for other, name in RATIO_OTHERS + ((("espgw", "espgw_static"),) if mine.startswith("espgw-charon") else ()):
        summary[f"{prefix}_over_{name}"] = {t: ratio(gbit(mine, t), gbit(other, t)) for t in tests}
lat = lambda p, k: (report["paths"].get(p, {}).get(k) or {}).get("median_ms")
p_idle = lat("plain", "ping_idle")
for mine, prefix in MINE:
    load = lat(mine, "ping_under_load")
    summary[f"{prefix}_added_latency_under_load_ms"] = round(load - p_idle, 3) if load is not None and p_idle is not None else None
summary["targets"] = {
    "espgw >= 10x kernel-libipsec (a_to_b_P4)": summary["espgw_over_kernel_libipsec"]["a_to_b_P4"],
    "espgw >= 0.5x plain (a_to_b_P4)": summary["espgw_over_plain"]["a_to_b_P4"],
    "espgw > wireguard-go (a_to_b_P4)": summary["espgw_over_wireguard_go"]["a_to_b_P4"],
    "added latency under load <= 1 ms": summary["espgw_added_latency_under_load_ms"],
    "espgw-charon >= 10x kernel-libipsec (a_to_b_P4)": summary["espgw_charon_over_kernel_libipsec"]["a_to_b_P4"],
    "espgw-charon >= 0.5x plain (a_to_b_P4)": summary["espgw_charon_over_plain"]["a_to_b_P4"],
    "espgw-charon > wireguard-go (a_to_b_P4)": summary["espgw_charon_over_wireguard_go"]["a_to_b_P4"],
    "espgw-charon added latency under load <= 1 ms": summary["espgw_charon_added_latency_under_load_ms"],
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
hdr = f"{'path':<18} {'A→B P1':>8} {'A→B P4':>8} {'B→A P1':>8} {'B→A P4':>8} {'idle ms':>8} {'load ms':>8} {'mtu':>5}  {'gw CPU% A/B (A→B P4)':<22} status"
print(hdr)
print("-" * len(hdr))
for p in paths:
    e = report["paths"][p]
    cpu = e.get("tests", {}).get("a_to_b_P4", {}).get("cpu", {}).get("gateways_pct_of_one_cpu", {})
    cpu_s = "/".join(fmt(cpu.get(g), "{:.0f}") for g in ("gwA", "gwB")) if cpu else "-"
    status = e["status"] + (": " + e["error"] if e.get("error") else "")
    print(f"{p:<18} " + " ".join(f"{fmt(gbit(p, t)):>8}" for t in tests)
          + f" {fmt(lat(p, 'ping_idle'), '{:.3f}'):>8} {fmt(lat(p, 'ping_under_load'), '{:.3f}'):>8} {fmt(e.get('tunnel_mtu'), '{}'):>5}  {cpu_s:<22} {status}")
print()
def ratio_line(key, label):
    print(f"{label:<37} " + "  ".join(f"{t.replace('a_to_b_', 'A→B ').replace('b_to_a_', 'B→A ')} {fmt(summary[key][t]):>5}" for t in tests))
for mine, prefix in MINE:
    if mine not in paths:
        continue
    for key, label in ((f"{prefix}_over_kernel_libipsec", f"{mine} / kernel-libipsec"), (f"{prefix}_over_plain", f"{mine} / plain"),
                       (f"{prefix}_over_wireguard_go", f"{mine} / wireguard-go")):
        ratio_line(key, label)
    if mine.startswith("espgw-charon"):
        ratio_line(f"{prefix}_over_espgw_static", f"{mine} / espgw (static)")
    print(f"{mine + ' added latency':<37} {fmt(summary[prefix + '_added_latency_under_load_ms'], '{:.3f}')} ms ({mine} ping under load − plain idle ping)")
ec = report["paths"].get("espgw-charon")
if ec and ec.get("charon_sas"):
    for side, sa in ec["charon_sas"].items():
        child = ((sa.get("after_setup") or {}).get("child_sa")) or {}
        after = ((sa.get("after_run") or {}).get("child_sa")) or {}
        st = ec.get("espgwctl_after_run", {}).get(side) or {}
        drops = ", ".join(f"{k} {v}" for part in ("sa_drops", "engine_drops", "gateway_drops", "wan_kernel_drops")
                          for k, v in (st.get(part) or {}).items()) or "none"
        drops = f"{st.get('drops_total', '-')} ({drops})" if st.get("drops_total") else drops
        print(f"espgw-charon {side}: CHILD_SA {child.get('protocol')} {child.get('esp_proposal')} {child.get('mode')} encap={child.get('encap')} "
              f"spi in {child.get('spi_in')} out {child.get('spi_out')}; after the run: {after.get('packets_in', '-')} pkts in, "
              f"{after.get('packets_out', '-')} out (charon's query_sa); espgw drops {drops}")
    print(f"espgw-charon SPIs of gwA and gwB match: {ec.get('charon_spis_match')}")
print(f"results: {out_path}")
EOF

if [[ -n $BENCH_PLOT ]]; then
  "$PYTHON" "$ROOT/bench/plot_site_to_site.py" "$BENCH_OUT" "$BENCH_PLOT" || log "plot failed"
fi

failed=$(cat "$RESULTS"/*/status 2>/dev/null | grep -cx failed || true)
if ((failed > 0)); then log "$failed path(s) failed; see the table and $BENCH_OUT"; exit 1; fi
