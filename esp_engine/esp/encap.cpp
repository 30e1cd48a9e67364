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

void write_outer_ipv4(OutboundSa& sa, uint8_t* h, size_t total_length, uint8_t protocol,
                      const PreparedEncap& prepared) {
  const SaConfig& c = sa.config();
  h[0] = 0x45;
  h[1] = prepared.outer_traffic_class;
  store_be16(h + 2, static_cast<uint16_t>(total_length));
  store_be16(h + 4, sa.next_ip_id());
  store_be16(h + 6, prepared.outer_dont_fragment ? 0x4000 : 0);
  h[8] = 64;
  h[9] = protocol;
  store_be16(h + 10, 0);
  std::memcpy(h + 12, c.tunnel_source.bytes.data(), 4);
  std::memcpy(h + 16, c.tunnel_destination.bytes.data(), 4);
  store_be16(h + 10, ipv4_header_checksum(h, kIpv4HeaderLength));
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

DropReason encap_prepare(OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                         PreparedEncap& prepared, uint64_t sequence_limit) {
  const SaConfig& config = sa.config();
  const EspLayout& layout = sa.crypto().layout();
  InnerSummary inner{};
  DropReason reason = summarize_inner(packet, inner);
  if (reason == DropReason::none &&
      (packet.headroom() < encap_headroom(config, outer) ||
       packet.tailroom() < layout.alignment - 1 + kEspTrailerLength + layout.icv_length))
    reason = DropReason::no_buffer_space;

  const size_t inner_length = packet.size();
  const size_t tfc_padding = config.tfc_pad_to > inner_length && reason == DropReason::none
                                 ? tfc_padding_length(config, layout, packet)
                                 : 0;
  const size_t padded_length = inner_length + tfc_padding;
  const size_t padding =
      (layout.alignment - (padded_length + kEspTrailerLength) % layout.alignment) %
      layout.alignment;
  const size_t payload_length = padded_length + padding + kEspTrailerLength;
  const size_t esp_length =
      kEspHeaderLength + layout.iv_length + payload_length + layout.icv_length;
  const bool udp = config.udp_encapsulation.has_value();
  const bool ipv6_outer = config.tunnel_source.family == 6;
  const size_t outer_length =
      outer == OuterHeaders::include
          ? (ipv6_outer ? kIpv6HeaderLength : kIpv4HeaderLength) + (udp ? kUdpHeaderLength : 0)
          : 0;
  // IPv4 total length and IPv6 payload length are both 16-bit fields.
  const size_t length_field =
      esp_length + (udp ? kUdpHeaderLength : 0) + (ipv6_outer ? 0 : kIpv4HeaderLength);
  if (reason == DropReason::none && length_field > 0xFFFF) reason = DropReason::too_big;

  // The sequence number is taken last, once nothing else can fail, so that a number is
  // only consumed by a packet that will be sent.
  uint64_t sequence = 0;
  if (reason == DropReason::none) reason = sa.take_sequence(inner_length, sequence_limit, sequence);
  if (reason != DropReason::none) {
    sa.counters().count(reason);
    return reason;
  }

  // Final layout, written through one pointer and committed to the buffer in one update:
  // [outer IP][UDP] SPI seq IV | inner | padding, pad length, next header | ICV
  const size_t front = outer_length + kEspHeaderLength + layout.iv_length;
  uint8_t* inner_start = packet.data();
  uint8_t* start =
      packet.expand(front, tfc_padding + padding + kEspTrailerLength + layout.icv_length);

  // TFC padding (zeros) after the inner packet, then the trailer: padding 1, 2, 3, ...
  // (RFC 4303 2.4), pad length, next header.
  if (tfc_padding != 0) std::memset(inner_start + inner_length, 0, tfc_padding);
  uint8_t* trailer = inner_start + padded_length;
  for (size_t i = 0; i < padding; ++i) trailer[i] = static_cast<uint8_t>(i + 1);
  trailer[padding] = static_cast<uint8_t>(padding);
  trailer[padding + 1] = inner.next_header;

  // ESP header and an AEAD's explicit IV. That IV is the 64-bit sequence number: unique
  // per SA for its whole life (sequence numbers never repeat), which is all GCM and
  // ChaCha20 need. AES-CBC's must be unpredictable as well: seal writes it.
  uint8_t* esp = start + outer_length;
  store_be32(esp, config.spi);
  store_be32(esp + 4, static_cast<uint32_t>(sequence));
  if (layout.iv_length == kExplicitIvLength) store_be64(esp + kEspHeaderLength, sequence);

  prepared = {sequence,
              outer_length,
              inner_length,
              payload_length,
              false,
              outer_traffic_class(inner.traffic_class, config.outer_header),
              outer_dont_fragment(inner.dont_fragment, config.outer_header)};
  if (outer == OuterHeaders::omit) return DropReason::none;

  const uint8_t protocol = udp ? kProtocolUdp : kProtocolEsp;
  const size_t ip_header_length = ipv6_outer ? kIpv6HeaderLength : kIpv4HeaderLength;
  if (udp) {
    uint8_t* u = start + ip_header_length;
    store_be16(u, config.udp_encapsulation->source_port);
    store_be16(u + 2, config.udp_encapsulation->destination_port);
    store_be16(u + 4, static_cast<uint16_t>(kUdpHeaderLength + esp_length));
    store_be16(u + 6, 0);  // RFC 3948 over IPv4: checksum 0; over IPv6 filled by seal
    prepared.udp6_checksum = ipv6_outer;
  }
  const size_t total_length = outer_length + esp_length;
  if (ipv6_outer) {
    write_outer_ipv6(sa, start, total_length - kIpv6HeaderLength, protocol, prepared);
  } else {
    write_outer_ipv4(sa, start, total_length, protocol, prepared);
  }
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
