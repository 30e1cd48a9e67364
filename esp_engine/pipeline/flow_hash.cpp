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
  uint64_t state = mix64(seed);
  if (p.size() >= 20 && p[0] >> 4 == 4) {
    const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
    const uint8_t protocol = p[9];
    const bool fragment = (load_be16(&p[6]) & 0x3FFF) != 0;
    state = absorb(state, &p[12], 8);
    state = mix64(state ^ protocol);
    if (!fragment && has_ports(protocol) && header_length >= 20 && p.size() >= header_length + 4)
      state = absorb(state, &p[header_length], 4);
    return state;
  }
  if (p.size() >= 40 && p[0] >> 4 == 6) {
    state = absorb(state, &p[8], 32);
    uint8_t next = p[6];
    size_t offset = 40;
    while (next == kHopByHop || next == kRouting || next == kDestinationOptions) {
      if (p.size() < offset + 8) return mix64(state ^ next);
      const size_t length = (size_t{p[offset + 1]} + 1) * 8;
      next = p[offset];
      offset += length;
    }
    state = mix64(state ^ next);
    if (next != kFragment && has_ports(next) && p.size() >= offset + 4)
      state = absorb(state, &p[offset], 4);
    return state;
  }
  return absorb(state, p.data(), p.size() < 16 ? p.size() : 16);
}

}  // namespace espgw::pipeline
