#!/usr/bin/env bash
# The site-to-site demo: two espgw gateways with static SAs between two LANs, each in its
# own network namespace. Pushes ping and iperf3 traffic through the tunnel both ways,
# prints the SAs with their counters and the throughput, and removes everything again.
# (Tunnels brought up by charon through swanctl come with the strongSwan integration.)
#
#   lanA 10.1.0.2 ── gwA 192.0.2.1 ══ ESP in UDP 4500 ══ 192.0.2.2 gwB ── lanB 10.2.0.2
#
# Usage: site_to_site_demo.sh ESPGW_BINARY [SECONDS]
set -euo pipefail
ESPGW=$(readlink -f "${1:?usage: $0 ESPGW_BINARY [SECONDS]}")
SECONDS_PER_RUN=${2:-5}
# shellcheck source=tests/netns/lib.sh
source "$(dirname "$(readlink -f "$0")")/../tests/netns/lib.sh"
trap cleanup EXIT

iperf() {  # iperf CLIENT_NS SERVER_NS ADDRESS [iperf3 options]: prints Gbit/s
  local client=$1 server=$2 address=$3
  shift 3
  in_ns "$server" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  for _ in $(seq 1 50); do in_ns "$server" ss -Hltn 'sport = :5201' | grep -q . && break; sleep 0.1; done
  in_ns "$client" iperf3 -c "$address" -t "$SECONDS_PER_RUN" -C cubic -J "$@" >"$WORK/iperf.json"
  /usr/bin/python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9))' "$WORK/iperf.json"
}

log "setting up lanA, gwA, gwB, lanB"
setup_topology
write_configs udp 4
start_gateway "$GWA" a
start_gateway "$GWB" b
log "tunnel MTU on gwA: $(ip -n "$GWA" -o link show espgw0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')"
log "routes espgw added on gwA:"
ip -n "$GWA" route show proto 245 | sed 's/^/    /'

log "ping lanA -> lanB through the tunnel:"
in_ns "$LANA" ping -c 3 -i 0.2 10.2.0.2 | sed 's/^/    /'
log "iperf3 TCP (cubic), ${SECONDS_PER_RUN}s each:"
log "    lanA -> lanB, 1 stream:  $(iperf "$LANA" "$LANB" 10.2.0.2) Gbit/s"
log "    lanB -> lanA, 1 stream:  $(iperf "$LANA" "$LANB" 10.2.0.2 -R) Gbit/s"
log "    lanA -> lanB, 4 streams: $(iperf "$LANA" "$LANB" 10.2.0.2 -P 4) Gbit/s"

log "SAs and counters (espgw SIGUSR1):"
for side in a b; do
  eval "kill -USR1 \$PID_$side"
done
sleep 0.5
for side in a b; do
  log "  gw${side^^}:"
  grep -E "sa (in|out) |drop |gateway drops" "$WORK/espgw-$side.log" | sed 's/^[0-9:.]* espgw info: /    /'
done
stop_gateway "$GWA" a
stop_gateway "$GWB" b
log "done; namespaces are removed on exit"
