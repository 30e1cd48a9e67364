#!/usr/bin/env bash
# The Debian package on the machine itself: `cpack -G DEB` from the build tree, its control
# data (strongSwan pinned to the release the plugin was built against), `dpkg -i`, then the
# installed files at work: `espgw --check` on the installed example, and a tunnel between
# two installed espgw daemons under two real charons in namespaces, with everything taken
# from the installed package (the example espgw.conf, strongswan.conf and PSK swanctl.conf
# from /usr/share/doc/espgw/examples; charon loads the plugin from its plugin directory,
# no LD_PRELOAD). Finally `dpkg --purge`, after which no file of the package, its state
# directory or its AppArmor include is left.
#
# It changes the machine (root, dpkg): it refuses to run where espgw is installed already,
# and purges the package on every exit, failures included.
# Usage: package_install.sh BUILD_DIR
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: $0 BUILD_DIR}")
HERE=$(dirname "$(readlink -f "$0")")
# shellcheck source=tests/netns/lib.sh
source "$HERE/../netns/lib.sh"
# shellcheck source=tests/charon/charon_lib.sh
source "$HERE/../charon/charon_lib.sh"

ESPGW=/usr/sbin/espgw
ESPGWCTL=/usr/sbin/espgwctl
PLUGIN=""  # no LD_PRELOAD: charon finds libstrongswan-espgw.so in /usr/lib/ipsec/plugins
CONFIGS_DIR=/usr/share/doc/espgw/examples
APPARMOR_LOCAL=/etc/apparmor.d/local/usr.lib.ipsec.charon
APPARMOR_INCLUDE='#include "/usr/share/espgw/apparmor/usr.lib.ipsec.charon"'

installed() { dpkg-query -W -f='${Status}' espgw 2>/dev/null | grep -q "install ok installed"; }
known_to_dpkg() { dpkg-query -W espgw >/dev/null 2>&1; }

if known_to_dpkg || [[ -e /usr/sbin/espgw || -e /usr/lib/ipsec/plugins/libstrongswan-espgw.so ]]; then
  echo "espgw is installed on this machine already; this test installs and purges it, so it does not run here"
  exit 1
fi

apparmor_before=""
[[ -f $APPARMOR_LOCAL ]] && apparmor_before=$(cat "$APPARMOR_LOCAL")
purged=no
purge() {
  [[ $purged == yes ]] && return 0
  purged=yes
  stop_charons
  cleanup  # espgw daemons and namespaces (tests/netns/lib.sh)
  known_to_dpkg && dpkg --purge espgw >"$BUILD/package-purge.log" 2>&1 || true
}
trap 'purge; rm -rf "$BUILD/package-purge.log"' EXIT

# --- the package ---------------------------------------------------------------------
log "cpack -G DEB"
mkdir -p "$WORK/deb"
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/deb" >"$WORK/cpack.log" 2>&1 ||
  { cat "$WORK/cpack.log"; fail "cpack -G DEB"; exit 1; }
deb=$(ls "$WORK"/deb/espgw_*.deb)
pass "cpack made $(basename "$deb")"

depends=$(dpkg-deb -f "$deb" Depends)
log "Depends: $depends"
swan=$(dpkg-query -W -f='${Version}' libstrongswan)
upstream=${swan#*:}
upstream=${upstream%%-*}
for p in libstrongswan strongswan-libcharon; do
  check "Depends pins $p to strongSwan $upstream, the release the plugin was built against" \
    sh -c "echo '$depends' | grep -qF '$p (>= $upstream)' && echo '$depends' | grep -qE '$p \(<< [0-9.]+~\)'"
done
check "Depends on a charon: strongswan-charon or charon-systemd" \
  sh -c "echo '$depends' | grep -qF 'strongswan-charon | charon-systemd'"
check "the installed strongSwan ($swan) satisfies the pin" \
  sh -c "upper=\$(echo '$depends' | grep -oE 'libstrongswan \(<< [^)]+\)' | sed 's/.*<< //; s/)//');
         dpkg --compare-versions '$swan' ge '$upstream' && dpkg --compare-versions '$swan' lt \"\$upper\""
upper=$(echo "$depends" | grep -oE 'libstrongswan \(<< [^)]+\)' | sed 's/.*<< //; s/)//')
check "a later Debian revision of $upstream satisfies it, the next release (${upper%\~}-1) does not" \
  sh -c "dpkg --compare-versions '$upstream-99+deb12u9' lt '$upper' &&
         ! dpkg --compare-versions '${upper%\~}-1' lt '$upper'"
for lib in libipsec-mb1 libmnl0 libsystemd0 libssl3; do
  check "dpkg-shlibdeps found $lib" sh -c "echo '$depends' | grep -q '\\b$lib\\b'"
done
check "/etc/strongswan.d/charon/espgw.conf is a conffile" \
  sh -c "dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles | grep -qx /etc/strongswan.d/charon/espgw.conf"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\.##' >"$WORK/contents"
for f in /usr/sbin/espgw /usr/sbin/espgwctl /usr/lib/ipsec/plugins/libstrongswan-espgw.so \
         /etc/strongswan.d/charon/espgw.conf /lib/systemd/system/espgw.service \
         /usr/share/doc/espgw/examples/espgw.conf /usr/share/espgw/apparmor/usr.lib.ipsec.charon; do
  check "the package holds $f" grep -qx "$f" "$WORK/contents"
done
for page in "$HERE"/../../docs/man/*.[0-9]; do
  [[ -f $page ]] || continue
  check "the package holds the man page $(basename "$page")" \
    grep -qx "/usr/share/man/man${page##*.}/$(basename "$page")" "$WORK/contents"
done

# --- installed -----------------------------------------------------------------------
if dpkg -i "$deb" >"$WORK/dpkg-install.log" 2>&1; then pass "dpkg -i $(basename "$deb")"
else cat "$WORK/dpkg-install.log"; fail "dpkg -i"; exit 1; fi
check "dpkg knows espgw as installed" installed
check "/var/lib/espgw exists, mode 0700" test "$(stat -c %a /var/lib/espgw 2>/dev/null)" = 700
if [[ -f /etc/apparmor.d/usr.lib.ipsec.charon ]]; then
  check "postinst included the control-socket rule in charon's AppArmor profile" \
    grep -qxF "$APPARMOR_INCLUDE" "$APPARMOR_LOCAL"
fi
check "the installed example espgw.conf passes the installed espgw --check" \
  "$ESPGW" --check -c "$CONFIGS_DIR/espgw.conf"

# Two gateways from the installed examples (run_examples psk in tests/charon, with the
# installed files). charon reads the example strongswan.conf, whose load list names espgw.
ESPGW_CONF_FROM_EXAMPLE=yes
STRONGSWAN_CONF_BASE=$CONFIGS_DIR/strongswan.conf
setup_topology
start_espgw a && start_espgw b && start_charon a espgw && start_charon b espgw ||
  { fail "starting the installed espgw and charon"; exit 1; }
check "charon loaded the installed plugin from /usr/lib/ipsec/plugins (no LD_PRELOAD)" \
  sh -c "grep -q 'loaded plugins:.* espgw' '$WORK/charon-a.log' &&
         ! grep -q LD_PRELOAD=/ /proc/${CHARON_PID[a]}/environ 2>/dev/null"
for side in a b; do
  write_swanctl_from_example "$side" "$CONFIGS_DIR/swanctl/site-to-site-psk.conf"
  load_swanctl "$side" "$WORK/swanctl-$side/swanctl.conf"
done
if initiate a; then pass "swanctl --initiate with the installed site-to-site-psk.conf"
else cat "$WORK/swanctl-initiate.log"; fail "swanctl --initiate"; fi
gwa_has_two_sas() {
  [[ $(espgw_json a sas 'sum(1 for s in d["sas"].values() if s["origin"] == "charon")' 2>/dev/null) == 2 ]]
}
check "the installed espgw on gwA holds 2 SAs from charon (installed espgwctl)" wait_until 5 gwa_has_two_sas
check "ping lanA -> lanB through the tunnel" ping_ok "$LANA" 10.2.0.2
check "ping lanB -> lanA through the tunnel" ping_ok "$LANB" 10.1.0.2
if ((FAILURES > 0)); then
  for f in "$WORK"/espgw-*.log "$WORK"/charon-*.log; do
    [[ -f $f ]] && { echo "----- $(basename "$f")"; tail -30 "$f"; }
  done
fi

# --- purged --------------------------------------------------------------------------
mapfile -t package_files < <(grep -v '/$' "$WORK/contents")
purge  # also removes $WORK
check "dpkg --purge espgw" sh -c "! dpkg-query -W espgw >/dev/null 2>&1"
left=$(for f in "${package_files[@]}"; do [[ -e $f ]] && echo "$f"; done || true)
check "no file of the package left${left:+: $left}" test -z "$left"
check "/var/lib/espgw removed" test ! -e /var/lib/espgw
check "charon's AppArmor local file as it was before" \
  sh -c "[ \"\$(cat '$APPARMOR_LOCAL' 2>/dev/null)\" = '$apparmor_before' ]"
leftover_ns=$(ip netns list | grep -F "$RUN-" || true)
check "the test's namespaces are gone" test -z "$leftover_ns"

log "package_install: $PASSES passed, $FAILURES failed"
((FAILURES == 0))
