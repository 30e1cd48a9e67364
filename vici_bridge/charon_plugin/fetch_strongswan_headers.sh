#!/usr/bin/env bash
# Puts strongSwan's source headers (libstrongswan, libcharon) for the installed version under
# DEST, for building the espgw charon plugin. Debian ships no charon headers, so they come
# from the source package through apt (tools/install-deps.sh adds the deb-src
# entry). The tarball is cached in ESPGW_STRONGSWAN_CACHE (default /var/cache/espgw) so a
# new build tree needs no network; the extracted headers are cached in DEST.
#   fetch_strongswan_headers.sh DEST
# Prints the source directory (DEST/strongswan-VERSION/src) on success.
set -euo pipefail
dest=$1
cache=${ESPGW_STRONGSWAN_CACHE:-/var/cache/espgw}

# The upstream version of the libstrongswan package that charon will load us into.
full=$(dpkg-query -W -f='${Version}' libstrongswan 2>/dev/null) ||
  { echo "libstrongswan is not installed (run tools/install-deps.sh)" >&2; exit 1; }
version=${full#*:}
version=${version%%-*}
src="$dest/strongswan-$version/src"
if [[ -f "$src/libcharon/kernel/kernel_ipsec.h" ]]; then
  echo "$src"
  exit 0
fi

tarball="$cache/strongswan_$version.orig.tar.bz2"
if [[ ! -f "$tarball" ]]; then
  mkdir -p "$cache"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  (cd "$scratch" && apt-get source --download-only "strongswan=$full" >/dev/null 2>&1) ||
    (cd "$scratch" && apt-get source --download-only strongswan >/dev/null 2>&1) || {
      echo "apt-get source strongswan failed: is a deb-src entry configured? (tools/install-deps.sh adds one)" >&2
      exit 1
    }
  [[ -f "$scratch/strongswan_$version.orig.tar.bz2" ]] ||
    { echo "apt-get source gave no strongswan_$version.orig.tar.bz2" >&2; exit 1; }
  mv "$scratch/strongswan_$version.orig.tar.bz2" "$tarball"
fi

mkdir -p "$dest"
# Headers only (and the VICI README, the protocol's reference), a few MB instead of 40.
tar -xjf "$tarball" -C "$dest" --wildcards --no-anchored \
  "strongswan-$version/src/libstrongswan/*.h" "strongswan-$version/src/libcharon/*.h" \
  "strongswan-$version/src/libcharon/plugins/vici/README.md"
[[ -f "$src/libcharon/kernel/kernel_ipsec.h" ]] || { echo "headers missing after extracting $tarball" >&2; exit 1; }
echo "$src"
