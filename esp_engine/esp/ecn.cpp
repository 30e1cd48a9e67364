#include "esp/ecn.h"

#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

using packet::kIpv4HeaderLength;
using packet::kIpv6HeaderLength;

namespace {
constexpr uint8_t kEcnMask = 0x03;
constexpr uint8_t kNotEct = 0x00;
constexpr uint8_t kCongestionExperienced = 0x03;
}  // namespace

bool mark_congestion_experienced(std::span<uint8_t> packet) {
  if (packet.empty()) return false;
  uint8_t* p = packet.data();
  switch (p[0] >> 4) {
    case 4: {
      const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
      if (packet.size() < kIpv4HeaderLength || header_length < kIpv4HeaderLength ||
          header_length > packet.size())
        return false;
      const uint8_t ecn = p[1] & kEcnMask;
      if (ecn == kNotEct) return false;
      if (ecn == kCongestionExperienced) return true;
      // Incremental update (RFC 1624): a header that arrived with a wrong checksum keeps
      // a wrong one, as it would through a router.
      const uint16_t old_word = load_be16(p);
      p[1] |= kCongestionExperienced;
      uint32_t sum = uint32_t{static_cast<uint16_t>(~load_be16(p + 10))} +
                     uint32_t{static_cast<uint16_t>(~old_word)} + load_be16(p);
      sum = (sum & 0xFFFF) + (sum >> 16);
      sum = (sum & 0xFFFF) + (sum >> 16);
      store_be16(p + 10, static_cast<uint16_t>(~sum));
      return true;
    }
    case 6: {
      if (packet.size() < kIpv6HeaderLength) return false;
      // The traffic class straddles bytes 0 and 1; its ECN bits are byte 1's bits 4-5.
      const uint8_t ecn = (p[1] >> 4) & kEcnMask;
      if (ecn == kNotEct) return false;
      p[1] |= kCongestionExperienced << 4;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace espgw::esp
