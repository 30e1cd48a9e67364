// The lock-free packet pool: every packet is owned by at most one thread at a time, none
// is lost, and the most recently released packet is handed out first.
#include "pipeline/packet_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <span>
#include <thread>
#include <vector>

namespace espgw::pipeline {
namespace {

TEST(PacketPool, HandsOutEveryPacketOnceThenRunsDry) {
  PacketPool pool(8, 64);
  std::vector<Packet*> taken;
  while (Packet* p = pool.acquire()) taken.push_back(p);
  EXPECT_EQ(taken.size(), 8u);
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(std::unique(taken.begin(), taken.end()), taken.end());
  EXPECT_EQ(pool.count_free(), 0u);
  for (Packet* p : taken) pool.release(p);
  EXPECT_EQ(pool.count_free(), 8u);
}

TEST(PacketPool, LastReleasedIsFirstAcquired) {
  PacketPool pool(4, 64);
  Packet* a = pool.acquire();
  Packet* b = pool.acquire();
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.acquire(), b);
  EXPECT_EQ(pool.acquire(), a);
}

TEST(PacketPool, ABatchReleaseIsLikeReleasingEachInTurn) {
  PacketPool pool(6, 64);
  Packet* kept = pool.acquire();
  std::vector<Packet*> batch;
  for (int i = 0; i < 4; ++i) batch.push_back(pool.acquire());
  pool.release(kept);
  pool.release(std::span<Packet* const>(batch));
  EXPECT_EQ(pool.count_free(), 6u);
  // Last released first: the batch from its end, then what was free before it.
  for (auto it = batch.rbegin(); it != batch.rend(); ++it) EXPECT_EQ(pool.acquire(), *it);
  EXPECT_EQ(pool.acquire(), kept);
  pool.release(std::span<Packet* const>{});  // an empty batch changes nothing
  EXPECT_NE(pool.acquire(), nullptr);
  EXPECT_EQ(pool.acquire(), nullptr);
}

TEST(PacketPool, ABatchAcquireTakesTheTopInOrder) {
  PacketPool pool(5, 64);
  std::vector<Packet*> released;
  for (int i = 0; i < 5; ++i) released.push_back(pool.acquire());
  for (Packet* p : released) pool.release(p);  // the last one is now on top
  std::array<Packet*, 3> out{};
  ASSERT_EQ(pool.acquire(std::span<Packet*>(out)), 3u);
  EXPECT_EQ(out[0], released[4]);
  EXPECT_EQ(out[1], released[3]);
  EXPECT_EQ(out[2], released[2]);
  // Fewer left than asked for: what there is; then nothing.
  ASSERT_EQ(pool.acquire(std::span<Packet*>(out)), 2u);
  EXPECT_EQ(out[0], released[1]);
  EXPECT_EQ(out[1], released[0]);
  EXPECT_EQ(pool.acquire(std::span<Packet*>(out)), 0u);
  EXPECT_EQ(pool.count_free(), 0u);
}

// 512 packets: the smallest pool with thread caches (4 packets each, 1/128 of the pool).
TEST(PacketPool, AThreadCacheHandsBackWhatThisThreadReleasedFirst) {
  PacketPool pool(512, 64);
  pool.use_thread_cache();
  Packet* a = pool.acquire();  // fills half the cache from the stack's top
  Packet* b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  pool.release(b);
  pool.release(a);
  EXPECT_EQ(pool.acquire(), a);
  EXPECT_EQ(pool.acquire(), b);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.count_free(), 512u) << "cached packets count as free";
}

TEST(PacketPool, AThreadCacheTakesWhatFitsAndTheStackTheRest) {
  PacketPool pool(512, 64);
  pool.use_thread_cache();
  std::vector<Packet*> taken;
  for (int i = 0; i < 10; ++i) taken.push_back(pool.acquire());
  pool.release(std::span<Packet* const>(taken));  // 4 fit in the cache
  EXPECT_EQ(pool.count_free(), 512u);
  // The end of the batch comes back first, from the cache; then the rest, from the stack.
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) EXPECT_EQ(pool.acquire(), *it);
  for (Packet* p : taken) pool.release(p);  // singly: 4 cached, 6 pushed
  EXPECT_EQ(pool.count_free(), 512u);
  std::vector<Packet*> all;
  while (Packet* p = pool.acquire()) all.push_back(p);
  EXPECT_EQ(all.size(), 512u);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
}

// A reader running to completion holds a batch of 32 packets and as many again (their
// inbound copies, or a second batch): with the gateway's default pool, all of them come
// back to it from its own cache, not from the stack, where another thread's packets
// (their lines in that thread's CPU cache) would be mixed in.
TEST(PacketPool, AReadersTwoBatchesStayInItsOwnCache) {
  constexpr size_t kHeld = 64;
  PacketPool pool(8192, 64);
  Packet* other = pool.acquire();  // this thread has no cache: another thread's packet
  ASSERT_NE(other, nullptr);
  std::vector<Packet*> first;
  std::thread([&] {
    pool.use_thread_cache();
    for (size_t i = 0; i < kHeld; ++i) first.push_back(pool.acquire());
    pool.release(std::span<Packet* const>(first));
    // The other thread frees its packet meanwhile: it goes onto the stack's top.
    std::thread([&] { pool.release(other); }).join();
    std::vector<Packet*> second;
    for (size_t i = 0; i < kHeld; ++i) second.push_back(pool.acquire());
    std::sort(first.begin(), first.end());
    std::sort(second.begin(), second.end());
    EXPECT_EQ(first, second) << "some packets came from the shared stack";
    pool.release(std::span<Packet* const>(second));
  }).join();
  EXPECT_EQ(pool.count_free(), 8192u);
}

TEST(PacketPool, SmallPoolsHaveNoThreadCaches) {
  PacketPool pool(8, 64);
  pool.use_thread_cache();
  std::vector<Packet*> taken;
  while (Packet* p = pool.acquire()) taken.push_back(p);
  EXPECT_EQ(taken.size(), 8u);
  pool.release(taken.back());
  EXPECT_EQ(pool.count_free(), 1u);
}

// Threads with caches and without, single and batch acquisitions and releases: every
// packet has at most one owner at a time and all are back at the end.
void expect_no_packet_held_twice_or_lost(size_t packets, bool caches) {
  const size_t pool_size = packets;
  constexpr int kThreads = 4, kRounds = 100000;
  PacketPool pool(pool_size, 64);
  std::vector<std::atomic<int>> owners(pool_size);
  std::atomic<bool> double_owner{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (caches && t % 2 == 0) pool.use_thread_cache();
      std::mt19937 rng(t);
      std::vector<Packet*> held;
      for (int i = 0; i < kRounds; ++i) {
        if (held.empty() || (held.size() < 8 && rng() % 2)) {
          if (rng() % 3 == 0) {  // a reader's batch of free packets at once
            std::array<Packet*, 4> batch{};
            const size_t got = pool.acquire(std::span<Packet*>(batch));
            for (size_t j = 0; j < got; ++j) {
              if (owners[batch[j]->pool_index].fetch_add(1) != 0) double_owner = true;
              held.push_back(batch[j]);
            }
          } else if (Packet* p = pool.acquire()) {
            if (owners[p->pool_index].fetch_add(1) != 0) double_owner = true;
            held.push_back(p);
          }
        } else if (held.size() >= 3 && rng() % 4 == 0) {  // a delivered batch at once
          for (Packet* p : held) owners[p->pool_index].fetch_sub(1);
          pool.release(std::span<Packet* const>(held));
          held.clear();
        } else {
          Packet* p = held.back();
          held.pop_back();
          owners[p->pool_index].fetch_sub(1);
          pool.release(p);
        }
      }
      for (Packet* p : held) {
        owners[p->pool_index].fetch_sub(1);
        pool.release(p);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(double_owner.load());
  EXPECT_EQ(pool.count_free(), pool_size);
  if (caches) return;  // what stopped threads cached stays in their caches
  std::vector<Packet*> all;
  while (Packet* p = pool.acquire()) all.push_back(p);
  EXPECT_EQ(all.size(), pool_size) << "every packet is back on the free list";
}

TEST(PacketPoolConcurrent, NoPacketIsHeldTwiceOrLost) {
  expect_no_packet_held_twice_or_lost(64, false);
}

TEST(PacketPoolConcurrent, NoPacketIsHeldTwiceOrLostWithThreadCaches) {
  expect_no_packet_held_twice_or_lost(1024, true);
}

}  // namespace
}  // namespace espgw::pipeline
