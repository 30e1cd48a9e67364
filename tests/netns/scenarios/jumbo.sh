# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario jumbo.
run_jumbo() {
  log "=== scenario jumbo: WAN MTU 9000, LANs 1500 (A) and 1400 (B), jumbo-segments ==="
  WORKERS_SIDE=([a]=inline)
  CRYPTO_BACKEND_SIDE=()
  write_configs udp 4
  for side in a b; do echo "jumbo-segments = yes" >>"$WORK/espgw-$side.conf"; done
  for gw in "$GWA" "$GWB"; do ip -n "$gw" link set wan0 mtu 9000; done
  ip -n "$LANB" link set eth0 mtu 1400
  ip -n "$GWB" link set lan0 mtu 1400
  for ns in "$LANA" "$LANB"; do ip -n "$ns" route flush cache 2>/dev/null || true; done
  if start_gateway "$GWA" a && start_gateway "$GWB" b; then
    local mtu
    mtu=$(ip -n "$GWA" -o link show espgw0 | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
    if [[ $mtu == 8935 ]]; then pass "jumbo tunnel MTU follows the 9000-byte WAN: $mtu"
    else fail "jumbo tunnel MTU $mtu, expected 8935"; fi
    # Derived from the route towards gwB's local selectors, not configured.
    if grep -q "lan mtu 1400" "$WORK/espgw-b.log"; then pass "jumbo gwB derived lan-mtu 1400"
    else fail "jumbo gwB lan-mtu"; grep -i "mtu" "$WORK/espgw-b.log"; fi
    check_ping "$LANA" 10.2.0.2 jumbo
    check_ping "$LANB" 10.1.0.2 jumbo
    check_iperf "$LANA" "$LANB" 10.2.0.2 jumbo
    check_iperf "$LANA" "$LANB" 10.2.0.2 jumbo -R
    check_iperf "$LANB" "$LANA" fd00:1::2 jumbo
    # The WAN during TCP from lanA: ESP packets longer than either LAN could carry (only
    # headers captured; frame.len keeps the length on the wire).
    rm -f "$WORK/jumbo.pcap"
    in_ns "$GWB" tshark -q -i wan0 -s 128 -a duration:6 -w "$WORK/jumbo.pcap" >/dev/null 2>&1 &
    local capture=$! big all
    for _ in $(seq 1 50); do [[ -s $WORK/jumbo.pcap ]] && break; sleep 0.1; done
    sleep 0.5
    check_iperf "$LANA" "$LANB" 10.2.0.2 "jumbo (captured)"
    wait "$capture" || true
    big=$(tshark -r "$WORK/jumbo.pcap" -Y 'esp && frame.len > 3000' 2>/dev/null | wc -l)
    all=$(tshark -r "$WORK/jumbo.pcap" -Y esp 2>/dev/null | wc -l)
    if ((big > 100 && big * 2 > all)); then
      pass "jumbo WAN carries large ESP packets: $big of $all over 3000 bytes"
    else fail "jumbo WAN: $big of $all ESP packets over 3000 bytes"; fi
    dump_counters
    if grep -qE "tun-resegmented=[1-9]" "$WORK/espgw-a.log" &&
       grep -qE "tun-resegmented=[1-9]" "$WORK/espgw-b.log"; then
      pass "jumbo both gateways segmented jumbo TCP packets again to fit their LAN"
    else fail "jumbo re-segmentation not counted"; grep -h "tun-resegmented" "$WORK"/espgw-?.log; fi
    stop_gateway "$GWA" a
    stop_gateway "$GWB" b
  else
    fail "jumbo: gateways did not start"
  fi
  PIDS=()
  for gw in "$GWA" "$GWB"; do ip -n "$gw" link set wan0 mtu 1500; done
  ip -n "$LANB" link set eth0 mtu 1500
  ip -n "$GWB" link set lan0 mtu 1500
}
