# Shared by tests/netns/site_to_site.sh and tools/site_to_site_demo.sh: the four-namespace
# topology and two espgw daemons with static SAs.
#
#   lanA 10.1.0.2 fd00:1::2 ── gwA ══ WAN 192.0.2.0/24 2001:db8::/64 ══ gwB ── lanB 10.2.0.2 fd00:2::2
#
# The caller sets ESPGW (the daemon binary) and sources this file; namespaces are named per
# run and removed, with every process started here, by the EXIT trap.

RUN=eg$$
LANA=$RUN-lanA GWA=$RUN-gwA GWB=$RUN-gwB LANB=$RUN-lanB
WORK=$(mktemp -d /tmp/espgw-s2s.XXXXXX)
PIDS=()
EXTRA_NS=()  # namespaces a scenario adds; removed with the others
FAILURES=0
PASSES=0
declare -A CRYPTO_BACKEND_SIDE=()  # per side (a, b): ipsec-mb unless a scenario says otherwise
declare -A WORKERS_SIDE=()  # per side (a, b): the workers setting, 2 unless a scenario says otherwise

log() { printf '[s2s] %s\n' "$*"; }
pass() { PASSES=$((PASSES + 1)); log "PASS $*"; }
fail() { FAILURES=$((FAILURES + 1)); log "FAIL $*"; }
check() {  # check LABEL CMD...: a pass if CMD succeeds, a failure otherwise
  local label=$1
  shift
  if "$@"; then pass "$label"; else fail "$label"; fi
}

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "$LANA" "$GWA" "$GWB" "$LANB" ${EXTRA_NS[@]+"${EXTRA_NS[@]}"}; do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
ping_ok() { in_ns "$1" ping -c 3 -i 0.2 -W 2 "$2" >/dev/null 2>&1; }  # ping_ok NS ADDRESS

setup_topology() {
  for ns in "$LANA" "$GWA" "$GWB" "$LANB"; do
    ip netns add "$ns"
    in_ns "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad;
                       echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad'
    ip -n "$ns" link set lo up
  done
  ip -n "$LANA" link add eth0 type veth peer name lan0 netns "$GWA"
  ip -n "$LANB" link add eth0 type veth peer name lan0 netns "$GWB"
  ip -n "$GWA" link add wan0 type veth peer name wan0 netns "$GWB"
  for gw in "$GWA" "$GWB"; do
    in_ns "$gw" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward;
                       echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
  done
  ip -n "$LANA" addr add 10.1.0.2/16 dev eth0
  ip -n "$LANA" addr add fd00:1::2/64 dev eth0 nodad
  ip -n "$GWA" addr add 10.1.0.1/16 dev lan0
  ip -n "$GWA" addr add fd00:1::1/64 dev lan0 nodad
  ip -n "$GWA" addr add 192.0.2.1/24 dev wan0
  ip -n "$GWA" addr add 2001:db8::1/64 dev wan0 nodad
  ip -n "$GWB" addr add 192.0.2.2/24 dev wan0
  ip -n "$GWB" addr add 2001:db8::2/64 dev wan0 nodad
  ip -n "$GWB" addr add 10.2.0.1/16 dev lan0
  ip -n "$GWB" addr add fd00:2::1/64 dev lan0 nodad
  ip -n "$LANB" addr add 10.2.0.2/16 dev eth0
  ip -n "$LANB" addr add fd00:2::2/64 dev eth0 nodad
  for ns in "$LANA" "$LANB"; do ip -n "$ns" link set eth0 up; done
  for gw in "$GWA" "$GWB"; do ip -n "$gw" link set lan0 up; ip -n "$gw" link set wan0 up; done
  ip -n "$LANA" route add default via 10.1.0.1
  ip -n "$LANA" -6 route add default via fd00:1::1
  ip -n "$LANB" route add default via 10.2.0.1
  ip -n "$LANB" -6 route add default via fd00:2::1
}

# Every veth of the topology delivers in the order its packets were sent. By default a veth
# hands each packet to the backlog of the CPU that sent it, so packets one namespace sent
# from two CPUs (a TCP sender's pacing timer and its ACK processing, espgw's threads) can
# reach the other side in either order when the kernel defers one CPU's backlog. With GRO
# on the receiving end a veth takes its NAPI path instead (one queue per receive queue,
# processed in send order, like a NIC), but only for packets the kernel could aggregate:
# the sending end must not offer TSO (veth_skb_is_eligible_for_gro in drivers/net/veth.c),
# otherwise GRO on alone changes nothing (checked: `ethtool -S` counts rx_queue_0_xdp_packets
# only with TSO off on the peer). Costs throughput (the sender's stack cuts its segments
# before the veth), so only the scenarios that check order call it.
# That queue is a ring of 256 packets, and a veth without a qdisc (its default, noqueue)
# drops what finds it full: when the receiving CPU's softirq work is deferred for a few
# milliseconds (a busy or preempted vCPU), a burst through the tunnel then loses packets
# after the gateway (a fresh-clone CI run lost 105 between gwB's decryption and lanB;
# here the same showed as gwB lan0's `tx_dropped`, 42 in a run on an idle machine and 116
# with a real-time busy loop on one CPU). With a qdisc the kernel stops the queue instead
# and the qdisc holds the packets until the ring has room (drivers/net/veth.c, Linux 6.16
# and later; these VMs run 6.18), as a NIC's driver does; a FIFO keeps their order. With
# it, 18 runs of the charon rekey-collision test (5 with the busy loop) lost nothing at a
# veth or qdisc.
veths_keep_send_order() {
  local ns dev ns_dev
  for ns_dev in "$LANA:eth0" "$GWA:lan0" "$GWA:wan0" "$GWB:wan0" "$GWB:lan0" "$LANB:eth0"; do
    ns=${ns_dev%%:*} dev=${ns_dev#*:}
    in_ns "$ns" ethtool -K "$dev" tso off gro on
    tc -n "$ns" qdisc replace dev "$dev" root pfifo limit 10000
  done
}
# Packets NS's DEV took through its NAPI path (veths_keep_send_order), 0 when none.
veth_napi_packets() {
  in_ns "$1" ethtool -S "$2" 2>/dev/null | awk '$1 == "rx_queue_0_xdp_packets:" {n = $2} END {print n + 0}'
}

# wan_capture CLEAR_FILTER TRAFFIC_FN: captures gwB's WAN while TRAFFIC_FN runs and prints
# "ESP CLEAR": packets tshark decodes as ESP, and packets matching CLEAR_FILTER (inner
# addresses that must never be seen in clear). The capture is kept in $WORK/wan.pcap.
wan_capture() {
  local clear_filter=$1 traffic=$2 capture
  rm -f "$WORK/wan.pcap"
  in_ns "$GWB" tshark -q -i wan0 -a duration:6 -w "$WORK/wan.pcap" >/dev/null 2>&1 &
  capture=$!
  for _ in $(seq 1 50); do  # until tshark has started writing its capture
    [[ -s $WORK/wan.pcap ]] && break
    sleep 0.1
  done
  sleep 0.5
  "$traffic"
  wait "$capture" || true
  echo "$(tshark -r "$WORK/wan.pcap" -Y esp 2>/dev/null | wc -l)" \
    "$(tshark -r "$WORK/wan.pcap" -Y "$clear_filter" 2>/dev/null | wc -l)"
}

random_key() { od -An -tx1 -N20 /dev/urandom | tr -d ' \n'; }

# write_configs MODE FAMILY: espgw.conf and static SA files for both gateways.
write_configs() {
  local mode=$1 family=$2 a b udp=""
  if [[ $family == 4 ]]; then a=192.0.2.1 b=192.0.2.2; else a=2001:db8::1 b=2001:db8::2; fi
  [[ $mode == udp ]] && udp="udp 4500:4500"
  KEY_AB=$(random_key) KEY_BA=$(random_key) ADDR_A=$a ADDR_B=$b
  local key_ab=$KEY_AB key_ba=$KEY_BA
  local policies="policy out local LOCAL4 remote REMOTE4 action protect reqid 1
policy fwd local LOCAL4 remote REMOTE4 action protect reqid 1
policy out local LOCAL6 remote REMOTE6 action protect reqid 1
policy fwd local LOCAL6 remote REMOTE6 action protect reqid 1"
  cat >"$WORK/static-a.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
sa in spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
$(echo "$policies" | sed 's#LOCAL4#10.1.0.0/16#; s#REMOTE4#10.2.0.0/16#; s#LOCAL6#fd00:1::/64#; s#REMOTE6#fd00:2::/64#')
EOS
  cat >"$WORK/static-b.conf" <<EOS
sa out spi 0x2001 aes-gcm-128 key 0x$key_ba src $b dst $a $udp reqid 1
sa in spi 0x1001 aes-gcm-128 key 0x$key_ab src $a dst $b $udp reqid 1
$(echo "$policies" | sed 's#LOCAL4#10.2.0.0/16#; s#REMOTE4#10.1.0.0/16#; s#LOCAL6#fd00:2::/64#; s#REMOTE6#fd00:1::/64#')
EOS
  # They hold keys: espgw refuses a static file that group or others may read (umask 022
  # would leave them 0644). Lines appended later keep the mode.
  chmod 600 "$WORK/static-a.conf" "$WORK/static-b.conf"
  for side in a b; do
    local local_address=$a
    [[ $side == b ]] && local_address=$b
    cat >"$WORK/espgw-$side.conf" <<EOS
tun-name = espgw0
local-address = $local_address
state-dir = state-$side
static-sa-file = static-$side.conf
workers = ${WORKERS_SIDE[$side]:-2}
crypto-backend = ${CRYPTO_BACKEND_SIDE[$side]:-ipsec-mb}
log-level = info
EOS
  done
}

start_gateway() {  # start_gateway NS SIDE
  local ns=$1 side=$2
  # Not through in_ns: `$!` must be the process that becomes espgw (ip netns exec execs
  # it), not a subshell, so that signals reach the daemon.
  ip netns exec "$ns" "$ESPGW" -c "$WORK/espgw-$side.conf" >"$WORK/espgw-$side.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$side=$!"
  for _ in $(seq 1 50); do
    if ip -n "$ns" link show espgw0 2>/dev/null | grep -q 'UP'; then return 0; fi
    sleep 0.1
  done
  log "espgw in $ns did not come up:"; cat "$WORK/espgw-$side.log"
  return 1
}

# Every device of the path that dropped a packet, as "NS:DEV rx=N tx=N ring=N qdisc=N"
# (veths in NAPI mode count what their ring refused in ethtool -S; a qdisc counts its own),
# so that a loss outside ESP says where it happened; "none" when no device dropped one.
path_drops() {
  local ns_dev ns dev rx tx ring qdisc out=""
  for ns_dev in "$LANA:eth0" "$GWA:lan0" "$GWA:espgw0" "$GWA:wan0" "$GWB:wan0" "$GWB:espgw0" \
    "$GWB:lan0" "$LANB:eth0"; do
    ns=${ns_dev%%:*} dev=${ns_dev#*:}
    read -r rx tx < <(ip -n "$ns" -j -s link show dev "$dev" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)[0]["stats64"]
print(s["rx"]["dropped"], s["tx"]["dropped"])')
    ring=$(in_ns "$ns" ethtool -S "$dev" 2>/dev/null |
      awk '$1 ~ /^rx_queue_0_(drops|xdp_drops):$/ {n += $2} END {print n + 0}')
    qdisc=$(tc -n "$ns" -s -j qdisc show dev "$dev" | /usr/bin/python3 -c '
import json, sys
print(sum(q.get("drops", 0) for q in json.load(sys.stdin)))')
    if [[ ${rx:-0} != 0 || ${tx:-0} != 0 || ${ring:-0} != 0 || ${qdisc:-0} != 0 ]]; then
      out+="${ns#"$RUN-"}:$dev rx=$rx tx=$tx ring=$ring qdisc=$qdisc "
    fi
  done
  echo "${out:-none}"
}

# Has both gateways write their counters to their logs (SIGUSR1) and waits for it.
dump_counters() {
  local side pid
  for side in a b; do
    eval "pid=\${PID_$side:-}"
    [[ -n $pid ]] && kill -USR1 "$pid" 2>/dev/null || true
  done
  sleep 0.5
}

# For a failed check: where packets were dropped: each gateway's non-zero drop counters
# (from a fresh dump) and every device of the path that dropped one.
show_drops() {
  local side
  dump_counters
  for side in a b; do
    echo "--- gw${side^^} counters (non-zero drops):"
    # The last dump only (read backwards: from its "pipeline:" line to the one before it).
    tac "$WORK/espgw-$side.log" 2>/dev/null | awk '/pipeline: fences/ && seen {exit} /gateway drops:/ {seen = 1} {print}' | tac |
      grep -E ' drop [a-z-]+=[1-9]|gateway drops|kernel-drops=[1-9]|fence-timeouts=[1-9]' || true
  done
  echo "--- drops along the path: $(path_drops)"
}

# espgw's routes of both families in every table (its own table holds them), as `ip` lists them.
espgw_routes() {  # espgw_routes NS
  ip -n "$1" route show table all proto 245
  ip -n "$1" -6 route show table all proto 245
}

# stop_gateway NS SIDE: SIGTERM, then the TUN device and the routes through it are gone,
# and the fail-closed (prohibit) routes and the nftables table stay (docs/security_fail_closed.md).
stop_gateway() {
  local ns=$1 side=$2 pid routes
  eval "pid=\$PID_$side"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  routes=$(espgw_routes "$ns")  # (grep -q on a pipe would fail it with SIGPIPE under pipefail)
  if ip -n "$ns" link show espgw0 >/dev/null 2>&1; then fail "$ns: espgw0 still exists after SIGTERM"
  elif grep -q "dev espgw0" <<<"$routes"; then
    fail "$ns: routes through espgw0 left after SIGTERM"; echo "$routes"
  elif ! grep -q "^prohibit" <<<"$routes" || ! in_ns "$ns" nft list table inet espgw_espgw0 >/dev/null 2>&1; then
    fail "$ns: fail-closed routes or the nftables table gone after SIGTERM"; echo "$routes"
  else pass "$ns: SIGTERM removed espgw0 and its routes, kept the fail-closed routes and nft table"; fi
}

# --- Storms (tests/netns/storm.py): hostile datagrams at gwB while lanA pings lanB. Used by
# site_to_site.sh scenario storm and bench/storm_bench.sh; ESPGWCTL must be set. ---
STORM_SRC=192.0.2.66  # the attacker's address, on gwA's side of the WAN
# ESP in UDP over IPv4; gwB also gets a control socket, so that it owns UDP 500 and passes
# IKE on to a charon that is not attached (the path whose drops went uncounted).
storm_configs() {
  write_configs udp 4
  chmod 600 "$WORK"/static-*.conf  # they hold keys: espgw refuses them readable by others
  echo "control-socket = $WORK/espgw-b.ctl" >>"$WORK/espgw-b.conf"
  local side
  for side in a b; do  # two daemons on one host: a state directory each, where espgw has one
    mkdir -p "$WORK/state-$side"
    echo "state-dir = $WORK/state-$side" >>"$WORK/espgw-$side.conf"
    "$ESPGW" --check -c "$WORK/espgw-$side.conf" >/dev/null 2>&1 || sed -i '$d' "$WORK/espgw-$side.conf"
  done
  ip -n "$GWA" addr replace "$STORM_SRC/24" dev wan0
}
storm_snapshot() {  # storm_snapshot PREFIX: what tests/netns/storm_account.py reads
  "$ESPGWCTL" --socket "$WORK/espgw-b.ctl" --json stats >"$1.stats"
  "$ESPGWCTL" --socket "$WORK/espgw-b.ctl" --json sas >"$1.sas"
  in_ns "$GWB" cat /proc/net/snmp >"$1.snmp"
  ip -n "$GWB" -j -s link show dev wan0 >"$1.link"
}
vm_rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# storm_round NAME COUNT RATE: COUNT datagrams at RATE per second (0: unpaced) while lanA
# pings lanB 100 times a second; writes $WORK/NAME.storm (what was sent), NAME.ping and
# NAME.account (storm_account.py's JSON).
storm_round() {
  local name=$1 count=$2 rate=$3 ping_pid transmitted genuine
  storm_snapshot "$WORK/$name.before"
  # Not through in_ns: `$!` must be ping itself (ip netns exec execs it) for SIGINT, which
  # makes it print its summary and stop, to reach it. -w: a backstop.
  ip netns exec "$LANA" ping -q -i 0.01 -W 1 -w 600 10.2.0.2 >"$WORK/$name.ping" 2>&1 &
  ping_pid=$!
  PIDS+=("$ping_pid")  # the EXIT trap stops it if anything below fails
  sleep 0.3
  # Forged packets numbered just ahead of the genuine ones: those reach the ICV check.
  genuine=$(/usr/bin/python3 -c 'import json, sys
print(sum(int(s["packets"]) for s in json.load(open(sys.argv[1]))["sas"].values() if s["direction"] == "in"))' "$WORK/$name.before.sas")
  in_ns "$GWA" /usr/bin/python3 "$HERE/storm.py" --dst 192.0.2.2 --src "$STORM_SRC" \
    --count "$count" --rate "$rate" --forged-from "$((genuine + 1))" --oversize-max 65000 \
    --json "$WORK/$name.storm" >/dev/null
  sleep 0.3
  kill -INT "$ping_pid" 2>/dev/null || true
  wait "$ping_pid" 2>/dev/null || true
  local kept=() pid
  for pid in "${PIDS[@]}"; do [[ $pid == "$ping_pid" ]] || kept+=("$pid"); done
  PIDS=("${kept[@]}")  # gone: its number may be another process's by the EXIT trap
  sleep 1  # espgw finishes what it read, the reorder timer its gaps
  storm_snapshot "$WORK/$name.after"
  transmitted=$(sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p' "$WORK/$name.ping")
  /usr/bin/python3 "$HERE/storm_account.py" "$WORK/$name.before" "$WORK/$name.after" \
    "$WORK/$name.storm" "${transmitted:-0}" >"$WORK/$name.account"
}
# ping_loss NAME: "RECEIVED TRANSMITTED" of storm_round NAME's pings.
ping_loss() {
  sed -n 's/^\([0-9]*\) packets transmitted, \([0-9]*\) received.*/\2 \1/p' "$WORK/$1.ping"
}
