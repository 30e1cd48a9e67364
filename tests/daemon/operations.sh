#!/usr/bin/env bash
# The operator's commands against a running espgw (static SAs, a control socket, in a
# network namespace of its own): --help and --version of both binaries, espgwctl's
# metrics checked by prometheus_client's OpenMetrics and text-format parsers, typed JSON,
# the log level set at run time, and espgw.conf reloaded through espgwctl and SIGHUP
# (run-time settings applied, the others logged as needing a restart, a broken file
# refused with the daemon still running). Needs root.
#   operations.sh ESPGW ESPGWCTL
set -euo pipefail
ESPGW=$1
ESPGWCTL=$2
WORK=$(mktemp -d /tmp/espgw-operations.XXXXXX)
cleanup() {
  [[ -n ${PID:-} ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
check() {  # check DESCRIPTION COMMAND...: passes when the command succeeds
  local what=$1; shift
  if "$@" >"$WORK/check.out" 2>&1; then pass "$what"; else fail "$what"; cat "$WORK/check.out"; fi
}

for binary in "$ESPGW" "$ESPGWCTL"; do
  name=$(basename "$binary")
  check "$name --help exits 0 with a usage" bash -c "'$binary' --help | grep -q '^Usage: $name'"
  check "$name -h exits 0" "$binary" -h
  check "$name --version names the version" bash -c "'$binary' --version | grep -Eq '^$name [0-9]+\.[0-9]+'"
  status=0; "$binary" --no-such-option >/dev/null 2>&1 || status=$?
  [[ $status -eq 2 ]] && pass "$name: a bad option exits 2" || fail "$name: a bad option exits $status"
done

SOCK=$WORK/control.sock
write_conf() {  # write_conf EXTRA-LINES
  cat >"$WORK/espgw.conf" <<EOS
tun-name = espgwops0
local-address = 127.0.0.1
state-dir = state
static-sa-file = static.conf
control-socket = $SOCK
ike-port = 0
workers = 1
$1
EOS
}
write_conf "log-level = info"
key=$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')
key2=$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')
cat >"$WORK/static.conf" <<EOS
sa out spi 0x1001 aes-gcm-128 key 0x$key src 127.0.0.1 dst 127.0.0.2 reqid 1
sa in spi 0x2001 aes-gcm-128 key 0x$key2 src 127.0.0.2 dst 127.0.0.1 reqid 1
policy out local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1
EOS
chmod 600 "$WORK/static.conf"
LOG=$WORK/espgw.log
unshare --net "$ESPGW" -c "$WORK/espgw.conf" >"$LOG" 2>&1 &
PID=$!
for _ in $(seq 100); do
  [[ -S $SOCK ]] && grep -q "gateway up" "$LOG" && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if ! [[ -S $SOCK ]]; then fail "the daemon did not start"; cat "$LOG"; exit 1; fi
CTL=("$ESPGWCTL" --socket "$SOCK")

# Metrics: valid OpenMetrics and text 0.0.4 with the per-SA series; gateway-wide only
# with --no-sa-series.
"${CTL[@]}" metrics >"$WORK/metrics.om"
"${CTL[@]}" metrics --format prometheus >"$WORK/metrics.prom"
"${CTL[@]}" metrics --no-sa-series >"$WORK/metrics.nosa"
check "metrics parse as OpenMetrics, with the SAs' series" /usr/bin/python3 - "$WORK" <<'EOP'
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as prom
work = sys.argv[1]
def samples(families):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
a = samples(om(open(work + "/metrics.om").read()))
b = samples(prom(open(work + "/metrics.prom").read()))
# The same series (values move between the scrapes: each one is a connection).
assert set(a) == set(b), set(a) ^ set(b)
assert a[("espgw_sa_packets_total", (("direction", "out"), ("reqid", "1"), ("spi", "0x00001001")))] == 0
assert a[("espgw_sa_bytes_total", (("direction", "in"), ("reqid", "1"), ("spi", "0x00002001")))] == 0
assert a[("espgw_sas", ())] == 2
assert ("espgw_engine_drops_total", (("reason", "replayed"),)) in a
assert ("espgw_control_socket_connections_total", ()) in a
families = {f.name: f.type for f in om(open(work + "/metrics.om").read())}
assert families["espgw_wan_socket_receive_buffer"] == "gauge", families
nosa = samples(om(open(work + "/metrics.nosa").read()))
assert not [k for k in nosa if k[0].startswith("espgw_sa_")], "per-SA series with --no-sa-series"
EOP

check "--json stats carries typed numbers" bash -c \
  "'${CTL[0]}' --socket '$SOCK' --json stats | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert isinstance(d[\"sas\"], int) and isinstance(d[\"control-socket\"][\"connections\"], int), d'"

# reset-counters: espgwctl's answers count from the reset (here the control socket's own
# commands, many by now), the daemon's counters do not change.
commands() { "${CTL[@]}" --json stats | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["control-socket"]["commands"])'; }
before=$(commands)
check "reset-counters answers" bash -c "'${CTL[0]}' --socket '$SOCK' reset-counters | grep -qx 'counters reset'"
after=$(commands)
if ((before >= 5 && after <= 3)); then pass "stats count from the reset ($before commands before, $after after)"
else fail "reset-counters: $before commands before, $after after"; fi

# The log level at run time.
check "log-level debug is set" bash -c "'${CTL[0]}' --socket '$SOCK' log-level debug | grep -qx 'log level debug'"
check "log-level reads it back" bash -c "'${CTL[0]}' --socket '$SOCK' log-level | grep -qx 'log level debug'"
status=0; "${CTL[@]}" log-level loud >/dev/null 2>&1 || status=$?
[[ $status -eq 1 ]] && pass "an unknown log level is refused" || fail "log-level loud exits $status"

# Reload: run-time keys applied, a restart-only key logged and kept.
write_conf "log-level = info
stats-interval = 1
queue-delay-target-us = 500
tun-queues = 2"
"${CTL[@]}" reload >"$WORK/reload.out" 2>&1 || true
cat "$WORK/reload.out"
check "reload applies the run-time keys" grep -q "^applied: queue-delay-target-us stats-interval$" "$WORK/reload.out"
check "reload names tun-queues as needing a restart" grep -q "next restart.*: tun-queues$" "$WORK/reload.out"
check "the log says tun-queues keeps its old value" grep -q "reload: 'tun-queues' changed to '2'; it takes effect at the next restart, espgw keeps '(default)'" "$LOG"
check "log-level came back to info from the file" bash -c "'${CTL[0]}' --socket '$SOCK' log-level | grep -qx 'log level info'"
sleep 2.5
check "the new stats-interval logs counters" grep -q "gateway drops:" "$LOG"

# SIGHUP with a broken file: refused, the daemon keeps running.
write_conf "log-level = chatty"
kill -HUP "$PID"
sleep 0.5
check "SIGHUP with a broken file is refused" grep -q "reload of .*espgw.conf refused: keeping the running configuration" "$LOG"
check "the daemon still answers" "${CTL[@]}" stats
status=0; "${CTL[@]}" reload >/dev/null 2>&1 || status=$?
[[ $status -eq 1 ]] && pass "espgwctl reload of a broken file exits 1" || fail "reload of a broken file exits $status"

# --ike without a charon: a clear error naming charon's socket, exit 1.
status=0
"${CTL[@]}" --charon-vici "$WORK/no-charon.vici" --ike net sas >"$WORK/ike.out" 2>&1 || status=$?
[[ $status -eq 1 ]] && grep -q "no-charon.vici" "$WORK/ike.out" &&
  pass "--ike without charon fails naming its socket" || { fail "--ike without charon: $status"; cat "$WORK/ike.out"; }

kill -TERM "$PID"
status=0; wait "$PID" || status=$?
PID=
[[ $status -eq 0 ]] && pass "espgw stops on SIGTERM with exit status 0" || fail "espgw exited $status"
if grep -q "Sanitizer" "$LOG"; then fail "a sanitizer reported:"; grep -A20 Sanitizer "$LOG"; fi
if grep -q "$key" "$LOG"; then fail "the key appears in the log"; fi
[[ $failures -eq 0 ]]
