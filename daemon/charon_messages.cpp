#include "daemon/charon_messages.h"

#include <cstdio>

#include "crypto/aead.h"
#include "util/secure_wipe.h"

namespace espgw::daemon {

namespace {

// Priorities for charon's policy classes when it sets no manual priority. Lower wins, as
// in the kernel; the classes keep charon's order (pass before IPsec before trap before
// fallback drop), and the SPD breaks ties by selector specificity.
constexpr uint32_t kPassPriority = 100000;
constexpr uint32_t kDefaultPriority = 200000;
constexpr uint32_t kRoutedPriority = 300000;
constexpr uint32_t kFallbackPriority = 400000;

// Errors of one request; the first one wins.
class Reader {
 public:
  explicit Reader(const vici::Message& message) : message_(message) {}
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }

  std::string text(const char* key) {
    const std::string* value = message_.value(key);
    if (!value) fail(std::string("missing '") + key + "'");
    return value ? *value : std::string();
  }
  uint64_t number(const char* key, uint64_t min, uint64_t max) {
    const auto value = message_.number(key);
    if (!value || *value < min || *value > max) {
      fail(std::string("'") + key + "' must be a number from " + std::to_string(min) + " to " +
           std::to_string(max));
      return min;
    }
    return *value;
  }
  uint64_t optional_number(const char* key) {
    if (!message_.value(key)) return 0;
    return number(key, 0, UINT64_MAX);
  }
  // charon's if_id_in / if_id_out (route-based VPN): absent or 0 is the default device.
  uint32_t interface_id() {
    if (!message_.value("if-id")) return 0;
    return static_cast<uint32_t>(number("if-id", 0, UINT32_MAX));
  }
  bool flag(const char* key) {
    if (!message_.value(key)) return false;
    const auto value = message_.boolean(key);
    if (!value) fail(std::string("'") + key + "' must be yes or no");
    return value.value_or(false);
  }
  esp::IpAddress address(const char* key) {
    const std::string value = text(key);
    const auto parsed = esp::IpAddress::parse(value);
    if (!parsed && ok()) fail(std::string("'") + key + "' is not an IP address");
    return parsed.value_or(esp::IpAddress{});
  }
  esp::IpPrefix prefix(const char* key, const std::string& value) {
    const auto parsed = esp::IpPrefix::parse(value);
    if (!parsed) fail(std::string("'") + key + "' has a bad subnet '" + value + "'");
    return parsed.value_or(esp::IpPrefix{});
  }
  // A traffic selector of add-sa's src-ts/dst-ts lists: "PREFIX" (any protocol and
  // port), or "PREFIX[PROTO/FROM-TO]" with numbers, as the plugin writes a selector that
  // names a protocol or ports (ICMP type and code are in the port, as charon keeps them).
  struct TsItem {
    esp::IpPrefix prefix;
    uint8_t protocol = 0;
    uint16_t first = 0, last = 65535;
  };
  std::vector<TsItem> traffic_selectors(const char* key) {
    std::vector<TsItem> out;
    const auto* items = message_.list(key);
    if (!items || items->empty()) {
      fail(std::string("missing list '") + key + "'");
      return out;
    }
    for (const auto& item : *items) {
      TsItem ts;
      const auto bracket = item.find('[');
      ts.prefix = prefix(key, item.substr(0, bracket));
      if (bracket != std::string::npos) {
        unsigned protocol = 0, first = 0, last = 0;
        char end = 0;
        const std::string rest = item.substr(bracket);
        if (std::sscanf(rest.c_str(), "[%3u/%5u-%5u%c", &protocol, &first, &last, &end) != 4 ||
            end != ']' || rest.size() != rest.find(']') + 1 || protocol > 255 || first > 65535 ||
            last > 65535) {
          fail(std::string("'") + key + "' has a bad selector '" + item + "'");
        } else if (first > last) {
          // charon's OPAQUE ports (RFC 4301 4.4.1.1): only packets without ports.
          fail(std::string("'") + key + "': opaque port ranges are not supported");
        } else {
          ts.protocol = static_cast<uint8_t>(protocol);
          ts.first = static_cast<uint16_t>(first);
          ts.last = static_cast<uint16_t>(last);
        }
      }
      out.push_back(ts);
    }
    return out;
  }

 private:
  const vici::Message& message_;
  std::string error_;
};

xfrm::Direction parse_direction(Reader& reader, const std::string& text) {
  const auto direction = xfrm::parse_direction(text);
  if (!direction) reader.fail("'dir' must be in, out or fwd");
  return direction.value_or(xfrm::Direction::out);
}

}  // namespace

std::variant<SaId, std::string> sa_id_from(const vici::Message& request) {
  Reader reader(request);
  SaId id;
  id.spi = static_cast<uint32_t>(reader.number("spi", 1, UINT32_MAX));
  id.destination = reader.address("dst");
  if (!reader.ok()) return reader.error();
  return id;
}

std::variant<SaUpdate, std::string> sa_update_from(const vici::Message& request) {
  Reader reader(request);
  SaUpdate update;
  update.id.spi = static_cast<uint32_t>(reader.number("spi", 1, UINT32_MAX));
  update.source = reader.address("src");
  update.id.destination = reader.address("dst");
  update.new_source = reader.address("new-src");
  update.new_destination = reader.address("new-dst");
  if (reader.ok() && (update.source.family != update.id.destination.family ||
                      update.new_source.family != update.new_destination.family))
    reader.fail("'src' and 'dst' (or 'new-src' and 'new-dst') are of different address families");
  update.encap = reader.flag("encap");
  if (reader.flag("new-encap")) {
    esp::UdpEncapsulation udp;
    udp.source_port = static_cast<uint16_t>(reader.number("new-src-port", 1, 65535));
    udp.destination_port = static_cast<uint16_t>(reader.number("new-dst-port", 1, 65535));
    update.new_udp = udp;
  }
  if (!reader.ok()) return reader.error();
  return update;
}

std::variant<xfrm::SadEntry, std::string> sa_from_add_sa(const vici::Message& request) {
  Reader reader(request);
  xfrm::SadEntry entry;
  esp::SaConfig& config = entry.config;
  config.spi = static_cast<uint32_t>(reader.number("spi", 1, UINT32_MAX));
  config.tunnel_source = reader.address("src");
  config.tunnel_destination = reader.address("dst");
  if (reader.ok() && config.tunnel_source.family != config.tunnel_destination.family)
    reader.fail("'src' and 'dst' are of different address families");
  entry.reqid = static_cast<uint32_t>(reader.number("reqid", 0, UINT32_MAX));
  const bool inbound = reader.flag("inbound");
  entry.direction = inbound ? xfrm::Direction::in : xfrm::Direction::out;

  const std::string algorithm = reader.text("algorithm");
  const auto parsed = crypto::parse_algorithm(algorithm);
  if (!parsed && reader.ok()) reader.fail("unsupported algorithm '" + algorithm + "'");
  if (parsed) config.algorithm = *parsed;
  // AES-CBC comes with an HMAC and its own key (charon hands the two keys over apart);
  // the SA keeps the integrity key after the encryption key.
  const std::string* integrity_key = request.value("integrity-key");
  std::optional<crypto::IntegrityAlgorithm> integrity = crypto::IntegrityAlgorithm::none;
  if (request.value("integrity")) {
    const std::string name = reader.text("integrity");
    integrity = crypto::parse_integrity(name);
    if (!integrity && reader.ok()) reader.fail("unsupported integrity algorithm '" + name + "'");
  }
  if (parsed && integrity && !crypto::valid_transform(*parsed, *integrity) && reader.ok())
    reader.fail(crypto::is_aead(*parsed)
                    ? algorithm + " is an AEAD: no 'integrity' with it"
                    : "unsupported algorithm '" + algorithm +
                          "' without an 'integrity' algorithm (ESP without integrity)");
  if (integrity) config.integrity = *integrity;
  const bool with_integrity = integrity && *integrity != crypto::IntegrityAlgorithm::none;
  const std::string* key = request.value("key");
  if (!key) {
    reader.fail("missing 'key'");
  } else if (with_integrity && !integrity_key) {
    reader.fail("missing 'integrity-key'");
  } else if (!with_integrity && integrity_key) {
    reader.fail("'integrity-key' without an 'integrity' algorithm");
  } else if (parsed && !with_integrity && key->size() != crypto::key_material_length(*parsed)) {
    reader.fail("key material of " + std::to_string(key->size()) + " bytes; " + algorithm +
                " needs " + std::to_string(crypto::key_material_length(*parsed)));
  } else if (parsed && with_integrity &&
             (key->size() != crypto::cipher_key_length(*parsed) ||
              integrity_key->size() != crypto::integrity_key_length(*integrity))) {
    reader.fail("keys of " + std::to_string(key->size()) + " and " +
                std::to_string(integrity_key->size()) + " bytes; " + algorithm + " with " +
                std::string(crypto::integrity_name(*integrity)) + " needs " +
                std::to_string(crypto::cipher_key_length(*parsed)) + " and " +
                std::to_string(crypto::integrity_key_length(*integrity)));
  } else {
    config.key_material.assign(key->begin(), key->end());
    if (with_integrity)
      config.key_material.insert(config.key_material.end(), integrity_key->begin(),
                                 integrity_key->end());
  }
  config.esn = reader.flag("esn");
  // charon's default window is 32; the engine's RFC 6479 bitmap rounds up to 64 and
  // holds at most 65536 (0 turns replay protection off, as charon's replay_window = 0).
  config.replay_window = static_cast<uint32_t>(
      request.value("replay-window") ? reader.number("replay-window", 0, 65536) : 32);
  if (reader.flag("encap")) {
    esp::UdpEncapsulation udp;
    udp.source_port = static_cast<uint16_t>(reader.number("src-port", 1, 65535));
    udp.destination_port = static_cast<uint16_t>(reader.number("dst-port", 1, 65535));
    config.udp_encapsulation = udp;
  }
  // The CHILD_SA's copy_dscp, copy_ecn and copy_df; absent (an older plugin): charon's
  // defaults, out, yes and yes.
  if (const std::string* dscp = request.value("copy-dscp"))
    if (!esp::parse_dscp_copy(*dscp, config.outer_header))
      reader.fail("'copy-dscp' must be out, in, yes or no");
  if (request.value("copy-ecn")) config.outer_header.copy_ecn = reader.flag("copy-ecn");
  if (request.value("copy-df") && !reader.flag("copy-df"))
    config.outer_header.dont_fragment = esp::OuterHeaderPolicy::DontFragment::clear;
  // TFC padding (an outbound SA's child with tfc_padding): pad inner packets up to this
  // many bytes; charon's "mtu" is 2^32-1. The SA table caps it at the SA's tunnel MTU.
  if (request.value("tfc"))
    config.tfc_pad_to = static_cast<uint32_t>(reader.number("tfc", 0, UINT32_MAX));
  entry.lifetimes.soft_bytes = reader.optional_number("soft-bytes");
  entry.lifetimes.hard_bytes = reader.optional_number("hard-bytes");
  entry.lifetimes.soft_packets = reader.optional_number("soft-packets");
  entry.lifetimes.hard_packets = reader.optional_number("hard-packets");
  // The IKE_SA the CHILD_SA belongs to: its rekeys keep their slot in the SA group.
  entry.group_slot = reader.optional_number("ike-sa");
  entry.if_id = reader.interface_id();
  entry.lifetimes.soft_seconds = reader.optional_number("soft-seconds");
  entry.lifetimes.hard_seconds = reader.optional_number("hard-seconds");

  if (inbound) {
    // RFC 4301 5.2: a decrypted packet must come from src-ts and go to dst-ts, with their
    // protocol and ports.
    const auto sources = reader.traffic_selectors("src-ts");
    const auto destinations = reader.traffic_selectors("dst-ts");
    for (const auto& source : sources)
      for (const auto& destination : destinations) {
        if (source.prefix.address.family != destination.prefix.address.family) continue;
        // A pair naming two different protocols matches no packet.
        if (source.protocol != 0 && destination.protocol != 0 &&
            source.protocol != destination.protocol)
          continue;
        config.selectors.push_back({source.prefix, destination.prefix,
                                    source.protocol != 0 ? source.protocol : destination.protocol,
                                    source.first, source.last, destination.first,
                                    destination.last});
      }
    // Without selectors the SA would accept any inner packet: refused, never installed.
    if (reader.ok() && config.selectors.empty())
      reader.fail("no pair of src-ts and dst-ts selectors of one address family and protocol");
  }
  if (!reader.ok()) {
    wipe(config.key_material);  // refused: the copy of the key goes with it
    return reader.error();
  }
  return entry;
}

std::variant<PolicyRequest, std::string> policy_from(const vici::Message& request,
                                                     bool with_action) {
  Reader reader(request);
  PolicyRequest out;
  xfrm::Policy& policy = out.policy;
  policy.direction = parse_direction(reader, reader.text("dir"));
  const std::string source_text = reader.text("src-net");
  const std::string destination_text = reader.text("dst-net");
  const esp::IpPrefix source = reader.prefix("src-net", source_text);
  const esp::IpPrefix destination = reader.prefix("dst-net", destination_text);
  const auto protocol = static_cast<uint8_t>(reader.number("src-proto", 0, 255));
  xfrm::PortRange source_ports{static_cast<uint16_t>(reader.number("src-port-from", 0, 65535)),
                               static_cast<uint16_t>(reader.number("src-port-to", 0, 65535))};
  xfrm::PortRange destination_ports{static_cast<uint16_t>(reader.number("dst-port-from", 0, 65535)),
                                    static_cast<uint16_t>(reader.number("dst-port-to", 0, 65535))};
  if (reader.ok() && source.address.family != destination.address.family)
    reader.fail("'src-net' and 'dst-net' are of different address families");
  // Selectors are named from this gateway's side: an out policy's source is local, an in
  // or fwd policy's source is the remote network.
  const bool outbound = policy.direction == xfrm::Direction::out;
  policy.selector.local = outbound ? source : destination;
  policy.selector.remote = outbound ? destination : source;
  policy.selector.local_ports = outbound ? source_ports : destination_ports;
  policy.selector.remote_ports = outbound ? destination_ports : source_ports;
  policy.selector.protocol = protocol;
  out.key = std::string(xfrm::direction_name(policy.direction)) + " " + source_text + " " +
            std::to_string(source_ports.first) + "-" + std::to_string(source_ports.last) + " " +
            destination_text + " " + std::to_string(destination_ports.first) + "-" +
            std::to_string(destination_ports.last) + " proto " + std::to_string(protocol);
  // Two peers' 0.0.0.0/0 policies on their own interfaces are two policies, not one
  // shared one (charon's policy identity includes the interface id, as the kernel's does).
  policy.if_id = reader.interface_id();
  if (policy.if_id != 0) out.key += " if-id " + std::to_string(policy.if_id);

  if (with_action) {
    const auto action = xfrm::parse_action(reader.text("action"));
    if (action)
      policy.action = *action;
    else if (reader.ok())
      reader.fail("'action' must be protect, bypass or discard");
    policy.reqid = static_cast<uint32_t>(reader.optional_number("reqid"));
    if (policy.action == xfrm::PolicyAction::protect && policy.reqid == 0 && reader.ok())
      reader.fail("a protect policy needs a reqid");
    const uint64_t manual = reader.optional_number("manual-priority");
    const std::string priority_class =
        request.value("priority-class") ? *request.value("priority-class") : "default";
    if (manual > UINT32_MAX) reader.fail("'manual-priority' out of range");
    if (manual != 0)
      policy.priority = static_cast<uint32_t>(manual);
    else if (priority_class == "pass")
      policy.priority = kPassPriority;
    else if (priority_class == "routed")
      policy.priority = kRoutedPriority;
    else if (priority_class == "fallback")
      policy.priority = kFallbackPriority;
    else
      policy.priority = kDefaultPriority;
  }
  if (!reader.ok()) return reader.error();
  return out;
}

vici::Message acquire_event(uint32_t reqid, const packet::FlowKey& packet) {
  vici::Message event;
  event.set("reqid", reqid);
  event.set("src", packet.source.to_string());
  event.set("dst", packet.destination.to_string());
  event.set("proto", packet.protocol);
  if (packet.ports_known) {
    event.set("src-port", packet.source_port);
    event.set("dst-port", packet.destination_port);
  }
  return event;
}

}  // namespace espgw::daemon
