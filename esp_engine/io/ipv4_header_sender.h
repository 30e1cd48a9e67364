// Sends IPv4 packets whose header espgw wrote itself, for the outer headers a UDP or raw
// ESP socket cannot produce per packet: the DF bit is a socket-wide setting there
// (IP_MTU_DISCOVER), while RFC 4301 8.1 copies it from each inner packet and charon's
// copy_df = no clears it. Through an IPPROTO_RAW socket (IP_HDRINCL) the header goes out
// as written; the kernel fills in the identification (when 0) and the checksum. Such a
// socket receives nothing, so it takes no packet from the WAN sockets' readers.
#pragma once

#include <optional>
#include <span>

#include "esp/security_association.h"
#include "io/wan_socket.h"

namespace espgw::io {

class Ipv4HeaderSender {
 public:
  // Throws std::system_error if the socket cannot be made (it needs CAP_NET_RAW).
  Ipv4HeaderSender();
  ~Ipv4HeaderSender();
  Ipv4HeaderSender(const Ipv4HeaderSender&) = delete;
  Ipv4HeaderSender& operator=(const Ipv4HeaderSender&) = delete;

  // Each packet's data starts with its complete IPv4 header; `peer` is its destination
  // (the port is ignored). Returns how many were sent; a packet the kernel refuses (larger
  // than the route's MTU: EMSGSIZE, since such a socket never fragments) is skipped.
  // Thread-safe.
  int send(std::span<const Outgoing> packets) const;

 private:
  int fd_ = -1;
};

// Writes an SA's outer IPv4 header (and, for ESP in UDP, the UDP header with checksum 0 as
// RFC 3948 allows) in front of `esp_length` bytes of ESP at `esp`, which must have 28 bytes
// of room before it. DF clear; identification and checksum left to the kernel.
// Returns the header's start.
uint8_t* write_ipv4_outer_header(uint8_t* esp, size_t esp_length, const esp::IpAddress& source,
                                 const esp::IpAddress& destination,
                                 const std::optional<esp::UdpEncapsulation>& udp,
                                 uint8_t traffic_class);
// The room write_ipv4_outer_header needs: IPv4 header plus UDP header.
inline constexpr size_t kIpv4OuterRoom = 28;

}  // namespace espgw::io
