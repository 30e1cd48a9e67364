#include "daemon/metrics_text.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/counter_registry.h"

namespace espgw::daemon {

namespace {

using vici::Section;
using Labels = std::vector<std::pair<std::string_view, std::string>>;

std::string metric_name(std::string_view counter) {
  std::string name = "espgw_";
  for (char c : counter) name += c == '-' ? '_' : c;
  return name;
}

bool is_gauge(std::string_view counter) {
  return std::find(std::begin(kGaugeCounters), std::end(kGaugeCounters), counter) !=
         std::end(kGaugeCounters);
}

std::string_view help_of(std::string_view family, std::string_view counter) {
  static const std::vector<CounterDoc> docs = all_counters();
  for (const auto& doc : docs)
    if (doc.family == family && doc.name == counter) return doc.help;
  return {};
}

class Writer {
 public:
  explicit Writer(MetricsFormat format) : format_(format) { text_.reserve(1 << 16); }

  // Starts a family; its samples must follow before the next family (OpenMetrics).
  void family(const std::string& name, bool counter, std::string_view help) {
    name_ = name;
    counter_ = counter;
    const std::string typed =
        counter && format_ == MetricsFormat::prometheus_text ? name + "_total" : name;
    text_ += "# TYPE " + typed + (counter ? " counter\n" : " gauge\n");
    if (!help.empty()) {
      text_ += "# HELP " + typed + " ";
      for (char c : help) text_ += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
      text_ += "\n";
    }
  }

  void sample(const Labels& labels, std::string_view value) {
    text_ += name_;
    if (counter_) text_ += "_total";
    if (!labels.empty()) {
      text_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) text_ += ',';
        text_ += labels[i].first;
        text_ += "=\"";
        for (char c : labels[i].second)
          text_ += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
        text_ += '"';
      }
      text_ += '}';
    }
    text_ += ' ';
    // Values come from the daemon as decimal text; anything else would break the format.
    const bool digits = !value.empty() && std::all_of(value.begin(), value.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    text_ += digits ? std::string(value) : "NaN";
    text_ += '\n';
  }

  std::string finish() {
    if (format_ == MetricsFormat::openmetrics) text_ += "# EOF\n";
    return std::move(text_);
  }

 private:
  MetricsFormat format_;
  std::string text_;
  std::string name_;
  bool counter_ = true;
};

std::string value_of(const Section* section, std::string_view key) {
  if (!section) return "0";
  const std::string* value = section->value(key);
  return value ? *value : "0";
}

// A WAN socket counter's entry name, "[aK-](udpN|raw)-NAME", split into its address
// prefix ("" or "aK-"), socket ("udp0", "raw") and counter name; false for the gateway's
// own counters in the wan section.
bool split_wan_name(std::string_view entry, std::string& prefix, std::string& socket,
                    std::string& counter) {
  for (const auto& c : kWanCounters) {
    std::string suffix = "-";
    suffix += c.name;
    if (entry.size() <= suffix.size() || !entry.ends_with(suffix)) continue;
    std::string_view head = entry.substr(0, entry.size() - suffix.size());
    prefix.clear();
    if (head.size() > 1 && head[0] == 'a' && head.find('-') != std::string_view::npos) {
      const size_t dash = head.find('-');
      prefix = std::string(head.substr(0, dash + 1));
      head.remove_prefix(dash + 1);
    }
    if (head != "raw" && !head.starts_with("udp")) continue;
    socket = std::string(head);
    counter = std::string(c.name);
    return true;
  }
  return false;
}

// The local address a socket prefix stands for: the first local address has none, the
// K-th further one "aK-", which its entry in local-addresses carries too.
std::string address_of(const Section& stats, const std::string& prefix) {
  const auto* addresses = stats.list("local-addresses");
  if (!addresses || addresses->empty()) return prefix;
  if (prefix.empty()) return addresses->front();
  for (const auto& address : *addresses)
    if (address.starts_with(prefix)) return address.substr(prefix.size());
  return prefix;
}

void write_gateway(Writer& out, const Section& stats) {
  out.family("espgw_sas", false, "SAs installed, outbound and inbound");
  out.sample({}, value_of(&stats, "sas"));
  out.family("espgw_charon_sas", false, "SAs installed by charon");
  out.sample({}, value_of(&stats, "charon-sas"));
  out.family("espgw_charon_attached", false, "1 when a charon is attached to the control socket");
  out.sample({}, stats.boolean("charon-attached").value_or(false) ? "1" : "0");
  out.family("espgw_tunnel_mtu", false, "the TUN device's MTU");
  out.sample({}, value_of(&stats, "tunnel-mtu"));
  // The gateway's counters at the top of stats and in its wan section: one family each.
  const Section* wan = stats.section("wan");
  for (const auto& c : kGatewayCounters) {
    if (c.place == StatusPlace::gateway_drops) continue;
    out.family(metric_name(c.name), true, c.help);
    out.sample({}, value_of(c.place == StatusPlace::top ? &stats : wan, c.name));
  }
  out.family("espgw_gateway_drops", true,
             "packets dropped before they reached an SA, by reason (docs/counters.md)");
  for (const auto& c : kGatewayCounters)
    if (c.place == StatusPlace::gateway_drops)
      out.sample({{"reason", std::string(c.name)}},
                 value_of(stats.section("gateway-drops"), c.name));
  // Every reason, zero included, so that rate() has a series from the start.
  out.family("espgw_engine_drops", true,
             "packets dropped where no SA was known, by reason (docs/counters.md)");
  for (size_t i = 1; i < esp::kDropReasonCount; ++i) {
    const auto name = esp::drop_reason_name(static_cast<esp::DropReason>(i));
    out.sample({{"reason", std::string(name)}}, value_of(stats.section("engine-drops"), name));
  }
}

void write_wan_sockets(Writer& out, const Section& stats) {
  const Section* wan = stats.section("wan");
  if (!wan) return;
  for (const auto& c : kWanCounters) {
    bool started = false;
    for (const auto& entry : wan->entries()) {
      std::string prefix, socket, counter;
      if (entry.kind != Section::Kind::value ||
          !split_wan_name(entry.name, prefix, socket, counter) || counter != c.name)
        continue;
      if (!started) out.family(metric_name("wan-socket-" + counter), !is_gauge(c.name), c.help);
      started = true;
      out.sample({{"address", address_of(stats, prefix)}, {"socket", socket}}, entry.value);
    }
  }
}

template <typename Table>
void write_section(Writer& out, const Section& stats, std::string_view section,
                   const Table& table) {
  for (const auto& c : table) {
    out.family(metric_name(std::string(section) + "-" + std::string(c.name)), !is_gauge(c.name),
               c.help);
    out.sample({}, value_of(stats.section(std::string(section)), c.name));
  }
}

void write_workers(Writer& out, const Section& stats) {
  out.family("espgw_worker_packets", true, "packets the worker handled");
  if (const Section* workers = stats.section("workers"))
    for (const auto& entry : workers->entries())
      if (entry.kind == Section::Kind::value) out.sample({{"worker", entry.name}}, entry.value);
}

// Per SA: a few series each, labelled by SPI, direction and reqid; drop reasons only
// where non-zero, so that 10,000 quiet SAs add no drop series.
void write_sas(Writer& out, const Section& sas) {
  std::vector<std::pair<const Section*, Labels>> rows;
  for (const auto& entry : sas.entries()) {
    if (entry.kind != Section::Kind::section) continue;
    const Section& sa = *entry.child;
    rows.push_back({&sa,
                    {{"spi", value_of(&sa, "spi")},
                     {"direction", value_of(&sa, "direction")},
                     {"reqid", value_of(&sa, "reqid")}}});
  }
  std::vector<std::string_view> names;
  for (const auto& c : kOutboundSaCounters) names.push_back(c.name);
  for (const auto& c : kInboundSaCounters)
    if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  for (const auto name : names) {
    out.family(metric_name("sa-" + std::string(name)), !is_gauge(name), help_of("sa", name));
    for (const auto& [sa, labels] : rows)
      if (const std::string* value = sa->value(name)) out.sample(labels, *value);
  }
  out.family("espgw_sa_drops", true, "packets an SA dropped, by reason (non-zero reasons only)");
  for (const auto& [sa, labels] : rows)
    if (const Section* drops = sa->section(std::string(kSaDropsSection)))
      for (const auto& reason : drops->entries()) {
        Labels with_reason = labels;
        with_reason.emplace_back("reason", reason.name);
        out.sample(with_reason, reason.value);
      }
}

}  // namespace

std::string metrics_text(const vici::Message& stats, const vici::Message* sas,
                         MetricsFormat format) {
  Writer out(format);
  write_gateway(out, stats);
  write_wan_sockets(out, stats);
  write_section(out, stats, "pipeline", kPipelineCounters);
  write_section(out, stats, "control-socket", kControlSocketCounters);
  write_workers(out, stats);
  if (sas)
    if (const Section* list = sas->section("sas")) write_sas(out, *list);
  return out.finish();
}

}  // namespace espgw::daemon
