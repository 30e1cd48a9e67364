// The one walk over an IP packet's header chain: the IPv4 header, or the IPv6 header and
// its extension headers, up to the header that follows them. The inner flow key, the
// outer (WAN) parse and the inbound selector check all start from it, and each applies
// its own rules to what it reports (what a cut-short chain or a fragment means to it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::packet {

enum class Fragment : uint8_t {
  none,    // a whole datagram
  atomic,  // IPv6: a fragment header on a datagram that was not split (offset 0, no more
           // pieces; RFC 6946)
  first,   // offset 0, more pieces follow: the upper-layer header is in this piece
  later,   // a non-zero offset: this piece carries payload only
};

enum class ChainEnd : uint8_t {
  not_ip,            // neither IPv4 nor IPv6, the fixed header cut short, or an IPv4 header
                     // length below 20 or beyond the packet
  upper_layer,       // `protocol` follows the chain, at `offset`
  fragment_payload,  // a later piece of a fragmented datagram: `protocol` is what its
                     // fragment header names, and what follows is payload, not headers
  truncated,         // the extension header `protocol` at `offset` does not have its first
                     // 8 bytes within the packet
  too_many_headers,  // `protocol` at `offset` is one extension header more than allowed
};

struct HeaderChain {
  ChainEnd end = ChainEnd::not_ip;
  uint8_t version = 0;   // 4 or 6, unless not_ip
  uint8_t protocol = 0;  // see ChainEnd
  // Where `protocol`'s header starts. The walk steps over an extension header by the length
  // the header states and reads only its first bytes, so after one that claims more bytes
  // than the packet holds, this lies beyond the end: offset <= size is the test that every
  // header of the chain lies within the packet.
  size_t offset = 0;
  // IPv4: what the flags and fragment offset say. IPv6: the first fragment header that is
  // not atomic, else an atomic one, else none.
  Fragment fragment = Fragment::none;
  uint8_t fragment_protocol = 0;  // the header after that fragment header (IPv4: `protocol`)
};

struct ChainRules {
  // AH (RFC 4302) as one more header to step over rather than the end of the chain.
  bool step_over_ah = false;
  // The walk ends at too_many_headers rather than step over more extension headers than
  // this. Each one is at least 8 bytes long, so the packet's size bounds the walk anyway.
  unsigned max_extension_headers = ~0u;
};

inline bool is_ipv6_extension_header(uint8_t protocol, const ChainRules& rules) {
  return protocol == kProtocolIpv6HopByHop || protocol == kProtocolIpv6Routing ||
         protocol == kProtocolIpv6DestinationOptions || protocol == kProtocolIpv6Fragment ||
         (rules.step_over_ah && protocol == kProtocolAh);
}

// Inline, with the rules usually a constant: it runs for every packet the gateway sends.
inline HeaderChain walk_header_chain(std::span<const uint8_t> packet,
                                     const ChainRules& rules = {}) {
  const uint8_t* p = packet.data();
  const size_t size = packet.size();
  HeaderChain chain;
  if (size >= kIpv4HeaderLength && p[0] >> 4 == 4) {
    const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
    if (header_length < kIpv4HeaderLength || header_length > size) return chain;
    const uint16_t field = load_be16(p + 6);  // reserved, DF and MF flags; fragment offset
    chain.version = 4;
    chain.protocol = chain.fragment_protocol = p[9];
    chain.offset = header_length;
    chain.fragment = (field & 0x1FFF) != 0   ? Fragment::later
                     : (field & 0x2000) != 0 ? Fragment::first
                                             : Fragment::none;
    chain.end =
        chain.fragment == Fragment::later ? ChainEnd::fragment_payload : ChainEnd::upper_layer;
    return chain;
  }
  if (size < kIpv6HeaderLength || p[0] >> 4 != 6) return chain;
  chain.version = 6;
  uint8_t next = p[6];
  size_t offset = kIpv6HeaderLength;
  for (unsigned headers = 0; is_ipv6_extension_header(next, rules); ++headers) {
    chain.protocol = next;
    chain.offset = offset;
    if (headers == rules.max_extension_headers) {
      chain.end = ChainEnd::too_many_headers;
      return chain;
    }
    if (offset + kIpv6ExtensionHeaderMinLength > size) {
      chain.end = ChainEnd::truncated;
      return chain;
    }
    const uint8_t* header = p + offset;
    if (next == kProtocolIpv6Fragment) {
      const uint16_t field = load_be16(header + 2);  // offset << 3, 2 reserved bits, M flag
      const Fragment fragment = (field & 0xFFF8) != 0   ? Fragment::later
                                : (field & 0x0001) != 0 ? Fragment::first
                                                        : Fragment::atomic;
      if (chain.fragment == Fragment::none || chain.fragment == Fragment::atomic) {
        chain.fragment = fragment;
        chain.fragment_protocol = header[0];
      }
      next = header[0];
      offset += kIpv6ExtensionHeaderMinLength;
      if (fragment == Fragment::later) {
        chain.end = ChainEnd::fragment_payload;
        chain.protocol = next;
        chain.offset = offset;
        return chain;
      }
      continue;
    }
    // AH states its length in 4-byte units less 2 (RFC 4302 2.2), the others in 8-byte
    // units less 1 (RFC 8200 4).
    offset += next == kProtocolAh ? (size_t{header[1]} + 2) * 4 : (size_t{header[1]} + 1) * 8;
    next = header[0];
  }
  chain.end = ChainEnd::upper_layer;
  chain.protocol = next;
  chain.offset = offset;
  return chain;
}

}  // namespace espgw::packet
