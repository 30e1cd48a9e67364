// The WAN side: ESP in UDP (RFC 3948, port 4500) or raw ESP (IP protocol 50), IPv4 or
// IPv6, with batched receive and send (recvmmsg/sendmmsg: one system call per batch), and
// for UDP, segmentation offload: a run of equal-size packets to one peer is one send.
// The kernel builds and strips the outer IP (and UDP) header; espgw hands it ESP starting
// at the SPI (UDP) or, for raw IPv4 receive, strips the IP header the kernel passes up.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "esp/ip_address.h"
#include "esp/packet_buffer.h"

namespace espgw::io {

enum class WanKind : uint8_t { udp, raw_esp };

struct Datagram {
  esp::PacketBuffer* buffer = nullptr;  // receive: filled at its default headroom
  sockaddr_storage peer{};
  socklen_t peer_length = 0;
};

// An outgoing packet: `data` points at the ESP packet (SPI first).
struct Outgoing {
  const uint8_t* data = nullptr;
  size_t length = 0;
  const sockaddr_storage* peer = nullptr;
  socklen_t peer_length = 0;
};

class WanSocket {
 public:
  // Binds to `local` (UDP: `port`). Socket buffers are sized to `buffer_bytes` (with the
  // *FORCE variants as root), because the default ~200 KB drops bursts at 10 Gbit/s.
  // Throws std::system_error naming the socket on failure.
  WanSocket(WanKind kind, const esp::IpAddress& local, uint16_t port, size_t buffer_bytes,
            bool reuse_port = false);
  ~WanSocket();
  WanSocket(const WanSocket&) = delete;
  WanSocket& operator=(const WanSocket&) = delete;

  int fd() const { return fd_; }
  WanKind kind() const { return kind_; }
  int family() const { return family_; }

  // Receives up to datagrams.size() packets (blocking until at least one arrives, or the
  // timeout in ms passes: returns 0). Each buffer's view is set to the payload: the UDP
  // payload, or for raw ESP the ESP packet (IPv4 header removed). -1 with errno on error.
  int receive(std::span<Datagram> datagrams, int timeout_ms) const;
  // Sends the batch; returns how many were sent. A packet the kernel refuses is skipped.
  int send(std::span<const Outgoing> packets) const;

  // Datagrams the kernel dropped because this socket's receive buffer was full, as last
  // reported with a received datagram (SO_RXQ_OVFL).
  uint32_t kernel_drops() const { return kernel_drops_.load(std::memory_order_relaxed); }

  // The socket address of `address`:`port` for this socket's family.
  static socklen_t make_peer(const esp::IpAddress& address, uint16_t port, sockaddr_storage& out);

 private:
  int send_each(std::span<const Outgoing> packets) const;
  // -1 if the kernel refuses UDP segmentation offload.
  int send_segmented(std::span<const Outgoing> packets) const;

  WanKind kind_;
  int family_;
  int fd_ = -1;
  mutable std::atomic<bool> gso_{true};
  mutable std::atomic<uint32_t> kernel_drops_{
      0};  // UDP: send runs of equal-size packets with UDP_SEGMENT
};

}  // namespace espgw::io
