#!/usr/bin/env bash
# The configurations shipped in configs/ stay valid:
# - configs/espgw.conf passes `espgw --check` as shipped (charon keying), and so does its
#   static-keying variant (control-socket commented out, static-sa-file set), which the
#   file describes;
# - the PSK and X.509 swanctl examples describe the same tunnel: their settings are equal
#   apart from authentication (the X.509 one runs in tests/charon, scenario x509; the PSK
#   one in scenario psk-config). swanctl itself can only parse them with a charon, there.
# - strongswan.conf loads espgw before kernel-netlink, and neither socket-default nor
#   kernel-libipsec.
# Usage: shipped_configs.sh ESPGW SOURCE_DIR
set -euo pipefail

espgw=$1
configs=$(readlink -f "$2")/configs
tmp=$(mktemp -d /tmp/espgw-configs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
check() {
  local label=$1
  shift
  if "$@"; then pass "$label"; else fail "$label"; fi
}

check "configs/espgw.conf passes espgw --check" "$espgw" --check -c "$configs/espgw.conf"
check "configs/espgw.conf sets control-socket = /run/espgw/control.sock" \
  grep -qx 'control-socket = /run/espgw/control.sock' "$configs/espgw.conf"

# The static variant, next to a copy of static/ so the relative path means the same.
cp -r "$configs/static" "$tmp/static"
sed -e 's/^control-socket = /# control-socket = /' -e 's/^# static-sa-file = /static-sa-file = /' \
  "$configs/espgw.conf" >"$tmp/espgw.conf"
check "the static variant sets static-sa-file and no control-socket" \
  sh -c "grep -q '^static-sa-file = static/site-a.conf' '$tmp/espgw.conf' && ! grep -q '^control-socket' '$tmp/espgw.conf'"
check "the static variant passes espgw --check" "$espgw" --check -c "$tmp/espgw.conf"

# strongswan.conf/swanctl.conf settings as flat "section.key = value" lines, comments
# dropped, for the sections of one connection.
flatten() {
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
path, out = [], []
for raw in open(sys.argv[1]):
    line = re.sub(r"#.*", "", raw).strip()
    if not line:
        continue
    if line.endswith("{"):
        path.append(line[:-1].strip())
    elif line == "}":
        path.pop()
    else:
        key, value = (s.strip() for s in line.split("=", 1))
        out.append(".".join(path + [key]) + " = " + value)
print("\n".join(sorted(out)))
PY
}
common() {  # the settings that are not about authentication
  flatten "$1" | grep -v -E '^(secrets\.|connections\.s2s\.(local|remote)\.)'
}
psk_x509_same() {
  diff <(common "$configs/swanctl/site-to-site-psk.conf") <(common "$configs/swanctl/site-to-site-x509.conf")
}
check "site-to-site-psk.conf and site-to-site-x509.conf differ only in authentication" psk_x509_same

load=$(flatten "$configs/strongswan.conf" | sed -n 's/^charon\.load = //p')
load_ok() {
  local -a plugins
  read -r -a plugins <<<"$load"
  local i espgw=-1 netlink=-1
  for i in "${!plugins[@]}"; do
    case ${plugins[$i]} in
      espgw) espgw=$i ;;
      kernel-netlink) netlink=$i ;;
      socket-default | kernel-libipsec) echo "loads ${plugins[$i]}"; return 1 ;;
    esac
  done
  ((espgw >= 0 && netlink > espgw))
}
check "strongswan.conf loads espgw before kernel-netlink, no socket-default or kernel-libipsec ($load)" load_ok
check "strongswan.d/charon/espgw.conf loads the plugin with priority 10" \
  grep -qE '^[[:space:]]*load = 10$' "$configs/strongswan.d/charon/espgw.conf"

# configs/split/: espgw's ports are the ones its charon reports (charon.port and
# port_nat_t of strongswan-espgw.conf), other than the system charon's 500 and 4500; that
# charon loads the same plugin list as strongswan.conf, routes nothing and adds no rule.
split=$configs/split
check "split/espgw.conf passes espgw --check" "$espgw" --check -c "$split/espgw.conf"
split_setting() { flatten "$1" | sed -n "s/^$2 = //p"; }
conf_setting() { sed -n "s/^$1 = \([^ ]*\).*/\1/p" "$split/espgw.conf"; }
split_ports_ok() {
  local ike udp
  ike=$(conf_setting ike-port) udp=$(conf_setting udp-port)
  [[ $ike == "$(split_setting "$split/strongswan-espgw.conf" charon.port)" &&
     $udp == "$(split_setting "$split/strongswan-espgw.conf" charon.port_nat_t)" &&
     $ike != 500 && $ike != 4500 && $udp != 500 && $udp != 4500 ]]
}
check "split: espgw's ike-port and udp-port are charon.port and port_nat_t, not 500 or 4500" split_ports_ok
check "split: strongswan-espgw.conf loads what strongswan.conf loads" \
  test "$(split_setting "$split/strongswan-espgw.conf" charon.load)" = "$load"
check "split: strongswan-espgw.conf sets install_routes = no and routing_table = 0" \
  test "$(split_setting "$split/strongswan-espgw.conf" charon.install_routes)/$(split_setting "$split/strongswan-espgw.conf" charon.routing_table)" = no/0
split_swanctl_ports() {
  test "$(split_setting "$split/swanctl/swanctl-espgw.conf" connections.moved.local_port)" = "$(conf_setting udp-port)" -a \
       "$(split_setting "$split/swanctl/swanctl-espgw.conf" connections.moved.remote_port)" = 4500
}
check "split: swanctl-espgw.conf talks from espgw's udp-port to the peer's 4500" split_swanctl_ports

echo "shipped_configs: $failures failed"
((failures == 0))
