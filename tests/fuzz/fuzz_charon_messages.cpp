// The control socket's translation of the charon plugin's requests (add-sa, update-sa,
// del-sa, add-policy, ...) on arbitrary VICI messages: it must refuse with an error or return a
// record that is safe to install, never crash. The message decoder itself is
// fuzz_vici's target; here the input is whatever it accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <variant>

#include "crypto/aead.h"
#include "daemon/charon_messages.h"
#include "vici_bridge/vici_message.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto decoded = vici::decode_message({data, size});
  if (!decoded.message) return 0;
  const vici::Message& message = *decoded.message;

  const auto sa = daemon::sa_from_add_sa(message);
  if (const auto* entry = std::get_if<xfrm::SadEntry>(&sa)) {
    // What the parser accepts, the SA constructors take without throwing.
    const esp::SaConfig& config = entry->config;
    if (config.spi == 0) abort();
    if (!crypto::valid_transform(config.algorithm, config.integrity)) abort();
    if (config.key_material.size() !=
        crypto::key_material_length(config.algorithm, config.integrity))
      abort();
    if (config.tunnel_source.family != config.tunnel_destination.family) abort();
    if (config.replay_window > 65536) abort();
  } else if (std::get<std::string>(sa).empty()) {
    abort();  // a refusal always says why
  }
  (void)daemon::sa_id_from(message);
  const auto update = daemon::sa_update_from(message);
  if (const auto* move = std::get_if<daemon::SaUpdate>(&update)) {
    // What the parser accepts names an SA and keeps each side's families equal.
    if (move->id.spi == 0) abort();
    if (move->source.family != move->id.destination.family) abort();
    if (move->new_source.family != move->new_destination.family) abort();
    if (move->new_udp && (move->new_udp->source_port == 0 || move->new_udp->destination_port == 0))
      abort();
  } else if (std::get<std::string>(update).empty()) {
    abort();
  }
  for (bool with_action : {true, false}) {
    const auto policy = daemon::policy_from(message, with_action);
    if (const auto* request = std::get_if<daemon::PolicyRequest>(&policy)) {
      if (request->key.empty()) abort();
      const auto& selector = request->policy.selector;
      if (selector.local.address.family != selector.remote.address.family) abort();
      // Two policies that differ only in their interface id (route-based VPN) never
      // share a key: the key names every id but the default device's.
      if ((request->policy.if_id != 0) != (request->key.find(" if-id ") != std::string::npos))
        abort();
    }
  }
  return 0;
}
