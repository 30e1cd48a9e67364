// Why a packet was dropped. Every drop in the engine is attributed to exactly one reason
// and counted, per SA where the SA is known and engine-wide where it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace espgw::esp {

enum class DropReason : uint8_t {
  none = 0,            // not dropped
  too_short,           // shorter than the smallest valid packet at that layer
  malformed,           // header fields inconsistent (lengths, versions, ESP alignment)
  outer_fragment,      // fragmented outer packet: we do not reassemble
  not_esp,             // outer protocol is neither ESP nor UDP
  no_sa,               // SPI unknown
  replayed,            // sequence number already received
  outside_window,      // sequence number older than the anti-replay window
  icv_failure,         // authentication tag mismatch
  bad_padding,         // ESP padding is not 1, 2, 3, ...
  bad_next_header,     // next header neither IPv4 (4), IPv6 (41) nor dummy (59)
  dummy_packet,        // next header 59 (RFC 4303 dummy packet): dropped silently
  inner_malformed,     // inner version or length inconsistent with the ESP payload
  policy_mismatch,     // inner addresses outside the SA's traffic selectors
  sequence_exhausted,  // outbound sequence numbers used up: the SA must be rekeyed
  no_buffer_space,     // not enough headroom or tailroom to encapsulate in place
  inner_not_ip,        // outbound packet is not IPv4 or IPv6
  too_big,             // ESP packet would exceed the 65535-byte IP length limit
  nat_keepalive,       // RFC 3948 0xFF keepalive: consumed, nothing to deliver
  queue_full,          // the SA already has its maximum number of packets in flight
  // The sequence number is beyond what the state file has reserved (outbound) or beyond
  // the replay reservation (inbound): the number would not survive a crash, so it is
  // not used until the reservation is on disk.
  sequence_unreserved,
  // The SA's counter state is unknown (the state file was lost or corrupt, or charon
  // re-installed an SA espgw has no record of): it carries nothing on this key until it
  // is rekeyed, since a counter restarted at 1 would reuse nonces or accept replays.
  sa_held,
  count_  // number of reasons; keep last
};

inline constexpr size_t kDropReasonCount = static_cast<size_t>(DropReason::count_);

std::string_view drop_reason_name(DropReason reason);

}  // namespace espgw::esp
