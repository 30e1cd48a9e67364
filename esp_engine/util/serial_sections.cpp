#include "util/serial_sections.h"

#include <array>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace espgw::serial_sections {

namespace {

// One account per thread, written only by it; read (relaxed) when totals are asked for.
struct alignas(64) Account {
  std::array<std::atomic<uint64_t>, kSections> entries{};
  std::array<std::atomic<uint64_t>, kSections> acquire_cycles{};
  std::array<std::atomic<uint64_t>, kSections> hold_cycles{};
  std::array<std::atomic<uint64_t>, kSections> handovers{};
};

std::mutex g_accounts_lock;
// Never destroyed: a thread may still record after main() returns, and every account stays
// reachable from here (a leak checker sees memory in use, not lost).
std::vector<Account*>& accounts() {
  static auto* const list = new std::vector<Account*>;
  return *list;
}

Account& my_account() {
  thread_local Account* account = [] {
    auto* created = new Account;
    std::lock_guard guard(g_accounts_lock);
    accounts().push_back(created);
    return created;
  }();
  return *account;
}

// The last thread to hold each lock, by a hash of the lock's address (collisions only
// miscount a hand-over now and then).
constexpr size_t kOwnerSlots = 4096;
std::array<std::atomic<const void*>, kOwnerSlots> g_owner_thread{};
std::atomic<const void*>& owner_slot(const void* lock) {
  const auto bits = reinterpret_cast<uintptr_t>(lock);
  return g_owner_thread[(bits * 0x9E3779B97F4A7C15ull) >> 52];
}

void bump(std::atomic<uint64_t>& value, uint64_t by) {
  value.store(value.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

const char* name(Section section) {
  switch (section) {
    case Section::sequence:
      return "sequence";
    case Section::replay_commit:
      return "replay_commit";
    case Section::release_lock:
      return "release_lock";
    case Section::delivery:
      return "delivery";
    case Section::count:
      break;
  }
  return "?";
}

void set_enabled(bool enabled) {
  g_enabled.store(enabled, std::memory_order_relaxed);
}

void record(Section section, const void* lock, uint64_t start, uint64_t acquired, uint64_t end) {
  Account& account = my_account();
  const size_t s = static_cast<size_t>(section);
  bump(account.entries[s], 1);
  bump(account.acquire_cycles[s], acquired - start);
  bump(account.hold_cycles[s], end - acquired);
  thread_local const char me = 0;
  std::atomic<const void*>& owner = owner_slot(lock);
  if (owner.load(std::memory_order_relaxed) != &me) {
    owner.store(&me, std::memory_order_relaxed);
    bump(account.handovers[s], 1);
  }
}

Totals totals() {
  Totals sum;
  std::lock_guard guard(g_accounts_lock);
  for (const Account* account : accounts())
    for (size_t s = 0; s < kSections; ++s) {
      sum.entries[s] += account->entries[s].load(std::memory_order_relaxed);
      sum.acquire_cycles[s] += account->acquire_cycles[s].load(std::memory_order_relaxed);
      sum.hold_cycles[s] += account->hold_cycles[s].load(std::memory_order_relaxed);
      sum.handovers[s] += account->handovers[s].load(std::memory_order_relaxed);
    }
  return sum;
}

void reset() {
  std::lock_guard guard(g_accounts_lock);
  for (Account* account : accounts())
    for (size_t s = 0; s < kSections; ++s) {
      account->entries[s].store(0, std::memory_order_relaxed);
      account->acquire_cycles[s].store(0, std::memory_order_relaxed);
      account->hold_cycles[s].store(0, std::memory_order_relaxed);
      account->handovers[s].store(0, std::memory_order_relaxed);
    }
  for (auto& owner : g_owner_thread) owner.store(nullptr, std::memory_order_relaxed);
}

double ticks_per_ns() {
  static const double measured = [] {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t c0 = now_ticks();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t c1 = now_ticks();
    const auto t1 = std::chrono::steady_clock::now();
    const double ns =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    return c1 > c0 && ns > 0 ? static_cast<double>(c1 - c0) / ns : 1.0;
  }();
  return measured;
}

}  // namespace espgw::serial_sections
