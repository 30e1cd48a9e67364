#include "io/ipv4_header_sender.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <system_error>

#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::io {

namespace {
constexpr size_t kMaxBatch = 64;
}  // namespace

Ipv4HeaderSender::Ipv4HeaderSender() {
  // IPPROTO_RAW implies IP_HDRINCL.
  fd_ = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "raw IPv4 socket (IPPROTO_RAW)");
}

Ipv4HeaderSender::~Ipv4HeaderSender() {
  if (fd_ >= 0) ::close(fd_);
}

int Ipv4HeaderSender::send(std::span<const Outgoing> packets) const {
  int sent_total = 0;
  while (!packets.empty()) {
    const size_t count = std::min(packets.size(), kMaxBatch);
    std::array<mmsghdr, kMaxBatch> messages{};
    std::array<iovec, kMaxBatch> vectors{};
    for (size_t i = 0; i < count; ++i) {
      vectors[i] = {const_cast<uint8_t*>(packets[i].data), packets[i].length};
      messages[i].msg_hdr.msg_iov = &vectors[i];
      messages[i].msg_hdr.msg_iovlen = 1;
      messages[i].msg_hdr.msg_name = const_cast<sockaddr_storage*>(packets[i].peer);
      messages[i].msg_hdr.msg_namelen = packets[i].peer_length;
    }
    const int sent = sendmmsg(fd_, messages.data(), static_cast<unsigned>(count), 0);
    if (sent < 0) {
      packets = packets.subspan(1);  // skip the one the kernel refused, as WanSocket does
      continue;
    }
    sent_total += sent;
    packets = packets.subspan(static_cast<size_t>(sent));
  }
  return sent_total;
}

uint8_t* write_ipv4_outer_header(uint8_t* esp, size_t esp_length, const esp::IpAddress& source,
                                 const esp::IpAddress& destination,
                                 const std::optional<esp::UdpEncapsulation>& udp,
                                 uint8_t traffic_class) {
  const size_t udp_length = udp ? packet::kUdpHeaderLength : 0;
  uint8_t* h = esp - udp_length - packet::kIpv4HeaderLength;
  h[0] = 0x45;
  h[1] = traffic_class;
  store_be16(h + 2, static_cast<uint16_t>(packet::kIpv4HeaderLength + udp_length + esp_length));
  store_be16(h + 4, 0);  // identification: the kernel picks one
  store_be16(h + 6, 0);  // DF clear, not a fragment
  h[8] = 64;
  h[9] = udp ? packet::kProtocolUdp : packet::kProtocolEsp;
  store_be16(h + 10, 0);  // the kernel computes it
  std::memcpy(h + 12, source.bytes.data(), 4);
  std::memcpy(h + 16, destination.bytes.data(), 4);
  if (udp) {
    uint8_t* u = h + packet::kIpv4HeaderLength;
    store_be16(u, udp->source_port);
    store_be16(u + 2, udp->destination_port);
    store_be16(u + 4, static_cast<uint16_t>(udp_length + esp_length));
    store_be16(u + 6, 0);
  }
  return h;
}

}  // namespace espgw::io
