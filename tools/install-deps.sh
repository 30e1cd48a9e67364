#!/usr/bin/env bash
# Installs every build, test and benchmark dependency from Debian's packages.
# Idempotent: a second run installs nothing new and finishes in seconds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libsystemd-dev                                  # sd_notify: the unit's Type=notify and watchdog
  dpkg-dev systemd-container                      # cpack's dpkg-shlibdeps; the unit tested in systemd-nspawn
  clang clang-format libclang-rt-14-dev          # fuzzing (libFuzzer) and formatting
  libipsec-mb-dev libssl-dev libmnl-dev           # crypto backends, netlink
  libnftables-dev nftables                        # in/fwd policies in the kernel; nft for tests
  libnftnl-dev                                    # the firewall sync's one-policy rules as netlink messages
  openssl                                         # test certificates (tests/charon x509)
  bzip2                                           # unpacks the strongSwan source tarball
  libgtest-dev libgmock-dev libbenchmark-dev      # unit tests and micro benchmarks
  python3 python3-scapy python3-cryptography python3-matplotlib
  iperf3 tshark iproute2 iputils-ping sysstat     # traffic and capture in namespaces
  ethtool                                         # veths in NAPI mode (TSO off, GRO on) in tests/charon
  strongswan-charon strongswan-swanctl libcharon-extra-plugins
  libstrongswan-standard-plugins
  wireguard-go wireguard-tools                    # site-to-site benchmark baseline
  linux-perf                                      # BENCH_PROFILE=1: where the CPU goes
  valgrind                                        # bench/count_pipeline_costs.sh
  libxdp-dev libbpf-dev                           # bench/wan_transport_bench.sh: AF_XDP on the WAN veth
  groff-base                                      # renders the man pages (docs/man) in a test
  python3-prometheus-client                       # parses espgwctl metrics in a test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer once, non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The charon plugin compiles against strongSwan's source headers, which Debian ships only
# in the source package: add a deb-src entry for the main suites (the security
# suite's .dsc is not served) and fetch the tarball into the cache the build reads.
deb_src=/etc/apt/sources.list.d/espgw-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  uri=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  cat >"$deb_src" <<EOS
Types: deb-src
URIs: ${uri:-http://deb.debian.org/debian}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
  apt-get update -q
fi
bash "$(dirname "$0")/../vici_bridge/charon_plugin/fetch_strongswan_headers.sh" \
  "${ESPGW_STRONGSWAN_CACHE:-/var/cache/espgw}/headers" >/dev/null
