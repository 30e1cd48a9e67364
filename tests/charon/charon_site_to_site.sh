#!/usr/bin/env bash
# espgw managed by strongSwan: two charons (with the espgw plugin) and two espgw gateways
# in network namespaces, the tunnel configured and brought up with swanctl.
#
#   lanA 10.1.0.2 ── gwA (charon + espgw) ══ WAN 192.0.2.0/24 ══ gwB (charon + espgw) ── lanB 10.2.0.2
#
# Scenarios (each its own ctest test):
#   gcm-udp     AES-128-GCM, NAT-T forced (encap = yes): tunnel up, ping and iperf3 both
#               ways, list-sas byte counters equal the traffic sent, only ESP on the WAN,
#               espgwctl status, terminate removes SAs and routes
#   chacha-raw  ChaCha20-Poly1305 over raw ESP (encap = no), the same checks
#   cbc-sha256-raw, cbc-sha1-udp
#               AES-256-CBC with HMAC-SHA2-256-128 over raw ESP, AES-128-CBC with
#               HMAC-SHA1-96 over UDP: the same checks, and espgw's SAs carry that transform
#   rekey       rekey_time = 20s while TCP and ping run for 45 s: make-before-break
#               rekeys lose nothing and reorder nothing (TCP detects no loss, its
#               receiver queues no segment out of order, 0 pings lost, no ESP drops)
#   rekey-collision
#               the same over raw ESP, with both sides rekeying the CHILD_SA at once,
#               three times: gwA's IKE is held back (an ip rule refuses IKE's port for
#               a second) until both requests are in flight, so charon resolves a
#               collision every time, with both new inbound SAs installed for a while:
#               no loss and no reordering either
#   restart     espgw restarts under charon: the plugin re-installs the SAs and charon
#               rekeys them; charon restarts: espgw removes the stale SAs and routes
#   interop-matrix
#               gwB runs strongSwan's kernel-libipsec instead (ESP we did not write): every
#               ESP transform both support over ESP in UDP, one CHILD_SA after the other
#               in one IKE_SA, pings and 2 MB of TCP both ways each; prints a table
#               (charon_interop_matrix.sh)
#   x509        the shipped examples as they are: configs/swanctl/site-to-site-x509.conf
#               (gwB's side mirrored from it), configs/strongswan.conf and
#               configs/espgw.conf, with a CA and gateway certificates made by openssl:
#               tunnel up, ping both ways, list-sas shows the certificates' identities
#   psk-config  the same with configs/swanctl/site-to-site-psk.conf
#   ipv6, nat   IKE and ESP over IPv6 on dual-stack gateways; NAT-T through a real NAT
#               with keepalives and a port float (charon_wan_scenarios.sh)
#   tfc, rekey-volume, dpd
#               a child's tfc_padding, rekeys by packet count, dead peer detection
#               (charon_child_options.sh)
#
# Usage: charon_site_to_site.sh ESPGW ESPGWCTL PLUGIN SCENARIO
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW ESPGWCTL PLUGIN SCENARIO}")
ESPGWCTL=$(readlink -f "$2")
PLUGIN=$(readlink -f "$3")
SCENARIO=$4

HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/charon_lib.sh"
# shellcheck source=tests/charon/charon_wan_scenarios.sh
source "$HERE/charon_wan_scenarios.sh"
# shellcheck source=tests/charon/charon_interop_matrix.sh
source "$HERE/charon_interop_matrix.sh"
# shellcheck source=tests/charon/charon_child_options.sh
source "$HERE/charon_child_options.sh"
# shellcheck source=tests/charon/charon_rekey_scenarios.sh
source "$HERE/charon_rekey_scenarios.sh"

on_failure_logs() {
  [[ -n ${CHARON_TEST_KEEP:-} ]] && rm -rf "$CHARON_TEST_KEEP" && cp -r "$WORK" "$CHARON_TEST_KEEP"
  if ((FAILURES > 0)); then
    for f in "$WORK"/espgw-*.log "$WORK"/charon-*.log; do
      [[ -f $f ]] || continue
      echo "----- $(basename "$f") (last 40 lines)"
      tail -40 "$f"
    done
  fi
}

bring_up() {  # bring_up ESP ENCAP REKEY [BACKEND_B]
  local esp=$1 encap=$2 rekey=$3 backend_b=${4:-espgw}
  setup_topology
  start_espgw a
  [[ $backend_b == espgw ]] && start_espgw b
  start_charon a espgw
  start_charon b "$backend_b"
  write_swanctl_conf a "$esp" "$encap" "$rekey"
  write_swanctl_conf b "$esp" "$encap" "$rekey"
  load_swanctl a
  load_swanctl b
  if initiate a; then pass "swanctl --initiate brought the tunnel up ($esp, encap=$encap, gwB $backend_b)"
  else fail "swanctl --initiate"; cat "$WORK/swanctl-initiate.log"; return 1; fi
}

# Counters charon reads from espgw (query_sa) must equal the traffic: 50 pings of 1000
# bytes are 50 inner packets of 1028 bytes each way.
check_counters_match_traffic() {
  local before after
  read -r -a before <<<"$(child_counters a)"
  in_ns "$LANA" ping -c 50 -i 0.01 -s 1000 -W 2 10.2.0.2 >/dev/null 2>&1 || true
  sleep 0.3  # espgw notices use every 100 ms; counters themselves are exact
  read -r -a after <<<"$(child_counters a)"
  local in_bytes=$((after[0] - before[0])) in_packets=$((after[1] - before[1]))
  local out_bytes=$((after[2] - before[2])) out_packets=$((after[3] - before[3]))
  if ((out_packets == 50 && in_packets == 50 && out_bytes == 50 * 1028 && in_bytes == 50 * 1028)); then
    pass "swanctl --list-sas counters equal the traffic: out $out_packets pkts/$out_bytes B, in $in_packets pkts/$in_bytes B"
  else
    fail "swanctl --list-sas counters: out $out_packets pkts/$out_bytes B, in $in_packets pkts/$in_bytes B; expected 50/51400 each way"
  fi
}

five_pings() { in_ns "$LANA" ping -c 5 -i 0.1 -W 2 10.2.0.2 >/dev/null 2>&1 || true; }

check_wire_only_esp() {
  local esp clear
  read -r esp clear < <(wan_capture 'ip.addr==10.1.0.0/16 || ip.addr==10.2.0.0/16' five_pings)
  if ((esp >= 10 && clear == 0)); then pass "WAN carries only ESP ($esp ESP packets, 0 in clear)"
  else fail "WAN: $esp ESP packets, $clear with inner addresses in clear"; fi
}

charon_sas_in_espgw() {  # charon_sas_in_espgw SIDE: how many of espgw's SAs charon installed
  espgw_json "$1" sas 'sum(1 for s in d["sas"].values() if s["origin"] == "charon")'
}

sas_equal() { [[ $(charon_sas_in_espgw "$1" 2>/dev/null) == "$2" ]]; }
sas_at_least() { local n; n=$(charon_sas_in_espgw "$1" 2>/dev/null) && ((n >= $2)); }
established_at_least() { (($(grep -c 'CHILD_SA net{[0-9]*} established' "$WORK/charon-$1.log" || true) >= $2)); }
# espgw's routes through its TUN device (its own table; the fail-closed `prohibit` routes of
# the same prefixes are left out: they stay while charon may install the policy again).
no_route() { ! ip -n "$(side_ns "$1")" route show table all proto 245 dev espgw0 | grep -q "$2"; }

route_present() { ip -n "$(side_ns "$1")" route show table all proto 245 dev espgw0 | grep -q "$2"; }
# The fail-closed route of a prefix (espgw's own table; outlives its policy while charon
# restarts).
fail_closed_route() {
  local routes
  routes=$(ip -n "$(side_ns "$1")" route show table all proto 245)
  grep -q "^prohibit $2" <<<"$routes"
}

check_espgwctl() {
  espgwctl_on a >"$WORK/espgwctl.txt" 2>&1 || true
  local rps='CPUs [0-9a-f]'  # 2 workers: tun-rps = auto steers, unless there is one CPU
  [[ $(nproc) -lt 2 ]] && rps='off'
  if grep -q 'charon' "$WORK/espgwctl.txt" && grep -q 'ECMP groups' "$WORK/espgwctl.txt" &&
     grep -q 'per-worker load' "$WORK/espgwctl.txt" && grep -q 'lan mtu 1500' "$WORK/espgwctl.txt" &&
     grep -q "receive steering (RPS) on the TUN device: $rps" "$WORK/espgwctl.txt"; then
    pass "espgwctl shows charon's SAs, the ECMP group, per-worker load, the LAN MTU and RPS"
  else fail "espgwctl output:"; cat "$WORK/espgwctl.txt"; fi
  check "espgwctl --json parses and lists 2 charon SAs" sas_equal a 2
  check_espgwctl_names
}

# espgwctl asks charon for the names (as swanctl --list-sas --ike does): the connection's
# and child's SAs are espgw's two, another name has none, and `children` shows both SAs
# under their CHILD_SA and IKE_SA.
check_espgwctl_names() {
  local vici=(--charon-vici "$WORK/charon-a.vici") named
  named=$(espgwctl_on a "${vici[@]}" --ike s2s --child net --json sas |
    /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin).get("sas", {})))')
  check "espgwctl --ike s2s --child net keeps the 2 SAs" test "$named" = 2
  check "espgwctl --ike with another name keeps none" \
    bash -c "'$ESPGWCTL' --socket '$WORK/espgw-a.ctl' ${vici[*]} --ike nosuch sas | grep -qx 'Security associations: 0'"
  espgwctl_on a "${vici[@]}" children --ike s2s >"$WORK/children.txt" 2>&1 || true
  if grep -q '^s2s: #[0-9]*, ESTABLISHED' "$WORK/children.txt" &&
     grep -q '^  net: #[0-9]*, INSTALLED' "$WORK/children.txt" &&
     [[ $(grep -c ' charon ' "$WORK/children.txt") -eq 2 ]]; then
    pass "espgwctl children shows the CHILD_SA's 2 SAs under its IKE_SA"
  else fail "espgwctl children:"; cat "$WORK/children.txt"; fi
}

check_terminate() {
  swan a --terminate --ike s2s --timeout 10 >/dev/null 2>&1 || true
  if wait_until 5 sas_equal a 0 && wait_until 5 sas_equal b 0; then
    pass "swanctl --terminate removed the SAs from both espgw"
  else fail "SAs left after terminate: a=$(charon_sas_in_espgw a) b=$(charon_sas_in_espgw b)"; fi
  if wait_until 3 no_route a 10.2.0.0; then
    pass "terminate removed the route to 10.2.0.0/16"
  else fail "route to 10.2.0.0/16 still present after terminate"; fi
  if in_ns "$LANA" ping -c 1 -W 1 10.2.0.2 >/dev/null 2>&1; then fail "ping passes after terminate"
  else pass "no traffic passes after terminate"; fi
}

# charon logs the CHILD_SA keys it derives at chd level 4 (this test turns that on); none
# of them may appear in espgw's log at its most verbose level, nor in what the plugin
# logs (charon's KNL lines).
check_keys_not_logged() {
  /usr/bin/python3 - "$WORK/charon-a.log" "$WORK/espgw-a.log" "$WORK/espgw-b.log" <<'PY'
import re, sys
charon = open(sys.argv[1]).read().splitlines()
keys = []
for i, line in enumerate(charon):
    if re.search(r"encryption (initiator|responder) key", line):
        dump = ""
        for follow in charon[i + 1:i + 6]:
            m = re.match(r"^.*?\s+\d+:\s+((?:[0-9A-F]{2} ?)+)", follow)
            if not m:
                break
            dump += m.group(1).replace(" ", "")
        if len(dump) >= 32:
            keys.append(dump.lower())
if len(keys) < 2:
    print("charon logged no CHILD_SA keys to look for"); sys.exit(1)
texts = {name: open(name).read().lower().replace(" ", "").replace(":", "") for name in sys.argv[2:]}
texts["charon KNL lines"] = "".join(l for l in charon if "[KNL]" in l).lower().replace(" ", "")
for key in keys:
    for name, text in texts.items():
        if key[:16] in text:
            print(f"a key's bytes appear in {name}"); sys.exit(1)
print(f"{len(keys)} keys checked")
PY
}

run_basic() {  # run_basic ESP ENCAP [before-terminate: leave the tunnel up]
  bring_up "$1" "$2" 1h
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  check "route to 10.2.0.0/16 through espgw0 on gwA" route_present a 10.2.0.0/16
  check "ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA" ping_ok "$LANB" 10.1.0.2
  check "iperf3 lanA -> lanB" iperf_ok "$LANA" "$LANB" 10.2.0.2
  check "iperf3 lanB -> lanA" iperf_ok "$LANA" "$LANB" 10.2.0.2 -R
  check_counters_match_traffic
  check_wire_only_esp
  check_espgwctl
  if [[ ${CHARON_LOG_CHD:-1} -ge 4 ]]; then
    check "no key in espgw's debug log or the plugin's log lines ($(check_keys_not_logged 2>&1 | tail -1))" check_keys_not_logged
  fi
  swan a --list-sas >"$WORK/list-sas.txt" 2>&1 || true
  log "swanctl --list-sas on gwA:"; sed 's/^/    /' "$WORK/list-sas.txt"
  [[ ${3:-} == before-terminate ]] || check_terminate
}

# gwA's ESP in a capture on gwB's WAN: "packets N repeated-iv R repeated-seq S".
gwa_esp_repeats() { /usr/bin/python3 "$HERE/../netns/esp_capture.py" ivs "$WORK/restart.pcap" 192.0.2.1; }

run_restart() {
  bring_up aes128gcm16 yes 1h
  # Not through in_ns: `$!` must be tshark itself, which stops cleanly on SIGINT.
  ip netns exec "$GWB" tshark -q -i wan0 -F pcap -w "$WORK/restart.pcap" >/dev/null 2>&1 &
  local capture=$! packets repeated_iv repeated_seq
  PIDS+=("$capture")
  sleep 1
  check "ping before restarts" ping_ok "$LANA" 10.2.0.2
  # espgw restarts while charon runs: the plugin installs the SAs again, marked as
  # replayed; espgw continues their sequence numbers (sa-state) and charon rekeys them.
  kill -TERM "${ESPGW_PID[a]}"
  wait "${ESPGW_PID[a]}" 2>/dev/null || true
  start_espgw a
  check "the restarted espgw got charon's SAs back" wait_until 10 sas_at_least a 2
  check "traffic flows again after the espgw restart" wait_until 15 ping_ok "$LANA" 10.2.0.2
  check "charon rekeyed the CHILD_SA after the espgw restart" wait_until 10 established_at_least a 2
  # The same after a crash: the replayed SAs continue past their last reservation.
  in_ns "$LANA" ping -c 20 -i 0.05 -W 1 10.2.0.2 >/dev/null 2>&1 || true
  kill -KILL "${ESPGW_PID[a]}"
  wait "${ESPGW_PID[a]}" 2>/dev/null || true
  start_espgw a
  check "traffic flows again after espgw was killed" wait_until 15 ping_ok "$LANA" 10.2.0.2
  in_ns "$LANA" ping -c 20 -i 0.05 -W 1 10.2.0.2 >/dev/null 2>&1 || true
  sleep 0.5
  kill -INT "$capture"
  wait "$capture" 2>/dev/null || true
  read -r _ packets _ repeated_iv _ repeated_seq < <(gwa_esp_repeats)
  if ((packets >= 30 && repeated_iv == 0 && repeated_seq == 0)); then
    pass "gwA's ESP across an espgw restart and a kill -9 under charon: $packets packets, no (SPI, IV) twice"
  else
    fail "gwA's ESP across espgw restarts: $packets packets, $repeated_iv (SPI, IV) and $repeated_seq (SPI, sequence) repeated"
  fi
  # charon dies without cleaning up; a new charon attaches: espgw drops what the old one
  # installed, and the routes with it.
  kill -KILL "${CHARON_PID[a]}"
  wait "${CHARON_PID[a]}" 2>/dev/null || true
  check "espgw keeps the SAs while no charon is attached" sas_at_least a 2
  start_charon a espgw
  check "espgw removed the stale SAs when a new charon attached" wait_until 10 sas_equal a 0
  check "and the stale route" wait_until 5 no_route a 10.2.0.0
  # Until the new charon installs its policies again, the destination stays closed
  # (docs/security_fail_closed.md): the route through espgw0 went, the prohibit stays.
  check "10.2.0.0/16 stays prohibited while no charon has installed its policy" \
    fail_closed_route a 10.2.0.0/16
  load_swanctl a
  if initiate a; then pass "the new charon brings the tunnel up again"; else fail "initiate after charon restart"; fi
  check "traffic flows after the charon restart" wait_until 10 ping_ok "$LANA" 10.2.0.2
  check "gwB replaced the old IKE_SA (unique = replace): 2 charon SAs" wait_until 10 sas_equal b 2
}

# The transform espgw runs for gwA's SAs, e.g. "aes-cbc-256/hmac-sha2-256-128" (one
# name when both SAs agree).
sa_transforms() {
  espgw_json "$1" sas '" ".join(sorted({s["algorithm"] for s in d["sas"].values() if s["origin"] == "charon"}))'
}

run_basic_cbc() {  # run_basic_cbc ESP ENCAP TRANSFORM
  run_basic "$1" "$2" before-terminate
  check "espgw's SAs run $3 on both gateways" \
    test "$(sa_transforms a)/$(sa_transforms b)" = "$3/$3"
  check_terminate
}

# The shipped configurations (configs/) run as they are; only socket paths, logging, the
# peer addresses on gwB and start_action (none, the test initiates) are put in.
run_examples() {  # run_examples psk|x509
  local auth=$1 side
  ESPGW_CONF_FROM_EXAMPLE=yes
  STRONGSWAN_CONF_BASE=$CONFIGS_DIR/strongswan.conf
  setup_topology
  start_espgw a
  start_espgw b
  start_charon a espgw
  start_charon b espgw
  if [[ $auth == x509 ]]; then
    if make_x509_pki; then pass "openssl made a CA and certificates for gwa.espgw.test and gwb.espgw.test"
    else fail "making the CA and certificates with openssl"; return 1; fi
  fi
  for side in a b; do
    write_swanctl_from_example "$side" "$CONFIGS_DIR/swanctl/site-to-site-$auth.conf"
    load_swanctl "$side" "$WORK/swanctl-$side/swanctl.conf"
  done
  if initiate a; then pass "swanctl --initiate with configs/swanctl/site-to-site-$auth.conf"
  else fail "swanctl --initiate"; cat "$WORK/swanctl-initiate.log"; return 1; fi
  check "espgw installed 2 SAs from charon on gwA" wait_until 5 sas_equal a 2
  check "ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA" ping_ok "$LANB" 10.1.0.2

  local me peer
  for side in a b; do
    me=gw$side.espgw.test peer=gw$(other_side "$side").espgw.test
    swan "$side" --list-sas >"$WORK/list-sas-$side.txt" 2>"$WORK/list-sas-$side.err" || true
    check "gw$side: swanctl --list-sas shows local '$me' and remote '$peer'" \
      sh -c "grep -q \"local  '$me' @ \" '$WORK/list-sas-$side.txt' &&
             grep -q \"remote '$peer' @ \" '$WORK/list-sas-$side.txt'"
    if [[ $auth == x509 ]]; then
      # charon signed with gwX's certificate and verified the peer's against the CA
      check "gw$side: authenticated with its certificate, verified the peer's ($peer) against the CA" \
        sh -c "grep -q 'using certificate \"O=espgw test, CN=$peer\"' '$WORK/charon-$side.log' &&
               grep -q 'using trusted ca certificate \"O=espgw test, CN=espgw test CA\"' '$WORK/charon-$side.log' &&
               grep -Eq \"authentication of '$peer' with [A-Z0-9_]*ECDSA[A-Z0-9_-]* successful\" '$WORK/charon-$side.log'"
    else
      check "gw$side: authenticated the peer ($peer) with the pre-shared key" \
        grep -q "authentication of '$peer' with pre-shared key successful" "$WORK/charon-$side.log"
    fi
  done
  log "swanctl --list-sas on gwA:"; sed 's/^/    /' "$WORK/list-sas-a.txt"
  check_terminate
}

# ECMP over parallel CHILD_SAs: espgw on gwA keeps 3 CHILD_SAs of "net" up through
# charon's VICI socket (each on its own IKE_SA: reuse_ikesa = no on gwA, unique = no on
# gwB); flows spread over the 3 outbound SAs; a terminated member comes back.
group_members() {  # group_members SIDE: members of the SA group of reqid 1
  espgw_json "$1" sas 'len(d["groups"]["1"]["members"]) if "1" in d.get("groups", {}) else 0'
}
members_equal() { [[ $(group_members "$1" 2>/dev/null) == "$2" ]]; }
group_spis() { espgw_json "$1" sas '" ".join(sorted(d["groups"].get("1", {}).get("members", [])))'; }
group_slots() { espgw_json "$1" sas '" ".join(d["groups"].get("1", {}).get("slots", []))'; }
# The group has N members again, and not the same ones as in $2.
replaced_and_back() { members_equal "$1" "$3" && [[ $(group_spis "$1" 2>/dev/null) != "$2" ]]; }

run_ecmp() {
  setup_topology
  start_ecmp_pair 3
  load_swanctl a
  check "espgw brought up 3 CHILD_SAs of 'net' by itself: an ECMP group of 3 on gwA" wait_until 20 members_equal a 3
  check "gwB has an SA group of 3 too" wait_until 5 members_equal b 3
  in_ns "$LANB" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$LANB' ss -Hltn 'sport = :5201' | grep -q ."
  # Flows, not packets, are hashed: with 8 flows one of 3 members gets none about one run
  # in 9 (3 x (2/3)^8); with 32 flows about once in 130,000 runs.
  in_ns "$LANA" timeout 20 iperf3 -c 10.2.0.2 -t 2 -P 32 -C cubic >/dev/null 2>&1 || true
  local spread
  spread=$(espgw_json a sas '" ".join(str(s["packets"]) for s in d["sas"].values() if s["direction"] == "out")')
  check "32 flows spread over all 3 outbound SAs (packets: $spread)" \
    /usr/bin/python3 -c 'import sys; p = [int(x) for x in sys.argv[1:]]; sys.exit(0 if len(p) == 3 and min(p) > 0 else 1)' $spread
  local received
  received=$(espgw_json b sas '" ".join(str(s["packets"]) for s in d["sas"].values() if s["direction"] == "in")')
  check "gwB accepted packets on every member (packets: $received)" \
    /usr/bin/python3 -c 'import sys; p = [int(x) for x in sys.argv[1:]]; sys.exit(0 if len(p) == 3 and min(p) > 0 else 1)' $received
  # A CHILD_SA rekey gives the new SA its predecessor's slot (its IKE_SA): the SPIs
  # change, the slots that flows are hashed onto do not, so no flow moves.
  local slots_before spis_before child
  slots_before=$(group_slots a) spis_before=$(group_spis a)
  child=$(swan a --list-sas --raw 2>/dev/null | grep -o 'net-[0-9]* {name=net uniqueid=[0-9]*' | head -1 | grep -o '[0-9]*$')
  swan a --rekey --child-id "$child" >/dev/null 2>&1 || true
  check "rekeying CHILD_SA #$child replaced an SA of the group" wait_until 10 replaced_and_back a "$spis_before" 3
  # Three slots before, the same three after (an empty answer must not match an empty one).
  check "and kept the group's slots, so no flow moved ($slots_before)" \
    test "$(wc -w <<<"$slots_before")" = 3 -a "$(group_slots a)" = "$slots_before"
  local ike before
  before=$(group_spis a)
  ike=$(swan a --list-sas --raw 2>/dev/null | grep -o 'uniqueid=[0-9]*' | head -1 | cut -d= -f2)
  swan a --terminate --ike-id "$ike" --timeout 10 >/dev/null 2>&1 || true
  check "after IKE_SA #$ike was terminated, espgw brought the group back to 3 with a new member" \
    wait_until 20 replaced_and_back a "$before" 3
  log "members before: $before; after: $(group_spis a)"
  check "ping through the group" ping_ok "$LANA" 10.2.0.2
}

trap 'on_failure_logs; stop_charons; cleanup' EXIT
case $SCENARIO in
  gcm-udp) CHARON_LOG_CHD=4 ESPGW_LOG_LEVEL=debug run_basic aes128gcm16 yes ;;
  chacha-raw) run_basic chacha20poly1305 no ;;
  cbc-sha256-raw) run_basic_cbc aes256-sha256 no aes-cbc-256/hmac-sha2-256-128 ;;
  cbc-sha1-udp) run_basic_cbc aes128-sha1 yes aes-cbc-128/hmac-sha1-96 ;;
  interop-matrix) run_interop_matrix ;;
  rekey) run_rekey ;;
  rekey-collision) run_rekey collide ;;
  restart) run_restart ;;
  ecmp) run_ecmp ;;
  ipv6) run_ipv6 ;;
  nat) run_nat ;;
  tfc) run_tfc ;;
  rekey-volume) run_rekey_volume ;;
  dpd) run_dpd ;;
  x509) run_examples x509 ;;
  psk-config) run_examples psk ;;
  *) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
log "$SCENARIO: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
