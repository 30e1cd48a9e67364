# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario failclosed.
# --- Scenario failclosed (docs/security_fail_closed.md) ---
# gwA's default route points at the WAN, so a protected packet that finds no route into
# the tunnel would leave in clear. lanB also answers on 10.2.99.2, which both gateways
# bypass (in clear, both ways).

# Pings lanA -> lanB at 50/s for 3 s and sends gwA's espgw FC_SIGNAL 1 s into it.
fc_signal_during_ping() {
  in_ns "$LANA" ping -c 150 -i 0.02 -W 1 10.2.0.2 >"$WORK/fc-ping.out" 2>&1 &
  local pinger=$!
  sleep 1
  kill "-$FC_SIGNAL" "$PID_a"
  wait "$PID_a" 2>/dev/null || true
  wait "$pinger" || true
}

# A signal to gwA's espgw during a ping: the ping's first second crosses as ESP, and not
# one echo request 10.1.0.2 -> 10.2.0.2 crosses the WAN in clear afterwards.
check_no_clear_after() {  # check_no_clear_after SIGNAL
  local esp clear
  FC_SIGNAL=$1
  read -r esp clear < <(wan_capture 'icmp && ip.src==10.1.0.2 && ip.dst==10.2.0.2' fc_signal_during_ping)
  if ((esp >= 20 && clear == 0)); then
    pass "failclosed SIG$1 to gwA's espgw during a 50/s ping: $esp ESP packets, none in clear"
  else
    fail "failclosed SIG$1: $esp ESP packets, $clear echo requests in clear on the WAN"
    espgw_routes "$GWA"
  fi
}

# Cleartext from "lanB" injected on gwA's WAN (scapy in gwB's namespace, gwA's MAC):
# ICMP and UDP 10.2.0.2 -> 10.1.0.2, which the fwd protect policy covers, and, as the
# control that the path delivers, ICMP from 10.9.0.2, which no policy covers.
check_injected_clear_dropped() {  # check_injected_clear_dropped WHEN
  local when=$1 mac capture protected control
  mac=$(ip -n "$GWA" -j link show wan0 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"])')
  rm -f "$WORK/fc-lana.pcap"
  in_ns "$LANA" tshark -i eth0 -a duration:4 -w "$WORK/fc-lana.pcap" \
    -f 'icmp or udp port 7777' >/dev/null 2>"$WORK/fc-lana.err" &
  capture=$!
  for _ in $(seq 1 100); do grep -q "Capturing on" "$WORK/fc-lana.err" && break; sleep 0.1; done
  in_ns "$GWB" /usr/bin/python3 - "$mac" <<'PY' >"$WORK/fc-inject.out" 2>&1 || true
import sys
from scapy.all import ICMP, IP, UDP, Ether, conf, sendp
conf.verb = 0
gw = Ether(dst=sys.argv[1])
packets = [gw / IP(src="10.2.0.2", dst="10.1.0.2") / ICMP(id=4343),
           gw / IP(src="10.2.0.2", dst="10.1.0.2") / UDP(sport=4343, dport=7777) / b"clear",
           gw / IP(src="10.9.0.2", dst="10.1.0.2") / ICMP(id=4344)]
sendp(packets * 3, iface="wan0", inter=0.05)
PY
  wait "$capture" || true
  protected=$(tshark -r "$WORK/fc-lana.pcap" -Y 'ip.src==10.2.0.2 && (icmp.ident==4343 || udp.dstport==7777)' 2>/dev/null | wc -l)
  control=$(tshark -r "$WORK/fc-lana.pcap" -Y 'ip.src==10.9.0.2 && icmp.ident==4344' 2>/dev/null | wc -l)
  if ((protected == 0 && control == 3)); then
    pass "failclosed $when: cleartext ICMP and UDP 10.2.0.2 -> 10.1.0.2 injected on gwA's WAN not delivered (3 of 3 control packets were)"
  else
    fail "failclosed $when: $protected injected protected packets reached lanA, $control of 3 control packets"
    cat "$WORK/fc-inject.out"
    in_ns "$GWA" nft list table inet espgw_espgw0 2>&1 || true
  fi
}

run_failclosed() {
  log "=== scenario failclosed: gwA's default route to the WAN; kill -9, SIGTERM, injected cleartext, bypass ==="
  WORKERS_SIDE=()
  CRYPTO_BACKEND_SIDE=()
  write_configs udp 4
  # 10.2.99.0/24 (lanB's second address) passes in clear, both ways, at both gateways.
  cat >>"$WORK/static-a.conf" <<EOS
policy out local 10.1.0.0/16 remote 10.2.99.0/24 action bypass
policy fwd local 10.1.0.0/16 remote 10.2.99.0/24 action bypass
EOS
  cat >>"$WORK/static-b.conf" <<EOS
policy out local 10.2.99.0/24 remote 10.1.0.0/16 action bypass
policy fwd local 10.2.99.0/24 remote 10.1.0.0/16 action bypass
EOS
  ip -n "$LANB" addr add 10.2.99.2/16 dev eth0
  ip -n "$GWA" route add default via 192.0.2.2
  ip -n "$GWB" route add default via 192.0.2.1
  # Only espgw's rules may stop injected cleartext, not reverse-path filtering.
  in_ns "$GWA" sh -c 'for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > "$f"; done'
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "failclosed: gateways did not start"; return; }
  check_ping "$LANA" 10.2.0.2 failclosed
  # (d) bypass: in clear on the WAN, both ways.
  local esp clear
  read -r esp clear < <(wan_capture 'icmp && ip.addr==10.2.99.2 && ip.addr==10.1.0.2' fc_bypass_ping)
  if grep -q " 0% packet loss" "$WORK/fc-bypass.out" && ((clear >= 6)); then
    pass "failclosed bypass policy: lanA <-> 10.2.99.2 passes in clear ($clear packets on the WAN)"
  else fail "failclosed bypass: $clear in clear"; tail -3 "$WORK/fc-bypass.out"; show_drops; fi
  # (c) injected cleartext, while espgw runs.
  check_injected_clear_dropped "espgw running"
  # (a) kill -9.
  check_no_clear_after KILL
  check_injected_clear_dropped "after kill -9"
  if in_ns "$LANA" ping -c 2 -i 0.2 -W 2 10.2.99.2 >/dev/null 2>&1; then
    pass "failclosed bypass traffic still passes while gwA's espgw is down"
  else fail "failclosed bypass traffic blocked while gwA's espgw is down"; espgw_routes "$GWA"; fi
  # (e) restart: the earlier run's routes are adopted, traffic flows. On fresh SAs (gwB
  # reloads them first), so that this checks routing, not how SA state survives a crash.
  local key_ab key_ba
  key_ab=$(random_key) key_ba=$(random_key)
  sed -i "s/0x1001/0x1101/g; s/0x2001/0x2101/g; s/$KEY_AB/$key_ab/; s/$KEY_BA/$key_ba/" \
    "$WORK/static-a.conf" "$WORK/static-b.conf"
  kill -HUP "$PID_b"
  sleep 0.5
  start_gateway "$GWA" a || { fail "failclosed: gwA did not restart"; return; }
  if grep -q "3 fail-closed route(s) or bypass rule(s) of an earlier run adopted" "$WORK/espgw-a.log" &&
     in_ns "$LANA" ping -c 3 -i 0.2 -W 2 10.2.0.2 >/dev/null 2>&1; then
    pass "failclosed restart after kill -9 adopted the fail-closed routes; traffic flows again"
  else fail "failclosed restart"; grep "fail closed" "$WORK/espgw-a.log"; show_drops; fi
  # (b) SIGTERM.
  check_no_clear_after TERM
  check_injected_clear_dropped "after SIGTERM"
  # espgw --release opens the path again: no espgw route, rule or nft table left.
  if ip netns exec "$GWA" "$ESPGW" --release -c "$WORK/espgw-a.conf" >"$WORK/fc-release.out" 2>&1 &&
     [[ -z $(espgw_routes "$GWA") ]] && ! ip -n "$GWA" rule | grep -q "proto 245" &&
     ! in_ns "$GWA" nft list table inet espgw_espgw0 >/dev/null 2>&1; then
    pass "failclosed espgw --release removed the routes, the rules and the nftables table"
  else fail "failclosed --release"; cat "$WORK/fc-release.out"; espgw_routes "$GWA"; fi
  stop_gateway "$GWB" b
  ip netns exec "$GWB" "$ESPGW" --release -c "$WORK/espgw-b.conf" >/dev/null 2>&1 || true
  PIDS=()
  ip -n "$GWA" route del default
  ip -n "$GWB" route del default
  ip -n "$LANB" addr del 10.2.99.2/16 dev eth0
}

fc_bypass_ping() { in_ns "$LANA" ping -c 3 -i 0.2 -W 2 10.2.99.2 >"$WORK/fc-bypass.out" 2>&1 || true; }
