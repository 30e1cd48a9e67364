// Inner packets for the flow key and selector tests: just enough header to classify, with every
// field a test may want to vary (protocol, ports, fragmentation, IPv6 extension headers).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace espgw::test {

struct Ipv4Spec {
  std::string_view source = "10.1.0.1";
  std::string_view destination = "10.2.0.1";
  uint8_t protocol = 17;
  uint16_t source_port = 1000;
  uint16_t destination_port = 2000;
  uint16_t fragment_field = 0x4000;  // flags and offset; DF only by default
  uint8_t option_words = 0;          // extra 32-bit words of IPv4 options
};
// Header, then 8 bytes of transport header (ports first) for any protocol.
std::vector<uint8_t> ipv4_packet(const Ipv4Spec& spec);

struct Ipv6Spec {
  std::string_view source = "fd00:1::1";
  std::string_view destination = "fd00:2::1";
  uint8_t protocol = 17;  // the upper-layer protocol
  uint16_t source_port = 1000;
  uint16_t destination_port = 2000;
  bool hop_by_hop = false;           // add an 8-byte hop-by-hop options header
  bool destination_options = false;  // add a 16-byte destination options header
  bool fragment = false;             // add a fragment header with `fragment_field`
  uint16_t fragment_field = 0;       // offset << 3 | M flag
};
std::vector<uint8_t> ipv6_packet(const Ipv6Spec& spec);

}  // namespace espgw::test
