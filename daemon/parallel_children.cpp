#include "daemon/parallel_children.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "daemon/log.h"
#include "util/thread_name.h"
#include "vici_bridge/vici_client.h"

namespace espgw::daemon {

namespace {

using namespace std::chrono_literals;
constexpr auto kRecheck = 5s;       // reconcile at least this often
constexpr auto kEventWait = 500ms;  // how often the thread looks at the stop flag
constexpr auto kInitiateTimeout = 15s;

// INSTALLED CHILD_SAs per child config name, from list-sas's streamed list-sa events:
// { IKE_SA name { ..., child-sas { unique name { name = CHILD, state = INSTALLED } } } }.
void count_children(const vici::Section& event, std::map<std::string, unsigned>& counts) {
  for (const auto& ike : event.entries()) {
    if (ike.kind != vici::Section::Kind::section) continue;
    const vici::Section* children = ike.child->section("child-sas");
    if (!children) continue;
    for (const auto& child : children->entries()) {
      if (child.kind != vici::Section::Kind::section) continue;
      const std::string* name = child.child->value("name");
      const std::string* state = child.child->value("state");
      if (name && state && *state == "INSTALLED") ++counts[*name];
    }
  }
}

}  // namespace

ParallelChildren::ParallelChildren(std::string charon_vici, std::vector<ParallelChild> children)
    : charon_vici_(std::move(charon_vici)), children_(std::move(children)) {}

ParallelChildren::~ParallelChildren() {
  stop();
}

void ParallelChildren::start() {
  running_.store(true);
  thread_ = std::thread([this] { run(); });
}

void ParallelChildren::stop() {
  running_.store(false);
  if (thread_.joinable()) thread_.join();
}

bool ParallelChildren::reconcile() {
  try {
    vici::Client charon(charon_vici_);
    // charon streams list-sas's results only to clients registered for list-sa.
    charon.subscribe("list-sa");
    std::map<std::string, unsigned> counts;
    charon.request("list-sas", {}, [&](const vici::Packet& event) {
      if (event.name == "list-sa") count_children(event.message, counts);
    });
    for (const auto& child : children_) {
      unsigned have = counts[child.name];
      while (have < child.count && running_.load()) {
        vici::Message arguments;
        arguments.set("child", child.name);
        arguments.set("timeout",
                      static_cast<uint64_t>(std::chrono::milliseconds(kInitiateTimeout).count()));
        const vici::Message answer = charon.request(
            "initiate", arguments, [](const vici::Packet&) {}, kInitiateTimeout + 5s);
        if (!answer.boolean("success").value_or(false)) {
          const std::string* why = answer.value("errmsg");
          log(LogLevel::warn,
              "ECMP: initiating CHILD_SA %s %u of %u failed (%s); charon needs reuse_ikesa = no "
              "to give each its own IKE_SA; retrying in %lld s",
              child.name.c_str(), have + 1, child.count, why ? why->c_str() : "no reason given",
              static_cast<long long>(std::chrono::seconds(kRecheck).count()));
          break;
        }
        ++have;
        log(LogLevel::info, "ECMP: CHILD_SA %s %u of %u up", child.name.c_str(), have, child.count);
      }
    }
    return true;
  } catch (const std::exception& error) {
    log(LogLevel::debug, "ECMP: charon's VICI socket: %s", error.what());
    return false;
  }
}

void ParallelChildren::run() {
  name_this_thread("ecmp-children");
  std::optional<vici::Client> events;
  auto next_check = std::chrono::steady_clock::now();
  bool reported_down = false;
  while (running_.load()) {
    if (!events) {
      try {
        events.emplace(charon_vici_);
        events->subscribe("child-updown");
        events->subscribe("ike-updown");
        next_check = std::chrono::steady_clock::now();  // reconcile at once
      } catch (const std::exception& error) {
        events.reset();
        if (!reported_down)
          log(LogLevel::warn, "ECMP: charon's VICI socket %s: %s; retrying", charon_vici_.c_str(),
              error.what());
        reported_down = true;
        std::this_thread::sleep_for(kEventWait * 2);
        continue;
      }
    }
    bool changed = false;
    try {
      // Drain what arrived: any CHILD_SA or IKE_SA going up or down may change a count.
      while (events->next_event(changed ? 0ms : kEventWait)) changed = true;
    } catch (const std::exception&) {
      events.reset();  // charon went away; reconnect
      continue;
    }
    if (changed || std::chrono::steady_clock::now() >= next_check) {
      reported_down = !reconcile();
      next_check = std::chrono::steady_clock::now() + kRecheck;
    }
  }
}

}  // namespace espgw::daemon
