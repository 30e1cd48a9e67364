#include "esp/outer_header.h"

#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

namespace {

constexpr uint8_t kEcnMask = 0x03;
constexpr uint8_t kDscpMask = 0xFC;
constexpr uint8_t kNotEct = 0x00;
constexpr uint8_t kEct1 = 0x01;
constexpr uint8_t kEct0 = 0x02;
constexpr uint8_t kCongestionExperienced = 0x03;

// The inner ECN field after decapsulation, RFC 6040 section 4.2's table; `drop` is set for
// the one combination the table drops.
uint8_t decapsulated_ecn(uint8_t inner, uint8_t outer, bool& drop) {
  drop = false;
  if (outer == kCongestionExperienced) {
    if (inner == kNotEct) {
      drop = true;
      return inner;
    }
    return kCongestionExperienced;
  }
  if (outer == kEct1 && inner == kEct0) return kEct1;
  return inner;
}

uint8_t new_traffic_class(uint8_t inner, uint8_t outer, const OuterHeaderPolicy& policy,
                          bool& drop) {
  drop = false;
  uint8_t ecn = inner & kEcnMask;
  if (policy.copy_ecn) ecn = decapsulated_ecn(ecn, outer & kEcnMask, drop);
  const uint8_t dscp = policy.copy_dscp_in ? (outer & kDscpMask) : (inner & kDscpMask);
  return static_cast<uint8_t>(dscp | ecn);
}

}  // namespace

bool parse_dscp_copy(std::string_view word, OuterHeaderPolicy& policy) {
  if (word != "out" && word != "in" && word != "yes" && word != "no") return false;
  policy.copy_dscp_out = word == "out" || word == "yes";
  policy.copy_dscp_in = word == "in" || word == "yes";
  return true;
}

uint8_t outer_traffic_class(uint8_t inner, const OuterHeaderPolicy& policy) {
  const uint8_t dscp = policy.copy_dscp_out ? (inner & kDscpMask) : 0;
  const uint8_t ecn = policy.copy_ecn ? (inner & kEcnMask) : kNotEct;
  return static_cast<uint8_t>(dscp | ecn);
}

bool outer_dont_fragment(bool inner_dont_fragment, const OuterHeaderPolicy& policy) {
  switch (policy.dont_fragment) {
    case OuterHeaderPolicy::DontFragment::copy:
      return inner_dont_fragment;
    case OuterHeaderPolicy::DontFragment::set:
      return true;
    case OuterHeaderPolicy::DontFragment::clear:
      return false;
  }
  return true;
}

DropReason apply_outer_traffic_class(std::span<uint8_t> inner, uint8_t outer,
                                     const OuterHeaderPolicy& policy) {
  if (!policy.copy_ecn && !policy.copy_dscp_in) return DropReason::none;
  if (inner.empty()) return DropReason::none;
  uint8_t* p = inner.data();
  bool drop = false;
  switch (p[0] >> 4) {
    case 4: {
      if (inner.size() < packet::kIpv4HeaderLength) return DropReason::none;
      const uint8_t updated = new_traffic_class(p[1], outer, policy, drop);
      if (drop) return DropReason::ecn_not_capable;
      if (updated == p[1]) return DropReason::none;
      // Incremental checksum update (RFC 1624) over the first 16-bit word.
      const uint16_t old_word = load_be16(p);
      p[1] = updated;
      uint32_t sum = uint32_t{static_cast<uint16_t>(~load_be16(p + 10))} +
                     uint32_t{static_cast<uint16_t>(~old_word)} + load_be16(p);
      sum = (sum & 0xFFFF) + (sum >> 16);
      sum = (sum & 0xFFFF) + (sum >> 16);
      store_be16(p + 10, static_cast<uint16_t>(~sum));
      return DropReason::none;
    }
    case 6: {
      if (inner.size() < packet::kIpv6HeaderLength) return DropReason::none;
      // The traffic class straddles bytes 0 and 1.
      const uint8_t current = static_cast<uint8_t>((p[0] << 4) | (p[1] >> 4));
      const uint8_t updated = new_traffic_class(current, outer, policy, drop);
      if (drop) return DropReason::ecn_not_capable;
      p[0] = static_cast<uint8_t>((p[0] & 0xF0) | (updated >> 4));
      p[1] = static_cast<uint8_t>((p[1] & 0x0F) | (updated << 4));
      return DropReason::none;
    }
    default:
      return DropReason::none;
  }
}

}  // namespace espgw::esp
