#include "daemon/espgwctl_charon.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "vici_bridge/vici_client.h"

namespace espgw::ctl {

namespace {

using vici::Section;

std::string text_of(const Section& section, const char* key) {
  const std::string* value = section.value(key);
  return value ? *value : "";
}

// charon writes SPIs as bare hex ("c1234567"); espgw as "0x%08x".
std::string espgw_spi(const std::string& charon_spi) {
  if (charon_spi.empty()) return "";
  char* end = nullptr;
  const unsigned long spi = std::strtoul(charon_spi.c_str(), &end, 16);
  if (*end != '\0') return "";
  char text[16];
  std::snprintf(text, sizeof text, "0x%08lx", spi);
  return text;
}

void gather(const Section& event, const std::string& child_filter, std::vector<CharonIkeSa>& out) {
  for (const auto& ike : event.entries()) {
    if (ike.kind != Section::Kind::section) continue;
    CharonIkeSa sa{ike.name,
                   text_of(*ike.child, "uniqueid"),
                   text_of(*ike.child, "state"),
                   text_of(*ike.child, "local-host"),
                   text_of(*ike.child, "remote-host"),
                   {}};
    if (const Section* children = ike.child->section("child-sas"))
      for (const auto& child : children->entries()) {
        if (child.kind != Section::Kind::section) continue;
        const Section& c = *child.child;
        const std::string name = text_of(c, "name");
        if (!child_filter.empty() && name != child_filter) continue;
        sa.children.push_back({name, text_of(c, "uniqueid"), text_of(c, "state"),
                               espgw_spi(text_of(c, "spi-in")), espgw_spi(text_of(c, "spi-out"))});
      }
    if (child_filter.empty() || !sa.children.empty()) out.push_back(std::move(sa));
  }
}

}  // namespace

std::vector<CharonIkeSa> charon_sas(const std::string& vici_socket, const std::string& ike,
                                    const std::string& child) {
  vici::Client charon(vici_socket);
  // charon streams list-sas's results only to clients registered for list-sa.
  charon.subscribe("list-sa");
  vici::Message arguments;
  if (!ike.empty()) arguments.set("ike", ike);
  std::vector<CharonIkeSa> sas;
  charon.request("list-sas", arguments, [&](const vici::Packet& event) {
    if (event.name == "list-sa") gather(event.message, child, sas);
  });
  return sas;
}

}  // namespace espgw::ctl
