#!/usr/bin/env bash
# Site-to-site test of the espgw daemon in network namespaces, with static SAs:
#
#   lanA 10.1.0.2 fd00:1::2 ── gwA ══ WAN 192.0.2.0/24 2001:db8::/64 ══ gwB ── lanB 10.2.0.2 fd00:2::2
#
# For each WAN mode (ESP in UDP 4500, raw ESP) and outer family (IPv4, IPv6) it starts two
# espgw daemons with fresh random keys and checks: ping and iperf3 TCP both ways, IPv4 and
# IPv6 inside; only ESP on the WAN (tshark); a DF packet too big for the tunnel brings
# ICMP back; counters move; SIGTERM removes the TUN device and the routes.
#
# Usage: site_to_site.sh ESPGW_BINARY [scenario...]   (scenarios: udp4 raw4 udp6 raw6)
# Needs root. Namespaces are named per run and always removed, even on failure.
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW_BINARY [scenario...]}")
shift
SCENARIOS=("${@:-udp4 raw4 udp6 raw6}")
[[ ${#SCENARIOS[@]} -eq 1 ]] && read -r -a SCENARIOS <<<"${SCENARIOS[0]}"

RUN=eg$$
LANA=$RUN-lanA GWA=$RUN-gwA GWB=$RUN-gwB LANB=$RUN-lanB
WORK=$(mktemp -d /tmp/espgw-s2s.XXXXXX)
PIDS=()
FAILURES=0
PASSES=0

log() { printf '[s2s] %s\n' "$*"; }
pass() { PASSES=$((PASSES + 1)); log "PASS $*"; }
fail() { FAILURES=$((FAILURES + 1)); log "FAIL $*"; }

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "$LANA" "$GWA" "$GWB" "$LANB"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

setup_topology() {
  for ns in "$LANA" "$GWA" "$GWB" "$LANB"; do
    ip netns add "$ns"
    in_ns "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad;
                       echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad'
    ip -n "$ns" link set lo up
  done
  ip -n "$LANA" link add eth0 type veth peer name lan0 netns "$GWA"
  ip -n "$LANB" link add eth0 type veth peer name lan0 netns "$GWB"
  ip -n "$GWA" link add wan0 type veth peer name wan0 netns "$GWB"
  for gw in "$GWA" "$GWB"; do
    in_ns "$gw" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward;
                       echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
  done
  ip -n "$LANA" addr add 10.1.0.2/16 dev eth0
  ip -n "$LANA" addr add fd00:1::2/64 dev eth0 nodad
  ip -n "$GWA" addr add 10.1.0.1/16 dev lan0
  ip -n "$GWA" addr add fd00:1::1/64 dev lan0 nodad
  ip -n "$GWA" addr add 192.0.2.1/24 dev wan0
  ip -n "$GWA" addr add 2001:db8::1/64 dev wan0 nodad
  ip -n "$GWB" addr add 192.0.2.2/24 dev wan0
  ip -n "$GWB" addr add 2001:db8::2/64 dev wan0 nodad
  ip -n "$GWB" addr add 10.2.0.1/16 dev lan0
  ip -n "$GWB" addr add fd00:2::1/64 dev lan0 nodad
  ip -n "$LANB" addr add 10.2.0.2/16 dev eth0
  ip -n "$LANB" addr add fd00:2::2/64 dev eth0 nodad
  for ns in "$LANA" "$LANB"; do ip -n "$ns" link set eth0 up; done
  for gw in "$GWA" "$GWB"; do ip -n "$gw" link set lan0 up; ip -n "$gw" link set wan0 up; done
  ip -n "$LANA" route add default via 10.1.0.1
  ip -n "$LANA" -6 route add default via fd00:1::1
  ip -n "$LANB" route add default via 10.2.0.1
  ip -n "$LANB" -6 route add default via fd00:2::1
}

random_key() { od -An -tx1 -N20 /dev/urandom | tr -d ' \n'; }

# write_configs MODE FAMILY: espgw.conf and static SA files for both gateways.
write_configs() {
  local mode=$1 family=$2 a b udp=""
  if [[ $family == 4 ]]; then a=192.0.2.1 b=192.0.2.2; else a=2001:db8::1 b=2001:db8::2; fi
  [[ $mode == udp ]] && udp="udp 4500:4500"
  local key_ab key_ba
  key_ab=$(random_key) key_ba=$(random_key)
  local policies="policy out local LOCAL4 remote REMOTE4 action protect reqid 1
policy fwd local LOCAL4 remote REMOTE4 action protect reqid 1
policy out local LOCAL6 remote REMOTE6 action protect reqid 1
policy fwd local LOCAL6 remote REMOTE6 action protect reqid 1"
  cat >"$WORK/static-a.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
sa in spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
$(echo "$policies" | sed 's#LOCAL4#10.1.0.0/16#; s#REMOTE4#10.2.0.0/16#; s#LOCAL6#fd00:1::/64#; s#REMOTE6#fd00:2::/64#')
EOS
  cat >"$WORK/static-b.conf" <<EOS
sa out spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
sa in spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
$(echo "$policies" | sed 's#LOCAL4#10.2.0.0/16#; s#REMOTE4#10.1.0.0/16#; s#LOCAL6#fd00:2::/64#; s#REMOTE6#fd00:1::/64#')
EOS
  for side in a b; do
    local local_address=$a
    [[ $side == b ]] && local_address=$b
    cat >"$WORK/espgw-$side.conf" <<EOS
tun-name = espgw0
local-address = $local_address
static-sa-file = static-$side.conf
workers = 2
log-level = info
EOS
  done
}

start_gateway() {  # start_gateway NS SIDE
  local ns=$1 side=$2
  # Not through in_ns: `$!` must be the process that becomes espgw (ip netns exec execs
  # it), not a subshell, so that signals reach the daemon.
  ip netns exec "$ns" "$ESPGW" -c "$WORK/espgw-$side.conf" >"$WORK/espgw-$side.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$side=$!"
  for _ in $(seq 1 50); do
    if ip -n "$ns" link show espgw0 2>/dev/null | grep -q 'UP'; then return 0; fi
    sleep 0.1
  done
  log "espgw in $ns did not come up:"; cat "$WORK/espgw-$side.log"
  return 1
}

stop_gateway() {  # stop_gateway NS SIDE: SIGTERM, then the TUN device and routes are gone
  local ns=$1 side=$2 pid
  eval "pid=\$PID_$side"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  if ip -n "$ns" link show espgw0 >/dev/null 2>&1; then fail "$ns: espgw0 still exists after SIGTERM"
  elif ip -n "$ns" route show proto 245 | grep -q . || ip -n "$ns" -6 route show proto 245 | grep -q .; then
    fail "$ns: espgw routes left after SIGTERM"
  else pass "$ns: SIGTERM removed espgw0 and its routes"; fi
}

check_ping() {  # check_ping FROM_NS TARGET LABEL
  if in_ns "$1" ping -c 3 -i 0.2 -W 2 "$2" >"$WORK/ping.out" 2>&1; then pass "$3 ping $2"
  else fail "$3 ping $2"; cat "$WORK/ping.out"; fi
}

check_iperf() {  # check_iperf CLIENT_NS SERVER_NS SERVER_ADDRESS LABEL [-R]
  local client=$1 server=$2 address=$3 label=$4 reverse=${5:-}
  in_ns "$server" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  for _ in $(seq 1 50); do  # until the server listens
    in_ns "$server" ss -Hltn 'sport = :5201' | grep -q . && break
    sleep 0.1
  done
  if in_ns "$client" timeout 20 iperf3 -c "$address" -t 2 -C cubic -J $reverse >"$WORK/iperf.json" 2>&1; then
    local bps
    bps=$(/usr/bin/python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]))' "$WORK/iperf.json")
    if ((bps > 0)); then pass "$label iperf3 $address ${reverse:-} $((bps / 1000000)) Mbit/s"
    else fail "$label iperf3 $address: no data"; fi
  else
    fail "$label iperf3 $address ${reverse:-}"; tail -5 "$WORK/iperf.json"
  fi
  [[ -f $WORK/iperf.pid ]] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null || true
  rm -f "$WORK/iperf.pid"
}

check_wire_is_esp() {  # capture on gwB's WAN during a ping; no inner address may show
  local label=$1
  rm -f "$WORK/wan.pcap"
  in_ns "$GWB" tshark -q -i wan0 -a duration:6 -w "$WORK/wan.pcap" >/dev/null 2>&1 &
  local capture=$!
  for _ in $(seq 1 50); do  # until tshark has started writing its capture
    [[ -s $WORK/wan.pcap ]] && break
    sleep 0.1
  done
  sleep 0.5
  in_ns "$LANA" ping -c 3 -i 0.2 -W 2 10.2.0.2 >/dev/null 2>&1 || true
  in_ns "$LANA" ping -6 -c 3 -i 0.2 -W 2 fd00:2::2 >/dev/null 2>&1 || true
  wait "$capture" || true
  local esp clear
  esp=$(tshark -r "$WORK/wan.pcap" -Y esp 2>/dev/null | wc -l)
  clear=$(tshark -r "$WORK/wan.pcap" -Y 'ip.addr==10.1.0.0/16 || ip.addr==10.2.0.0/16 || ipv6.addr==fd00:1::/64 || ipv6.addr==fd00:2::/64' 2>/dev/null | wc -l)
  if ((esp >= 12 && clear == 0)); then pass "$label WAN carries only ESP ($esp ESP packets, 0 in clear)"
  else fail "$label WAN: $esp ESP packets, $clear with inner addresses in clear"; fi
}

check_df_icmp() {  # a DF packet larger than the tunnel MTU gets ICMP back (from gwA's kernel)
  local label=$1 mtu
  mtu=$(ip -n "$GWA" -o link show espgw0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
  # One byte over the tunnel MTU, still within the LAN's 1500.
  in_ns "$LANA" ping -M do -s $((mtu - 28 + 1)) -c 2 -W 2 10.2.0.2 >"$WORK/df.out" 2>&1 || true
  in_ns "$LANA" ping -6 -M do -s $((mtu - 48 + 1)) -c 2 -W 2 fd00:2::2 >"$WORK/df6.out" 2>&1 || true
  if grep -Eqi "mtu ?[=:] ?$mtu" "$WORK/df.out" && grep -Eqi "mtu ?[=:] ?$mtu" "$WORK/df6.out"; then
    pass "$label DF packet over the tunnel MTU $mtu: ICMP frag-needed / packet-too-big came back"
  else
    fail "$label DF/ICMP"; cat "$WORK/df.out" "$WORK/df6.out"
  fi
  # A DF packet of exactly the tunnel MTU goes through, IPv4 and IPv6.
  if in_ns "$LANA" ping -M do -s $((mtu - 28)) -c 1 -W 2 10.2.0.2 >/dev/null 2>&1 &&
     in_ns "$LANA" ping -6 -M do -s $((mtu - 48)) -c 1 -W 2 fd00:2::2 >/dev/null 2>&1; then
    pass "$label DF packets of exactly the tunnel MTU pass"
  else fail "$label DF packet of exactly the tunnel MTU"; fi
}

check_counters() {
  local label=$1
  kill -USR1 "$PID_b"
  sleep 0.5
  if grep -E "sa in spi=0x00001001 .* packets=[1-9]" "$WORK/espgw-b.log" >/dev/null; then
    pass "$label gwB counts packets on its inbound SA"
  else fail "$label counters"; grep "sa " "$WORK/espgw-b.log" || true; fi
}

run_scenario() {
  local scenario=$1 mode=${1%?} family=${1: -1}
  log "=== scenario $scenario: WAN ${mode}, outer IPv$family ==="
  write_configs "$mode" "$family"
  # Path MTUs learned in the previous scenario would shadow this one's tunnel MTU.
  for ns in "$LANA" "$LANB"; do
    ip -n "$ns" route flush cache 2>/dev/null || true
    ip -n "$ns" -6 route flush cache 2>/dev/null || true
  done
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "$scenario: gateways did not start"; return; }
  check_ping "$LANA" 10.2.0.2 "$scenario"
  check_ping "$LANB" 10.1.0.2 "$scenario"
  check_ping "$LANA" fd00:2::2 "$scenario"
  check_ping "$LANB" fd00:1::2 "$scenario"
  check_iperf "$LANA" "$LANB" 10.2.0.2 "$scenario"
  check_iperf "$LANA" "$LANB" 10.2.0.2 "$scenario" -R
  check_iperf "$LANB" "$LANA" fd00:1::2 "$scenario"
  check_wire_is_esp "$scenario"
  check_df_icmp "$scenario"
  check_counters "$scenario"
  stop_gateway "$GWA" a
  stop_gateway "$GWB" b
  PIDS=()
}

setup_topology
for scenario in "${SCENARIOS[@]}"; do run_scenario "$scenario"; done
log "$PASSES passed, $FAILURES failed"
printf '%s passed, %s failed\n' "$PASSES" "$FAILURES"
((FAILURES == 0))
