// espgwctl: shows what a running espgw holds, through its control socket.
//   espgwctl [--socket PATH] [--json] [status|sas|policies|stats]
// status (the default) is sas + stats. --json prints the daemon's answers as JSON objects
// (sections become objects, lists arrays; counters and other numbers are JSON numbers as
// daemon/control_schema.h describes them, every other value a string), for scripts.
// A client of the daemon's control protocol: its tables take the counters' names from the
// daemon's registry (daemon/counter_registry.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "daemon/control_schema.h"
#include "daemon/counter_registry.h"
#include "vici_bridge/vici_client.h"
#include "vici_bridge/vici_json.h"

using espgw::vici::Client;
using espgw::vici::Message;
using espgw::vici::Packet;
using espgw::vici::Section;
using espgw::vici::to_json;

namespace {

constexpr const char* kDefaultSocket = "/run/espgw/control.sock";

void usage() {
  std::fprintf(stderr,
               "usage: espgwctl [--socket PATH] [--json] [status|sas|policies|stats]\n"
               "  status    SAs (counters, drop reasons), ECMP groups and gateway statistics\n"
               "  sas       SAs and ECMP groups\n"
               "  policies  the SPD\n"
               "  stats     gateway drops, WAN sockets, per-worker load, control socket\n"
               "default socket: %s\n",
               kDefaultSocket);
}

std::string value_or(const Section& section, const char* key, const char* fallback = "-") {
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

std::string upper(std::string_view name) {
  std::string text(name);
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// The SAs' counters: outbound's, then inbound's that outbound lacks; "-" where an SA has none.
std::vector<std::string_view> sa_counter_names() {
  std::vector<std::string_view> names;
  for (const auto& c : espgw::daemon::kOutboundSaCounters) names.push_back(c.name);
  for (const auto& c : espgw::daemon::kInboundSaCounters)
    if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  return names;
}

void print_sas(const Message& response) {
  const Section* sas = response.section("sas");
  const std::vector<std::string_view> counters = sa_counter_names();
  std::vector<std::string> header = {"SPI", "DIR",       "ORIGIN", "SRC",
                                     "DST", "ALGORITHM", "ENCAP",  "REQID"};
  for (const auto name : counters) header.push_back(upper(name));
  for (const char* column : {"IDLE-MS", "LIFETIME", "DROPS"}) header.push_back(column);
  std::vector<std::vector<std::string>> rows = {header};
  if (sas) {
    for (const auto& entry : sas->entries()) {
      if (entry.kind != Section::Kind::section) continue;
      const Section& sa = *entry.child;
      std::string drops;
      if (const Section* reasons = sa.section(std::string(espgw::daemon::kSaDropsSection)))
        for (const auto& reason : reasons->entries())
          drops += (drops.empty() ? "" : ",") + reason.name + "=" + reason.value;
      // ESP in UDP with its ports: what NAT-T (a NAT's port, a float) set.
      std::string encap = value_or(sa, "encap");
      if (sa.value("src-port") && sa.value("dst-port"))
        encap += " " + value_or(sa, "src-port") + ":" + value_or(sa, "dst-port");
      std::vector<std::string> row = {value_or(sa, "spi"),
                                      value_or(sa, "direction"),
                                      value_or(sa, "origin"),
                                      value_or(sa, "src"),
                                      value_or(sa, "dst"),
                                      value_or(sa, "algorithm"),
                                      encap,
                                      value_or(sa, "reqid")};
      for (const auto name : counters) row.push_back(value_or(sa, std::string(name).c_str()));
      row.push_back(value_or(sa, "idle-ms"));
      row.push_back(value_or(sa, "lifetime"));
      row.push_back(drops.empty() ? "-" : drops);
      rows.push_back(std::move(row));
    }
  }
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
      {"ID", "DIR", "LOCAL", "REMOTE", "PROTO", "PRIORITY", "ACTION", "REQID"}};
  if (const Section* policies = response.section("policies"))
    for (const auto& entry : policies->entries()) {
      if (entry.kind != Section::Kind::section) continue;
      const Section& p = *entry.child;
      rows.push_back({entry.name, value_or(p, "direction"), value_or(p, "local"),
                      value_or(p, "remote"), value_or(p, "protocol"), value_or(p, "priority"),
                      value_or(p, "action"), value_or(p, "reqid")});
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

// list-sas and list-policies stream one event per entry (a gateway with thousands of SAs
// does not fit in one message); they are gathered back into the section an answer
// without streaming carries, so the output is the same either way.
Message list_or_request(Client& client, const std::string& command) {
  const std::string event = command == "list-sas"        ? "list-sa"
                            : command == "list-policies" ? "list-policy"
                                                         : "";
  if (event.empty()) return client.request(command);
  client.subscribe(event);
  Message gathered;
  Section& entries = gathered.add_section(command == "list-sas" ? "sas" : "policies");
  Message answer = client.request(command, {}, [&](const Packet& packet) {
    for (const auto& entry : packet.message.entries())
      if (entry.kind == Section::Kind::section) entries.add_section(entry.name) = *entry.child;
  });
  client.unsubscribe(event);
  if (answer.number("streamed").value_or(0) == 0) return answer;  // all in the answer
  for (const auto& entry : answer.entries()) {
    if (entry.name == "streamed") continue;
    if (entry.kind == Section::Kind::section)
      gathered.add_section(entry.name) = *entry.child;
    else if (entry.kind == Section::Kind::value)
      gathered.set(entry.name, entry.value);
    else
      gathered.set_list(entry.name, entry.items);
  }
  return gathered;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket = kDefaultSocket;
  std::string command = "status";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--socket" || arg == "-s") && i + 1 < argc) {
      socket = argv[++i];
    } else if (arg == "--json" || arg == "-j") {
      json = true;
    } else if (arg == "status" || arg == "sas" || arg == "policies" || arg == "stats") {
      command = arg;
    } else {
      usage();
      return 2;
    }
  }
  try {
    Client client(socket);
    std::map<std::string, Message> answers;
    const std::vector<std::string> requests =
        command == "status"     ? std::vector<std::string>{"list-sas", "stats"}
        : command == "sas"      ? std::vector<std::string>{"list-sas"}
        : command == "policies" ? std::vector<std::string>{"list-policies"}
                                : std::vector<std::string>{"stats"};
    for (const auto& request : requests) answers[request] = list_or_request(client, request);
    if (json) {
      if (answers.size() == 1) {
        const std::string& request = answers.begin()->first;
        const auto is_number = [&](const std::vector<std::string>& path) {
          return espgw::daemon::is_number(request, path);
        };
        std::printf("%s\n", to_json(answers.begin()->second, is_number).c_str());
      } else {
        Message combined;
        for (const auto& [name, answer] : answers) combined.add_section(name) = answer;
        // The first name is the request the rest of the path is an answer of.
        const auto is_number = [](const std::vector<std::string>& path) {
          return path.size() > 1 &&
                 espgw::daemon::is_number(path[0], {path.begin() + 1, path.end()});
        };
        std::printf("%s\n", to_json(combined, is_number).c_str());
      }
      return 0;
    }
    if (answers.count("list-sas")) print_sas(answers["list-sas"]);
    if (answers.count("list-policies")) print_policies(answers["list-policies"]);
    if (answers.count("stats")) {
      if (answers.count("list-sas")) std::printf("\n");
      print_stats(answers["stats"]);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "espgwctl: %s\n", error.what());
    return 1;
  }
  return 0;
}
