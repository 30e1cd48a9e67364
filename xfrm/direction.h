// Which way traffic flows through a policy or an SA, in the kernel's XFRM terms.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace espgw::xfrm {

// out: LAN -> tunnel (encrypt); in: tunnel -> this host; fwd: tunnel -> forwarded on to
// the LAN. SAs are only ever `out` or `in`; `fwd` exists for policies, because a gateway
// forwards what it decrypts and the kernel checks such packets against fwd policies.
enum class Direction : uint8_t { out, in, fwd };

// The words for directions, as the static file and the control socket write them.
constexpr std::string_view direction_name(Direction direction) {
  switch (direction) {
    case Direction::out:
      return "out";
    case Direction::in:
      return "in";
    case Direction::fwd:
      return "fwd";
  }
  return "?";
}

constexpr std::optional<Direction> parse_direction(std::string_view word) {
  if (word == "out") return Direction::out;
  if (word == "in") return Direction::in;
  if (word == "fwd") return Direction::fwd;
  return std::nullopt;
}

}  // namespace espgw::xfrm
