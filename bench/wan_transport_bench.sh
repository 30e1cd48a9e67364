#!/usr/bin/env bash
# The WAN's transport alone, UDP GSO/GRO sockets against AF_XDP in copy mode, on the veth
# pair the site-to-site benchmark's WAN uses: CPU cycles per delivered ESP-size datagram,
# both ends counted, alternating rounds, medians and their ratio (bench/wan_transport_bench.cpp
# says what each side does). It answers whether driving the WAN through AF_XDP would
# take cycles off each ESP packet on this topology.
#
# Usage: bench/wan_transport_bench.sh [BINARY] [SECONDS] [ROUNDS]
#   BINARY   default build/release/bench/espgw_wan_transport_bench
# Needs root. Makes the namespaces espgw-wtA and espgw-wtB and removes them at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/build/release/bench/espgw_wan_transport_bench}
seconds=${2:-3}
rounds=${3:-5}
a=espgw-wtA b=espgw-wtB
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add "$a"
ip netns add "$b"
ip link add wt0 netns "$a" type veth peer name wt1 netns "$b"
ip -n "$a" addr add 192.0.2.1/24 dev wt0
ip -n "$b" addr add 192.0.2.2/24 dev wt1
ip -n "$a" link set wt0 up
ip -n "$b" link set wt1 up
ip -n "$a" link set lo up
ip -n "$b" link set lo up
# The UDP sender needs the peer's MAC in its neighbour table, as a gateway would have it.
ip netns exec "$a" ping -c1 -W1 192.0.2.2 >/dev/null
# libxdp keeps its program dispatcher in bpffs.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
echo "kernel $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$binary" "$a" wt0 "$b" wt1 192.0.2.1 192.0.2.2 "$seconds" "$rounds"
