// What a tunnel SA carries between the inner and the outer IP header: the DSCP (RFC 2983,
// RFC 4301 5.1.2.1), the ECN field (RFC 6040) and, outbound over IPv4, the DF bit
// (RFC 4301 8.1). Each SA says which it copies, as charon's copy_dscp, copy_ecn and copy_df
// settings say for a CHILD_SA; the defaults are charon's.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "esp/drop_reason.h"

namespace espgw::esp {

struct OuterHeaderPolicy {
  // DSCP inner -> outer when sending (charon's copy_dscp = out or yes); otherwise the outer
  // DSCP is 0 (best effort), hiding the inner marking.
  bool copy_dscp_out = true;
  // DSCP outer -> inner on receipt (copy_dscp = in or yes): for a peer that marks the
  // outer header and a LAN that trusts it.
  bool copy_dscp_in = false;
  // RFC 6040 normal mode both ways (copy_ecn = yes): the inner ECN field is copied out and
  // congestion marked on the outer header reaches the inner one. Off: the outer header is
  // Not-ECT (RFC 6040 compatibility mode) and the outer ECN field is ignored.
  bool copy_ecn = true;
  // The outer IPv4 DF bit: copied from an inner IPv4 header and set for an inner IPv6
  // packet (copy_df = yes), always set, or always clear (copy_df = no: routers on the way
  // may fragment the ESP packet).
  enum class DontFragment : uint8_t { copy, set, clear };
  DontFragment dont_fragment = DontFragment::copy;

  friend bool operator==(const OuterHeaderPolicy&, const OuterHeaderPolicy&) = default;
};

// Sets copy_dscp_out and copy_dscp_in from charon's copy_dscp word: "out", "in", "yes" or
// "no". False, and the policy unchanged, for anything else.
bool parse_dscp_copy(std::string_view word, OuterHeaderPolicy& policy);

// The outer traffic class (IPv4 TOS byte, IPv6 traffic class: DSCP << 2 | ECN) for an inner
// packet with traffic class `inner`.
uint8_t outer_traffic_class(uint8_t inner, const OuterHeaderPolicy& policy);
// The outer IPv4 DF bit; `inner_dont_fragment` is the inner IPv4 DF bit (true for IPv6).
bool outer_dont_fragment(bool inner_dont_fragment, const OuterHeaderPolicy& policy);

// Applies the outer header's traffic class `outer` to the decrypted inner IPv4 or IPv6
// packet in place (fixing the IPv4 header checksum): congestion experienced on the outer
// header marks an ECN-capable inner packet CE, and ECT(1) outside turns ECT(0) inside into
// ECT(1) (RFC 6040 4.2); the DSCP is copied in if the policy says so. CE outside an inner
// packet that is Not-ECT means a router signalled congestion that the endpoints cannot
// hear: RFC 6040 drops it (DropReason::ecn_not_capable). Anything too short to be an IP
// header is left alone (the caller already checked the inner packet).
DropReason apply_outer_traffic_class(std::span<uint8_t> inner, uint8_t outer,
                                     const OuterHeaderPolicy& policy);

}  // namespace espgw::esp
