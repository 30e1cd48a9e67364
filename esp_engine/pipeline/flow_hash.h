// Flow identity for ECMP: which packets must stay on one SA so they keep their order.
// TCP, UDP, SCTP and UDP-Lite hash their 5-tuple; fragments (whose later pieces carry no
// ports) and every other protocol hash the address pair and protocol, so all pieces of
// a datagram take the same SA. The fields come from the packet's flow key, which the
// caller has already extracted for the policy lookup.
#pragma once

#include <cstdint>

#include "packet/flow_key.h"

namespace espgw::pipeline {

// `seed` keeps the mapping unpredictable to outsiders (per-gateway random value).
uint64_t flow_hash(const packet::FlowKey& key, uint64_t seed);

// A strong 64-bit mixer (the SplitMix64 finaliser).
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace espgw::pipeline
