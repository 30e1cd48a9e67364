# shellcheck shell=bash
# Sourced by tests/charon/charon_site_to_site.sh: the WAN-address scenarios.
#   ipv6  both gateways dual-stack (local-address of both families), IKE and ESP over IPv6
#         (raw ESP): tunnel up, ping and iperf3 both ways, the SAs' outer addresses and
#         the wire are IPv6, only ESP on the WAN
#   nat   a router namespace between the gateways masquerades gwA (nftables source NAT,
#         ports 40000-40999): charon detects the NAT and moves to ESP in UDP 4500,
#         traffic both ways; gwA's NAT keepalives reach gwB's espgw (counted as
#         nat-keepalive drops); then the NAT forgets its mappings and maps to other ports
#         (41000-41999): gwB's charon learns gwA's new port from gwA's DPD and moves
#         both SAs (update-sa): espgw changes their peer port in place (same SPIs, no
#         rekey), its encap ports (espgwctl) are the new NAT port; traffic both ways again;
#         gwB's espgw restarts and the plugin's replay moves the SAs to the new port again.

run_ipv6() {
  SIDE_ADDR=([a]=2001:db8::1 [b]=2001:db8::2)
  LOCAL_ADDRESSES=([a]="192.0.2.1, 2001:db8::1" [b]="2001:db8::2 192.0.2.2")
  bring_up aes128gcm16 no 1h
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  local outer
  outer=$(espgw_json a sas '" ".join(sorted(s["src"] + ">" + s["dst"] + "/" + s["encap"] for s in d["sas"].values()))')
  if [[ $outer == "2001:db8::1>2001:db8::2/esp 2001:db8::2>2001:db8::1/esp" ]]; then
    pass "gwA's SAs run over IPv6, raw ESP: $outer"
  else fail "gwA's SAs: $outer"; fi
  local addresses
  addresses=$(espgw_json a stats '" ".join(d["local-addresses"]) + " " + str("a1-udp0-receive-buffer" in d["wan"])')
  if [[ $addresses == "192.0.2.1 a1-2001:db8::1 True" ]]; then
    pass "espgwctl stats lists both addresses, the IPv6 one's sockets as a1-"
  else fail "espgwctl stats local-addresses: $addresses"; fi
  check "ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA" ping_ok "$LANB" 10.1.0.2
  check "iperf3 lanA -> lanB" iperf_ok "$LANA" "$LANB" 10.2.0.2
  check "iperf3 lanB -> lanA" iperf_ok "$LANA" "$LANB" 10.2.0.2 -R
  check_wire_only_esp
  local v6 v4
  v6=$(tshark -r "$WORK/wan.pcap" -Y 'esp && ipv6' 2>/dev/null | wc -l)
  v4=$(tshark -r "$WORK/wan.pcap" -Y 'esp && ip' 2>/dev/null | wc -l)
  if ((v6 >= 10 && v4 == 0)); then pass "the WAN's ESP is IPv6 ($v6 packets), none over IPv4"
  else fail "ESP over IPv6: $v6, over IPv4: $v4"; fi
  if grep -q "IKE_SA s2s\[[0-9]*\] established between 2001:db8::1\[" "$WORK/charon-a.log"; then
    pass "charon's IKE_SA runs over IPv6 through espgw's sockets"
  else fail "no IKE_SA over IPv6 in charon's log"; fi
  check_terminate
}

RTR=$RUN-rtr
# gwA 192.168.0.1 ── in0 rtr out0 (masquerade) ── gwB 192.0.2.2: gwA's WAN link goes
# through the router instead of straight to gwB.
setup_nat_router() {  # setup_nat_router FIRST_PORT-LAST_PORT
  EXTRA_NS+=("$RTR")
  ip netns add "$RTR"
  ip -n "$RTR" link set lo up
  in_ns "$RTR" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
  ip -n "$GWA" link del wan0
  ip -n "$GWA" link add wan0 type veth peer name in0 netns "$RTR"
  ip -n "$GWB" link add wan0 type veth peer name out0 netns "$RTR"
  ip -n "$GWA" addr add 192.168.0.1/24 dev wan0
  ip -n "$RTR" addr add 192.168.0.254/24 dev in0
  ip -n "$RTR" addr add 192.0.2.254/24 dev out0
  ip -n "$GWB" addr add 192.0.2.2/24 dev wan0
  local dev
  for dev in "$GWA:wan0" "$RTR:in0" "$RTR:out0" "$GWB:wan0"; do ip -n "${dev%%:*}" link set "${dev#*:}" up; done
  ip -n "$GWA" route add 192.0.2.0/24 via 192.168.0.254
  nat_ports "$1"
}
nat_ports() {  # nat_ports FIRST-LAST: the masquerade maps gwA's ports into this range
  in_ns "$RTR" nft -f - <<EOS
table ip nat
delete table ip nat
table ip nat {
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "out0" meta l4proto udp masquerade to :$1
    oifname "out0" masquerade
  }
}
EOS
}
# gwB's SAs as espgw shows them: "DIRECTION SRC:SRC_PORT>DST:DST_PORT" each.
gwb_sa_ports() {
  espgw_json b sas '" ".join(sorted(s["direction"] + " " + s["src"] + ":" + str(s.get("src-port", "-")) + ">" + s["dst"] + ":" + str(s.get("dst-port", "-")) for s in d["sas"].values()))'
}
gwb_sa_ids() { espgw_json b sas '" ".join(sorted(d["sas"]))'; }
gwb_out_port_in() {  # gwb_out_port_in FIRST LAST: gwB has an outbound SA to a port in range
  local port
  for port in $(espgw_json b sas '" ".join(str(s.get("dst-port", 0)) for s in d["sas"].values() if s["direction"] == "out")'); do
    ((port >= $1 && port <= $2)) && return 0
  done
  return 1
}
nat_keepalives() { espgw_json b stats 'd["engine-drops"].get("nat-keepalive", 0)'; }
nat_keepalives_at_least() { (($(nat_keepalives) >= $1)); }

run_nat() {
  setup_topology
  setup_nat_router 40000-40999
  SIDE_ADDR=([a]=192.168.0.1 [b]=192.0.2.2)
  REMOTE_ADDRS=([b]=%any)
  # gwA is behind the NAT: it sends the keepalives (every 2 s when idle) and, with DPD,
  # the IKE message that tells gwB its new port after the NAT moved it.
  CHARON_EXTRA=([a]="keep_alive = 2s")
  SWANCTL_EXTRA=([a]="dpd_delay = 2s")
  start_espgw a
  start_espgw b
  start_charon a espgw
  start_charon b espgw
  write_swanctl_conf a aes128gcm16 no 1h  # encap = no: only the NAT makes it UDP
  write_swanctl_conf b aes128gcm16 no 1h
  load_swanctl a
  load_swanctl b
  if initiate a; then pass "swanctl --initiate through the NAT"
  else fail "swanctl --initiate"; cat "$WORK/swanctl-initiate.log"; return 1; fi
  if grep -q "local host is behind NAT" "$WORK/charon-a.log" &&
     grep -q "remote host is behind NAT" "$WORK/charon-b.log"; then
    pass "charon detected the NAT on both sides"
  else fail "charon did not detect the NAT"; grep -i nat "$WORK/charon-a.log" | head; fi
  check "espgw installed 2 SAs from charon on gwB" wait_until 5 sas_equal b 2
  local before
  before=$(gwb_sa_ports)
  if gwb_out_port_in 40000 40999 && grep -q "in 192.0.2.254:[0-9]*>192.0.2.2:4500" <<<"$before"; then
    pass "gwB's SAs are ESP in UDP to the NAT's port: $before"
  else fail "gwB's SAs: $before"; fi
  check "ping lanA -> lanB through the NAT" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA through the NAT" ping_ok "$LANB" 10.1.0.2
  check "iperf3 lanA -> lanB through the NAT" iperf_ok "$LANA" "$LANB" 10.2.0.2
  check "iperf3 lanB -> lanA through the NAT" iperf_ok "$LANA" "$LANB" 10.2.0.2 -R
  # Idle: gwA's charon sends NAT keepalives through its espgw; gwB's espgw drops them,
  # counted. charon sends one only when nothing else left its IKE socket for 2 s, and its
  # DPD messages (every 2 s) often do: 20 s leaves room for two.
  local keepalives
  keepalives=$(nat_keepalives)
  if wait_until 20 nat_keepalives_at_least $((keepalives + 2)); then
    pass "gwB's espgw counts gwA's NAT keepalives (nat-keepalive $(nat_keepalives))"
  else fail "nat-keepalive drops on gwB: $(nat_keepalives)"; fi
  # The NAT forgets its mappings (its outside link goes down: the kernel drops what it
  # masqueraded there) and maps to other ports from now on: gwA's next packets float.
  nat_ports 41000-41999
  ip -n "$RTR" link set out0 down
  sleep 0.3
  ip -n "$RTR" link set out0 up
  ip -n "$GWB" link set wan0 up
  local spis_before established_before
  spis_before=$(gwb_sa_ids)
  established_before=$(grep -c 'CHILD_SA net{[0-9]*} established' "$WORK/charon-a.log" || true)
  in_ns "$LANA" ping -c 120 -i 0.25 -W 1 10.2.0.2 >"$WORK/float-ping.out" 2>&1 &
  local ping=$!
  if wait_until 30 gwb_out_port_in 41000 41999; then
    pass "after the NAT moved gwA's port, gwB's espgw sends to the new port: $(gwb_sa_ports)"
  else fail "gwB's SAs after the port float: $(gwb_sa_ports)"; grep -iE "NAT|updat|rekey" "$WORK/charon-b.log" | tail -10; fi
  # charon's update-sa moved both of gwB's SAs in place: same SPIs, no rekey needed.
  if [[ $(gwb_sa_ids) == "$spis_before" ]] &&
     (($(grep -c 'CHILD_SA net{[0-9]*} established' "$WORK/charon-a.log" || true) == established_before)) &&
     (($(grep -c "SA \(in\|out\) spi 0x[0-9a-f]* moved: peer 192.0.2.254:40[0-9]* -> 192.0.2.254:41[0-9]*" "$WORK/espgw-b.log") == 2)); then
    pass "the SAs were updated in place (same SPIs $spis_before, new port), no rekey"
  else fail "SAs before the float $spis_before, after $(gwb_sa_ids); moves: $(grep -c moved: "$WORK/espgw-b.log" || true)"; grep -E "moved|update" "$WORK/espgw-b.log" "$WORK/charon-b.log" | tail -6; fi
  kill -INT "$ping" 2>/dev/null || true
  wait "$ping" 2>/dev/null || true
  check "ping lanA -> lanB after the port float" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA after the port float" ping_ok "$LANB" 10.1.0.2
  # gwB's espgw restarts: the plugin installs the SAs again and moves them again, so
  # they send to the NAT's new port at once (before charon's rekey replaces them).
  kill -TERM "${ESPGW_PID[b]}"
  wait "${ESPGW_PID[b]}" 2>/dev/null || true
  start_espgw b
  check "the restarted espgw got gwB's SAs back" wait_until 10 sas_at_least b 2
  if (($(grep -c "SA \(in\|out\) spi 0x[0-9a-f]* moved: peer 192.0.2.254:40[0-9]* -> 192.0.2.254:41[0-9]*" "$WORK/espgw-b.log") == 4)); then
    pass "the plugin's replay moved the SAs to the new port again"
  else fail "moves in gwB's espgw log: $(grep -c moved: "$WORK/espgw-b.log" || true), want 4"; fi
  check "ping lanB -> lanA after gwB's espgw restart" wait_until 15 ping_ok "$LANB" 10.1.0.2
  espgwctl_on b sas >"$WORK/nat-sas.txt" 2>&1 || true
  log "espgwctl sas on gwB:"; sed 's/^/    /' "$WORK/nat-sas.txt"
  check_terminate
}
