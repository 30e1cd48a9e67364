#include "daemon/sa_table.h"

#include <algorithm>
#include <string>

#include "crypto/aead.h"
#include "daemon/counter_registry.h"
#include "daemon/log.h"
#include "util/secure_wipe.h"

namespace espgw::daemon {

namespace {

// Whether an installed SA is `entry` again: same fields, and a key of the same
// fingerprint (the installed copy no longer has the key itself).
template <typename Installed>
bool unchanged(const Installed& installed, const xfrm::SadEntry& entry) {
  return xfrm::same_except_key(installed.entry, entry) &&
         xfrm::same_fingerprint(installed.key_fingerprint,
                                xfrm::key_fingerprint(entry.config.key_material));
}

// The table's copy of an SA's key: wiped, then its storage goes too (one allocation per
// SA fewer; the fingerprint is all the table keeps of the key).
void forget_key(std::vector<uint8_t>& key) {
  wipe(key);
  std::vector<uint8_t>().swap(key);
}

}  // namespace

uint64_t group_slot(const xfrm::SadEntry& entry) {
  return entry.group_slot != 0 ? (entry.group_slot | (uint64_t{1} << 63)) : entry.config.spi;
}

SaTable::SaTable(pipeline::Pipeline& pipeline, SaStateKeeper& sa_state, MtuTracker& mtu,
                 std::string crypto_backend, pipeline::PacketSink& inbound_sink,
                 PublishedOutboundLookup& lookup, OutboundSinkFactory outbound_sink,
                 InboundSocketOpener open_inbound_socket)
    : pipeline_(pipeline),
      sa_state_(sa_state),
      mtu_(mtu),
      crypto_backend_(std::move(crypto_backend)),
      inbound_sink_(inbound_sink),
      lookup_(lookup),
      outbound_sink_(std::move(outbound_sink)),
      open_inbound_socket_(std::move(open_inbound_socket)) {}

const OutboundEntry* SaTable::find_outbound(const xfrm::SaId& id) const {
  const auto found = outbound_.find(id);
  return found == outbound_.end() ? nullptr : found->second.get();
}

const InboundEntry* SaTable::find_inbound(const xfrm::SaId& id) const {
  const auto found = inbound_.find(id);
  return found == inbound_.end() ? nullptr : found->second.get();
}

bool SaTable::install(const xfrm::SadEntry& entry, InstallOrigin origin) {
  const bool from_charon = origin != InstallOrigin::static_file;
  // RFC 4301 5.2: an inbound SA checks decrypted packets against its selectors; one
  // without any would accept every inner packet. The static parser and the add-sa parser
  // refuse such SAs already; this keeps any other way in closed.
  if (entry.direction == xfrm::Direction::in && entry.config.selectors.empty()) {
    log(LogLevel::error, "SA in spi 0x%08x refused: it has no traffic selectors", entry.config.spi);
    return false;
  }
  // Taken before the SA wipes its copy of the key: the key is what its counter belongs to.
  const xfrm::SaStateKey state_key{entry.direction,
                                   xfrm::key_fingerprint(entry.config.key_material)};
  if (entry.direction == xfrm::Direction::out)
    return install_outbound(entry, from_charon, state_key, origin);
  return install_inbound(entry, from_charon, state_key, origin);
}

bool SaTable::install_outbound(const xfrm::SadEntry& entry, bool from_charon,
                               const xfrm::SaStateKey& state_key, InstallOrigin origin) {
  const xfrm::SaId key = xfrm::sa_id_of(entry);
  if (auto existing = outbound_.find(key); existing != outbound_.end()) {
    if (unchanged(*existing->second, entry)) {
      existing->second->from_charon = from_charon;
      return true;
    }
    retire_outbound(existing, /*forget_key=*/false);  // its key may stay
  }
  auto fresh = std::make_unique<OutboundEntry>();
  fresh->entry = entry;
  // The SA expands its own copy of the key; the table's record keeps a fingerprint.
  fresh->key_fingerprint = xfrm::key_fingerprint(entry.config.key_material);
  forget_key(fresh->entry.config.key_material);
  fresh->from_charon = from_charon;
  fresh->mtu_candidate = mtu_.add_outbound(entry.config);
  fresh->sa =
      std::make_shared<esp::OutboundSa>(entry.config, *crypto::find_backend(crypto_backend_));
  // TFC padding never makes a packet bigger than the SA's path allows (charon's "mtu"
  // asks for exactly that much).
  fresh->sa->cap_tfc_padding(fresh->mtu_candidate);
  fresh->state_key = state_key;
  // Before the channel is made: it starts at the SA's next sequence number.
  sa_state_.adopt(state_key, fresh->sa, origin);
  fresh->sink = outbound_sink_(entry.config);
  // Packets in flight after the SA is removed still deliver through the sink: the
  // channel keeps it until the pipeline deletes the channel.
  fresh->channel = pipeline_.make_outbound(fresh->sa, *fresh->sink, fresh->sink);
  std::string tfc;
  if (fresh->sa->config().tfc_pad_to != 0) {
    tfc = ", tfc padding to ";
    tfc += std::to_string(fresh->sa->config().tfc_pad_to);
  }
  log(LogLevel::info, "SA out spi 0x%08x %s -> %s %s%s installed%s", entry.config.spi,
      std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
      entry.config.tunnel_destination.to_string().c_str(),
      entry.config.udp_encapsulation ? "udp" : "esp", entry.config.esn ? " esn" : "", tfc.c_str());
  // The newest SA of a slot carries its flows, as the kernel sends on the newest SA
  // while a rekey has the old and the new one installed.
  group(entry.reqid)->set_member(group_slot(entry), fresh->channel);
  outbound_slots_.add(entry.reqid, group_slot(entry), fresh.get());
  outbound_.emplace(key, std::move(fresh));
  installed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SaTable::install_inbound(const xfrm::SadEntry& entry, bool from_charon,
                              const xfrm::SaStateKey& state_key, InstallOrigin origin) {
  // Route-based VPN: the interface's own device, and no other, takes its packets.
  pipeline::PacketSink* sink = &inbound_sink_;
  if (entry.if_id != 0) sink = interface_sinks_ ? interface_sinks_(entry.if_id) : nullptr;
  if (!sink) {
    log(LogLevel::error, "SA in spi 0x%08x: no interface has id %u", entry.config.spi, entry.if_id);
    return false;
  }
  const xfrm::SaId key = xfrm::sa_id_of(entry);
  if (auto existing = inbound_.find(key); existing != inbound_.end()) {
    if (unchanged(*existing->second, entry)) {
      existing->second->from_charon = from_charon;
      return true;
    }
    retire_inbound(existing, /*forget_key=*/false);
  }
  auto fresh = std::make_unique<InboundEntry>();
  fresh->entry = entry;
  fresh->key_fingerprint = xfrm::key_fingerprint(entry.config.key_material);
  forget_key(fresh->entry.config.key_material);
  fresh->from_charon = from_charon;
  open_inbound_socket_(entry.config);  // make sure the socket it arrives on exists
  fresh->sa =
      std::make_shared<esp::InboundSa>(entry.config, *crypto::find_backend(crypto_backend_));
  fresh->state_key = state_key;
  sa_state_.adopt(state_key, fresh->sa, origin);
  // A rekey installs the new inbound SA while the old one still receives: the earlier SAs
  // of the same CHILD_SA (charon's slot) are its predecessors, whose packets in flight the
  // new SA's first packets must not overtake. All of them, oldest first: after a rekey
  // collision both sides' new SAs are installed, and the newest earlier SA may be the
  // redundant one, which carries nothing while the old one still has packets in flight.
  // (Static SAs have no slot.)
  std::vector<std::shared_ptr<pipeline::InboundChannel>> predecessors;
  if (entry.group_slot != 0)
    for (const InboundEntry* other : inbound_slots_.oldest_first(entry.reqid, entry.group_slot))
      predecessors.push_back(other->channel);
  fresh->channel = pipeline_.add_inbound(fresh->sa, *sink, predecessors);
  if (!fresh->channel) {
    log(LogLevel::error, "SA in spi 0x%08x: SPI already in use", entry.config.spi);
    sa_state_.retire(state_key, from_charon);
    return false;
  }
  fresh->lan_mtu_candidate = mtu_.add_inbound(entry.config);
  log(LogLevel::info, "SA in spi 0x%08x %s from %s installed", entry.config.spi,
      std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
      entry.config.tunnel_source.to_string().c_str());
  if (entry.group_slot != 0) inbound_slots_.add(entry.reqid, entry.group_slot, fresh.get());
  inbound_.emplace(key, std::move(fresh));
  installed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SaTable::remove(const xfrm::SaId& key) {
  // charon never installs a deleted SA's key again; a static key may come back with a
  // later reload, and its counter must then continue.
  if (auto out = outbound_.find(key); out != outbound_.end()) {
    retire_outbound(out, out->second->from_charon);
    return true;
  }
  if (auto in = inbound_.find(key); in != inbound_.end()) {
    retire_inbound(in, in->second->from_charon);
    return true;
  }
  return false;
}

void SaTable::retire_outbound(std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>>::iterator it,
                              bool forget_key) {
  const OutboundEntry& old = *it->second;
  sa_state_.retire(old.state_key, forget_key);
  // The final counters: after this the SA and its statistics are gone.
  log(LogLevel::info, "SA out spi 0x%08x removed after %llu packets, %llu bytes; drops%s",
      old.entry.config.spi, static_cast<unsigned long long>(old.sa->counters().packets()),
      static_cast<unsigned long long>(old.sa->counters().bytes()),
      format_counters(nonzero_drops(old.sa->counters().drop_counters()), " none").c_str());
  const uint32_t reqid = old.entry.reqid;
  const uint64_t slot = group_slot(old.entry);
  outbound_slots_.remove(reqid, slot, &old);
  const auto lookup = lookup_.load();
  if (auto found = lookup->groups.find(reqid); found != lookup->groups.end())
    if (found->second->remove_member(slot, old.channel.get())) {
      // It carried the slot: the newest other SA of the slot (a rekey's predecessor not
      // yet deleted) takes over, unless it is past its hard lifetime.
      const OutboundEntry* successor =
          outbound_slots_.newest(reqid, slot, [](const OutboundEntry& other) {
            return other.lifetime.reported != xfrm::LifetimeState::hard;
          });
      if (successor) found->second->set_member(slot, successor->channel);
    }
  mtu_.remove_outbound(old.mtu_candidate);
  outbound_.erase(it);
  retired_.fetch_add(1, std::memory_order_relaxed);
  drop_group_if_empty(reqid);
}

void SaTable::retire_inbound(std::map<xfrm::SaId, std::unique_ptr<InboundEntry>>::iterator it,
                             bool forget_key) {
  const InboundEntry& old = *it->second;
  if (old.entry.group_slot != 0) inbound_slots_.remove(old.entry.reqid, old.entry.group_slot, &old);
  sa_state_.retire(old.state_key, forget_key);
  pipeline_.remove_inbound(old.entry.config.spi);
  mtu_.remove_inbound(old.lan_mtu_candidate);
  // The reorder figures say whether the SA's last packets came late (a gap given up after
  // its hold time, say while a worker was preempted) when a rekey seemed to lose one.
  const pipeline::ReorderStats reorder = old.channel->release().stats();
  log(LogLevel::info,
      "SA in spi 0x%08x removed after %llu packets, %llu bytes (reorder: %llu late, %llu "
      "skipped, %llu hold timeouts); drops%s",
      old.entry.config.spi, static_cast<unsigned long long>(old.sa->counters().packets()),
      static_cast<unsigned long long>(old.sa->counters().bytes()),
      static_cast<unsigned long long>(reorder.late),
      static_cast<unsigned long long>(reorder.skipped),
      static_cast<unsigned long long>(reorder.hold_timeouts),
      format_counters(nonzero_drops(old.sa->counters().drop_counters()), " none").c_str());
  inbound_.erase(it);
  retired_.fetch_add(1, std::memory_order_relaxed);
}

void SaTable::recount_mtus() {
  for (auto& [key, entry] : outbound_)
    entry->mtu_candidate = mtu_.add_outbound(entry->entry.config);
  for (auto& [key, entry] : inbound_)
    entry->lan_mtu_candidate = mtu_.add_inbound(entry->entry.config);
}

std::shared_ptr<pipeline::SaGroup> SaTable::group(uint32_t reqid) {
  const auto current = lookup_.load();
  if (auto found = current->groups.find(reqid); found != current->groups.end())
    return found->second;
  // The members share one SA's in-flight bound: an ECMP group queues no more than one SA.
  auto created = std::make_shared<pipeline::SaGroup>(pipeline_.config().max_in_flight_per_sa);
  // Shares the SPD and every shard of the group map but reqid's.
  lookup_.store(std::make_shared<const OutboundLookup>(
      OutboundLookup{current->spd, current->groups.with(reqid, created)}));
  return created;
}

void SaTable::drop_group_if_empty(uint32_t reqid) {
  const auto current = lookup_.load();
  auto found = current->groups.find(reqid);
  if (found == current->groups.end() || found->second->size() != 0) return;
  lookup_.store(std::make_shared<const OutboundLookup>(
      OutboundLookup{current->spd, current->groups.without(reqid)}));
}

}  // namespace espgw::daemon
