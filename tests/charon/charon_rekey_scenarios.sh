# shellcheck shell=bash
# Sourced by tests/charon/charon_site_to_site.sh: the rekey scenarios (rekey,
# rekey-collision; see the list there) and the per-hop drop counts they assert on.

# No ESP-level drop on either side (replays, ICV failures, unknown SPIs, queue overflow):
# what was sent through the tunnel arrived. Over the live SAs, the engine, and the SAs
# already removed (espgw logs their last drop counts): a packet an SA dropped before
# encryption (queue-full) reaches no counter of the peer's, and the SA that dropped it is
# usually rekeyed away by the end.
esp_drops() {  # esp_drops SIDE
  espgwctl_on "$1" --json status | /usr/bin/python3 -c '
import json, re, sys
d = json.load(sys.stdin)
total = sum(int(v) for s in d["list-sas"]["sas"].values() for v in s["drops"].values())
total += sum(int(v) for v in d["stats"]["engine-drops"].values())
for line in open(sys.argv[1]):
    m = re.search(r"SA (?:out|in) spi \S+ removed after .*; drops (.*)$", line)
    if m:
        total += sum(int(n) for n in re.findall(r"=(\d+)", m.group(1)))
print(total)' "$WORK/espgw-$1.log"
}

# Packets carried by every SA a gateway ever had, as "OUT IN": the live SAs from espgwctl
# plus the final counts espgw logged when it removed the rekeyed ones.
sa_packet_totals() {  # sa_packet_totals SIDE
  espgwctl_on "$1" --json sas | /usr/bin/python3 -c '
import json, re, sys
totals = {"out": 0, "in": 0}
for sa in json.load(sys.stdin)["sas"].values():
    totals[sa["direction"]] += int(sa["packets"])
for line in open(sys.argv[1]):
    m = re.search(r"SA (out|in) spi \S+ removed after (\d+) packets", line)
    if m:
        totals[m.group(1)] += int(m.group(2))
print(totals["out"], totals["in"])' "$WORK/espgw-$1.log"
}

# Packets the kernel dropped while their next hop's address was being resolved, in every
# namespace (the neighbour table's statistics are not per namespace).
arp_unresolved_discards() {
  /usr/bin/python3 -c '
rows = [line.split() for line in open("/proc/net/stat/arp_cache")]
column = rows[0].index("unresolved_discards")
print(sum(int(row[column], 16) for row in rows[1:]))'
}

# A gateway's drop counters that are not zero, as "reason=N ...": its own, the engine's
# before an SA is known, and the datagrams the kernel dropped on a full WAN socket.
gateway_drops() {  # gateway_drops SIDE
  espgwctl_on "$1" --json status | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)["stats"]
counts = {**d["gateway-drops"], **d["engine-drops"]}
counts.update((k, v) for k, v in d["wan"].items() if k.endswith("-kernel-drops"))
print(" ".join(f"{k}={v}" for k, v in counts.items() if v != 0) or "none")'
}

# How often a gateway's readers waited for packets in flight so that a flow did not
# overtake itself when it changed SA (an outbound group changed, a rekeyed inbound SA's
# first packet): docs/pipeline_ecmp.md, docs/pipeline_rekey_order.md.
pipeline_fences() {  # pipeline_fences SIDE
  espgwctl_on "$1" --json status | /usr/bin/python3 -c '
import json, sys
print(int(json.load(sys.stdin)["stats"]["pipeline"]["fences"]))'
}

# Both sides rekey the CHILD_SA at once, and each processes the other's request while its
# own is outstanding, so each installs both new SAs (charon then deletes the redundant
# pair). gwA's ip rule refuses its IKE packets (raw ESP: IKE alone uses port 500) for a
# second: its request and its answer to gwB's request, which came while gwA's was
# outstanding, are lost. gwA's retransmit (after 4 s, when the rule is gone) reaches gwB
# while gwB's request is still unanswered; gwB's own retransmit then gets gwA's answer.
rekey_both_at_once() {
  ip -n "$GWA" rule add ipproto udp dport 500 prohibit
  swan a --rekey --child net >/dev/null 2>&1 || true
  sleep 0.5
  swan b --rekey --child net >/dev/null 2>&1 || true
  sleep 0.5
  ip -n "$GWA" rule del ipproto udp dport 500 prohibit
}

run_rekey() {  # run_rekey [collide]
  local collide=${1:-}
  if [[ -n $collide ]]; then
    bring_up aes128gcm16 no 1h
  else
    bring_up aes128gcm16 yes "${REKEY_TIME:-20s}"
  fi
  local seconds=45
  local arp_discards_before
  arp_discards_before=$(arp_unresolved_discards)
  # Each veth delivers in send order (tests/netns/lib.sh): the checks below are about the
  # order espgw keeps, and a default veth reorders on its own what two CPUs sent: the
  # charon rekey scenario without rekeys saw TCP count a reordering or loss in 2 of 7 runs
  # of 45 s, and a fresh-clone CI run once queued a segment out of order at lanB.
  veths_keep_send_order
  # lanA learns the path MTU first: a 1500-byte DF ping brings gwA's "fragmentation
  # needed" (the tunnel MTU is smaller than the LANs'). Otherwise the TCP connection learns
  # it from its first full-size segments, which gwA drops: those are resent smaller, and
  # a short segment that got through meanwhile reaches lanB ahead of them, queued out of
  # order. That is path MTU discovery, not espgw's order (seen: 1 and 5 such segments in
  # two CI runs of ~25, every run with ~12 resent segments).
  in_ns "$LANA" ping -M do -s 1472 -c 2 -i 0.2 -W 1 10.2.0.2 >/dev/null 2>&1 || true
  in_ns "$LANB" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$LANB' ss -Hltn 'sport = :5201' | grep -q ."
  # Paced well below capacity, so that any retransmission means a packet the tunnel lost.
  in_ns "$LANA" iperf3 -c 10.2.0.2 -t "$seconds" -b 200M -C cubic -J >"$WORK/iperf-rekey.json" 2>&1 &
  local iperf=$!
  in_ns "$LANB" ping -c $((seconds * 10)) -i 0.1 -W 2 10.1.0.2 >"$WORK/ping-rekey.txt" 2>&1 &
  local pinger=$!
  if [[ -n $collide ]]; then
    local round
    for round in 1 2 3; do
      sleep 6
      rekey_both_at_once
      sleep 5  # the retransmits cross: the collision, then the redundant SA deleted
    done
  fi
  wait "$iperf" || true
  wait "$pinger" || true
  local rekeys
  rekeys=$(grep -c 'CHILD_SA net{[0-9]*} established' "$WORK/charon-a.log" || true)
  check "at least 2 CHILD_SA rekeys in $seconds s (charon established $rekeys CHILD_SAs)" test "$rekeys" -ge 3
  if [[ -n $collide ]]; then
    # Each side got the other's request while its own was outstanding, every round (who
    # wins depends on the nonces; the loser's log then says "lost" or "rekey/delete").
    local seen_a seen_b
    seen_a=$(grep -c 'detected CHILD_REKEY collision with CHILD_REKEY' "$WORK/charon-a.log" || true)
    seen_b=$(grep -c 'detected CHILD_REKEY collision with CHILD_REKEY' "$WORK/charon-b.log" || true)
    check "both sides rekeyed at once, 3 times (collisions charon detected: gwA $seen_a, gwB $seen_b)" \
      test "${seen_a:-0}" -ge 3 -a "${seen_b:-0}" -ge 3
  fi
  # TCP's own view: it never detected a loss (no fast retransmit, SACK recovery or
  # timeout). Tail-loss probes are reported but do not decide: a probe fires when ACKs
  # come 2 RTTs late, which a 2-vCPU host busy with a rekey produces, and the sender
  # counts a "loss repaired by a probe" from ACK timing alone, even when the original
  # arrived (the receiver's duplicate report can trail the ACK that closes the probe).
  # Whether a packet was lost is decided below by counting at every hop: ESP sent
  # against received on both gateways, drops along the path, and the receiver's
  # out-of-order queue.
  local retransmits sent
  read -r retransmits sent < <(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["end"]["sum_sent"]["retransmits"], int(d["end"]["sum_sent"]["bytes"]))' "$WORK/iperf-rekey.json")
  local tcp
  tcp=$(in_ns "$LANA" nstat -az TcpExtTCPFastRetrans TcpExtTCPSackRecovery TcpExtTCPTimeouts \
        TcpExtTCPLossProbeRecovery TcpExtTCPLossProbes TcpExtTCPDSACKRecv 2>/dev/null |
        awk 'NR > 1 {printf "%s=%s ", $1, $2}')
  log "TCP through the rekeys: $retransmits retransmitted segments, $((sent / 1000000)) MB sent; $tcp"
  # The receiver's view, stricter than the sender's: a segment that came after a later
  # one is queued out of order, even when too few came late for a fast retransmit.
  local out_of_order
  out_of_order=$(in_ns "$LANB" nstat -az TcpExtTCPOFOQueue 2>/dev/null | awk 'NR > 1 {print $2}')
  check "lanB's TCP got every segment in order (${out_of_order:-?} queued out of order)" \
    test "${out_of_order:-x}" = 0
  local napi_lanb napi_gwb
  napi_lanb=$(veth_napi_packets "$LANB" eth0) napi_gwb=$(veth_napi_packets "$GWB" wan0)
  check "the veths kept their send order (NAPI path: lanB $napi_lanb, gwB's WAN $napi_gwb packets)" \
    test "$napi_lanb" -gt 1000 -a "$napi_gwb" -gt 1000
  counter() { grep -o "$1=[0-9]*" <<<"$tcp" | cut -d= -f2; }
  local fast sack timeouts recovered
  fast=$(counter TcpExtTCPFastRetrans) sack=$(counter TcpExtTCPSackRecovery)
  timeouts=$(counter TcpExtTCPTimeouts) recovered=$(counter TcpExtTCPLossProbeRecovery)
  check "TCP detected no loss through the rekeys (fast retransmits ${fast:-?}, SACK recoveries ${sack:-?}, timeouts ${timeouts:-?}; losses the sender inferred from late ACKs and repaired by probes: ${recovered:-?})" \
    test "${fast:-x}" = 0 -a "${sack:-x}" = 0 -a "${timeouts:-x}" = 0 -a "$sent" -gt 100000000
  local loss
  loss=$(grep -o '[0-9.]*% packet loss' "$WORK/ping-rekey.txt" || echo "?")
  check "ping lanB -> lanA through the rekeys: $loss" test "$loss" = "0% packet loss"
  sleep 1  # the last packets leave the reorder buffers
  local a_out a_in b_out b_in
  read -r a_out a_in <<<"$(sa_packet_totals a)"
  read -r b_out b_in <<<"$(sa_packet_totals b)"
  # Non-empty and non-zero too: two failed espgwctl calls must not count as equal.
  check "every ESP packet gwA sent over all SAs, gwB received ($a_out sent, $b_in received)" \
    test "${a_out:-0}" -gt 0 -a "$a_out" = "$b_in"
  check "every ESP packet gwB sent over all SAs, gwA received ($b_out sent, $a_in received)" \
    test "${b_out:-0}" -gt 0 -a "$b_out" = "$a_in"
  local drops_a drops_b
  drops_a=$(esp_drops a) drops_b=$(esp_drops b)
  check "no ESP drops on either gateway (gwA $drops_a, gwB $drops_b)" test "$drops_a" = 0 -a "$drops_b" = 0
  local on_path
  on_path=$(path_drops)
  check "no drops on any interface along the path (veths, TUN devices, their queues): $on_path" \
    test "$on_path" = none
  local fences_a fences_b
  fences_a=$(pipeline_fences a) fences_b=$(pipeline_fences b)
  check "both gateways kept flows in order across the SA switches (fences: gwA ${fences_a:-?}, gwB ${fences_b:-?})" \
    test "${fences_a:-0}" -gt 0 -a "${fences_b:-0}" -gt 0
  # Also when TCP saw a loss or reordering: the TUN devices' drops and TCP's reordering
  # counters tell a loss outside ESP from packets delivered out of order.
  if [[ -n ${CHARON_TEST_DUMP:-} || "${fast:-x}${sack:-x}${timeouts:-x}${recovered:-x}" != 0000 ]]; then
    for side in a b; do log "gw$side's own drops: $(gateway_drops "$side")"; done
    for ns in "$GWA" "$GWB" "$LANB"; do
      log "${ns#"$RUN-"} kernel: $(in_ns "$ns" nstat -az 'Ip*' 'IpExt*' 2>/dev/null |
        awk 'NR > 1 && $2 != 0 && $1 ~ /Discard|NoRoute|Drop|Error|Truncated|Csum/ {printf "%s=%s ", $1, $2}')" \
        "neighbours: $(in_ns "$ns" ip -s neigh show dev "$([[ $ns == "$LANB" ]] && echo eth0 || echo lan0)" | tr '\n' ' ')"
    done
    log "ARP: packets dropped unresolved during the run (every namespace): $(($(arp_unresolved_discards) - arp_discards_before))"
    for side in a b; do espgwctl_on "$side" --json status | sed "s/^/    gw$side: /"; done
    for ns in "$GWA" "$GWB"; do ip -n "$ns" -s link show espgw0 | sed "s/^/    $ns: /"; done
    in_ns "$LANA" nstat -az TcpExtTCPSackRecovery TcpExtTCPLossProbes TcpExtTCPSACKReorder TcpExtTCPRenoReorder TcpExtTCPTSReorder TcpExtTCPLostRetransmit TcpExtTCPFastRetrans TcpExtTCPSpuriousRTOs TcpExtTCPDSACKRecv TcpExtTCPDSACKRecvSegs TcpExtTCPDSACKIgnoredDubious TcpExtTCPDSACKIgnoredOld TcpRetransSegs 2>/dev/null | sed "s/^/    lanA: /"
    # The receiver's side of those duplicates: the D-SACKs it sent.
    in_ns "$LANB" nstat -az TcpExtTCPDSACKOldSent TcpExtTCPDSACKOfoSent TcpExtTCPOFOQueue 2>/dev/null | sed "s/^/    lanB: /"
  fi
  if [[ $drops_a != 0 || $drops_b != 0 ]]; then
    for side in a b; do espgwctl_on "$side" status | sed "s/^/    gw$side: /"; done
  fi
  check "still 2 charon SAs on gwA after the rekeys (old ones deleted)" wait_until 10 sas_equal a 2
}
