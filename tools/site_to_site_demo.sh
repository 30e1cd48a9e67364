#!/usr/bin/env bash
# The site-to-site demo: two gateways between two LANs, each in its own network namespace,
# each running strongSwan's charon (with the espgw plugin) and espgw. swanctl loads an
# ordinary PSK configuration and brings the tunnel up; charon negotiates IKEv2 and hands
# the SAs to espgw, which does every byte of ESP. The demo pushes ping and iperf3 traffic
# through the tunnel both ways, prints the SAs as swanctl and espgwctl see them and the
# throughput, terminates the tunnel, and removes everything again.
#
#   lanA 10.1.0.2 ── gwA 192.0.2.1 ══ IKEv2 + ESP in UDP 4500 ══ 192.0.2.2 gwB ── lanB 10.2.0.2
#
# Usage: site_to_site_demo.sh BUILD_DIR [SECONDS]
set -euo pipefail
BUILD=$(readlink -f "${1:?usage: $0 BUILD_DIR [SECONDS]}")
SECONDS_PER_RUN=${2:-5}
ESPGW=$BUILD/daemon/espgw
ESPGWCTL=$BUILD/daemon/espgwctl
PLUGIN=$BUILD/vici_bridge/charon_plugin/libstrongswan-espgw.so
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../tests/netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/../tests/charon/charon_lib.sh"
trap 'stop_charons; cleanup' EXIT
# Each espgw runs the package's example configuration (configs/espgw.conf) with only its
# address, control socket and state directory put in: the defaults a user gets, workers =
# auto among them.
ESPGW_CONF_FROM_EXAMPLE=yes

iperf() {  # iperf CLIENT_NS SERVER_NS ADDRESS [iperf3 options]: prints Gbit/s
  local client=$1 server=$2 address=$3
  shift 3
  in_ns "$server" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$server' ss -Hltn 'sport = :5201' | grep -q ."
  in_ns "$client" iperf3 -c "$address" -t "$SECONDS_PER_RUN" -C cubic -J "$@" >"$WORK/iperf.json"
  /usr/bin/python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9))' "$WORK/iperf.json"
}
indent() { sed 's/^/    /'; }

log "setting up lanA, gwA, gwB, lanB"
setup_topology
for side in a b; do
  start_espgw "$side"
  start_charon "$side" espgw
  write_swanctl_conf "$side" aes128gcm16 yes 1h
  load_swanctl "$side"
done
log "espgw and charon (with the espgw plugin) run on gwA and gwB; swanctl.conf loaded"
log "espgw on gwA: $(sed -n 's/.*gateway up: //p' "$WORK/espgw-a.log" | head -n 1)"

log "swanctl --initiate --child net (on gwA):"
initiate a || { cat "$WORK/swanctl-initiate.log"; exit 1; }
grep -E 'established|installed' "$WORK/swanctl-initiate.log" | indent
log "tunnel MTU on gwA: $(ip -n "$GWA" -o link show espgw0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p'); routes espgw added:"
ip -n "$GWA" route show table all proto 245 | indent

log "ping lanA -> lanB through the tunnel:"
in_ns "$LANA" ping -c 3 -i 0.2 10.2.0.2 | indent
log "iperf3 TCP (cubic), ${SECONDS_PER_RUN}s each:"
log "    lanA -> lanB, 1 stream:  $(iperf "$LANA" "$LANB" 10.2.0.2) Gbit/s"
log "    lanB -> lanA, 1 stream:  $(iperf "$LANA" "$LANB" 10.2.0.2 -R) Gbit/s"
log "    lanA -> lanB, 4 streams: $(iperf "$LANA" "$LANB" 10.2.0.2 -P 4) Gbit/s"

log "swanctl --list-sas on gwA (charon's counters, read from espgw):"
swan a --list-sas 2>/dev/null | indent
log "espgwctl on gwA (SAs, drop reasons, ECMP group, per-worker load):"
espgwctl_on a | indent

log "espgwctl sas on gwB (the other end's counters: its inbound SA carried lanA -> lanB):"
espgwctl_on b sas | indent

log "swanctl --terminate --ike s2s:"
swan a --terminate --ike s2s --timeout 10 2>/dev/null | grep -E 'deleting|closing|successfully' | indent || true
sleep 0.5
log "espgwctl on gwA after terminate:"
espgwctl_on a sas | indent
log "done; charon, espgw and the namespaces are removed on exit"
