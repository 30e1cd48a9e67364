#!/bin/bash
# Our VICI client against the real charon (strongSwan 5.9.8): version and stats, event
# registration (known and unknown events), streamed list commands, and a connection loaded
# and unloaded through load-conn, whose nested request charon has to parse. Then our
# server against strongSwan's own client, swanctl.
#
# charon runs in its own network namespace and mount namespace (a private /run, since its
# pid file path is compiled in), so it never meets the host's charon or another run.
# Usage: charon_vici.sh PATH/TO/vici_probe      (root; exits 77 otherwise)
set -u

PROBE=${1:?usage: charon_vici.sh VICI_PROBE}
CHARON=/usr/lib/ipsec/charon
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root for network and mount namespaces"
  exit 77
fi

NS=vici$$
WORK=$(mktemp -d /tmp/espgw-vici.XXXXXX)
SOCKET=$WORK/charon.vici
CHARON_PID=
SERVE_PID=
FAILURES=0

log() { printf '[vici-charon] %s\n' "$*"; }
pass() { log "PASS $*"; }
fail() { FAILURES=$((FAILURES + 1)); log "FAIL $*"; }

cleanup() {
  if [[ -n $SERVE_PID ]]; then
    kill "$SERVE_PID" 2>/dev/null
    wait "$SERVE_PID" 2>/dev/null
  fi
  if [[ -n $CHARON_PID ]]; then
    kill "$CHARON_PID" 2>/dev/null
    wait "$CHARON_PID" 2>/dev/null
  fi
  ip netns del "$NS" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# expect NAME PATTERN COMMAND...: COMMAND succeeds and its output matches PATTERN (grep -E).
expect() {
  local name=$1 pattern=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if ((rc != 0)); then
    fail "$name: exit status $rc from $*"
    printf '%s\n' "$out" | sed 's/^/    /'
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name: output lacks /$pattern/"
    printf '%s\n' "$out" | sed 's/^/    /'
  else
    pass "$name"
  fi
}

# expect_status NAME STATUS PATTERN COMMAND...: COMMAND exits with STATUS, output matches.
expect_status() {
  local name=$1 status=$2 pattern=$3 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc != "$status" ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name: exit status $rc (want $status), output:"
    printf '%s\n' "$out" | sed 's/^/    /'
  else
    pass "$name"
  fi
}

cat >"$WORK/strongswan.conf" <<EOF
charon {
  load = random nonce openssl pem pkcs1 kdf sha1 sha2 hmac gcm kernel-netlink socket-default vici
  filelog {
    charon {
      path = $WORK/charon.log
      default = 1
      cfg = 2
    }
  }
  plugins {
    vici {
      socket = unix://$SOCKET
    }
  }
}
EOF

ip netns add "$NS" || exit 1
ip -n "$NS" link set lo up
# `$!` is charon itself: ip netns exec, unshare (without --fork) and `sh -c 'exec ...'` all exec.
ip netns exec "$NS" unshare -m --propagation private \
  sh -c 'mount -t tmpfs vici-run /run && exec env STRONGSWAN_CONF="$1" "$2"' \
  sh "$WORK/strongswan.conf" "$CHARON" >"$WORK/charon.out" 2>&1 &
CHARON_PID=$!

for _ in $(seq 100); do
  [[ -S $SOCKET ]] && break
  kill -0 "$CHARON_PID" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -S $SOCKET ]]; then
  log "FAIL charon did not open $SOCKET"
  sed 's/^/    /' "$WORK/charon.out" "$WORK/charon.log" 2>/dev/null
  exit 1
fi

expect version '"daemon": "charon"' "$PROBE" "$SOCKET" version
expect "version is 5.9.8" '"version": "5\.9\.8"' "$PROBE" "$SOCKET" version
expect "unix:// URI" '"daemon": "charon"' "$PROBE" "unix://$SOCKET" version
expect stats '"plugins": \[.*"vici"' "$PROBE" "$SOCKET" stats
expect "stats has workers" '"workers": \{' "$PROBE" "$SOCKET" stats
expect "subscribe to SA events" \
  'ike-updown: confirmed' "$PROBE" "$SOCKET" subscribe ike-updown child-updown child-rekey
expect "all three confirmed" \
  '^child-rekey: confirmed' "$PROBE" "$SOCKET" subscribe ike-updown child-updown child-rekey
expect_status "unknown event" 3 'no-such-event: unknown' \
  "$PROBE" "$SOCKET" subscribe no-such-event
expect_status "unknown command" 3 'unknown command' "$PROBE" "$SOCKET" no-such-command
expect "list-sas streams nothing" '^events: 0$' "$PROBE" "$SOCKET" stream list-sas list-sa

# A nested request: charon must parse what we encode, and stream it back.
expect load-conn '"success": "yes"' "$PROBE" "$SOCKET" load-conn \
  'probe.remote_addrs=[192.0.2.2]' 'probe.local_addrs=[192.0.2.1]' \
  'probe.local.auth=psk' 'probe.remote.auth=psk' \
  'probe.children.net.local_ts=[10.1.0.0/16]' 'probe.children.net.remote_ts=[10.2.0.0/16,fd00:2::/64]' \
  'probe.children.net.esp_proposals=[aes128gcm16]'
expect "list-conns streams it" '^events: 1$' "$PROBE" "$SOCKET" stream list-conns list-conn
expect "the conn's selectors" '"remote-ts": \["10\.2\.0\.0/16", "fd00:2::/64"\]' \
  "$PROBE" "$SOCKET" stream list-conns list-conn
expect get-conns '"conns": \["probe"\]' "$PROBE" "$SOCKET" get-conns
expect "unload-conn" '"success": "yes"' "$PROBE" "$SOCKET" unload-conn name=probe
expect "get-conns after unload" '"conns": \[\]' "$PROBE" "$SOCKET" get-conns
expect "unload again fails in-band" '"success": "no"' "$PROBE" "$SOCKET" unload-conn name=probe
expect "list-sas after all" '^events: 0$' "$PROBE" "$SOCKET" stream list-sas list-sa

# The other way round: strongSwan's own client (swanctl, libvici) against our Server,
# served by vici_probe with canned answers. list-sas streams one list-sa event ahead of its
# response, which swanctl prints only if our events and framing are right.
PROBE_SOCKET=$WORK/probe.vici
"$PROBE" "$PROBE_SOCKET" serve >"$WORK/serve.out" 2>&1 &
SERVE_PID=$!
for _ in $(seq 50); do [[ -S $PROBE_SOCKET ]] && break; sleep 0.1; done
expect "swanctl --version against our server" 'strongSwan 0\.1\.0 vici_probe \(Linux, test, probe\)' \
  swanctl --version --daemon --uri "unix://$PROBE_SOCKET"
expect "swanctl --list-sas against our server" 'probe: #1, ESTABLISHED, IKEv2' \
  swanctl --list-sas --uri "unix://$PROBE_SOCKET"
expect "swanctl prints the CHILD_SA's counters" 'net: #1, reqid 1, INSTALLED, TUNNEL, ESP:AES_GCM_16-128' \
  swanctl --list-sas --uri "unix://$PROBE_SOCKET"
expect "... and its bytes" 'in  c0000001, 123456 bytes, +789 packets' \
  swanctl --list-sas --uri "unix://$PROBE_SOCKET"
kill "$SERVE_PID" 2>/dev/null
wait "$SERVE_PID"
SERVE_PID=
expect "our server saw no malformed packet" 'malformed 0' cat "$WORK/serve.out"
[[ -e $PROBE_SOCKET ]] && fail "our server left its socket file behind"

if ! kill -0 "$CHARON_PID" 2>/dev/null; then
  fail "charon exited during the test"
fi
# What charon logs when it cannot parse a packet or message (vici_dispatcher.c,
# vici_message.c). "invalid request: no-such-command" above is expected and not matched.
COMPLAINT="invalid vici|unsupported vici|invalid '.*' encoding|unknown encoding type|within (list|section)|outside (of )?(list|section)"
if grep -Eq "$COMPLAINT" "$WORK/charon.log"; then
  fail "charon complained about what we sent:"
  grep -E "$COMPLAINT" "$WORK/charon.log" | sed 's/^/    /'
fi

if ((FAILURES > 0)); then
  log "$FAILURES check(s) failed; charon log:"
  sed 's/^/    /' "$WORK/charon.log"
  exit 1
fi
log "all checks passed"
