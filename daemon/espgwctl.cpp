// espgwctl: shows and steers a running espgw through its control socket.
//   espgwctl [OPTION]... [status|sas|children|policies|stats|metrics|reload|log-level [LEVEL]|
//             reset-counters]
// status (the default) is sas + stats. --json prints the daemon's answers as JSON objects
// (sections become objects, lists arrays; counters and other numbers are JSON numbers as
// daemon/control_schema.h describes them, every other value a string), for scripts.
// --ike and --child keep the SAs of charon's IKE_SAs and CHILD_SAs of those names (asked
// of charon's VICI socket, espgwctl_charon.h). `metrics` prints every counter as
// OpenMetrics text (daemon/metrics_text.h, docs/metrics.md). The options and exit
// statuses are those of docs/man/espgwctl.8.
#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/control_schema.h"
#include "daemon/espgwctl_charon.h"
#include "daemon/espgwctl_print.h"
#include "daemon/metrics_text.h"
#include "vici_bridge/vici_client.h"
#include "vici_bridge/vici_json.h"

using espgw::vici::Client;
using espgw::vici::Message;
using espgw::vici::Packet;
using espgw::vici::Section;
using espgw::vici::to_json;
using namespace espgw::ctl;

namespace {

constexpr const char* kDefaultSocket = "/run/espgw/control.sock";
constexpr const char* kDefaultCharonSocket = "/var/run/charon.vici";
constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2;

void print_usage(std::FILE* to) {
  std::fprintf(
      to,
      "Usage: espgwctl [OPTION]... [COMMAND]\n"
      "Shows and steers a running espgw through its control socket.\n\n"
      "Commands:\n"
      "  status           SAs (counters, drop reasons), ECMP groups and statistics (default)\n"
      "  sas              SAs and ECMP groups\n"
      "  children         SAs under charon's IKE_SAs and CHILD_SAs, as swanctl --list-sas\n"
      "  policies         the SPD\n"
      "  stats            gateway drops, WAN sockets, per-worker load, control socket\n"
      "  metrics          every counter as OpenMetrics text (node_exporter textfile)\n"
      "  reload           re-read espgw.conf's run-time settings and the static SA file\n"
      "  log-level [LVL]  show, or set (error, warn, info, debug), the daemon's log level\n"
      "  reset-counters   count from zero in what espgwctl shows (not in charon's lifetimes,\n"
      "                   swanctl or the counter log)\n\n"
      "Options:\n"
      "  -s, --socket PATH       espgw's control socket (default %s)\n"
      "  -j, --json              print the answers as JSON, numbers typed\n"
      "  -i, --ike NAME          only the SAs of charon's IKE_SAs of connection NAME\n"
      "  -c, --child NAME        only the SAs of charon's CHILD_SAs of child NAME\n"
      "      --charon-vici PATH  charon's VICI socket for --ike, --child, children\n"
      "                          (default %s)\n"
      "      --format FORMAT     metrics: openmetrics (default) or prometheus (text 0.0.4,\n"
      "                          for node_exporter's textfile collector)\n"
      "      --no-sa-series      metrics: gateway-wide series only, none per SA\n"
      "  -h, --help              show this help and exit\n"
      "  -V, --version           show the version and exit\n\n"
      "Exit status: 0 success, 1 the daemon (or charon) could not be reached or refused the\n"
      "command, 2 bad command line. See espgwctl(8).\n",
      kDefaultSocket, kDefaultCharonSocket);
}

struct Options {
  std::string socket = kDefaultSocket;
  std::string charon_vici = kDefaultCharonSocket;
  std::string command = "status";
  std::string argument;  // log-level's level
  std::string ike, child;
  bool json = false;
  bool sa_series = true;
  espgw::daemon::MetricsFormat format = espgw::daemon::MetricsFormat::openmetrics;
};

const std::set<std::string> kCommands = {"status",  "sas",    "children",  "policies",      "stats",
                                         "metrics", "reload", "log-level", "reset-counters"};

// nullopt: go on; else the exit status.
std::optional<int> parse_options(int argc, char** argv, Options& options) {
  enum { kCharonVici = 256, kFormat, kNoSaSeries };
  static const option kLong[] = {{"socket", required_argument, nullptr, 's'},
                                 {"json", no_argument, nullptr, 'j'},
                                 {"ike", required_argument, nullptr, 'i'},
                                 {"child", required_argument, nullptr, 'c'},
                                 {"charon-vici", required_argument, nullptr, kCharonVici},
                                 {"format", required_argument, nullptr, kFormat},
                                 {"no-sa-series", no_argument, nullptr, kNoSaSeries},
                                 {"help", no_argument, nullptr, 'h'},
                                 {"version", no_argument, nullptr, 'V'},
                                 {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "s:ji:c:hV", kLong, nullptr)) != -1;) {
    switch (c) {
      case 's':
        options.socket = optarg;
        break;
      case 'j':
        options.json = true;
        break;
      case 'i':
        options.ike = optarg;
        break;
      case 'c':
        options.child = optarg;
        break;
      case kCharonVici:
        options.charon_vici = optarg;
        break;
      case kNoSaSeries:
        options.sa_series = false;
        break;
      case kFormat:
        if (std::strcmp(optarg, "openmetrics") == 0)
          options.format = espgw::daemon::MetricsFormat::openmetrics;
        else if (std::strcmp(optarg, "prometheus") == 0)
          options.format = espgw::daemon::MetricsFormat::prometheus_text;
        else {
          std::fprintf(stderr, "espgwctl: --format is openmetrics or prometheus\n");
          return kExitUsage;
        }
        break;
      case 'h':
        print_usage(stdout);
        return kExitOk;
      case 'V':
        std::printf("espgwctl %s\n", ESPGW_VERSION);
        return kExitOk;
      default:
        std::fprintf(stderr, "Try 'espgwctl --help' for more information.\n");
        return kExitUsage;
    }
  }
  if (optind < argc) {
    options.command = argv[optind++];
    if (!kCommands.count(options.command)) {
      std::fprintf(stderr, "espgwctl: unknown command '%s'\nTry 'espgwctl --help'.\n",
                   options.command.c_str());
      return kExitUsage;
    }
    if (options.command == "log-level" && optind < argc) options.argument = argv[optind++];
  }
  if (optind < argc) {
    std::fprintf(stderr, "espgwctl: unexpected argument '%s'\nTry 'espgwctl --help'.\n",
                 argv[optind]);
    return kExitUsage;
  }
  return std::nullopt;
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

// The SAs charon's IKE_SAs and CHILD_SAs of the --ike/--child names hold: (SPI, direction).
std::set<std::pair<std::string, std::string>> named_spis(const std::vector<CharonIkeSa>& sas) {
  std::set<std::pair<std::string, std::string>> spis;
  for (const auto& ike : sas)
    for (const auto& child : ike.children) {
      spis.insert({child.spi_in, "in"});
      spis.insert({child.spi_out, "out"});
    }
  return spis;
}

// list-sas's answer with only the SAs in `keep`.
Message only_sas(const Message& answer, const std::set<std::pair<std::string, std::string>>& keep) {
  Message kept;
  for (const auto& entry : answer.entries()) {
    if (entry.kind == Section::Kind::section && entry.name == "sas") {
      Section& sas = kept.add_section("sas");
      for (const auto& sa : entry.child->entries()) {
        if (sa.kind != Section::Kind::section) continue;
        const std::string spi = value_or(*sa.child, "spi");
        if (keep.count({spi, value_or(*sa.child, "direction")}))
          sas.add_section(sa.name) = *sa.child;
      }
    } else if (entry.kind == Section::Kind::section) {
      kept.add_section(entry.name) = *entry.child;
    } else if (entry.kind == Section::Kind::value) {
      kept.set(entry.name, entry.value);
    } else {
      kept.set_list(entry.name, entry.items);
    }
  }
  return kept;
}

// espgw's SAs under charon's IKE_SAs and CHILD_SAs, as swanctl --list-sas shows them.
void print_children(const std::vector<CharonIkeSa>& charon, const Message& list_sas) {
  std::map<std::pair<std::string, std::string>, const Section*> by_spi;
  if (const Section* sas = list_sas.section("sas"))
    for (const auto& entry : sas->entries())
      if (entry.kind == Section::Kind::section)
        by_spi[{value_or(*entry.child, "spi"), value_or(*entry.child, "direction")}] =
            entry.child.get();
  for (const auto& ike : charon) {
    std::printf("%s: #%s, %s, %s === %s\n", ike.name.c_str(), ike.uniqueid.c_str(),
                ike.state.c_str(), ike.local_host.c_str(), ike.remote_host.c_str());
    for (const auto& child : ike.children) {
      std::printf("  %s: #%s, %s, SPIs %s_i %s_o\n", child.name.c_str(), child.uniqueid.c_str(),
                  child.state.c_str(), child.spi_in.c_str(), child.spi_out.c_str());
      std::vector<std::vector<std::string>> rows = {sa_header()};
      for (const auto& key : {std::pair{child.spi_in, std::string("in")},
                              std::pair{child.spi_out, std::string("out")}})
        if (const auto found = by_spi.find(key); found != by_spi.end())
          rows.push_back(sa_row(*found->second));
      if (rows.size() == 1) {
        std::printf("    (not installed in espgw)\n");
        continue;
      }
      for (auto& row : rows) row.insert(row.begin(), "   ");
      print_table(rows);
    }
  }
}

void print_json(const std::map<std::string, Message>& answers) {
  if (answers.size() == 1) {
    const std::string& request = answers.begin()->first;
    const auto is_number = [&](const std::vector<std::string>& path) {
      return espgw::daemon::is_number(request, path);
    };
    std::printf("%s\n", to_json(answers.begin()->second, is_number).c_str());
    return;
  }
  Message combined;
  for (const auto& [name, answer] : answers) combined.add_section(name) = answer;
  // The first name is the request the rest of the path is an answer of.
  const auto is_number = [](const std::vector<std::string>& path) {
    return path.size() > 1 && espgw::daemon::is_number(path[0], {path.begin() + 1, path.end()});
  };
  std::printf("%s\n", to_json(combined, is_number).c_str());
}

// reload, log-level and reset-counters: the answer, or its errmsg and exit status 1.
int administer(Client& client, const Options& options) {
  Message arguments;
  if (options.command == "log-level" && !options.argument.empty())
    arguments.set("level", options.argument);
  const Message answer = client.request(options.command, arguments);
  if (options.json) {
    std::printf("%s\n",
                to_json(answer, [](const std::vector<std::string>&) { return false; }).c_str());
  } else if (options.command == "reset-counters") {
    std::printf("counters reset\n");
  } else if (options.command == "log-level") {
    if (const std::string* level = answer.value("level"))
      std::printf("log level %s\n", level->c_str());
  } else {
    auto show = [&](const char* key, const char* title) {
      if (const auto* items = answer.list(key); items && !items->empty()) {
        std::printf("%s:", title);
        for (const auto& item : *items) std::printf(" %s", item.c_str());
        std::printf("\n");
      }
    };
    show("applied", "applied");
    show("need-restart", "changed, effective at the next restart (old value kept)");
    show("errors", "errors");
  }
  if (answer.boolean("success").value_or(false)) return kExitOk;
  const std::string* why = answer.value("errmsg");
  std::fprintf(stderr, "espgwctl: %s\n", why ? why->c_str() : "the daemon refused");
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const auto exit_status = parse_options(argc, argv, options)) return *exit_status;
  try {
    Client client(options.socket);
    if (options.command == "reload" || options.command == "log-level" ||
        options.command == "reset-counters")
      return administer(client, options);
    const bool named = !options.ike.empty() || !options.child.empty();
    std::vector<CharonIkeSa> charon;
    if (named || options.command == "children")
      charon = charon_sas(options.charon_vici, options.ike, options.child);
    std::map<std::string, Message> answers;
    const std::string& command = options.command;
    const std::vector<std::string> requests =
        command == "status"                         ? std::vector<std::string>{"list-sas", "stats"}
        : command == "sas" || command == "children" ? std::vector<std::string>{"list-sas"}
        : command == "policies"                     ? std::vector<std::string>{"list-policies"}
        : command == "metrics" && options.sa_series ? std::vector<std::string>{"stats", "list-sas"}
                                                    : std::vector<std::string>{"stats"};
    for (const auto& request : requests) answers[request] = list_or_request(client, request);
    if (named && answers.count("list-sas"))
      answers["list-sas"] = only_sas(answers["list-sas"], named_spis(charon));
    if (command == "metrics") {
      const auto sas = answers.find("list-sas");
      std::fputs(
          espgw::daemon::metrics_text(answers["stats"],
                                      sas == answers.end() ? nullptr : &sas->second, options.format)
              .c_str(),
          stdout);
      return kExitOk;
    }
    if (options.json) {
      print_json(answers);
      return kExitOk;
    }
    if (command == "children") {
      print_children(charon, answers["list-sas"]);
      return kExitOk;
    }
    if (answers.count("list-sas")) print_sas(answers["list-sas"]);
    if (answers.count("list-policies")) print_policies(answers["list-policies"]);
    if (answers.count("stats")) {
      if (answers.count("list-sas")) std::printf("\n");
      print_stats(answers["stats"]);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "espgwctl: %s\n", error.what());
    return kExitFailure;
  }
  return kExitOk;
}
