// vici::Server's requests (vici_server_state.h): the packets a connection's reader has
// framed, taken while its output is below the pause bound; commands go to their handler,
// event (un)registrations change the connection's Outbox, anything else closes it.
#include <exception>
#include <mutex>
#include <stdexcept>

#include "vici_bridge/vici_server_state.h"

namespace espgw::vici {

using server_detail::kPauseReadingAbove;

namespace {

Message error_response(std::string_view message) {
  Message response;
  response.set_bool("success", false);
  response.set("errmsg", message);
  return response;
}

}  // namespace

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

}  // namespace espgw::vici
