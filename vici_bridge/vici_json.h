// A VICI message as JSON text, for people and scripts (espgwctl --json, the tests' probe):
// sections become objects, lists arrays, values strings. Bytes outside printable ASCII
// are escaped as \u00XX, so binary values (keys never leave espgw) stay readable.
#pragma once

#include <string>

#include "vici_bridge/vici_message.h"

namespace espgw::vici {

std::string to_json(const Section& section);

}  // namespace espgw::vici
