// A VICI message as JSON text, for people and scripts (espgwctl --json, the tests' probe):
// sections become objects, lists arrays, values strings, or numbers where the caller says
// so. Bytes outside printable ASCII are escaped as \u00XX, so binary values (keys never
// leave espgw) stay readable.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "vici_bridge/vici_message.h"

namespace espgw::vici {

// Whether the value at `path` (the names from the message's root to it; a list's name for
// its items) is a number. VICI carries every value as bytes, so only a description of the
// message can tell: a value that merely looks like digits may be a name.
using NumberFields = std::function<bool(const std::vector<std::string>& path)>;

// Values `is_number` picks are written as JSON numbers when they are unsigned decimal
// integers (anything else stays a string, so the output is always valid JSON).
std::string to_json(const Section& section, const NumberFields& is_number = {});

}  // namespace espgw::vici
