# shellcheck shell=bash
# Sourced by tests/charon/charon_site_to_site.sh: what a child's or connection's options
# ask of the data plane, checked end to end.
#   tfc           tfc_padding = 1000 on both children: every ESP packet of pings of 36 to
#                 928 bytes leaves with one size, padded beyond 1000 bytes (tshark on the
#                 WAN), pings both ways
#   rekey-volume  rekey_packets = 2000 (rekey_time 1h, life_packets 5000): a ping flood makes espgw report
#                 the soft packet limit, charon rekeys the CHILD_SA from that report
#                 (kernel expire, not its timer), the old SAs go, traffic continues
#   dpd           dpd_delay = 5s: while pings flow charon sends no DPD (espgw reports the
#                 policies' use times); once idle one side does; with gwB's WAN dropped gwA's
#                 charon declares the peer dead and closes the IKE_SA, and espgw's SAs go

# The distinct IP lengths of the ESP packets in the last wan_capture.
esp_ip_lengths() {
  tshark -r "$WORK/wan.pcap" -Y esp -T fields -e ip.len 2>/dev/null | sort -un | tr '\n' ' '
}

pings_of_several_sizes() {
  local size
  for size in 8 100 400 900; do
    in_ns "$LANA" ping -c 2 -i 0.1 -s "$size" -W 2 10.2.0.2 >/dev/null 2>&1 || true
  done
}

run_tfc() {
  CHILD_EXTRA="tfc_padding = 1000" bring_up aes128gcm16 no 1h
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  if grep -q "SA out spi 0x[0-9a-f]* .* installed, tfc padding to 1000" "$WORK/espgw-a.log" &&
     grep -q "SA out spi 0x[0-9a-f]* .* installed, tfc padding to 1000" "$WORK/espgw-b.log"; then
    pass "charon passed tfc_padding = 1000 with both outbound SAs"
  else fail "no outbound SA with TFC padding:"; grep "SA out" "$WORK"/espgw-?.log; fi
  check "ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA" ping_ok "$LANB" 10.1.0.2
  local esp clear lengths
  read -r esp clear < <(wan_capture 'ip.addr==10.1.0.0/16 || ip.addr==10.2.0.0/16' pings_of_several_sizes)
  lengths=$(esp_ip_lengths)
  # 20 (IPv4) + 8 (SPI, sequence) + 8 (IV) + 1000 + 2, rounded up to 4 + 16 (ICV) = 1056
  if ((esp >= 16 && clear == 0)) && [[ $lengths == "1056 " ]]; then
    pass "pings of 36 to 928 bytes: $esp ESP packets, all of IP length $lengths(TFC padded)"
  else fail "ESP packets: $esp, in clear: $clear, IP lengths: $lengths(want only 1056)"; fi
  check_terminate
}

# The rekey jobs charon made from espgw's expire reports (kernel_handler's log line).
volume_rekeys() { grep -c "creating rekey job for CHILD_SA ESP/0x" "$WORK/charon-$1.log" || true; }
volume_rekeyed() { (($(volume_rekeys a) + $(volume_rekeys b) >= 1)); }

run_rekey_volume() {
  # Soft limit 1800-2000 packets (charon's jitter), hard 5000: one rekey per SA, far from
  # the hard limit.
  CHILD_EXTRA="rekey_packets = 2000
        life_packets = 5000
        rand_packets = 200" bring_up aes128gcm16 no 1h
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  local spis_before
  spis_before=$(espgw_json a sas '" ".join(sorted(d["sas"]))')
  # 3000 echo requests and replies: the first SAs carry about 2000 packets each, then
  # their successors the rest.
  in_ns "$LANA" ping -c 3000 -i 0.002 -s 64 -W 1 10.2.0.2 >"$WORK/volume-ping.out" 2>&1 || true
  check "charon rekeyed the CHILD_SA on espgw's expire report ($(volume_rekeys a) on gwA, $(volume_rekeys b) on gwB)" \
    wait_until 10 volume_rekeyed
  if grep -q "soft lifetime reached ([0-9]* bytes, [0-9]* packets" "$WORK/espgw-a.log" "$WORK/espgw-b.log" &&
     ! grep -q "hard lifetime reached" "$WORK/espgw-a.log" "$WORK/espgw-b.log"; then
    pass "espgw reported the soft packet limit, no SA reached its hard limit"
  else fail "espgw's lifetime lines:"; grep "lifetime reached" "$WORK"/espgw-?.log; fi
  check "a new CHILD_SA was established" established_at_least a 2
  check "the old SAs are gone, 2 left on gwA" wait_until 15 sas_equal a 2
  local spis_after
  spis_after=$(espgw_json a sas '" ".join(sorted(d["sas"]))')
  if [[ -n $spis_after && $spis_after != "$spis_before" ]]; then
    pass "gwA's SAs are new ones: $spis_after (were $spis_before)"
  else fail "gwA's SAs before $spis_before, after $spis_after"; fi
  local lost
  lost=$(grep -o '[0-9]* received' "$WORK/volume-ping.out" | cut -d' ' -f1)
  if ((${lost:-0} >= 2990)); then pass "$lost of 3000 pings answered across the rekey"
  else fail "$(tail -2 "$WORK/volume-ping.out")"; fi
  check "ping lanA -> lanB after the rekey" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA after the rekey" ping_ok "$LANB" 10.1.0.2
  check_terminate
}

dpd_requests() { grep -c "sending DPD request" "$WORK/charon-$1.log" || true; }
dpd_requested_since() { (($(dpd_requests a) > $1 || $(dpd_requests b) > $2)); }
ike_sa_gone_a() { ! swan a --list-sas 2>/dev/null | grep -q "s2s: #"; }

run_dpd() {
  SWANCTL_EXTRA=([a]="dpd_delay = 5s" [b]="dpd_delay = 5s")
  # A dead peer shows after 1 + 1.4 + 1.96 s of retransmits instead of the 165 s default.
  local retransmit="retransmit_timeout = 1
  retransmit_base = 1.4
  retransmit_tries = 2"
  CHARON_EXTRA=([a]="$retransmit" [b]="$retransmit")
  bring_up aes128gcm16 no 1h
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  local before_a before_b
  before_a=$(dpd_requests a) before_b=$(dpd_requests b)
  # 12 s of pings both ways, beyond two DPD delays: the SAs' use times keep DPD quiet.
  local reverse
  in_ns "$LANB" ping -c 60 -i 0.2 -W 1 10.1.0.2 >/dev/null 2>&1 &
  reverse=$!
  in_ns "$LANA" ping -c 60 -i 0.2 -W 1 10.2.0.2 >"$WORK/dpd-ping.out" 2>&1 || true
  wait "$reverse" || true
  if (($(dpd_requests a) == before_a && $(dpd_requests b) == before_b)); then
    pass "no DPD request during 12 s of traffic (dpd_delay 5 s)"
  else fail "DPD requests during traffic: gwA $(($(dpd_requests a) - before_a)), gwB $(($(dpd_requests b) - before_b))"; fi
  # Idle, DPD does go out: the check above is not vacuous. Either side's: a DPD request
  # gwA receives is inbound IKE traffic, which keeps gwA's own DPD quiet.
  check "DPD requests once the tunnel is idle" wait_until 20 dpd_requested_since "$before_a" "$before_b"
  # gwB vanishes from the WAN.
  ip netns exec "$GWB" nft -f - <<'EOF'
table inet dpd_test {
  chain input { type filter hook input priority -300; iifname "wan0" drop; }
  chain output { type filter hook output priority -300; oifname "wan0" drop; }
}
EOF
  local start=$SECONDS
  if wait_until 25 ike_sa_gone_a; then
    pass "gwA's charon closed the IKE_SA of the dead peer after $((SECONDS - start)) s"
  else fail "IKE_SA still up 25 s after gwB's WAN went: $(swan a --list-sas 2>&1 | head -3)"; fi
  check "charon gave up after its retransmits (DPD)" \
    grep -qE "giving up after [0-9]+ retransmits" "$WORK/charon-a.log"
  check "espgw removed gwA's SAs with it" wait_until 5 sas_equal a 0
  ip netns exec "$GWB" nft delete table inet dpd_test 2>/dev/null || true
}
