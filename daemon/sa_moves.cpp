// Moving charon's SAs to a peer's new address or port in place (update-sa: a NAT that
// mapped the peer anew, MOBIKE). Only the SA's outer addresses change: its key, sequence
// numbers and replay window stay, so no (key, sequence number) pair is used twice and
// nothing accepted before can be accepted again.
#include "daemon/log.h"
#include "daemon/sa_table.h"

namespace espgw::daemon {

namespace {

bool same_udp_mode(const std::optional<esp::UdpEncapsulation>& a,
                   const std::optional<esp::UdpEncapsulation>& b) {
  return a.has_value() == b.has_value();
}

std::string endpoint_text(const esp::IpAddress& address,
                          const std::optional<esp::UdpEncapsulation>& udp, bool destination) {
  std::string text = address.to_string();
  if (udp) {
    text += ':';
    text += std::to_string(destination ? udp->destination_port : udp->source_port);
  }
  return text;
}

}  // namespace

SaTable::MoveResult SaTable::move(const xfrm::SaId& id, const esp::IpAddress& new_source,
                                  const esp::IpAddress& new_destination,
                                  const std::optional<esp::UdpEncapsulation>& new_udp,
                                  const std::function<bool(pipeline::PacketSink&)>& move_sink) {
  if (auto out = outbound_.find(id); out != outbound_.end()) {
    OutboundEntry& entry = *out->second;
    esp::SaConfig& config = entry.entry.config;
    if (!entry.from_charon) return MoveResult::not_found;
    // Our end (address, UDP source port) and the encapsulation name the socket it leaves by.
    if (new_source != config.tunnel_source || !same_udp_mode(new_udp, config.udp_encapsulation) ||
        (new_udp && new_udp->source_port != config.udp_encapsulation->source_port) ||
        new_destination.family != config.tunnel_destination.family)
      return MoveResult::not_supported;
    const xfrm::SaId moved_id{id.spi, new_destination};
    if (moved_id != id && outbound_.contains(moved_id)) return MoveResult::conflict;
    if (!move_sink(*entry.sink)) return MoveResult::not_supported;
    log(LogLevel::info, "SA out spi 0x%08x moved: peer %s -> %s", id.spi,
        endpoint_text(config.tunnel_destination, config.udp_encapsulation, true).c_str(),
        endpoint_text(new_destination, new_udp, true).c_str());
    config.tunnel_destination = new_destination;
    config.udp_encapsulation = new_udp;
    if (moved_id != id) {
      auto node = outbound_.extract(out);
      node.key() = moved_id;
      outbound_.insert(std::move(node));
    }
    return MoveResult::moved;
  }
  if (auto in = inbound_.find(id); in != inbound_.end()) {
    InboundEntry& entry = *in->second;
    esp::SaConfig& config = entry.entry.config;
    if (!entry.from_charon) return MoveResult::not_found;
    // ESP for it keeps arriving at our address and port; where it comes from is not
    // checked (a NAT may move the peer's port before charon hears of it).
    if (new_destination != config.tunnel_destination ||
        !same_udp_mode(new_udp, config.udp_encapsulation) ||
        (new_udp && new_udp->destination_port != config.udp_encapsulation->destination_port) ||
        new_source.family != config.tunnel_source.family)
      return MoveResult::not_supported;
    log(LogLevel::info, "SA in spi 0x%08x moved: peer %s -> %s", id.spi,
        endpoint_text(config.tunnel_source, config.udp_encapsulation, false).c_str(),
        endpoint_text(new_source, new_udp, false).c_str());
    config.tunnel_source = new_source;
    config.udp_encapsulation = new_udp;
    return MoveResult::moved;
  }
  return MoveResult::not_found;
}

}  // namespace espgw::daemon
