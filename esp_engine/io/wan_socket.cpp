#include "io/wan_socket.h"

#include <arpa/inet.h>

#include <netinet/udp.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

#include "packet/ip_format.h"
#include "util/clock.h"

namespace espgw::io {

namespace {

constexpr size_t kMaxBatch = 64;
// The kernel coalesces at most this many datagrams into one (UDP_GRO_CNT_MAX).
constexpr size_t kMaxGroSegments = 64;

[[noreturn]] void fail(const char* what, const esp::IpAddress& local, uint16_t port) {
  throw std::system_error(errno, std::generic_category(),
                          std::string(what) + " " + local.to_string() + ":" + std::to_string(port));
}

void size_buffers(int fd, size_t bytes) {
  const int value = static_cast<int>(bytes);
  // The FORCE variants ignore net.core.[rw]mem_max (root only); fall back quietly.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &value, sizeof value) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, sizeof value);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &value, sizeof value) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value);
}

// Whether two packets go to one address and port: then they can share a GSO buffer, also
// when they belong to different SAs (an ECMP group's members all go to one peer), whose
// sinks each hold their own copy of the address.
bool same_peer(const Outgoing& a, const Outgoing& b) {
  return a.peer == b.peer ||
         (a.peer_length == b.peer_length && std::memcmp(a.peer, b.peer, a.peer_length) == 0);
}

// The ancillary data that sets a packet's outer traffic class: IP_TOS or IPV6_TCLASS, an
// int each. Space for it in every message's control buffer.
constexpr size_t kTrafficClassSpace = CMSG_SPACE(sizeof(int));

void add_traffic_class(msghdr& header, int family, uint8_t traffic_class) {
  auto* control =
      reinterpret_cast<cmsghdr*>(static_cast<uint8_t*>(header.msg_control) + header.msg_controllen);
  control->cmsg_level = family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP;
  control->cmsg_type = family == AF_INET6 ? IPV6_TCLASS : IP_TOS;
  control->cmsg_len = CMSG_LEN(sizeof(int));
  const int value = traffic_class;
  std::memcpy(CMSG_DATA(control), &value, sizeof value);
  header.msg_controllen += kTrafficClassSpace;
}

}  // namespace

socklen_t WanSocket::make_peer(const esp::IpAddress& address, uint16_t port,
                               sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  if (address.family == 4) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    std::memcpy(&v4->sin_addr, address.bytes.data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(port);
  std::memcpy(&v6->sin6_addr, address.bytes.data(), 16);
  return sizeof(sockaddr_in6);
}

WanSocket::WanSocket(WanKind kind, const esp::IpAddress& local, uint16_t port,
                     const WanSocketOptions& options)
    : kind_(kind), family_(local.family == 6 ? AF_INET6 : AF_INET), local_(local) {
  fd_ = kind == WanKind::udp ? socket(family_, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP)
                             : socket(family_, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ESP);
  if (fd_ < 0) fail("socket", local, port);
  auto close_and_fail = [&](const char* what) {
    const int error = errno;
    ::close(fd_);
    errno = error;
    fail(what, local, port);
  };
  const int one = 1;
  // Before bind: the kernel only lets a socket join a port's group if every member,
  // including the first to bind, asked for it.
  if (options.reuse_port && setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
    close_and_fail("SO_REUSEPORT on");
  if (family_ == AF_INET6) setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  size_buffers(fd_, options.buffer_bytes);
  // The kernel then reports, with each datagram, how many it dropped on this socket's
  // full receive buffer: drops that would otherwise only show in /proc/net/snmp.
  setsockopt(fd_, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
  // And when it received each one: the reader's measure of the queue's delay
  // (QueueDelayGate). Without it arrival_ns stays 0 and the gate sees no delay.
  setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  // And the outer traffic class of each, whose ECN field RFC 6040 carries inward (a raw
  // IPv4 socket passes the whole IP header up anyway).
  if (family_ == AF_INET6)
    setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one);
  else
    setsockopt(fd_, IPPROTO_IP, IP_RECVTOS, &one, sizeof one);
  // Without UDP_GRO the kernel cuts every coalesced or unsegmented GSO buffer back into
  // single datagrams before queueing them; with it, one receive carries up to 64 of them.
  // A kernel without it (before 5.0) just gets the plain path.
  if (kind == WanKind::udp && options.gro)
    gro_ = setsockopt(fd_, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
  sockaddr_storage address;
  const socklen_t length = make_peer(local, kind == WanKind::udp ? port : 0, address);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0) close_and_fail("bind");
}

WanSocket::~WanSocket() {
  if (fd_ >= 0) ::close(fd_);
}

WanReceiveStats WanSocket::stats() const {
  WanReceiveStats s;
  s.kernel_drops = kernel_drops_.load(std::memory_order_relaxed);
  s.gro_batches = gro_batches_.load(std::memory_order_relaxed);
  s.gro_datagrams = gro_datagrams_.load(std::memory_order_relaxed);
  s.oversize = oversize_.load(std::memory_order_relaxed);
  int granted = 0;
  socklen_t length = sizeof granted;
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &granted, &length) == 0 && granted > 0)
    s.receive_buffer = static_cast<uint64_t>(granted);
  return s;
}

int WanSocket::receive(std::span<Datagram> datagrams, int timeout_ms) {
  const size_t count = std::min(datagrams.size(), kMaxBatch);
  if (count == 0) return 0;
  // A coalesced receive that had more datagrams than buffers: hand out the rest before
  // reading more, both to keep arrival order and because they occupy the scratch space.
  if (pending_next_ < pending_.size())
    return static_cast<int>(drain_pending(datagrams.first(count)));
  if (gro_ && scratch_messages_ < count) {
    // Touched (zeroed) here, all of it: left as virtual memory, the pages came in one by
    // one as coalesced runs and oversized datagrams wrote into them, and a storm of
    // datagrams of up to 64 KB grew the daemon's RSS by the whole region over the first
    // minutes of attack (5 MiB, +15%, with two readers; docs/security_isolation.md). An attacker
    // should not be able to move the gateway's memory: it is resident from the first
    // receive on, and flat after it.
    scratch_ = std::make_unique<uint8_t[]>(count * kScratchPerMessage);
    scratch_messages_ = count;
    peers_.resize(count);
    peer_lengths_.resize(count);
    arrivals_.resize(count);
    traffic_classes_.resize(count);
    pending_.reserve(count * kMaxGroSegments);
  }
  std::array<mmsghdr, kMaxBatch> messages{};
  // Only the entries of `count` messages are filled and read: not zeroing the rest saves
  // a few KB of stores per batch.
  std::array<iovec, kMaxBatch * 2> vectors;
  struct alignas(cmsghdr) Control {
    // RXQ_OVFL, GRO, TIMESTAMPNS, TOS or TCLASS
    uint8_t bytes[CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(int)) +
                  CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(int))];
  };
  std::array<Control, kMaxBatch> controls;
  for (size_t i = 0; i < count; ++i) {
    msghdr& header = messages[i].msg_hdr;
    header.msg_control = controls[i].bytes;
    header.msg_controllen = sizeof(controls[i].bytes);
    esp::PacketBuffer& buffer = *datagrams[i].buffer;
    buffer.assign({}, esp::PacketBuffer::kDefaultHeadroom);
    // Each datagram lands in its packet buffer, as without GRO: nothing is copied unless
    // the kernel coalesced. What does not fit spills into the message's scratch region.
    header.msg_iov = &vectors[2 * i];
    if (gro_) {
      vectors[2 * i] = {buffer.data(), std::min(buffer.tailroom(), kScratchGap)};
      vectors[2 * i + 1] = {scratch_for(i) + kScratchGap, kScratchSpill};
      header.msg_iovlen = 2;
    } else {
      vectors[2 * i] = {buffer.data(), buffer.tailroom()};
      header.msg_iovlen = 1;
    }
    header.msg_name = &datagrams[i].peer;
    header.msg_namelen = sizeof(sockaddr_storage);
  }
  // Read first and wait only when nothing is there: under load there nearly always is,
  // and a poll() before every batch was a second system call per batch.
  auto read_batch = [&] {
    return recvmmsg(fd_, messages.data(), static_cast<unsigned>(count), MSG_DONTWAIT, nullptr);
  };
  int received = read_batch();
  if (received < 0 && errno == EAGAIN) {
    pollfd waiter{fd_, POLLIN, 0};
    const int ready = poll(&waiter, 1, timeout_ms);
    if (ready <= 0) return ready;
    received = read_batch();
  }
  if (received <= 0) return received < 0 && errno == EAGAIN ? 0 : received;
  kernel_queue_drained_ = static_cast<size_t>(received) < count;

  // Messages up to the first coalesced (or spilled) one are final where they are.
  std::array<size_t, kMaxBatch> segment_size;  // 0: the kernel did not coalesce
  size_t in_place = static_cast<size_t>(received);
  for (size_t i = 0; i < static_cast<size_t>(received); ++i) {
    msghdr& header = messages[i].msg_hdr;
    segment_size[i] = 0;
    datagrams[i].arrival_ns = 0;
    datagrams[i].traffic_class = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr; c = CMSG_NXTHDR(&header, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        uint32_t dropped;
        std::memcpy(&dropped, CMSG_DATA(c), sizeof dropped);
        kernel_drops_.store(dropped, std::memory_order_relaxed);
      } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int size;
        std::memcpy(&size, CMSG_DATA(c), sizeof size);
        segment_size[i] = size > 0 ? static_cast<size_t>(size) : 0;
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec stamp;
        std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
        datagrams[i].arrival_ns = to_ns(stamp);
      } else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
                 (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)) {
        // IP_TOS comes as one byte, IPV6_TCLASS as an int.
        if (c->cmsg_type == IP_TOS) {
          datagrams[i].traffic_class = *CMSG_DATA(c);
        } else {
          int value;
          std::memcpy(&value, CMSG_DATA(c), sizeof value);
          datagrams[i].traffic_class = static_cast<uint8_t>(value);
        }
      }
    }
    const size_t length = messages[i].msg_len;
    const bool coalesced = segment_size[i] != 0 && segment_size[i] < length;
    if (in_place == static_cast<size_t>(received) && (coalesced || length > vectors[2 * i].iov_len))
      in_place = i;
  }
  for (size_t i = 0; i < in_place; ++i) {
    Datagram& d = datagrams[i];
    d.peer_length = messages[i].msg_hdr.msg_namelen;
    const size_t length = messages[i].msg_len;
    d.buffer->push_back(length);
    if (kind_ == WanKind::raw_esp && family_ == AF_INET) {
      // Raw IPv4 sockets deliver the IP header too; IPv6 ones do not.
      const uint8_t* ip = d.buffer->data();
      const size_t header =
          length >= packet::kIpv4HeaderLength ? (size_t{ip[0]} & 0x0F) * 4 : length;
      if (length >= packet::kIpv4HeaderLength) d.traffic_class = ip[1];
      d.buffer->pull_front(std::min(header, length));
    }
  }
  if (in_place == static_cast<size_t>(received)) return received;

  // From the first coalesced message on, every datagram is copied into a buffer of its
  // own. First make each message contiguous in its scratch region (the part in the packet
  // buffer moves into the gap before the spill), since the buffers are about to be reused
  // for the split datagrams; the peer addresses move out of them for the same reason.
  pending_.clear();
  pending_next_ = 0;
  for (size_t r = in_place; r < static_cast<size_t>(received); ++r) {
    const size_t length = messages[r].msg_len;
    const size_t in_buffer = std::min(length, vectors[2 * r].iov_len);
    uint8_t* start = scratch_for(r) + kScratchGap - in_buffer;
    std::memcpy(start, vectors[2 * r].iov_base, in_buffer);
    peers_[r] = datagrams[r].peer;
    peer_lengths_[r] = messages[r].msg_hdr.msg_namelen;
    arrivals_[r] = datagrams[r].arrival_ns;
    traffic_classes_[r] = datagrams[r].traffic_class;
    const size_t step = segment_size[r];
    if (step == 0 || step >= length) {
      pending_.push_back({start, static_cast<uint32_t>(length), static_cast<uint32_t>(r)});
      continue;
    }
    // Equal-size datagrams, the last one possibly shorter (UDP GRO never coalesces
    // anything else).
    size_t split = 0;
    for (size_t offset = 0; offset < length; offset += step, ++split)
      pending_.push_back({start + offset, static_cast<uint32_t>(std::min(step, length - offset)),
                          static_cast<uint32_t>(r)});
    gro_batches_.fetch_add(1, std::memory_order_relaxed);
    gro_datagrams_.fetch_add(split, std::memory_order_relaxed);
  }
  return static_cast<int>(in_place + drain_pending(datagrams.subspan(in_place, count - in_place)));
}

size_t WanSocket::drain_pending(std::span<Datagram> datagrams) {
  size_t filled = 0;
  while (filled < datagrams.size() && pending_next_ < pending_.size()) {
    const Segment& segment = pending_[pending_next_++];
    Datagram& d = datagrams[filled];
    if (!d.buffer->assign({segment.data, segment.length}, esp::PacketBuffer::kDefaultHeadroom)) {
      // Larger than any packet this gateway can carry: it would not decrypt into one
      // either. Counted, and the buffer serves the next datagram.
      oversize_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    d.peer = peers_[segment.message];
    d.peer_length = peer_lengths_[segment.message];
    d.arrival_ns = arrivals_[segment.message];
    d.traffic_class = traffic_classes_[segment.message];
    ++filled;
  }
  return filled;
}

int WanSocket::send(std::span<const Outgoing> packets) const {
  if (kind_ == WanKind::udp && gso_.load(std::memory_order_relaxed)) {
    const int sent = send_segmented(packets);
    if (sent >= 0) return sent;
    // The kernel refused segmentation offload on this path: plain datagrams from now on.
    gso_.store(false, std::memory_order_relaxed);
  }
  return send_each(packets);
}

int WanSocket::send_each(std::span<const Outgoing> packets) const {
  int sent_total = 0;
  while (!packets.empty()) {
    const size_t count = std::min(packets.size(), kMaxBatch);
    std::array<mmsghdr, kMaxBatch> messages{};
    std::array<iovec, kMaxBatch> vectors{};
    struct alignas(cmsghdr) Control {
      uint8_t bytes[kTrafficClassSpace];
    };
    std::array<Control, kMaxBatch> controls;
    for (size_t i = 0; i < count; ++i) {
      vectors[i] = {const_cast<uint8_t*>(packets[i].data), packets[i].length};
      msghdr& header = messages[i].msg_hdr;
      header.msg_iov = &vectors[i];
      header.msg_iovlen = 1;
      header.msg_name = const_cast<sockaddr_storage*>(packets[i].peer);
      header.msg_namelen = packets[i].peer_length;
      if (packets[i].traffic_class != 0) {
        header.msg_control = controls[i].bytes;
        add_traffic_class(header, family_, packets[i].traffic_class);
      }
    }
    const int sent = sendmmsg(fd_, messages.data(), static_cast<unsigned>(count), 0);
    if (sent < 0) {
      // The first message failed (EMSGSIZE, a full buffer, an unreachable peer): skip it
      // so one bad packet does not take the rest of the batch with it.
      packets = packets.subspan(1);
      continue;
    }
    sent_total += sent;
    packets = packets.subspan(static_cast<size_t>(sent));
  }
  return sent_total;
}

int WanSocket::send_segmented(std::span<const Outgoing> packets) const {
  // UDP GSO (UDP_SEGMENT): a run of datagrams to one peer, all of one size except a
  // shorter last one, goes down the stack as one buffer and is cut into datagrams at the
  // bottom. Bulk traffic is exactly that: full-size ESP packets of one SA. The run is
  // gathered with an iovec per packet, so nothing is copied.
  constexpr size_t kMaxSegments = 64;  // the kernel's UDP_MAX_SEGMENTS
  std::array<mmsghdr, kMaxBatch> messages{};
  std::array<iovec, kMaxBatch * 2> vectors{};
  struct alignas(cmsghdr) Control {
    uint8_t bytes[CMSG_SPACE(sizeof(uint16_t)) + kTrafficClassSpace];
  };
  std::array<Control, kMaxBatch> controls{};
  int sent_total = 0;
  size_t next = 0;
  while (next < packets.size()) {
    size_t message_count = 0, vector_count = 0;
    std::array<size_t, kMaxBatch> run_length{};
    while (next < packets.size() && message_count < kMaxBatch && vector_count < vectors.size()) {
      const Outgoing& first = packets[next];
      size_t run = 1;
      while (next + run < packets.size() && run < kMaxSegments &&
             vector_count + run < vectors.size() && same_peer(packets[next + run], first) &&
             packets[next + run].traffic_class == first.traffic_class &&
             packets[next + run].length <= first.length &&
             packets[next + run - 1].length == first.length &&
             run * first.length + packets[next + run].length <= 65000)
        ++run;
      msghdr& header = messages[message_count].msg_hdr;
      header = {};
      header.msg_name = const_cast<sockaddr_storage*>(first.peer);
      header.msg_namelen = first.peer_length;
      header.msg_iov = &vectors[vector_count];
      header.msg_iovlen = run;
      for (size_t i = 0; i < run; ++i)
        vectors[vector_count + i] = {const_cast<uint8_t*>(packets[next + i].data),
                                     packets[next + i].length};
      header.msg_control = controls[message_count].bytes;
      if (run > 1) {
        auto* control = reinterpret_cast<cmsghdr*>(controls[message_count].bytes);
        control->cmsg_level = SOL_UDP;
        control->cmsg_type = UDP_SEGMENT;
        control->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t segment = static_cast<uint16_t>(first.length);
        std::memcpy(CMSG_DATA(control), &segment, sizeof segment);
        header.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
      }
      if (first.traffic_class != 0) add_traffic_class(header, family_, first.traffic_class);
      if (header.msg_controllen == 0) header.msg_control = nullptr;
      run_length[message_count] = run;
      vector_count += run;
      ++message_count;
      next += run;
    }
    size_t done = 0;
    while (done < message_count) {
      const int sent =
          sendmmsg(fd_, messages.data() + done, static_cast<unsigned>(message_count - done), 0);
      if (sent < 0) {
        if (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT) return -1;  // no GSO here
        ++done;  // skip the failing message, as send_each skips a packet
        continue;
      }
      for (int i = 0; i < sent; ++i) sent_total += static_cast<int>(run_length[done + i]);
      done += static_cast<size_t>(sent);
    }
  }
  return sent_total;
}

}  // namespace espgw::io
