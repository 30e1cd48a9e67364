#!/usr/bin/env bash
# The packaged espgw.service under a real systemd: a container booted with systemd-nspawn
# from a throw-away overlay of this machine's own root file system (so the host's
# systemd 252 and libraries, whatever runs as PID 1 here), with a private network. In
# it: `dpkg -i` of the package built from the build tree, then the unit as shipped:
#   - Type=notify: `systemctl start` returns once espgw said READY=1, with its STATUS=;
#   - receive steering (tun-rps = yes, fatal if it cannot be set) works under the unit's
#     ProtectKernelTunables=yes, through its ReadWritePaths=/sys/devices/virtual/net (and
#     fails without that line);
#   - every journal line of espgw has its priority and no timestamp of its own;
#   - the watchdog: pinged (a 2 s WatchdogSec= drop-in keeps espgw running), and honoured
#     (a stopped espgw is killed and restarted);
#   - a configuration error: `systemctl reload` fails (ExecReload=espgw --check) and the
#     running espgw goes on; a start fails with exit status 78 and a priority-err journal
#     line, and RestartPreventExitStatus keeps systemd from restarting it;
#   - `dpkg --purge` stops the service and leaves no file.
# Nothing reaches the host: the overlay's upper layer is a temporary directory and every
# mount lives in a private mount namespace that ends with the test.
# Usage: systemd_unit.sh BUILD_DIR   (exit 77: systemd-nspawn is missing, test skipped)
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: $0 BUILD_DIR}")
command -v systemd-nspawn >/dev/null ||
  { echo "SKIP systemd-nspawn not found (apt-get install systemd-container)"; exit 77; }
if [[ -z ${ESPGW_SYSTEMD_TEST_PRIVATE:-} ]]; then
  exec unshare -m --propagation private env ESPGW_SYSTEMD_TEST_PRIVATE=1 bash "$0" "$@"
fi

TMP=$(mktemp -d /tmp/espgw-systemd.XXXXXX)
ROOT=$TMP/root
NSPAWN_PID=""
# nspawn keeps lock and propagation directories in /run/systemd/nspawn; if this test made
# it, it goes again.
NSPAWN_RUN_DIR_NEW=no
[[ -e /run/systemd/nspawn ]] || NSPAWN_RUN_DIR_NEW=yes
FAILURES=0
PASSES=0
log() { printf '[systemd] %s\n' "$*"; }
pass() { PASSES=$((PASSES + 1)); log "PASS $*"; }
fail() { FAILURES=$((FAILURES + 1)); log "FAIL $*"; }
check() {
  local label=$1
  shift
  if "$@"; then pass "$label"; else fail "$label"; fi
}
wait_until() {  # wait_until SECONDS CMD...
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}

cleanup() {
  if [[ -n $NSPAWN_PID ]] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    kill -TERM "$NSPAWN_PID" 2>/dev/null || true  # nspawn powers the container off
    for _ in $(seq 1 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$NSPAWN_PID" 2>/dev/null || true
    wait "$NSPAWN_PID" 2>/dev/null || true
  fi
  # Never recurse into a mounted overlay of /: unmount, and remove only what is ours.
  umount "$ROOT" 2>/dev/null || umount -l "$ROOT" 2>/dev/null || true
  if mountpoint -q "$ROOT"; then
    echo "$ROOT is still mounted; leaving $TMP"
  else
    rm -rf "$TMP"
  fi
  [[ $NSPAWN_RUN_DIR_NEW == no ]] || rm -rf /run/systemd/nspawn
}
trap cleanup EXIT

# Runs a command inside the booted container (all its namespaces).
in_container() {
  local init
  init=$(pgrep -P "$NSPAWN_PID" -x systemd | head -1)
  [[ -n $init ]] || return 1
  nsenter -t "$init" -m -u -i -n -p -- "$@"
}
unit_property() { in_container systemctl show -p "$1" --value espgw.service; }

log "cpack -G DEB"
mkdir -p "$TMP/deb" "$TMP/upper" "$TMP/work" "$ROOT"
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/deb" >"$TMP/cpack.log" 2>&1 ||
  { cat "$TMP/cpack.log"; fail "cpack -G DEB"; exit 1; }

# The container: this machine's root, every write going to $TMP/upper.
mount -t overlay espgw-systemd-test -o "lowerdir=/,upperdir=$TMP/upper,workdir=$TMP/work" "$ROOT"
cp "$TMP"/deb/espgw_*.deb "$ROOT/root/espgw.deb"
systemd-id128 new >"$ROOT/etc/machine-id"  # its own journal, not the host's
rm -rf "$ROOT/var/log/journal"/*
# Only basic.target (journald, no services of the host image) comes up at boot. nspawn
# mounts /sys read-only unless told otherwise; a booted machine has it writable for root,
# and that is what the unit's own ProtectKernelTunables= has to be tested against.
SYSTEMD_NSPAWN_API_VFS_WRITABLE=yes systemd-nspawn -D "$ROOT" -b --register=no --keep-unit --private-network \
  --machine="espgw-systemd-$$" --console=read-only -- --unit=basic.target \
  >"$TMP/console.log" 2>&1 &
NSPAWN_PID=$!
booted() { [[ $(in_container systemctl is-system-running 2>/dev/null) =~ ^(running|degraded)$ ]]; }
if wait_until 60 booted; then pass "a container booted with systemd-nspawn ($(in_container systemctl --version | head -1))"
else tail -20 "$TMP/console.log"; fail "booting the container"; exit 1; fi

if in_container dpkg -i /root/espgw.deb >"$TMP/dpkg.log" 2>&1; then pass "dpkg -i in the container"
else cat "$TMP/dpkg.log"; fail "dpkg -i"; exit 1; fi
check "systemd knows espgw.service, Type=notify" test "$(unit_property Type)" = notify

# espgw.conf from the installed example: static SAs (site-a) on a veth as the WAN,
# receive steering demanded so that a failure to set it stops espgw.
in_container sh -e -c '
  ip link add wan0 type veth peer name wan1 && ip addr add 192.0.2.1/24 dev wan0
  ip link set wan0 up && ip link set wan1 up
  install -d -m 700 /etc/espgw
  install -m 600 /usr/share/doc/espgw/examples/static/site-a.conf /etc/espgw/site-a.conf
  sed -e "s#^tun-rps = .*#tun-rps = yes#" -e "s#^\(\# \)\?static-sa-file = .*#static-sa-file = site-a.conf#" \
    /usr/share/doc/espgw/examples/espgw.conf >/etc/espgw/espgw.conf
  chmod 600 /etc/espgw/espgw.conf'
check "the test's espgw.conf sets static-sa-file and tun-rps = yes" \
  in_container sh -c 'grep -qx "static-sa-file = site-a.conf" /etc/espgw/espgw.conf && grep -qx "tun-rps = yes" /etc/espgw/espgw.conf'

# --- Type=notify, receive steering, journal ------------------------------------------
if in_container timeout 30 systemctl start espgw.service; then pass "systemctl start espgw returned (READY=1)"
else fail "systemctl start espgw"; in_container journalctl -u espgw --no-pager | tail -20; fi
check "espgw.service is active" test "$(in_container systemctl is-active espgw.service)" = active
status_text_forwarding() { [[ $(unit_property StatusText) == forwarding* ]]; }
check "its status text is espgw's STATUS= ($(unit_property StatusText))" status_text_forwarding
in_container espgwctl --socket /run/espgw/control.sock status >"$TMP/status.txt" 2>&1 || true
check "receive steering set on the TUN device under ProtectKernelTunables=yes ($(grep -o 'RPS) on the TUN device: .*' "$TMP/status.txt"))" \
  grep -q "receive steering (RPS) on the TUN device: CPUs" "$TMP/status.txt"
# The control: without the unit's ReadWritePaths=, the same start fails on rps_cpus.
in_container sh -c 'mkdir -p /run/systemd/system/espgw.service.d &&
  printf "[Service]\nReadWritePaths=\n" >/run/systemd/system/espgw.service.d/rw.conf &&
  systemctl daemon-reload && systemctl stop espgw.service' || true
if in_container timeout 30 systemctl start espgw.service 2>/dev/null; then
  fail "without ReadWritePaths=/sys/devices/virtual/net espgw started all the same: the check above proves nothing"
else
  rps_refused() { in_container journalctl -u espgw.service -o cat --no-pager | grep 'rps_cpus failed: Read-only file system' >/dev/null; }
  check "without ReadWritePaths=/sys/devices/virtual/net the start fails: rps_cpus is read-only" rps_refused
fi
in_container sh -c 'rm /run/systemd/system/espgw.service.d/rw.conf && systemctl daemon-reload &&
  systemctl reset-failed espgw.service; systemctl start espgw.service' || true
check "espgw.service is active again" test "$(in_container systemctl is-active espgw.service)" = active
main_pid=$(unit_property MainPID)
in_container journalctl -u espgw.service _PID="$main_pid" -o json --no-pager >"$TMP/journal.json"
journal_lines_ok() {
  /usr/bin/python3 - "$TMP/journal.json" <<'PY'
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
want = {"error": "3", "warn": "4", "info": "6", "debug": "7"}
bad = [l["MESSAGE"] for l in lines
       if re.match(r"\d\d:\d\d:\d\d", l["MESSAGE"])
       or want.get(l["MESSAGE"].split(":", 1)[0]) != l.get("PRIORITY")]
infos = sum(1 for l in lines if l.get("PRIORITY") == "6")
print(f"{len(lines)} lines, {infos} at priority 6, wrong: {bad[:3]}")
sys.exit(1 if bad or infos == 0 else 0)
PY
}
check "espgw's journal lines carry their priority and no timestamp ($(journal_lines_ok 2>&1))" journal_lines_ok

# --- the watchdog ---------------------------------------------------------------------
check "WatchdogSec=20s as shipped ($(unit_property WatchdogUSec))" test "$(unit_property WatchdogUSec)" = 20s
in_container sh -c 'mkdir -p /run/systemd/system/espgw.service.d &&
  printf "[Service]\nWatchdogSec=2s\n" >/run/systemd/system/espgw.service.d/watchdog.conf &&
  systemctl daemon-reload && systemctl restart espgw.service' || true
pid_before=$(unit_property MainPID)
sleep 5
check "with WatchdogSec=2s espgw runs on for 5 s: it pings the watchdog" \
  test "$(unit_property MainPID)" = "$pid_before" -a "$(unit_property NRestarts)" = 0
in_container kill -STOP "$pid_before"
restarted() { local p; p=$(unit_property MainPID); [[ $p != 0 && $p != "$pid_before" ]] && [[ $(in_container systemctl is-active espgw.service) == active ]]; }
check "a stopped espgw misses the watchdog and systemd restarts it" wait_until 15 restarted
watchdog_logged() { in_container journalctl -u espgw.service --no-pager | grep 'Watchdog timeout' >/dev/null; }
check "the journal names the watchdog timeout" watchdog_logged
in_container sh -c 'rm /run/systemd/system/espgw.service.d/watchdog.conf && systemctl daemon-reload' || true

# --- configuration errors -------------------------------------------------------------
# A reload with a bad file: `systemctl reload` fails (ExecReload=espgw --check), and the
# running espgw keeps going.
pid_before=$(unit_property MainPID)
in_container sh -c 'echo "no-such-key = 1" >>/etc/espgw/espgw.conf' || true
if in_container timeout 30 systemctl reload espgw.service 2>/dev/null; then fail "systemctl reload accepted a bad configuration"
else pass "systemctl reload fails with a bad configuration"; fi
check "and the running espgw goes on (same MainPID, active)" \
  test "$(unit_property MainPID)" = "$pid_before" -a "$(in_container systemctl is-active espgw.service)" = active
# A start with a bad file: espgw exits 78, RestartPreventExitStatus= stops Restart=.
in_container systemctl stop espgw.service || true
restarts_before=$(unit_property NRestarts)
if in_container timeout 30 systemctl start espgw.service 2>/dev/null; then fail "espgw started with a bad configuration"
else pass "systemctl start fails with a bad configuration"; fi
sleep 3  # RestartSec=2s: a restart would have happened by now
check "espgw exited 78 ($(unit_property ExecMainStatus)) and was not restarted ($(unit_property NRestarts) restarts, $restarts_before before)" \
  test "$(unit_property ExecMainStatus)" = 78 -a "$(unit_property NRestarts)" = "$restarts_before" \
       -a "$(in_container systemctl is-active espgw.service)" = failed
in_container journalctl -u espgw.service -p err -o cat --no-pager >"$TMP/errors.txt" || true
check "the configuration error is in the journal at priority err ($(grep -m1 espgw.conf "$TMP/errors.txt" || true))" \
  grep -q "espgw.conf:[0-9]*: .*no-such-key" "$TMP/errors.txt"

# --- purge ----------------------------------------------------------------------------
in_container sh -c 'sed -i "/^no-such-key/d" /etc/espgw/espgw.conf; systemctl reset-failed espgw.service; systemctl start espgw.service' || true
check "espgw runs again with the configuration fixed" test "$(in_container systemctl is-active espgw.service)" = active
in_container dpkg-deb -c /root/espgw.deb | awk '{print $6}' | sed 's#^\.##' | grep -v '/$' >"$TMP/files"
if in_container dpkg --purge espgw >"$TMP/purge.log" 2>&1; then pass "dpkg --purge in the container"
else cat "$TMP/purge.log"; fail "dpkg --purge"; fi
not_active() { [[ $(in_container systemctl is-active espgw.service) != active ]]; }
check "the purge stopped espgw" not_active
left=$(while read -r f; do in_container test -e "$f" && echo "$f"; done <"$TMP/files" || true)
check "no file of the package left in the container${left:+: $left}" test -z "$left"

log "systemd_unit: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
