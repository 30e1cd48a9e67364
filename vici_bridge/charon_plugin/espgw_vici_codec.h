/*
 * The VICI wire format (strongSwan's src/libcharon/plugins/vici/README.md), the part the
 * plugin needs: building request packets and reading flat responses and events. espgw's
 * side of the protocol is the C++ library in vici_bridge/; this C copy exists because the
 * plugin runs inside charon and must not pull in C++.
 */
#ifndef ESPGW_VICI_CODEC_H_
#define ESPGW_VICI_CODEC_H_

#include <library.h>

/* Packet types */
#define EVC_CMD_REQUEST 0
#define EVC_CMD_RESPONSE 1
#define EVC_CMD_UNKNOWN 2
#define EVC_EVENT_REGISTER 3
#define EVC_EVENT_UNREGISTER 4
#define EVC_EVENT_CONFIRM 5
#define EVC_EVENT_UNKNOWN 6
#define EVC_EVENT 7

/* Same bound as strongSwan's and espgw's: a longer length prefix is a broken stream. */
#define EVC_MAX_PACKET (512 * 1024)

typedef struct evc_builder_t evc_builder_t;

/* Builds one packet, length prefix included. Errors (a name over 255 bytes, a value over
 * 65535) are remembered and make evc_finish() fail, so callers check once. */
struct evc_builder_t
{
	chunk_t buf;
	size_t used;
	bool failed;
};

void evc_begin(evc_builder_t *b, uint8_t type, const char *name);
void evc_add_kv(evc_builder_t *b, const char *key, chunk_t value);
void evc_add_str(evc_builder_t *b, const char *key, const char *value);
void evc_add_u64(evc_builder_t *b, const char *key, uint64_t value);
void evc_add_bool(evc_builder_t *b, const char *key, bool value);
void evc_begin_section(evc_builder_t *b, const char *name);
void evc_end_section(evc_builder_t *b);
void evc_begin_list(evc_builder_t *b, const char *name);
void evc_add_item(evc_builder_t *b, chunk_t value);
void evc_end_list(evc_builder_t *b);
/* The packet, owned by the caller (chunk_clear() it: requests may carry keys), or
 * chunk_empty after an error, in which case the builder's memory is wiped and freed. */
chunk_t evc_finish(evc_builder_t *b);

/* A copy of a finished packet (length prefix included) with one more top-level
 * key-value pair at its end, or chunk_empty if it would not fit. The copy is owned by
 * the caller (chunk_clear() it: the packet may carry keys). */
chunk_t evc_append_kv(chunk_t packet, const char *key, chunk_t value);

/* Splits a packet (without its length prefix) into type, name and message. */
bool evc_parse_packet(chunk_t packet, uint8_t *type, chunk_t *name, chunk_t *message);
/* The value of a top-level key-value pair. Walks the whole message and returns FALSE if
 * it is malformed or the key is absent. */
bool evc_find(chunk_t message, const char *key, chunk_t *value);
bool evc_find_u64(chunk_t message, const char *key, uint64_t *value);
/* A response's "success = yes". */
bool evc_success(chunk_t message);

#endif
