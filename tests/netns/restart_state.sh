#!/usr/bin/env bash
# What survives an espgw restart (docs/security_nonces.md), with
# static SAs over ESP in UDP in the four-namespace topology of tests/netns/lib.sh:
#
#   - gwA restarted cleanly (SIGTERM), killed (kill -9) and reloaded with a changed
#     lifetime (SIGHUP): a capture of the whole run on the WAN holds no (SPI, IV) pair and
#     no (SPI, sequence number) twice, and traffic flows after each;
#   - ESP that gwB accepted before a restart (clean, then kill -9) and that is sent again
#     afterwards is refused, not delivered;
#   - gwA's state file removed: its static SAs are held (they send nothing, counted as
#     sa-held) instead of starting again at sequence number 1.
#
# Usage: restart_state.sh ESPGW_BINARY   (root; namespaces are named per run and removed)
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW_BINARY}")
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/lib.sh"
ESP_CAPTURE="/usr/bin/python3 $HERE/esp_capture.py"

# ping_burst LABEL MIN_ANSWERED: 50 pings lanA -> lanB at 50/s.
ping_burst() {
  local label=$1 minimum=$2 received
  in_ns "$LANA" ping -c 50 -i 0.02 -W 1 10.2.0.2 >"$WORK/burst.out" 2>&1 || true
  received=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$WORK/burst.out")
  if ((${received:-0} >= minimum)); then pass "$label: $received of 50 pings answered"
  else fail "$label: ${received:-0} of 50 pings answered"; show_drops; fi
}

restart_gateway() {  # restart_gateway NS SIDE SIGNAL
  local ns=$1 side=$2 signal=$3 pid
  eval "pid=\$PID_$side"
  kill "-$signal" "$pid"
  wait "$pid" 2>/dev/null || true
  start_gateway "$ns" "$side"
}

# The last counter dump's value of KEY on the inbound SA with SPI in SIDE's log.
inbound_counter() {  # inbound_counter SIDE SPI KEY
  grep "sa in spi=$2 " "$WORK/espgw-$1.log" | tail -1 | sed -n "s/.* $3=\([0-9]*\).*/\1/p"
}
# The sum of SIDE's last dumped drop counters REASON... on inbound SAs.
inbound_drops() {  # inbound_drops SIDE REASON...
  local side=$1 total=0 reason n
  shift
  for reason in "$@"; do
    n=$(grep " in drop $reason=" "$WORK/espgw-$side.log" | tail -1 | sed -n "s/.*=\([0-9]*\)$/\1/p")
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

start_wan_capture() {  # on gwB's WAN, until stop_wan_capture
  rm -f "$WORK/run.pcap"
  # Not through in_ns: `$!` must be tshark itself, which stops cleanly on SIGINT.
  ip netns exec "$GWB" tshark -q -i wan0 -F pcap -w "$WORK/run.pcap" >/dev/null 2>&1 &
  CAPTURE=$!
  PIDS+=("$CAPTURE")
  for _ in $(seq 1 50); do [[ -s $WORK/run.pcap ]] && break; sleep 0.1; done
  sleep 0.5
}
stop_wan_capture() {
  sleep 0.5
  kill -INT "$CAPTURE"
  wait "$CAPTURE" 2>/dev/null || true
}

# Replays what gwA sent in the capture from gwA's WAN port; gwB's inbound SA 0x1001 must
# deliver none of it.
check_replay_refused() {  # check_replay_refused LABEL
  local label=$1 sent packets refused
  sent=$(in_ns "$GWA" $ESP_CAPTURE replay "$WORK/run.pcap" 192.0.2.1 wan0)
  sleep 0.5
  dump_counters
  packets=$(inbound_counter b 0x00001001 packets)
  refused=$(inbound_drops b replayed outside-window sequence-unreserved)
  if ((sent >= 100 && ${packets:-1} == 0 && refused >= sent)); then
    pass "$label: $sent replayed ESP packets refused ($refused replayed/outside-window), none delivered"
  else
    fail "$label: $sent replayed, gwB's SA delivered ${packets:-?}, refused $refused"
    grep -E "sa in spi=0x00001001 | drop |kernel-drops" "$WORK/espgw-b.log" | tail -12
    ip -n "$GWB" -s link show wan0 | tail -4
  fi
}

setup_topology
write_configs udp 4
start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "gateways did not start"; exit 1; }

log "=== gwA restarts, crashes and reloads under one key: no nonce twice ==="
start_wan_capture
ping_burst "first start" 48
restart_gateway "$GWA" a TERM
ping_burst "after a clean restart (SIGTERM)" 48
restart_gateway "$GWA" a KILL
# gwA's inbound SA now refuses gwB's next packets up to its last reservation (it may
# have accepted them before the crash): a quick burst carries gwB's counter past it.
in_ns "$LANA" ping -c 300 -i 0.002 -W 1 10.2.0.2 >/dev/null 2>&1 || true
ping_burst "after a crash (kill -9)" 48
sed -i 's/^\(sa out .*\)$/\1 soft-packets 1000000/' "$WORK/static-a.conf"
kill -HUP "$PID_a"
sleep 0.5
ping_burst "after a reload that changed the outbound SA's lifetime (SIGHUP)" 48
stop_wan_capture
read -r _ packets _ repeated_iv _ repeated_seq < <($ESP_CAPTURE ivs "$WORK/run.pcap" 192.0.2.1)
if ((packets >= 200 && repeated_iv == 0 && repeated_seq == 0)); then
  pass "gwA's ESP across restart, crash and reload: $packets packets, no (SPI, IV) and no (SPI, sequence) twice"
else
  fail "gwA's ESP: $packets packets, $repeated_iv (SPI, IV) pairs and $repeated_seq (SPI, sequence) pairs repeated"
fi

log "=== ESP gwB accepted before its restart is refused after it ==="
restart_gateway "$GWB" b TERM
check_replay_refused "after gwB's clean restart"
restart_gateway "$GWB" b KILL
check_replay_refused "after gwB's crash (kill -9)"

log "=== gwA's state file lost: its static SAs are held ==="
restart_gateway "$GWA" a TERM
kill -TERM "$PID_a"
wait "$PID_a" 2>/dev/null || true
rm -f "$WORK/state-a/sa-state"
start_gateway "$GWA" a
in_ns "$LANA" ping -c 5 -i 0.05 -W 1 10.2.0.2 >/dev/null 2>&1 || true
dump_counters
held=$(grep " out drop sa-held=" "$WORK/espgw-a.log" | tail -1 | sed -n 's/.*=\([0-9]*\)$/\1/p')
if grep -q "SA state lost" "$WORK/espgw-a.log" && ((${held:-0} >= 5)); then
  pass "lost state: gwA holds its outbound SA ($held packets counted as sa-held) instead of restarting at 1"
else
  fail "lost state: sa-held=${held:-0}"; grep -i "state\|held" "$WORK/espgw-a.log" | tail -5
fi

log "$PASSES passed, $FAILURES failed"
printf '%s passed, %s failed\n' "$PASSES" "$FAILURES"
((FAILURES == 0))
