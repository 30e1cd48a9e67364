/*
 * espgw's `acquire` event: a packet matched a protect policy (a trap) whose reqid has no
 * SA. Parsed apart from charon so that a fuzzer can run it alone.
 */
#ifndef ESPGW_ACQUIRE_EVENT_H_
#define ESPGW_ACQUIRE_EVENT_H_

#include <library.h>

#include <netinet/in.h>

typedef struct
{
	uint32_t reqid;
	/* the triggering packet's addresses, NUL-terminated text of one family */
	char src[INET6_ADDRSTRLEN];
	char dst[INET6_ADDRSTRLEN];
	bool ipv6;
	uint8_t proto;
	/* FALSE: a packet without ports (ICMP, a fragment, ...), the selectors take any */
	bool has_ports;
	uint16_t src_port;
	uint16_t dst_port;
} espgw_acquire_t;

/* Fills `acquire` from an event's message; FALSE for a missing or malformed key (a
 * reqid of 0 or over 32 bits, an address that is not an address, addresses of two
 * families, a protocol or port out of range, only one port). */
bool espgw_acquire_parse(chunk_t message, espgw_acquire_t *acquire);

#endif
