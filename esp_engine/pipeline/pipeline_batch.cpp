// A worker's batch: the crypto of every packet first; then, per channel touched, the shared
// and serial part once: one replay-window commit, one acquisition of the release lock to
// stage them all, one drain (outbound, one send for all the channels whose sinks share
// one: SharedSink, the WAN socket). Doing these once per batch and channel keeps workers
// that share an SA from trading its locks for every packet.
#include <array>
#include <functional>
#include <span>
#include <utility>

#include "esp/decap.h"
#include "esp/encap.h"
#include "pipeline/pipeline.h"
#include "util/serial_sections.h"

namespace espgw::pipeline {

namespace {

constexpr size_t kBatch = Pipeline::kWorkerBatch;

bool authenticated_drop(esp::DropReason reason) {
  // After these the sequence number is known to be genuine and will never be delivered,
  // so the reorder buffer must not wait for it. An ICV failure proves nothing (anyone
  // can forge the number), and a replay's number was already handled.
  return reason != esp::DropReason::icv_failure && reason != esp::DropReason::replayed &&
         reason != esp::DropReason::outside_window;
}

// One channel's packets in a batch.
struct ChannelGroup {
  OutboundChannel* outbound;
  InboundChannel* inbound;
  uint32_t packets;   // through crypto and kept: in the grouped packets, from `first`
  uint32_t finished;  // inbound: through crypto, kept or dropped
  uint32_t forged;    // inbound: of those, failed authentication
  uint32_t first;
};

// The channels a batch touches, and its packets grouped by channel in batch order. A
// batch can span as many channels as it has packets (64 SAs in an ECMP group), so this
// stays compact, a few cache lines in all: channels are found through a 64-entry table
// indexed by a hash of their address, and packets are grouped by a counting sort.
// No initializers: a worker makes one per batch, and only what it fills is read.
class ChannelGroups {
 public:
  ChannelGroups() { table_.fill(kNoGroup); }

  size_t size() const { return count_; }
  ChannelGroup& operator[](size_t g) { return groups_[g]; }
  const ChannelGroup& operator[](size_t g) const { return groups_[g]; }

  // The group of the channel at `key`, made on first sight.
  uint8_t group_for(const void* key, OutboundChannel* outbound, InboundChannel* inbound) {
    if (last_ != kNoGroup && keys_[last_] == key) return last_;
    // Fibonacci hashing of the address: its top bits index the table.
    size_t slot = (reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15ull) >> 58;
    static_assert(kTableSize == 64, "the shift above takes 6 bits");
    for (;; slot = (slot + 1) % kTableSize) {
      const uint8_t g = table_[slot];
      if (g == kNoGroup) break;
      if (keys_[g] == key) return last_ = g;
    }
    table_[slot] = static_cast<uint8_t>(count_);
    keys_[count_] = key;
    groups_[count_] = {outbound, inbound, 0, 0, 0, 0};
    return last_ = static_cast<uint8_t>(count_++);
  }
  // Packet `index` of the batch came through crypto, for group `g`.
  void keep(size_t index, uint8_t g) {
    group_of_[index] = g;
    ++groups_[g].packets;
  }
  // Packet `index` of the batch was dropped in crypto.
  void drop(size_t index) { group_of_[index] = kDropped; }

  // Puts each group's kept packets together, in batch order.
  void sort(Packet* const* batch, size_t count) {
    std::array<uint32_t, kBatch> cursor;
    for (uint32_t g = 0, next = 0; g < count_; ++g) {
      groups_[g].first = next;
      cursor[g] = next;
      next += groups_[g].packets;
    }
    for (size_t i = 0; i < count; ++i)
      if (group_of_[i] != kDropped) grouped_[cursor[group_of_[i]]++] = batch[i];
  }
  Packet* const* packets_of(const ChannelGroup& group) const {
    return grouped_.data() + group.first;
  }

 private:
  static constexpr uint8_t kDropped = 0xFF;
  static constexpr uint8_t kNoGroup = 0xFF;
  // Twice as many entries as a batch has packets: open addressing at most half full.
  static constexpr size_t kTableSize = 2 * kBatch;

  std::array<const void*, kBatch> keys_;
  std::array<ChannelGroup, kBatch> groups_;
  std::array<uint8_t, kBatch> group_of_;  // each packet's group, or kDropped
  std::array<Packet*, kBatch> grouped_;
  std::array<uint8_t, kTableSize> table_;
  size_t count_ = 0;
  uint8_t last_ = kNoGroup;  // consecutive packets of one channel skip the table
};

// Seals each outbound packet and opens each inbound one (authenticates and decrypts it),
// noting its channel's group. An inbound packet that fails goes back to the pool.
// Outbound AES-CBC packets are sealed as one burst, which fills ipsec-mb's multi-buffer
// lanes; every packet is sealed when this returns.
void seal_and_open(Packet* const* batch, size_t count, unsigned worker,
                   const std::function<void(unsigned)>& before_crypto, PacketPool& pool,
                   ChannelGroups& groups) {
  crypto::CbcHmacSealBurst burst;
  std::array<Packet*, kBatch> outbound;
  size_t outbound_count = 0;
  for (size_t i = 0; i < count; ++i) {
    Packet* packet = batch[i];
    if (before_crypto) before_crypto(worker);
    if (packet->direction == Direction::outbound) {
      OutboundChannel* channel = packet->outbound;
      packet->outbound = nullptr;
      esp::encap_seal_in_burst(channel->sa(), packet->buffer, packet->encap, burst);
      outbound[outbound_count++] = packet;
      groups.keep(i, groups.group_for(channel, channel, nullptr));
      continue;
    }
    InboundChannel* channel = packet->inbound;
    packet->inbound = nullptr;
    const uint8_t g = groups.group_for(channel, nullptr, channel);
    ++groups[g].finished;
    if (esp::decap_open(packet->decap, packet->buffer) != esp::DropReason::none) {
      pool.release(packet);  // counted on the SA; no tombstone: the number is unproven
      ++groups[g].forged;
      groups.drop(i);
      continue;
    }
    groups.keep(i, g);
  }
  burst.flush();
  for (size_t i = 0; i < outbound_count; ++i)
    esp::encap_seal_finish(outbound[i]->buffer, outbound[i]->encap);
}

// Outbound channels whose sinks share one (the WAN socket): the packets each goes to send
// directly are gathered while the batch is staged, then sent with one call per shared sink.
class SharedSinkSends {
 public:
  // Stages one channel's packets; those that continue its release point are kept here.
  void stage(OrderedRelease& release, PacketSink& sink, SharedSink& shared,
             std::span<const OrderedRelease::Staged> staged, PacketPool& pool) {
    const std::span out(packets_.data() + packet_count_, staged.size());
    bool held = false;  // outbound numbers are dense: nothing waits for a timer
    if (const size_t direct = release.stage_or_take(staged, 0, out, sink, pool, held)) {
      taken_[count_] = {&sink, out.first(direct)};
      release_[count_] = &release;
      shared_[count_++] = &shared;
      packet_count_ += direct;
    }
  }

  // One call per shared sink, then each channel's delivery ends, delivering what other
  // threads staged meanwhile. Usually every channel has the same one (the UDP socket; raw
  // ESP SAs have another), and the loop below runs once, moving nothing.
  void send(PacketPool& pool) {
    for (size_t done = 0; done < count_;) {
      SharedSink* const shared = shared_[done];
      size_t end = done;
      for (size_t i = done; i < count_; ++i) {
        if (shared_[i] != shared) continue;
        if (i != end) {
          std::swap(taken_[i], taken_[end]);
          std::swap(release_[i], release_[end]);
          std::swap(shared_[i], shared_[end]);
        }
        ++end;
      }
      {
        // Each channel's delivery stays claimed through the call: serial per SA.
        serial_sections::Timer timer(serial_sections::Section::delivery, shared);
        shared->deliver_together(std::span(taken_.data() + done, end - done));
      }
      // Back to the pool before the deliveries end, as deliver_from does: with one shared
      // sink (the usual case) in one call, not one per SA.
      if (done == 0 && end == count_)
        pool.release(std::span<Packet* const>(packets_.data(), packet_count_));
      else
        for (size_t i = done; i < end; ++i) pool.release(taken_[i].packets);
      for (; done < end; ++done)
        release_[done]->finish_delivery(taken_[done].packets.size(), *taken_[done].channel_sink,
                                        pool);
    }
  }

 private:
  std::array<ChannelDelivery, kBatch> taken_;
  std::array<OrderedRelease*, kBatch> release_;
  std::array<SharedSink*, kBatch> shared_;
  std::array<Packet*, kBatch> packets_;
  size_t count_ = 0;
  size_t packet_count_ = 0;
};

// Outbound packets are released by their sequence number, dense per SA: delivered through
// the channel's own sink, or gathered in `sends` when it shares one.
void release_outbound(const ChannelGroup& group, Packet* const* packets, SharedSinkSends& sends,
                      PacketPool& pool) {
  std::array<OrderedRelease::Staged, kBatch> staged;
  for (uint32_t j = 0; j < group.packets; ++j) staged[j] = {packets[j]->encap.sequence, packets[j]};
  OrderedRelease& release = group.outbound->release();
  PacketSink& sink = group.outbound->sink();
  const std::span batch_of_channel(staged.data(), group.packets);
  if (SharedSink* const shared = group.outbound->shared_sink())
    sends.stage(release, sink, *shared, batch_of_channel, pool);
  else
    release.stage_and_drain(batch_of_channel, 0, sink, pool);
}

// Inbound packets whose ICV verified: finished together, with one acquisition of the SA's
// replay-window lock, then staged in the reorder buffer. True if packets wait behind a gap.
bool release_inbound(const ChannelGroup& group, Packet* const* packets, PacketPool& pool) {
  std::array<esp::FinishItem, kBatch> opened;
  for (uint32_t j = 0; j < group.packets; ++j)
    opened[j] = {&packets[j]->decap, &packets[j]->buffer, esp::DropReason::none, 0};
  if (group.packets != 0) esp::decap_finish_each(std::span(opened.data(), group.packets));
  std::array<OrderedRelease::Staged, kBatch> staged;
  size_t staged_count = 0;
  for (uint32_t j = 0; j < group.packets; ++j) {
    Packet* packet = packets[j];
    const uint64_t sequence = packet->decap.sequence;
    if (opened[j].reason == esp::DropReason::none) {
      staged[staged_count++] = {sequence, packet};
    } else {
      pool.release(packet);  // the drop is already counted on the SA
      if (authenticated_drop(opened[j].reason)) staged[staged_count++] = {sequence, nullptr};
    }
  }
  // Only once staged are these packets where the reorder buffer sees them: until then
  // they count as in crypto, so that a gap they fill is not given up on meanwhile.
  return group.inbound->release().stage_and_drain(std::span(staged.data(), staged_count),
                                                  group.finished, group.inbound->sink(), pool,
                                                  group.forged);
}

}  // namespace

void Pipeline::process_batch(Packet* const* batch, size_t count, unsigned worker) {
  static_assert(OrderedRelease::kInOrderMax >= kWorkerBatch, "a batch's channel group in order");
  ChannelGroups groups;
  seal_and_open(batch, count, worker, config_.before_crypto, pool_, groups);
  groups.sort(batch, count);
  SharedSinkSends sends;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ChannelGroup& group = groups[g];
    if (group.outbound)
      release_outbound(group, groups.packets_of(group), sends, pool_);
    else if (release_inbound(group, groups.packets_of(group), pool_))
      schedule_gap_timer(*group.inbound);
  }
  sends.send(pool_);
}

}  // namespace espgw::pipeline
