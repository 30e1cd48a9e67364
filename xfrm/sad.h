// The Security Association Database (RFC 4301 4.4.2): every SA this gateway holds, found
// by (SPI, destination address) as in the kernel, with its direction, its SA group
// (reqid) and its lifetimes. The engine's run-time SA state (sequence numbers, replay
// windows, counters) is not here: this is the control side's record of what exists.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "esp/ip_address.h"
#include "esp/security_association.h"
#include "xfrm/direction.h"
#include "xfrm/lifetime.h"
#include "xfrm/writer_preferring_mutex.h"

namespace espgw::xfrm {

struct SadEntry {
  esp::SaConfig config;                  // its spi and tunnel_destination are the SAD key
  Direction direction = Direction::out;  // out or in
  uint32_t reqid = 0;                    // the SA group policies name; 0 = in no group
  Lifetimes lifetimes;
  // Outbound: which slot of its SA group the SA fills. A CHILD_SA's rekeyed SA takes its
  // predecessor's slot, so no flow moves; charon's SAs use their IKE_SA's unique id,
  // 0 means the SPI (static SAs, which are never rekeyed).
  uint64_t group_slot = 0;
};

// What names an SA, in the kernel as with charon: its SPI (host order) and destination.
struct SaId {
  uint32_t spi = 0;
  esp::IpAddress destination;
  auto operator<=>(const SaId&) const = default;
};
inline SaId sa_id_of(const SadEntry& entry) {
  return {entry.config.spi, entry.config.tunnel_destination};
}

// Field by field, key material included (the config types have no comparison of their
// own). For tests and change detection, not for anything secret-dependent.
bool operator==(const SadEntry& a, const SadEntry& b);
// Every field but the key material: for a copy whose key has been wiped, compared with
// key fingerprints (xfrm/key_fingerprint.h) for the rest.
bool same_except_key(const SadEntry& a, const SadEntry& b);

class Sad {
 public:
  using Clock = std::chrono::steady_clock;
  struct Installed {
    SadEntry entry;
    Clock::time_point added_at;  // where seconds-based lifetimes start
  };
  // Entries are immutable and shared: a reader keeps its handle however long it needs
  // after a removal. The key material is wiped when the last handle goes.
  using Handle = std::shared_ptr<const Installed>;

  // Returns false when an SA with the same (SPI, destination) exists. Throws
  // std::invalid_argument for SPI 0 or a direction other than out or in.
  bool add(SadEntry entry, Clock::time_point now = Clock::now());
  bool remove(uint32_t spi, const esp::IpAddress& destination);
  Handle find(uint32_t spi, const esp::IpAddress& destination) const;  // nullptr if absent
  // The SAs of one group and direction, the set a protect policy's reqid names.
  std::vector<Handle> group(Direction direction, uint32_t reqid) const;
  std::vector<Handle> list() const;  // ordered by SPI, then destination
  size_t size() const;

 private:
  struct Key {
    uint32_t spi;
    uint8_t family;
    std::array<uint8_t, 16> address;
    auto operator<=>(const Key&) const = default;
  };
  static Key key_of(uint32_t spi, const esp::IpAddress& destination);

  mutable WriterPreferringMutex mutex_;
  std::map<Key, Handle> entries_;
};

// The lifetime state of an installed SA that has carried `bytes` and `packets`.
LifetimeState lifetime_state(const Sad::Installed& sa, uint64_t bytes, uint64_t packets,
                             Sad::Clock::time_point now = Sad::Clock::now());

}  // namespace espgw::xfrm
