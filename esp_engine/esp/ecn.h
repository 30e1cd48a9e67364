// Explicit Congestion Notification on a decrypted inner packet (RFC 3168): where queue
// management would drop a packet whose sender can hear about congestion without losing
// it (ECT(0) or ECT(1) in the IP header), it marks the packet Congestion Experienced
// instead. The TCP receiver echoes the mark and the sender slows down as it would for a
// loss, without the retransmission.
#pragma once

#include <cstdint>
#include <span>

namespace espgw::esp {

// Sets CE on an ECN-capable IPv4 or IPv6 packet (fixing the IPv4 header checksum) and
// returns true; already CE counts too. False, and the packet unchanged, for Not-ECT or
// anything too short to be an IP header: the caller drops those.
bool mark_congestion_experienced(std::span<uint8_t> packet);

}  // namespace espgw::esp
