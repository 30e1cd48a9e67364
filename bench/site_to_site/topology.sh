# shellcheck shell=bash
# Sourced by bench/site_to_site_bench.sh: the four-namespace topology and helpers to run,
# wait for and report on the processes of a path.
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
# shellcheck disable=SC2034  # used by the sourcing script and measure.sh
GW_CTLS=()  # "gwA:SOCKET" "gwB:SOCKET": the control sockets of the path's espgw daemons
