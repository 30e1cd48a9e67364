// CPU cycles per packet of carrying ESP-size UDP datagrams from one network namespace to
// another over a veth pair, both ends counted, for the two ways a WAN can be driven:
//
//   udp-gso  what espgw's WAN socket does: sendmsg with UDP_SEGMENT (one iovec per
//            datagram, 44 datagrams per call) into a connected UDP socket, and a
//            receiving socket with UDP_GRO, 2 MiB receive buffer
//   af-xdp   AF_XDP sockets: a TX ring on the sending veth and an RX ring on the
//            receiving one, whose XDP program (libxdp's default) redirects every frame
//            to the socket. veth has no zero-copy mode, so both bind in copy mode
//
// The two run alternately, ROUNDS times each, in one process: a sender thread in one
// namespace, a receiver thread in the other. The figure is the process CPU time over a
// round (which includes the softirq work the kernel runs on either thread, such as the
// receiving namespace's stack when the sender's veth transmit raises it) times the CPU
// clock, over the datagrams delivered to the receiver. Medians of the rounds and the
// ratio af-xdp / udp-gso are printed. bench/wan_transport_bench.sh makes the namespaces.
//
// Usage: espgw_wan_transport_bench NS_SEND IF_SEND NS_RECV IF_RECV SRC_IP DST_IP
//                                  [SECONDS] [ROUNDS] [CPU_MHZ]
#include <arpa/inet.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kPayload = 1400;    // an ESP packet of a full-size inner TCP segment, roughly
constexpr size_t kGsoSegments = 44;  // 44 x 1400 stays under the 64 KiB of one UDP GSO send
constexpr uint16_t kPort = 4500;
constexpr uint32_t kFrames = 4096;
constexpr uint32_t kFrameSize = XSK_UMEM__DEFAULT_FRAME_SIZE;
constexpr uint32_t kBatch = 64;

struct Options {
  std::string send_ns, send_if, recv_ns, recv_if;
  in_addr src{}, dst{};
  double seconds = 3;
  int rounds = 5;
  double mhz = 0;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void enter_namespace(const std::string& name) {
  const int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) fail("entering namespace " + name);
  close(fd);
}

std::array<uint8_t, ETH_ALEN> mac_of(const std::string& name) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq request{};
  std::snprintf(request.ifr_name, sizeof request.ifr_name, "%s", name.c_str());
  if (fd < 0 || ioctl(fd, SIOCGIFHWADDR, &request) != 0) fail("reading the MAC of " + name);
  close(fd);
  std::array<uint8_t, ETH_ALEN> mac{};
  std::memcpy(mac.data(), request.ifr_hwaddr.sa_data, ETH_ALEN);
  return mac;
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double cpu_mhz() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  char line[256];
  double mhz = 0;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "cpu MHz : %lf", &mhz) == 1) break;
  if (f) std::fclose(f);
  return mhz;
}

// What a round shares between the main thread and its two workers.
struct Round {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::atomic<uint64_t> delivered{0}, sent{0};
  std::array<uint8_t, ETH_ALEN> dst_mac{}, src_mac{};
  std::mutex error_mutex;
  std::string error;  // under error_mutex while the sides run
};

void wait_for_go(Round& round) {
  round.ready.fetch_add(1);
  while (!round.go.load() && !round.stop.load()) std::this_thread::yield();
}

// --- udp-gso --------------------------------------------------------------------------

void udp_receiver(const Options& o, Round& round) {
  enter_namespace(o.recv_ns);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int one = 1, buffer = 2 << 20;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr = o.dst;
  local.sin_port = htons(kPort);
  timeval timeout{0, 100000};
  if (fd < 0 || setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
    fail("udp receiver");
  std::vector<uint8_t> data(65536);
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int))];
  wait_for_go(round);
  while (!round.stop.load()) {
    iovec vector{data.data(), data.size()};
    msghdr message{};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &message, 0);
    if (n <= 0) continue;
    size_t segment = static_cast<size_t>(n);
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c))
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int size = 0;
        std::memcpy(&size, CMSG_DATA(c), sizeof size);
        segment = static_cast<size_t>(size);
      }
    round.delivered.fetch_add((static_cast<size_t>(n) + segment - 1) / segment,
                              std::memory_order_relaxed);
  }
  close(fd);
}

void udp_sender(const Options& o, Round& round) {
  enter_namespace(o.send_ns);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_addr = o.dst;
  peer.sin_port = htons(kPort);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) != 0)
    fail("udp sender");
  std::vector<uint8_t> packets(kGsoSegments * kPayload, 0x5a);
  std::array<iovec, kGsoSegments> vectors{};
  for (size_t i = 0; i < kGsoSegments; ++i) vectors[i] = {&packets[i * kPayload], kPayload};
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))]{};
  auto* c = reinterpret_cast<cmsghdr*>(control);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t segment = kPayload;
  std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
  wait_for_go(round);
  while (!round.stop.load()) {
    msghdr message{};
    message.msg_iov = vectors.data();
    message.msg_iovlen = vectors.size();
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    if (sendmsg(fd, &message, 0) > 0) round.sent.fetch_add(kGsoSegments, std::memory_order_relaxed);
  }
  close(fd);
}

// --- af-xdp ---------------------------------------------------------------------------

struct Umem {
  void* area = nullptr;
  xsk_umem* umem = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons completion{};
  Umem() {
    area = mmap(nullptr, size_t{kFrames} * kFrameSize, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) fail("umem mmap");
    if (const int e = xsk_umem__create(&umem, area, uint64_t{kFrames} * kFrameSize, &fill,
                                       &completion, nullptr);
        e != 0) {
      errno = -e;
      fail("xsk_umem__create");
    }
  }
  ~Umem() {
    xsk_umem__delete(umem);
    munmap(area, size_t{kFrames} * kFrameSize);
  }
  Umem(const Umem&) = delete;
  Umem& operator=(const Umem&) = delete;
};

xsk_socket* make_xsk(const std::string& ifname, Umem& umem, xsk_ring_cons* rx, xsk_ring_prod* tx,
                     bool load_program) {
  xsk_socket_config config{};
  config.rx_size = XSK_RING_CONS__DEFAULT_NUM_DESCS;
  config.tx_size = XSK_RING_PROD__DEFAULT_NUM_DESCS;
  config.bind_flags = XDP_COPY;
  config.xdp_flags = XDP_FLAGS_DRV_MODE;
  config.libxdp_flags = load_program ? 0 : XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  xsk_socket* xsk = nullptr;
  if (const int e = xsk_socket__create(&xsk, ifname.c_str(), 0, umem.umem, rx, tx, &config);
      e != 0) {
    errno = -e;
    fail("xsk_socket__create on " + ifname);
  }
  return xsk;
}

void xdp_receiver(const Options& o, Round& round) {
  enter_namespace(o.recv_ns);
  round.dst_mac = mac_of(o.recv_if);
  Umem umem;
  xsk_ring_cons rx{};
  xsk_socket* xsk = make_xsk(o.recv_if, umem, &rx, nullptr, true);
  uint32_t index = 0;
  if (xsk_ring_prod__reserve(&umem.fill, kFrames / 2, &index) != kFrames / 2) fail("fill ring");
  for (uint32_t i = 0; i < kFrames / 2; ++i)
    *xsk_ring_prod__fill_addr(&umem.fill, index + i) = uint64_t{i} * kFrameSize;
  xsk_ring_prod__submit(&umem.fill, kFrames / 2);
  wait_for_go(round);
  pollfd waiting{xsk_socket__fd(xsk), POLLIN, 0};
  while (!round.stop.load()) {
    uint32_t at = 0;
    const uint32_t n = xsk_ring_cons__peek(&rx, kBatch, &at);
    if (n == 0) {
      poll(&waiting, 1, 100);
      continue;
    }
    uint32_t fill_at = 0;
    while (xsk_ring_prod__reserve(&umem.fill, n, &fill_at) != n) {
    }
    for (uint32_t i = 0; i < n; ++i)
      *xsk_ring_prod__fill_addr(&umem.fill, fill_at + i) =
          xsk_ring_cons__rx_desc(&rx, at + i)->addr;
    xsk_ring_prod__submit(&umem.fill, n);
    xsk_ring_cons__release(&rx, n);
    round.delivered.fetch_add(n, std::memory_order_relaxed);
  }
  xsk_socket__delete(xsk);
}

// One Ethernet + IPv4 + UDP frame with kPayload bytes, as a WAN on AF_XDP would write it.
size_t build_frame(uint8_t* frame, const Options& o, const Round& round) {
  auto* eth = reinterpret_cast<ethhdr*>(frame);
  std::memcpy(eth->h_dest, round.dst_mac.data(), ETH_ALEN);
  std::memcpy(eth->h_source, round.src_mac.data(), ETH_ALEN);
  eth->h_proto = htons(ETH_P_IP);
  auto* ip = reinterpret_cast<iphdr*>(frame + sizeof(ethhdr));
  *ip = {};
  ip->version = 4;
  ip->ihl = 5;
  ip->ttl = 64;
  ip->protocol = IPPROTO_UDP;
  ip->tot_len = htons(static_cast<uint16_t>(sizeof(iphdr) + sizeof(udphdr) + kPayload));
  ip->saddr = o.src.s_addr;
  ip->daddr = o.dst.s_addr;
  uint32_t sum = 0;
  const auto* words = reinterpret_cast<const uint16_t*>(ip);
  for (size_t i = 0; i < sizeof(iphdr) / 2; ++i) sum += words[i];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  ip->check = static_cast<uint16_t>(~sum);
  auto* udp = reinterpret_cast<udphdr*>(frame + sizeof(ethhdr) + sizeof(iphdr));
  udp->source = htons(kPort);
  udp->dest = htons(kPort);
  udp->len = htons(static_cast<uint16_t>(sizeof(udphdr) + kPayload));
  udp->check = 0;
  std::memset(frame + sizeof(ethhdr) + sizeof(iphdr) + sizeof(udphdr), 0x5a, kPayload);
  return sizeof(ethhdr) + sizeof(iphdr) + sizeof(udphdr) + kPayload;
}

void xdp_sender(const Options& o, Round& round) {
  enter_namespace(o.send_ns);
  round.src_mac = mac_of(o.send_if);
  Umem umem;
  xsk_ring_prod tx{};
  xsk_socket* xsk = make_xsk(o.send_if, umem, nullptr, &tx, false);
  std::vector<uint64_t> free_frames;
  size_t length = 0;
  for (uint32_t i = 0; i < kFrames; ++i) {
    length = build_frame(static_cast<uint8_t*>(umem.area) + size_t{i} * kFrameSize, o, round);
    free_frames.push_back(uint64_t{i} * kFrameSize);
  }
  wait_for_go(round);
  while (!round.stop.load()) {
    uint32_t at = 0;
    const uint32_t done = xsk_ring_cons__peek(&umem.completion, kFrames, &at);
    for (uint32_t i = 0; i < done; ++i)
      free_frames.push_back(*xsk_ring_cons__comp_addr(&umem.completion, at + i));
    xsk_ring_cons__release(&umem.completion, done);
    const uint32_t want = std::min<uint32_t>(kBatch, static_cast<uint32_t>(free_frames.size()));
    if (want > 0) {
      const uint32_t got = xsk_ring_prod__reserve(&tx, want, &at);
      for (uint32_t i = 0; i < got; ++i) {
        xdp_desc* d = xsk_ring_prod__tx_desc(&tx, at + i);
        d->addr = free_frames.back();
        d->len = static_cast<uint32_t>(length);
        free_frames.pop_back();
      }
      xsk_ring_prod__submit(&tx, got);
      round.sent.fetch_add(got, std::memory_order_relaxed);
    }
    // Copy mode transmits only inside this call, at most 32 frames per call.
    sendto(xsk_socket__fd(xsk), nullptr, 0, MSG_DONTWAIT, nullptr, 0);
  }
  xsk_socket__delete(xsk);
}

struct Result {
  double cycles_per_packet = 0, delivered_share = 0, mpps = 0;
};

// Runs one side of a round in its own thread. A side that fails stops the round and
// counts as ready, so that the other side and run_round do not wait for it; the first
// failure is the round's error.
template <typename Side>
std::thread start_side(Side side, const Options& o, Round& round) {
  return std::thread([side, &o, &round] {
    try {
      side(o, round);
    } catch (const std::exception& e) {
      {
        const std::lock_guard lock(round.error_mutex);
        if (round.error.empty()) round.error = e.what();
      }
      round.stop = true;
      round.ready.fetch_add(1);
    }
  });
}

template <typename Receiver, typename Sender>
Result run_round(const Options& o, Receiver receiver, Sender sender) {
  Round round;
  std::thread receiving = start_side(receiver, o, round);
  // The AF_XDP sender needs the receiver's MAC, read once the receiver has started.
  while (round.ready.load() < 1) std::this_thread::yield();
  std::thread sending = start_side(sender, o, round);
  while (round.ready.load() < 2) std::this_thread::yield();
  round.go = true;
  usleep(300000);  // let the rings, buffers and caches fill before measuring
  const double cpu0 = process_cpu_seconds();
  const uint64_t delivered0 = round.delivered.load(), sent0 = round.sent.load();
  timespec start{}, end{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  usleep(static_cast<useconds_t>(o.seconds * 1e6));
  const double cpu1 = process_cpu_seconds();
  const uint64_t delivered1 = round.delivered.load(), sent1 = round.sent.load();
  clock_gettime(CLOCK_MONOTONIC, &end);
  round.stop = true;
  sending.join();
  receiving.join();
  if (!round.error.empty()) throw std::runtime_error(round.error);
  const double wall = static_cast<double>(end.tv_sec - start.tv_sec) +
                      static_cast<double>(end.tv_nsec - start.tv_nsec) * 1e-9;
  const auto delivered = static_cast<double>(delivered1 - delivered0);
  if (delivered == 0) throw std::runtime_error("nothing was delivered");
  return {(cpu1 - cpu0) * o.mhz * 1e6 / delivered,
          delivered / std::max(1.0, static_cast<double>(sent1 - sent0)), delivered / wall / 1e6};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: %s NS_SEND IF_SEND NS_RECV IF_RECV SRC_IP DST_IP [SECONDS] [ROUNDS] "
                 "[CPU_MHZ]\n",
                 argv[0]);
    return 2;
  }
  Options o;
  o.send_ns = argv[1];
  o.send_if = argv[2];
  o.recv_ns = argv[3];
  o.recv_if = argv[4];
  if (inet_pton(AF_INET, argv[5], &o.src) != 1 || inet_pton(AF_INET, argv[6], &o.dst) != 1) {
    std::fprintf(stderr, "SRC_IP and DST_IP must be IPv4 addresses\n");
    return 2;
  }
  if (argc > 7) o.seconds = std::atof(argv[7]);
  if (argc > 8) o.rounds = std::atoi(argv[8]);
  o.mhz = argc > 9 ? std::atof(argv[9]) : cpu_mhz();
  // libxdp reports on stderr how it attached its program (with or without its
  // dispatcher); either way serves here, and a real failure is an error below.
  libxdp_set_print(nullptr);
  libbpf_set_print(nullptr);
  std::vector<double> udp, xdp, udp_mpps, xdp_mpps, udp_share, xdp_share;
  try {
    for (int r = 0; r < o.rounds; ++r) {
      const Result u = run_round(o, udp_receiver, udp_sender);
      const Result x = run_round(o, xdp_receiver, xdp_sender);
      std::printf(
          "round %d  udp-gso %6.0f cycles/packet %5.3f Mpps (%.0f%% delivered)  "
          "af-xdp %6.0f cycles/packet %5.3f Mpps (%.0f%% delivered)\n",
          r + 1, u.cycles_per_packet, u.mpps, 100 * u.delivered_share, x.cycles_per_packet, x.mpps,
          100 * x.delivered_share);
      std::fflush(stdout);
      udp.push_back(u.cycles_per_packet);
      xdp.push_back(x.cycles_per_packet);
      udp_mpps.push_back(u.mpps);
      xdp_mpps.push_back(x.mpps);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "espgw_wan_transport_bench: %s\n", e.what());
    return 1;
  }
  std::printf("median of %d rounds, %.0f MHz, %zu-byte UDP payloads, both ends counted\n", o.rounds,
              o.mhz, kPayload);
  std::printf("udp-gso  %6.0f cycles/packet  %5.3f Mpps\n", median(udp), median(udp_mpps));
  std::printf("af-xdp   %6.0f cycles/packet  %5.3f Mpps\n", median(xdp), median(xdp_mpps));
  std::printf("ratio af-xdp / udp-gso (cycles per packet): %.2f\n", median(xdp) / median(udp));
  return 0;
}
