// Anti-replay window: unit cases, ESN inference (RFC 4303 Appendix A), and property tests
// against a plain reference model (a set of every accepted number plus the highest one).
#include "esp/replay_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace espgw::esp {
namespace {

using Verdict = ReplayWindow::Verdict;

// check + commit, as a receiver does around a successful ICV check.
Verdict receive(ReplayWindow& w, uint64_t sequence) {
  auto c = w.check(static_cast<uint32_t>(sequence));
  if (c.verdict != Verdict::accept) return c.verdict;
  EXPECT_EQ(c.sequence, sequence);
  return w.commit(c.sequence);
}

TEST(ReplayWindow, AcceptsInOrderAndRejectsDuplicates) {
  ReplayWindow w(64, false);
  for (uint64_t s = 1; s <= 500; ++s) EXPECT_EQ(receive(w, s), Verdict::accept);
  EXPECT_EQ(receive(w, 500), Verdict::replayed);
  EXPECT_EQ(receive(w, 499), Verdict::replayed);
  EXPECT_EQ(w.highest(), 500u);
}

TEST(ReplayWindow, SequenceZeroIsNeverValid) {
  ReplayWindow w(64, false);
  EXPECT_EQ(receive(w, 0), Verdict::outside_window);
  ReplayWindow e(64, true);
  EXPECT_EQ(e.commit(0), Verdict::outside_window);
}

TEST(ReplayWindow, WindowEdges) {
  ReplayWindow w(128, false);
  EXPECT_EQ(receive(w, 1000), Verdict::accept);
  EXPECT_EQ(receive(w, 1000 - 127), Verdict::accept);          // last slot inside
  EXPECT_EQ(receive(w, 1000 - 128), Verdict::outside_window);  // first slot outside
  EXPECT_EQ(receive(w, 1000 - 127), Verdict::replayed);
}

TEST(ReplayWindow, SizeRoundsUpToBlocks) {
  EXPECT_EQ(ReplayWindow(1, false).size(), 64u);
  EXPECT_EQ(ReplayWindow(4096, false).size(), 4096u);
  EXPECT_EQ(ReplayWindow(65536, false).size(), 65536u);
  EXPECT_THROW(ReplayWindow(65537, false), std::invalid_argument);
}

TEST(ReplayWindow, DisabledWindowAcceptsEverythingButZero) {
  ReplayWindow w(0, false);
  EXPECT_EQ(receive(w, 5), Verdict::accept);
  EXPECT_EQ(receive(w, 5), Verdict::accept);
  EXPECT_EQ(receive(w, 1), Verdict::accept);
  EXPECT_EQ(receive(w, 0), Verdict::outside_window);
}

TEST(ReplayWindow, JumpFarAheadClearsOldBits) {
  ReplayWindow w(256, false);
  for (uint64_t s = 1; s <= 256; ++s) ASSERT_EQ(receive(w, s), Verdict::accept);
  // Jump by more than the ring: every slot now in the window must be free again.
  const uint64_t top = 100000;
  ASSERT_EQ(receive(w, top), Verdict::accept);
  for (uint64_t s = top - 255; s < top; ++s) ASSERT_EQ(receive(w, s), Verdict::accept) << s;
}

TEST(ReplayWindowEsn, InfersHighBitsAcrossTheEpochBoundary) {
  ReplayWindow w(128, true);
  const uint64_t near_end = 0xFFFFFFF0ull;
  ASSERT_EQ(w.commit(near_end), Verdict::accept);
  // Low bits wrapped: belongs to the next epoch (case A, high = Th + 1).
  auto ahead = w.check(5);
  EXPECT_EQ(ahead.sequence, 0x100000005ull);
  EXPECT_EQ(ahead.verdict, Verdict::accept);
  ASSERT_EQ(w.commit(ahead.sequence), Verdict::accept);
  // Now Tl = 5 < W - 1 (case B): a large low value is from the previous epoch.
  auto behind = w.check(0xFFFFFFF8u);
  EXPECT_EQ(behind.sequence, 0xFFFFFFF8ull);
  EXPECT_EQ(behind.verdict, Verdict::accept);
  auto duplicate = w.check(0xFFFFFFF0u);
  EXPECT_EQ(duplicate.sequence, near_end);
  EXPECT_EQ(duplicate.verdict, Verdict::replayed);
  auto small = w.check(3);
  EXPECT_EQ(small.sequence, 0x100000003ull);
  EXPECT_EQ(small.verdict, Verdict::accept);
}

TEST(ReplayWindowEsn, NothingBelowTheFirstEpoch) {
  ReplayWindow w(128, true);
  ASSERT_EQ(w.commit(10), Verdict::accept);
  // Case B with Th = 0: a low value just below 2^32 would need high = -1.
  EXPECT_EQ(w.check(0xFFFFFFFFu).verdict, Verdict::outside_window);
}

// Reference model: the RFC's rule stated directly on the set of received numbers.
struct ReferenceWindow {
  uint64_t size;
  uint64_t top = 0;
  std::set<uint64_t> seen;
  Verdict receive(uint64_t s) {
    if (s == 0) return Verdict::outside_window;
    if (s <= top && top - s >= size) return Verdict::outside_window;
    if (seen.count(s)) return Verdict::replayed;
    seen.insert(s);
    top = std::max(top, s);
    return Verdict::accept;
  }
};

class ReplayWindowProperty : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ReplayWindowProperty, MatchesReferenceUnderRandomOrderAndDuplicates) {
  const uint32_t size = GetParam();
  std::mt19937_64 rng(size * 7919 + 1);
  for (int round = 0; round < 20; ++round) {
    ReplayWindow w(size, false);
    ReferenceWindow ref{w.size(), 0, {}};
    uint64_t base = 1;
    std::vector<uint64_t> history;  // numbers offered so far, to replay
    for (int i = 0; i < 20000; ++i) {
      // Mostly near the front, sometimes duplicates, sometimes far behind or far ahead.
      uint64_t s;
      switch (rng() % 8) {
        case 0:
          s = history.empty() ? 1 : history[rng() % history.size()];
          break;
        case 1:
          s = base > 3 * size ? base - 3 * size + rng() % (3 * size) : 1 + rng() % base;
          break;
        case 2:
          base += rng() % (4 * size + 1);
          s = base;
          break;
        default:
          base += rng() % 3;
          s = base > size / 2 ? base - rng() % (size / 2 + 1) : base;
          break;
      }
      if (s > 0xFFFFFFFFull) s = 0xFFFFFFFFull;
      history.push_back(s);
      ASSERT_EQ(receive(w, s), ref.receive(s))
          << "round " << round << " step " << i << " seq " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReplayWindowProperty, ::testing::Values(64u, 128u, 1024u, 4096u));

TEST(ReplayWindowEsnProperty, InferenceMatchesTheTruthWithinTheWindow) {
  // Any packet whose true number is within W below the top, or ahead of it by less than
  // 2^32 - W, must be placed in the right epoch.
  std::mt19937_64 rng(42);
  for (uint32_t size : {64u, 1024u, 4096u}) {
    ReplayWindow w(size, true);
    uint64_t top = 0xFFFFF000ull;
    ASSERT_EQ(w.commit(top), Verdict::accept);
    for (int i = 0; i < 100000; ++i) {
      uint64_t truth;
      if (rng() % 2) {
        truth = top - rng() % w.size();
      } else {
        truth = top + 1 + rng() % 3000;
      }
      auto c = w.check(static_cast<uint32_t>(truth));
      ASSERT_EQ(c.sequence, truth) << "top " << top << " size " << size;
      if (truth > top && rng() % 4 == 0) {
        ASSERT_EQ(w.commit(truth), Verdict::accept);
        top = truth;
      }
    }
  }
}

// Many threads race check-then-commit on overlapping numbers, the way parallel decrypt
// workers do. Every number must be accepted exactly once.
TEST(ReplayWindowConcurrent, EachSequenceNumberAcceptedExactlyOnce) {
  constexpr uint64_t kCount = 200000;
  constexpr int kThreads = 4;
  ReplayWindow w(4096, false);
  std::vector<std::atomic<uint32_t>> accepted(kCount + 1);
  std::atomic<uint64_t> cursor{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (;;) {
        const uint64_t s = cursor.fetch_add(1, std::memory_order_relaxed);
        if (s > kCount) break;
        // Each number is offered twice (a duplicate) and sometimes slightly late.
        for (int copy = 0; copy < 2; ++copy) {
          const uint64_t offered = (rng() % 3 == 0 && s > 10) ? s - rng() % 10 : s;
          auto c = w.check(static_cast<uint32_t>(offered));
          if (c.verdict == Verdict::accept && w.commit(c.sequence) == Verdict::accept)
            accepted[c.sequence].fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t total = 0;
  for (uint64_t s = 1; s <= kCount; ++s) {
    ASSERT_LE(accepted[s].load(), 1u) << "sequence " << s << " accepted twice";
    total += accepted[s].load();
  }
  // Each number is offered at least once at its own value while it is near the top, so
  // almost all get in; the exact count depends on scheduling, duplicates never.
  EXPECT_GT(total, kCount * 9 / 10);
}

}  // namespace
}  // namespace espgw::esp
