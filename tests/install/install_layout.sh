#!/usr/bin/env bash
# `cmake --install` puts every file where it belongs: espgw and espgwctl, the charon
# plugin, its strongswan.d file, the systemd unit and the examples. Everything is staged
# under a temporary DESTDIR, so the real system is never touched (absolute destinations
# such as /usr/lib/ipsec/plugins get DESTDIR too). Two layouts: --prefix /usr (what a
# package does) and --prefix in a temporary directory (relative destinations follow the
# prefix, absolute ones don't, and the unit's ExecStart follows the prefix).
#
# Usage: install_layout.sh BUILD_DIR PLUGIN_DIR STRONGSWAN_D UNIT_DIR DOCDIR SOURCE_DIR
#   (the ESPGW_CHARON_PLUGIN_DIR, ESPGW_STRONGSWAN_D, ESPGW_SYSTEMD_UNIT_DIR and
#   CMAKE_INSTALL_DOCDIR the build was configured with)
set -euo pipefail

build=$(readlink -f "$1")
plugin_dir=$2 strongswan_d=$3 unit_dir=$4 docdir=$5 source=$(readlink -f "$6")
tmp=$(mktemp -d /tmp/espgw-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
check() {  # check LABEL CMD...
  local label=$1
  shift
  if "$@"; then pass "$label"; else fail "$label"; fi
}

executable() { [[ -f $1 && -x $1 ]]; }
exports_create() { nm -D --defined-only "$1" | awk '$2 == "T" && $3 == "espgw_plugin_create" {found = 1} END {exit !found}'; }
same_file() { cmp -s "$1" "$2"; }

# verify_unit UNIT DESTDIR: systemd-analyze verify, with the espgw of ExecStart and
# ExecReload looked up inside DESTDIR (verify checks that it exists and is executable).
# Any message fails.
verify_unit() {
  local unit=$1 dest=$2 dir
  dir=$(mktemp -d "$tmp/verify.XXXXXX")
  sed -e "s#^ExecStart=#ExecStart=$dest#" -e "s#^ExecReload=\(/[^ ]*/espgw \)#ExecReload=$dest\1#" \
    "$unit" >"$dir/espgw.service"
  local out
  out=$(cd "$dir" && systemd-analyze verify --man=no ./espgw.service 2>&1) || { echo "$out"; return 1; }
  [[ -z $out ]] || { echo "$out"; return 1; }
}

layout() {  # layout NAME PREFIX
  local name=$1 prefix=$2 dest="$tmp/$1"
  local doc=$docdir
  [[ $doc == /* ]] || doc="$prefix/$doc"
  doc=${doc//\/\//\/}
  echo "--- DESTDIR=$dest cmake --install --prefix $prefix"
  if ! DESTDIR="$dest" cmake --install "$build" --prefix "$prefix" >"$tmp/$name.log" 2>&1; then
    fail "$name: cmake --install"; cat "$tmp/$name.log"; return
  fi

  local sbin="$dest${prefix%/}/sbin"
  check "$name: espgw installed executable in $prefix/sbin" executable "$sbin/espgw"
  check "$name: espgwctl installed executable in $prefix/sbin" executable "$sbin/espgwctl"

  local plugin="$dest$plugin_dir/libstrongswan-espgw.so"
  check "$name: plugin in $plugin_dir (independent of the prefix)" test -f "$plugin"
  check "$name: plugin exports espgw_plugin_create" exports_create "$plugin"
  # state-dir's default, absolute like the unit's StateDirectory=, root only.
  check "$name: state directory /var/lib/espgw, mode 0700" \
    test "$(stat -c %a "$dest/var/lib/espgw" 2>/dev/null)" = 700

  local swan_conf="$dest$strongswan_d/charon/espgw.conf"
  check "$name: $strongswan_d/charon/espgw.conf is configs/strongswan.d/charon/espgw.conf" \
    same_file "$swan_conf" "$source/configs/strongswan.d/charon/espgw.conf"

  local unit="$dest$unit_dir/espgw.service"
  check "$name: $unit_dir/espgw.service installed" test -f "$unit"
  check "$name: the unit starts ${prefix%/}/sbin/espgw -c /etc/espgw/espgw.conf" \
    grep -qx "ExecStart=${prefix%/}/sbin/espgw -c /etc/espgw/espgw.conf" "$unit"
  check "$name: the unit checks the configuration before a reload with ${prefix%/}/sbin/espgw --check" \
    grep -qx "ExecReload=${prefix%/}/sbin/espgw --check -c /etc/espgw/espgw.conf" "$unit"
  if command -v systemd-analyze >/dev/null; then
    check "$name: systemd-analyze verify accepts the unit" verify_unit "$unit" "$dest"
  else
    echo "SKIP $name: systemd-analyze not found, unit not verified"
  fi

  local examples="$dest$doc/examples" f
  for f in README.md espgw.conf strongswan.conf swanctl/site-to-site-psk.conf \
           swanctl/site-to-site-x509.conf static/README.md static/site-a.conf static/site-b.conf \
           split/README.md split/espgw.conf split/strongswan-espgw.conf split/charon-espgw.service \
           split/charon-espgw split/swanctl/swanctl-espgw.conf; do
    check "$name: example $doc/examples/$f" same_file "$examples/$f" "$source/configs/$f"
  done
  for f in static/site-a.conf static/site-b.conf; do
    check "$name: example $f is installed 0600 (it holds keys)" \
      test "$(stat -c %a "$examples/$f")" = 600
  done
  check "$name: the installed example espgw.conf passes espgw --check" \
    "$sbin/espgw" --check -c "$examples/espgw.conf"
  check "$name: the installed split/espgw.conf passes espgw --check" \
    "$sbin/espgw" --check -c "$examples/split/espgw.conf"
  check "$name: split/charon-espgw is installed executable" test -x "$examples/split/charon-espgw"

  # charon's AppArmor rule for the control socket, which the package's postinst includes.
  local apparmor="$dest${prefix%/}/share/espgw/apparmor/usr.lib.ipsec.charon"
  check "$name: AppArmor rule for charon in share/espgw/apparmor" \
    same_file "$apparmor" "$source/configs/apparmor/usr.lib.ipsec.charon"
  # Man pages: each docs/man/NAME.N in share/man/manN.
  local man_pages=() page
  for page in "$source"/docs/man/*.[0-9]; do
    [[ -f $page ]] || continue
    local installed="$dest${prefix%/}/share/man/man${page##*.}/$(basename "$page")"
    check "$name: man page $(basename "$page") in share/man/man${page##*.}" same_file "$installed" "$page"
    man_pages+=("$installed")
  done

  # Nothing but these files under DESTDIR, and nothing elsewhere: install_manifest.txt
  # lists every file cmake installed (without DESTDIR), and each must be one of them.
  local expected=(
    "$sbin/espgw" "$sbin/espgwctl" "$plugin" "$swan_conf" "$unit"
    "$examples/README.md" "$examples/espgw.conf" "$examples/strongswan.conf"
    "$examples/swanctl/site-to-site-psk.conf" "$examples/swanctl/site-to-site-x509.conf"
    "$examples/static/README.md" "$examples/static/site-a.conf" "$examples/static/site-b.conf"
    "$examples/split/README.md" "$examples/split/espgw.conf" "$examples/split/strongswan-espgw.conf"
    "$examples/split/charon-espgw.service" "$examples/split/charon-espgw"
    "$examples/split/swanctl/swanctl-espgw.conf"
    "$apparmor" ${man_pages[@]+"${man_pages[@]}"})
  local unexpected
  unexpected=$(comm -13 <(printf '%s\n' "${expected[@]}" | sort) <(find "$dest" -type f | sort))
  check "$name: no other files installed${unexpected:+: $unexpected}" test -z "$unexpected"
  local elsewhere
  elsewhere=$(comm -13 <(printf '%s\n' "${expected[@]}" | sort) <(sed "s#^#$dest#" "$build/install_manifest.txt" | sort))
  check "$name: cmake installed ${#expected[@]} files, all under DESTDIR${elsewhere:+ (not: $elsewhere)}" \
    test -z "$elsewhere" -a "$(grep -c "" "$build/install_manifest.txt")" -eq "${#expected[@]}"
}

layout packaged /usr
layout custom "$tmp/opt"

echo "install_layout: $failures failed"
((failures == 0))
