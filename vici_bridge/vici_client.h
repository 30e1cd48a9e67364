// A blocking VICI client for a unix socket: charon's (to drive IKE and follow its events)
// or espgw's own control socket. One connection, used from one thread at a time.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "vici_bridge/vici_packet.h"

namespace espgw::vici {

// The server answered CMD_UNKNOWN: it has no such command.
class UnknownCommand : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The server answered EVENT_UNKNOWN: no such event source (on subscribe), or not
// subscribed (on unsubscribe).
class UnknownEvent : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Client {
 public:
  using EventCallback = std::function<void(const Packet& event)>;
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(10);

  // Connects to a socket path or a "unix:///path" URI (swanctl's --uri form). Throws
  // std::system_error, or std::runtime_error for an unusable path; both name the path.
  explicit Client(const std::string& socket_path);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;

  // Sends CMD_REQUEST and waits for its response. Throws UnknownCommand on CMD_UNKNOWN;
  // std::runtime_error on timeout, EOF or malformed input. Events arriving meanwhile are
  // queued for next_event().
  Message request(std::string_view command, const Message& arguments = {},
                  std::chrono::milliseconds timeout = kDefaultTimeout);
  // The same, but events arriving before the response go to `on_event` instead (charon
  // streams list-sas, list-conns and initiate's log as events ahead of the response).
  // If `on_event` throws, the rest of the stream is still read, so that the connection
  // stays usable, and the exception is rethrown once the response is in.
  Message request(std::string_view command, const Message& arguments, const EventCallback& on_event,
                  std::chrono::milliseconds timeout = kDefaultTimeout);

  // EVENT_REGISTER / EVENT_UNREGISTER; throw UnknownEvent on EVENT_UNKNOWN, and like
  // request() otherwise.
  void subscribe(std::string_view event, std::chrono::milliseconds timeout = kDefaultTimeout);
  void unsubscribe(std::string_view event, std::chrono::milliseconds timeout = kDefaultTimeout);

  // The next queued or arriving event; nullopt on timeout. Throws on EOF or malformed
  // input.
  std::optional<Packet> next_event(std::chrono::milliseconds timeout);

  // For a caller's own poll(): readable means next_event() may have something, but
  // events already queued by request() are not visible there (see has_queued_event()).
  int fd() const { return fd_; }
  bool has_queued_event() const { return !events_.empty(); }
  const std::string& path() const { return path_; }

 private:
  using Clock = std::chrono::steady_clock;

  // Every failure but an unknown command or event leaves the stream at an unknown point
  // (a late response would answer the next request), so the connection is closed and
  // later calls fail with the first reason.
  [[noreturn]] void broken(const std::string& why);
  void check_usable() const;
  void send(const Packet& packet, Clock::time_point deadline);
  // nullopt on timeout.
  std::optional<Packet> receive(Clock::time_point deadline);
  // Reads until a packet that is not an event arrives; events go to `on_event` or the
  // queue.
  Packet reply(std::string_view what, Clock::time_point deadline, const EventCallback* on_event);

  std::string path_;
  int fd_ = -1;
  FrameReader reader_;
  std::deque<Packet> events_;
  std::string broken_;
};

}  // namespace espgw::vici
