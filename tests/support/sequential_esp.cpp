#include "support/sequential_esp.h"

#include "esp/decap.h"

namespace espgw::test {

using esp::DropReason;

DropReason encapsulate(esp::OutboundSa& sa, esp::PacketBuffer& packet, esp::OuterHeaders outer) {
  esp::PreparedEncap prepared;
  const DropReason reason = esp::encap_prepare(sa, packet, outer, prepared);
  if (reason == DropReason::none) esp::encap_seal(sa, packet, prepared);
  return reason;
}

DropReason decapsulate(const InboundSaTable& table, esp::EngineCounters& engine,
                       esp::PacketBuffer& packet, uint8_t outer_traffic_class) {
  const auto spi = esp::esp_spi(packet);
  if (!spi) {
    engine.count(DropReason::too_short);
    return DropReason::too_short;
  }
  // The per-thread cache keeps the SA alive until this thread's next lookup, which is
  // after the last step returns.
  esp::InboundSa* sa = table.find_cached(*spi);
  if (!sa) {
    engine.count(DropReason::no_sa);
    return DropReason::no_sa;
  }
  esp::PreparedDecap prepared;
  prepared.outer_traffic_class = outer_traffic_class;
  DropReason reason = esp::decap_check(*sa, packet, prepared);
  if (reason == DropReason::none) reason = esp::decap_open(prepared, packet);
  if (reason == DropReason::none) {
    esp::FinishItem item{&prepared, &packet, DropReason::none, 0};
    esp::decap_finish_each(std::span<esp::FinishItem>(&item, 1));
    reason = item.reason;
  }
  return reason;
}

WireDecapResult decapsulate_wire(const InboundSaTable& table, esp::EngineCounters& engine,
                                 esp::PacketBuffer& packet, esp::WireInfo* info_out) {
  esp::WireInfo info;
  const DropReason parsed = esp::parse_wire(packet.bytes(), info);
  if (info_out) *info_out = info;
  if (parsed != DropReason::none) {
    engine.count(parsed);
    return {parsed, info.kind};
  }
  packet.narrow(info.payload_offset, info.payload_length);
  switch (info.kind) {
    case esp::WireKind::nat_keepalive:
      engine.count(DropReason::nat_keepalive);
      return {DropReason::nat_keepalive, esp::WireKind::nat_keepalive};
    case esp::WireKind::ike:
      return {DropReason::none, esp::WireKind::ike};
    case esp::WireKind::esp:
      break;
  }
  return {decapsulate(table, engine, packet, info.traffic_class), esp::WireKind::esp};
}

}  // namespace espgw::test
