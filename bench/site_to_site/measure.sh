# shellcheck shell=bash
# Sourced by bench/site_to_site_bench.sh: the measurements of one path (ping, iperf3, CPU use)
# and run_path, which sets a path up, verifies and measures it.
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

# The ESP packets of a run, as espgw counts them: its SAs' packet counters (an outbound
# SA's are the ESP packets the gateway sent, an inbound SA's those it received and
# accepted). Not the interfaces' counters: with UDP GSO/GRO and TSO the kernel counts
# super-packets. The report divides the gateway's CPU time by their sum per run.
esp_snapshot() {  # one JSON line: {"gwA": {"SPI/DST": ["out"|"in", PACKETS], ...}, ...}; null: no answer
  local entry name ctl sas line=""
  for entry in "${GW_CTLS[@]}"; do
    name=${entry%%:*} ctl=${entry#*:}
    sas=$(timeout 10 "$ESPGWCTL" --socket "$ctl" --json sas 2>/dev/null | "$PYTHON" -c '
import json, sys
sas = json.load(sys.stdin).get("sas") or {}
print(json.dumps({k: [v.get("direction"), int(v.get("packets", 0))] for k, v in sas.items()
                  if isinstance(v, dict) and v.get("direction") in ("out", "in")}))' 2>/dev/null) || sas=""
    line+="${line:+, }\"$name\": ${sas:-null}"
  done
  echo "{$line}"
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
  # espgw's SA counters read just outside the CPU interval (a query costs espgw a little
  # CPU), with no iperf3 traffic between the two readings of either end.
  esp_snapshot >"$out.esp"
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
  esp_snapshot >>"$out.esp"
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
    espgw-workers) PATH_WORKERS=$ESPGW_WORKERS_ON setup_espgw udp ;;
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
  if [[ $PATH_NAME == espgw || $PATH_NAME == espgw-raw || $PATH_NAME == espgw-jumbo || $PATH_NAME == espgw-workers ]]; then  # SIGUSR1: espgw logs its SA counters and drop reasons
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
