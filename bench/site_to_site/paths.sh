# shellcheck shell=bash
# Sourced by bench/site_to_site_bench.sh: the setup of each data path (plain routing, espgw,
# espgw with charon, libipsec, wireguard-go).
# ---------------------------------------------------------------- paths

setup_plain() {
  ip -n "$GWA" route add 10.2.0.0/16 via 192.0.2.2 dev wan0
  ip -n "$GWB" route add 10.1.0.0/16 via 192.0.2.1 dev wan0
  meta tunnel_interface ""
  meta description "plain routing over the WAN veth, no IPsec"
}

build_s2sbench() {  # build_s2sbench TARGET...: in build/s2sbench, the default build tree
  log "building $* in build/s2sbench"
  cmake -S "$ROOT" -B "$ROOT/build/s2sbench" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DESPGW_BUILD_TESTS=OFF -DESPGW_BUILD_BENCH=OFF >/dev/null
  ninja -C "$ROOT/build/s2sbench" -j2 "$@" >/dev/null
}

ensure_espgw() {  # espgw, and espgwctl to read its SA counters (cycles per ESP packet)
  if [[ ! -x $ESPGW || (! -x $ESPGWCTL && $ESPGW_BUILD_DIR == "$ROOT/build/s2sbench") ]]; then
    build_s2sbench espgw espgwctl || true  # without espgwctl the path still runs
  fi
  [[ -x $ESPGW ]] || return 1
  [[ -x $ESPGWCTL ]] ||
    log "espgwctl $ESPGWCTL missing (set ESPGWCTL): no ESP packet counts, no cycles per ESP packet"
  return 0
}

ensure_charon_tools() {  # espgw, espgwctl and the charon plugin, as absolute paths
  if [[ ! -x $ESPGW || ! -x $ESPGWCTL || ! -f $PLUGIN ]]; then
    build_s2sbench espgw espgwctl strongswan_espgw ||
      path_fail "building espgw, espgwctl and the charon plugin in build/s2sbench failed"
  fi
  [[ -x $ESPGW ]] || path_fail "espgw binary $ESPGW missing"
  [[ -x $ESPGWCTL ]] || path_fail "espgwctl binary $ESPGWCTL missing (set ESPGWCTL)"
  [[ -f $PLUGIN ]] || path_fail "charon plugin $PLUGIN missing (set PLUGIN)"
  # charon gets the plugin through LD_PRELOAD: an absolute path, whatever the cwd.
  ESPGW=$(readlink -f "$ESPGW") ESPGWCTL=$(readlink -f "$ESPGWCTL") PLUGIN=$(readlink -f "$PLUGIN")
}

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }

# The same espgw.conf for every espgw path; only where the SAs come from differs.
write_espgw_conf() {  # write_espgw_conf FILE LOCAL_ADDRESS SA_SOURCE_LINE [PATH_LINES]
  cat >"$1" <<EOS
tun-name = espgw0
tun-queues = $ESPGW_TUN_QUEUES
local-address = $2
state-dir = ${1%.conf}.state
$3
workers = ${PATH_WORKERS:-$ESPGW_WORKERS}
log-level = info
${4:-}
${ESPGW_EXTRA_CONF:-}
EOS
}

setup_espgw() {  # setup_espgw udp|raw [PATH_LINES]
  local mode=$1 path_lines=${2:-} udp="" a=192.0.2.1 b=192.0.2.2 key_ab key_ba side
  [[ $mode == udp ]] && udp="udp 4500:4500"
  ensure_espgw || path_fail "espgw binary $ESPGW missing and the build failed"
  key_ab=$(random_hex 20) key_ba=$(random_hex 20)
  cat >"$WORK/$PATH_NAME-static-a.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
sa in spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
policy out local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
policy fwd local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
EOS
  cat >"$WORK/$PATH_NAME-static-b.conf" <<EOS
sa out spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
sa in spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
policy out local 10.2.0.0/16 remote 10.1.0.0/16 action protect reqid 1
policy fwd local 10.2.0.0/16 remote 10.1.0.0/16 action protect reqid 1
EOS
  chmod 600 "$WORK/$PATH_NAME"-static-*.conf
  for side in a b; do
    local ns=$GWA local_address=$a
    [[ $side == b ]] && ns=$GWB local_address=$b
    # The control socket only to read the SA counters (ESP packets per run): no charon.
    local ctl=$WORK/$PATH_NAME-espgw-$side.ctl
    write_espgw_conf "$WORK/$PATH_NAME-espgw-$side.conf" "$local_address" \
      "static-sa-file = $PATH_NAME-static-$side.conf"$'\n'"control-socket = $ctl" "$path_lines"
    spawn "$WORK/$PATH_NAME-espgw-$side.log" ip netns exec "$ns" "$ESPGW" -c "$WORK/$PATH_NAME-espgw-$side.conf"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    GW_CTLS+=("gw${side^^}:$ctl")
    wait_for 5 sh -c "ip -n '$ns' link show espgw0 | grep -q UP" ||
      path_fail "espgw in gw${side^^} did not bring espgw0 up"
    wait_while_alive 5 "$SPAWNED" test -S "$ctl" ||
      path_fail "espgw in gw${side^^} did not open its control socket $ctl: $(first_error "$WORK/$PATH_NAME-espgw-$side.log")"
  done
  meta espgwctl "$ESPGWCTL"
  meta tunnel_interface espgw0
  if [[ -n $path_lines ]]; then
    meta description "espgw, static SAs, AES-128-GCM, ESP in UDP 4500, $path_lines, workers=${PATH_WORKERS:-$ESPGW_WORKERS}, tun-queues=$ESPGW_TUN_QUEUES"
  elif [[ $mode == udp ]]; then
    meta description "espgw, static SAs, AES-128-GCM, ESP in UDP 4500, workers=${PATH_WORKERS:-$ESPGW_WORKERS}, tun-queues=$ESPGW_TUN_QUEUES"
  else
    meta description "espgw, static SAs, AES-128-GCM, raw ESP (IP proto 50), workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
  fi
}

swan() {  # swanctl with a minimal plugin list (bench/strongswan/swanctl-client.conf)
  STRONGSWAN_CONF=$STRONGSWAN_TEMPLATES/swanctl-client.conf swanctl "$@"
}
# The same as a plain command, for `tracked` (which then tracks swanctl itself, so that an
# interrupt stops a pending --initiate at once).
SWANCTL=(env "STRONGSWAN_CONF=$STRONGSWAN_TEMPLATES/swanctl-client.conf" swanctl)

fill_template() {  # fill_template TEMPLATE OUT KEY=VALUE...
  local template=$1 out=$2 expr=() kv
  shift 2
  for kv in "$@"; do expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  sed "${expr[@]}" "$template" >"$out"
  if grep -q '@[A-Z_]*@' "$out"; then path_fail "unfilled placeholder in $out"; fi
}

setup_libipsec() {
  local psk side
  psk=$(random_hex 24)
  for side in a b; do
    local ns=$GWA local_addr=192.0.2.1 remote_addr=192.0.2.2 local_ts=10.1.0.0/16 remote_ts=10.2.0.0/16
    [[ $side == b ]] && ns=$GWB local_addr=192.0.2.2 remote_addr=192.0.2.1 local_ts=10.2.0.0/16 remote_ts=10.1.0.0/16
    local other=b
    [[ $side == b ]] && other=a
    local sock=$WORK/charon-$side.vici
    fill_template "$STRONGSWAN_TEMPLATES/strongswan.conf.in" "$WORK/strongswan-$side.conf" \
      "VICI_SOCKET=$sock" "LOG_FILE=$WORK/$PATH_NAME-charon-$side.log"
    fill_template "$STRONGSWAN_TEMPLATES/swanctl.conf.in" "$WORK/swanctl-$side.conf" \
      "LOCAL_ADDR=$local_addr" "REMOTE_ADDR=$remote_addr" "LOCAL_TS=$local_ts" "REMOTE_TS=$remote_ts" \
      "LOCAL_ID=gw$side.s2s.test" "REMOTE_ID=gw$other.s2s.test" "PSK=$psk"
    chmod 600 "$WORK/swanctl-$side.conf"
    # A private mount namespace with its own /run: charon's pid file path is compiled in.
    spawn "$WORK/$PATH_NAME-charon-$side.out" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs charon-run /run && exec env STRONGSWAN_CONF="$1" "$2"' sh "$WORK/strongswan-$side.conf" "$CHARON"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    wait_for 10 test -S "$sock" || path_fail "charon in gw${side^^} did not open its VICI socket $sock"
    swan --load-all --uri "unix://$sock" --file "$WORK/swanctl-$side.conf" >"$WORK/$PATH_NAME-swanctl-load-$side.log" 2>&1 ||
      path_fail "swanctl --load-all failed for gw${side^^}: $(tail -n 3 "$WORK/$PATH_NAME-swanctl-load-$side.log")"
  done
  swan --initiate --uri "unix://$WORK/charon-a.vici" --child net --timeout 20 >"$WORK/$PATH_NAME-swanctl-initiate.log" 2>&1 ||
    path_fail "swanctl --initiate failed: $(tail -n 3 "$WORK/$PATH_NAME-swanctl-initiate.log")"
  wait_for 5 ip -n "$GWA" link show ipsec0 || path_fail "kernel-libipsec created no ipsec0 in gwA"
  # charon installs the routes to the remote subnet through ipsec0 in table 220.
  wait_for 5 sh -c "ip -n '$GWA' route show table 220 | grep -q '10.2.0.0/16.*ipsec0'" ||
    path_fail "no route to 10.2.0.0/16 via ipsec0 in gwA table 220: $(ip -n "$GWA" route show table all | grep -v local)"
  wait_for 5 sh -c "ip -n '$GWB' route show table 220 | grep -q '10.1.0.0/16.*ipsec0'" ||
    path_fail "no route to 10.1.0.0/16 via ipsec0 in gwB table 220"
  meta routes_gwA "$(ip -n "$GWA" route show table 220 | tr '\n' ';')"
  meta routes_gwB "$(ip -n "$GWB" route show table 220 | tr '\n' ';')"
  swan --list-sas --uri "unix://$WORK/charon-a.vici" >"$WORK/$PATH_NAME-list-sas-before.txt" 2>&1 || true
  meta tunnel_interface ipsec0
  meta description "strongSwan $($CHARON --version 2>&1 | awk '{print $NF}' | head -1) charon + kernel-libipsec, IKEv2 PSK, AES-128-GCM, ESP in UDP 4500 (encap = yes)"
}

# espgw under charon: each gateway runs espgw (control socket, no SAs of its own) and a
# charon with the espgw plugin, which hands espgw the SAs and carries IKE through espgw's
# WAN socket. The tunnel is the libipsec path's: same swanctl.conf, same PSK IKEv2,
# AES-128-GCM, encap = yes, brought up with swanctl --initiate.
setup_espgw_charon() {  # setup_espgw_charon [MEMBERS]: MEMBERS > 1 makes an ECMP group
  local members=${1:-1} psk side
  ensure_charon_tools
  psk=$(random_hex 24)
  for side in a b; do
    local ns=$GWA local_addr=192.0.2.1 remote_addr=192.0.2.2 local_ts=10.1.0.0/16 remote_ts=10.2.0.0/16 other=b
    [[ $side == b ]] && ns=$GWB local_addr=192.0.2.2 remote_addr=192.0.2.1 local_ts=10.2.0.0/16 remote_ts=10.1.0.0/16 other=a
    local ctl=$WORK/$PATH_NAME-espgw-$side.ctl sock=$WORK/$PATH_NAME-charon-$side.vici
    local ecmp_conf="" reuse_ikesa=yes
    if ((members > 1)) && [[ $side == a ]]; then
      ecmp_conf=$'\n'"charon-vici = unix://$sock"$'\n'"parallel-child = net $members"
      reuse_ikesa=no
    fi
    write_espgw_conf "$WORK/$PATH_NAME-espgw-$side.conf" "$local_addr" "control-socket = $ctl$ecmp_conf"
    spawn "$WORK/$PATH_NAME-espgw-$side.log" ip netns exec "$ns" "$ESPGW" -c "$WORK/$PATH_NAME-espgw-$side.conf"
    GW_PIDS+=("gw${side^^}:$SPAWNED")
    GW_CTLS+=("gw${side^^}:$ctl")
    wait_while_alive 10 "$SPAWNED" test -S "$ctl" ||
      path_fail "espgw in gw${side^^} did not open its control socket $ctl: $(first_error "$WORK/$PATH_NAME-espgw-$side.log")"
    fill_template "$STRONGSWAN_TEMPLATES/strongswan-espgw.conf.in" "$WORK/$PATH_NAME-strongswan-$side.conf" \
      "ESPGW_SOCKET=$ctl" "VICI_SOCKET=$sock" "LOG_FILE=$WORK/$PATH_NAME-charon-$side.log" \
      "REUSE_IKESA=$reuse_ikesa"
    fill_template "$STRONGSWAN_TEMPLATES/swanctl.conf.in" "$WORK/$PATH_NAME-swanctl-$side.conf" \
      "LOCAL_ADDR=$local_addr" "REMOTE_ADDR=$remote_addr" "LOCAL_TS=$local_ts" "REMOTE_TS=$remote_ts" \
      "LOCAL_ID=gw$side.s2s.test" "REMOTE_ID=gw$other.s2s.test" "PSK=$psk"
    chmod 600 "$WORK/$PATH_NAME-swanctl-$side.conf"
    # A private mount namespace with its own /run (charon's pid file path is compiled in);
    # the plugin through LD_PRELOAD, so nothing is installed on the system.
    spawn "$WORK/$PATH_NAME-charon-$side.out" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs charon-run /run && exec env STRONGSWAN_CONF="$1" LD_PRELOAD="$2" "$3"' \
      sh "$WORK/$PATH_NAME-strongswan-$side.conf" "$PLUGIN" "$CHARON"
    GW_PIDS+=("charon${side^^}:$SPAWNED")
    # Answering on VICI, not only the socket file: charon creates it before it may abort
    # (e.g. when the plugin is missing: "unmet dependency: CUSTOM:socket").
    wait_while_alive 10 "$SPAWNED" swan --stats --uri "unix://$sock" ||
      path_fail "charon in gw${side^^} is not answering on $sock: $(first_error "$WORK/$PATH_NAME-charon-$side.log")"
    tracked "${SWANCTL[@]}" --load-all --uri "unix://$sock" --file "$WORK/$PATH_NAME-swanctl-$side.conf" \
      >"$WORK/$PATH_NAME-swanctl-load-$side.log" 2>&1 ||
      path_fail "swanctl --load-all failed for gw${side^^}: $(first_error "$WORK/$PATH_NAME-swanctl-load-$side.log")"
  done
  if ((members > 1)); then
    # espgw brings the group up by itself once charon has the config (parallel-child).
    wait_for 30 ecmp_members_at_least "$WORK/$PATH_NAME-espgw-a.ctl" "$members" ||
      path_fail "espgw in gwA did not bring up $members CHILD_SAs of 'net': $(first_error "$WORK/$PATH_NAME-espgw-a.log")"
    meta ecmp_members "$members"
  else
    tracked "${SWANCTL[@]}" --initiate --uri "unix://$WORK/$PATH_NAME-charon-a.vici" --child net --timeout 20 \
      >"$WORK/$PATH_NAME-swanctl-initiate.log" 2>&1 ||
      path_fail "swanctl --initiate failed: $(first_error "$WORK/$PATH_NAME-swanctl-initiate.log")"
  fi
  # espgw installs the routes to the remote subnet itself, through espgw0 (proto 245).
  wait_for 5 sh -c "ip -n '$GWA' route show table all proto 245 | grep -q '10.2.0.0/16.*espgw0'" ||
    path_fail "espgw installed no route to 10.2.0.0/16 via espgw0 in gwA: $(ip -n "$GWA" route show table all | grep -v local)"
  wait_for 5 sh -c "ip -n '$GWB' route show table all proto 245 | grep -q '10.1.0.0/16.*espgw0'" ||
    path_fail "espgw installed no route to 10.1.0.0/16 via espgw0 in gwB"
  meta routes_gwA "$(ip -n "$GWA" route show table all proto 245 | tr '\n' ';')"
  meta routes_gwB "$(ip -n "$GWB" route show table all proto 245 | tr '\n' ';')"
  # The CHILD_SA as charon installed it (SPIs, ESP proposal, encapsulation), for the JSON.
  for side in a b; do
    swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-$side.vici" --raw \
      >"$PATH_RESULTS/list-sas-before-gw${side^^}.raw" 2>&1 || true
  done
  swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-a.vici" >"$PATH_RESULTS/list-sas-before-gwA.txt" 2>&1 || true
  meta tunnel_interface espgw0
  meta managed_by "charon: strongSwan $($CHARON --version 2>&1 | awk '{print $NF}' | head -1) with the espgw plugin (LD_PRELOAD), tunnel up by swanctl --initiate"
  meta charon_plugins "$(sed -n 's/^ *load = //p' "$STRONGSWAN_TEMPLATES/strongswan-espgw.conf.in" | head -1)"
  meta plugin "$PLUGIN"
  meta espgwctl "$ESPGWCTL"
  meta espgw "$ESPGW"
  meta description "espgw under strongSwan charon (espgw plugin), IKEv2 PSK, AES-128-GCM, ESP in UDP 4500 (encap = yes), $members CHILD_SA(s) in the ECMP group, workers=$ESPGW_WORKERS, tun-queues=$ESPGW_TUN_QUEUES"
}

ecmp_members_at_least() {  # ecmp_members_at_least CONTROL_SOCKET N: an SA group of >= N members
  "$ESPGWCTL" --socket "$1" --json sas 2>/dev/null | "$PYTHON" -c '
import json, sys
groups = json.load(sys.stdin).get("groups", {})
sys.exit(0 if any(len(g.get("members", [])) >= int(sys.argv[1]) for g in groups.values()) else 1)' "$2"
}

# After the measurements: what charon and espgw hold now (the SA byte and packet counters
# charon reads from espgw, and espgw's own counters and drop reasons per SA and engine).
collect_espgw_charon() {
  local side
  for side in a b; do
    swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-$side.vici" --raw \
      >"$PATH_RESULTS/list-sas-after-gw${side^^}.raw" 2>&1 || true
    tracked "$ESPGWCTL" --socket "$WORK/$PATH_NAME-espgw-$side.ctl" --json status \
      >"$PATH_RESULTS/espgwctl-status-gw${side^^}.json" 2>"$PATH_RESULTS/espgwctl-status-gw${side^^}.err" || true
  done
  swan --list-sas --uri "unix://$WORK/$PATH_NAME-charon-a.vici" >"$PATH_RESULTS/list-sas-after-gwA.txt" 2>&1 || true
}

setup_wireguard() {
  local side priv_a priv_b pub_a pub_b
  priv_a=$(wg genkey) priv_b=$(wg genkey)
  pub_a=$(wg pubkey <<<"$priv_a") pub_b=$(wg pubkey <<<"$priv_b")
  for side in a b; do
    local ns=$GWA priv=$priv_a peer=$pub_b endpoint=192.0.2.2 remote_lan=10.2.0.0/16
    [[ $side == b ]] && ns=$GWB priv=$priv_b peer=$pub_a endpoint=192.0.2.1 remote_lan=10.1.0.0/16
    printf '%s\n' "$priv" >"$WORK/wg-$side.key"
    chmod 600 "$WORK/wg-$side.key"
    # wireguard-go's UAPI socket path is fixed (/var/run/wireguard): a private /run each.
    spawn "$WORK/$PATH_NAME-wireguard-go-$side.log" ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs wg-run /run && exec env WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go -f wg0'
    local pid=$SPAWNED
    GW_PIDS+=("gw${side^^}:$pid")
    wait_for 5 nsenter -t "$pid" -m test -S /run/wireguard/wg0.sock ||
      path_fail "wireguard-go in gw${side^^} did not open its UAPI socket"
    # `wg` must see the same private /run: enter the daemon's mount and network namespaces.
    nsenter -t "$pid" -m -n wg set wg0 private-key "$WORK/wg-$side.key" listen-port 51820 \
      peer "$peer" endpoint "$endpoint:51820" allowed-ips "$remote_lan" ||
      path_fail "wg set failed in gw${side^^}"
    ip -n "$ns" link set wg0 up
    ip -n "$ns" route add "$remote_lan" dev wg0
  done
  meta tunnel_interface wg0
  meta description "wireguard-go $(wireguard-go --version 2>/dev/null | awk 'NR==1{print $2}') (Debian), ChaCha20-Poly1305, UDP 51820"
}
