// ESP tunnel-mode decapsulation (RFC 4303 3.4), in place in a PacketBuffer.
//
// The checks run in the RFC's order: SPI -> SA, anti-replay pre-check, ICV verification,
// anti-replay update, padding, next header, inner packet. They are split in steps so that
// a pipeline can verify many packets of one SA in parallel and serialise only the
// replay-window commit: esp_spi() + the caller's lookup, check() (lengths, pre-check),
// open() (ICV check and decryption, any thread), finish() (commit and everything after it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "esp/counters.h"
#include "esp/drop_reason.h"
#include "esp/esp_format.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "util/byte_order.h"

namespace espgw::esp {

struct PreparedDecap {
  InboundSa* sa = nullptr;  // the caller keeps the SA alive until finish() returns
  uint64_t sequence = 0;    // full sequence number, ESN high bits inferred
  // The outer header's traffic class (DSCP and ECN) as received, set by the caller before
  // decap_check(): finish() applies it to the inner packet under the SA's
  // OuterHeaderPolicy (RFC 6040), and drops what that table drops.
  uint8_t outer_traffic_class = 0;
};

// The SPI of the ESP packet in `packet`, or nullopt if it is too short to carry one.
// Inline: out of line, GCC returned the optional through a stack slot written in two
// pieces and read back whole, a failed store-to-load forward on every received packet.
inline std::optional<uint32_t> esp_spi(const PacketBuffer& packet) {
  if (packet.size() < kEspHeaderLength) return std::nullopt;
  return load_be32(packet.data());
}

// Length, alignment and anti-replay pre-check for a packet whose SA has been looked up.
// Drops count on the SA.
DropReason decap_check(InboundSa& sa, const PacketBuffer& packet, PreparedDecap& prepared);
// Verifies the ICV and decrypts in place. Safe to call concurrently.
DropReason decap_open(const PreparedDecap& prepared, PacketBuffer& packet);
// Commits the sequence number, checks the trailer and the inner packet, carries the outer
// traffic class inward, and narrows each packet to its inner packet (TFC padding removed), for
// packets of one SA (every prepared.sa the same), with one acquisition of the SA's replay-window
// lock for all of them. Fills in and counts each item's reason.
struct FinishItem {
  const PreparedDecap* prepared;
  PacketBuffer* packet;
  // Results (no initializers: a worker keeps arrays of these). `inner_length` is the
  // inner packet's own length, TFC padding excluded; valid when `reason` is none.
  DropReason reason;
  size_t inner_length;
};
void decap_finish_each(std::span<FinishItem> items);

}  // namespace espgw::esp
