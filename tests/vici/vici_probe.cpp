// vici_probe: a small command line client built on espgw::vici::Client, for tests that
// talk to a real VICI server (charon's, or espgw's) and for poking at one by hand.
//
//   vici_probe SOCKET COMMAND [ARG...]         send a command, print the response
//   vici_probe SOCKET subscribe EVENT...       register for events, print each answer
//   vici_probe SOCKET stream COMMAND EVENT [ARG...]
//                                              register for EVENT, run COMMAND, print the
//                                              events it streamed and the response
//   vici_probe SOCKET listen EVENT SECONDS     print EVENTs arriving within SECONDS
//   vici_probe SOCKET serve                    run espgw::vici::Server with canned
//                                              version and list-sas answers until SIGTERM,
//                                              for strongSwan's own client (swanctl)
//
// ARG is KEY=VALUE or KEY=[ITEM,ITEM,...]; dots in KEY open sections ("net.local.auth=psk").
// Output is JSON-like text. Exit status: 0 done, 1 error, 2 usage, 3 unknown command or
// event.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "vici_bridge/vici_client.h"
#include "vici_bridge/vici_json.h"
#include "vici_bridge/vici_server.h"

namespace {

using espgw::vici::Client;
using espgw::vici::Message;
using espgw::vici::Packet;
using espgw::vici::Section;

int usage() {
  std::cerr << "usage: vici_probe SOCKET COMMAND [KEY=VALUE|KEY=[A,B]...]\n"
               "       vici_probe SOCKET subscribe EVENT...\n"
               "       vici_probe SOCKET stream COMMAND EVENT [ARG...]\n"
               "       vici_probe SOCKET listen EVENT SECONDS\n"
               "       vici_probe SOCKET serve\n";
  return 2;
}

void print(const Section& section) {
  std::cout << espgw::vici::to_json(section);
}

void print_event(const Packet& event) {
  std::cout << "event \"" << event.name << "\" ";
  print(event.message);
  std::cout << "\n";
}

Message parse_arguments(const std::vector<std::string>& arguments) {
  Message message;
  for (const std::string& argument : arguments) {
    const size_t equals = argument.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw std::invalid_argument("argument '" + argument + "' is not KEY=VALUE");
    }
    std::string key = argument.substr(0, equals);
    const std::string value = argument.substr(equals + 1);
    Section* section = &message;
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key.erase(0, dot + 1)) {
      const std::string name = key.substr(0, dot);
      // Reuse a section opened by an earlier argument, so arguments can share a parent.
      const Section* existing = section->section(name);
      section = existing ? const_cast<Section*>(existing) : &section->add_section(name);
    }
    if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
      std::vector<std::string> items;
      const std::string inner = value.substr(1, value.size() - 2);
      for (size_t start = 0; !inner.empty() && start <= inner.size();) {
        const size_t comma = std::min(inner.find(',', start), inner.size());
        items.push_back(inner.substr(start, comma - start));
        start = comma + 1;
      }
      section->set_list(key, std::move(items));
    } else {
      section->set(key, value);
    }
  }
  return message;
}

// One IKE_SA with one CHILD_SA, in the shape charon's list-sa events have (vici/README.md,
// "list-sa"), so that swanctl --list-sas can print it.
Message canned_ike_sa() {
  Message event;
  Section& ike = event.add_section("probe");
  ike.set("uniqueid", uint64_t{1}).set("version", uint64_t{2}).set("state", "ESTABLISHED");
  ike.set("local-host", "192.0.2.1").set("local-port", uint64_t{500});
  ike.set("local-id", "gw-a").set("remote-host", "192.0.2.2");
  ike.set("remote-port", uint64_t{500}).set("remote-id", "gw-b");
  ike.set_bool("initiator", true);
  ike.set("initiator-spi", "1111111111111111").set("responder-spi", "2222222222222222");
  Section& child = ike.add_section("child-sas").add_section("net-1");
  child.set("name", "net").set("uniqueid", uint64_t{1}).set("reqid", uint64_t{1});
  child.set("install-time", uint64_t{5});
  child.set("state", "INSTALLED").set("mode", "TUNNEL").set("protocol", "ESP");
  child.set("spi-in", "c0000001").set("spi-out", "c0000002");
  child.set("encr-alg", "AES_GCM_16").set("encr-keysize", uint64_t{128});
  child.set("bytes-in", uint64_t{123456}).set("packets-in", uint64_t{789});
  child.set("bytes-out", uint64_t{654321}).set("packets-out", uint64_t{987});
  child.set_list("local-ts", {"10.1.0.0/16"});
  child.set_list("remote-ts", {"10.2.0.0/16"});
  return event;
}

int serve(const std::string& socket_path) {
  // Blocked before the server thread starts, so that it inherits the mask and only
  // sigwait() below sees the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  espgw::vici::Server server(socket_path);
  server.declare_event("list-sa");
  server.declare_event("ike-updown");
  server.declare_event("child-updown");
  server.handle("version", [](const Message&, espgw::vici::Server::ConnectionId) {
    Message m;
    m.set("daemon", "vici_probe").set("version", "0.1.0");
    m.set("sysname", "Linux").set("release", "test").set("machine", "probe");
    return m;
  });
  server.handle("list-sas", [&server](const Message&, espgw::vici::Server::ConnectionId from) {
    server.publish_to(from, "list-sa", canned_ike_sa());
    return Message{};
  });
  server.start();
  std::cout << "serving " << server.path() << std::endl;
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  server.stop();
  const auto stats = server.stats();
  std::cout << "commands " << stats.commands << ", unknown " << stats.unknown_commands
            << ", malformed " << stats.malformed_packets << std::endl;
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.size() < 2) return usage();
  if (args[1] == "serve") return args.size() == 2 ? serve(args[0]) : usage();
  Client client(args[0]);
  const std::string& verb = args[1];
  if (verb == "subscribe") {
    if (args.size() < 3) return usage();
    int status = 0;
    for (size_t i = 2; i < args.size(); ++i) {
      try {
        client.subscribe(args[i]);
        std::cout << args[i] << ": confirmed\n";
      } catch (const espgw::vici::UnknownEvent&) {
        std::cout << args[i] << ": unknown\n";
        status = 3;
      }
    }
    return status;
  }
  if (verb == "listen") {
    if (args.size() != 4) return usage();
    client.subscribe(args[2]);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(std::stoi(args[3]));
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      if (auto event = client.next_event(left)) print_event(*event);
    }
    return 0;
  }
  if (verb == "stream") {
    if (args.size() < 4) return usage();
    client.subscribe(args[3]);
    size_t events = 0;
    const Message response = client.request(
        args[2], parse_arguments({args.begin() + 4, args.end()}), [&](const Packet& event) {
          ++events;
          print_event(event);
        });
    client.unsubscribe(args[3]);
    std::cout << "events: " << events << "\n";
    print(response);
    std::cout << "\n";
    return 0;
  }
  const Message response = client.request(verb, parse_arguments({args.begin() + 2, args.end()}));
  print(response);
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const espgw::vici::UnknownCommand& e) {
    std::cerr << "vici_probe: unknown command: " << e.what() << "\n";
    return 3;
  } catch (const espgw::vici::UnknownEvent& e) {
    std::cerr << "vici_probe: unknown event: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "vici_probe: " << e.what() << "\n";
    return 1;
  }
}
