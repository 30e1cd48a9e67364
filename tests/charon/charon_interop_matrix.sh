# The interop matrix, sourced by charon_site_to_site.sh (scenario interop-matrix): espgw
# on gwA against strongSwan's kernel-libipsec on gwB (ESP we did not write) for every ESP
# transform both support, over ESP in UDP (kernel-libipsec has no raw ESP), one CHILD_SA
# after the other in one IKE_SA, traffic both ways through each. Prints the table that
# docs/strongswan.md shows.
#
# Each transform is a child of its own in gwA's swanctl.conf (named after its proposal);
# gwB's one child accepts all of them, so the initiator picks. Per transform: 10 pings of
# 1000 bytes each way (all answered), 2 MB of TCP each way (iperf3 -n, bounded in bytes, not
# seconds), both ends agree on the transform, and espgw dropped no ESP. queue-full drops
# (an outbound packet refused while its SA had the most packets in flight) are counted
# apart: the peer never sees them.

# Every ESP transform that espgw and kernel-libipsec (with charon's openssl plugin) share.
INTEROP_PROPOSALS=(aes128gcm16 aes256gcm16 chacha20poly1305
                   aes128-sha1 aes128-sha256 aes128-sha384 aes128-sha512
                   aes192-sha1 aes192-sha256 aes192-sha384 aes192-sha512
                   aes256-sha1 aes256-sha256 aes256-sha384 aes256-sha512)

# esp_drops split as "ESP QUEUE_FULL": every drop reason but queue-full, and queue-full.
esp_drops_split() {  # esp_drops_split SIDE
  espgwctl_on "$1" --json status | /usr/bin/python3 -c '
import json, re, sys
d = json.load(sys.stdin)
counts = [dict(s["drops"]) for s in d["list-sas"]["sas"].values()]
counts.append(dict(d["stats"]["engine-drops"]))
for line in open(sys.argv[1]):
    m = re.search(r"SA (?:out|in) spi \S+ removed after .*; drops (.*)$", line)
    if m:
        counts.append(dict(re.findall(r"([a-z-]+)=(\d+)", m.group(1))))
full = sum(int(c.get("queue-full", 0)) for c in counts)
print(sum(int(v) for c in counts for v in c.values()) - full, full)' "$WORK/espgw-$1.log"
}

# Pings answered out of 10 (1000 bytes each).
pings_answered() {  # pings_answered NS ADDRESS
  in_ns "$1" ping -c 10 -i 0.02 -s 1000 -W 2 "$2" 2>/dev/null |
    sed -n 's/.* \([0-9]*\) received.*/\1/p'
}

# Mbit/s of 2 MB of TCP from SENDER_NS (at ADDRESS) to RECEIVER_NS, at least 1 once all
# 2 MB arrived, 0 if they did not. The receiver runs the client (-R), so that the count is
# its own: a sending client's JSON has the server's count only when that report arrived.
tcp_2mb_mbps() {  # tcp_2mb_mbps SENDER_NS ADDRESS RECEIVER_NS
  local mbps=0
  in_ns "$1" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$1' ss -Hltn 'sport = :5201' | grep -q ."
  if in_ns "$3" timeout 15 iperf3 -c "$2" -n 2M -C cubic -R -J >"$WORK/iperf.json" 2>&1; then
    mbps=$(/usr/bin/python3 -c '
import json, sys
received = json.load(open(sys.argv[1]))["end"]["sum_received"]
print(max(1, round(received["bits_per_second"] / 1e6)) if received["bytes"] >= 2 << 20 else 0)' "$WORK/iperf.json")
  fi
  [[ -f $WORK/iperf.pid ]] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null || true
  rm -f "$WORK/iperf.pid"
  echo "$mbps"
}

# The transform kernel-libipsec's charon reports for its installed CHILD_SA.
libipsec_transform() {
  swan b --list-sas 2>/dev/null | grep -o 'ESP:[A-Za-z0-9_/-]*' | head -1 | cut -d: -f2
}

interop_matrix_children() {  # interop_matrix_children SIDE
  local local_ts remote_ts esp
  read -r local_ts remote_ts <<<"$(side_subnets "$1")"
  if [[ $1 == b ]]; then
    local all
    all=$(IFS=,; echo "${INTEROP_PROPOSALS[*]}")
    printf '      net {\n        local_ts = %s\n        remote_ts = %s\n        esp_proposals = %s\n      }\n' \
      "$local_ts" "$remote_ts" "$all"
    return
  fi
  for esp in "${INTEROP_PROPOSALS[@]}"; do
    printf '      %s {\n        local_ts = %s\n        remote_ts = %s\n        esp_proposals = %s\n        start_action = none\n      }\n' \
      "$esp" "$local_ts" "$remote_ts" "$esp"
  done
}

# The names espgw (espgwctl) and kernel-libipsec's charon (swanctl) give a proposal's
# transform, as "ESPGW PEER".
expected_transforms() {  # expected_transforms PROPOSAL
  local integ
  case $1 in
    aes128gcm16) echo "aes-gcm-128 AES_GCM_16-128" ;;
    aes256gcm16) echo "aes-gcm-256 AES_GCM_16-256" ;;
    chacha20poly1305) echo "chacha20-poly1305 CHACHA20_POLY1305" ;;
    aes*-sha*)
      case ${1#*-} in
        sha1) integ="sha1-96 SHA1_96" ;;
        sha256) integ="sha2-256-128 SHA2_256_128" ;;
        sha384) integ="sha2-384-192 SHA2_384_192" ;;
        sha512) integ="sha2-512-256 SHA2_512_256" ;;
      esac
      local bits=${1%%-*}
      bits=${bits#aes}
      echo "aes-cbc-$bits/hmac-${integ% *} AES_CBC-$bits/HMAC_${integ#* }"
      ;;
  esac
}

# One cell of the printed matrix: ✓ when both pings got all 10 answers, both transfers
# arrived, both ends ran the proposal's transform and espgw dropped no ESP; otherwise
# what failed.
matrix_cell() {  # matrix_cell AB BA TCP_AB TCP_BA DROPS FULL "ESPGW PEER" "EXPECTED"
  local problems=()
  [[ $1 == 10 ]] || problems+=("ping a→b ${1:-0}/10")
  [[ $2 == 10 ]] || problems+=("ping b→a ${2:-0}/10")
  (($3 > 0)) || problems+=("TCP a→b failed")
  (($4 > 0)) || problems+=("TCP b→a failed")
  [[ $5 == 0 ]] || problems+=("$5 ESP drops")
  [[ $7 == "$8" ]] || problems+=("transforms ${7// //}")
  local cell="✓"
  ((${#problems[@]} == 0)) || cell=$(IFS=,; echo "${problems[*]}")
  [[ $6 == 0 ]] || cell+=" ($6 queue-full)"
  echo "$cell"
}

# The matrix: a row per cipher, a column per integrity algorithm.
print_matrix() {  # print_matrix (reads MATRIX)
  echo "| ESP in UDP, espgw ⇄ kernel-libipsec | AEAD | HMAC-SHA1-96 | HMAC-SHA2-256-128 | HMAC-SHA2-384-192 | HMAC-SHA2-512-256 |"
  echo "|---|---|---|---|---|---|"
  echo "| AES-GCM-128 (16-byte ICV) | ${MATRIX[aes128gcm16]:-} | – | – | – | – |"
  echo "| AES-GCM-256 (16-byte ICV) | ${MATRIX[aes256gcm16]:-} | – | – | – | – |"
  echo "| ChaCha20-Poly1305 | ${MATRIX[chacha20poly1305]:-} | – | – | – | – |"
  local bits
  for bits in 128 192 256; do
    echo "| AES-CBC-$bits | – | ${MATRIX[aes$bits-sha1]:-} | ${MATRIX[aes$bits-sha256]:-} | ${MATRIX[aes$bits-sha384]:-} | ${MATRIX[aes$bits-sha512]:-} |"
  done
}

declare -A MATRIX=()

run_interop_matrix() {
  setup_topology
  start_espgw a
  start_charon a espgw
  start_charon b libipsec
  write_swanctl_children a yes "$(interop_matrix_children a)"
  write_swanctl_children b yes "$(interop_matrix_children b)"
  load_swanctl a
  load_swanctl b
  local esp transform peer ab ba tcp_ab tcp_ba drops full
  local before_drops=0 before_full=0 started=$SECONDS
  for esp in "${INTEROP_PROPOSALS[@]}"; do
    if ! swan a --initiate --child "$esp" --timeout 20 >"$WORK/swanctl-initiate.log" 2>&1; then
      fail "initiate $esp against kernel-libipsec"; cat "$WORK/swanctl-initiate.log"
      MATRIX[$esp]="not established"
      continue
    fi
    wait_until 5 sas_equal a 2 || true
    transform=$(sa_transforms a) peer=$(libipsec_transform)
    ab=$(pings_answered "$LANA" 10.2.0.2) ba=$(pings_answered "$LANB" 10.1.0.2)
    tcp_ab=$(tcp_2mb_mbps "$LANA" 10.1.0.2 "$LANB") tcp_ba=$(tcp_2mb_mbps "$LANB" 10.2.0.2 "$LANA")
    read -r drops full <<<"$(esp_drops_split a)"
    drops=$((drops - before_drops)) full=$((full - before_full))
    before_drops=$((before_drops + drops)) before_full=$((before_full + full))
    MATRIX[$esp]=$(matrix_cell "$ab" "$ba" "$tcp_ab" "$tcp_ba" "$drops" "$full" \
                               "${transform:-?} ${peer:-?}" "$(expected_transforms "$esp")")
    check "$esp: espgw runs ${transform:-nothing}, kernel-libipsec ${peer:-nothing}; pings $ab/10 and $ba/10, 2 MB TCP at $tcp_ab and $tcp_ba Mbit/s; $drops ESP drops ($full queue-full)" \
      test "${MATRIX[$esp]%% (*}" = "✓"
    swan a --terminate --child "$esp" --timeout 10 >/dev/null 2>&1 || true
    wait_until 5 sas_equal a 0 || fail "$esp: espgw kept SAs after the CHILD_SA was terminated"
  done
  check "all ${#INTEROP_PROPOSALS[@]} CHILD_SAs in one IKE_SA" \
    test "$(grep -c 'IKE_SA s2s\[[0-9]*\] established' "$WORK/charon-a.log")" = 1
  log "espgw (gwA) against kernel-libipsec (gwB), ${#INTEROP_PROPOSALS[@]} transforms in $((SECONDS - started)) s:"
  print_matrix
}
