#include "espgw_acquire_event.h"
#include "espgw_vici_codec.h"

#include <arpa/inet.h>
#include <string.h>

/* Copies an address value into `text` if it is an IPv4 or IPv6 address in text form;
 * `ipv6` says which. */
static bool address_value(chunk_t message, const char *key, char *text, size_t len,
						  bool *ipv6)
{
	chunk_t value;
	u_char binary[16];

	if (!evc_find(message, key, &value) || value.len == 0 || value.len >= len ||
		memchr(value.ptr, '\0', value.len))
	{
		return FALSE;
	}
	memcpy(text, value.ptr, value.len);
	text[value.len] = '\0';
	if (inet_pton(AF_INET, text, binary) == 1)
	{
		*ipv6 = FALSE;
		return TRUE;
	}
	if (inet_pton(AF_INET6, text, binary) == 1)
	{
		*ipv6 = TRUE;
		return TRUE;
	}
	return FALSE;
}

bool espgw_acquire_parse(chunk_t message, espgw_acquire_t *acquire)
{
	uint64_t reqid, proto, src_port, dst_port;
	bool src_v6, dst_v6, has_src_port, has_dst_port;

	memset(acquire, 0, sizeof(*acquire));
	if (!evc_find_u64(message, "reqid", &reqid) || reqid == 0 || reqid > 0xffffffff ||
		!evc_find_u64(message, "proto", &proto) || proto > 255 ||
		!address_value(message, "src", acquire->src, sizeof(acquire->src), &src_v6) ||
		!address_value(message, "dst", acquire->dst, sizeof(acquire->dst), &dst_v6) ||
		src_v6 != dst_v6)
	{
		return FALSE;
	}
	has_src_port = evc_find_u64(message, "src-port", &src_port);
	has_dst_port = evc_find_u64(message, "dst-port", &dst_port);
	if (has_src_port != has_dst_port ||
		(has_src_port && (src_port > 65535 || dst_port > 65535)))
	{
		return FALSE;
	}
	acquire->reqid = (uint32_t)reqid;
	acquire->ipv6 = src_v6;
	acquire->proto = (uint8_t)proto;
	acquire->has_ports = has_src_port;
	if (has_src_port)
	{
		acquire->src_port = (uint16_t)src_port;
		acquire->dst_port = (uint16_t)dst_port;
	}
	return TRUE;
}
