#include "pipeline/flow_hash.h"

#include <cstring>

#include "util/byte_order.h"

namespace espgw::pipeline {

namespace {

constexpr uint8_t kTcp = 6, kUdp = 17, kSctp = 132, kUdpLite = 136;
constexpr uint8_t kHopByHop = 0, kRouting = 43, kFragment = 44, kDestinationOptions = 60;

bool has_ports(uint8_t protocol) {
  return protocol == kTcp || protocol == kUdp || protocol == kSctp || protocol == kUdpLite;
}

uint64_t absorb(uint64_t state, const uint8_t* data, size_t length) {
  while (length >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    state = mix64(state ^ word);
    data += 8;
    length -= 8;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data, length);
  return mix64(state ^ tail ^ (uint64_t{length} << 56));
}

}  // namespace

uint64_t flow_hash(std::span<const uint8_t> p, uint64_t seed) {
  // Every packet of an ECMP group is hashed, so the fields are gathered into whole words
  // and mixed once per word: two rounds for IPv4, five for IPv6 (a round per 8 bytes
  // absorbed, as before, cost five rounds for IPv4 and was ~1% of the in-memory
  // pipeline's time with 64 SAs). The protocol, the ports and a tag of the address family
  // share the last word, so a fragment or a port-less protocol differs from a 5-tuple
  // whose ports happen to be zero.
  if (p.size() >= 20 && p[0] >> 4 == 4) {
    const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
    const uint8_t protocol = p[9];
    const bool fragment = (load_be16(&p[6]) & 0x3FFF) != 0;
    uint64_t addresses;
    std::memcpy(&addresses, &p[12], 8);
    uint64_t last = protocol | uint64_t{4} << 56;
    if (!fragment && has_ports(protocol) && header_length >= 20 && p.size() >= header_length + 4)
      last |= uint64_t{load_be32(&p[header_length])} << 8 | uint64_t{1} << 48;
    return mix64(mix64(seed ^ addresses) ^ last);
  }
  if (p.size() >= 40 && p[0] >> 4 == 6) {
    uint64_t state = seed;
    for (size_t offset = 8; offset < 40; offset += 8) {
      uint64_t word;
      std::memcpy(&word, &p[offset], 8);
      state = mix64(state ^ word);
    }
    uint8_t next = p[6];
    size_t offset = 40;
    while (next == kHopByHop || next == kRouting || next == kDestinationOptions) {
      if (p.size() < offset + 8) return mix64(state ^ next ^ uint64_t{7} << 56);
      const size_t length = (size_t{p[offset + 1]} + 1) * 8;
      next = p[offset];
      offset += length;
    }
    uint64_t last = next | uint64_t{6} << 56;
    if (next != kFragment && has_ports(next) && p.size() >= offset + 4)
      last |= uint64_t{load_be32(&p[offset])} << 8 | uint64_t{1} << 48;
    return mix64(state ^ last);
  }
  return absorb(mix64(seed), p.data(), p.size() < 16 ? p.size() : 16);
}

}  // namespace espgw::pipeline
