#include "espgw_kernel_events.h"
#include "espgw_acquire_event.h"
#include "espgw_vici_codec.h"

#include <daemon.h>

void espgw_event_expire(chunk_t message)
{
	uint64_t spi;
	chunk_t hard, address;
	host_t *dst;
	char text[INET6_ADDRSTRLEN];

	if (!evc_find_u64(message, "spi", &spi) || spi > 0xffffffff ||
		!evc_find(message, "dst", &address) || address.len == 0 ||
		address.len >= sizeof(text) || !evc_find(message, "hard", &hard))
	{
		DBG1(DBG_KNL, "espgw sent a malformed sa-expire event, ignored");
		return;
	}
	memcpy(text, address.ptr, address.len);
	text[address.len] = '\0';
	dst = host_create_from_string(text, 0);
	if (!dst)
	{
		return;
	}
	charon->kernel->expire(charon->kernel, IPPROTO_ESP, htonl((uint32_t)spi), dst,
						   chunk_equals(hard, chunk_from_str("yes")));
	dst->destroy(dst);
}

/* A selector of one address, and of one port when the packet had ports: what
 * kernel-netlink makes of the kernel's acquire selector, which has the packet's
 * addresses with full prefixes. */
static traffic_selector_t *packet_ts(espgw_acquire_t *acquire, char *address,
									 uint16_t port)
{
	ts_type_t type = acquire->ipv6 ? TS_IPV6_ADDR_RANGE : TS_IPV4_ADDR_RANGE;
	uint16_t from = acquire->has_ports ? port : 0;
	uint16_t to = acquire->has_ports ? port : 65535;

	return traffic_selector_create_from_string(acquire->proto, type, address, from,
											   address, to);
}

void espgw_event_acquire(chunk_t message)
{
	espgw_acquire_t acquire;
	kernel_acquire_data_t data = {};

	if (!espgw_acquire_parse(message, &acquire))
	{
		DBG1(DBG_KNL, "espgw sent a malformed acquire event, ignored");
		return;
	}
	data.src = packet_ts(&acquire, acquire.src, acquire.src_port);
	data.dst = packet_ts(&acquire, acquire.dst, acquire.dst_port);
	if (data.src && data.dst)
	{
		DBG1(DBG_KNL, "espgw: acquire for reqid %u, packet %R === %R", acquire.reqid,
			 data.src, data.dst);
		/* the trap manager finds the policy's CHILD_SA config by reqid and initiates it
		 * (or ignores the acquire while a negotiation for the reqid is under way) */
		charon->kernel->acquire(charon->kernel, acquire.reqid, &data);
	}
	DESTROY_IF(data.src);
	DESTROY_IF(data.dst);
}
