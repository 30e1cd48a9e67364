// espgw's VICI control socket server (see vici_server.h).
//
// Output to a connection goes through its Outbox, the one piece of state shared between
// publish() (any thread) and the server thread, under State::mutex. The server thread
// moves queued packets out of the Outbox in one swap and writes them without holding the
// lock, so publish() waits at most for a queue append or a swap, never for I/O.
#include "vici_bridge/vici_server.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "vici_bridge/vici_packet.h"

namespace espgw::vici {

namespace {

using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

// A connection stops taking new requests while this much of its output is unsent, so a
// client that pipelines requests without reading responses is slowed, not dropped. Events
// are not held back; they can only overflow (kMaxQueuedOutput).
constexpr size_t kPauseReadingAbove = kMaxPacketSize;
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxIovecs = 64;
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

Message error_response(std::string_view message) {
  Message response;
  response.set_bool("success", false);
  response.set("errmsg", message);
  return response;
}

std::system_error path_error(int error, const std::string& what, const std::string& path) {
  return std::system_error(error, std::generic_category(), "VICI server " + path + ": " + what);
}

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    throw path_error(ENAMETOOLONG, "socket path is empty or too long", path);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Replaces a socket file nobody listens on (left by a crashed daemon), but never a live
// server's socket or a file that is not a socket.
void remove_stale_socket(const std::string& path, const sockaddr_un& address) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw path_error(errno, "stat", path);
  }
  if (!S_ISSOCK(st.st_mode)) throw path_error(EEXIST, "exists and is not a socket", path);
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (probe < 0) throw path_error(errno, "socket", path);
  const int connected =
      connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(probe);
  // EAGAIN: a live server whose backlog is full.
  if (connected == 0 || error == EAGAIN) {
    throw path_error(EADDRINUSE, "another server is listening there", path);
  }
  if (error != ECONNREFUSED) throw path_error(error, "probing the existing socket", path);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw path_error(errno, "removing the stale socket", path);
  }
}

}  // namespace

struct Server::State {
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

  void run();
  void accept_all();
  void read(Connection& connection);
  void process(Connection& connection);
  void flush(Connection& connection);
  void dispatch_request(Connection& connection, Packet& request);
  void respond(Connection& connection, const Packet& packet);
  void close_connection(Connection& connection);
  void wake();

  // Under mutex. False if the connection overflowed (and is now marked for closing).
  bool enqueue_locked(Outbox& outbox, const Bytes& bytes, bool urgent = false);
  // To every registered connection, or only to `to`.
  size_t publish(std::optional<ConnectionId> to, std::string_view event, const Message& message,
                 Priority priority = Priority::normal, size_t* shed = nullptr);
};

size_t Server::State::publish(std::optional<ConnectionId> to, std::string_view event,
                              const Message& message, Priority priority, size_t* shed) {
  // Encoded once, outside the lock, and shared by every connection's queue.
  const auto bytes = std::make_shared<const std::vector<uint8_t>>(
      encode_packet(Packet{PacketType::event, std::string(event), message}));
  size_t queued = 0;
  size_t shed_here = 0;
  bool dropped = false;
  {
    std::lock_guard lock(mutex);
    const auto deliver = [&](Outbox& outbox) {
      if (!outbox.events.contains(event)) return;
      if (priority == Priority::bulk && outbox.pending + bytes->size() > kMaxQueuedBulk) {
        ++shed_here;
        return;
      }
      if (enqueue_locked(outbox, bytes, priority == Priority::urgent)) {
        ++queued;
      } else {
        dropped = true;
      }
    };
    if (to) {
      if (const auto found = outboxes.find(*to); found != outboxes.end()) deliver(*found->second);
    } else {
      for (auto& entry : outboxes) deliver(*entry.second);
    }
  }
  if (shed_here != 0) bulk_shed.fetch_add(shed_here, std::memory_order_relaxed);
  if (shed) *shed = shed_here;
  if (queued > 0 || dropped) wake();
  return queued;
}

bool Server::State::enqueue_locked(Outbox& outbox, const Bytes& bytes, bool urgent) {
  if (outbox.overflowed) return false;
  if (outbox.pending + bytes->size() > kMaxQueuedOutput) {
    outbox.overflowed = true;
    outbox.events.clear();
    for (const Bytes& queued : outbox.queue) outbox.pending -= queued->size();
    outbox.queue.clear();
    outbox.urgent = 0;
    slow_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Packets in `queue` are whole and none of them has been started (the server thread
  // writes from its own list, `sending`), so an urgent one may go in front of them.
  if (urgent)
    outbox.queue.insert(outbox.queue.begin() + static_cast<std::ptrdiff_t>(outbox.urgent++), bytes);
  else
    outbox.queue.push_back(bytes);
  outbox.pending += bytes->size();
  return true;
}

void Server::State::wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the thread is awake anyway.
  [[maybe_unused]] const ssize_t n = write(wake_fd, &one, sizeof(one));
}

void Server::State::run() {
  // Shown by top -H and ps -L next to espgw's readers and workers (util/thread_name.h,
  // which this library does not link).
  pthread_setname_np(pthread_self(), "vici-control");
  std::vector<pollfd> fds;
  while (!stopping.load(std::memory_order_acquire)) {
    fds.clear();
    fds.push_back({.fd = wake_fd, .events = POLLIN, .revents = 0});
    const auto now = std::chrono::steady_clock::now();
    const bool accepting = now >= accept_resume;
    fds.push_back({.fd = accepting ? listen_fd : -1, .events = POLLIN, .revents = 0});
    {
      std::lock_guard lock(mutex);
      for (const auto& connection : connections) {
        const Outbox& outbox = *connection->outbox;
        short events = 0;
        if (outbox.pending <= kPauseReadingAbove) events |= POLLIN;
        if (!connection->sending.empty() || !outbox.queue.empty()) events |= POLLOUT;
        if (outbox.overflowed) connection->closing = true;
        fds.push_back({.fd = connection->fd, .events = events, .revents = 0});
      }
    }
    int timeout = -1;
    if (!accepting) {
      timeout = static_cast<int>(
          std::chrono::ceil<std::chrono::milliseconds>(accept_resume - now).count());
    }
    // Connections found overflowed above are closed at the end of this round; poll must
    // not sleep before that.
    bool closing = false;
    for (const auto& connection : connections) closing |= connection->closing;
    if (closing) timeout = 0;
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      // Only EFAULT/EINVAL/ENOMEM are possible; back off rather than spin.
      std::this_thread::sleep_for(kAcceptBackoff);
      continue;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd, &count, sizeof(count));
    }
    const size_t polled = connections.size();
    for (size_t i = 0; i < polled; ++i) {
      Connection& connection = *connections[i];
      const short revents = fds[2 + i].revents;
      if (connection.closing) continue;
      if (revents & (POLLERR | POLLNVAL)) {
        connection.closing = true;
        continue;
      }
      if (revents & POLLOUT) flush(connection);
      if (!connection.closing && (revents & (POLLIN | POLLHUP))) read(connection);
    }
    // Also for connections that polled nothing: requests held back while output was
    // pending are still buffered in their readers.
    for (size_t i = 0; i < polled; ++i) {
      Connection& connection = *connections[i];
      if (connection.closing) continue;
      process(connection);
      // Also when process() just found a malformed packet: the answers to the good
      // requests ahead of it go out as far as the socket buffer takes them.
      flush(connection);
    }
    if (accepting && (fds[1].revents & POLLIN)) accept_all();
    for (size_t i = 0; i < connections.size();) {
      if (connections[i]->closing) {
        std::unique_ptr<Connection> connection = std::move(connections[i]);
        connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
        close_connection(*connection);
      } else {
        ++i;
      }
    }
  }
  while (!connections.empty()) {
    std::unique_ptr<Connection> connection = std::move(connections.back());
    connections.pop_back();
    close_connection(*connection);
  }
}

void Server::State::accept_all() {
  while (true) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) accept_resume = std::chrono::steady_clock::now() + kAcceptBackoff;
      return;
    }
    // The socket file's mode already keeps other users out; this also holds if someone
    // loosens the mode or hands a descriptor on.
    ucred peer{};
    socklen_t length = sizeof(peer);
    const bool same_user =
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.uid == geteuid();
    if (!same_user || connections.size() >= kMaxConnections) {
      close(fd);
      refused.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->id = next_id++;
    connection->fd = fd;
    connection->outbox = std::make_shared<Outbox>();
    {
      std::lock_guard lock(mutex);
      outboxes.emplace(connection->id, connection->outbox);
    }
    connections.push_back(std::move(connection));
    accepted.fetch_add(1, std::memory_order_relaxed);
  }
}

void Server::State::read(Connection& connection) {
  uint8_t buffer[kReadChunk];
  const ssize_t n = recv(connection.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n > 0) {
    connection.reader.feed(std::span(buffer, static_cast<size_t>(n)));
    explicit_bzero(buffer, static_cast<size_t>(n));  // may be part of an add-sa, keys and all
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    connection.closing = true;
  }
}

void Server::State::process(Connection& connection) {
  while (true) {
    {
      std::lock_guard lock(mutex);
      if (connection.outbox->overflowed) {
        connection.closing = true;
        return;
      }
      if (connection.outbox->pending > kPauseReadingAbove) return;
    }
    std::optional<Packet> packet = connection.reader.next();
    if (!packet) {
      if (connection.reader.failed()) {
        malformed.fetch_add(1, std::memory_order_relaxed);
        connection.closing = true;
      }
      return;
    }
    switch (packet->type) {
      case PacketType::cmd_request:
        dispatch_request(connection, *packet);
        break;
      case PacketType::event_register: {
        bool known = declared_events.contains(packet->name);
        if (known) {
          std::lock_guard lock(mutex);
          connection.outbox->events.insert(packet->name);
        }
        respond(connection,
                {known ? PacketType::event_confirm : PacketType::event_unknown, {}, {}});
        break;
      }
      case PacketType::event_unregister: {
        bool registered;
        {
          std::lock_guard lock(mutex);
          registered = connection.outbox->events.erase(packet->name) > 0;
        }
        // strongSwan, too, answers EVENT_UNKNOWN for an event the client was not
        // registered for.
        respond(connection,
                {registered ? PacketType::event_confirm : PacketType::event_unknown, {}, {}});
        break;
      }
      default:
        // Responses and events only ever flow from the server.
        malformed.fetch_add(1, std::memory_order_relaxed);
        connection.closing = true;
        return;
    }
  }
}

void Server::State::dispatch_request(Connection& connection, Packet& request) {
  const auto handler = handlers.find(request.name);
  if (handler == handlers.end()) {
    unknown_commands.fetch_add(1, std::memory_order_relaxed);
    respond(connection, {PacketType::cmd_unknown, {}, {}});
    return;
  }
  commands.fetch_add(1, std::memory_order_relaxed);
  Packet response{PacketType::cmd_response, {}, {}};
  try {
    response.message = handler->second(request.message, connection.id);
  } catch (const std::exception& e) {
    response.message = error_response(e.what());
  } catch (...) {
    response.message = error_response("command failed with a non-standard exception");
  }
  try {
    respond(connection, response);
  } catch (const std::length_error&) {
    respond(connection, {PacketType::cmd_response, {}, error_response("response too large")});
  }
}

void Server::State::respond(Connection& connection, const Packet& packet) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(encode_packet(packet));
  std::lock_guard lock(mutex);
  if (!enqueue_locked(*connection.outbox, bytes)) connection.closing = true;
}

void Server::State::flush(Connection& connection) {
  while (true) {
    if (connection.sending.empty()) {
      std::lock_guard lock(mutex);
      connection.sending.swap(connection.outbox->queue);
      connection.outbox->urgent = 0;
    }
    if (connection.sending.empty()) return;
    iovec iov[kMaxIovecs];
    int count = 0;
    for (const Bytes& bytes : connection.sending) {
      if (count == kMaxIovecs) break;
      const size_t skip = count == 0 ? connection.sent_of_front : 0;
      iov[count++] = {.iov_base = const_cast<uint8_t*>(bytes->data() + skip),
                      .iov_len = bytes->size() - skip};
    }
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(connection.fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) connection.closing = true;
      return;
    }
    size_t written = static_cast<size_t>(n);
    {
      std::lock_guard lock(mutex);
      connection.outbox->pending -= written;
    }
    while (written > 0) {
      const size_t left = connection.sending.front()->size() - connection.sent_of_front;
      if (written < left) {
        connection.sent_of_front += written;
        break;
      }
      written -= left;
      connection.sending.pop_front();
      connection.sent_of_front = 0;
    }
  }
}

void Server::State::close_connection(Connection& connection) {
  {
    std::lock_guard lock(mutex);
    outboxes.erase(connection.id);
  }
  close(connection.fd);
  connection.fd = -1;
  if (disconnect_callback) {
    // The callback belongs to the server's owner; one that throws must not take the
    // control socket down with it.
    try {
      disconnect_callback(connection.id);
    } catch (...) {
    }
  }
}

Server::Server(std::string socket_path) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = std::move(socket_path);
  const sockaddr_un address = unix_address(s.path);
  remove_stale_socket(s.path, address);
  s.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) throw path_error(errno, "socket", s.path);
  const auto fail = [&s](const char* what) {
    const int error = errno;
    close(s.listen_fd);
    s.listen_fd = -1;
    return path_error(error, what, s.path);
  };
  // Linux creates the socket file with the socket inode's mode (less the umask), so
  // setting it before bind() leaves no window in which the file is open to others.
  if (fchmod(s.listen_fd, 0600) != 0) throw fail("fchmod");
  if (bind(s.listen_fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    throw fail("bind");
  }
  struct stat st {};
  // chmod for an exact 0600 whatever the umask was; stat to recognise the file as ours
  // when unlinking it later.
  if (chmod(s.path.c_str(), 0600) != 0 || stat(s.path.c_str(), &st) != 0) {
    const int error = errno;
    unlink(s.path.c_str());
    errno = error;
    throw fail("chmod");
  }
  s.device = st.st_dev;
  s.inode = st.st_ino;
  if (listen(s.listen_fd, 64) != 0) {
    const int error = errno;
    unlink(s.path.c_str());
    errno = error;
    throw fail("listen");
  }
  s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.wake_fd < 0) {
    const int error = errno;
    unlink(s.path.c_str());
    errno = error;
    throw fail("eventfd");
  }
}

Server::~Server() {
  stop();
  State& s = *state_;
  close(s.wake_fd);
  close(s.listen_fd);
  // A newer server may have replaced our file already; leave its socket alone.
  struct stat st {};
  if (stat(s.path.c_str(), &st) == 0 && st.st_dev == s.device && st.st_ino == s.inode) {
    unlink(s.path.c_str());
  }
}

void Server::handle(std::string command, Handler handler) {
  if (state_->started) throw std::logic_error("VICI Server::handle() after start()");
  state_->handlers.insert_or_assign(std::move(command), std::move(handler));
}

void Server::declare_event(std::string event) {
  if (state_->started) throw std::logic_error("VICI Server::declare_event() after start()");
  state_->declared_events.insert(std::move(event));
}

void Server::on_disconnect(std::function<void(ConnectionId)> callback) {
  if (state_->started) throw std::logic_error("VICI Server::on_disconnect() after start()");
  state_->disconnect_callback = std::move(callback);
}

void Server::start() {
  if (state_->started) throw std::logic_error("VICI Server::start() called twice");
  state_->started = true;
  state_->thread = std::thread([this] { state_->run(); });
}

void Server::stop() {
  State& s = *state_;
  if (!s.thread.joinable()) return;
  if (std::this_thread::get_id() == s.thread.get_id()) {
    throw std::logic_error("VICI Server::stop() called from the server thread");
  }
  s.stopping.store(true, std::memory_order_release);
  s.wake();
  s.thread.join();
}

size_t Server::publish(std::string_view event, const Message& message, Priority priority,
                       size_t* shed) {
  return state_->publish(std::nullopt, event, message, priority, shed);
}

bool Server::publish_to(ConnectionId to, std::string_view event, const Message& message) {
  return state_->publish(to, event, message) > 0;
}

Server::Stats Server::stats() const {
  const State& s = *state_;
  return Stats{
      .connections_accepted = s.accepted.load(std::memory_order_relaxed),
      .connections_refused = s.refused.load(std::memory_order_relaxed),
      .malformed_packets = s.malformed.load(std::memory_order_relaxed),
      .slow_clients_dropped = s.slow_dropped.load(std::memory_order_relaxed),
      .bulk_events_shed = s.bulk_shed.load(std::memory_order_relaxed),
      .commands = s.commands.load(std::memory_order_relaxed),
      .unknown_commands = s.unknown_commands.load(std::memory_order_relaxed),
  };
}

const std::string& Server::path() const {
  return state_->path;
}

}  // namespace espgw::vici
