// espgw's VICI control socket server (see vici_server.h): the listening socket and the
// public calls. The rest of Server::State (vici_server_state.h) is in
// vici_server_loop.cpp, vici_server_dispatch.cpp and vici_server_events.cpp.
#include "vici_bridge/vici_server.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "vici_bridge/vici_server_state.h"

namespace espgw::vici {

namespace {

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
