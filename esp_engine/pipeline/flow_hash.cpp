#include "pipeline/flow_hash.h"

#include <cstring>

namespace espgw::pipeline {

uint64_t flow_hash(const packet::FlowKey& key, uint64_t seed) {
  // Every packet of an ECMP group is hashed, so the fields are gathered into whole words
  // and mixed once per word: two rounds for IPv4, five for IPv6 (a round per 8 bytes
  // absorbed, as before, cost five rounds for IPv4 and was ~1% of the in-memory
  // pipeline's time with 64 SAs). The protocol, the ports and the address family share
  // the last word, with a bit that says whether ports are known, so a fragment or a
  // port-less protocol differs from a 5-tuple whose ports happen to be zero.
  uint64_t last = key.protocol | uint64_t{key.source.family} << 56;
  if (key.ports_known)
    last |=
        uint64_t{key.source_port} << 24 | uint64_t{key.destination_port} << 8 | uint64_t{1} << 48;
  if (key.source.family == 4) {
    uint32_t source, destination;
    std::memcpy(&source, key.source.bytes.data(), 4);
    std::memcpy(&destination, key.destination.bytes.data(), 4);
    return mix64(mix64(seed ^ (source | uint64_t{destination} << 32)) ^ last);
  }
  uint64_t words[4];
  std::memcpy(&words[0], key.source.bytes.data(), 16);
  std::memcpy(&words[2], key.destination.bytes.data(), 16);
  uint64_t state = seed;
  for (const uint64_t word : words) state = mix64(state ^ word);
  return mix64(state ^ last);
}

}  // namespace espgw::pipeline
