// ESP encapsulation and decapsulation in one call, every step on the calling thread: what
// tests, fuzz targets and benchmarks use to drive the engine without the pipeline (which
// runs the steps of esp/encap.h and esp/decap.h on its own threads).
#pragma once

#include "esp/counters.h"
#include "esp/drop_reason.h"
#include "esp/encap.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "esp/wire.h"
#include "support/inbound_sa_table.h"

namespace espgw::test {

// encap_prepare + encap_seal.
esp::DropReason encapsulate(esp::OutboundSa& sa, esp::PacketBuffer& packet,
                            esp::OuterHeaders outer = esp::OuterHeaders::include);

// SA lookup, decap_check, decap_open and decap_finish_each. Drops before an SA is known
// are counted on `engine`, the others on the SA. `outer_traffic_class`: the outer header's
// DSCP and ECN, as a socket reports them.
esp::DropReason decapsulate(const InboundSaTable& table, esp::EngineCounters& engine,
                            esp::PacketBuffer& packet, uint8_t outer_traffic_class = 0);

struct WireDecapResult {
  esp::DropReason reason = esp::DropReason::none;
  esp::WireKind kind = esp::WireKind::esp;
};

// Parses the outer headers (esp::parse_wire) and, for ESP, decapsulates. On success
// `packet` holds the inner packet (kind esp) or the IKE message (kind ike). Drops before an
// SA is known, keepalives included, are counted on `engine`.
WireDecapResult decapsulate_wire(const InboundSaTable& table, esp::EngineCounters& engine,
                                 esp::PacketBuffer& packet, esp::WireInfo* info = nullptr);

}  // namespace espgw::test
