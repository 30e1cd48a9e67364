// The inside of vici::Server (vici_server.h), shared by the files that implement it:
// vici_server.cpp (the listening socket and the public calls), vici_server_loop.cpp (the
// poll loop and each connection's socket I/O), vici_server_dispatch.cpp (requests and
// event registrations) and vici_server_events.cpp (publishing events to the outboxes).
//
// Output to a connection goes through its Outbox, the one piece of state shared between
// publish() (any thread) and the server thread, under State::mutex. The server thread
// moves queued packets out of the Outbox in one swap and writes them without holding the
// lock, so publish() waits at most for a queue append or a swap, never for I/O.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "vici_bridge/vici_packet.h"
#include "vici_bridge/vici_server.h"

namespace espgw::vici::server_detail {

using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

// A connection stops taking new requests while this much of its output is unsent, so a
// client that pipelines requests without reading responses is slowed, not dropped. Events
// are not held back; they can only overflow (kMaxQueuedOutput).
constexpr size_t kPauseReadingAbove = kMaxPacketSize;
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxIovecs = 64;
// Bytes the server thread takes from an outbox to write at a time: about what a Unix
// socket's send buffer holds, so that an urgent event waits behind little more than that.
constexpr size_t kTakeToSend = 64 * 1024;
// After accept() fails for want of descriptors or memory, the listening socket stays
// readable; waiting this long before retrying keeps the loop from spinning.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

struct Outbox {
  std::set<std::string, std::less<>> events;  // registered for
  std::deque<Bytes> queue;                    // not yet taken by the server thread
  size_t pending = 0;  // bytes unsent: in `queue` plus in Connection::sending
  size_t urgent = 0;   // Priority::urgent packets at the front of `queue`
  bool overflowed = false;
};

struct Connection {
  Server::ConnectionId id = 0;
  int fd = -1;
  FrameReader reader;
  std::shared_ptr<Outbox> outbox;
  std::deque<Bytes> sending;  // taken from the outbox; only the server thread touches it
  size_t sent_of_front = 0;
  bool closing = false;
};

}  // namespace espgw::vici::server_detail

namespace espgw::vici {

struct Server::State {
  using Bytes = server_detail::Bytes;
  using Connection = server_detail::Connection;
  using Outbox = server_detail::Outbox;

  std::string path;
  dev_t device = 0;
  ino_t inode = 0;
  int listen_fd = -1;
  int wake_fd = -1;

  // Fixed before start(), then read by the server thread only.
  std::map<std::string, Handler, std::less<>> handlers;
  std::set<std::string, std::less<>> declared_events;
  std::function<void(ConnectionId)> disconnect_callback;

  std::thread thread;
  bool started = false;
  std::atomic<bool> stopping{false};

  std::mutex mutex;
  std::map<ConnectionId, std::shared_ptr<Outbox>> outboxes;  // under mutex

  // Server thread only.
  std::vector<std::unique_ptr<Connection>> connections;
  ConnectionId next_id = 1;
  std::chrono::steady_clock::time_point accept_resume{};

  std::atomic<uint64_t> accepted{0}, refused{0}, malformed{0}, slow_dropped{0}, commands{0},
      unknown_commands{0}, bulk_shed{0};

  // vici_server_loop.cpp
  void run();
  void accept_all();
  void read(Connection& connection);
  void flush(Connection& connection);
  void close_connection(Connection& connection);

  // vici_server_dispatch.cpp
  void process(Connection& connection);
  void dispatch_request(Connection& connection, Packet& request);
  void respond(Connection& connection, const Packet& packet);

  // vici_server_events.cpp
  void wake();
  // Under mutex. False if the connection overflowed (and is now marked for closing).
  bool enqueue_locked(Outbox& outbox, const Bytes& bytes, bool urgent = false);
  void take_to_send(Connection& connection);
  // To every registered connection, or only to `to`.
  size_t publish(std::optional<ConnectionId> to, std::string_view event, const Message& message,
                 Priority priority = Priority::normal, size_t* shed = nullptr);
};

}  // namespace espgw::vici
