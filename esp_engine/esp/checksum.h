// RFC 1071 Internet checksum, for the outer IPv4 header and the UDP checksum over IPv6
// (where RFC 8200 forbids a zero UDP checksum).
#pragma once

#include <cstddef>
#include <cstdint>

namespace espgw::esp {

// One's-complement sum of `length` bytes folded into `sum`, not yet complemented.
// Uses AVX2 where the CPU has it (checked once), otherwise checksum_add_portable.
uint32_t checksum_add(uint32_t sum, const uint8_t* data, size_t length);
// The same without vector instructions; public so that tests check it on AVX2 machines too.
uint32_t checksum_add_portable(uint32_t sum, const uint8_t* data, size_t length);
uint16_t checksum_finish(uint32_t sum);

uint16_t ipv4_header_checksum(const uint8_t* header, size_t length);
// UDP checksum over IPv6: pseudo-header plus the UDP header and payload at `udp`.
uint16_t udp6_checksum(const uint8_t* source, const uint8_t* destination, const uint8_t* udp,
                       size_t udp_length);

}  // namespace espgw::esp
