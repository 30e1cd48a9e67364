// PeerSink::move_to (update-sa in place) while senders read the peer: every read sees one
// whole endpoint, old or new, never a mix; what would need another socket is refused.
// Run under TSan with the other concurrent tests.
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <thread>

#include "daemon/gateway_counters.h"
#include "daemon/outbound_path.h"
#include "io/wan_socket.h"

namespace espgw::daemon {
namespace {

esp::IpAddress ip(const char* text) {
  return *esp::IpAddress::parse(text);
}

// The k-th endpoint: 127.0.0.(10 + k), UDP port 5000 + k.
esp::IpAddress address_of(unsigned k) {
  return ip(("127.0.0." + std::to_string(10 + k)).c_str());
}

TEST(PeerSinkConcurrent, SendersSeeWholeEndpointsWhileTheSaMoves) {
  io::WanSocket socket(io::WanKind::udp, ip("127.0.0.1"), 0);
  GatewayCounters counters;
  WanBatchSender sender(socket, nullptr, counters);
  esp::SaConfig config;
  config.tunnel_source = ip("127.0.0.1");
  config.tunnel_destination = address_of(0);
  config.udp_encapsulation = esp::UdpEncapsulation{4500, 5000};
  PeerSink sink(sender, config);

  std::atomic<bool> done{false};
  std::atomic<size_t> mixed{0}, reads{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_relaxed)) {
      const PeerSink::Endpoint& endpoint = sink.endpoint();
      const auto* peer = reinterpret_cast<const sockaddr_in*>(&endpoint.peer);
      const unsigned k = ntohs(peer->sin_port) - 5000u;
      const unsigned last_octet = ntohl(peer->sin_addr.s_addr) & 0xFF;
      if (last_octet != 10 + k || endpoint.udp->destination_port != 5000 + k ||
          endpoint.destination != address_of(k))
        mixed.fetch_add(1);
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (unsigned k = 1; k <= PeerSink::kMaxMoves; ++k) {
    ASSERT_TRUE(sink.move_to(address_of(k), esp::UdpEncapsulation{4500, uint16_t(5000 + k)}));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_FALSE(sink.move_to(address_of(1), esp::UdpEncapsulation{4500, 5001}))
      << "beyond kMaxMoves charon rekeys instead";
  done = true;
  reader.join();
  EXPECT_EQ(mixed.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_EQ(sink.endpoint().udp->destination_port, 5000 + PeerSink::kMaxMoves);
}

TEST(PeerSinkConcurrent, AMoveThatNeedsAnotherSocketIsRefused) {
  io::WanSocket socket(io::WanKind::udp, ip("127.0.0.1"), 0);
  GatewayCounters counters;
  WanBatchSender sender(socket, nullptr, counters);
  esp::SaConfig config;
  config.tunnel_source = ip("127.0.0.1");
  config.tunnel_destination = ip("127.0.0.2");
  config.udp_encapsulation = esp::UdpEncapsulation{4500, 4500};
  PeerSink sink(sender, config);
  EXPECT_FALSE(sink.move_to(ip("::1"), esp::UdpEncapsulation{4500, 4500})) << "other family";
  EXPECT_FALSE(sink.move_to(ip("127.0.0.3"), std::nullopt)) << "ESP in UDP to raw ESP";
  EXPECT_EQ(sink.endpoint().destination, ip("127.0.0.2"));
}

}  // namespace
}  // namespace espgw::daemon
