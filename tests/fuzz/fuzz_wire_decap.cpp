// Arbitrary bytes as a packet from the WAN: outer IPv4/IPv6, UDP demux, ESP header,
// SPI lookup, replay pre-check and ICV check must all refuse garbage with a counted
// reason and never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "esp/wire.h"
#include "fuzz/fuzz_sas.h"
#include "support/sequential_esp.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static test::InboundSaTable* table = [] {
    auto* t = new test::InboundSaTable;
    for (uint32_t i = 0; i < fuzz::kFuzzSaCount; ++i)
      t->add(std::make_shared<esp::InboundSa>(fuzz::fuzz_sa_config(fuzz::kFirstFuzzSpi + i),
                                              crypto::ipsec_mb_backend()));
    return t;
  }();
  esp::EngineCounters engine;
  esp::PacketBuffer packet(size + 256);
  if (!packet.assign({data, size})) abort();
  const auto result = test::decapsulate_wire(*table, engine, packet);
  // Without the key nothing can be authentic: an ESP packet must never be delivered.
  if (result.kind == esp::WireKind::esp && result.reason == esp::DropReason::none) abort();
  return 0;
}
