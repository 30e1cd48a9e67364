// A fingerprint of an SA's key material: what the control side keeps instead of the key
// itself, to tell whether a reloaded SA is the one already installed and to tie persisted
// state (sequence numbers) to the key it was counted under, without holding raw key
// bytes longer than it takes to expand them.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace espgw::xfrm {

using KeyFingerprint = std::array<uint8_t, 32>;

// SHA-256 over the domain label "espgw sa key v1" followed by `key` (the cipher key and
// salt as the SA carries them). The label keeps the value apart from any other hash of
// the same bytes; the "v1" lets a later format change its input without colliding. A
// one-way hash of 160+ bits of random key material reveals nothing usable about the key.
KeyFingerprint key_fingerprint(std::span<const uint8_t> key);

// Equal in constant time: the values are derived from secrets.
bool same_fingerprint(const KeyFingerprint& a, const KeyFingerprint& b);

}  // namespace espgw::xfrm
