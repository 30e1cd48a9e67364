// Keeps every installed SA's counter ahead of what is on disk, so that no restart reuses a
// nonce or accepts a replay (xfrm/sa_state_store.h holds the file):
//   - an outbound SA hands out sequence numbers only up to its ceiling, and the ceiling is
//     raised only once a value at or above it is written and fsynced (write-ahead);
//   - an inbound SA accepts sequence numbers only up to its accept limit, raised the same
//     way; after a crash its window starts as if everything up to the limit had arrived;
//   - a clean stop writes the exact values, so a planned restart skips and refuses nothing;
//   - an SA whose key comes back (a reload that changed a lifetime, charon replaying its SAs
//     to a restarted espgw) continues where its key stopped;
//   - an SA whose state is unknown (lost state file, or charon re-installing an SA there is
//     no record of) is held: it carries nothing on its key until it is replaced.
// A thread of its own raises reservations that run low, every few milliseconds. It looks
// only at SAs that may need a raise: new ones, ones whose raise failed, and ones whose
// counters noted a packet since it last looked (esp::ActivitySignal), so that a tick costs
// what changed, not what is installed. Whether a number may be used never depends on that:
// the SA's own ceiling (accept limit) refuses what is not on disk.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "esp/activity_signal.h"
#include "esp/security_association.h"
#include "xfrm/sa_state_store.h"

namespace espgw::daemon {

// How an SA came to be installed: that decides what an SA without a record means.
enum class InstallOrigin : uint8_t {
  static_file,      // a static SA: its key may have been used by an earlier run
  charon_new,       // charon's add_sa: a key charon has just derived, never used
  charon_replayed,  // charon's plugin re-installing what a previous espgw had
};

class SaStateKeeper : private esp::ActivityObserver {
 public:
  // Outbound reservations run this far ahead: a crash skips at most this many numbers
  // (2^32 / 2^20: four thousand crashes before a non-ESN SA runs out).
  static constexpr uint64_t kOutboundBlock = uint64_t{1} << 20;
  // Inbound reservations follow the SA's rate (about half a second of its traffic,
  // sa_state_keeper.cpp), within these bounds. After a crash the peer's next packets up
  // to the reservation are refused, so a slow SA keeps it short; a restart takes longer
  // than half a second anyway, and what the peer sends meanwhile uses those numbers up.
  // A shorter step would mean more writes: an SA at a steady rate has its reservation
  // raised about every quarter second.
  static constexpr uint64_t kInboundMinBlock = 64;
  static constexpr uint64_t kInboundMaxBlock = uint64_t{1} << 20;
  // A key charon has just derived may be used this far before anything is on disk: if
  // espgw dies first, the replayed SA finds no record and is held until charon rekeys it.
  static constexpr uint64_t kNewKeyAllowance = uint64_t{1} << 20;

  // `directory`: the state directory (created when missing); empty: state kept in memory
  // only (tests). Throws std::runtime_error when the directory is unusable or another
  // espgw holds it.
  explicit SaStateKeeper(const std::string& directory);
  ~SaStateKeeper();
  SaStateKeeper(const SaStateKeeper&) = delete;
  SaStateKeeper& operator=(const SaStateKeeper&) = delete;

  xfrm::SaStateStore::Health health() const { return store_.health(); }

  // Sets a new SA's counter from its key's record, or holds it, before it carries
  // traffic (an outbound SA before its pipeline channel is made: the channel starts at
  // the SA's next number). Returns true when the SA is held.
  bool adopt(const xfrm::SaStateKey& key, const std::shared_ptr<esp::OutboundSa>& sa,
             InstallOrigin origin);
  bool adopt(const xfrm::SaStateKey& key, const std::shared_ptr<esp::InboundSa>& sa,
             InstallOrigin origin);
  // The SA goes. Its counter is frozen (an outbound SA is sealed: no packet still on its
  // way takes another number) and kept for a successor under the same key, unless
  // `forget` (charon deleted it: its key never comes back).
  void retire(const xfrm::SaStateKey& key, bool forget);

  // Raises every reservation that runs low, writes the file, then the ceilings. What the
  // thread does each tick; the gateway also calls it before traffic starts. False when
  // the write failed (ceilings stay where they were: traffic stops, never reuses).
  bool reserve();
  // At once, for one inbound SA whose authentic packet `sequence` is beyond its accept
  // limit (what InboundSa::reserve_through calls, on a worker): writes a reservation
  // that covers it. False when the write failed or the SA is not tracked.
  bool reserve_through(const xfrm::SaStateKey& key, uint64_t sequence);
  void start();  // the reservation thread
  void stop();
  // A clean stop (after the data path has stopped): the exact values, so that the next
  // start continues without a gap.
  bool write_exact();

  struct Status {
    size_t tracked = 0;
    size_t held = 0;
    uint64_t writes = 0;
    uint64_t write_failures = 0;
    uint64_t ticks = 0;   // reserve() calls
    uint64_t visits = 0;  // SAs looked at by reserve(), all ticks together
  };
  Status status() const;
  // For one SA: whether it is held, and how far its reservation runs.
  struct SaState {
    bool held = false;
    uint64_t reserved = 0;
  };
  std::optional<SaState> sa_state(const xfrm::SaStateKey& key) const;

 private:
  struct Tracked {
    std::shared_ptr<esp::OutboundSa> outbound;  // live SA, if any
    std::shared_ptr<esp::InboundSa> inbound;
    uint64_t used = 0;                  // known high water (exact once the SA is retired)
    uint64_t durable = 0;               // what the file says (0: nothing written yet)
    uint64_t packets_at_last_tick = 0;  // inbound: what the SA had accepted then
    uint64_t packets_at_window_start = 0;
    unsigned ticks_in_window = 0;
    uint64_t window_block = kInboundMinBlock;
    uint64_t block = kInboundMinBlock;  // inbound: the current reservation step
    bool held = false;
    bool durable_written = false;
    uint32_t spi = 0;
    esp::IpAddress destination;
    uint64_t cookie = 0;           // the live SA's activity cookie (0: none watched)
    uint64_t last_visit_tick = 0;  // reserve()'s tick when it last looked at this SA
  };
  struct Raise {
    xfrm::SaStateKey key;
    Tracked* tracked;
    uint64_t value;
  };
  Tracked& track_locked(const xfrm::SaStateKey& key, InstallOrigin origin, bool anti_replay,
                        bool& fresh);
  // One live SA per key: a second one (two SAs given the same key) takes over from the
  // first, which is sealed or held, so that the two never count the same numbers.
  void take_over_locked(Tracked& tracked, const void* successor);
  void put_locked(const xfrm::SaStateKey& key, const Tracked& tracked, uint64_t value);
  // Looks at the live SA's counters from the next tick on, and once at that tick.
  void watch_locked(const xfrm::SaStateKey& key, Tracked& tracked, esp::ActivitySignal& activity);
  void unwatch_locked(Tracked& tracked);
  // One SA's part of a tick: a raise when its reservation runs low.
  void visit_locked(const xfrm::SaStateKey& key, Tracked& tracked, std::vector<Raise>& raises);
  void on_activity(uint64_t cookie) override;
  void run();

  mutable std::mutex mutex_;
  xfrm::SaStateStore store_;
  int lock_fd_ = -1;  // flock on the directory: one espgw per state directory
  using TrackedMap = std::map<xfrm::SaStateKey, Tracked>;
  TrackedMap tracked_;
  uint64_t writes_ = 0;
  uint64_t write_failures_ = 0;
  uint64_t tick_ = 0;
  uint64_t visits_ = 0;
  // What the next tick looks at: keys adopted or whose raise failed (under mutex_), and
  // the cookies of SAs whose counters noted traffic (under activity_mutex_, which a worker
  // takes once per SA and tick, never while the disk is written).
  std::vector<xfrm::SaStateKey> pending_;
  // cookie -> the SA's entry (a map node stays put until erased, and it is unwatched first),
  // so that a tick finds a busy SA without searching tracked_.
  std::unordered_map<uint64_t, TrackedMap::iterator> watched_;
  uint64_t next_cookie_ = 0;
  std::mutex activity_mutex_;
  std::vector<uint64_t> active_;

  std::mutex thread_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace espgw::daemon
