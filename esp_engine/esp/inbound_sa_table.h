// The engine's inbound SAs by SPI.
#pragma once

#include "esp/security_association.h"
#include "esp/spi_table.h"

namespace espgw::esp {

using InboundSaTable = SpiTable<InboundSa>;

}  // namespace espgw::esp
