# shellcheck shell=bash
# Sourced by tests/netns/site_to_site.sh: scenario storm.
# Scenario storm (docs/security_isolation.md): 50,000 hostile datagrams
# at gwB's ports 4500 and 500 (tests/netns/storm.py: random bytes, forged ESP on the real
# SPI with numbers ahead, unknown SPIs, truncated headers, IKE-marker garbage, keepalives,
# oversized datagrams, garbage to 500) at 25,000/s, twice, while lanA pings lanB. gwB must
# stay up, account for every datagram (its counters plus the kernel's), keep its RSS after
# the second storm within 5% of the first's, and the pings must get through.
run_storm() {
  log "=== scenario storm: hostile datagrams at gwB while lanA pings lanB ==="
  WORKERS_SIDE=()
  CRYPTO_BACKEND_SIDE=()
  storm_configs
  start_gateway "$GWA" a && start_gateway "$GWB" b || { fail "storm: gateways did not start"; return; }
  in_ns "$LANA" ping -c 20 -i 0.01 -W 1 10.2.0.2 >/dev/null 2>&1 || true
  local rss_start rss_warm rss_end account unaccounted sent tolerance received transmitted
  rss_start=$(vm_rss_kib "$PID_b")
  storm_round warmup 50000 25000  # the first storm: pools and buffers reach their size
  rss_warm=$(vm_rss_kib "$PID_b")
  storm_round storm 50000 25000
  rss_end=$(vm_rss_kib "$PID_b")
  if kill -0 "$PID_b" 2>/dev/null; then pass "storm: gwB is still up"
  else fail "storm: gwB died"; tail -20 "$WORK/espgw-b.log"; return; fi
  account=$(cat "$WORK/storm.account")
  read -r sent unaccounted < <(/usr/bin/python3 -c 'import json,sys; a=json.loads(sys.argv[1]); print(a["sent"], a["unaccounted"])' "$account")
  # What may be in flight at the snapshots: pings at their edges; fragments of an
  # oversized datagram the kernel is still reassembling. 0.1% of the storm covers both.
  tolerance=$((sent / 1000 + 5))
  if ((sent >= 49000 && ${unaccounted#-} <= tolerance)); then
    pass "storm: every datagram accounted for ($sent sent, $unaccounted unaccounted, tolerance $tolerance)"
  else fail "storm: accounting: $account"; fi
  log "storm: $account"
  # Under AddressSanitizer freed memory waits in its quarantine (up to 256 MiB), so the RSS
  # is the sanitizer's, not espgw's: the release build's run of this scenario checks it.
  # ldd's whole output first: with pipefail, `ldd | grep -q` fails whenever grep exits on
  # its match before ldd has written the rest (SIGPIPE).
  local libraries
  libraries=$(ldd "$ESPGW" 2>/dev/null || true)
  if [[ $libraries == *libasan* ]]; then
    log "storm: RSS not checked in an AddressSanitizer build (${rss_warm} -> ${rss_end} KiB)"
  elif ((rss_end * 100 <= rss_warm * 105)); then
    pass "storm: gwB RSS ${rss_start} KiB at start, ${rss_warm} after the first storm, ${rss_end} after the second (<= +5%)"
  else fail "storm: gwB RSS grew from ${rss_warm} to ${rss_end} KiB (start ${rss_start})"; fi
  read -r received transmitted < <(ping_loss storm)
  # The pings share gwB's one WAN reader and socket with the storm; at 25,000 datagrams/s
  # this host's gwB keeps up, so they must get through (a few may fall to a burst).
  if ((transmitted > 0 && received * 100 >= transmitted * 95)); then
    pass "storm: lanA -> lanB pings during the storm: $received of $transmitted answered"
  else fail "storm: pings during the storm: $received of $transmitted answered"; show_drops; fi
  stop_gateway "$GWA" a
  stop_gateway "$GWB" b
  PIDS=()
}
