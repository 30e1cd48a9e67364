#include "esp/encap.h"

#include <algorithm>
#include <cstring>

#include "esp/checksum.h"
#include "esp/esp_format.h"
#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

using packet::kIpv4HeaderLength;
using packet::kIpv6HeaderLength;
using packet::kProtocolEsp;
using packet::kProtocolIpv4;
using packet::kProtocolIpv6;
using packet::kProtocolUdp;
using packet::kUdpHeaderLength;

namespace {

// TFC padding never makes the inner packet longer than this: with the largest headers
// and trailer the outer packet stays within IPv4's and IPv6's 16-bit length fields.
constexpr size_t kMaxTfcPaddedLength = 0xFFFF - 128;

struct InnerSummary {
  uint8_t next_header;    // 4 or 41
  uint8_t traffic_class;  // DSCP and ECN
  bool dont_fragment;     // IPv4 DF; true for IPv6, which routers never fragment
};

DropReason summarize_inner(const PacketBuffer& packet, InnerSummary& summary) {
  const uint8_t* p = packet.data();
  const size_t length = packet.size();
  if (length == 0) return DropReason::too_short;
  switch (p[0] >> 4) {
    case 4: {
      if (length < kIpv4HeaderLength) return DropReason::too_short;
      const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
      if (header_length < kIpv4HeaderLength || load_be16(p + 2) != length || header_length > length)
        return DropReason::inner_malformed;
      summary = {kProtocolIpv4, p[1], (p[6] & 0x40) != 0};
      return DropReason::none;
    }
    case 6:
      if (length < kIpv6HeaderLength) return DropReason::too_short;
      if (load_be16(p + 4) + kIpv6HeaderLength != length) return DropReason::inner_malformed;
      summary = {kProtocolIpv6, static_cast<uint8_t>((p[0] << 4) | (p[1] >> 4)), true};
      return DropReason::none;
    default:
      return DropReason::inner_not_ip;
  }
}

// All but the ID and the checksum, which come with the sequence number (encap_number).
void write_outer_ipv4(const OutboundSa& sa, uint8_t* h, size_t total_length, uint8_t protocol,
                      const PreparedEncap& prepared) {
  const SaConfig& c = sa.config();
  h[0] = 0x45;
  h[1] = prepared.outer_traffic_class;
  store_be16(h + 2, static_cast<uint16_t>(total_length));
  store_be16(h + 6, prepared.outer_dont_fragment ? 0x4000 : 0);
  h[8] = 64;
  h[9] = protocol;
  std::memcpy(h + 12, c.tunnel_source.bytes.data(), 4);
  std::memcpy(h + 16, c.tunnel_destination.bytes.data(), 4);
}

void write_outer_ipv6(const OutboundSa& sa, uint8_t* h, size_t payload_length, uint8_t protocol,
                      const PreparedEncap& prepared) {
  const SaConfig& c = sa.config();
  store_be32(h, (uint32_t{6} << 28) | (uint32_t{prepared.outer_traffic_class} << 20));
  store_be16(h + 4, static_cast<uint16_t>(payload_length));
  h[6] = protocol;
  h[7] = 64;
  std::memcpy(h + 8, c.tunnel_source.bytes.data(), 16);
  std::memcpy(h + 24, c.tunnel_destination.bytes.data(), 16);
}

// Bytes of TFC padding for an inner packet shorter than the SA's tfc_pad_to: up to it,
// as far as the tailroom leaves room for the worst-case trailer and ICV (a full buffer
// sends the packet with less padding rather than dropping it), and within the 16-bit
// outer length fields.
size_t tfc_padding_length(const SaConfig& config, const EspLayout& layout,
                          const PacketBuffer& packet) {
  const size_t tail = layout.alignment - 1 + kEspTrailerLength + layout.icv_length;
  const size_t room = packet.tailroom() > tail ? packet.tailroom() - tail : 0;
  const size_t target = std::min<size_t>(config.tfc_pad_to, kMaxTfcPaddedLength);
  return std::min(target - std::min(target, packet.size()), room);
}

}  // namespace

size_t encap_headroom(const SaConfig& config, OuterHeaders outer) {
  size_t room = kEspHeaderLength + esp_layout(config.algorithm, config.integrity).iv_length;
  if (outer == OuterHeaders::include) {
    room += config.tunnel_source.family == 6 ? kIpv6HeaderLength : kIpv4HeaderLength;
    if (config.udp_encapsulation) room += kUdpHeaderLength;
  }
  return room;
}

size_t encap_tailroom() {
  return kMaxEspTailLength;
}

namespace {

// Where everything goes for one packet, worked out without touching the buffer.
struct EncapLayout {
  InnerSummary inner{};
  size_t inner_length = 0;
  size_t tfc_padding = 0;
  size_t padded_length = 0;
  size_t padding = 0;
  size_t payload_length = 0;
  size_t esp_length = 0;
  size_t outer_length = 0;
  bool udp = false;
  bool ipv6_outer = false;
};

DropReason plan_encap(const OutboundSa& sa, const PacketBuffer& packet, OuterHeaders outer,
                      EncapLayout& plan) {
  const SaConfig& config = sa.config();
  const EspLayout& layout = sa.crypto().layout();
  DropReason reason = summarize_inner(packet, plan.inner);
  if (reason == DropReason::none &&
      (packet.headroom() < encap_headroom(config, outer) ||
       packet.tailroom() < layout.alignment - 1 + kEspTrailerLength + layout.icv_length))
    reason = DropReason::no_buffer_space;

  plan.inner_length = packet.size();
  plan.tfc_padding = config.tfc_pad_to > plan.inner_length && reason == DropReason::none
                         ? tfc_padding_length(config, layout, packet)
                         : 0;
  plan.padded_length = plan.inner_length + plan.tfc_padding;
  plan.padding = (layout.alignment - (plan.padded_length + kEspTrailerLength) % layout.alignment) %
                 layout.alignment;
  plan.payload_length = plan.padded_length + plan.padding + kEspTrailerLength;
  plan.esp_length = kEspHeaderLength + layout.iv_length + plan.payload_length + layout.icv_length;
  plan.udp = config.udp_encapsulation.has_value();
  plan.ipv6_outer = config.tunnel_source.family == 6;
  plan.outer_length = outer == OuterHeaders::include
                          ? (plan.ipv6_outer ? kIpv6HeaderLength : kIpv4HeaderLength) +
                                (plan.udp ? kUdpHeaderLength : 0)
                          : 0;
  // IPv4 total length and IPv6 payload length are both 16-bit fields.
  const size_t length_field = plan.esp_length + (plan.udp ? kUdpHeaderLength : 0) +
                              (plan.ipv6_outer ? 0 : kIpv4HeaderLength);
  if (reason == DropReason::none && length_field > 0xFFFF) reason = DropReason::too_big;
  return reason;
}

// Writes everything but the sequence number: the trailer, the UDP header and an IPv6 outer
// header. The SPI, the number, an AEAD's IV and an IPv4 outer header (its ID and
// checksum) come with the number (number_encap).
void frame_encap(const OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                 const EncapLayout& plan, PreparedEncap& prepared) {
  const SaConfig& config = sa.config();
  const EspLayout& layout = sa.crypto().layout();
  // Final layout, written through one pointer and committed to the buffer in one update:
  // [outer IP][UDP] SPI seq IV | inner | padding, pad length, next header | ICV
  const size_t front = plan.outer_length + kEspHeaderLength + layout.iv_length;
  uint8_t* inner_start = packet.data();
  uint8_t* start =
      packet.expand(front, plan.tfc_padding + plan.padding + kEspTrailerLength + layout.icv_length);

  // TFC padding (zeros) after the inner packet, then the trailer: padding 1, 2, 3, ...
  // (RFC 4303 2.4), pad length, next header.
  if (plan.tfc_padding != 0) std::memset(inner_start + plan.inner_length, 0, plan.tfc_padding);
  uint8_t* trailer = inner_start + plan.padded_length;
  for (size_t i = 0; i < plan.padding; ++i) trailer[i] = static_cast<uint8_t>(i + 1);
  trailer[plan.padding] = static_cast<uint8_t>(plan.padding);
  trailer[plan.padding + 1] = plan.inner.next_header;

  prepared = {0,
              plan.outer_length,
              plan.inner_length,
              plan.payload_length,
              false,
              outer_traffic_class(plan.inner.traffic_class, config.outer_header),
              outer_dont_fragment(plan.inner.dont_fragment, config.outer_header),
              false};
  if (outer == OuterHeaders::omit) return;

  const uint8_t protocol = plan.udp ? kProtocolUdp : kProtocolEsp;
  const size_t ip_header_length = plan.ipv6_outer ? kIpv6HeaderLength : kIpv4HeaderLength;
  if (plan.udp) {
    uint8_t* u = start + ip_header_length;
    store_be16(u, config.udp_encapsulation->source_port);
    store_be16(u + 2, config.udp_encapsulation->destination_port);
    store_be16(u + 4, static_cast<uint16_t>(kUdpHeaderLength + plan.esp_length));
    store_be16(u + 6, 0);  // RFC 3948 over IPv4: checksum 0; over IPv6 filled by seal
    prepared.udp6_checksum = plan.ipv6_outer;
  }
  const size_t total_length = plan.outer_length + plan.esp_length;
  if (plan.ipv6_outer) {
    write_outer_ipv6(sa, start, total_length - kIpv6HeaderLength, protocol, prepared);
  } else {
    // Completed with its ID and checksum when numbered.
    write_outer_ipv4(sa, start, total_length, protocol, prepared);
    prepared.outer_ipv4 = true;
  }
}

}  // namespace

DropReason encap_frame(OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                       PreparedEncap& prepared) {
  EncapLayout plan;
  const DropReason reason = plan_encap(sa, packet, outer, plan);
  if (reason != DropReason::none) {
    sa.counters().count(reason);
    return reason;
  }
  frame_encap(sa, packet, outer, plan, prepared);
  return DropReason::none;
}

void encap_number(const OutboundSa& sa, PacketBuffer& packet, PreparedEncap& prepared,
                  uint64_t sequence, uint16_t ip_id) {
  prepared.sequence = sequence;
  // ESP header and an AEAD's explicit IV. That IV is the 64-bit sequence number: unique
  // per SA for its whole life (sequence numbers never repeat), which is all GCM and
  // ChaCha20 need. AES-CBC's must be unpredictable as well: seal writes it.
  uint8_t* esp = packet.data() + prepared.esp_offset;
  store_be32(esp, sa.config().spi);
  store_be32(esp + 4, static_cast<uint32_t>(sequence));
  if (sa.crypto().layout().iv_length == kExplicitIvLength)
    store_be64(esp + kEspHeaderLength, sequence);
  if (!prepared.outer_ipv4) return;
  uint8_t* h = packet.data();
  store_be16(h + 4, ip_id);
  store_be16(h + 10, 0);
  store_be16(h + 10, ipv4_header_checksum(h, kIpv4HeaderLength));
}

DropReason encap_prepare(OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                         PreparedEncap& prepared, uint64_t sequence_limit) {
  EncapLayout plan;
  DropReason reason = plan_encap(sa, packet, outer, plan);
  // The sequence number is taken last, once nothing else can fail, so that a number is
  // only consumed by a packet that will be sent.
  uint64_t sequence = 0;
  if (reason == DropReason::none)
    reason = sa.take_sequence(plan.inner_length, sequence_limit, sequence);
  if (reason != DropReason::none) {
    sa.counters().count(reason);
    return reason;
  }
  frame_encap(sa, packet, outer, plan, prepared);
  encap_number(sa, packet, prepared, sequence, prepared.outer_ipv4 ? sa.next_ip_id() : 0);
  return DropReason::none;
}

void encap_seal(const OutboundSa& sa, PacketBuffer& packet, const PreparedEncap& prepared) {
  uint8_t* esp = packet.data() + prepared.esp_offset;
  sa.crypto().seal_packet(prepared.sequence, esp, prepared.payload_length);
  encap_seal_finish(packet, prepared);
}

void encap_seal_in_burst(const OutboundSa& sa, PacketBuffer& packet, const PreparedEncap& prepared,
                         crypto::CbcHmacSealBurst& burst) {
  uint8_t* esp = packet.data() + prepared.esp_offset;
  sa.crypto().seal_packet_in_burst(prepared.sequence, esp, prepared.payload_length, burst);
}

void encap_seal_finish(PacketBuffer& packet, const PreparedEncap& prepared) {
  if (!prepared.udp6_checksum) return;
  uint8_t* ip = packet.data();
  uint8_t* udp = ip + kIpv6HeaderLength;
  const size_t udp_length = packet.size() - kIpv6HeaderLength;
  store_be16(udp + 6, udp6_checksum(ip + 8, ip + 24, udp, udp_length));
}

}  // namespace espgw::esp
