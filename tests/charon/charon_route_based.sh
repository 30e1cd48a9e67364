#!/usr/bin/env bash
# Route-based VPN with charon and espgw: one hub, two peers, every CHILD_SA with
# local_ts = remote_ts = 0.0.0.0/0,::/0 and its own if_id (as with Linux XFRM interfaces).
#
#   lanH 10.1.0.2 ── hub (charon + espgw) ═╦═ br0 192.0.2.1 ══ p1 192.0.2.2 (LAN 10.2.0.1)
#   fd00:1::2                              ║                     fd00:2::1
#                                          ╚═════════════════ p2 192.0.2.3 (LAN 10.3.0.1)
#                                                                fd00:3::1
#
# The hub's espgw has `interface = 1 peer1` and `interface = 2 peer2`; its connections to
# p1 and p2 set if_id_in = if_id_out = 1 and 2. Static routes choose the tunnel:
# 10.2.0.0/16 and fd00:2::/64 dev peer1, 10.3.0.0/16 and fd00:3::/64 dev peer2 (each peer
# routes the hub's LAN over its own interface, `tohub`). Checks: both tunnels come up with
# two 0.0.0.0/0 and two ::/0 out policies on the hub, espgwctl shows each SA with its
# interface, ping (IPv4 and IPv6) and iperf3 from lanH reach both peers' LANs through the
# right SAs, espgw added no route of its own for them, and
# after p2's tunnel goes, p2's LAN is unreachable (dropped in espgw, never sent in clear)
# while p1's still works; once the hub's espgw stops, the operator's prohibit route keeps
# p1's LAN closed although the hub's default route leads to p1.
#
# Usage: charon_route_based.sh ESPGW ESPGWCTL PLUGIN
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW ESPGWCTL PLUGIN}")
ESPGWCTL=$(readlink -f "$2")
PLUGIN=$(readlink -f "$3")

HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/charon_lib.sh"

HUB=$RUN-hub P1=$RUN-p1 P2=$RUN-p2 LANH=$RUN-lanH
EXTRA_NS=("$HUB" "$P1" "$P2" "$LANH")
# charon_lib.sh's helpers, for the sides of this topology: h (hub), p1, p2.
side_ns() { case $1 in h) echo "$HUB" ;; p1) echo "$P1" ;; p2) echo "$P2" ;; esac; }
side_addr() { case $1 in h) echo 192.0.2.1 ;; p1) echo 192.0.2.2 ;; p2) echo 192.0.2.3 ;; esac; }
peer_lan() { [[ $1 == p1 ]] && echo 10.2.0.1 || echo 10.3.0.1; }
peer_lan6() { [[ $1 == p1 ]] && echo fd00:2::1 || echo fd00:3::1; }

ping_fails() { ! in_ns "$1" ping -c 2 -i 0.2 -W 1 "$2" >/dev/null 2>&1; }

setup() {
  local ns
  for ns in "${EXTRA_NS[@]}"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
  # The WAN: a bridge on the hub, one veth to each peer.
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" addr add 192.0.2.1/24 dev br0
  ip -n "$HUB" link set br0 up
  for peer in p1 p2; do
    ns=$(side_ns $peer)
    ip -n "$HUB" link add "wan$peer" type veth peer name wan0 netns "$ns"
    ip -n "$HUB" link set "wan$peer" master br0 up
    ip -n "$ns" addr add "$(side_addr $peer)/24" dev wan0
    ip -n "$ns" link set wan0 up
    # The peer's LAN: an address of its own behind the tunnel.
    ip -n "$ns" addr add "$(peer_lan $peer)/32" dev lo
    ip -n "$ns" addr add "$(peer_lan6 $peer)/128" dev lo
  done
  ip -n "$LANH" link add eth0 type veth peer name lan0 netns "$HUB"
  ip -n "$LANH" addr add 10.1.0.2/16 dev eth0
  ip -n "$LANH" addr add fd00:1::2/64 dev eth0 nodad
  ip -n "$HUB" addr add 10.1.0.1/16 dev lan0
  ip -n "$HUB" addr add fd00:1::1/64 dev lan0 nodad
  ip -n "$LANH" link set eth0 up
  ip -n "$HUB" link set lan0 up
  ip -n "$LANH" route add default via 10.1.0.1
  ip -n "$LANH" -6 route add default via fd00:1::1
  in_ns "$HUB" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward;
                      echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
}

# swanctl.conf of SIDE: one connection per entry "NAME REMOTE_SIDE IF_ID".
write_route_based_swanctl() {
  local side=$1 name remote if_id
  shift
  {
    echo "connections {"
    for entry in "$@"; do
      read -r name remote if_id <<<"$entry"
      cat <<EOS
  $name {
    version = 2
    local_addrs = $(side_addr "$side")
    remote_addrs = $(side_addr "$remote")
    encap = yes
    mobike = no
    proposals = aes128gcm16-prfsha256-x25519
    local {
      auth = psk
      id = $side.espgw.test
    }
    remote {
      auth = psk
      id = $remote.espgw.test
    }
    children {
      net {
        local_ts = 0.0.0.0/0,::/0
        remote_ts = 0.0.0.0/0,::/0
        if_id_in = $if_id
        if_id_out = $if_id
        esp_proposals = aes128gcm16
        start_action = none
        dpd_action = none
      }
    }
  }
EOS
    done
    cat <<EOS
}
secrets {
  ike-all {
    id-h = h.espgw.test
    id-1 = p1.espgw.test
    id-2 = p2.espgw.test
    secret = 0x$PSK
  }
}
EOS
  } >"$WORK/swanctl-$side.conf"
  chmod 600 "$WORK/swanctl-$side.conf"
}

# The hub's SAs as "SPI DIRECTION INTERFACE PACKETS" lines.
hub_sas() {
  espgwctl_on h --json sas | /usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin)["sas"].values():
    if s["origin"] == "charon":
        print(s["spi"], s["direction"], s["interface"], s["packets"])'
}
# Packets of the hub's SAs of DIRECTION on INTERFACE.
hub_packets() { hub_sas | awk -v d="$1" -v i="$2" '$2 == d && $3 == i {n += $4} END {print n + 0}'; }
sas_on() { [[ $(hub_sas | awk -v i="$1" '$3 == i' | wc -l) == 2 ]]; }
no_sas_on() { [[ $(hub_sas | awk -v i="$1" '$3 == i' | wc -l) == 0 ]]; }
# The hub's out policies to REMOTE (0.0.0.0/0, ::/0), as their interfaces, sorted.
zero_out_policies() {
  espgw_json h policies '" ".join(sorted(p["interface"] for p in d["policies"].values() if p["direction"] == "out" and p["remote"] == "'"$1"'"))'
}
no_espgw_routes() { [[ -z $(ip -n "$HUB" route show table all proto 245 | grep -E 'dev peer|^default') ]]; }

run() {
  setup
  ESPGW_EXTRA_CONF_h="interface = 1 peer1
interface = 2 peer2" start_espgw h
  ESPGW_EXTRA_CONF_p1="interface = 1 tohub" start_espgw p1
  ESPGW_EXTRA_CONF_p2="interface = 2 tohub" start_espgw p2
  for side in h p1 p2; do start_charon "$side" espgw; done
  write_route_based_swanctl h "peer1 p1 1" "peer2 p2 2"
  write_route_based_swanctl p1 "hub h 1"
  write_route_based_swanctl p2 "hub h 2"
  for side in h p1 p2; do load_swanctl "$side"; done
  # The operator's routes over the interfaces (espgw adds none for them), with a prohibit
  # route behind one, which keeps it closed while espgw is down; and a default route that
  # would otherwise carry it to p1 in clear.
  ip -n "$HUB" route add default via 192.0.2.2
  ip -n "$HUB" route add prohibit 10.2.0.0/16 metric 4096
  ip -n "$HUB" route add 10.2.0.0/16 dev peer1
  ip -n "$HUB" route add 10.3.0.0/16 dev peer2
  ip -n "$HUB" route add fd00:2::/64 dev peer1
  ip -n "$HUB" route add fd00:3::/64 dev peer2
  for ns in "$P1" "$P2"; do
    ip -n "$ns" route add 10.1.0.0/16 dev tohub
    ip -n "$ns" route add fd00:1::/64 dev tohub
  done

  check "p1 brings its tunnel up" swan p1 --initiate --child net --timeout 20
  check "p2 brings its tunnel up" swan p2 --initiate --child net --timeout 20
  check "the hub holds peer1's two SAs, on interface peer1" wait_until 10 sas_on peer1
  check "and peer2's two, on interface peer2" wait_until 10 sas_on peer2
  log "hub SAs:"; hub_sas | sed 's/^/    /'
  check "two 0.0.0.0/0 out policies coexist, one per interface" \
    test "$(zero_out_policies 0.0.0.0/0)" = "peer1 peer2"
  check "and two ::/0 ones" test "$(zero_out_policies ::/0)" = "peer1 peer2"
  check "espgw added no route for them (the operator's routes decide)" no_espgw_routes
  espgwctl_on h sas >"$WORK/espgwctl-sas.txt" 2>&1 || true
  check "espgwctl sas has the INTERFACE column" grep -q 'INTERFACE' "$WORK/espgwctl-sas.txt"
  sed 's/^/    /' "$WORK/espgwctl-sas.txt" | head -6

  check "ping lanH -> p1's LAN" ping_ok "$LANH" 10.2.0.1
  check "ping lanH -> p2's LAN" ping_ok "$LANH" 10.3.0.1
  check "ping p1's LAN -> lanH" in_ns "$P1" ping -c 3 -i 0.2 -W 2 -I 10.2.0.1 10.1.0.2
  check "ping lanH -> p1's LAN over IPv6" ping_ok "$LANH" fd00:2::1
  check "ping lanH -> p2's LAN over IPv6" ping_ok "$LANH" fd00:3::1
  check "iperf3 lanH -> p1's LAN" iperf_ok "$LANH" "$P1" 10.2.0.1
  check "iperf3 lanH -> p2's LAN" iperf_ok "$LANH" "$P2" 10.3.0.1
  local out1 out2 in1 in2
  out1=$(hub_packets out peer1) out2=$(hub_packets out peer2)
  in1=$(hub_packets in peer1) in2=$(hub_packets in peer2)
  log "hub packets: peer1 out $out1 in $in1, peer2 out $out2 in $in2"
  # TCP's data out (more than 1,000 packets each), its ACKs and the pings' replies in
  # (fewer: the receivers acknowledge coalesced segments).
  check "each peer's traffic went through its own SAs (> 1000 packets out, > 100 in)" \
    test "$out1" -gt 1000 -a "$in1" -gt 100 -a "$out2" -gt 1000 -a "$in2" -gt 100

  # p2's tunnel goes: what the route still sends into peer2 is dropped, never sent in clear.
  swan p2 --terminate --ike hub --timeout 10 >/dev/null 2>&1 || true
  check "after p2's tunnel went, the hub keeps only peer1's SAs" wait_until 10 no_sas_on peer2
  check "and peer1's" sas_on peer1
  check "p2's LAN is unreachable" ping_fails "$LANH" 10.3.0.1
  check "and p1's still answers" ping_ok "$LANH" 10.2.0.1
  local no_policy
  no_policy=$(espgw_json h stats 'd["gateway-drops"]["no-policy"]')
  check "the hub dropped p2's packets for want of a policy ($no_policy)" test "$no_policy" -ge 2

  # espgw stops: its devices go, and the routes over them with them. p1 counts the echo
  # requests for its LAN that reach it in clear.
  in_ns "$P1" nft -f - <<'EOS'
table ip clear_watch {
  chain prerouting {
    type filter hook prerouting priority -300; policy accept;
    iifname "wan0" ip daddr 10.2.0.1 icmp type echo-request counter
  }
}
EOS
  kill -TERM "${ESPGW_PID[h]}"
  check "the hub's espgw stopped and its devices went" wait_until 10 hub_devices_gone
  check "p1's LAN is unreachable with the hub's espgw down" ping_fails "$LANH" 10.2.0.1
  check "and nothing reached it in clear: the operator's prohibit route kept it closed" \
    test "$(clear_echo_requests)" = 0
}
hub_devices_gone() { ! ip -n "$HUB" link show peer1 >/dev/null 2>&1; }
clear_echo_requests() {
  in_ns "$P1" nft list table ip clear_watch | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'
}

on_failure_logs() {
  if ((FAILURES > 0)); then
    for f in "$WORK"/espgw-*.log "$WORK"/charon-*.log; do
      [[ -f $f ]] || continue
      echo "----- $(basename "$f") (last 30 lines)"
      tail -30 "$f"
    done
  fi
}

trap 'on_failure_logs; stop_charons; cleanup' EXIT
run
log "route-based: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
