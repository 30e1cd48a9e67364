// ESP tunnel-mode encapsulation (RFC 4303 3.3), in place in a PacketBuffer.
//
// Split in two steps so that a pipeline can run them on different threads: prepare()
// takes the sequence number and writes every header and the trailer (cheap, in order),
// seal() does the cipher and ICV work (expensive, any thread, any order). prepare() is
// itself split at the number (encap_frame, encap_number) for numbering a batch at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "esp/drop_reason.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"

namespace espgw::esp {

enum class OuterHeaders : uint8_t {
  include,  // outer IPv4/IPv6 (+ UDP when the SA asks for it): a complete IP packet
  omit,     // ESP only, starting at the SPI: for a socket that adds the outer headers
};

struct PreparedEncap {
  uint64_t sequence = 0;
  size_t esp_offset = 0;      // offset of the SPI within the buffer's view
  size_t inner_length = 0;    // plaintext inner packet bytes, for the counters
  size_t payload_length = 0;  // inner + padding + trailer: what gets encrypted
  bool udp6_checksum = false;
  // The outer header's traffic class and IPv4 DF bit under the SA's OuterHeaderPolicy: in
  // the outer header with OuterHeaders::include; for the socket that adds it otherwise.
  uint8_t outer_traffic_class = 0;
  bool outer_dont_fragment = true;
  bool outer_ipv4 = false;  // an outer IPv4 header, whose ID and checksum come with the number
};

// The buffer must hold exactly one IPv4 or IPv6 packet. On success it holds the headers
// and trailer around the (still plaintext) payload, and the packet is counted (sealing
// cannot fail). On failure the reason is counted on the SA and the buffer is unchanged.
// `sequence_limit` bounds the number taken (queue_full beyond it, after every other
// check): the pipeline passes 0 when the SA's in-flight bound has no place left.
DropReason encap_prepare(OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                         PreparedEncap& prepared, uint64_t sequence_limit = ~uint64_t{0});
// encap_prepare in two steps, for a pipeline that numbers a reader's batch at once (one
// acquisition of the SA's lock per batch and SA, docs/pipeline.md). encap_frame does
// every check and writes everything but the number: the trailer and the outer headers
// but an IPv4 header's ID and checksum. It takes no number and counts no packet; a
// failure is counted on the SA and leaves the buffer unchanged. encap_number then writes
// a number the caller took from OutboundSa::take_sequences (which counted the packet):
// the SPI, the sequence number, an AEAD's explicit IV, the outer IPv4 ID and checksum.
DropReason encap_frame(OutboundSa& sa, PacketBuffer& packet, OuterHeaders outer,
                       PreparedEncap& prepared);
void encap_number(const OutboundSa& sa, PacketBuffer& packet, PreparedEncap& prepared,
                  uint64_t sequence, uint16_t ip_id);
// Encrypts the payload (writing AES-CBC's IV first), writes the ICV and finishes the outer UDP
// checksum over IPv6. Safe to call concurrently for different packets of one SA.
void encap_seal(const OutboundSa& sa, PacketBuffer& packet, const PreparedEncap& prepared);

// encap_seal for a batch: an AES-CBC SA's packet may wait in `burst` (sharing ipsec-mb's
// multi-buffer lanes with other packets); an AEAD's is sealed at once. The packet is
// complete only after burst.flush() and then encap_seal_finish().
void encap_seal_in_burst(const OutboundSa& sa, PacketBuffer& packet, const PreparedEncap& prepared,
                         crypto::CbcHmacSealBurst& burst);
// What encap_seal does after the cipher and ICV: the outer UDP checksum over IPv6.
void encap_seal_finish(PacketBuffer& packet, const PreparedEncap& prepared);

// Bytes of headroom encapsulation needs for the SA, and of tailroom for any SA.
size_t encap_headroom(const SaConfig& config, OuterHeaders outer);
size_t encap_tailroom();

}  // namespace espgw::esp
