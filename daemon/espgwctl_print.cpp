#include "daemon/espgwctl_print.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "daemon/counter_registry.h"

namespace espgw::ctl {

using vici::Message;
using vici::Section;

namespace {

std::string upper(std::string_view name) {
  std::string text(name);
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

std::string value_or(const Section& section, const char* key, const char* fallback) {
  const std::string* value = section.value(key);
  return value ? *value : fallback;
}

// Columns sized to their widest cell.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::vector<std::string> sa_counter_names() {
  std::vector<std::string> names;
  for (const auto& c : espgw::daemon::kOutboundSaCounters) names.emplace_back(c.name);
  for (const auto& c : espgw::daemon::kInboundSaCounters)
    if (std::find(names.begin(), names.end(), c.name) == names.end()) names.emplace_back(c.name);
  return names;
}

std::vector<std::string> sa_header() {
  std::vector<std::string> header = {"SPI",       "DIR",   "ORIGIN", "SRC",      "DST",
                                     "ALGORITHM", "ENCAP", "REQID",  "INTERFACE"};
  for (const auto& name : sa_counter_names()) header.push_back(upper(name));
  for (const char* column : {"IDLE-MS", "LIFETIME", "DROPS"}) header.push_back(column);
  return header;
}

// "-" where an SA has no such counter.
std::vector<std::string> sa_row(const Section& sa) {
  std::string drops;
  if (const Section* reasons = sa.section(std::string(espgw::daemon::kSaDropsSection)))
    for (const auto& reason : reasons->entries())
      drops += (drops.empty() ? "" : ",") + reason.name + "=" + reason.value;
  // ESP in UDP with its ports: what NAT-T (a NAT's port, a float) set.
  std::string encap = value_or(sa, "encap");
  if (sa.value("src-port") && sa.value("dst-port"))
    encap.append(" ").append(value_or(sa, "src-port")).append(":").append(value_or(sa, "dst-port"));
  std::vector<std::string> row = {value_or(sa, "spi"),
                                  value_or(sa, "direction"),
                                  value_or(sa, "origin"),
                                  value_or(sa, "src"),
                                  value_or(sa, "dst"),
                                  value_or(sa, "algorithm"),
                                  encap,
                                  value_or(sa, "reqid"),
                                  value_or(sa, "interface")};
  for (const auto& name : sa_counter_names()) row.push_back(value_or(sa, name.c_str()));
  row.push_back(value_or(sa, "idle-ms"));
  row.push_back(value_or(sa, "lifetime"));
  row.push_back(drops.empty() ? "-" : drops);
  return row;
}

void print_sas(const Message& response) {
  const Section* sas = response.section("sas");
  std::vector<std::vector<std::string>> rows = {sa_header()};
  if (sas)
    for (const auto& entry : sas->entries())
      if (entry.kind == Section::Kind::section) rows.push_back(sa_row(*entry.child));
  std::printf("Security associations: %zu\n", rows.size() - 1);
  print_table(rows);
  if (const Section* groups = response.section("groups")) {
    std::printf("\nECMP groups (outbound SAs that flows are hashed over, by reqid):\n");
    std::vector<std::vector<std::string>> group_rows = {{"REQID", "MEMBERS"}};
    for (const auto& entry : groups->entries()) {
      if (entry.kind != Section::Kind::section) continue;
      std::string members;
      if (const auto* list = entry.child->list("members"))
        for (const auto& spi : *list) members += (members.empty() ? "" : " ") + spi;
      group_rows.push_back({entry.name, members.empty() ? "(empty)" : members});
    }
    print_table(group_rows);
  }
}

void print_policies(const Message& response) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "DIR", "LOCAL", "REMOTE", "PROTO", "PRIORITY", "ACTION", "REQID", "INTERFACE"}};
  if (const Section* policies = response.section("policies"))
    for (const auto& entry : policies->entries()) {
      if (entry.kind != Section::Kind::section) continue;
      const Section& p = *entry.child;
      rows.push_back({entry.name, value_or(p, "direction"), value_or(p, "local"),
                      value_or(p, "remote"), value_or(p, "protocol"), value_or(p, "priority"),
                      value_or(p, "action"), value_or(p, "reqid"), value_or(p, "interface")});
    }
  std::printf("Policies: %zu\n", rows.size() - 1);
  print_table(rows);
}

void print_counters(const Section& response, std::string_view name, std::string_view title) {
  const Section* section = response.section(std::string(name));
  std::printf("%.*s:", static_cast<int>(title.size()), title.data());
  bool any = false;
  if (section)
    for (const auto& entry : section->entries())
      if (entry.kind == Section::Kind::value) {
        std::printf(" %s=%s", entry.name.c_str(), entry.value.c_str());
        any = true;
      }
  std::printf("%s\n", any ? "" : " none");
}

void print_stats(const Message& response) {
  std::printf("TUN %s, mtu %s%s, lan mtu %s, crypto %s, charon %s\n",
              value_or(response, "tun").c_str(), value_or(response, "tunnel-mtu").c_str(),
              response.boolean("jumbo-segments").value_or(false) ? " (jumbo segments)" : "",
              value_or(response, "lan-mtu").c_str(), value_or(response, "crypto-backend").c_str(),
              response.boolean("charon-attached").value_or(false) ? "attached" : "not attached");
  for (const auto& counter : espgw::daemon::kGatewayCounters)
    if (counter.place == espgw::daemon::StatusPlace::top)
      std::printf("%.*s (%.*s): %s\n", static_cast<int>(counter.name.size()), counter.name.data(),
                  static_cast<int>(counter.help.size()), counter.help.data(),
                  value_or(response, std::string(counter.name).c_str()).c_str());
  std::printf("receive steering (RPS) on the TUN device: %s\n",
              value_or(response, "tun-rps").c_str());
  if (const auto* addresses = response.list("local-addresses")) {
    std::string text;
    for (const auto& address : *addresses) text += (text.empty() ? "" : ", ") + address;
    std::printf("local addresses (aN-: the prefix of that address's socket counters): %s\n",
                text.c_str());
  }
  for (const auto& section : espgw::daemon::kStatsCounterSections)
    if (section.key != "workers") print_counters(response, section.key, section.title);
  std::vector<std::vector<std::string>> rows = {{"WORKER", "PACKETS", "SHARE"}};
  if (const Section* workers = response.section("workers")) {
    double total = 0;
    for (const auto& entry : workers->entries()) total += std::strtod(entry.value.c_str(), nullptr);
    for (const auto& entry : workers->entries()) {
      char share[16];
      std::snprintf(share, sizeof share, "%.1f%%",
                    total > 0 ? 100.0 * std::strtod(entry.value.c_str(), nullptr) / total : 0.0);
      rows.push_back({entry.name, entry.value, share});
    }
  }
  if (rows.size() == 1) {
    // No workers: the gateway runs `workers = inline`, its readers do the crypto.
    std::printf("per-worker load: no workers (readers run to completion)\n");
    return;
  }
  std::printf("per-worker load:\n");
  print_table(rows);
}

}  // namespace espgw::ctl
