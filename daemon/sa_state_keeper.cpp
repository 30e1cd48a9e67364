#include "daemon/sa_state_keeper.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "daemon/log.h"
#include "util/thread_name.h"

namespace espgw::daemon {

namespace {

// How often the thread looks for reservations running low. An inbound reservation is
// sized from what the SA accepted in one tick, so a short tick also keeps the refusals
// after a crash short.
constexpr auto kTick = std::chrono::milliseconds(2);

// An inbound reservation step covers about half a second at the SA's average rate over the
// last 100 ms, or 32 ms at the rate of the last tick, whichever is more.
constexpr unsigned kTicksPerRateWindow = 50;
constexpr uint64_t kWindowsPerStep = 5;
constexpr uint64_t kTicksPerBurstStep = 16;

uint64_t step_for(uint64_t packets) {
  return std::clamp<uint64_t>(std::bit_ceil(packets + 1), SaStateKeeper::kInboundMinBlock,
                              SaStateKeeper::kInboundMaxBlock);
}

const char* origin_name(InstallOrigin origin) {
  switch (origin) {
    case InstallOrigin::static_file:
      return "static";
    case InstallOrigin::charon_new:
      return "charon";
    case InstallOrigin::charon_replayed:
      return "charon (replayed)";
  }
  return "?";
}

}  // namespace

SaStateKeeper::SaStateKeeper(const std::string& directory)
    : store_(directory.empty() ? xfrm::SaStateStore() : xfrm::SaStateStore(directory)) {
  if (!directory.empty()) {
    // Two instances writing one sa-state would each drop the other's records.
    const std::string lock_path = directory + "/lock";
    lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0)
      throw std::runtime_error("state directory: " + lock_path + ": " + std::strerror(errno));
    if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      close(lock_fd_);
      throw std::runtime_error("state directory " + directory +
                               " is in use by another espgw; give each instance its own "
                               "state-dir");
    }
  }
  switch (store_.health()) {
    case xfrm::SaStateStore::Health::fresh:
      if (!directory.empty())
        log(LogLevel::info, "SA state: new state directory %s", directory.c_str());
      break;
    case xfrm::SaStateStore::Health::loaded:
      log(LogLevel::info, "SA state: %zu keys' counters read from %s", store_.size(),
          directory.c_str());
      if (store_.torn_bytes() != 0)
        log(LogLevel::warn,
            "SA state: the last journal write before the stop was cut short (%zu bytes "
            "ignored); it was never acknowledged, so nothing it reserved was used",
            store_.torn_bytes());
      break;
    case xfrm::SaStateStore::Health::lost:
      log(LogLevel::error,
          "SA state lost (%s): static SAs and re-installed charon SAs are held until they get "
          "new keys, since their counters could otherwise restart and reuse nonces",
          store_.lost_reason().c_str());
      break;
  }
}

SaStateKeeper::~SaStateKeeper() {
  stop();
  if (lock_fd_ >= 0) close(lock_fd_);
}

SaStateKeeper::Tracked& SaStateKeeper::track_locked(const xfrm::SaStateKey& key,
                                                    InstallOrigin origin, bool anti_replay,
                                                    bool& fresh) {
  fresh = false;
  auto found = tracked_.find(key);
  if (found != tracked_.end()) return found->second;
  Tracked tracked;
  tracked.last_visit_tick = tick_;
  if (const auto record = store_.find(key)) {
    tracked.held = record->held;
    tracked.used = tracked.durable = record->held ? 0 : record->high_water;
    tracked.durable_written = true;
  } else if (!anti_replay) {
    // An inbound SA without a replay window (0, manual keying) accepts anything anyway.
    fresh = true;
  } else if (origin == InstallOrigin::charon_new) {
    fresh = true;
  } else if (origin == InstallOrigin::charon_replayed ||
             store_.health() == xfrm::SaStateStore::Health::lost) {
    tracked.held = true;
  } else {
    fresh = true;  // a static key this directory has never seen
  }
  return tracked_.emplace(key, tracked).first->second;
}

bool SaStateKeeper::adopt(const xfrm::SaStateKey& key, const std::shared_ptr<esp::OutboundSa>& sa,
                          InstallOrigin origin) {
  std::lock_guard lock(mutex_);
  bool fresh = false;
  Tracked& tracked = track_locked(key, origin, true, fresh);
  take_over_locked(tracked, sa.get());
  tracked.outbound = sa;
  tracked.inbound.reset();
  tracked.spi = sa->config().spi;
  tracked.destination = sa->config().tunnel_destination;
  if (tracked.held) {
    unwatch_locked(tracked);
    sa->set_held(true);
    put_locked(key, tracked, 0);
    log(LogLevel::error,
        "SA out spi 0x%08x (%s) held: no record of its key's sequence numbers; it sends "
        "nothing until it is rekeyed",
        tracked.spi, origin_name(origin));
    return true;
  }
  sa->set_next_sequence(tracked.used + 1);
  // A new key from charon may start at once; anything else waits for its reservation.
  const uint64_t ceiling = fresh && origin == InstallOrigin::charon_new
                               ? kNewKeyAllowance
                               : (tracked.durable_written ? tracked.durable : tracked.used);
  sa->set_sequence_ceiling(ceiling);
  watch_locked(key, tracked, sa->counters().activity());
  if (tracked.used != 0)
    log(LogLevel::info, "SA out spi 0x%08x continues after sequence number %llu", tracked.spi,
        static_cast<unsigned long long>(tracked.used));
  return false;
}

bool SaStateKeeper::adopt(const xfrm::SaStateKey& key, const std::shared_ptr<esp::InboundSa>& sa,
                          InstallOrigin origin) {
  std::lock_guard lock(mutex_);
  const bool anti_replay = sa->replay_window().size() != 0;
  bool fresh = false;
  Tracked& tracked = track_locked(key, origin, anti_replay, fresh);
  take_over_locked(tracked, sa.get());
  tracked.inbound = sa;
  tracked.outbound.reset();
  tracked.spi = sa->config().spi;
  tracked.destination = sa->config().tunnel_destination;
  if (!anti_replay) {
    unwatch_locked(tracked);
    return false;
  }
  if (tracked.held) {
    unwatch_locked(tracked);
    sa->replay_window().set_held(true);
    put_locked(key, tracked, 0);
    log(LogLevel::error,
        "SA in spi 0x%08x (%s) held: no record of its replay window; it accepts nothing until "
        "it is rekeyed",
        tracked.spi, origin_name(origin));
    return true;
  }
  sa->set_reserver([this, key](uint64_t sequence) { return reserve_through(key, sequence); });
  if (tracked.used != 0) {
    sa->replay_window().restore(tracked.used);
    log(LogLevel::info, "SA in spi 0x%08x refuses sequence numbers up to %llu (accepted before)",
        tracked.spi, static_cast<unsigned long long>(tracked.used));
  }
  sa->replay_window().set_accept_limit(
      fresh && origin == InstallOrigin::charon_new
          ? kNewKeyAllowance
          : (tracked.durable_written ? tracked.durable : tracked.used));
  watch_locked(key, tracked, sa->counters().activity());
  return false;
}

void SaStateKeeper::watch_locked(const xfrm::SaStateKey& key, Tracked& tracked,
                                 esp::ActivitySignal& activity) {
  unwatch_locked(tracked);
  tracked.cookie = ++next_cookie_;
  const auto entry = tracked_.find(key);
  assert(entry != tracked_.end() && &entry->second == &tracked);
  watched_.emplace(tracked.cookie, entry);
  activity.set_observer(this, tracked.cookie);
  pending_.push_back(key);  // its first reservation, or one that continues its key's
}

void SaStateKeeper::unwatch_locked(Tracked& tracked) {
  // The SA may still note a packet under the old cookie: the lookup finds nothing.
  if (tracked.cookie != 0) watched_.erase(tracked.cookie);
  tracked.cookie = 0;
}

void SaStateKeeper::on_activity(uint64_t cookie) {
  std::lock_guard lock(activity_mutex_);
  active_.push_back(cookie);
}

void SaStateKeeper::take_over_locked(Tracked& tracked, const void* successor) {
  if (tracked.outbound && tracked.outbound.get() != successor) {
    tracked.used = std::max(tracked.used, tracked.outbound->seal());
    log(LogLevel::warn, "SA out spi 0x%08x: another SA took its key over; sealed", tracked.spi);
  }
  if (tracked.inbound && tracked.inbound.get() != successor) {
    tracked.inbound->replay_window().set_held(true);
    tracked.used = std::max(tracked.used, tracked.inbound->replay_window().highest());
    log(LogLevel::warn, "SA in spi 0x%08x: another SA took its key over; held", tracked.spi);
  }
}

void SaStateKeeper::retire(const xfrm::SaStateKey& key, bool forget) {
  std::lock_guard lock(mutex_);
  auto found = tracked_.find(key);
  if (found == tracked_.end()) return;
  Tracked& tracked = found->second;
  unwatch_locked(tracked);
  if (forget) {
    if (tracked.outbound) tracked.outbound->seal();
    tracked_.erase(found);
    store_.erase(key);
    return;
  }
  if (tracked.outbound) {
    tracked.used = std::max(tracked.used, tracked.outbound->seal());
  } else if (tracked.inbound) {
    // A successor starts with a fresh window; it must refuse what this one accepted.
    tracked.inbound->replay_window().set_held(true);
    tracked.used = std::max(tracked.used, tracked.inbound->replay_window().highest());
  }
  tracked.outbound.reset();
  tracked.inbound.reset();
}

void SaStateKeeper::put_locked(const xfrm::SaStateKey& key, const Tracked& tracked,
                               uint64_t value) {
  xfrm::SaStateRecord record;
  record.held = tracked.held;
  record.high_water = tracked.held ? 0 : value;
  record.spi = tracked.spi;
  record.destination = tracked.destination;
  store_.put(key, record);
}

bool SaStateKeeper::reserve() {
  std::lock_guard lock(mutex_);
  ++tick_;
  std::vector<TrackedMap::iterator> visit;
  for (const xfrm::SaStateKey& key : pending_)
    if (const auto found = tracked_.find(key); found != tracked_.end()) visit.push_back(found);
  pending_.clear();  // what was forgotten since it was queued is not found
  {
    std::vector<uint64_t> active;
    {
      std::lock_guard activity_lock(activity_mutex_);
      active.swap(active_);
    }
    for (const uint64_t cookie : active)
      if (const auto found = watched_.find(cookie); found != watched_.end())
        visit.push_back(found->second);
  }
  std::vector<Raise> raises;
  for (const TrackedMap::iterator entry : visit) {
    Tracked& tracked = entry->second;
    if (tracked.held || tracked.last_visit_tick == tick_) continue;
    ++visits_;
    visit_locked(entry->first, tracked, raises);
  }
  std::string error;
  if (!store_.write(&error)) {
    ++write_failures_;
    log(LogLevel::error, "SA state: %s; reservations not raised", error.c_str());
    // Looked at again next tick, whether or not they carry traffic by then.
    for (const Raise& raise : raises) pending_.push_back(raise.key);
    return false;
  }
  if (!raises.empty()) ++writes_;
  for (const Raise& raise : raises) {
    raise.tracked->durable = raise.value;
    raise.tracked->durable_written = true;
    if (raise.tracked->outbound)
      raise.tracked->outbound->set_sequence_ceiling(raise.value);
    else if (raise.tracked->inbound)
      raise.tracked->inbound->replay_window().set_accept_limit(raise.value);
  }
  return true;
}

void SaStateKeeper::visit_locked(const xfrm::SaStateKey& key, Tracked& tracked,
                                 std::vector<Raise>& raises) {
  // Ticks since the last look in which the SA noted no packet (one would have brought it
  // here): its rate window closes and its step shrinks as if it had been looked at then.
  const uint64_t idle = tick_ - std::min(tick_, tracked.last_visit_tick + 1);
  tracked.last_visit_tick = tick_;
  if (tracked.outbound) {
    // Cleared before the counter is read: a packet after this is noted again.
    tracked.outbound->counters().activity().clear();
    const uint64_t used = tracked.outbound->last_sequence();
    const uint64_t last = esp::last_sequence_number(tracked.outbound->config().esn);
    const uint64_t ceiling = tracked.outbound->sequence_ceiling();
    if (tracked.durable_written && tracked.durable >= used + kOutboundBlock / 2) return;
    if (tracked.durable_written && tracked.durable == last) return;
    // Never below what the SA may already use (a new key's allowance).
    const uint64_t target =
        std::max(ceiling, used > last - kOutboundBlock ? last : used + kOutboundBlock);
    put_locked(key, tracked, target);
    raises.push_back({key, &tracked, target});
  } else if (tracked.inbound && tracked.inbound->replay_window().size() != 0) {
    tracked.inbound->counters().activity().clear();
    if (idle != 0) {
      const uint64_t to_window_end = kTicksPerRateWindow - tracked.ticks_in_window;
      if (idle >= to_window_end) {
        const uint64_t in_window =
            tracked.packets_at_last_tick -
            std::min(tracked.packets_at_last_tick, tracked.packets_at_window_start);
        const uint64_t after = idle - to_window_end;
        tracked.window_block =
            step_for(after >= kTicksPerRateWindow ? 0 : in_window * kWindowsPerStep);
        tracked.packets_at_window_start = tracked.packets_at_last_tick;
        tracked.ticks_in_window = static_cast<unsigned>(after % kTicksPerRateWindow);
      } else {
        tracked.ticks_in_window += static_cast<unsigned>(idle);
      }
      tracked.block = std::max(
          {step_for(0), tracked.window_block, idle >= 64 ? uint64_t{0} : tracked.block >> idle});
    }
    auto& window = tracked.inbound->replay_window();
    const uint64_t top = window.highest();
    // The rate is what the SA accepted, not how far its top moved (a jump is no rate).
    const uint64_t packets = tracked.inbound->counters().packets();
    const uint64_t per_tick = packets - std::min(packets, tracked.packets_at_last_tick);
    tracked.packets_at_last_tick = packets;
    // Two views of the rate: this tick's (a burst must not outrun its reservation) and
    // the last window's average (a steady SA writes seldom; one tick with a packet in
    // it says little about an SA that gets one every ten ticks).
    if (++tracked.ticks_in_window == kTicksPerRateWindow) {
      const uint64_t in_window = packets - std::min(packets, tracked.packets_at_window_start);
      tracked.window_block = step_for(in_window * kWindowsPerStep);
      tracked.packets_at_window_start = packets;
      tracked.ticks_in_window = 0;
    }
    // Grows at once, shrinks by half a tick: a quiet SA soon gets a short step again
    // (what a crash makes it refuse).
    tracked.block = std::max(
        {step_for(per_tick * kTicksPerBurstStep), tracked.window_block, tracked.block / 2});
    if (tracked.durable_written && tracked.durable >= top + tracked.block / 2) return;
    const uint64_t last = esp::last_sequence_number(window.esn());
    const uint64_t target =
        std::max(window.accept_limit() == UINT64_MAX ? 0 : window.accept_limit(),
                 top > last - tracked.block ? last : top + tracked.block);
    put_locked(key, tracked, target);
    raises.push_back({key, &tracked, target});
  }
}

bool SaStateKeeper::reserve_through(const xfrm::SaStateKey& key, uint64_t sequence) {
  std::lock_guard lock(mutex_);
  const auto found = tracked_.find(key);
  if (found == tracked_.end() || found->second.held || !found->second.inbound) return false;
  Tracked& tracked = found->second;
  auto& window = tracked.inbound->replay_window();
  if (window.accept_limit() >= sequence) return true;  // another worker got here first
  const uint64_t last = esp::last_sequence_number(window.esn());
  const uint64_t from = std::max(sequence, window.highest());
  const uint64_t target = from > last - tracked.block ? last : from + tracked.block;
  put_locked(key, tracked, target);
  std::string error;
  if (!store_.write(&error)) {
    ++write_failures_;
    log(LogLevel::error, "SA state: %s; sequence number %llu of SA in spi 0x%08x refused",
        error.c_str(), static_cast<unsigned long long>(sequence), tracked.spi);
    return false;
  }
  ++writes_;
  tracked.durable = target;
  tracked.durable_written = true;
  window.set_accept_limit(target);
  return true;
}

bool SaStateKeeper::write_exact() {
  std::lock_guard lock(mutex_);
  for (auto& [key, tracked] : tracked_) {
    if (tracked.held) continue;
    if (tracked.outbound) {
      // Nothing sends any more; sealing makes sure of it.
      tracked.used = std::max(tracked.used, tracked.outbound->seal());
    } else if (tracked.inbound) {
      if (tracked.inbound->replay_window().size() == 0) continue;
      tracked.used = std::max(tracked.used, tracked.inbound->replay_window().highest());
    }
    put_locked(key, tracked, tracked.used);
  }
  std::string error;
  if (!store_.write(&error, true)) {
    log(LogLevel::error, "SA state: %s; the next start continues after the reservations",
        error.c_str());
    return false;
  }
  return true;
}

void SaStateKeeper::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(thread_mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void SaStateKeeper::stop() {
  {
    std::lock_guard lock(thread_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SaStateKeeper::run() {
  name_this_thread("sa-state");
  std::unique_lock lock(thread_mutex_);
  while (!stopping_) {
    lock.unlock();
    reserve();
    lock.lock();
    wake_.wait_for(lock, kTick, [this] { return stopping_; });
  }
}

SaStateKeeper::Status SaStateKeeper::status() const {
  std::lock_guard lock(mutex_);
  Status status;
  status.tracked = tracked_.size();
  for (const auto& [key, tracked] : tracked_) status.held += tracked.held ? 1 : 0;
  status.writes = writes_;
  status.write_failures = write_failures_;
  status.ticks = tick_;
  status.visits = visits_;
  return status;
}

std::optional<SaStateKeeper::SaState> SaStateKeeper::sa_state(const xfrm::SaStateKey& key) const {
  std::lock_guard lock(mutex_);
  const auto found = tracked_.find(key);
  if (found == tracked_.end()) return std::nullopt;
  return SaState{found->second.held, found->second.durable};
}

}  // namespace espgw::daemon
