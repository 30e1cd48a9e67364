// vici::Server's thread (vici_server_state.h): one poll() loop over the wake-up eventfd,
// the listening socket and every connection; accepting (same uid only, bounded count),
// reading into each connection's frame reader, writing its queued output, closing.
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <span>

#include "vici_bridge/vici_server_state.h"

namespace espgw::vici {

using server_detail::kAcceptBackoff;
using server_detail::kMaxIovecs;
using server_detail::kPauseReadingAbove;
using server_detail::kReadChunk;
using server_detail::kTakeToSend;

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

// Takes packets from the front of the outbox, whole, up to kTakeToSend bytes (at least one
// packet). What is taken is committed to this connection's byte stream; what stays in the
// outbox can still be overtaken by an urgent event. Taking the whole backlog at once would
// put an SA's expiry behind up to kMaxQueuedOutput of bulk events.
void Server::State::take_to_send(Connection& connection) {
  std::lock_guard lock(mutex);
  Outbox& outbox = *connection.outbox;
  size_t taken = 0, bytes = 0;
  while (!outbox.queue.empty() &&
         (taken == 0 || bytes + outbox.queue.front()->size() <= kTakeToSend)) {
    bytes += outbox.queue.front()->size();
    connection.sending.push_back(std::move(outbox.queue.front()));
    outbox.queue.pop_front();
    ++taken;
  }
  outbox.urgent -= std::min(outbox.urgent, taken);
}

void Server::State::flush(Connection& connection) {
  while (true) {
    if (connection.sending.empty()) take_to_send(connection);
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

}  // namespace espgw::vici
