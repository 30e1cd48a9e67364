// Why a packet was dropped. Every drop in the engine is attributed to exactly one reason
// and counted, per SA where the SA is known and engine-wide where it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace espgw::esp {

// The reasons, each declared once: X(symbol, name, help). The list expands into the enum,
// the name table (log lines, status, espgwctl) and the help table (docs/counters.md, which a
// unit test checks against it).
#define ESPGW_DROP_REASONS(X)                                                                      \
  X(too_short, "too-short", "shorter than the smallest valid packet at that layer")                \
  X(malformed, "malformed", "header fields inconsistent (lengths, versions, ESP alignment)")       \
  X(outer_fragment, "outer-fragment", "fragmented outer packet: espgw does not reassemble")        \
  X(not_esp, "not-esp", "outer protocol is neither ESP nor UDP")                                   \
  X(no_sa, "no-sa", "SPI unknown")                                                                 \
  X(replayed, "replayed", "sequence number already received")                                      \
  X(outside_window, "outside-window", "sequence number older than the anti-replay window")         \
  X(icv_failure, "icv-failure", "authentication tag mismatch")                                     \
  X(bad_padding, "bad-padding", "ESP padding is not 1, 2, 3, ...")                                 \
  X(bad_next_header, "bad-next-header", "next header neither IPv4 (4), IPv6 (41) nor dummy (59)")  \
  X(dummy_packet, "dummy-packet", "next header 59 (RFC 4303 dummy packet): dropped silently")      \
  X(inner_malformed, "inner-malformed",                                                            \
    "inner version or length inconsistent with the ESP payload")                                   \
  X(policy_mismatch, "policy-mismatch", "inner addresses outside the SA's traffic selectors")      \
  X(sequence_exhausted, "sequence-exhausted",                                                      \
    "outbound sequence numbers used up: the SA must be rekeyed")                                   \
  X(no_buffer_space, "no-buffer-space", "not enough headroom or tailroom to encapsulate in place") \
  X(inner_not_ip, "inner-not-ip", "outbound packet is not IPv4 or IPv6")                           \
  X(too_big, "too-big", "ESP packet would exceed the 65535-byte IP length limit")                  \
  X(nat_keepalive, "nat-keepalive", "RFC 3948 0xFF keepalive: consumed, nothing to deliver")       \
  X(ecn_not_capable, "ecn-not-capable",                                                            \
    "congestion experienced on the outer header of a packet whose inner header is not "            \
    "ECN-capable: RFC 6040 drops it, since its endpoints cannot hear the signal")                  \
  X(queue_full, "queue-full", "the SA already has its maximum number of packets in flight")        \
  X(sequence_unreserved, "sequence-unreserved",                                                    \
    "the sequence number is beyond what the state file has reserved (outbound) or beyond "         \
    "the replay reservation (inbound): it would not survive a crash, so it is not used "           \
    "until the reservation is on disk")                                                            \
  X(sa_held, "sa-held",                                                                            \
    "the SA's counter state is unknown (state file lost or corrupt, or charon re-installed "       \
    "an SA espgw has no record of): nothing is carried on its key until it is rekeyed, "           \
    "since a counter restarted at 1 would reuse nonces or accept replays")

enum class DropReason : uint8_t {
  none = 0,  // not dropped
#define ESPGW_DROP_REASON_ENUM(symbol, name, help) symbol,
  ESPGW_DROP_REASONS(ESPGW_DROP_REASON_ENUM)
#undef ESPGW_DROP_REASON_ENUM
      count_  // number of reasons; keep last
};

inline constexpr size_t kDropReasonCount = static_cast<size_t>(DropReason::count_);

// "none" for DropReason::none, "unknown" out of range.
std::string_view drop_reason_name(DropReason reason);
std::string_view drop_reason_help(DropReason reason);

}  // namespace espgw::esp
