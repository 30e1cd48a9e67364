// UDP traffic over many destinations at once, for the scaling harness's tunnels load
// (bench/scaling_bench.sh): iperf3 talks to one address, but a tunnel per remote host
// needs traffic to all of them together.
//
//   espgw_udp_spray send FIRST_ADDRESS COUNT PORT SECONDS [PAYLOAD_BYTES]
//     sends datagrams of PAYLOAD_BYTES (default 1400) to COUNT consecutive IPv4
//     addresses from FIRST_ADDRESS, round robin, as fast as the socket takes them
//   espgw_udp_spray receive PORT SECONDS
//     counts what arrives on PORT (any local address) from the first datagram on
//
// Each prints one JSON object: packets, bytes, seconds and Gbit/s of payload.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr unsigned kBatch = 64;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void report(const char* role, uint64_t packets, uint64_t bytes, double seconds) {
  std::printf(
      "{\"role\": \"%s\", \"packets\": %llu, \"bytes\": %llu, \"seconds\": %.3f, \"gbps\": "
      "%.4f}\n",
      role, static_cast<unsigned long long>(packets), static_cast<unsigned long long>(bytes),
      seconds, seconds > 0 ? bytes * 8 / seconds / 1e9 : 0.0);
}

int send(const char* first, unsigned count, uint16_t port, double seconds, size_t payload) {
  in_addr base{};
  if (inet_pton(AF_INET, first, &base) != 1 || count == 0) return 2;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 1;
  std::vector<sockaddr_in> destinations(count);
  for (unsigned i = 0; i < count; ++i) {
    destinations[i].sin_family = AF_INET;
    destinations[i].sin_port = htons(port);
    destinations[i].sin_addr.s_addr = htonl(ntohl(base.s_addr) + i);
  }
  std::vector<char> data(payload, 'x');
  iovec iov{data.data(), data.size()};
  mmsghdr messages[kBatch];
  uint64_t packets = 0, bytes = 0;
  unsigned next = 0;
  const auto start = Clock::now();
  while (since(start) < seconds) {
    for (unsigned i = 0; i < kBatch; ++i) {
      std::memset(&messages[i], 0, sizeof messages[i]);
      messages[i].msg_hdr.msg_name = &destinations[next];
      messages[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
      messages[i].msg_hdr.msg_iov = &iov;
      messages[i].msg_hdr.msg_iovlen = 1;
      next = next + 1 == count ? 0 : next + 1;
    }
    const int sent = sendmmsg(fd, messages, kBatch, 0);
    if (sent > 0) {
      packets += static_cast<uint64_t>(sent);
      bytes += static_cast<uint64_t>(sent) * payload;
    }
  }
  report("send", packets, bytes, since(start));
  close(fd);
  return 0;
}

int receive(uint16_t port, double seconds) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 1;
  int buffer = 16 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return 1;
  timeval timeout{0, 200'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  static char storage[kBatch][2048];
  iovec iov[kBatch];
  mmsghdr messages[kBatch];
  uint64_t packets = 0, bytes = 0;
  Clock::time_point first{};
  const auto give_up = Clock::now() + std::chrono::duration<double>(seconds + 30);
  while (Clock::now() < give_up) {
    if (packets && since(first) >= seconds) break;
    for (unsigned i = 0; i < kBatch; ++i) {
      iov[i] = {storage[i], sizeof storage[i]};
      std::memset(&messages[i], 0, sizeof messages[i]);
      messages[i].msg_hdr.msg_iov = &iov[i];
      messages[i].msg_hdr.msg_iovlen = 1;
    }
    const int got = recvmmsg(fd, messages, kBatch, MSG_WAITFORONE, nullptr);
    if (got <= 0) continue;
    if (!packets) first = Clock::now();
    packets += static_cast<uint64_t>(got);
    for (int i = 0; i < got; ++i) bytes += messages[i].msg_len;
  }
  report("receive", packets, bytes, packets ? since(first) : 0);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "send" && (argc == 6 || argc == 7))
    return send(argv[2], static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)),
                static_cast<uint16_t>(std::strtoul(argv[4], nullptr, 10)), std::atof(argv[5]),
                argc == 7 ? std::strtoul(argv[6], nullptr, 10) : 1400);
  if (mode == "receive" && argc == 4)
    return receive(static_cast<uint16_t>(std::strtoul(argv[2], nullptr, 10)), std::atof(argv[3]));
  std::fprintf(stderr,
               "usage: %s send FIRST_ADDRESS COUNT PORT SECONDS [PAYLOAD_BYTES]\n"
               "       %s receive PORT SECONDS\n",
               argv[0], argv[0]);
  return 2;
}
