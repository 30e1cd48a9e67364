// An IPv4 or IPv6 address and prefix, as used in tunnel endpoints and traffic selectors.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace espgw::esp {

struct IpAddress {
  uint8_t family = 0;               // 4 or 6; 0 = unset
  std::array<uint8_t, 16> bytes{};  // IPv4 uses the first 4 bytes

  static std::optional<IpAddress> parse(std::string_view text);
  static IpAddress v4(const uint8_t* four_bytes);
  static IpAddress v6(const uint8_t* sixteen_bytes);
  std::string to_string() const;
  size_t length() const { return family == 4 ? 4 : 16; }
  // Family first, then bytes: an order for maps, not a numeric one.
  auto operator<=>(const IpAddress&) const = default;
};

struct IpPrefix {
  IpAddress address;
  uint8_t length = 0;  // prefix length in bits

  // "10.1.0.0/16", "2001:db8::/32"; a bare address means a host prefix.
  static std::optional<IpPrefix> parse(std::string_view text);
  bool contains(const IpAddress& candidate) const;
  std::string to_string() const;
};

}  // namespace espgw::esp
