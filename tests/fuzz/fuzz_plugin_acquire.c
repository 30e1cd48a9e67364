/*
 * The charon plugin's parser of espgw's `acquire` event
 * (vici_bridge/charon_plugin/espgw_acquire_event.c) and the plugin's VICI reader under it,
 * on arbitrary input: a packet (type, name, message) or, when that does not parse, a bare
 * message. What the parser accepts must be safe to hand to charon: a reqid, two
 * NUL-terminated addresses of the family it says, ports only when it says so.
 */
#include "espgw_acquire_event.h"
#include "espgw_vici_codec.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

static void check(chunk_t message) {
  espgw_acquire_t acquire;
  u_char binary[16];
  int family;

  if (!espgw_acquire_parse(message, &acquire)) {
    return;
  }
  family = acquire.ipv6 ? AF_INET6 : AF_INET;
  if (acquire.reqid == 0 || !memchr(acquire.src, '\0', sizeof(acquire.src)) ||
      !memchr(acquire.dst, '\0', sizeof(acquire.dst)) ||
      inet_pton(family, acquire.src, binary) != 1 || inet_pton(family, acquire.dst, binary) != 1 ||
      (!acquire.has_ports && (acquire.src_port || acquire.dst_port))) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chunk_t input = chunk_create((u_char*)data, size), name, message;
  uint8_t type;

  if (evc_parse_packet(input, &type, &name, &message)) {
    check(message);
  }
  check(input);
  return 0;
}
