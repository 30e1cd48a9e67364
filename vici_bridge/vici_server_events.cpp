// vici::Server's event fan-out (vici_server_state.h): publish() from any thread encodes an
// event once and queues it on every registered connection's Outbox, by priority, within
// the connection's output bounds, then wakes the server thread.
#include <unistd.h>

#include <mutex>

#include "vici_bridge/vici_server_state.h"

namespace espgw::vici {

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

}  // namespace espgw::vici
