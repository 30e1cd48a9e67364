#!/usr/bin/env bash
# espgw's exit statuses and its log lines' form, which the systemd unit relies on
# (docs/packaging.md): 78 for a configuration it refuses (espgw.conf or the static SA file),
# 2 for a usage error; on the journal's stream, lines carry "<N>" priorities and no
# timestamp, elsewhere a timestamp. espgw runs in a private network namespace (root), so
# that nothing reaches the host should it get further than it ought to.
# Usage: exit_status.sh ESPGW
set -euo pipefail

espgw=$(readlink -f "$1")
tmp=$(mktemp -d /tmp/espgw-exit.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# status WANT LABEL ARGS...: espgw ARGS exits with WANT (stderr in $tmp/err)
status() {
  local want=$1 label=$2 got=0
  shift 2
  unshare -n "$espgw" "$@" 2>"$tmp/err" || got=$?
  if ((got == want)); then pass "$label: exit status $got"; else fail "$label: exit status $got, want $want"; cat "$tmp/err"; fi
}

printf 'tun-name = egx0\nlocal-address = 192.0.2.1\nstatic-sa-file = sa.conf\nstate-dir = %s/state\n' "$tmp" >"$tmp/good.conf"
printf 'sa out spi 0x1 aes-gcm-128 key 0x%s src 192.0.2.1 dst 192.0.2.2 reqid 1\nsa out bogus\n' \
  00112233445566778899aabbccddeeff01020304 >"$tmp/sa.conf"
chmod 600 "$tmp/sa.conf"
cp "$tmp/good.conf" "$tmp/bad.conf"
echo "no-such-key = 1" >>"$tmp/bad.conf"

status 78 "a bad key in espgw.conf" -c "$tmp/bad.conf"
grep -q "bad.conf:5: .*no-such-key" "$tmp/err" && pass "its FILE:LINE message" || fail "no FILE:LINE message: $(cat "$tmp/err")"
status 78 "espgw --check on it" --check -c "$tmp/bad.conf"
status 78 "an error in the static SA file" -c "$tmp/good.conf"
grep -q "sa.conf:2: " "$tmp/err" && pass "its FILE:LINE message" || fail "no static file message: $(cat "$tmp/err")"
status 2 "an unknown option" --no-such-option
status 0 "espgw --check on an espgw.conf whose own lines are right (the static SA file is read at start)" --check -c "$tmp/good.conf"

# On the journal's stream (JOURNAL_STREAM names stderr's device and inode): a priority,
# no timestamp. The configuration error comes from the main path, the static file's from
# log(); both are err.
journal() {
  : >"$tmp/journal"
  local stream
  stream=$(stat -c '%d:%i' "$tmp/journal")
  JOURNAL_STREAM=$stream unshare -n "$espgw" "$@" 2>>"$tmp/journal" || true
}
journal -c "$tmp/bad.conf"
grep -q '^<3>.*bad.conf:5: ' "$tmp/journal" && pass "on the journal, a configuration error is <3>" ||
  fail "on the journal: $(cat "$tmp/journal")"
journal -c "$tmp/good.conf"
if grep -q '^<3>error: static SA file has errors' "$tmp/journal" && ! grep -qE '^[0-9]{2}:[0-9]{2}' "$tmp/journal"; then
  pass "on the journal, log lines are <N>LEVEL: without a timestamp"
else fail "on the journal: $(cat "$tmp/journal")"; fi
# A JOURNAL_STREAM that names another file (inherited by a child of the unit's shell): the
# terminal form.
JOURNAL_STREAM=1:1 unshare -n "$espgw" -c "$tmp/good.conf" 2>"$tmp/err" || true
grep -qE '^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} espgw error: static SA file' "$tmp/err" &&
  pass "elsewhere, log lines keep their timestamp" || fail "elsewhere: $(cat "$tmp/err")"

echo "exit_status: $failures failed"
((failures == 0))
