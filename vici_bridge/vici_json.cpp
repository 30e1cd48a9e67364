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

bool is_decimal(const std::string& text) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

class Writer {
 public:
  explicit Writer(const NumberFields& is_number) : is_number_(is_number) {}

  void append(const Section& section, int indent, std::string& out) {
    const std::string pad(static_cast<size_t>(indent + 2), ' ');
    out += "{";
    bool first = true;
    for (const auto& entry : section.entries()) {
      out += first ? "\n" : ",\n";
      first = false;
      out += pad + json_string(entry.name) + ": ";
      path_.push_back(entry.name);
      switch (entry.kind) {
        case Section::Kind::value:
          out += value(entry.value);
          break;
        case Section::Kind::list:
          out += "[";
          for (size_t i = 0; i < entry.items.size(); ++i)
            out += (i ? ", " : "") + value(entry.items[i]);
          out += "]";
          break;
        case Section::Kind::section:
          append(*entry.child, indent + 2, out);
          break;
      }
      path_.pop_back();
    }
    if (!first) {
      out += '\n';
      out.append(static_cast<size_t>(indent), ' ');
    }
    out += "}";
  }

 private:
  std::string value(const std::string& text) const {
    if (is_number_ && is_decimal(text) && is_number_(path_)) return text;
    return json_string(text);
  }

  const NumberFields& is_number_;
  std::vector<std::string> path_;
};

}  // namespace

std::string to_json(const Section& section, const NumberFields& is_number) {
  std::string out;
  Writer(is_number).append(section, 0, out);
  return out;
}

}  // namespace espgw::vici
