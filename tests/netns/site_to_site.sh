#!/usr/bin/env bash
# Site-to-site test of the espgw daemon in network namespaces, with static SAs:
#
#   lanA 10.1.0.2 fd00:1::2 ── gwA ══ WAN 192.0.2.0/24 2001:db8::/64 ══ gwB ── lanB 10.2.0.2 fd00:2::2
#
# For each WAN mode (ESP in UDP 4500, raw ESP) and outer family (IPv4, IPv6) it starts two
# espgw daemons with fresh random keys and checks: ping and iperf3 TCP both ways, IPv4 and
# IPv6 inside; only ESP on the WAN (tshark); a DF packet too big for the tunnel brings
# ICMP back; counters move; scapy (an ESP implementation we did not write) decrypts what
# espgw put on the wire, and espgw accepts and delivers an ESP packet scapy built;
# SIGTERM removes the TUN device and its routes (the fail-closed ones stay). raw4 (both gateways without workers)
# also checks that readers the host holds back lose no lone packet to the queue-delay gate.
#
# Scenario jumbo: a 9000-byte WAN between a 1500-byte and a 1400-byte LAN, with
# jumbo-segments on both gateways: ESP packets on the WAN far larger than either LAN's
# MTU, TCP both ways, and the receiving gateways segmenting again to fit their LAN.
#
# Scenario ecmp: an ECMP group of 4 outbound SAs (one reqid) on gwA and 64 UDP flows: a
# batch holds packets of several SAs, which leave in one send (one GSO buffer when they
# are of one size); every member carries flows, gwB drops nothing, each flow stays in order.
#
# Scenario storm: hostile datagrams at gwB's IKE and NAT-T ports while lanA pings lanB
# (run_storm below).
#
# Scenario failclosed: with gwA's default route pointing at the WAN, kill -9 and SIGTERM of
# gwA's espgw during a 50/s ping put no echo request on the WAN in clear; cleartext
# injected on gwA's WAN for a protected selector never reaches lanA (while espgw runs and
# after it died); a bypass policy's traffic passes in clear (also while espgw is down); a
# restart adopts the fail-closed routes and carries traffic; espgw --release opens it all.
#
# Scenario dualstack: gwA with an IPv4 and an IPv6 WAN address and a peer on each at once
# (scenarios/dualstack.sh).
#
# Usage: site_to_site.sh ESPGW_BINARY [scenario...]   (udp4 raw4 udp6 raw6 lifetime jumbo ecmp storm failclosed dualstack)
# Needs root. Namespaces are named per run and always removed, even on failure.
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW_BINARY [scenario...]}")
# espgwctl, for the storm scenario: next to espgw in the build tree unless given.
ESPGWCTL=${ESPGWCTL:-$(dirname "$ESPGW")/../../daemon/espgwctl}
shift
SCENARIOS=("${@:-udp4 raw4 udp6 raw6}")
[[ ${#SCENARIOS[@]} -eq 1 ]] && read -r -a SCENARIOS <<<"${SCENARIOS[0]}"

# shellcheck source=tests/netns/lib.sh
HERE=$(dirname "$(readlink -f "$0")")
source "$HERE/lib.sh"
for part in checks lifetime jumbo ecmp storm failclosed dualstack; do
  # shellcheck source=/dev/null
  source "$HERE/scenarios/$part.sh"
done

run_scenario() {
  local scenario=$1 mode=${1%?} family=${1: -1}
  log "=== scenario $scenario: WAN ${mode}, outer IPv$family ==="
  # One scenario runs gwB on the OpenSSL backend: ipsec-mb on one end, OpenSSL on the other.
  CRYPTO_BACKEND_SIDE=()
  [[ $scenario == udp6 ]] && CRYPTO_BACKEND_SIDE[b]=openssl
  # Run to completion (no workers) on both gateways over raw ESP, and facing a gateway
  # with workers over UDP/IPv6: the daemon's readers do the crypto themselves there.
  WORKERS_SIDE=()
  [[ $scenario == raw4 ]] && WORKERS_SIDE=([a]=inline [b]=inline)
  [[ $scenario == udp6 ]] && WORKERS_SIDE[a]=inline
  write_configs "$mode" "$family"
  # Path MTUs learned in the previous scenario would shadow this one's tunnel MTU.
  for ns in "$LANA" "$LANB"; do
    ip -n "$ns" route flush cache 2>/dev/null || true
    ip -n "$ns" -6 route flush cache 2>/dev/null || true
  done
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "$scenario: gateways did not start"; return; }
  for side in a b; do
    [[ ${WORKERS_SIDE[$side]:-} == inline ]] || continue
    if grep -q "no workers (readers run to completion)" "$WORK/espgw-$side.log"; then
      pass "$scenario gw${side^^} runs to completion, without workers"
    else fail "$scenario gw${side^^} did not start without workers"; fi
  done
  check_tun_rps "$scenario"
  check_socket_buffer "$scenario"
  check_ping "$LANA" 10.2.0.2 "$scenario"
  check_ping "$LANB" 10.1.0.2 "$scenario"
  check_ping "$LANA" fd00:2::2 "$scenario"
  check_ping "$LANB" fd00:1::2 "$scenario"
  check_iperf "$LANA" "$LANB" 10.2.0.2 "$scenario"
  check_iperf "$LANA" "$LANB" 10.2.0.2 "$scenario" -R
  check_iperf "$LANB" "$LANA" fd00:1::2 "$scenario"
  check_wire_is_esp "$scenario"
  check_df_icmp "$scenario"
  check_outer_header "$scenario" "$family"
  check_counters "$scenario"
  check_reload_keeps_traffic "$scenario"
  # raw4: both gateways run to completion, the mode with a queue-delay gate.
  if [[ $scenario == raw4 ]]; then check_late_readers_keep_lone_packets "$scenario"; fi
  check_scapy_decrypts_wire "$scenario" "$mode"
  # Last: its sequence number moves gwB's replay window far ahead of gwA's counter.
  check_espgw_accepts_scapy "$scenario" "$mode"
  stop_gateway "$GWA" a
  stop_gateway "$GWB" b
  PIDS=()
}

setup_topology
for scenario in "${SCENARIOS[@]}"; do
  case $scenario in
    lifetime) run_lifetime ;;
    jumbo) run_jumbo ;;
    ecmp) run_ecmp ;;
    failclosed) run_failclosed ;;
    storm) run_storm ;;
    dualstack) run_dualstack ;;
    *) run_scenario "$scenario" ;;
  esac
done
log "$PASSES passed, $FAILURES failed"
printf '%s passed, %s failed\n' "$PASSES" "$FAILURES"
((FAILURES == 0))
