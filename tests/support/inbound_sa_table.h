// Inbound SAs by SPI, for tests, fuzz targets and benchmarks that decapsulate without the
// pipeline (the pipeline keeps its inbound channels in a SpiTable of its own).
#pragma once

#include "esp/security_association.h"
#include "esp/spi_table.h"

namespace espgw::test {

using InboundSaTable = SpiTable<esp::InboundSa>;

}  // namespace espgw::test
