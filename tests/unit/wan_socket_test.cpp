// The WAN socket against the real kernel, over loopback: UDP GRO on receive (a run sent
// with UDP_SEGMENT reaches a GRO socket as one coalesced buffer, which WanSocket must split
// back into one packet per datagram, in order), the plain path beside it, datagrams too
// large for a packet buffer, and several sockets sharing a port through SO_REUSEPORT.
#include "io/wan_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "util/clock.h"

namespace espgw::io {
namespace {

using Bytes = std::vector<uint8_t>;

// Distinct content per datagram, so a datagram cut at the wrong offset or delivered out
// of order cannot pass for the right one.
Bytes payload(uint32_t index, size_t length) {
  Bytes bytes(length);
  for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<uint8_t>(index * 37 + i * 11 + 1);
  return bytes;
}

uint16_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::system_error(errno, std::generic_category(), "getsockname");
  return address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

// A plain UDP socket on loopback that sends to a WanSocket, either one datagram per call
// or a run of them with UDP_SEGMENT, the way WanSocket::send does, written out here
// independently so the test does not check the code against itself.
class Sender {
 public:
  Sender(const esp::IpAddress& loopback, uint16_t destination_port) {
    fd_ = socket(loopback.family == 6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
    sockaddr_storage local;
    const socklen_t local_length = WanSocket::make_peer(loopback, 0, local);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&local), local_length) != 0)
      throw std::system_error(errno, std::generic_category(), "bind");
    destination_length_ = WanSocket::make_peer(loopback, destination_port, destination_);
  }
  ~Sender() { ::close(fd_); }
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  uint16_t port() const { return bound_port(fd_); }

  void send_one(const Bytes& datagram) {
    ASSERT_EQ(sendto(fd_, datagram.data(), datagram.size(), 0,
                     reinterpret_cast<const sockaddr*>(&destination_), destination_length_),
              static_cast<ssize_t>(datagram.size()));
  }

  // `run`: equal sizes but for a shorter last one, as UDP_SEGMENT requires.
  void send_segmented(const std::vector<Bytes>& run) {
    Bytes joined;
    for (const auto& datagram : run) joined.insert(joined.end(), datagram.begin(), datagram.end());
    iovec vector{joined.data(), joined.size()};
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))] = {};
    msghdr header{};
    header.msg_name = &destination_;
    header.msg_namelen = destination_length_;
    header.msg_iov = &vector;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&header);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const uint16_t segment = static_cast<uint16_t>(run.front().size());
    std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
    ASSERT_EQ(sendmsg(fd_, &header, 0), static_cast<ssize_t>(joined.size()))
        << "UDP_SEGMENT send: " << std::strerror(errno);
  }

 private:
  int fd_ = -1;
  sockaddr_storage destination_{};
  socklen_t destination_length_ = 0;
};

struct Received {
  std::vector<Bytes> datagrams;
  std::vector<uint16_t> peer_ports;
  std::vector<uint64_t> arrivals_ns;
  std::vector<uint8_t> traffic_classes;
};

uint64_t realtime_ns() {
  return clock_ns(CLOCK_REALTIME);
}

// Receives until `expected` datagrams came or `patience` passed, `slots` buffers per call
// (fewer than a coalesced run holds, to make runs straddle calls).
Received receive(WanSocket& socket, size_t expected, size_t slots, size_t capacity = 2048,
                 std::chrono::milliseconds patience = std::chrono::seconds(1)) {
  std::vector<std::unique_ptr<esp::PacketBuffer>> buffers;
  std::vector<Datagram> batch(slots);
  for (size_t i = 0; i < slots; ++i) {
    buffers.push_back(std::make_unique<esp::PacketBuffer>(capacity));
    batch[i].buffer = buffers.back().get();
  }
  Received result;
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (result.datagrams.size() < expected && std::chrono::steady_clock::now() < deadline) {
    const int n = socket.receive(batch, 50);
    if (n < 0) throw std::system_error(errno, std::generic_category(), "receive");
    for (int i = 0; i < n; ++i) {
      const auto bytes = batch[i].buffer->bytes();
      result.datagrams.emplace_back(bytes.begin(), bytes.end());
      result.arrivals_ns.push_back(batch[i].arrival_ns);
      result.traffic_classes.push_back(batch[i].traffic_class);
      const auto& peer = batch[i].peer;
      result.peer_ports.push_back(
          peer.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port)
              : ntohs(reinterpret_cast<const sockaddr_in*>(&peer)->sin_port));
    }
  }
  return result;
}

std::vector<Bytes> make_run(uint32_t first_index, size_t count, size_t size, size_t last_size) {
  std::vector<Bytes> run;
  for (size_t i = 0; i < count; ++i)
    run.push_back(
        payload(first_index + static_cast<uint32_t>(i), i + 1 == count ? last_size : size));
  return run;
}

class WanSocketGro : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    loopback_ = *esp::IpAddress::parse(GetParam());
    try {
      socket_ = std::make_unique<WanSocket>(WanKind::udp, loopback_, 0);
    } catch (const std::system_error& e) {
      GTEST_SKIP() << "no " << GetParam() << " here: " << e.what();
    }
    if (!socket_->gro()) GTEST_SKIP() << "the kernel refuses UDP_GRO";
    sender_ = std::make_unique<Sender>(loopback_, bound_port(socket_->fd()));
  }

  esp::IpAddress loopback_;
  std::unique_ptr<WanSocket> socket_;
  std::unique_ptr<Sender> sender_;
};

TEST_P(WanSocketGro, SegmentedRunArrivesAsOnePacketPerDatagram) {
  // 40 datagrams of 1400 bytes and a shorter last one: more than the 16 buffers a call
  // gets, so the rest of the run waits in the socket for the next calls.
  const auto run = make_run(0, 41, 1400, 517);
  sender_->send_segmented(run);
  const auto got = receive(*socket_, run.size(), 16);
  ASSERT_EQ(got.datagrams.size(), run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    EXPECT_EQ(got.datagrams[i], run[i]) << "datagram " << i;
    EXPECT_EQ(got.peer_ports[i], sender_->port()) << "datagram " << i;
  }
  const auto stats = socket_->stats();
  EXPECT_EQ(stats.gro_batches, 1u) << "the kernel should deliver the GSO run unsegmented";
  EXPECT_EQ(stats.gro_datagrams, run.size());
  EXPECT_EQ(stats.oversize, 0u);
}

// What the gateway's transmitter sends for a batch of several SAs to one peer: each SA's
// sink holds its own copy of the peer's address. Equal-size packets must still leave as
// one GSO buffer (the receiver gets one coalesced run), in their order.
TEST_P(WanSocketGro, ARunToOnePeerSharesOneBufferWhateverCopyOfTheAddressEachPacketNames) {
  WanSocket sender(WanKind::udp, loopback_, 0);
  std::array<sockaddr_storage, 4> copies{};  // four SAs' sinks, one peer
  socklen_t length = 0;
  for (auto& copy : copies)
    length = WanSocket::make_peer(loopback_, bound_port(socket_->fd()), copy);
  const auto run = make_run(0, 24, 1200, 1200);
  std::vector<Outgoing> outgoing;
  for (size_t i = 0; i < run.size(); ++i)
    outgoing.push_back({run[i].data(), run[i].size(), &copies[i % copies.size()], length});
  ASSERT_EQ(sender.send(outgoing), static_cast<int>(run.size()));
  const auto got = receive(*socket_, run.size(), 32);
  ASSERT_EQ(got.datagrams.size(), run.size());
  for (size_t i = 0; i < run.size(); ++i) EXPECT_EQ(got.datagrams[i], run[i]) << "datagram " << i;
  const auto stats = socket_->stats();
  EXPECT_EQ(stats.gro_batches, 1u) << "one GSO buffer for the whole run";
  EXPECT_EQ(stats.gro_datagrams, run.size());
}

// Each packet leaves with the traffic class (DSCP and ECN) its SA chose and the receiver
// reads it back: runs of equal-size packets split where the class changes, since one GSO
// buffer has one IP header. Class 0 sends no ancillary data at all.
TEST_P(WanSocketGro, EachPacketCarriesItsTrafficClassBothWays) {
  WanSocket sender(WanKind::udp, loopback_, 0);
  sockaddr_storage peer{};
  const socklen_t length = WanSocket::make_peer(loopback_, bound_port(socket_->fd()), peer);
  const auto run = make_run(0, 12, 1000, 1000);
  const std::array<uint8_t, 12> classes = {0xB8, 0xB8, 0xB8, 0xB9, 0xB9, 0,
                                           0,    0x88, 0x8A, 0x8A, 0x8B, 0x02};
  std::vector<Outgoing> outgoing;
  for (size_t i = 0; i < run.size(); ++i)
    outgoing.push_back({run[i].data(), run[i].size(), &peer, length, classes[i]});
  ASSERT_EQ(sender.send(outgoing), static_cast<int>(run.size()));
  const auto got = receive(*socket_, run.size(), 32);
  ASSERT_EQ(got.datagrams.size(), run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    EXPECT_EQ(got.datagrams[i], run[i]) << "datagram " << i;
    EXPECT_EQ(got.traffic_classes[i], classes[i]) << "datagram " << i;
  }
}

TEST_P(WanSocketGro, MixedSingleDatagramsAndRunsKeepTheirOrder) {
  // Singles before, between and after runs, in one receive batch: the ones ahead of the
  // first run stay in their buffers, everything from the run on is split and copied.
  std::vector<Bytes> expected;
  auto single = [&](uint32_t index, size_t size) {
    expected.push_back(payload(index, size));
    sender_->send_one(expected.back());
  };
  auto run = [&](uint32_t index, size_t count, size_t size, size_t last) {
    const auto datagrams = make_run(index, count, size, last);
    expected.insert(expected.end(), datagrams.begin(), datagrams.end());
    sender_->send_segmented(datagrams);
  };
  single(1000, 1400);
  single(1001, 60);
  run(2000, 10, 1000, 1000);  // no shorter last one
  single(1002, 1);            // what a NAT keepalive looks like
  run(3000, 5, 300, 12);
  run(4000, 2, 1432, 8);
  single(1003, 0);  // an empty UDP payload is a datagram too
  single(1004, 1500);
  const auto got = receive(*socket_, expected.size(), 32);
  ASSERT_EQ(got.datagrams.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(got.datagrams[i], expected[i]) << "datagram " << i;
  const auto stats = socket_->stats();
  EXPECT_EQ(stats.gro_batches, 3u);
  EXPECT_EQ(stats.gro_datagrams, 17u);
}

TEST_P(WanSocketGro, PlainDatagramsAreNotCountedAsCoalesced) {
  std::vector<Bytes> expected;
  for (uint32_t i = 0; i < 20; ++i) {
    expected.push_back(payload(i, 100 + i * 50));
    sender_->send_one(expected.back());
  }
  const auto got = receive(*socket_, expected.size(), 8);
  EXPECT_EQ(got.datagrams, expected);
  EXPECT_EQ(socket_->stats().gro_batches, 0u);
}

TEST_P(WanSocketGro, DatagramsLargerThanAPacketBufferAreCountedAndDropped) {
  // Buffers with 384 bytes of tailroom: a run of 1000-byte datagrams and a single one of
  // 1000 do not fit; the 100-byte ones around them still arrive, in order.
  const auto small_before = payload(1, 100);
  const auto small_after = payload(2, 100);
  sender_->send_one(small_before);
  sender_->send_segmented(make_run(10, 3, 1000, 1000));
  sender_->send_one(payload(20, 1000));
  sender_->send_segmented(make_run(30, 3, 200, 100));
  sender_->send_one(small_after);
  const auto got = receive(*socket_, 5, 8, 512);
  ASSERT_EQ(got.datagrams.size(), 5u);
  EXPECT_EQ(got.datagrams[0], small_before);
  EXPECT_EQ(got.datagrams[1], payload(30, 200));
  EXPECT_EQ(got.datagrams[2], payload(31, 200));
  EXPECT_EQ(got.datagrams[3], payload(32, 100));
  EXPECT_EQ(got.datagrams[4], small_after);
  EXPECT_EQ(socket_->stats().oversize, 4u);
}

TEST_P(WanSocketGro, EveryDatagramCarriesTheTimeTheKernelReceivedIt) {
  // What the reader's queue management measures: how long each datagram waited in the
  // socket. Singles and the datagrams split out of a coalesced run alike carry the
  // kernel's receive time, and a datagram left 30 ms in the queue shows 30 ms of waiting.
  // The kernel turns arrival stamping on a moment after the first socket asks for it (a
  // deferred static key); until then recvmsg reports the time of the read, which reads as
  // no waiting. So first wait until a datagram held 5 ms shows it.
  bool stamping = false;
  for (int attempt = 0; attempt < 200 && !stamping; ++attempt) {
    const uint64_t sent_probe = realtime_ns();
    sender_->send_one(payload(0, 10));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto probe = receive(*socket_, 1, 1);
    ASSERT_EQ(probe.arrivals_ns.size(), 1u);
    stamping = probe.arrivals_ns[0] <= sent_probe + 2'000'000;
  }
  ASSERT_TRUE(stamping) << "the kernel never stamped a datagram on arrival";
  const uint64_t before = realtime_ns();
  sender_->send_one(payload(1, 200));
  const auto run = make_run(10, 20, 1000, 400);
  sender_->send_segmented(run);
  sender_->send_one(payload(2, 200));
  const uint64_t sent = realtime_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto got = receive(*socket_, run.size() + 2, 8);
  const uint64_t after = realtime_ns();
  ASSERT_EQ(got.datagrams.size(), run.size() + 2);
  for (size_t i = 0; i < got.arrivals_ns.size(); ++i) {
    SCOPED_TRACE("datagram " + std::to_string(i));
    EXPECT_GE(got.arrivals_ns[i], before);
    EXPECT_LE(got.arrivals_ns[i], sent);
    EXPECT_GE(after - got.arrivals_ns[i], 30'000'000u);
  }
}

// What the reader's queue management learns from a receive: whether the socket ran empty.
// Not while datagrams of a coalesced run wait for buffers, nor while the kernel had more
// than the call asked for; yes once a call took the last ones.
TEST_P(WanSocketGro, DrainedTellsWhetherTheLastReceiveTookEverythingQueued) {
  std::vector<std::unique_ptr<esp::PacketBuffer>> buffers;
  auto batch_of = [&](size_t slots) {
    std::vector<Datagram> batch(slots);
    for (auto& datagram : batch) {
      buffers.push_back(std::make_unique<esp::PacketBuffer>(2048));
      datagram.buffer = buffers.back().get();
    }
    return batch;
  };
  auto four = batch_of(4);
  // A run of 10 coalesced into one message: 4 datagrams now, 6 wait here.
  sender_->send_segmented(make_run(0, 10, 1000, 1000));
  ASSERT_EQ(socket_->receive(four, 1000), 4);
  EXPECT_FALSE(socket_->drained()) << "6 datagrams of the run still wait";
  ASSERT_EQ(socket_->receive(four, 1000), 4);
  EXPECT_FALSE(socket_->drained());
  ASSERT_EQ(socket_->receive(four, 1000), 2);
  EXPECT_TRUE(socket_->drained());
  // Six single datagrams in the kernel's queue, four asked for: not drained; then two
  // left, four asked for: drained. (Loopback queues a datagram within its send; the pause
  // only makes sure.)
  for (uint32_t i = 0; i < 6; ++i) sender_->send_one(payload(100 + i, 300 + i));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(socket_->receive(four, 1000), 4);
  EXPECT_FALSE(socket_->drained()) << "two more were queued";
  ASSERT_EQ(socket_->receive(four, 1000), 2);
  EXPECT_TRUE(socket_->drained());
}

std::string family_name(const ::testing::TestParamInfo<const char*>& param) {
  return std::string(param.param) == "::1" ? "Ipv6" : "Ipv4";
}

INSTANTIATE_TEST_SUITE_P(Loopback, WanSocketGro, ::testing::Values("127.0.0.1", "::1"),
                         family_name);

TEST(WanSocketBuffers, StatsReportTheReceiveBufferTheKernelGranted) {
  const auto loopback = *esp::IpAddress::parse("127.0.0.1");
  WanSocketOptions options;
  options.buffer_bytes = 2 << 20;
  const WanSocket socket(WanKind::udp, loopback, 0, options);
  int granted = 0;
  socklen_t length = sizeof granted;
  ASSERT_EQ(getsockopt(socket.fd(), SOL_SOCKET, SO_RCVBUF, &granted, &length), 0);
  EXPECT_EQ(socket.stats().receive_buffer, static_cast<uint64_t>(granted));
  // Root forces the size past net.core.rmem_max and the kernel doubles it; without root
  // the cap applies, so only the report's agreement with the kernel is certain.
  if (geteuid() == 0) {
    EXPECT_EQ(socket.stats().receive_buffer, uint64_t{4} << 20);
  }
}

TEST(WanSocketReusePort, SocketsShareAPortAndPeersSpreadOverThem) {
  const auto loopback = *esp::IpAddress::parse("127.0.0.1");
  WanSocketOptions options;
  options.reuse_port = true;
  WanSocket first(WanKind::udp, loopback, 0, options);
  const uint16_t port = bound_port(first.fd());
  WanSocket second(WanKind::udp, loopback, port, options);
  EXPECT_EQ(bound_port(second.fd()), port);
  // A socket that did not ask to share cannot join, so a second daemon still fails loudly
  // unless it too sets SO_REUSEPORT.
  EXPECT_THROW(WanSocket(WanKind::udp, loopback, port), std::system_error);

  // The kernel picks the socket by a hash of the 4-tuple: from 32 source ports, both get
  // some (all on one would happen by chance with probability 2^-31), and each source's
  // datagrams all go to the same socket.
  constexpr size_t kSources = 32;
  std::vector<std::unique_ptr<Sender>> senders;
  for (size_t i = 0; i < kSources; ++i) {
    senders.push_back(std::make_unique<Sender>(loopback, port));
    senders.back()->send_one(payload(static_cast<uint32_t>(i), 64));
    senders.back()->send_one(payload(static_cast<uint32_t>(i), 64));
  }
  // All were sent before: waiting a little is enough to see each socket's share.
  const auto at_first = receive(first, 2 * kSources, 32, 2048, std::chrono::milliseconds(200));
  const auto at_second = receive(second, 2 * kSources - at_first.datagrams.size(), 32);
  EXPECT_EQ(at_first.datagrams.size() + at_second.datagrams.size(), 2 * kSources);
  EXPECT_GT(at_first.datagrams.size(), 0u);
  EXPECT_GT(at_second.datagrams.size(), 0u);
  for (const auto& sender : senders) {
    const auto count = [&](const Received& r) {
      return std::count(r.peer_ports.begin(), r.peer_ports.end(), sender->port());
    };
    EXPECT_TRUE((count(at_first) == 2 && count(at_second) == 0) ||
                (count(at_first) == 0 && count(at_second) == 2))
        << "source port " << sender->port();
  }
}

}  // namespace
}  // namespace espgw::io
