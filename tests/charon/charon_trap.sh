#!/usr/bin/env bash
# Trap policies under strongSwan: gwA's charon loads its connection with
# `start_action = trap` and initiates nothing; a packet from lanA meets the trap policy in
# espgw, which raises an acquire, and the plugin hands it to charon, which negotiates the
# CHILD_SA.
#
#   lanA 10.1.0.2 ── gwA (charon + espgw) ══ WAN 192.0.2.0/24 ══ gwB (charon + espgw) ── lanB 10.2.0.2
#
# Checks: nothing is up before traffic; a ping from lanA brings the tunnel up (swanctl
# --list-sas), no trapped packet leaves in clear meanwhile, and traffic flows both ways;
# espgw counted the acquire and the packets it dropped while the SA was negotiated. Then a
# UDP flood (5 s, as fast as lanA sends) to a second trapped subnet whose peer
# (192.0.2.99) never answers: espgw raises at most one acquire per
# AcquireRaiser::kIntervalMs (3 s), counts the rest as paced, and sends none of it in clear.
#
# Usage: charon_trap.sh ESPGW ESPGWCTL PLUGIN
set -euo pipefail

ESPGW=$(readlink -f "${1:?usage: $0 ESPGW ESPGWCTL PLUGIN}")
ESPGWCTL=$(readlink -f "$2")
PLUGIN=$(readlink -f "$3")

HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/charon_lib.sh"

INTERVAL_S=3  # AcquireRaiser::kIntervalMs
STORM_S=5

on_failure_logs() {
  if ((FAILURES > 0)); then
    for f in "$WORK"/espgw-*.log "$WORK"/charon-*.log; do
      [[ -f $f ]] || continue
      echo "----- $(basename "$f") (last 40 lines)"
      tail -40 "$f"
    done
  fi
}

# write_trap_conf SIDE START_ACTION [DARK]: the "net" connection between the LANs; with
# DARK, also "dark" to 10.9.0.0/16 behind a peer that does not exist.
write_trap_conf() {
  local side=$1 start=$2 dark=${3:-} other local_ts remote_ts
  other=$(other_side "$side")
  read -r local_ts remote_ts <<<"$(side_subnets "$side")"
  {
    cat <<EOS
connections {
  s2s {
    version = 2
    local_addrs = $(side_addr "$side")
    remote_addrs = $(side_addr "$other")
    encap = yes
    mobike = no
    proposals = aes128gcm16-prfsha256-x25519
    local {
      auth = psk
      id = gw$side.espgw.test
    }
    remote {
      auth = psk
      id = gw$other.espgw.test
    }
    children {
      net {
        local_ts = $local_ts
        remote_ts = $remote_ts
        esp_proposals = aes128gcm16
        start_action = $start
        dpd_action = none
      }
    }
  }
EOS
    [[ -n $dark ]] && cat <<EOS
  dark {
    version = 2
    local_addrs = $(side_addr "$side")
    remote_addrs = 192.0.2.99
    encap = yes
    proposals = aes128gcm16-prfsha256-x25519
    local {
      auth = psk
      id = gw$side.espgw.test
    }
    remote {
      auth = psk
      id = dark.espgw.test
    }
    children {
      dark {
        local_ts = $local_ts
        remote_ts = 10.9.0.0/16
        esp_proposals = aes128gcm16
        start_action = trap
      }
    }
  }
EOS
    cat <<EOS
}
secrets {
  ike-s2s {
    id-a = gwa.espgw.test
    id-b = gwb.espgw.test
    id-d = dark.espgw.test
    secret = 0x$PSK
  }
}
EOS
  } >"$WORK/swanctl-$side.conf"
  chmod 600 "$WORK/swanctl-$side.conf"
}

charon_sas_in_espgw() {  # charon_sas_in_espgw SIDE: how many of espgw's SAs charon installed
  espgw_json "$1" sas 'sum(1 for s in d["sas"].values() if s["origin"] == "charon")'
}
sas_equal() { [[ $(charon_sas_in_espgw "$1" 2>/dev/null) == "$2" ]]; }
route_present() { ip -n "$(side_ns "$1")" route show table all proto 245 dev espgw0 | grep -q "$2"; }

# A gateway's counter from `stats` (top level or a section: "gateway-drops.no-sa").
stat() {  # stat SIDE NAME
  espgw_json "$1" stats "d$(sed 's/\([^.]*\)/["\1"]/g; s/\.//g' <<<"$2")"
}

out_policy_with_reqid() {  # out_policy_with_reqid SIDE REMOTE_PREFIX
  espgw_json "$1" policies \
    "any(p['direction'] == 'out' and p['remote'] == '$2' and int(p['reqid']) > 0 for p in d['policies'].values())" |
    grep -qx True
}

child_installed() { swan a --list-sas 2>/dev/null | grep -q 'net: #[0-9]*, reqid [0-9]*, INSTALLED'; }

# UDP to 10.9.0.2 as fast as lanA can send it, none answered; the number sent goes to
# $WORK/storm-sent.
storm() {
  in_ns "$LANA" /usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, sent = time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < end:
    try:
        s.sendto(b"x" * 64, ("10.9.0.2", 9 + sent % 1000))
        sent += 1
    except OSError:
        pass
print(sent)' "$STORM_S" >"$WORK/storm-sent" 2>&1 || true
}
trigger_ping() { in_ns "$LANA" ping -c 6 -i 0.5 -W 1 10.2.0.2 >"$WORK/trigger-ping.txt" 2>&1 || true; }

run_trap() {
  setup_topology
  start_espgw a
  start_espgw b
  start_charon a espgw
  start_charon b espgw
  write_trap_conf a trap dark
  write_trap_conf b none
  load_swanctl b
  load_swanctl a

  check "charon's trap installed gwA's outbound policy to 10.2.0.0/16 with a reqid" \
    wait_until 5 out_policy_with_reqid a 10.2.0.0/16
  check "and the one to 10.9.0.0/16" out_policy_with_reqid a 10.9.0.0/16
  check "no SA before any traffic" sas_equal a 0
  check "route to 10.2.0.0/16 through espgw0 on gwA (the trap's)" \
    wait_until 3 route_present a 10.2.0.0/16
  local acquires_before no_sa_before
  acquires_before=$(stat a acquires)
  no_sa_before=$(stat a gateway-drops.no-sa)
  check "no acquire before traffic" test "$acquires_before" = 0

  # The trigger: lanA pings lanB. The first packets meet the trap (dropped, acquire), the
  # later ones the negotiated CHILD_SA. Nothing with the LANs' addresses may cross the WAN
  # in clear meanwhile.
  local esp clear
  read -r esp clear < <(wan_capture 'ip.addr==10.1.0.0/16 || ip.addr==10.2.0.0/16' trigger_ping)
  check "the trap brought the CHILD_SA up: swanctl --list-sas shows net INSTALLED" \
    wait_until 10 child_installed
  check "espgw on gwA has the 2 SAs charon negotiated" wait_until 5 sas_equal a 2
  check "no trapped packet left in clear (WAN: $esp ESP, $clear clear)" test "$clear" = 0
  local replies
  replies=$(grep -o '[0-9]* received' "$WORK/trigger-ping.txt" | cut -d' ' -f1)
  check "pings after the negotiation got through (${replies:-0} of 6 answered)" test "${replies:-0}" -ge 1
  local acquires no_sa
  acquires=$(stat a acquires)
  no_sa=$(stat a gateway-drops.no-sa)
  log "counters after the trigger: acquires $acquires_before -> $acquires, no-sa (dropped while negotiating) $no_sa_before -> $no_sa, acquires-paced $(stat a acquires-paced)"
  check "espgw counted the acquire ($acquires)" test "$acquires" -ge 1
  check "and the trapped packets it dropped meanwhile (no-sa $no_sa)" test "$no_sa" -gt "$no_sa_before"
  check "charon received the acquire from the plugin" grep -q 'espgw: acquire for reqid' "$WORK/charon-a.log"
  swan a --list-sas >"$WORK/list-sas.txt" 2>/dev/null || true
  log "swanctl --list-sas on gwA:"; sed 's/^/    /' "$WORK/list-sas.txt"

  check "ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
  check "ping lanB -> lanA" ping_ok "$LANB" 10.1.0.2
  local acquires_up
  acquires_up=$(stat a acquires)
  in_ns "$LANA" ping -c 20 -i 0.05 -W 1 10.2.0.2 >/dev/null 2>&1 || true
  check "no further acquire while the SA is up ($acquires_up -> $(stat a acquires))" \
    test "$(stat a acquires)" = "$acquires_up"

  # The storm: a UDP flood to the dark trap for STORM_S seconds. Its peer never answers,
  # so the policy stays without SA the whole time and every packet meets the trap.
  local before paced_before
  before=$(stat a acquires)
  paced_before=$(stat a acquires-paced)
  read -r esp clear < <(wan_capture 'ip.addr==10.9.0.0/16' storm)
  local raised=$(($(stat a acquires) - before)) paced=$(($(stat a acquires-paced) - paced_before))
  local limit=$((STORM_S / INTERVAL_S + 1))
  log "storm of $STORM_S s: $(cat "$WORK/storm-sent") UDP packets sent, $raised acquires raised, $paced packets paced"
  check "a UDP flood to a trapped subnet raised $raised acquires, at most $limit (one per ${INTERVAL_S} s)" \
    test "$raised" -ge 1 -a "$raised" -le "$limit"
  check "the rest of the flood was paced ($paced packets)" test "$paced" -ge 1000
  check "none of the flood crossed the WAN in clear ($clear packets)" test "$clear" = 0
  check "the tunnel still carries traffic: ping lanA -> lanB" ping_ok "$LANA" 10.2.0.2
}

trap 'on_failure_logs; stop_charons; cleanup' EXIT
run_trap
log "trap: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
