// The WAN side: ESP in UDP (RFC 3948, port 4500) or raw ESP (IP protocol 50), IPv4 or
// IPv6, with batched receive and send (recvmmsg/sendmmsg: one system call per batch), and
// for UDP, segmentation offload both ways: a run of equal-size packets to one peer is one
// send (UDP_SEGMENT), and a run the kernel coalesced on receive (UDP_GRO) is one receive,
// split here into one packet per datagram. Several UDP sockets can share one address and
// port (SO_REUSEPORT), one reader thread each.
// The kernel builds and strips the outer IP (and UDP) header; espgw hands it ESP starting
// at the SPI (UDP) or, for raw IPv4 receive, strips the IP header the kernel passes up.
// The outer traffic class travels as ancillary data both ways (IP_TOS / IPV6_TCLASS).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "esp/ip_address.h"
#include "esp/packet_buffer.h"

namespace espgw::io {

enum class WanKind : uint8_t { udp, raw_esp };

struct Datagram {
  esp::PacketBuffer* buffer = nullptr;  // receive: filled at its default headroom
  sockaddr_storage peer{};
  socklen_t peer_length = 0;
  // When the kernel received it (SO_TIMESTAMPNS, CLOCK_REALTIME ns); 0 if not reported.
  // The reader's clock minus this is how long it waited in the socket's queue. For a
  // moment after the first socket asks, the kernel does not stamp yet and reports the
  // time of the read instead: no waiting, which the queue-delay gate takes as no delay.
  uint64_t arrival_ns = 0;
  // The outer header's traffic class (IPv4 TOS, IPv6 traffic class: DSCP and ECN), which
  // RFC 6040 carries inward on decapsulation.
  uint8_t traffic_class = 0;
};

// An outgoing packet: `data` points at the ESP packet (SPI first).
struct Outgoing {
  const uint8_t* data = nullptr;
  size_t length = 0;
  const sockaddr_storage* peer = nullptr;
  socklen_t peer_length = 0;
  // The outer header's traffic class (DSCP and ECN), passed to the kernel per packet.
  uint8_t traffic_class = 0;
};

struct WanSocketOptions {
  // Socket buffers, per direction (with the *FORCE variants as root), because the default
  // ~200 KB drops bursts at 10 Gbit/s.
  size_t buffer_bytes = 4 << 20;
  // SO_REUSEPORT, set before bind: several sockets of this process share the address and
  // port, and the kernel spreads incoming flows over them by a hash of the 4-tuple.
  bool reuse_port = false;
  // UDP only: UDP_GRO, so a run of datagrams the kernel coalesced (or a GSO send that
  // reached us unsegmented, as over veth or loopback) arrives in one receive.
  bool gro = true;
};

// What receive() saw, for the counter log. Written by the receiving thread only.
struct WanReceiveStats {
  uint32_t kernel_drops = 0;   // SO_RXQ_OVFL: dropped on a full receive buffer, so far
  uint64_t gro_batches = 0;    // receives that held more than one datagram
  uint64_t gro_datagrams = 0;  // the datagrams split out of those
  uint64_t oversize = 0;       // datagrams larger than the caller's packet buffer: dropped
  // SO_RCVBUF: the bytes the kernel lets the receive queue hold (twice what was asked, for
  // its bookkeeping), so that an operator sees the size that decides kernel_drops.
  uint64_t receive_buffer = 0;
};

class WanSocket {
 public:
  // Binds to `local` (UDP: `port`). Throws std::system_error naming the socket on failure.
  WanSocket(WanKind kind, const esp::IpAddress& local, uint16_t port,
            const WanSocketOptions& options = {});
  ~WanSocket();
  WanSocket(const WanSocket&) = delete;
  WanSocket& operator=(const WanSocket&) = delete;

  int fd() const { return fd_; }
  WanKind kind() const { return kind_; }
  int family() const { return family_; }
  // The address it is bound to: where what it receives was sent, and what it sends from.
  const esp::IpAddress& local() const { return local_; }
  // Whether the kernel accepted UDP_GRO on this socket.
  bool gro() const { return gro_; }

  // Receives up to datagrams.size() packets (blocking until at least one arrives, or the
  // timeout in ms passes: returns 0). Each buffer's view is set to the payload: the UDP
  // payload, or for raw ESP the ESP packet (IPv4 header removed); one datagram per buffer,
  // in arrival order, also when the kernel coalesced several. Datagrams of a coalesced
  // receive that did not fit are kept and returned first by the next call. Buffers past
  // the returned count are unused (their contents undefined). -1 with errno on error.
  // Not thread-safe: one thread receives on a socket (SO_REUSEPORT gives each its own).
  int receive(std::span<Datagram> datagrams, int timeout_ms);
  // Whether the datagrams the last receive returned were all the socket held: the kernel
  // had fewer than were asked for, and none of a coalesced receive wait here. What
  // arrived since is not known; a reader's queue management only needs to know that the
  // queue ran empty (io::QueueDelayGate).
  bool drained() const { return kernel_queue_drained_ && pending_next_ >= pending_.size(); }
  // Sends the batch; returns how many were sent. A packet the kernel refuses is skipped.
  // Thread-safe.
  int send(std::span<const Outgoing> packets) const;

  // Safe to call from any thread while another receives.
  WanReceiveStats stats() const;

  // The socket address of `address`:`port` for this socket's family.
  static socklen_t make_peer(const esp::IpAddress& address, uint16_t port, sockaddr_storage& out);

 private:
  // A datagram split out of a coalesced receive, waiting in scratch_ for a buffer.
  struct Segment {
    const uint8_t* data;
    uint32_t length;
    uint32_t message;  // index into peers_, arrivals_ and traffic_classes_
  };

  int send_each(std::span<const Outgoing> packets) const;
  // -1 if the kernel refuses UDP segmentation offload.
  int send_segmented(std::span<const Outgoing> packets) const;
  // Copies waiting segments into datagrams[0..]; returns how many buffers it filled.
  size_t drain_pending(std::span<Datagram> datagrams);
  uint8_t* scratch_for(size_t message) { return scratch_.get() + message * kScratchPerMessage; }

  // A received message spills past the caller's buffer into its scratch region; the part
  // that landed in the buffer can be moved in front of the spill (the gap), so that a
  // coalesced run lies contiguous in scratch. The spill holds the largest UDP payload.
  static constexpr size_t kScratchGap = 16 * 1024;
  static constexpr size_t kScratchSpill = 64 * 1024;
  static constexpr size_t kScratchPerMessage = kScratchGap + kScratchSpill;

  WanKind kind_;
  int family_;
  esp::IpAddress local_;
  int fd_ = -1;
  bool gro_ = false;
  // UDP: send runs of equal-size packets with UDP_SEGMENT, until the kernel refuses.
  mutable std::atomic<bool> gso_{true};

  // Receive state, owned by the one receiving thread.
  std::unique_ptr<uint8_t[]> scratch_;  // kScratchPerMessage per message, allocated on first use
  size_t scratch_messages_ = 0;
  std::vector<sockaddr_storage> peers_;  // of the messages segments come from
  std::vector<socklen_t> peer_lengths_;
  std::vector<uint64_t> arrivals_;
  std::vector<uint8_t> traffic_classes_;
  std::vector<Segment> pending_;
  size_t pending_next_ = 0;
  bool kernel_queue_drained_ = false;  // the last recvmmsg returned fewer than it was asked

  // Counters, read by other threads.
  std::atomic<uint32_t> kernel_drops_{0};
  std::atomic<uint64_t> gro_batches_{0};
  std::atomic<uint64_t> gro_datagrams_{0};
  std::atomic<uint64_t> oversize_{0};
};

}  // namespace espgw::io
