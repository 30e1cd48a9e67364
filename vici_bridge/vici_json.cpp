#include "vici_bridge/vici_json.h"

#include <cstdio>

namespace espgw::vici {

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void append(const Section& section, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  out += "{";
  bool first = true;
  for (const auto& entry : section.entries()) {
    out += first ? "\n" : ",\n";
    first = false;
    out += pad + json_string(entry.name) + ": ";
    switch (entry.kind) {
      case Section::Kind::value:
        out += json_string(entry.value);
        break;
      case Section::Kind::list:
        out += "[";
        for (size_t i = 0; i < entry.items.size(); ++i)
          out += (i ? ", " : "") + json_string(entry.items[i]);
        out += "]";
        break;
      case Section::Kind::section:
        append(*entry.child, indent + 2, out);
        break;
    }
  }
  if (!first) out += "\n" + std::string(static_cast<size_t>(indent), ' ');
  out += "}";
}

}  // namespace

std::string to_json(const Section& section) {
  std::string out;
  append(section, 0, out);
  return out;
}

}  // namespace espgw::vici
