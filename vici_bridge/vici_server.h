// espgw's VICI control socket: the listening unix socket, its connections, command
// dispatch and event fan-out. One thread (start()) does all socket I/O with poll() and
// runs the command handlers one at a time, so handlers need no locking among themselves;
// publish() is the only entry point meant for other threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "vici_bridge/vici_message.h"

namespace espgw::vici {

class Server {
 public:
  using ConnectionId = uint64_t;  // unique for the server's lifetime, from 1
  using Handler = std::function<Message(const Message& request, ConnectionId from)>;

  // A connection whose unsent output would exceed this is dropped rather than letting
  // memory grow behind a client that does not read.
  static constexpr size_t kMaxQueuedOutput = 8 * 1024 * 1024;
  // More simultaneous connections are refused (counted), to bound descriptors.
  static constexpr size_t kMaxConnections = 1024;

  // Binds `socket_path` (an existing stale socket is replaced; a live one, or a file that
  // is not a socket, is an error) with mode 0600, and also refuses peers whose
  // SO_PEERCRED uid differs from our euid. Throws std::system_error naming the path.
  explicit Server(std::string socket_path);
  ~Server();  // stop(), then unlink the socket file if it is still ours
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Before start(); std::logic_error afterwards. A handler that throws is answered with
  // `success = no` and `errmsg = what()` (strongSwan's convention); the server goes on.
  void handle(std::string command, Handler handler);
  void declare_event(std::string event);  // events clients may register for
  // Called on the server thread after a connection closed, for whatever reason
  // (including stop()), so that per-connection state can be dropped.
  void on_disconnect(std::function<void(ConnectionId)> callback);

  void start();
  // Closes every connection and joins the thread. Idempotent; must not be called from a
  // handler (std::logic_error).
  void stop();

  // How an event competes with the others queued for a connection.
  enum class Priority {
    normal,  // queued in order; a connection over kMaxQueuedOutput is dropped
    // Shed rather than queued for a connection that has kMaxQueuedBulk bytes or more
    // unsent (counted: Stats::bulk_events_shed), so a flood of them (IKE datagrams) can
    // neither overflow the connection nor delay what follows by more than that.
    bulk,
    // Queued ahead of every event the server thread has not started writing yet (after
    // earlier urgent ones): an SA expiry must not wait behind a backlog of IKE.
    urgent,
  };
  static constexpr size_t kMaxQueuedBulk = 1024 * 1024;

  // Thread-safe and never waits for I/O: encodes once, queues the event for every
  // connection registered for it and wakes the server thread (eventfd). Returns how many
  // connections it was queued for (0 for an event nobody registered, or undeclared);
  // `shed`, if given, gets how many registered connections shed it (Priority::bulk).
  // Throws std::length_error for a message too large for a packet. Events published from
  // a handler reach the client before that handler's response (charon's streaming).
  size_t publish(std::string_view event, const Message& message,
                 Priority priority = Priority::normal, size_t* shed = nullptr);
  // The same for one connection only, and only if it registered for the event: how a
  // handler streams results to the client that asked (charon's list-sas streams list-sa
  // to the requester alone). Returns whether it was queued.
  bool publish_to(ConnectionId to, std::string_view event, const Message& message);

  struct Stats {
    uint64_t connections_accepted;
    uint64_t connections_refused;   // other uid, or over kMaxConnections
    uint64_t malformed_packets;     // broken framing or encoding, or a packet type
                                    // a client must not send; each closed its connection
    uint64_t slow_clients_dropped;  // over kMaxQueuedOutput
    uint64_t bulk_events_shed;      // Priority::bulk events not queued (kMaxQueuedBulk)
    uint64_t commands;              // requests answered by a handler (thrown or not)
    uint64_t unknown_commands;      // requests answered CMD_UNKNOWN
  };
  Stats stats() const;
  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace espgw::vici
