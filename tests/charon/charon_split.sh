#!/usr/bin/env bash
# Opt-in per connection: one gateway runs two charons, one whose data plane is espgw (the
# shipped configs/split/ files, only socket paths and logging changed) and one with strongSwan's kernel-libipsec
# standing in for the kernel's IPsec (these machines' kernels have no ESP). Each serves its
# own connection to the same peer, and each connection's traffic goes through its own data
# plane.
#
#   lanA 10.1.0.2  ─┐                                       ┌─ lanB 10.2.0.2
#        10.11.0.2 ─┴ gwA ══ WAN ═══════════════════════ gwB ┴─      10.12.0.2
#          192.0.2.11 UDP 1500/14500: espgw + charon-espgw   "moved"  10.1/16 <-> 10.2/16
#          192.0.2.1  UDP 500/4500:   charon + kernel-libipsec "legacy" 10.11/16 <-> 10.12/16
#   gwB: one charon (kernel-libipsec) with both connections.
#
# Checks: both tunnels up at once; pings both ways and TCP through each; espgwctl lists
# the moved connection's SAs and nothing of the other; each charon's swanctl --list-sas
# (through its own VICI socket) shows its own CHILD_SA only, with counters that grew
# with its traffic alone; espgw holds UDP 1500/14500 on its address, the kernel's charon
# 500/4500 on every address; charon-espgw's pid file stayed in its private /run; espgw
# restarted in a new runtime directory gets charon-espgw's SAs back; the peer can
# initiate the moved connection.
#
# Usage: charon_split.sh ESPGW ESPGWCTL PLUGIN
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW ESPGWCTL PLUGIN}")
ESPGWCTL=$(readlink -f "$2")
PLUGIN=$(readlink -f "$3")

HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/charon_lib.sh"

SPLIT=$CONFIGS_DIR/split
# charon-espgw sees only the directories under /run it is told to keep; this run's
# stand-ins for /run/espgw (espgw's control socket) and /run/charon-espgw (its VICI socket).
ESPGW_RUNDIR=/run/$RUN.espgw
CHARON_RUNDIR=/run/$RUN.charon-espgw
ESPGW_CTL=$ESPGW_RUNDIR/control.sock
ESPGW_VICI=unix://$CHARON_RUNDIR/charon.vici
SPLIT_PID="" SPLIT_ESPGW_PID=""

on_exit() {
  if ((FAILURES > 0)); then
    for f in "$WORK"/espgw-split.log "$WORK"/charon-*.log; do
      [[ -f $f ]] && { echo "----- $(basename "$f") (last 30 lines)"; tail -30 "$f"; }
    done
  fi
  [[ -n $SPLIT_PID ]] && CHARON_PID[split]=$SPLIT_PID
  stop_charons
  cleanup
  rm -rf "$ESPGW_RUNDIR" "$CHARON_RUNDIR"
}
trap on_exit EXIT

swan_espgw() { swanctl "$@" --uri "$ESPGW_VICI"; }
swan_quiet() { swan "$@" >>"$WORK/swanctl-kernel.out" 2>&1; }
swan_espgw_quiet() { swan_espgw "$@" >>"$WORK/swanctl-espgw.out" 2>&1; }
espgwctl_split() { "$ESPGWCTL" --socket "$ESPGW_CTL" "$@"; }

# The legacy connection's subnets and espgw's second address, on top of the usual topology.
add_legacy_addresses() {
  ip -n "$GWA" addr add 192.0.2.11/24 dev wan0
  ip -n "$LANA" addr add 10.11.0.2/16 dev eth0
  ip -n "$GWA" addr add 10.11.0.1/16 dev lan0
  ip -n "$LANB" addr add 10.12.0.2/16 dev eth0
  ip -n "$GWB" addr add 10.12.0.1/16 dev lan0
}

# espgw from configs/split/espgw.conf, only the control socket and state directory moved.
start_split_espgw() {
  sed -e "s#^control-socket = .*#control-socket = $ESPGW_CTL#" \
      -e "s#^state-dir = .*#state-dir = $WORK/state-split#" \
      "$SPLIT/espgw.conf" >"$WORK/espgw-split.conf"
  ip netns exec "$GWA" "$ESPGW" -c "$WORK/espgw-split.conf" >>"$WORK/espgw-split.log" 2>&1 &
  SPLIT_ESPGW_PID=$!
  PIDS+=($!)
  wait_until 10 test -S "$ESPGW_CTL" || { log "espgw did not open $ESPGW_CTL"; cat "$WORK/espgw-split.log"; return 1; }
}

# charon-espgw, the shipped script with the shipped strongswan-espgw.conf; the test's
# file includes it and changes only the socket paths and logging.
start_split_charon() {
  cat >"$WORK/strongswan-espgw.conf" <<EOS
include $SPLIT/strongswan-espgw.conf
charon {
  plugins {
    espgw {
      socket = unix://$ESPGW_CTL
    }
    vici {
      socket = $ESPGW_VICI
    }
  }
  filelog {
    charon {
      path = $WORK/charon-espgw.log
      time_format = %H:%M:%S
      default = 1
      knl = 2
      flush_line = yes
    }
  }
  syslog {
    daemon {
      default = -1
    }
  }
}
EOS
  ip netns exec "$GWA" env LD_PRELOAD="$PLUGIN" CHARON_ESPGW_RUNDIR="$CHARON_RUNDIR" \
    CHARON_ESPGW_KEEP="$ESPGW_RUNDIR $CHARON_RUNDIR" \
    "$SPLIT/charon-espgw" "$WORK/strongswan-espgw.conf" >>"$WORK/charon-espgw.out" 2>&1 &
  SPLIT_PID=$!
  PIDS+=($!)
  wait_until 10 test -S "${ESPGW_VICI#unix://}" ||
    { log "charon-espgw did not open its VICI socket"; cat "$WORK/charon-espgw.out"; tail -20 "$WORK/charon-espgw.log"; return 1; }
}

# gwA's kernel-side swanctl.conf (the system charon's: one connection, not moved) and
# gwB's, with both connections: "moved" to espgw's address and NAT-T port (the peer side
# of configs/split/swanctl/swanctl-espgw.conf), "legacy" to the standard ports.
write_legacy_swanctl() {
  local legacy_psk=$1 moved_psk=$2
  cat >"$WORK/swanctl-a-kernel.conf" <<EOS
connections {
  legacy {
    version = 2
    local_addrs = 192.0.2.1
    remote_addrs = 192.0.2.2
    proposals = aes128gcm16-prfsha256-x25519
    encap = yes
    mobike = no
    local {
      auth = psk
      id = gwa-legacy.espgw.test
    }
    remote {
      auth = psk
      id = gwb.espgw.test
    }
    children {
      legacy {
        local_ts = 10.11.0.0/16
        remote_ts = 10.12.0.0/16
        esp_proposals = aes128gcm16
      }
    }
  }
}
secrets {
  ike-legacy {
    id-a = gwa-legacy.espgw.test
    id-b = gwb.espgw.test
    secret = 0x$legacy_psk
  }
}
EOS
  cat >"$WORK/swanctl-b.conf" <<EOS
connections {
  moved {
    version = 2
    local_addrs = 192.0.2.2
    remote_addrs = 192.0.2.11
    local_port = 4500
    remote_port = 14500
    proposals = aes128gcm16-prfsha256-x25519
    encap = yes
    mobike = no
    local {
      auth = psk
      id = gwb.espgw.test
    }
    remote {
      auth = psk
      id = gwa-espgw.espgw.test
    }
    children {
      net {
        local_ts = 10.2.0.0/16
        remote_ts = 10.1.0.0/16
        esp_proposals = aes128gcm16
      }
    }
  }
  legacy {
    version = 2
    local_addrs = 192.0.2.2
    remote_addrs = 192.0.2.1
    proposals = aes128gcm16-prfsha256-x25519
    encap = yes
    mobike = no
    local {
      auth = psk
      id = gwb.espgw.test
    }
    remote {
      auth = psk
      id = gwa-legacy.espgw.test
    }
    children {
      legacy {
        local_ts = 10.12.0.0/16
        remote_ts = 10.11.0.0/16
        esp_proposals = aes128gcm16
      }
    }
  }
}
secrets {
  ike-moved {
    id-a = gwa-espgw.espgw.test
    id-b = gwb.espgw.test
    secret = 0x$moved_psk
  }
  ike-legacy {
    id-a = gwa-legacy.espgw.test
    id-b = gwb.espgw.test
    secret = 0x$legacy_psk
  }
}
EOS
  chmod 600 "$WORK/swanctl-a-kernel.conf" "$WORK/swanctl-b.conf"
}

# The INSTALLED CHILD_SAs a charon reports through one VICI socket, by name, sorted.
installed_children() {  # installed_children URI
  swanctl --list-sas --raw --uri "$1" 2>/dev/null |
    grep -o '[a-z]*-[0-9]* {name=[a-z]* [^}]*state=INSTALLED' | grep -o 'name=[a-z]*' |
    cut -d= -f2 | sort | tr '\n' ' ' | sed 's/ $//'
}

# Packets (in + out) that a charon's CHILD_SA NAME has carried, from swanctl --list-sas.
child_packets() {  # child_packets URI NAME
  swanctl --list-sas --raw --uri "$1" 2>/dev/null | /usr/bin/python3 -c '
import re, sys
name = sys.argv[1]
total = 0
for child in re.findall(r"\{name=" + name + r" [^{}]*\}", sys.stdin.read()):
    total += sum(int(v) for v in re.findall(r"packets-(?:in|out)=(\d+)", child))
print(total)' "$2"
}

# Packets through espgw's SAs (both directions), from espgwctl --json.
espgw_packets() {
  espgwctl_split --json sas | /usr/bin/python3 -c '
import json, sys
print(sum(int(s["packets"]) for s in json.load(sys.stdin)["sas"].values()))'
}

# espgw's SAs from charon as "DIRECTION:SRC:PORT>DST:PORT", sorted.
espgw_charon_sas() {
  espgwctl_split --json sas | /usr/bin/python3 -c '
import json, sys
sas = [s for s in json.load(sys.stdin)["sas"].values() if s["origin"] == "charon"]
print(" ".join(sorted("%s:%s:%s>%s:%s" % (s["direction"], s["src"], s.get("src-port", "-"),
                                          s["dst"], s.get("dst-port", "-")) for s in sas)))'
}

pings_ok() {  # pings_ok NS SRC DST: 10 pings of 1000 bytes, all answered
  ip netns exec "$1" ping -c 10 -i 0.05 -s 1000 -W 2 -I "$2" "$3" >/dev/null 2>&1
}

# The UDP sockets bound in gwA as "ADDRESS:PORT PROCESS" lines.
udp_owners() {
  ip netns exec "$GWA" ss -Hulnp | awk '{ match($0, /users:\(\("[^"]*"/); print $4, substr($0, RSTART + 9, RLENGTH - 10) }' | sort -u
}

espgw_has_no_sas() { [[ -z $(espgw_charon_sas) ]]; }
espgw_sas_equal() { [[ $(espgw_charon_sas | wc -w) == "$1" ]]; }

tcp_ok() {  # tcp_ok SRC DST: 4 MB from lanA's SRC to DST in lanB, bounded in time
  ip netns exec "$LANB" iperf3 -s -1 -D -I "$WORK/iperf.pid" --logfile "$WORK/iperf-server.log"
  wait_until 5 sh -c "ip netns exec '$LANB' ss -Hltn 'sport = :5201' | grep -q ."
  local ok=0
  ip netns exec "$LANA" timeout 15 iperf3 -B "$1" -c "$2" -n 4M -C cubic >/dev/null 2>&1 && ok=1
  [[ -f $WORK/iperf.pid ]] && kill "$(cat "$WORK/iperf.pid")" 2>/dev/null || true
  rm -f "$WORK/iperf.pid"
  ((ok == 1))
}

has_lines() {  # has_lines TEXT LINE...: every LINE is a line of TEXT
  local text=$1 line
  shift
  for line in "$@"; do grep -qxF "$line" <<<"$text" || return 1; done
}

run_split() {
  mkdir -m 700 "$ESPGW_RUNDIR"
  setup_topology
  add_legacy_addresses
  start_split_espgw
  start_split_charon
  start_charon a libipsec
  start_charon b libipsec
  local moved_psk
  moved_psk=$(sed -n 's/^[[:space:]]*secret = 0x\([0-9a-f]*\)$/\1/p' "$SPLIT/swanctl/swanctl-espgw.conf")
  write_legacy_swanctl "$PSK" "$moved_psk"
  sed 's/^\([[:space:]]*start_action = \)start\b/\1none/' "$SPLIT/swanctl/swanctl-espgw.conf" \
    >"$WORK/swanctl-espgw.conf"
  chmod 600 "$WORK/swanctl-espgw.conf"
  check "charon-espgw loads configs/split/swanctl/swanctl-espgw.conf through its own VICI socket" \
    swan_espgw_quiet --load-all --file "$WORK/swanctl-espgw.conf"
  check "the kernel's charon on gwA loads its own connection" load_swanctl a "$WORK/swanctl-a-kernel.conf"
  check "gwB loads both connections" load_swanctl b "$WORK/swanctl-b.conf"

  local owners
  owners=$(udp_owners)
  log "UDP sockets on gwA:"; sed 's/^/    /' <<<"$owners"
  check "espgw holds UDP 1500 and 14500 on 192.0.2.11" \
    has_lines "$owners" "192.0.2.11:1500 espgw" "192.0.2.11:14500 espgw"
  check "the kernel's charon holds UDP 500 and 4500 on every address" \
    has_lines "$owners" "0.0.0.0:500 charon" "0.0.0.0:4500 charon"

  check "swanctl --initiate --child net through charon-espgw (moved connection)" \
    swan_espgw_quiet --initiate --child net --timeout 20
  check "swanctl --initiate --child legacy through the kernel's charon" \
    swan_quiet a --initiate --child legacy --timeout 20
  check "charon-espgw's VICI socket lists only 'net' installed ($(installed_children "$ESPGW_VICI"))" \
    test "$(installed_children "$ESPGW_VICI")" = net
  check "the kernel charon's VICI socket lists only 'legacy' installed ($(installed_children "$(vici_uri a)"))" \
    test "$(installed_children "$(vici_uri a)")" = legacy
  check "gwB has both installed ($(installed_children "$(vici_uri b)"))" \
    test "$(installed_children "$(vici_uri b)")" = "legacy net"
  local sas
  sas=$(espgw_charon_sas)
  check "espgwctl lists the moved connection's 2 SAs, 192.0.2.11:14500 <-> 192.0.2.2:4500 ($sas)" \
    test "$sas" = "in:192.0.2.2:4500>192.0.2.11:14500 out:192.0.2.11:14500>192.0.2.2:4500"

  local espgw_before legacy_before espgw_after legacy_after
  espgw_before=$(espgw_packets) legacy_before=$(child_packets "$(vici_uri a)" legacy)
  check "ping lanA -> lanB through espgw (10.1.0.2 -> 10.2.0.2)" pings_ok "$LANA" 10.1.0.2 10.2.0.2
  check "ping lanB -> lanA through espgw" pings_ok "$LANB" 10.2.0.2 10.1.0.2
  sleep 0.3
  espgw_after=$(espgw_packets) legacy_after=$(child_packets "$(vici_uri a)" legacy)
  check "espgw carried those pings ($((espgw_after - espgw_before)) packets; 40 expected), the kernel's SA none ($((legacy_after - legacy_before)))" \
    test $((espgw_after - espgw_before)) -eq 40 -a "$legacy_after" -eq "$legacy_before"

  espgw_before=$espgw_after legacy_before=$legacy_after
  check "ping lanA -> lanB through kernel-libipsec (10.11.0.2 -> 10.12.0.2)" pings_ok "$LANA" 10.11.0.2 10.12.0.2
  check "ping lanB -> lanA through kernel-libipsec" pings_ok "$LANB" 10.12.0.2 10.11.0.2
  sleep 0.3
  espgw_after=$(espgw_packets) legacy_after=$(child_packets "$(vici_uri a)" legacy)
  check "kernel-libipsec carried those ($((legacy_after - legacy_before)) packets; 40 expected), espgw none ($((espgw_after - espgw_before)))" \
    test $((legacy_after - legacy_before)) -eq 40 -a "$espgw_after" -eq "$espgw_before"
  local espgw_child
  espgw_child=$(child_packets "$ESPGW_VICI" net)
  check "charon-espgw's list-sas counters come from espgw ($espgw_child packets = espgwctl's $espgw_after)" \
    test "$espgw_child" = "$espgw_after"

  check "charon-espgw wrote its pid file into its private /run, not the host's" \
    sh -c "nsenter -t '$SPLIT_PID' -m cat /run/charon.pid | grep -qx '$SPLIT_PID' &&
           ! grep -qsx '$SPLIT_PID' /run/charon.pid"
  check "TCP lanA -> lanB through espgw (iperf3, 4 MB)" tcp_ok 10.1.0.2 10.2.0.2
  check "TCP lanA -> lanB through kernel-libipsec (iperf3, 4 MB)" tcp_ok 10.11.0.2 10.12.0.2
  # (without the plugin-loading lines swanctl prints on every start)
  log "swanctl --list-sas --uri $ESPGW_VICI:"; swan_espgw --list-sas 2>&1 | grep -v "^plugin '" | sed 's/^/    /'
  log "swanctl --list-sas --uri $(vici_uri a):"; swan a --list-sas 2>&1 | grep -v "^plugin '" | sed 's/^/    /'

  swan_espgw_quiet --terminate --ike moved --timeout 10 || true
  check "terminating the moved connection leaves espgw without SAs" \
    wait_until 5 espgw_has_no_sas
  check "and leaves the legacy tunnel up" pings_ok "$LANA" 10.11.0.2 10.12.0.2
  # espgw restarts the way its systemd unit restarts it: its runtime directory is removed
  # and made again. charon-espgw reaches the new control socket (its /run links to the
  # directory by name) and installs its SAs again.
  swan_espgw_quiet --initiate --child net --timeout 20 || true
  kill -TERM "$SPLIT_ESPGW_PID"
  wait "$SPLIT_ESPGW_PID" 2>/dev/null || true
  rm -rf "$ESPGW_RUNDIR"
  mkdir -m 700 "$ESPGW_RUNDIR"
  start_split_espgw
  check "charon-espgw reconnected to the restarted espgw in a new directory and installed its SAs again" \
    wait_until 10 espgw_sas_equal 2
  check "ping lanA -> lanB through the restarted espgw" wait_until 15 pings_ok "$LANA" 10.1.0.2 10.2.0.2
  swan_espgw_quiet --terminate --ike moved --timeout 10 || true
  wait_until 5 espgw_has_no_sas || true
  # The peer initiates this time, from its NAT-T port to espgw's (local_port = 4500,
  # remote_port = 14500 on gwB), as configs/split/swanctl/swanctl-espgw.conf says.
  check "gwB initiates the moved connection to espgw's port 14500" \
    swan_quiet b --initiate --child net --timeout 20
  check "espgw has its 2 SAs again" wait_until 5 espgw_sas_equal 2
  check "ping lanA -> lanB through espgw after the peer initiated" pings_ok "$LANA" 10.1.0.2 10.2.0.2
}

run_split
log "split: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
