// Inbound rekeys: the packets of a new SA never overtake those of the SA it replaces.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "esp/decap.h"
#include "esp/encap.h"
#include "packet/flow_key.h"
#include "pipeline/flow_hash.h"
#include "pipeline/pipeline.h"
#include "pipeline/sa_group.h"
#include "support/sequential_esp.h"
#include "unit/pipeline_test_support.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::pipeline {
namespace {

using crypto::AeadAlgorithm;

// A peer rekeys nine times: each flow's packets come on one SA, then on its successor.
// With workers, a batch of the new SA's packets could be decrypted and delivered while
// the old SA's last batch is still in crypto. Each new channel names its predecessor, and
// the reader's first packet of it waits for the old one's packets in flight. With
// `slow_sink`, deliveries also take random time (a busy TUN device), which widens the
// window in which a worker is still handing an old SA's packets over.
void run_inbound_rekeys(bool slow_sink) {
  constexpr uint32_t kFlows = 16, kSas = 10, kPacketsPerSa = 480;
  PipelineConfig config;
  config.workers = 3;
  config.pool_packets = 2048;
  config.reorder_capacity = 8192;
  config.reorder_hold = std::chrono::seconds(30);  // the wire is lossless: never a gap
  config.before_crypto = random_delay;
  config.fence_limit = std::chrono::seconds(60);  // the fence alone must keep the order
  OrderSink lan(OrderSink::kStream, OrderSink::kCounter);
  class RandomlySlowSink final : public PacketSink {
   public:
    explicit RandomlySlowSink(PacketSink& next) : next_(next) {}
    void deliver(std::span<Packet* const> packets) override {
      thread_local std::mt19937 rng(std::random_device{}());
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
      next_.deliver(packets);
    }

   private:
    PacketSink& next_;
  } slow(lan);
  PacketSink& sink = slow_sink ? static_cast<PacketSink&>(slow) : lan;
  std::vector<std::vector<uint8_t>> wire;
  std::vector<uint32_t> counter(kFlows, 0);
  std::vector<esp::SaConfig> configs;
  for (uint32_t sa = 0; sa < kSas; ++sa) {
    configs.push_back(
        test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x600 + sa));
    esp::OutboundSa sender(configs.back(), crypto::ipsec_mb_backend());
    for (uint32_t i = 0; i < kPacketsPerSa; ++i) {
      const uint32_t flow = i % kFlows;
      esp::PacketBuffer buffer;
      buffer.assign(tagged_packet(flow, ++counter[flow]));
      ASSERT_EQ(test::encapsulate(sender, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
      wire.emplace_back(buffer.bytes().begin(), buffer.bytes().end());
    }
  }
  uint64_t fences = 0, fence_timeouts = 0;
  {
    Pipeline pipeline(config);
    std::vector<std::shared_ptr<InboundChannel>> channels;
    for (const auto& sa_config : configs) {
      // Each SA replaces the one before it, as after an ordinary rekey.
      const auto previous = channels.empty() ? std::span<std::shared_ptr<InboundChannel>>()
                                             : std::span(channels).last(1);
      channels.push_back(pipeline.add_inbound(
          std::make_shared<esp::InboundSa>(sa_config, crypto::ipsec_mb_backend()), sink, previous));
    }
    std::thread reader([&] {
      pipeline.register_reader();
      for (size_t i = 0; i < wire.size(); ++i) {
        Packet* p = acquire_blocking(pipeline);
        p->buffer.assign(wire[i]);
        EXPECT_EQ(pipeline.submit_inbound(p), esp::DropReason::none);
        if (i % 16 == 15) pipeline.end_read_batch();
      }
      pipeline.end_read_batch();
    });
    reader.join();
    pipeline.wait_idle();
    fences = pipeline.fences();
    fence_timeouts = pipeline.fence_timeouts();
  }
  EXPECT_EQ(fences, kSas - 1) << "one wait per rekeyed SA, at its first packet";
  EXPECT_EQ(fence_timeouts, 0u);
  const auto order = lan.order();
  ASSERT_EQ(order.size(), wire.size());
  std::vector<uint32_t> last(kFlows, 0);
  size_t overtaken = 0;
  for (const auto& [flow, n] : order) {
    ASSERT_LT(flow, kFlows);
    if (n <= last[flow]) ++overtaken;
    last[flow] = std::max(last[flow], n);
  }
  EXPECT_EQ(overtaken, 0u) << "packets overtaken by a later packet of their flow";
}

// The old SA's last packets are out of crypto (staged) but a worker is still handing them
// to the sink when the new SA's first packet comes: the fence waits for that delivery to
// end, not only for the crypto: waiting for the crypto alone would let the new SA's
// packets overtake them.

TEST(PipelineConcurrent, InboundPacketsOfARekeyedSaDoNotOvertakeTheOldOnes) {
  run_inbound_rekeys(false);
}

TEST(PipelineConcurrent, InboundPacketsOfARekeyedSaDoNotOvertakeTheOldOnesDeliveredSlowly) {
  run_inbound_rekeys(true);
}

using Wire = std::vector<std::vector<uint8_t>>;

// Passes deliveries on to `next`; the first for which `slow_when` holds takes 150 ms (a
// busy TUN device). `entered` tells the test that it began.
class SlowOnce final : public PacketSink {
 public:
  SlowOnce(PacketSink& next, std::function<bool(std::span<Packet* const>)> slow_when)
      : next_(next), slow_when_(std::move(slow_when)) {}
  void deliver(std::span<Packet* const> packets) override {
    if (slow_when_(packets) && !entered.exchange(true))
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    next_.deliver(packets);
  }
  std::atomic<bool> entered{false};

 private:
  PacketSink& next_;
  const std::function<bool(std::span<Packet* const>)> slow_when_;
};

// Seals packets `first`..`last` of `flow` (tagged_packet) with `sender`, in that order.
Wire seal_flow(esp::OutboundSa& sender, uint32_t flow, uint32_t first, uint32_t last) {
  Wire wire;
  for (uint32_t n = first; n <= last; ++n) {
    esp::PacketBuffer buffer;
    buffer.assign(tagged_packet(flow, n));
    EXPECT_EQ(test::encapsulate(sender, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
    wire.emplace_back(buffer.bytes().begin(), buffer.bytes().end());
  }
  return wire;
}

// A rekey on the way in, step by step: two workers, an old SA whose LAN deliveries go
// through `old_sink` (which slows some down) and the new SA that replaces it, delivering
// to `lan`. `script` is the WAN reader: it gets a function that submits packets from the
// wire and completes the reader's batch. Waits until `packets` reached `lan` and returns
// the pipeline's fences; a fence that timed out fails the test.
uint64_t run_rekey_script(
    PacketSink& old_sink, OrderSink& lan, const esp::SaConfig& old_config,
    const esp::SaConfig& new_config, size_t packets,
    const std::function<void(const std::function<void(const Wire&)>&)>& script) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 256;
  config.fence_limit = std::chrono::seconds(10);
  Pipeline pipeline(config);
  auto old_channel = pipeline.add_inbound(
      std::make_shared<esp::InboundSa>(old_config, crypto::ipsec_mb_backend()), old_sink);
  pipeline.add_inbound(std::make_shared<esp::InboundSa>(new_config, crypto::ipsec_mb_backend()),
                       lan, std::span(&old_channel, 1));
  std::thread reader([&] {
    pipeline.register_reader();
    script([&](const Wire& wire) {
      for (const auto& bytes : wire) {
        Packet* p = acquire_blocking(pipeline);
        p->buffer.assign(bytes);
        EXPECT_EQ(pipeline.submit_inbound(p), esp::DropReason::none);
      }
      pipeline.end_read_batch();
    });
  });
  reader.join();
  EXPECT_TRUE(wait_for([&] { return lan.order().size() == packets; }, std::chrono::seconds(10)));
  pipeline.wait_idle();
  EXPECT_EQ(pipeline.fence_timeouts(), 0u);
  return pipeline.fences();
}

TEST(PipelineConcurrent, ARekeyedSaWaitsForTheOldSasDeliveryInProgress) {
  constexpr uint32_t kPerSa = 8;
  OrderSink lan(OrderSink::kStream, OrderSink::kCounter);
  // The old SA's sink: its first delivery takes a while (a slow TUN write).
  SlowOnce slow(lan, [](std::span<Packet* const>) { return true; });
  const auto old_config =
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x6A0);
  const auto new_config =
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x6A1);
  esp::OutboundSa old_sender(old_config, crypto::ipsec_mb_backend());
  esp::OutboundSa new_sender(new_config, crypto::ipsec_mb_backend());
  // One flow, moving to the new SA.
  const Wire old_wire = seal_flow(old_sender, 0, 1, kPerSa);
  const Wire new_wire = seal_flow(new_sender, 0, kPerSa + 1, 2 * kPerSa);
  const uint64_t fences =
      run_rekey_script(slow, lan, old_config, new_config, 2 * kPerSa, [&](const auto& submit) {
        submit(old_wire);
        // A worker now delivers the old SA's packets, slowly.
        ASSERT_TRUE(wait_for([&] { return slow.entered.load(); }, std::chrono::seconds(10)));
        submit(new_wire);
      });
  EXPECT_EQ(fences, 1u);
  const auto order = lan.order();
  for (size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(order[i].second, i + 1) << "packet " << i << " of the flow out of order";
}

// A peer whose senders switch SA one after another (several TUN readers, a kernel's CPUs):
// flow A moves to the new SA, then flow B still comes on the old one, then moves too. The
// old SA's delivery of flow B is slow (a busy TUN device), so flow B's first packets on
// the new SA would overtake it: the first wait, at the new SA's first packet, was before
// those old-SA packets came. The packet after them waits again.
TEST(PipelineConcurrent, ARekeyedSaWaitsAgainForOldSaPacketsThatCameAfterItsFirst) {
  constexpr uint32_t kFlowA = 0, kFlowB = 1;
  OrderSink lan(OrderSink::kStream, OrderSink::kCounter);
  // The old SA's sink: its first delivery of flow B takes a while.
  SlowOnce slow(lan, [](std::span<Packet* const> packets) {
    return std::any_of(packets.begin(), packets.end(), [](const Packet* packet) {
      return load_be32(packet->buffer.data() + OrderSink::kStream) == kFlowB;
    });
  });
  const auto old_config =
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x6B0);
  const auto new_config =
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x6B1);
  esp::OutboundSa old_sender(old_config, crypto::ipsec_mb_backend());
  esp::OutboundSa new_sender(new_config, crypto::ipsec_mb_backend());
  // The wire, in the order the peer sent it.
  const Wire old_a = seal_flow(old_sender, kFlowA, 1, 8);
  const Wire new_a = seal_flow(new_sender, kFlowA, 9, 12);
  const Wire old_b = seal_flow(old_sender, kFlowB, 1, 4);
  const Wire new_b = seal_flow(new_sender, kFlowB, 5, 8);
  const uint64_t fences =
      run_rekey_script(slow, lan, old_config, new_config, 20, [&](const auto& submit) {
        submit(old_a);
        submit(new_a);  // the first wait
        submit(old_b);
        // A worker now delivers flow B's old-SA packets, slowly.
        ASSERT_TRUE(wait_for([&] { return slow.entered.load(); }, std::chrono::seconds(10)));
        submit(new_b);  // waits again
      });
  EXPECT_EQ(fences, 2u) << "one wait at the new SA's first packet, one after flow B's";
  std::array<uint32_t, 2> last{};
  for (const auto& [flow, n] : lan.order()) {
    ASSERT_LT(flow, 2u);
    EXPECT_EQ(n, last[flow] + 1) << "flow " << flow << " out of order";
    last[flow] = n;
  }
  EXPECT_EQ(last, (std::array<uint32_t, 2>{12, 8}));
}

}  // namespace
}  // namespace espgw::pipeline
