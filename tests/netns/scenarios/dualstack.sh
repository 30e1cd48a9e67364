# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario dualstack. gwA has two WAN addresses,
# one of each family, and two peers at once: gwB over IPv4 (ESP in UDP) on wan0, and gwC
# over IPv6 (raw ESP) on a second link:
#
#   lanA ── gwA 192.0.2.1      ══ wan0 ══ gwB 192.0.2.2 ── lanB 10.2.0.2
#               2001:db8:c::1  ══ wan1 ══ gwC 2001:db8:c::3 ── lanC 10.3.0.2 fd00:3::2
#
# Checks: traffic to and from both peers (inner IPv4 over both outer families, inner IPv6
# over IPv6), each peer's ESP leaves gwA from the address of its SA's source (captured on
# each link), gwA opened its UDP socket on the IPv4 address and its raw socket on the IPv6
# one, and a reload that brings an SA from an address gwA does not have is refused.
GWC=$RUN-gwC LANC=$RUN-lanC

setup_dualstack_peer() {
  EXTRA_NS+=("$GWC" "$LANC")
  local ns
  for ns in "$GWC" "$LANC"; do
    ip netns add "$ns"
    in_ns "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad;
                       echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad'
    ip -n "$ns" link set lo up
  done
  ip -n "$GWA" link add wan1 type veth peer name wan0 netns "$GWC"
  ip -n "$LANC" link add eth0 type veth peer name lan0 netns "$GWC"
  in_ns "$GWC" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward;
                      echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
  ip -n "$GWA" addr add 2001:db8:c::1/64 dev wan1 nodad
  ip -n "$GWC" addr add 2001:db8:c::3/64 dev wan0 nodad
  ip -n "$GWC" addr add 10.3.0.1/16 dev lan0
  ip -n "$GWC" addr add fd00:3::1/64 dev lan0 nodad
  ip -n "$LANC" addr add 10.3.0.2/16 dev eth0
  ip -n "$LANC" addr add fd00:3::2/64 dev eth0 nodad
  ip -n "$GWA" link set wan1 up
  ip -n "$GWC" link set wan0 up
  ip -n "$GWC" link set lan0 up
  ip -n "$LANC" link set eth0 up
  ip -n "$LANC" route add default via 10.3.0.1
  ip -n "$LANC" -6 route add default via fd00:3::1
}

dualstack_configs() {
  write_configs udp 4  # gwA <-> gwB over IPv4, ESP in UDP (reqid 1)
  local key_ac key_ca
  key_ac=$(random_key) key_ca=$(random_key)
  cat >>"$WORK/static-a.conf" <<EOS
sa out spi 0x1003 aes-gcm-128 key 0x$key_ac src 2001:db8:c::1 dst 2001:db8:c::3 reqid 3
sa in spi 0x3001 aes-gcm-128 key 0x$key_ca src 2001:db8:c::3 dst 2001:db8:c::1 reqid 3
policy out local 10.1.0.0/16 remote 10.3.0.0/16 action protect reqid 3
policy fwd local 10.1.0.0/16 remote 10.3.0.0/16 action protect reqid 3
policy out local fd00:1::/64 remote fd00:3::/64 action protect reqid 3
policy fwd local fd00:1::/64 remote fd00:3::/64 action protect reqid 3
EOS
  cat >"$WORK/static-c.conf" <<EOS
sa out spi 0x3001 aes-gcm-128 key 0x$key_ca src 2001:db8:c::3 dst 2001:db8:c::1 reqid 1
sa in spi 0x1003 aes-gcm-128 key 0x$key_ac src 2001:db8:c::1 dst 2001:db8:c::3 reqid 1
policy out local 10.3.0.0/16 remote 10.1.0.0/16 action protect reqid 1
policy fwd local 10.3.0.0/16 remote 10.1.0.0/16 action protect reqid 1
policy out local fd00:3::/64 remote fd00:1::/64 action protect reqid 1
policy fwd local fd00:3::/64 remote fd00:1::/64 action protect reqid 1
EOS
  chmod 600 "$WORK/static-a.conf" "$WORK/static-c.conf"
  sed -i 's/^local-address = .*/local-address = 192.0.2.1, 2001:db8:c::1/' "$WORK/espgw-a.conf"
  sed -e 's/^local-address = .*/local-address = 2001:db8:c::3/' -e 's/state-b/state-c/' \
    -e 's/static-b.conf/static-c.conf/' "$WORK/espgw-b.conf" >"$WORK/espgw-c.conf"
}

run_dualstack() {
  log "=== scenario dualstack: gwA on 192.0.2.1 and 2001:db8:c::1, an IPv4 and an IPv6 peer ==="
  setup_dualstack_peer
  dualstack_configs
  start_gateway "$GWA" a && start_gateway "$GWB" b && start_gateway "$GWC" c ||
    { fail "dualstack: gateways did not start"; return; }
  if grep -q "wan udp socket: .*, on 192.0.2.1$" "$WORK/espgw-a.log" &&
     grep -q "wan a1-raw socket: .*, on 2001:db8:c::1$" "$WORK/espgw-a.log"; then
    pass "dualstack gwA: UDP socket on 192.0.2.1, raw ESP socket on 2001:db8:c::1"
  else fail "dualstack gwA sockets:"; grep "wan .* socket" "$WORK/espgw-a.log"; fi
  # Both peers at once: captures on both links while lanA pings both.
  local dev pids=()
  for dev in "$GWA:wan0" "$GWA:wan1"; do
    in_ns "${dev%%:*}" tshark -q -i "${dev#*:}" -a duration:8 \
      -w "$WORK/dualstack-${dev%%:*}-${dev#*:}.pcap" >/dev/null 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 1 50); do  # until both captures have started writing
    [[ -s $WORK/dualstack-$GWA-wan0.pcap && -s $WORK/dualstack-$GWA-wan1.pcap ]] && break
    sleep 0.1
  done
  sleep 0.5
  in_ns "$LANA" ping -c 10 -i 0.1 -W 2 10.2.0.2 >"$WORK/dualstack-ping-b.out" 2>&1 &
  local ping_b=$!
  if in_ns "$LANA" ping -c 10 -i 0.1 -W 2 10.3.0.2 >"$WORK/dualstack-ping-c.out" 2>&1; then
    pass "dualstack lanA -> lanC 10.3.0.2 (inner IPv4 over outer IPv6) while lanB is pinged"
  else fail "dualstack lanA -> lanC 10.3.0.2"; cat "$WORK/dualstack-ping-c.out"; fi
  if wait "$ping_b"; then pass "dualstack lanA -> lanB 10.2.0.2 (outer IPv4) at the same time"
  else fail "dualstack lanA -> lanB 10.2.0.2"; cat "$WORK/dualstack-ping-b.out"; fi
  wait "${pids[@]}" || true
  local v4_out v6_out v6_on_wan0 v4_on_wan1
  v4_out=$(tshark -r "$WORK/dualstack-$GWA-wan0.pcap" -Y 'esp && ip.src == 192.0.2.1 && udp.srcport == 4500' 2>/dev/null | wc -l)
  v6_out=$(tshark -r "$WORK/dualstack-$GWA-wan1.pcap" -Y 'esp && ipv6.src == 2001:db8:c::1 && !udp' 2>/dev/null | wc -l)
  v6_on_wan0=$(tshark -r "$WORK/dualstack-$GWA-wan0.pcap" -Y 'esp && ipv6' 2>/dev/null | wc -l)
  v4_on_wan1=$(tshark -r "$WORK/dualstack-$GWA-wan1.pcap" -Y 'esp && ip' 2>/dev/null | wc -l)
  if ((v4_out >= 10 && v6_out >= 10 && v6_on_wan0 == 0 && v4_on_wan1 == 0)); then
    pass "dualstack: gwA's ESP to gwB leaves from 192.0.2.1:4500 ($v4_out), to gwC from 2001:db8:c::1 as raw ESP ($v6_out), none from the other address"
  else fail "dualstack wire: v4 udp from 192.0.2.1=$v4_out, raw v6 from 2001:db8:c::1=$v6_out, v6 on wan0=$v6_on_wan0, v4 on wan1=$v4_on_wan1"; fi
  check_ping "$LANA" fd00:3::2 "dualstack (inner IPv6 over outer IPv6)"
  check_ping "$LANC" 10.1.0.2 "dualstack lanC -> lanA"
  check_ping "$LANC" fd00:1::2 "dualstack lanC -> lanA"
  check_ping "$LANB" 10.1.0.2 "dualstack lanB -> lanA"
  check_iperf "$LANA" "$LANC" 10.3.0.2 "dualstack lanA -> lanC"
  check_iperf "$LANA" "$LANB" 10.2.0.2 "dualstack lanA -> lanB" -R
  # An SA from an address gwA does not have: the reload is refused, naming it, and the
  # running SAs keep carrying traffic.
  cp "$WORK/static-a.conf" "$WORK/static-a.good"
  echo "sa out spi 0x1009 aes-gcm-128 key 0x$(random_key) src 192.0.2.99 dst 192.0.2.2 reqid 9" >>"$WORK/static-a.conf"
  kill -HUP "$PID_a"
  sleep 0.5
  if grep -q "SA out spi 0x00001009: its source 192.0.2.99 is not a local-address of this gateway (192.0.2.1, 2001:db8:c::1)" "$WORK/espgw-a.log" &&
     grep -q "reload refused" "$WORK/espgw-a.log"; then
    pass "dualstack: a reload with an SA from 192.0.2.99 is refused, naming the address"
  else fail "dualstack: the SA from 192.0.2.99 was not refused"; tail -5 "$WORK/espgw-a.log"; fi
  check_ping "$LANA" 10.3.0.2 "dualstack after the refused reload"
  stop_gateway "$GWA" a
  # The same file at start: espgw does not start, and says why.
  cp "$WORK/static-a.conf" "$WORK/static-a.good"
  echo "sa in spi 0x9001 aes-gcm-128 key 0x$(random_key) src 192.0.2.2 dst 192.0.2.99 reqid 1" >>"$WORK/static-a.conf"
  if timeout 10 ip netns exec "$GWA" "$ESPGW" -c "$WORK/espgw-a.conf" >"$WORK/dualstack-start.out" 2>&1; then
    fail "dualstack: espgw started with an inbound SA to 192.0.2.99"
  elif grep -q "SA in spi 0x00009001: its destination 192.0.2.99 is not a local-address" "$WORK/dualstack-start.out"; then
    pass "dualstack: espgw refuses to start with an inbound SA to 192.0.2.99, naming it"
  else fail "dualstack: start with an SA to 192.0.2.99:"; cat "$WORK/dualstack-start.out"; fi
  cp "$WORK/static-a.good" "$WORK/static-a.conf"
  stop_gateway "$GWB" b
  kill -TERM "$PID_c"; wait "$PID_c" 2>/dev/null || true
  PIDS=()
}
