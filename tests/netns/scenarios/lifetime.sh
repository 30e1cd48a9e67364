# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario lifetime.
run_lifetime() {  # an SA with a hard packet limit goes out of service
  log "=== scenario lifetime: hard-packets on gwA's outbound SA ==="
  write_configs udp 4
  sed -i 's/^\(sa out .*\)$/\1 soft-packets 10 hard-packets 20/' "$WORK/static-a.conf"
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "lifetime: gateways did not start"; return; }
  in_ns "$LANA" ping -c 30 -i 0.1 -W 1 10.2.0.2 >"$WORK/lifetime-ping.out" 2>&1 || true
  sleep 1.5
  local received
  received=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$WORK/lifetime-ping.out")
  if grep -q "soft lifetime reached" "$WORK/espgw-a.log" && grep -q "hard lifetime reached" "$WORK/espgw-a.log" &&
     ((received >= 10 && received < 30)); then
    pass "lifetime: soft then hard limit logged, SA out of service ($received of 30 pings answered)"
  else fail "lifetime: received=$received"; grep -i lifetime "$WORK/espgw-a.log"; fi
  kill -USR1 "$PID_a"; sleep 0.3
  if grep -qE "gateway drops: .*no-sa=[1-9]" "$WORK/espgw-a.log"; then
    pass "lifetime: packets after the hard limit are counted as no-sa"
  else fail "lifetime: no-sa not counted"; fi
  stop_gateway "$GWA" a
  stop_gateway "$GWB" b
  PIDS=()
}
