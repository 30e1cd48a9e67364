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
#   espgw-workers espgw with workers on (ESPGW_WORKERS_ON per gateway, default the CPUs
#                 divided among the gateways, at least one) beside `espgw`, which runs as
#                 ESPGW_WORKERS says (espgw's default auto: inline on 2 CPUs): one tunnel,
#                 both ways of running it
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
# processes and of the whole machine during each run; for espgw's paths (static SAs and
# under charon), CPU cycles per ESP packet of each gateway in each run (below). A tunnel
# path is only measured after a ping has gone through its tunnel device (the gateways
# have no other route between the LANs).
#
# CPU cycles per ESP packet (paths[P].tests[RUN].cycles_per_esp_packet = {"gwA": N, "gwB": N}
# beside gbit_s, the counts and CPU seconds under .esp; null for plain, libipsec and
# wireguard-go): the espgw process's CPU time over the run (utime + stime of
# /proc/PID/stat, read before and after it) times the CPU clock (cpu MHz of processor 0 in
# /proc/cpuinfo, in the JSON as cpu_clock_mhz: perf's hardware counters are not available
# in this VM), divided by the ESP packets that gateway sent plus received during the run,
# as espgw counts them: the packet counters of its outbound and inbound SAs (espgwctl
# --json sas on its control socket, read right before and after the run). Not the
# interfaces' counters: with UDP GSO/GRO and TSO the kernel counts super-packets. The
# static-SA paths give espgw a control socket for this (no charon uses it).
#
# Writes bench/results/site_to_site.json, prints a table with the ratios the project's
# targets name (docs/performance.md) and the cycles per ESP packet, and draws
# docs/img/site_to_site.png with bench/plot_site_to_site.py.
#
# Usage: bench/site_to_site_bench.sh            (as root)
# Environment:
#   BENCH_SECONDS=10        iperf3 duration of each run
#   BENCH_PATHS="plain espgw espgw-workers espgw-raw espgw-charon espgw-charon-ecmp2 espgw-charon-ecmp4 libipsec wireguard-go"
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
#   ESPGWCTL=path/to/espgwctl   (every espgw path: the SA counters; espgw-charon) default:
#                           the espgwctl of ESPGW's build tree, BUILD/daemon/espgwctl
#                           (built if absent in build/s2sbench; without it the static-SA
#                           paths run, with no cycles per ESP packet)
#   PLUGIN=path/to/libstrongswan-espgw.so   (espgw-charon) default: ESPGW's build tree,
#                           BUILD/vici_bridge/charon_plugin/libstrongswan-espgw.so (likewise)
#   ESPGW_WORKERS=auto ESPGW_TUN_QUEUES=1   espgw.conf settings. auto: espgw's default,
#                           resolved by espgw from the CPUs it may use (inline on 2 or
#                           fewer, one worker per CPU from 3); inline, 0 or N as in espgw.conf
#   ESPGW_EXTRA_CONF="key = value"       more espgw.conf lines (e.g. socket-buffer, pool-packets)
#
# Namespaces are named per run (s2s<PID>-<n>-...); everything this script starts is
# stopped and every namespace removed on exit, on failure and on Ctrl-C. Only PIDs this
# script started are signalled (each checked against its recorded start time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_PATHS=${BENCH_PATHS:-plain espgw espgw-workers espgw-raw espgw-charon espgw-charon-ecmp2 espgw-charon-ecmp4 libipsec wireguard-go}
BENCH_CC=${BENCH_CC:-cubic}
BENCH_PING_COUNT=${BENCH_PING_COUNT:-20}
BENCH_OUT=${BENCH_OUT:-$ROOT/bench/results/site_to_site.json}
BENCH_PLOT=${BENCH_PLOT-$ROOT/docs/img/site_to_site.png}
ESPGW_WORKERS=${ESPGW_WORKERS:-auto}
# espgw's own default, as a user gets it: workers = auto, which espgw resolves from the
# CPUs it may use (inline at 2 or fewer, as on this project's VMs; a worker per CPU from
# 3). The espgw-workers path shows the same tunnel with workers on beside it.
ESPGW_WORKERS_ON=${ESPGW_WORKERS_ON:-$(($(nproc) / 2 > 1 ? $(nproc) / 2 : 1))}
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

S2S_PARTS=$ROOT/bench/site_to_site
# shellcheck source=bench/site_to_site/process.sh
source "$S2S_PARTS/process.sh"
# shellcheck source=bench/site_to_site/topology.sh
source "$S2S_PARTS/topology.sh"
# shellcheck source=bench/site_to_site/paths.sh
source "$S2S_PARTS/paths.sh"
# shellcheck source=bench/site_to_site/measure.sh
source "$S2S_PARTS/measure.sh"
# shellcheck source=bench/site_to_site/report.sh
source "$S2S_PARTS/report.sh"

trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

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
  GW_PIDS=() GW_CTLS=()
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
if [[ -n ${BENCH_PROFILE:-} ]]; then write_profile; fi
write_results

if [[ -n $BENCH_PLOT ]]; then
  "$PYTHON" "$ROOT/bench/plot_site_to_site.py" "$BENCH_OUT" "$BENCH_PLOT" || log "plot failed"
fi

failed=$(cat "$RESULTS"/*/status 2>/dev/null | grep -cx failed || true)
if ((failed > 0)); then log "$failed path(s) failed; see the table and $BENCH_OUT"; exit 1; fi
