#include "support/flow_packets.h"

#include <algorithm>

#include "esp/ip_address.h"

namespace espgw::test {

namespace {

void put16(std::vector<uint8_t>& p, size_t at, uint16_t v) {
  p[at] = static_cast<uint8_t>(v >> 8);
  p[at + 1] = static_cast<uint8_t>(v);
}

void append_transport(std::vector<uint8_t>& p, uint16_t source_port, uint16_t destination_port) {
  const size_t at = p.size();
  p.resize(at + 8, 0);
  put16(p, at, source_port);
  put16(p, at + 2, destination_port);
}

}  // namespace

std::vector<uint8_t> ipv4_packet(const Ipv4Spec& spec) {
  const size_t header_length = 20 + size_t{spec.option_words} * 4;
  std::vector<uint8_t> p(header_length, 0);
  p[0] = static_cast<uint8_t>(0x40 | (header_length / 4));
  put16(p, 6, spec.fragment_field);
  p[8] = 64;
  p[9] = spec.protocol;
  const auto source = esp::IpAddress::parse(spec.source).value();
  const auto destination = esp::IpAddress::parse(spec.destination).value();
  std::copy_n(source.bytes.begin(), 4, p.begin() + 12);
  std::copy_n(destination.bytes.begin(), 4, p.begin() + 16);
  append_transport(p, spec.source_port, spec.destination_port);
  put16(p, 2, static_cast<uint16_t>(p.size()));
  return p;
}

std::vector<uint8_t> ipv6_packet(const Ipv6Spec& spec) {
  std::vector<uint8_t> p(40, 0);
  p[0] = 0x60;
  p[7] = 64;
  const auto source = esp::IpAddress::parse(spec.source).value();
  const auto destination = esp::IpAddress::parse(spec.destination).value();
  std::copy_n(source.bytes.begin(), 16, p.begin() + 8);
  std::copy_n(destination.bytes.begin(), 16, p.begin() + 24);
  // Each extension header's "next header" is patched in when the next one is added.
  size_t next_field = 6;
  const auto add_header = [&](uint8_t type, size_t length) {
    p[next_field] = type;
    next_field = p.size();
    p.resize(p.size() + length, 0);
    if (type != 44) p[next_field + 1] = static_cast<uint8_t>(length / 8 - 1);
  };
  if (spec.hop_by_hop) add_header(0, 8);
  if (spec.destination_options) add_header(60, 16);
  if (spec.fragment) {
    add_header(44, 8);
    put16(p, next_field + 2, spec.fragment_field);
  }
  p[next_field] = spec.protocol;
  append_transport(p, spec.source_port, spec.destination_port);
  put16(p, 4, static_cast<uint16_t>(p.size() - 40));
  return p;
}

}  // namespace espgw::test
