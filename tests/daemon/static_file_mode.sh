#!/usr/bin/env bash
# espgw refuses a static SA file that group or others may read (it holds every SA's key),
# the way ssh refuses such a private key, and starts with the same file at 0600. The
# daemon runs in a network namespace of its own (unshare), so its TUN device and routes
# never touch the host. Needs root.
#   static_file_mode.sh ESPGW
set -euo pipefail
ESPGW=$1
WORK=$(mktemp -d /tmp/espgw-static-mode.XXXXXX)
cleanup() {
  [[ -n ${PID:-} ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

cat >"$WORK/espgw.conf" <<EOS
tun-name = espgwmode0
local-address = 127.0.0.1
# The SA state stays in the test's directory, not under /var/lib/espgw.
state-dir = state
static-sa-file = static.conf
workers = 1
EOS
key=$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')
cat >"$WORK/static.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key src 127.0.0.1 dst 127.0.0.2 reqid 1
policy out local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
EOS

chmod 644 "$WORK/static.conf"
status=0
timeout 20 unshare --net "$ESPGW" -c "$WORK/espgw.conf" >"$WORK/refused.log" 2>&1 || status=$?
# 78: a configuration error (EX_CONFIG), which the systemd unit does not restart
if [[ $status -eq 78 ]] &&
   grep -q "static.conf: refused: mode 0644 lets group or others read or write it" "$WORK/refused.log"; then
  pass "a 0644 static file is refused"
else
  fail "a 0644 static file: exit $status"; cat "$WORK/refused.log"
fi
if grep -q "$key" "$WORK/refused.log"; then fail "the key appears in the log"; fi

chmod 600 "$WORK/static.conf"
unshare --net "$ESPGW" -c "$WORK/espgw.conf" >"$WORK/started.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
  grep -q "gateway up" "$WORK/started.log" && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if grep -q "gateway up" "$WORK/started.log"; then pass "the same file at 0600 starts the gateway"
else fail "the 0600 file did not start the gateway"; cat "$WORK/started.log"; fi
kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
PID=
if grep -q "$key" "$WORK/started.log"; then fail "the key appears in the log"; fi

[[ $failures -eq 0 ]]
