// The blocking VICI client (see vici_client.h).
#include "vici_bridge/vici_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>
#include <utility>

namespace espgw::vici {

namespace {

constexpr std::string_view kUnixScheme = "unix://";

std::string path_from_uri(const std::string& uri) {
  if (uri.starts_with(kUnixScheme)) return uri.substr(kUnixScheme.size());
  if (uri.find("://") != std::string::npos) {
    throw std::runtime_error("VICI socket " + uri + ": only unix:// URIs are supported");
  }
  return uri;
}

// Whole milliseconds left, rounded up so that a poll never returns just before the
// deadline and spins; 0 once it has passed.
int poll_timeout(std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= left.zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

}  // namespace

Client::Client(const std::string& socket_path) : path_(path_from_uri(socket_path)) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof(address.sun_path)) {
    throw std::runtime_error("VICI socket path '" + path_ + "' is empty or too long");
  }
  std::memcpy(address.sun_path, path_.data(), path_.size());
  // Non-blocking, so that every wait goes through poll() with the caller's deadline.
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "VICI socket for " + path_);
  // A unix socket connects at once or fails; it never reports EINPROGRESS.
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd_);
    fd_ = -1;
    throw std::system_error(error, std::generic_category(), "VICI connect to " + path_);
  }
}

Client::~Client() {
  if (fd_ >= 0) close(fd_);
}

Client::Client(Client&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      reader_(std::move(other.reader_)),
      events_(std::move(other.events_)),
      broken_(std::move(other.broken_)) {}

Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    reader_ = std::move(other.reader_);
    events_ = std::move(other.events_);
    broken_ = std::move(other.broken_);
  }
  return *this;
}

void Client::broken(const std::string& why) {
  broken_ = "VICI connection to " + path_ + ": " + why;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  throw std::runtime_error(broken_);
}

void Client::check_usable() const {
  if (!broken_.empty()) throw std::runtime_error(broken_ + " (connection closed)");
  if (fd_ < 0) throw std::runtime_error("VICI client was moved from");
}

void Client::send(const Packet& packet, Clock::time_point deadline) {
  const std::vector<uint8_t> bytes = encode_packet(packet);  // may throw, before any I/O
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) broken(std::string("send: ") + std::strerror(errno));
    pollfd p{.fd = fd_, .events = POLLOUT, .revents = 0};
    const int ready = poll(&p, 1, poll_timeout(deadline));
    if (ready == 0) broken("timed out sending " + std::string(to_string(packet.type)));
    if (ready < 0 && errno != EINTR) broken(std::string("poll: ") + std::strerror(errno));
  }
}

std::optional<Packet> Client::receive(Clock::time_point deadline) {
  uint8_t buffer[64 * 1024];
  while (true) {
    if (std::optional<Packet> packet = reader_.next()) return packet;
    if (reader_.failed()) broken("malformed input: " + reader_.error());
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    const int ready = poll(&p, 1, poll_timeout(deadline));
    if (ready == 0) return std::nullopt;
    if (ready < 0) {
      if (errno == EINTR) continue;
      broken(std::string("poll: ") + std::strerror(errno));
    }
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n == 0) broken("closed by the server");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      broken(std::string("recv: ") + std::strerror(errno));
    }
    reader_.feed(std::span(buffer, static_cast<size_t>(n)));
  }
}

Packet Client::reply(std::string_view what, Clock::time_point deadline,
                     const EventCallback* on_event) {
  std::exception_ptr callback_error;
  while (true) {
    std::optional<Packet> packet = receive(deadline);
    if (!packet) broken("timed out waiting for the reply to " + std::string(what));
    if (packet->type != PacketType::event) {
      if (callback_error) std::rethrow_exception(callback_error);
      return std::move(*packet);
    }
    if (!on_event) {
      events_.push_back(std::move(*packet));
    } else if (!callback_error) {
      try {
        (*on_event)(*packet);
      } catch (...) {
        callback_error = std::current_exception();
      }
    }
  }
}

Message Client::request(std::string_view command, const Message& arguments,
                        std::chrono::milliseconds timeout) {
  return request(command, arguments, nullptr, timeout);
}

Message Client::request(std::string_view command, const Message& arguments,
                        const EventCallback& on_event, std::chrono::milliseconds timeout) {
  check_usable();
  const auto deadline = Clock::now() + timeout;
  send(Packet{PacketType::cmd_request, std::string(command), arguments}, deadline);
  const std::string what = "command " + std::string(command);
  Packet answer = reply(what, deadline, on_event ? &on_event : nullptr);
  switch (answer.type) {
    case PacketType::cmd_response:
      return std::move(answer.message);
    case PacketType::cmd_unknown:
      throw UnknownCommand("VICI server at " + path_ + " has no command " + std::string(command));
    default:
      broken(std::string("unexpected ") + to_string(answer.type) + " in reply to " + what);
  }
}

void Client::subscribe(std::string_view event, std::chrono::milliseconds timeout) {
  check_usable();
  const auto deadline = Clock::now() + timeout;
  send(Packet{PacketType::event_register, std::string(event), {}}, deadline);
  const std::string what = "registering for " + std::string(event);
  Packet answer = reply(what, deadline, nullptr);
  if (answer.type == PacketType::event_confirm) return;
  if (answer.type == PacketType::event_unknown) {
    throw UnknownEvent("VICI server at " + path_ + " has no event " + std::string(event));
  }
  broken(std::string("unexpected ") + to_string(answer.type) + " in reply to " + what);
}

void Client::unsubscribe(std::string_view event, std::chrono::milliseconds timeout) {
  check_usable();
  const auto deadline = Clock::now() + timeout;
  send(Packet{PacketType::event_unregister, std::string(event), {}}, deadline);
  const std::string what = "unregistering from " + std::string(event);
  Packet answer = reply(what, deadline, nullptr);
  if (answer.type == PacketType::event_confirm) return;
  if (answer.type == PacketType::event_unknown) {
    throw UnknownEvent("VICI server at " + path_ + " did not have us registered for " +
                       std::string(event));
  }
  broken(std::string("unexpected ") + to_string(answer.type) + " in reply to " + what);
}

std::optional<Packet> Client::next_event(std::chrono::milliseconds timeout) {
  if (!events_.empty()) {
    Packet event = std::move(events_.front());
    events_.pop_front();
    return event;
  }
  check_usable();
  std::optional<Packet> packet = receive(Clock::now() + timeout);
  if (packet && packet->type != PacketType::event) {
    broken(std::string("unexpected ") + to_string(packet->type) + " with no request pending");
  }
  return packet;
}

}  // namespace espgw::vici
