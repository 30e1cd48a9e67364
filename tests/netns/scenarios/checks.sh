# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: the checks of the udp4, raw4, udp6 and raw6 scenarios
# (run_scenario), some also used by the others.
check_ping() {  # check_ping FROM_NS TARGET LABEL
  if in_ns "$1" ping -c 3 -i 0.2 -W 2 "$2" >"$WORK/ping.out" 2>&1; then pass "$3 ping $2"
  else fail "$3 ping $2"; cat "$WORK/ping.out"; show_drops; fi
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

# tun-rps = auto: receive steering on espgw0 with workers (several threads write an SA's
# packets), none when the readers run to completion (or on one CPU: nothing to steer to).
check_tun_rps() {
  local label=$1 side ns masks
  for side in a b; do
    ns=$GWA
    [[ $side == b ]] && ns=$GWB
    masks=$(in_ns "$ns" sh -c 'cat /sys/class/net/espgw0/queues/rx-*/rps_cpus' | tr '\n' ' ')
    if [[ ${WORKERS_SIDE[$side]:-2} == inline || $(nproc) -lt 2 ]]; then
      if [[ $masks =~ ^(0+[, ]*)+$ ]]; then pass "$label gw${side^^} (no workers, or one CPU) leaves RPS off: $masks"
      else fail "$label gw${side^^} (no workers, or one CPU) set RPS: $masks"; fi
    elif [[ -n $masks && ! $masks =~ ^(0+[, ]*)+$ ]] &&
      grep -q "receive steering (RPS) to CPUs" "$WORK/espgw-$side.log"; then
      pass "$label gw${side^^} (workers) steers espgw0's receive queues: CPUs $masks"
    else
      fail "$label gw${side^^} (workers) did not set RPS on espgw0: '$masks'"
      grep -i "steering" "$WORK/espgw-$side.log" || true
    fi
  done
}

# socket-buffer = auto: 2 MiB per WAN socket with workers (the buffer only has to outlast a
# reader the host holds back), 2 MiB inline too (the bursts while a reader is preempted; the
# queue-delay gate keeps the standing queue short); the kernel grants twice that. Read from what espgw logged the kernel granted.
check_socket_buffer() {
  local label=$1 side granted expected
  for side in a b; do
    granted=$(grep -o 'wan [a-z]* socket: receive buffer [0-9]* bytes (socket-buffer auto' \
      "$WORK/espgw-$side.log" | head -1 | awk '{print $6}')
    expected=$((2 * 2097152))
    [[ ${WORKERS_SIDE[$side]:-2} == inline ]] && expected=$((2 * 2097152))
    if [[ $granted == "$expected" ]]; then
      pass "$label gw${side^^} WAN receive buffer (socket-buffer auto, workers ${WORKERS_SIDE[$side]:-2}): $granted bytes"
    else
      fail "$label gw${side^^} WAN receive buffer: '${granted:-not logged}' bytes, expected $expected"
    fi
  done
}

pings_both_families() {
  in_ns "$LANA" ping -c 3 -i 0.2 -W 2 10.2.0.2 >/dev/null 2>&1 || true
  in_ns "$LANA" ping -6 -c 3 -i 0.2 -W 2 fd00:2::2 >/dev/null 2>&1 || true
}

check_wire_is_esp() {  # capture on gwB's WAN during a ping; no inner address may show
  local label=$1 esp clear
  read -r esp clear < <(wan_capture 'ip.addr==10.1.0.0/16 || ip.addr==10.2.0.0/16 || ipv6.addr==fd00:1::/64 || ipv6.addr==fd00:2::/64' pings_both_families)
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
  else fail "$label DF packet of exactly the tunnel MTU"; show_drops; fi
}

wait_for_capture() {  # until tshark writes FILE (its header), then a moment for the socket
  for _ in $(seq 1 50); do
    [[ -s $1 ]] && break
    sleep 0.1
  done
  sleep 0.5
}

check_outer_header() {  # DSCP, ECN and DF between inner and outer header (RFC 4301, 6040)
  local label=$1 family=$2 a_wan b_wan fields
  # Outward, on gwB's WAN: an EF + ECT(1) ping with DF and an AF41 + ECT(0) ping without.
  # The static SAs have charon's defaults: DSCP and ECN copied out, DF copied.
  rm -f "$WORK/outer.pcap" "$WORK/ce.pcap"
  in_ns "$GWB" tshark -q -i wan0 -a duration:8 -w "$WORK/outer.pcap" >/dev/null 2>&1 &
  local capture=$!
  wait_for_capture "$WORK/outer.pcap"
  in_ns "$LANA" ping -c 4 -i 0.2 -W 2 -Q 0xb9 -M do 10.2.0.2 >/dev/null 2>&1 || true
  in_ns "$LANA" ping -c 4 -i 0.2 -W 2 -Q 0x8a -M dont 10.2.0.2 >/dev/null 2>&1 || true
  wait "$capture" || true
  if [[ $family == 4 ]]; then
    fields=$(tshark -r "$WORK/outer.pcap" -Y "ip.src == $ADDR_A && (esp || udp.port == 4500)" \
      -T fields -e ip.dsfield -e ip.flags.df 2>/dev/null | sort | uniq -c)
    if grep -Eq "^ *[3-9] 0xb9[[:space:]]+(1|True)" <<<"$fields" &&
       grep -Eq "^ *[3-9] 0x8a[[:space:]]+(0|False)" <<<"$fields"; then
      pass "$label outer IPv4 header: DSCP and ECN copied out, DF copied (set and clear)"
    else fail "$label outer IPv4 header"; echo "$fields"; fi
  else
    fields=$(tshark -r "$WORK/outer.pcap" -Y "ipv6.src == $ADDR_A && (esp || udp.port == 4500)" \
      -T fields -e ipv6.tclass 2>/dev/null | sort | uniq -c)
    if grep -Eq "^ *[3-9] 0x000000b9" <<<"$fields" && grep -Eq "^ *[3-9] 0x0000008a" <<<"$fields"; then
      pass "$label outer IPv6 header: DSCP and ECN copied out"
    else fail "$label outer IPv6 header"; echo "$fields"; fi
  fi
  # Inward: gwB's kernel marks every ESP packet from gwA CE on arrival, as a congested
  # router would. An ECT(0) ping reaches lanB marked CE; a Not-ECT one is dropped and
  # counted (ecn-not-capable), since its endpoints could not hear the mark.
  local ip=ip
  [[ $family == 6 ]] && ip=ip6
  in_ns "$GWB" nft -f - <<NFT
table inet espgw_test_ce {
  chain congested { type filter hook prerouting priority -150; policy accept;
    $ip saddr $ADDR_A meta l4proto { esp, udp } $ip ecn set ce
  }
}
NFT
  in_ns "$LANB" tshark -q -i eth0 -a duration:6 -w "$WORK/ce.pcap" -f icmp >/dev/null 2>&1 &
  capture=$!
  wait_for_capture "$WORK/ce.pcap"
  in_ns "$LANA" ping -c 3 -i 0.2 -W 1 -Q 0x02 10.2.0.2 >/dev/null 2>&1 || true
  local plain_lost=0
  in_ns "$LANA" ping -c 3 -i 0.2 -W 1 -Q 0x00 10.2.0.2 >/dev/null 2>&1 || plain_lost=1
  wait "$capture" || true
  in_ns "$GWB" nft delete table inet espgw_test_ce
  local ce
  ce=$(tshark -r "$WORK/ce.pcap" -Y "icmp.type == 8 && ip.dsfield.ecn == 3" 2>/dev/null | wc -l)
  dump_counters
  # Nothing before this check drops for that reason, so any count in gwB's log is ours.
  if ((ce >= 3 && plain_lost == 1)) && grep -Eq "ecn-not-capable=[1-9]" "$WORK/espgw-b.log"; then
    pass "$label outer CE reached ECN-capable inner packets ($ce); Not-ECT ones dropped, counted"
  else
    fail "$label outer CE: $ce marked inner packets, Not-ECT lost=$plain_lost"
    show_drops
  fi
}

check_scapy_decrypts_wire() {  # the capture check_wire_is_esp took on gwB's WAN
  local label=$1 udp=""
  [[ $2 == udp ]] && udp=--udp
  if /usr/bin/python3 "$HERE/scapy_wan.py" decrypt "$WORK/wan.pcap" --spi 0x1001 --key "$KEY_AB" \
      --src "$ADDR_A" --dst "$ADDR_B" $udp >"$WORK/scapy.out" 2>&1; then
    pass "$label $(cat "$WORK/scapy.out")"
  else fail "$label scapy decrypt"; cat "$WORK/scapy.out"; fi
}

check_espgw_accepts_scapy() {  # scapy builds ESP in gwA's namespace; lanB must get the ICMP
  local label=$1 udp=""
  [[ $2 == udp ]] && udp=--udp
  rm -f "$WORK/lanb.pcap"
  # The sequence number must lie above everything gwA sent: iperf3 alone sends over a million
  # packets on a fast machine, and a number below the top of gwB's window is a counted
  # outside-window drop. 3e9 is hours of line rate away and still a 32-bit (non-ESN) number.
  local seq=3000000000
  # Capture only the echo request scapy sends (ICMP identifier 4242) and stop at the first
  # one, so a slow start of scapy or tshark cannot end the capture before the packet comes.
  in_ns "$LANB" tshark -i eth0 -c 1 -a duration:30 -w "$WORK/lanb.pcap" \
    -f 'icmp[icmptype] == icmp-echo and icmp[4:2] == 4242' >/dev/null 2>"$WORK/lanb.err" &
  local capture=$!
  for _ in $(seq 1 100); do grep -q "Capturing on" "$WORK/lanb.err" && break; sleep 0.1; done
  in_ns "$GWA" /usr/bin/python3 "$HERE/scapy_wan.py" inject --spi 0x1001 --key "$KEY_AB" \
    --src "$ADDR_A" --dst "$ADDR_B" $udp --seq "$seq" --ident 4242 >"$WORK/inject.out" 2>&1 || true
  wait "$capture" || true
  if tshark -r "$WORK/lanb.pcap" -Y 'icmp.ident == 4242 && icmp.type == 8' 2>/dev/null | grep -q .; then
    pass "$label espgw decrypted a scapy-built ESP packet and delivered it to lanB"
  else
    fail "$label scapy-built packet not delivered"
    cat "$WORK/inject.out" "$WORK/lanb.err"
    kill -USR1 "$PID_b"  # which counter took the packet, if espgw saw it
    sleep 0.5
    grep -E "drop|sa in " "$WORK/espgw-b.log" | tail -n 20 || true
  fi
}

check_counters() {
  local label=$1
  kill -USR1 "$PID_b"
  sleep 0.5
  if grep -E "sa in spi=0x00001001 .* packets=[1-9]" "$WORK/espgw-b.log" >/dev/null; then
    pass "$label gwB counts packets on its inbound SA"
  else fail "$label counters"; grep "sa " "$WORK/espgw-b.log" || true; fi
}

check_reload_keeps_traffic() {  # SIGHUP with an unchanged SA set: no packet lost
  local label=$1
  in_ns "$LANA" ping -c 40 -i 0.05 -W 2 10.2.0.2 >"$WORK/reload-ping.out" 2>&1 &
  local pinger=$!
  sleep 0.7
  printf '# reloaded by the test\n' >>"$WORK/static-a.conf"
  kill -HUP "$PID_a" "$PID_b"
  wait "$pinger" || true
  if grep -q " 0% packet loss" "$WORK/reload-ping.out" && grep -q "reloaded" "$WORK/espgw-a.log"; then
    pass "$label SIGHUP reload kept every packet of a running ping"
  else
    fail "$label SIGHUP reload"; tail -3 "$WORK/reload-ping.out"; grep -i reload "$WORK/espgw-a.log"
    show_drops
  fi
  # A broken file is refused and the running configuration stays.
  printf 'sa out spi 0x1 nonsense\n' >>"$WORK/static-a.conf"
  kill -HUP "$PID_a"
  sleep 0.5
  if grep -q "reload refused" "$WORK/espgw-a.log" && in_ns "$LANA" ping -c 2 -i 0.2 -W 2 10.2.0.2 >/dev/null 2>&1; then
    pass "$label a broken static file is refused with FILE:LINE and traffic continues"
  else fail "$label broken reload"; grep -E "static-a.conf:|refused" "$WORK/espgw-a.log"; fi
}

queue_delay_drops() {  # the sum of both gateways' queue-delay counters, from a fresh dump
  dump_counters
  local side total=0 n
  for side in a b; do
    n=$(grep -o "gateway drops: .* queue-delay=[0-9]*" "$WORK/espgw-$side.log" | tail -1 | sed 's/.*queue-delay=//')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# Readers that run to completion keep CoDel on their socket (queue-delay gate). A reader
# the host holds back makes a lone packet late; two lone late packets far apart are no
# standing queue, yet the gate once carried the first one's lateness over and dropped the
# second: two CI runs lost a ping that way. Busy loops on every CPU, in 3 ms bursts, make
# the readers late while 500 pings go through: none may be lost, none counted as
# queue-delay. (Before the fix: 1-10 of 600 lost, each counted.)
check_late_readers_keep_lone_packets() {
  local label=$1 before after hogs=() cpu
  before=$(queue_delay_drops)
  for cpu in $(seq 1 "$(nproc)"); do
    /usr/bin/python3 -c '
import time
while True:
    start = time.monotonic()
    while time.monotonic() - start < 0.003: pass
    time.sleep(0.004)' &
    hogs+=($!)
    PIDS+=($!)
  done
  in_ns "$LANA" ping -c 500 -i 0.02 -W 2 10.2.0.2 >"$WORK/late-ping.out" 2>&1 || true
  kill "${hogs[@]}" 2>/dev/null || true
  wait "${hogs[@]}" 2>/dev/null || true
  after=$(queue_delay_drops)
  if grep -q " 0% packet loss" "$WORK/late-ping.out" && ((after == before)); then
    pass "$label held-back readers drop no lone packet (500 pings, queue-delay unchanged at $after)"
  else
    fail "$label held-back readers: queue-delay $before -> $after"; tail -2 "$WORK/late-ping.out"
    show_drops
  fi
}
