// Which way traffic flows through a policy or an SA, in the kernel's XFRM terms.
#pragma once

#include <cstdint>

namespace espgw::xfrm {

// out: LAN -> tunnel (encrypt); in: tunnel -> this host; fwd: tunnel -> forwarded on to
// the LAN. SAs are only ever `out` or `in`; `fwd` exists for policies, because a gateway
// forwards what it decrypts and the kernel checks such packets against fwd policies.
enum class Direction : uint8_t { out, in, fwd };

constexpr const char* direction_name(Direction direction) {
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

}  // namespace espgw::xfrm
