#include "xfrm/sad.h"

#include <openssl/crypto.h>

#include <mutex>
#include <shared_mutex>
#include <stdexcept>

namespace espgw::xfrm {

namespace {

bool same_encapsulation(const std::optional<esp::UdpEncapsulation>& a,
                        const std::optional<esp::UdpEncapsulation>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->source_port == b->source_port && a->destination_port == b->destination_port);
}

bool same_selectors(const std::vector<esp::TrafficSelector>& a,
                    const std::vector<esp::TrafficSelector>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto same = [](const esp::IpPrefix& x, const esp::IpPrefix& y) {
      return x.length == y.length && x.address == y.address;
    };
    if (!same(a[i].local, b[i].local) || !same(a[i].remote, b[i].remote)) return false;
    if (a[i].protocol != b[i].protocol || a[i].remote_port_first != b[i].remote_port_first ||
        a[i].remote_port_last != b[i].remote_port_last ||
        a[i].local_port_first != b[i].local_port_first ||
        a[i].local_port_last != b[i].local_port_last)
      return false;
  }
  return true;
}

}  // namespace

bool operator==(const SadEntry& a, const SadEntry& b) {
  return a.config.key_material == b.config.key_material && same_except_key(a, b);
}

bool same_except_key(const SadEntry& a, const SadEntry& b) {
  const esp::SaConfig& x = a.config;
  const esp::SaConfig& y = b.config;
  return x.spi == y.spi && x.algorithm == y.algorithm && x.esn == y.esn &&
         x.tunnel_source == y.tunnel_source && x.tunnel_destination == y.tunnel_destination &&
         same_encapsulation(x.udp_encapsulation, y.udp_encapsulation) &&
         x.replay_window == y.replay_window && same_selectors(x.selectors, y.selectors) &&
         a.direction == b.direction && a.reqid == b.reqid && a.lifetimes == b.lifetimes &&
         a.group_slot == b.group_slot;
}

Sad::Key Sad::key_of(uint32_t spi, const esp::IpAddress& destination) {
  return Key{spi, destination.family, destination.bytes};
}

bool Sad::add(SadEntry entry, Clock::time_point now) {
  if (entry.config.spi == 0) throw std::invalid_argument("SPI 0 is reserved");
  if (entry.direction != Direction::out && entry.direction != Direction::in)
    throw std::invalid_argument("an SA is either inbound or outbound");
  const Key key = key_of(entry.config.spi, entry.config.tunnel_destination);
  Handle handle(new Installed{std::move(entry), now}, [](const Installed* installed) {
    auto& material = const_cast<Installed*>(installed)->entry.config.key_material;
    OPENSSL_cleanse(material.data(), material.size());
    delete installed;
  });
  std::unique_lock lock(mutex_);
  return entries_.emplace(key, std::move(handle)).second;
}

bool Sad::remove(uint32_t spi, const esp::IpAddress& destination) {
  std::unique_lock lock(mutex_);
  return entries_.erase(key_of(spi, destination)) != 0;
}

Sad::Handle Sad::find(uint32_t spi, const esp::IpAddress& destination) const {
  std::shared_lock lock(mutex_);
  auto it = entries_.find(key_of(spi, destination));
  return it == entries_.end() ? nullptr : it->second;
}

std::vector<Sad::Handle> Sad::group(Direction direction, uint32_t reqid) const {
  std::shared_lock lock(mutex_);
  std::vector<Handle> out;
  for (const auto& [key, handle] : entries_)
    if (handle->entry.direction == direction && handle->entry.reqid == reqid) out.push_back(handle);
  return out;
}

std::vector<Sad::Handle> Sad::list() const {
  std::shared_lock lock(mutex_);
  std::vector<Handle> out;
  out.reserve(entries_.size());
  for (const auto& [key, handle] : entries_) out.push_back(handle);
  return out;
}

size_t Sad::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

LifetimeState lifetime_state(const Sad::Installed& sa, uint64_t bytes, uint64_t packets,
                             Sad::Clock::time_point now) {
  const auto age = now - sa.added_at;
  const uint64_t seconds =
      age.count() < 0
          ? 0
          : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(age).count());
  return check(sa.entry.lifetimes, bytes, packets, seconds);
}

}  // namespace espgw::xfrm
