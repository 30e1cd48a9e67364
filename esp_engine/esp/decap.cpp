#include "esp/decap.h"

#include <algorithm>

#include "esp/esp_format.h"
#include "packet/header_chain.h"
#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

using packet::kIpv4HeaderLength;
using packet::kIpv6HeaderLength;
using packet::kPortsLength;
using packet::kProtocolIcmp;
using packet::kProtocolIcmpv6;
using packet::kProtocolIpv4;
using packet::kProtocolIpv6;
using packet::kProtocolNoNext;
using packet::kProtocolSctp;
using packet::kProtocolTcp;
using packet::kProtocolUdp;
using packet::kProtocolUdpLite;

namespace {

DropReason drop(SaCounters& counters, DropReason reason) {
  counters.count(reason);
  return reason;
}

DropReason replay_reason(ReplayWindow::Verdict verdict) {
  switch (verdict) {
    case ReplayWindow::Verdict::replayed:
      return DropReason::replayed;
    case ReplayWindow::Verdict::unreserved:
      return DropReason::sequence_unreserved;
    case ReplayWindow::Verdict::held:
      return DropReason::sa_held;
    case ReplayWindow::Verdict::accept:
    case ReplayWindow::Verdict::outside_window:
      break;
  }
  return DropReason::outside_window;
}

// Checks the decrypted inner packet against its next-header value and returns its length
// as stated by its own header; anything after that is TFC padding (RFC 4303 2.7).
DropReason inner_length(const uint8_t* p, size_t available, uint8_t next_header, size_t& length) {
  if (next_header == kProtocolIpv4) {
    if (available < kIpv4HeaderLength || p[0] >> 4 != 4) return DropReason::inner_malformed;
    const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
    length = load_be16(p + 2);
    if (header_length < kIpv4HeaderLength || length < header_length || length > available)
      return DropReason::inner_malformed;
    return DropReason::none;
  }
  if (available < kIpv6HeaderLength || p[0] >> 4 != 6) return DropReason::inner_malformed;
  // A payload length of 0 is taken literally (a bare 40-byte header): a jumbogram
  // cannot fit in ESP, and encapsulation accepts the same packet.
  length = load_be16(p + 4) + kIpv6HeaderLength;
  if (length > available) return DropReason::inner_malformed;
  return DropReason::none;
}

// The walk the selector check makes over an inner IPv6 header chain: AH is stepped over to
// the protocol it protects. Longer chains are legal but unheard of; a packet whose chain
// goes on longer only matches selectors of any protocol.
constexpr packet::ChainRules kSelectorChainRules{.step_over_ah = true, .max_extension_headers = 8};

// The next-layer protocol and ports of an inner packet of `length` bytes (its IP header
// already checked by inner_length), for selectors that name them.
void read_transport(const uint8_t* p, size_t length, InnerFlow& flow) {
  const packet::HeaderChain chain = packet::walk_header_chain({p, length}, kSelectorChainRules);
  switch (chain.end) {
    case packet::ChainEnd::upper_layer:
      break;
    case packet::ChainEnd::fragment_payload:
      // A non-first fragment carries no transport header (RFC 4301 4.4.1.1).
      flow.protocol = chain.protocol;
      flow.protocol_known = true;
      return;
    case packet::ChainEnd::not_ip:
    case packet::ChainEnd::truncated:
    case packet::ChainEnd::too_many_headers:
      return;  // protocol unknown
  }
  flow.protocol = chain.protocol;
  flow.protocol_known = true;
  // An extension header that claims more than the packet holds leaves no transport header.
  if (chain.offset > length) return;
  const uint8_t* transport = p + chain.offset;
  const size_t available = length - chain.offset;
  switch (chain.protocol) {
    case kProtocolTcp:
    case kProtocolUdp:
    case kProtocolSctp:
    case kProtocolUdpLite:
      if (available < kPortsLength) return;
      flow.source_port = load_be16(transport);
      flow.destination_port = load_be16(transport + 2);
      flow.ports_known = true;
      return;
    case kProtocolIcmp:
    case kProtocolIcmpv6:
      if (available < 2) return;
      // Type and code as one 16-bit value, checked against both port ranges.
      flow.source_port = flow.destination_port = load_be16(transport);
      flow.ports_known = true;
      return;
    default:
      return;
  }
}

// RFC 4301 5.2: the decrypted packet must match one of the SA's selectors. Protocol and
// ports are read only for a selector whose addresses match and that names them; the
// common selectors (addresses only) cost two prefix checks.
bool inner_packet_allowed(const InboundSa& sa, const uint8_t* p, size_t length) {
  const auto& selectors = sa.config().selectors;
  if (selectors.empty()) return true;
  InnerFlow flow;
  if (p[0] >> 4 == 4) {
    flow.source = IpAddress::v4(p + 12);
    flow.destination = IpAddress::v4(p + 16);
  } else {
    flow.source = IpAddress::v6(p + 8);
    flow.destination = IpAddress::v6(p + 24);
  }
  bool transport_read = false;
  for (const auto& selector : selectors) {
    if (!selector.remote.contains(flow.source) || !selector.local.contains(flow.destination))
      continue;
    if (selector.protocol == 0 && selector.any_ports()) return true;
    if (!transport_read) {
      read_transport(p, length, flow);
      transport_read = true;
    }
    if (selector_matches(selector, flow)) return true;
  }
  return false;
}

}  // namespace

DropReason decap_check(InboundSa& sa, const PacketBuffer& packet, PreparedDecap& prepared) {
  const EspLayout& layout = sa.crypto().layout();
  if (packet.size() < min_esp_packet_length(layout))
    return drop(sa.counters(), DropReason::too_short);
  // Encrypted part must keep the alignment the sender's padding guarantees: 4 bytes, or
  // AES-CBC's 16-byte block.
  const size_t ciphertext = packet.size() - kEspHeaderLength - layout.iv_length - layout.icv_length;
  if (ciphertext % layout.alignment != 0) return drop(sa.counters(), DropReason::malformed);

  const auto candidate = sa.replay_window().check(load_be32(packet.data() + 4));
  if (candidate.verdict != ReplayWindow::Verdict::accept)
    return drop(sa.counters(), replay_reason(candidate.verdict));
  prepared.sa = &sa;
  prepared.sequence = candidate.sequence;
  return DropReason::none;
}

DropReason decap_open(const PreparedDecap& prepared, PacketBuffer& packet) {
  const EspLayout& layout = prepared.sa->crypto().layout();
  const size_t payload_length =
      packet.size() - kEspHeaderLength - layout.iv_length - layout.icv_length;
  if (!prepared.sa->crypto().open_packet(prepared.sequence, packet.data(), payload_length))
    return drop(prepared.sa->counters(), DropReason::icv_failure);
  return DropReason::none;
}

namespace {

// Everything after the ICV: padding, next header, inner packet, selectors. Returns the
// inner packet's length in `length`.
DropReason parse_decrypted(const InboundSa& sa, const uint8_t* p, size_t payload_length,
                           size_t& length) {
  const uint8_t pad_length = p[payload_length - 2];
  const uint8_t next_header = p[payload_length - 1];
  if (size_t{pad_length} + kEspTrailerLength > payload_length) return DropReason::bad_padding;
  const size_t data_length = payload_length - kEspTrailerLength - pad_length;
  for (size_t i = 0; i < pad_length; ++i)
    if (p[data_length + i] != static_cast<uint8_t>(i + 1)) return DropReason::bad_padding;

  if (next_header == kProtocolNoNext) return DropReason::dummy_packet;
  if (next_header != kProtocolIpv4 && next_header != kProtocolIpv6)
    return DropReason::bad_next_header;

  const DropReason inner = inner_length(p, data_length, next_header, length);
  if (inner != DropReason::none) return inner;
  if (!inner_packet_allowed(sa, p, length)) return DropReason::policy_mismatch;
  return DropReason::none;
}

}  // namespace

void decap_finish_each(std::span<FinishItem> items) {
  if (items.empty()) return;
  InboundSa& sa = *items.front().prepared->sa;
  const EspLayout& layout = sa.crypto().layout();
  // The window moves for every authentic packet (RFC 4303 3.4.3), whatever its contents;
  // a replay verdict outranks any content problem. Packets are counted inside the
  // commit's critical section (single-writer counters).
  for (FinishItem& item : items) {
    PacketBuffer& packet = *item.packet;
    packet.pull_front(kEspHeaderLength + layout.iv_length);
    packet.trim_back(layout.icv_length);
    item.inner_length = 0;
    item.reason = parse_decrypted(sa, packet.data(), packet.size(), item.inner_length);
    // Authentic and well-formed: what the outer header says about congestion (and, if
    // asked, its DSCP) reaches the inner packet. A drop here still moves the window.
    if (item.reason == DropReason::none)
      item.reason =
          apply_outer_traffic_class({packet.data(), item.inner_length},
                                    item.prepared->outer_traffic_class, sa.config().outer_header);
  }
  // These packets are authentic. One beyond the accept limit waits for its reservation
  // (milliseconds, outside the window's lock) rather than being dropped: a peer that
  // restarted past its own reservations jumps ahead, and its first packet is as good as
  // any other.
  uint64_t highest = 0;
  for (const FinishItem& item : items) highest = std::max(highest, item.prepared->sequence);
  if (highest > sa.replay_window().accept_limit()) sa.reserve_through(highest);
  sa.replay_window().commit_each(
      items.size(), [&](size_t i) { return items[i].prepared->sequence; },
      [&](size_t i, ReplayWindow::Verdict verdict) {
        if (verdict != ReplayWindow::Verdict::accept)
          items[i].reason = replay_reason(verdict);  // outranks a content problem
        else if (items[i].reason == DropReason::none)
          sa.counters().count_packet_locked(items[i].inner_length);
      });
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].reason != DropReason::none)
      drop(sa.counters(), items[i].reason);
    else
      items[i].packet->narrow(0, items[i].inner_length);
  }
}

}  // namespace espgw::esp
