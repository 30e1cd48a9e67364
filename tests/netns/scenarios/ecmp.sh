# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario ecmp.
run_ecmp() {
  log "=== scenario ecmp: 4 outbound SAs in one reqid on gwA, 64 UDP flows ==="
  WORKERS_SIDE=()
  CRYPTO_BACKEND_SIDE=()
  write_configs udp 4
  local i spi key
  for i in 2 3 4; do  # three more members of reqid 1, and gwB's inbound SAs for them
    spi=$((0x1000 + i)) key=$(random_key)
    echo "sa out spi $spi aes-gcm-128 key 0x$key src $ADDR_A dst $ADDR_B udp 4500:4500 reqid 1" >>"$WORK/static-a.conf"
    echo "sa in spi $spi aes-gcm-128 key 0x$key src $ADDR_A dst $ADDR_B udp 4500:4500 reqid 1" >>"$WORK/static-b.conf"
  done
  # A flow's packets may leave gwA from either worker's CPU: every veth delivers in send
  # order, so that the order lanB sees is what the gateways made.
  veths_keep_send_order
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "ecmp: gateways did not start"; return; }
  check_ping "$LANA" 10.2.0.2 ecmp
  in_ns "$LANB" iperf3 -s -1 -D -J -I "$WORK/iperf.pid" --logfile "$WORK/iperf-udp.json"
  for _ in $(seq 1 50); do in_ns "$LANB" ss -Hltn 'sport = :5201' | grep -q . && break; sleep 0.1; done
  # What gwA puts on its WAN, in order; headers only. A UDP GSO buffer crosses the veth
  # whole (gwB's socket takes it with UDP_GRO), so the capture sees one frame, and one ESP
  # header, per buffer: the first packet of each send of a run.
  rm -f "$WORK/ecmp.pcap"
  in_ns "$GWA" tshark -q -i wan0 -s 96 -B 64 -f "src host $ADDR_A and udp port 4500" -a duration:6 \
    -w "$WORK/ecmp.pcap" >/dev/null 2>&1 &
  local capture=$!
  for _ in $(seq 1 50); do [[ -s $WORK/ecmp.pcap ]] && break; sleep 0.1; done
  sleep 0.5
  # 64 flows of 1380-byte datagrams (one size: a batch's packets of several SAs can share
  # one GSO buffer), 2 Mbit/s each for 3 s: about 35,000 packets. Flows, not packets, are
  # hashed, under a seed drawn at start: with 16 flows one of the 4 members got none about
  # one run in 25 (4 x (3/4)^16); with 64 flows about once in 25 million runs.
  in_ns "$LANA" timeout 20 iperf3 -c 10.2.0.2 -u -b 2M -l 1380 -P 64 -t 3 >/dev/null 2>&1 || true
  wait "$capture" || true
  # Per SA, the sequence numbers on the wire only go up: gwB's reorder buffer would hide
  # an SA's packets sent out of order from the flows' own order check below. (The capture
  # may miss packets on a busy machine; a missed packet cannot reorder the others.)
  local wire
  wire=$(tshark -r "$WORK/ecmp.pcap" -Y esp -T fields -e esp.spi -e esp.sequence 2>/dev/null |
    /usr/bin/python3 -c '
import sys
last, packets, backwards = {}, 0, 0
for line in sys.stdin:
    spi, sequence = line.split()
    sequence = int(sequence)
    backwards += sequence <= last.get(spi, 0)
    last[spi] = sequence
    packets += 1
print(len(last), packets, backwards)')
  local spis wire_packets backwards
  read -r spis wire_packets backwards <<<"$wire"
  if [[ $spis == 4 && $backwards == 0 ]] && ((wire_packets > 1000)); then
    pass "ecmp each of the 4 SAs' sequence numbers only go up on the wire ($wire_packets frames)"
  else fail "ecmp wire order: $spis SAs, $wire_packets packets, $backwards out of sequence order"; fi
  for _ in $(seq 1 50); do [[ -s $WORK/iperf-udp.json ]] && grep -q '"end"' "$WORK/iperf-udp.json" && break; sleep 0.1; done
  local result
  result=$(/usr/bin/python3 -c '
import json, sys
end = json.load(open(sys.argv[1]))["end"]
streams = [s["udp"] for s in end["streams"]]
print(len(streams), sum(s["packets"] for s in streams), sum(s["out_of_order"] for s in streams),
      sum(s["lost_packets"] for s in streams))' "$WORK/iperf-udp.json" 2>/dev/null || echo "0 0 x x")
  local flows packets reordered lost
  read -r flows packets reordered lost <<<"$result"
  if [[ $flows == 64 && $reordered == 0 ]] && ((packets > 10000)); then
    pass "ecmp every one of $flows UDP flows arrived in order ($packets packets, $lost lost)"
  else fail "ecmp UDP flows: $flows flows, $packets packets, $reordered out of order, $lost lost"; fi
  dump_counters
  local used
  used=$(grep -oE "sa out spi=0x0000100[1-4] .* packets=[1-9][0-9]*" "$WORK/espgw-a.log" | awk '{print $3}' | sort -u | wc -l)
  if ((used == 4)); then pass "ecmp the flows spread over all 4 outbound SAs of the group"
  else fail "ecmp only $used of 4 outbound SAs carried packets"; grep "sa out" "$WORK/espgw-a.log"; fi
  # Packets of several SAs in one GSO buffer: each must still be cut where it ends, or
  # gwB would fail its ICV (or its length checks).
  if grep -E "sa in spi=0x0000100[1-4]" "$WORK/espgw-b.log" | grep -q "packets=[1-9]" &&
     ! grep -E " drop " "$WORK/espgw-b.log" | grep -q .; then
    pass "ecmp gwB accepted every ESP packet of every member (no drop counted)"
  else fail "ecmp gwB dropped packets"; grep -E "sa in| drop " "$WORK/espgw-b.log"; fi
  stop_gateway "$GWA" a
  stop_gateway "$GWB" b
  PIDS=()
}
