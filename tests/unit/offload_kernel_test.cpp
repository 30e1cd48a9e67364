// TUN offloads against the real kernel: a vnet-header TUN in a private network namespace.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/offload.h"
#include "io/tun_device.h"
#include "unit/offload_test_support.h"

namespace espgw::io {
namespace {

// The real kernel: a vnet-header TUN in a private network namespace. The test plays the
// remote TCP peer by hand. It checks that (1) what the kernel's TCP sends through the TUN
// (TSO super-packets, partial checksums) segments into valid packets carrying the data,
// (2) a coalesced super-packet written back is accepted by the local socket, and (3) one
// forwarded to a second, offload-less TUN comes out segmented by the kernel into exactly
// the packets we merged (TTL one less), which proves the partial-checksum convention.

bool set_address(int sock, const char* name, const char* address) {
  ifreq request{};
  std::strncpy(request.ifr_name, name, IFNAMSIZ - 1);
  auto* in = reinterpret_cast<sockaddr_in*>(&request.ifr_addr);
  in->sin_family = AF_INET;
  inet_pton(AF_INET, address, &in->sin_addr);
  if (ioctl(sock, SIOCSIFADDR, &request) < 0) return false;
  inet_pton(AF_INET, "255.255.255.0", &in->sin_addr);
  if (ioctl(sock, SIOCSIFNETMASK, &request) < 0) return false;
  if (ioctl(sock, SIOCGIFFLAGS, &request) < 0) return false;
  request.ifr_flags |= IFF_UP;
  return ioctl(sock, SIOCSIFFLAGS, &request) == 0;
}

// Next IPv4 TCP packet from `fd` within a second (frames with a vnet header if `vnet`).
bool read_tcp(int fd, bool vnet, Bytes& frame) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return false;
    frame.resize(70000);
    const ssize_t n = ::read(fd, frame.data(), frame.size());
    if (n <= 0) return false;
    frame.resize(static_cast<size_t>(n));
    const size_t at = vnet ? VnetHeader::kSize : 0;
    if (frame.size() > at + 20 && frame[at] >> 4 == 4 && frame[at + 9] == 6) return true;
  }
}

class KernelPeer {
 public:
  void run() {
    if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) != 0) {
      skipped_ = "needs root and /dev/net/tun";
      return;
    }
    if (unshare(CLONE_NEWNET) != 0) {
      skipped_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    TunDevice lan("espgwoff0", 1, true);
    ASSERT_TRUE(lan.vnet_header());
    TunDevice out("espgwoff1", 1, false);  // no offloads: the kernel must segment for it
    const int control = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(control, 0);
    ASSERT_TRUE(set_address(control, "espgwoff0", "10.77.0.1"));
    ASSERT_TRUE(set_address(control, "espgwoff1", "10.78.0.1"));
    ::close(control);
    const int forward = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(forward, 0);
    ASSERT_EQ(write(forward, "1", 1), 1);
    ::close(forward);

    // The local socket connects to 10.77.0.2, which is "us" behind the TUN.
    client_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(client_, 0);
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_port = htons(5201);
    inet_pton(AF_INET, "10.77.0.2", &peer.sin_addr);
    ASSERT_NE(connect(client_, reinterpret_cast<sockaddr*>(&peer), sizeof peer), 0);
    ASSERT_EQ(errno, EINPROGRESS);

    TsoSegmenter segmenter;
    Bytes frame;
    Bytes syn;
    ASSERT_TRUE(read_tcp(lan.fd(0), true, frame));
    ASSERT_EQ(segmenter.segment_frame(frame,
                                      [&](std::span<const uint8_t> p) {
                                        syn.assign(p.begin(), p.end());
                                        return true;
                                      }),
              OffloadResult::ok);
    ASSERT_EQ(syn[33] & (kSyn | kAck), kSyn);
    EXPECT_TRUE(l4_checksum_ok(syn)) << "kernel SYN checksum completed";
    const uint32_t client_isn = be32(&syn[24]);

    TcpSpec from_peer;
    from_peer.source_last = 2;  // 10.1.0.2 in build_tcp: rewritten below
    from_peer.source_port = 5201;
    from_peer.destination_port = be16(&syn[20]);
    from_peer.seq = 1000;
    from_peer.ack = client_isn + 1;
    from_peer.flags = kSyn | kAck;
    from_peer.window = 65535;
    from_peer.id = 1;
    from_peer.tcp_options = {2, 4, 0x05, 0x78};  // MSS 1400, no window scaling
    write_plain(lan, address_packet(build_tcp(from_peer, {}), "10.77.0.2", "10.77.0.1"));

    pollfd p{client_, POLLOUT, 0};
    ASSERT_EQ(poll(&p, 1, 1000), 1);
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(client_, SOL_SOCKET, SO_ERROR, &error, &length);
    ASSERT_EQ(error, 0);

    // (1) The kernel sends 10 KB: expect TSO super-packets, segment them, check them.
    const Bytes sent = pattern(10000, 11);
    ASSERT_EQ(send(client_, sent.data(), sent.size(), 0), static_cast<ssize_t>(sent.size()));
    Bytes received;
    size_t super_packets = 0;
    size_t window = 0;  // the client's receive window (no scaling: we offered none)
    while (received.size() < sent.size()) {
      ASSERT_TRUE(read_tcp(lan.fd(0), true, frame)) << "got " << received.size() << " bytes";
      if (header_of(frame).gso_type != VnetHeader::kGsoNone) ++super_packets;
      ASSERT_EQ(segmenter.segment_frame(frame,
                                        [&](std::span<const uint8_t> packet) {
                                          const Bytes seg(packet.begin(), packet.end());
                                          EXPECT_TRUE(ipv4_header_ok(seg));
                                          EXPECT_TRUE(l4_checksum_ok(seg));
                                          EXPECT_LE(seg.size(), 1440u);
                                          window = be16(&seg[34]);
                                          const Bytes d = payload_of(seg);
                                          received.insert(received.end(), d.begin(), d.end());
                                          return true;
                                        }),
                OffloadResult::ok);
    }
    EXPECT_EQ(received, sent);
    EXPECT_GE(super_packets, 1u) << "the kernel never used TSO on the TUN";

    // (2) We send up to 20 KB back as one coalesced super-packet (within the window the
    // client offers); the socket must get all of it.
    from_peer.seq = 1001;
    from_peer.ack = client_isn + 1 + static_cast<uint32_t>(sent.size());
    from_peer.flags = kAck;
    from_peer.tcp_options.clear();
    ASSERT_GE(window, 2000u);
    const Bytes reply = pattern(std::min<size_t>(20, window / 1000) * 1000, 12);
    std::vector<Bytes> segments;
    for (size_t off = 0; off < reply.size(); off += 1000) {
      from_peer.id = static_cast<uint16_t>(2 + off / 1000);
      segments.push_back(
          address_packet(build_tcp(from_peer, Bytes(reply.begin() + static_cast<long>(off),
                                                    reply.begin() + static_cast<long>(off + 1000))),
                         "10.77.0.2", "10.77.0.1"));
      from_peer.seq += 1000;
    }
    write_coalesced(lan, segments);
    Bytes got(reply.size());
    size_t have = 0;
    while (have < got.size()) {
      pollfd r{client_, POLLIN, 0};
      ASSERT_EQ(poll(&r, 1, 1000), 1) << "socket got " << have << " bytes";
      const ssize_t n = recv(client_, got.data() + have, got.size() - have, 0);
      ASSERT_GT(n, 0);
      have += static_cast<size_t>(n);
    }
    EXPECT_EQ(got, reply);

    // (3) A super-packet to 10.78.0.2 is forwarded out of the offload-less TUN: the kernel
    // segments it and completes each checksum from our pseudo-header sum.
    std::vector<Bytes> forwarded_in;
    TcpSpec other;
    other.source_port = 6000;
    other.seq = 42;
    other.id = 500;
    for (int i = 0; i < 8; ++i) {
      forwarded_in.push_back(
          address_packet(build_tcp(other, pattern(1300, 20 + i)), "10.77.0.2", "10.78.0.2"));
      other.seq += 1300;
      ++other.id;
    }
    write_coalesced(lan, forwarded_in);
    for (const Bytes& expected : forwarded_in) {
      ASSERT_TRUE(read_tcp(out.fd(0), false, frame));
      EXPECT_TRUE(ipv4_header_ok(frame));
      EXPECT_TRUE(l4_checksum_ok(frame));
      Bytes adjusted = expected;
      --adjusted[8];  // TTL
      put16(&adjusted[10], 0);
      put16(&adjusted[10],
            static_cast<uint16_t>(~ones_sum(Bytes(adjusted.begin(), adjusted.begin() + 20))));
      EXPECT_EQ(frame, adjusted);
    }
  }

  ~KernelPeer() {
    if (client_ >= 0) ::close(client_);
  }
  const std::string& skipped() const { return skipped_; }

 private:
  static Bytes address_packet(Bytes p, const char* source, const char* destination) {
    inet_pton(AF_INET, source, &p[12]);
    inet_pton(AF_INET, destination, &p[16]);
    put16(&p[10], 0);
    put16(&p[10], static_cast<uint16_t>(~ones_sum(Bytes(p.begin(), p.begin() + 20))));
    set_l4_checksum(p, 6, 16);
    return p;
  }
  static void write_plain(const TunDevice& tun, const Bytes& packet) {
    Bytes frame(VnetHeader::kSize, 0);
    frame.insert(frame.end(), packet.begin(), packet.end());
    ASSERT_TRUE(tun.write(0, frame));
  }
  // As the gateway's TUN writer does: a frame of pieces pointing into the segments, one
  // writev().
  static void write_coalesced(const TunDevice& tun, const std::vector<Bytes>& segments) {
    TcpCoalescer coalescer;
    for (const Bytes& segment : segments) coalescer.add_borrowed(segment);
    size_t frames = 0;
    ASSERT_TRUE(coalescer.flush_pieces([&](std::span<const iovec> pieces) {
      ++frames;
      EXPECT_GT(pieces.size(), segments.size()) << "the vnet header and headers, then payloads";
      EXPECT_TRUE(tun.write_pieces(0, pieces)) << std::strerror(errno);
      return true;
    }));
    ASSERT_EQ(frames, 1u);
    ASSERT_EQ(coalescer.stats().segments_merged, segments.size() - 1);
  }

  int client_ = -1;
  std::string skipped_;
};

TEST(OffloadKernel, TunTsoReadAndGroWrite) {
  // unshare() moves only the calling thread into the new namespace: a thread of its own
  // keeps the rest of the test process where it was.
  KernelPeer peer;
  std::thread([&] {
    try {
      peer.run();
    } catch (const std::exception& e) {  // an exception would end the process in a thread
      ADD_FAILURE() << e.what();
    }
  }).join();
  if (!peer.skipped().empty()) GTEST_SKIP() << peer.skipped();
}

}  // namespace
}  // namespace espgw::io
