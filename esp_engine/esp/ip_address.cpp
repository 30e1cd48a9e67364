#include "esp/ip_address.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace espgw::esp {

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buffer[INET6_ADDRSTRLEN];
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  IpAddress address;
  if (inet_pton(AF_INET, buffer, address.bytes.data()) == 1) {
    address.family = 4;
    return address;
  }
  if (inet_pton(AF_INET6, buffer, address.bytes.data()) == 1) {
    address.family = 6;
    return address;
  }
  return std::nullopt;
}

IpAddress IpAddress::v4(const uint8_t* four_bytes) {
  IpAddress a;
  a.family = 4;
  std::memcpy(a.bytes.data(), four_bytes, 4);
  return a;
}

IpAddress IpAddress::v6(const uint8_t* sixteen_bytes) {
  IpAddress a;
  a.family = 6;
  std::memcpy(a.bytes.data(), sixteen_bytes, 16);
  return a;
}

std::string IpAddress::to_string() const {
  char buffer[INET6_ADDRSTRLEN] = "";
  if (family == 4) inet_ntop(AF_INET, bytes.data(), buffer, sizeof buffer);
  if (family == 6) inet_ntop(AF_INET6, bytes.data(), buffer, sizeof buffer);
  return buffer;
}

std::optional<IpPrefix> IpPrefix::parse(std::string_view text) {
  auto slash = text.find('/');
  auto address = IpAddress::parse(text.substr(0, slash));
  if (!address) return std::nullopt;
  unsigned max_length = address->family == 4 ? 32 : 128;
  unsigned length = max_length;
  if (slash != std::string_view::npos) {
    auto digits = text.substr(slash + 1);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
    if (error != std::errc() || end != digits.data() + digits.size() || length > max_length)
      return std::nullopt;
  }
  return IpPrefix{*address, static_cast<uint8_t>(length)};
}

bool IpPrefix::contains(const IpAddress& candidate) const {
  if (candidate.family != address.family) return false;
  unsigned full_bytes = length / 8;
  if (std::memcmp(candidate.bytes.data(), address.bytes.data(), full_bytes) != 0) return false;
  unsigned rest = length % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (candidate.bytes[full_bytes] & mask) == (address.bytes[full_bytes] & mask);
}

std::string IpPrefix::to_string() const {
  return address.to_string() + "/" + std::to_string(length);
}

}  // namespace espgw::esp
