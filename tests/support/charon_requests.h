// The control-socket requests the espgw charon plugin sends (docs/strongswan.md), for the
// tests and benchmarks that play charon's part. Each builder fills in what every such
// request carries; a caller sets what its case adds or changes (NAT-T ports, lifetimes):
// VICI keys are unique, so setting a key again replaces it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "vici_bridge/vici_message.h"

namespace espgw::test {

// add-sa for a tunnel between `local` and `peer` carrying 10.1.0.0/16 <-> 10.2.0.0/16:
// AES-128-GCM with `key` (key and salt, 20 bytes), no ESN, a 32-packet window, raw ESP,
// no lifetimes.
inline vici::Message add_sa_request(uint32_t spi, uint32_t reqid, bool inbound,
                                    const std::string& local, const std::string& peer,
                                    const std::string& key) {
  vici::Message m;
  m.set("spi", uint64_t{spi});
  m.set("src", inbound ? peer : local);
  m.set("dst", inbound ? local : peer);
  m.set("reqid", reqid);
  m.set_bool("inbound", inbound);
  m.set("algorithm", "aes-gcm-128");
  m.set("key", key);
  m.set_bool("esn", false);
  m.set("replay-window", 32);
  m.set_bool("encap", false);
  m.set_list("src-ts", {inbound ? "10.2.0.0/16" : "10.1.0.0/16"});
  m.set_list("dst-ts", {inbound ? "10.1.0.0/16" : "10.2.0.0/16"});
  return m;
}

// One side of a policy's traffic selector.
struct Selector {
  std::string net;
  uint64_t protocol = 0;  // 0: any
  uint64_t port_from = 0;
  uint64_t port_to = 65535;
};

// add-policy (with `reqid`: a protect policy of the default class) or, without, the
// selectors alone, as del-policy carries them.
inline vici::Message policy_request(const char* direction, const Selector& source,
                                    const Selector& destination, std::optional<uint32_t> reqid) {
  vici::Message m;
  m.set("dir", direction);
  m.set("src-net", source.net);
  m.set("src-proto", source.protocol);
  m.set("src-port-from", source.port_from);
  m.set("src-port-to", source.port_to);
  m.set("dst-net", destination.net);
  m.set("dst-proto", destination.protocol);
  m.set("dst-port-from", destination.port_from);
  m.set("dst-port-to", destination.port_to);
  if (reqid) {
    m.set("action", "protect");
    m.set("priority-class", "default");
    m.set("manual-priority", 0);
    m.set("reqid", *reqid);
  }
  return m;
}

}  // namespace espgw::test
