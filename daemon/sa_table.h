// The SAD: every SA the gateway holds, outbound and inbound, by (SPI, destination), each
// with its engine SA, its pipeline channel, its counter record and its lifetime
// tracking. Installing an outbound SA makes it a member of its reqid's SA group (ECMP
// over the group's slots); when the SA carrying a slot goes, the newest other SA of the
// slot takes over. Inbound SAs of one CHILD_SA are chained, so a rekeyed SA's packets
// wait for its predecessors'.
//
// A plain class: it takes the pipeline, the counter keeper, the MTU tracker and the
// sinks from the gateway, and is not thread-safe (the gateway calls it under its control
// lock). The data path never touches it: TUN readers read the published OutboundLookup,
// WAN readers find inbound SAs by SPI in the pipeline.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/mtu_tracker.h"
#include "daemon/outbound_lookup.h"
#include "daemon/sa_slot_index.h"
#include "daemon/sa_state_keeper.h"
#include "esp/security_association.h"
#include "pipeline/channels.h"
#include "pipeline/pipeline.h"
#include "xfrm/key_fingerprint.h"
#include "xfrm/lifetime.h"
#include "xfrm/sad_entry.h"

namespace espgw::daemon {

// When an SA was installed, when it last carried a packet, and how far through its
// lifetime it is. Updated by enforce_lifetimes every 100 ms, so idle times have that
// resolution and the data path pays nothing for them.
struct LifetimeTracking {
  std::chrono::steady_clock::time_point added_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_used{};
  uint64_t packets_seen = 0;
  xfrm::LifetimeState reported = xfrm::LifetimeState::none;
};

// `entry` is kept without its key (wiped once the SA has expanded it); the fingerprint
// tells an identical re-install or reload apart from a new key.
struct OutboundEntry {
  xfrm::SadEntry entry;
  xfrm::KeyFingerprint key_fingerprint{};
  xfrm::SaStateKey state_key;  // its key's counter record (SaStateKeeper)
  bool from_charon = false;
  unsigned mtu_candidate = 0;  // what it counts for in the MtuTracker
  LifetimeTracking lifetime;
  std::shared_ptr<esp::OutboundSa> sa;
  std::shared_ptr<pipeline::PacketSink> sink;  // its peer (daemon/outbound_path.h)
  std::shared_ptr<pipeline::OutboundChannel> channel;
};

struct InboundEntry {
  xfrm::SadEntry entry;  // without its key, as for OutboundEntry
  xfrm::KeyFingerprint key_fingerprint{};
  xfrm::SaStateKey state_key;
  bool from_charon = false;
  unsigned lan_mtu_candidate = 0;  // what it counts for in the MtuTracker, if not 0
  LifetimeTracking lifetime;
  std::shared_ptr<esp::InboundSa> sa;
  std::shared_ptr<pipeline::InboundChannel> channel;
};

// The SA group slot an outbound SA fills (its member key for rendezvous hashing): the
// IKE_SA for charon's SAs, so that a CHILD_SA rekey moves no flow; the SPI for static SAs,
// which are never rekeyed. The top bit keeps the two kinds apart.
uint64_t group_slot(const xfrm::SadEntry& entry);

class SaTable {
 public:
  // The sink an outbound SA's sealed packets go to (its peer, through its WAN socket).
  using OutboundSinkFactory =
      std::function<std::shared_ptr<pipeline::PacketSink>(const esp::SaConfig& sa)>;
  // Makes sure the WAN socket an inbound SA's packets arrive on exists.
  using InboundSocketOpener = std::function<void(const esp::SaConfig& sa)>;

  // `crypto_backend`: the name of the backend the SAs use (crypto::find_backend).
  // `inbound_sink`: where every inbound SA delivers (the TUN writer). `lookup`: the
  // snapshot the TUN readers read, whose groups this table keeps.
  SaTable(pipeline::Pipeline& pipeline, SaStateKeeper& sa_state, MtuTracker& mtu,
          std::string crypto_backend, pipeline::PacketSink& inbound_sink,
          PublishedOutboundLookup& lookup, OutboundSinkFactory outbound_sink,
          InboundSocketOpener open_inbound_socket);
  // Route-based VPN: the sink of an inbound SA whose if_id is not 0 (its interface's TUN
  // writer), null when no interface has that id (the SA is then refused).
  using InterfaceSinkFinder = std::function<pipeline::PacketSink*(uint32_t if_id)>;
  void set_interface_sinks(InterfaceSinkFinder finder) { interface_sinks_ = std::move(finder); }
  SaTable(const SaTable&) = delete;
  SaTable& operator=(const SaTable&) = delete;

  // Installs `entry`, or replaces a different one under its (SPI, destination); an
  // identical one keeps its state and only takes `origin`'s from_charon. False (logged)
  // for an inbound SA without selectors or with an SPI another inbound SA has.
  bool install(const xfrm::SadEntry& entry, InstallOrigin origin);
  // False if there is no such SA. Its counter record goes with it if charon installed it
  // (charon never installs a deleted SA's key again; a static key may come back).
  bool remove(const xfrm::SaId& id);
  // The installed SA of that id: nullptr if none.
  const OutboundEntry* find_outbound(const xfrm::SaId& id) const;
  const InboundEntry* find_inbound(const xfrm::SaId& id) const;
  const std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>>& outbound() const { return outbound_; }
  const std::map<xfrm::SaId, std::unique_ptr<InboundEntry>>& inbound() const { return inbound_; }
  // Moves charon's SA `id` to new outer addresses or UDP ports in place (daemon/sa_moves.cpp):
  // its key, sequence numbers, replay window, counters and lifetimes stay. Only the peer's
  // end moves (outbound: the destination, inbound: the source, with their UDP port): a new
  // local address, local port or a change between raw ESP and ESP in UDP would need
  // another socket, and is not_supported (charon then rekeys). `move_sink` points an
  // outbound SA's sink at the new peer, false if it cannot.
  enum class MoveResult { moved, not_found, not_supported, conflict };
  MoveResult move(const xfrm::SaId& id, const esp::IpAddress& new_source,
                  const esp::IpAddress& new_destination,
                  const std::optional<esp::UdpEncapsulation>& new_udp,
                  const std::function<bool(pipeline::PacketSink&)>& move_sink);
  // Counts every SA again in the MtuTracker (after MtuTracker::forget_routes_and_sas).
  void recount_mtus();
  // How many SAs have been removed or replaced so far (only grows; any thread may read it).
  uint64_t retired_count() const { return retired_.load(std::memory_order_relaxed); }
  // How many SAs have been installed (a replacement counts too) so far, the same way.
  uint64_t installed_count() const { return installed_.load(std::memory_order_relaxed); }

  // One of charon's SAs that reached a lifetime, for the gateway to tell charon.
  struct Expiry {
    uint32_t spi;
    esp::IpAddress destination;
    bool hard;
  };
  // Applies the SAs' soft and hard lifetimes (daemon/sa_lifetimes.cpp): a soft limit is
  // logged once, a hard limit takes the SA out of service (out of its group; inbound, out
  // of the pipeline). Returns charon's SAs that crossed a limit.
  std::vector<Expiry> enforce_lifetimes(std::chrono::steady_clock::time_point now);

 private:
  bool install_outbound(const xfrm::SadEntry& entry, bool from_charon,
                        const xfrm::SaStateKey& state_key, InstallOrigin origin);
  bool install_inbound(const xfrm::SadEntry& entry, bool from_charon,
                       const xfrm::SaStateKey& state_key, InstallOrigin origin);
  // `forget_key`: the SA's key never comes back (charon deleted it), so its counter
  // record goes too.
  void retire_outbound(std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>>::iterator it,
                       bool forget_key);
  void retire_inbound(std::map<xfrm::SaId, std::unique_ptr<InboundEntry>>::iterator it,
                      bool forget_key);
  // The group of `reqid`, created (a new snapshot, sharing all but one shard of the
  // group map) when missing.
  std::shared_ptr<pipeline::SaGroup> group(uint32_t reqid);
  void drop_group_if_empty(uint32_t reqid);

  pipeline::Pipeline& pipeline_;
  SaStateKeeper& sa_state_;
  MtuTracker& mtu_;
  const std::string crypto_backend_;
  pipeline::PacketSink& inbound_sink_;
  PublishedOutboundLookup& lookup_;
  OutboundSinkFactory outbound_sink_;
  InboundSocketOpener open_inbound_socket_;
  InterfaceSinkFinder interface_sinks_;
  std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>> outbound_;
  std::map<xfrm::SaId, std::unique_ptr<InboundEntry>> inbound_;
  // The same SAs by (reqid, slot), changed with the maps above: every outbound SA under
  // group_slot(), and the inbound SAs that have a slot (charon's) under theirs.
  SaSlotIndex<OutboundEntry> outbound_slots_;
  SaSlotIndex<InboundEntry> inbound_slots_;
  std::atomic<uint64_t> retired_{0};
  std::atomic<uint64_t> installed_{0};
};

}  // namespace espgw::daemon
