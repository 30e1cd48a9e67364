// Which way traffic flows through a policy or an SA, in the kernel's XFRM terms.
#pragma once

#include <cstdint>

namespace espgw::xfrm {

// out: LAN -> tunnel (encrypt); in: tunnel -> this host; fwd: tunnel -> forwarded on to
// the LAN. SAs are only ever `out` or `in`; `fwd` exists for policies, because a gateway
// forwards what it decrypts and the kernel checks such packets against fwd policies.
enum class Direction : uint8_t { out, in, fwd };

}  // namespace espgw::xfrm
