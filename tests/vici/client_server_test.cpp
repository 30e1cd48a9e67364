// The control socket server and the client against each other over real unix sockets in
// a temporary directory: commands, errors, events, malformed and slow peers, the socket
// file's mode, and many clients at once. The suite name says "Concurrent" because
// every test runs the server thread beside the test's own (the TSan build runs them).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <system_error>
#include <thread>

#include "support/temporary_directory.h"
#include "vici_bridge/vici_client.h"
#include "vici_bridge/vici_server.h"

namespace espgw::vici {
namespace {

using namespace std::chrono_literals;

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A socket that speaks whatever bytes a test hands it.
class RawSocket {
 public:
  explicit RawSocket(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::system_error(errno, std::generic_category(), "connect " + path);
    }
  }
  ~RawSocket() { close(fd_); }
  void write_all(std::span<const uint8_t> bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) throw std::system_error(errno, std::generic_category(), "send");
      done += static_cast<size_t>(n);
    }
  }
  // Reads until the peer closes; false if it did not within the timeout.
  bool closed_by_peer(std::chrono::milliseconds timeout = 5s) {
    uint8_t buffer[4096];
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }
  // Reads and decodes `count` packets.
  std::vector<Packet> read_packets(size_t count, std::chrono::milliseconds timeout = 10s) {
    std::vector<Packet> packets;
    FrameReader reader;
    uint8_t buffer[65536];
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (packets.size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      reader.feed(std::span(buffer, static_cast<size_t>(n)));
      while (auto packet = reader.next()) packets.push_back(std::move(*packet));
      if (reader.failed()) break;
    }
    return packets;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

Message sample_message() {
  Message m;
  m.set("name", "net").set("bytes", uint64_t{123456789});
  m.set("binary", std::string_view("\0\1\2\xff", 4));
  Section& child = m.add_section("child");
  child.set_list("local-ts", {"10.1.0.0/16", "fd00:1::/64"});
  child.add_section("deeper").set_bool("up", true);
  return m;
}

class ViciServerConcurrent : public ::testing::Test {
 protected:
  void SetUp() override {
    server = std::make_unique<Server>(socket_path());
    server->handle("echo", [](const Message& m, Server::ConnectionId) { return m; });
    server->handle("fail", [](const Message&, Server::ConnectionId) -> Message {
      throw std::runtime_error("it broke");
    });
    server->handle("whoami", [](const Message&, Server::ConnectionId id) {
      Message m;
      m.set("id", uint64_t{id});
      return m;
    });
    // Streams `count` list-item events before its response, as charon's list-sas does.
    server->handle("stream", [this](const Message& request, Server::ConnectionId from) {
      const uint64_t count = request.number("count").value_or(0);
      for (uint64_t i = 0; i < count; ++i) {
        Message item;
        item.set("index", i);
        server->publish_to(from, "list-item", item);
      }
      Message done;
      done.set_bool("success", true);
      return done;
    });
    server->handle("sleep", [](const Message& request, Server::ConnectionId) {
      std::this_thread::sleep_for(std::chrono::milliseconds(request.number("ms").value_or(0)));
      return Message{};
    });
    server->declare_event("list-item");
    server->declare_event("ike-updown");
    server->on_disconnect([this](Server::ConnectionId id) {
      std::lock_guard lock(mutex);
      disconnected.push_back(id);
    });
    server->start();
  }

  std::string socket_path() const { return dir.path() + "/espgw.vici"; }
  std::vector<Server::ConnectionId> disconnected_ids() {
    std::lock_guard lock(mutex);
    return disconnected;
  }

  // In this order: the server's last disconnect callbacks (from its destructor) still
  // find the vector, and its socket file is removed before the directory.
  test::TemporaryDirectory dir{"vici-test"};
  std::mutex mutex;
  std::vector<Server::ConnectionId> disconnected;
  std::unique_ptr<Server> server;
};

TEST_F(ViciServerConcurrent, CommandRoundTrip) {
  Client client(socket_path());
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
  EXPECT_EQ(client.request("echo"), Message{});
  EXPECT_EQ(server->stats().commands, 2u);
  EXPECT_EQ(server->stats().connections_accepted, 1u);
}

TEST_F(ViciServerConcurrent, ClientAcceptsUnixUri) {
  Client client("unix://" + socket_path());
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
}

TEST_F(ViciServerConcurrent, UnknownCommandThrowsAndConnectionStaysUsable) {
  Client client(socket_path());
  EXPECT_THROW(client.request("no-such-command"), UnknownCommand);
  try {
    client.request("no-such-command");
  } catch (const std::runtime_error& e) {  // UnknownCommand is a runtime_error
    EXPECT_NE(std::string(e.what()).find("no-such-command"), std::string::npos);
  }
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
  EXPECT_EQ(server->stats().unknown_commands, 2u);
  EXPECT_EQ(server->stats().commands, 1u);
}

TEST_F(ViciServerConcurrent, HandlerExceptionBecomesErrorResponse) {
  Client client(socket_path());
  const Message response = client.request("fail");
  EXPECT_EQ(response.boolean("success"), false);
  ASSERT_NE(response.value("errmsg"), nullptr);
  EXPECT_EQ(*response.value("errmsg"), "it broke");
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
}

TEST_F(ViciServerConcurrent, EventsReachSubscribersOnly) {
  Client subscriber(socket_path());
  Client bystander(socket_path());
  subscriber.subscribe("ike-updown");
  Message event;
  event.set_bool("up", true);
  EXPECT_EQ(server->publish("ike-updown", event), 1u);
  EXPECT_EQ(server->publish("list-item", event), 0u);
  EXPECT_EQ(server->publish("undeclared", event), 0u);
  const std::optional<Packet> got = subscriber.next_event(5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->type, PacketType::event);
  EXPECT_EQ(got->name, "ike-updown");
  EXPECT_EQ(got->message, event);
  EXPECT_FALSE(bystander.next_event(100ms));
  EXPECT_FALSE(subscriber.next_event(100ms));

  subscriber.unsubscribe("ike-updown");
  EXPECT_EQ(server->publish("ike-updown", event), 0u);
  EXPECT_THROW(subscriber.unsubscribe("ike-updown"), UnknownEvent);
  EXPECT_FALSE(subscriber.next_event(100ms));
}

TEST_F(ViciServerConcurrent, UndeclaredEventIsUnknown) {
  Client client(socket_path());
  EXPECT_THROW(client.subscribe("child-updown"), UnknownEvent);
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
}

TEST_F(ViciServerConcurrent, StreamedEventsPrecedeTheResponse) {
  Client client(socket_path());
  client.subscribe("list-item");
  Message request;
  request.set("count", uint64_t{50});
  std::vector<uint64_t> seen;
  const Message response = client.request("stream", request, [&](const Packet& event) {
    EXPECT_EQ(event.name, "list-item");
    seen.push_back(event.message.number("index").value());
  });
  EXPECT_EQ(response.boolean("success"), true);
  ASSERT_EQ(seen.size(), 50u);
  for (uint64_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);

  // Without a callback they wait in the queue, in order.
  request.set("count", uint64_t{3});
  client.request("stream", request);
  EXPECT_TRUE(client.has_queued_event());
  for (uint64_t i = 0; i < 3; ++i) {
    const auto event = client.next_event(0ms);
    ASSERT_TRUE(event);
    EXPECT_EQ(event->message.number("index"), i);
  }
  EXPECT_FALSE(client.next_event(50ms));
}

TEST_F(ViciServerConcurrent, StreamsGoToTheRequesterOnly) {
  Client requester(socket_path());
  Client other(socket_path());
  requester.subscribe("list-item");
  other.subscribe("list-item");
  Message request;
  request.set("count", uint64_t{5});
  size_t events = 0;
  requester.request("stream", request, [&](const Packet&) { ++events; });
  EXPECT_EQ(events, 5u);
  EXPECT_FALSE(other.next_event(100ms));
  // publish_to() honours registration like publish().
  Client unsubscribed(socket_path());
  const auto id = unsubscribed.request("whoami").number("id").value();
  EXPECT_FALSE(server->publish_to(id, "list-item", Message{}));
  EXPECT_FALSE(server->publish_to(999999, "list-item", Message{}));
  const auto requester_id = requester.request("whoami").number("id").value();
  EXPECT_TRUE(server->publish_to(requester_id, "list-item", Message{}));
  EXPECT_TRUE(requester.next_event(5s));
}

TEST_F(ViciServerConcurrent, CallbackExceptionIsRethrownAfterTheResponse) {
  Client client(socket_path());
  client.subscribe("list-item");
  Message request;
  request.set("count", uint64_t{10});
  int calls = 0;
  EXPECT_THROW(client.request("stream", request,
                              [&](const Packet&) {
                                ++calls;
                                throw std::logic_error("callback failed");
                              }),
               std::logic_error);
  EXPECT_EQ(calls, 1);
  // The remaining events and the response were consumed: the stream is in step.
  EXPECT_FALSE(client.next_event(50ms));
  EXPECT_EQ(client.request("echo", sample_message()), sample_message());
}

TEST_F(ViciServerConcurrent, MalformedInputClosesOnlyThatConnection) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"unknown packet type", {0, 0, 0, 1, 9}},
      {"oversize length", {0, 8, 0, 1}},
      {"zero length", {0, 0, 0, 0}},
      {"broken message", {0, 0, 0, 5, 0, 1, 'x', 4, 1}},
      {"unnamed request", {0, 0, 0, 2, 0, 0}},
      {"response from a client", {0, 0, 0, 1, 1}},
      {"event from a client", {0, 0, 0, 3, 7, 1, 'e'}},
  };
  Client bystander(socket_path());
  bystander.subscribe("ike-updown");
  uint64_t expected = 0;
  for (const auto& [what, bytes] : cases) {
    RawSocket raw(socket_path());
    raw.write_all(bytes);
    EXPECT_TRUE(raw.closed_by_peer()) << what;
    ++expected;
    EXPECT_EQ(server->stats().malformed_packets, expected) << what;
    EXPECT_EQ(bystander.request("echo", sample_message()), sample_message()) << what;
  }
  // A good request ahead of the garbage on the same connection is still answered.
  RawSocket raw(socket_path());
  std::vector<uint8_t> bytes = encode_packet({PacketType::cmd_request, "echo", sample_message()});
  bytes.insert(bytes.end(), {0, 0, 0, 1, 0xff});
  raw.write_all(bytes);
  const auto packets = raw.read_packets(1);
  ASSERT_EQ(packets.size(), 1u);
  EXPECT_EQ(packets[0].message, sample_message());
  EXPECT_TRUE(raw.closed_by_peer());
  // The bystander's subscription survived all of it.
  EXPECT_EQ(server->publish("ike-updown", Message{}), 1u);
  EXPECT_TRUE(bystander.next_event(5s));
}

TEST_F(ViciServerConcurrent, PipelinedRequestsAreAllAnsweredInOrder) {
  // Far more responses than the socket buffers hold: the server must hold back reading,
  // not drop the client or grow without bound.
  RawSocket raw(socket_path());
  std::vector<uint8_t> stream;
  constexpr size_t kRequests = 2000;
  for (size_t i = 0; i < kRequests; ++i) {
    Message m;
    m.set("i", uint64_t{i});
    m.set("pad", std::string_view(std::string(2000, 'p')));
    const auto bytes = encode_packet({PacketType::cmd_request, "echo", m});
    stream.insert(stream.end(), bytes.begin(), bytes.end());
  }
  std::thread writer([&] { raw.write_all(stream); });
  const auto packets = raw.read_packets(kRequests, 30s);
  writer.join();
  ASSERT_EQ(packets.size(), kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_EQ(packets[i].type, PacketType::cmd_response);
    ASSERT_EQ(packets[i].message.number("i"), i);
  }
  EXPECT_EQ(server->stats().slow_clients_dropped, 0u);
}

TEST_F(ViciServerConcurrent, SlowSubscriberIsDroppedOthersKeepGoing) {
  RawSocket slow(socket_path());
  slow.write_all(encode_packet({PacketType::event_register, "ike-updown", {}}));
  ASSERT_EQ(slow.read_packets(1).at(0).type, PacketType::event_confirm);
  Client fast(socket_path());
  fast.subscribe("ike-updown");

  Message big;
  big.set("blob", std::string_view(std::string(60000, 'x')));
  for (int i = 0; i < 6; ++i)
    big.set("blob" + std::to_string(i), std::string_view(std::string(60000, 'y')));
  // ~420 KiB per event: 8 MiB of queue plus the socket buffers is passed within ~30.
  size_t published = 0;
  size_t dropped_at = 0;
  for (int i = 0; i < 100 && dropped_at == 0; ++i) {
    published += server->publish("ike-updown", big);
    // The fast client keeps up.
    ASSERT_TRUE(fast.next_event(5s));
    if (server->stats().slow_clients_dropped > 0) dropped_at = static_cast<size_t>(i) + 1;
  }
  ASSERT_GT(dropped_at, 0u) << "never dropped";
  EXPECT_EQ(server->stats().slow_clients_dropped, 1u);
  EXPECT_LT(published, 2 * dropped_at);
  EXPECT_EQ(server->publish("ike-updown", big), 1u);
  EXPECT_TRUE(fast.next_event(5s));
  EXPECT_TRUE(slow.closed_by_peer(10s));
}

// What carries charon's IKE and its SA expiries (daemon/control_service.cpp): a flood of
// bulk events behind a client that reads slowly is shed at kMaxQueuedBulk instead of
// overflowing the connection (which closed it, losing whatever else was queued), and an
// urgent event overtakes the bulk ones still queued.
TEST_F(ViciServerConcurrent, BulkEventsAreShedAndUrgentOnesGoFirst) {
  RawSocket slow(socket_path());
  for (const char* event : {"ike-updown", "list-item"}) {
    slow.write_all(encode_packet({PacketType::event_register, event, {}}));
    ASSERT_EQ(slow.read_packets(1).at(0).type, PacketType::event_confirm);
  }
  Message bulk;
  bulk.set("blob", std::string_view(std::string(60000, 'b')));
  // 12 MiB of bulk events, more than kMaxQueuedOutput: the old behaviour dropped the client.
  size_t queued = 0, shed_total = 0;
  for (int i = 0; i < 200; ++i) {
    size_t shed = 0;
    queued += server->publish("ike-updown", bulk, Server::Priority::bulk, &shed);
    shed_total += shed;
  }
  EXPECT_EQ(queued + shed_total, 200u);
  EXPECT_GT(shed_total, 100u);
  EXPECT_EQ(server->stats().bulk_events_shed, shed_total);
  EXPECT_EQ(server->stats().slow_clients_dropped, 0u);
  Message urgent;
  urgent.set("spi", uint64_t{0xc0000001});
  ASSERT_EQ(server->publish("list-item", urgent, Server::Priority::urgent), 1u);
  const auto packets = slow.read_packets(queued + 1, 30s);
  ASSERT_EQ(packets.size(), queued + 1);
  size_t urgent_at = packets.size();
  for (size_t i = 0; i < packets.size(); ++i)
    if (packets[i].name == "list-item") urgent_at = i;
  // Bulk events the server thread had taken to write were written first: what the socket
  // buffer held and at most 64 KiB more (one of these events), however late the server
  // thread woke. It then came before the rest (with 1 MiB of them queued and a socket
  // buffer of a few hundred KiB, at least a few).
  EXPECT_LT(urgent_at + 2, packets.size())
      << "urgent event at " << urgent_at << " of " << packets.size();
  // Once the backlog is gone, bulk events are queued again.
  EXPECT_EQ(server->publish("ike-updown", bulk, Server::Priority::bulk), 1u);
  EXPECT_EQ(slow.read_packets(1).size(), 1u);
}

TEST_F(ViciServerConcurrent, DisconnectsAreReportedWithTheirIds) {
  Server::ConnectionId id = 0;
  {
    Client client(socket_path());
    id = client.request("whoami").number("id").value();
  }
  EXPECT_TRUE(eventually([&] { return disconnected_ids().size() == 1; }));
  EXPECT_EQ(disconnected_ids(), std::vector<Server::ConnectionId>{id});
  Client another(socket_path());
  EXPECT_NE(another.request("whoami").number("id").value(), id);
}

TEST_F(ViciServerConcurrent, StopClosesClients) {
  Client client(socket_path());
  client.request("echo");
  server->stop();
  EXPECT_EQ(disconnected_ids().size(), 1u);
  EXPECT_THROW(client.request("echo", {}, 2s), std::runtime_error);
  // Once broken, the client says so without touching the socket.
  EXPECT_THROW(client.request("echo"), std::runtime_error);
  server->stop();  // idempotent
}

TEST_F(ViciServerConcurrent, RequestTimesOut) {
  Client client(socket_path());
  Message request;
  request.set("ms", uint64_t{300});
  EXPECT_THROW(client.request("sleep", request, 50ms), std::runtime_error);
  // A late response would answer the next request, so the client refuses to go on.
  EXPECT_THROW(client.request("echo"), std::runtime_error);
  Client fresh(socket_path());
  EXPECT_EQ(fresh.request("echo", sample_message()), sample_message());
}

TEST_F(ViciServerConcurrent, SocketFileIsOwnerOnly) {
  struct stat st {};
  ASSERT_EQ(stat(socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(ViciServerConcurrent, ConfigurationAfterStartIsRefused) {
  EXPECT_THROW(server->handle("late", {}), std::logic_error);
  EXPECT_THROW(server->declare_event("late"), std::logic_error);
  EXPECT_THROW(server->start(), std::logic_error);
}

TEST_F(ViciServerConcurrent, ManyClientsWithConcurrentPublishers) {
  constexpr int kClients = 12;
  constexpr int kRequests = 150;
  constexpr int kPublishers = 2;
  constexpr uint64_t kEvents = 300;
  std::atomic<bool> publishing{true};
  std::atomic<int> subscribed{0};
  std::vector<std::thread> publishers;
  for (int p = 0; p < kPublishers; ++p) {
    publishers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kEvents; ++i) {
        Message event;
        event.set("publisher", uint64_t(p)).set("seq", i);
        server->publish("ike-updown", event);
        if (i % 16 == 0) std::this_thread::yield();
      }
      publishing = false;
    });
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      try {
        Client client(socket_path());
        client.subscribe("ike-updown");
        ++subscribed;
        for (int r = 0; r < kRequests; ++r) {
          Message m;
          m.set("client", uint64_t(c)).set("request", uint64_t(r));
          m.set("pad", std::string_view(std::string(static_cast<size_t>(r * 7 % 997), 'c')));
          if (client.request("echo", m) != m) ++failures;
        }
        // Each publisher's events arrive in the order it published them.
        uint64_t next[kPublishers] = {};
        bool first[kPublishers] = {true, true};
        while (auto event = client.next_event(publishing ? 200ms : 20ms)) {
          const auto p = event->message.number("publisher").value();
          const auto seq = event->message.number("seq").value();
          if (!first[p] && seq != next[p]) ++failures;
          first[p] = false;
          next[p] = seq + 1;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << c << ": " << e.what();
      }
    });
  }
  for (auto& t : clients) t.join();
  for (auto& t : publishers) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(subscribed, kClients);
  EXPECT_EQ(server->stats().commands, uint64_t{kClients} * kRequests);
  EXPECT_EQ(server->stats().connections_accepted, uint64_t{kClients});
  EXPECT_EQ(server->stats().slow_clients_dropped, 0u);
  EXPECT_EQ(server->stats().malformed_packets, 0u);
}

}  // namespace
}  // namespace espgw::vici
