/*
 * charon's types as espgw's control requests write them: addresses, traffic selectors,
 * and the names of algorithms, directions, policy types and priorities.
 */

#include "espgw_request_fields.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* Text form of an address (no port); "" for NULL or an unknown family. */
void espgw_address_text(host_t *host, char *buf, size_t len)
{
	chunk_t address;

	buf[0] = '\0';
	if (!host)
	{
		return;
	}
	address = host->get_address(host);
	if (!inet_ntop(host->get_family(host), address.ptr, buf, len))
	{
		buf[0] = '\0';
	}
}

void espgw_add_host(evc_builder_t *b, const char *key, host_t *host)
{
	char text[INET6_ADDRSTRLEN];

	espgw_address_text(host, text, sizeof(text));
	evc_add_str(b, key, text);
}

/* "net/prefix" of a traffic selector; a range that is not a subnet becomes the smallest
 * subnet covering it. */
void espgw_subnet_text(traffic_selector_t *ts, char *buf, size_t len)
{
	host_t *net;
	uint8_t mask;
	char address[INET6_ADDRSTRLEN];

	ts->to_subnet(ts, &net, &mask);
	espgw_address_text(net, address, sizeof(address));
	snprintf(buf, len, "%s/%u", address, mask);
	net->destroy(net);
}

/* add-sa's selector lists: "net/prefix", or "net/prefix[PROTO/FROM-TO]" when the selector
 * names a protocol or ports, so that espgw checks those too on decrypted packets (RFC
 * 4301 5.2; for ICMP, charon keeps type and code in the port fields). */
void espgw_add_ts_list(evc_builder_t *b, const char *key, linked_list_t *list)
{
	enumerator_t *enumerator;
	traffic_selector_t *ts;
	char text[INET6_ADDRSTRLEN + 32];
	size_t len;

	evc_begin_list(b, key);
	if (list)
	{
		enumerator = list->create_enumerator(list);
		while (enumerator->enumerate(enumerator, &ts))
		{
			espgw_subnet_text(ts, text, sizeof(text));
			if (ts->get_protocol(ts) != 0 || ts->get_from_port(ts) != 0 ||
				ts->get_to_port(ts) != 65535)
			{
				len = strlen(text);
				snprintf(text + len, sizeof(text) - len, "[%u/%u-%u]",
						 ts->get_protocol(ts), ts->get_from_port(ts),
						 ts->get_to_port(ts));
			}
			evc_add_item(b, chunk_from_str(text));
		}
		enumerator->destroy(enumerator);
	}
	evc_end_list(b);
}

/* A selector as the policy messages carry it: subnet, protocol and port range. */
void espgw_add_ts(evc_builder_t *b, const char *prefix, traffic_selector_t *ts)
{
	char key[32], text[INET6_ADDRSTRLEN + 8];

	espgw_subnet_text(ts, text, sizeof(text));
	snprintf(key, sizeof(key), "%s-net", prefix);
	evc_add_str(b, key, text);
	snprintf(key, sizeof(key), "%s-proto", prefix);
	evc_add_u64(b, key, ts->get_protocol(ts));
	snprintf(key, sizeof(key), "%s-port-from", prefix);
	evc_add_u64(b, key, ts->get_from_port(ts));
	snprintf(key, sizeof(key), "%s-port-to", prefix);
	evc_add_u64(b, key, ts->get_to_port(ts));
}

const char *espgw_direction_name(policy_dir_t dir)
{
	switch (dir)
	{
		case POLICY_IN:
			return "in";
		case POLICY_OUT:
			return "out";
		default:
			return "fwd";
	}
}

/* espgw's name of the cipher from the IKE transform and the key length charon hands
 * over: an AEAD's cipher key plus the 4-byte salt, or AES-CBC's key alone. */
const char *espgw_algorithm_name(uint16_t enc_alg, size_t key_len)
{
	switch (enc_alg)
	{
		case ENCR_AES_GCM_ICV16:
			return key_len == 20 ? "aes-gcm-128" : key_len == 36 ? "aes-gcm-256" : NULL;
		case ENCR_CHACHA20_POLY1305:
			return key_len == 36 ? "chacha20-poly1305" : NULL;
		case ENCR_AES_CBC:
			return key_len == 16   ? "aes-cbc-128"
				   : key_len == 24 ? "aes-cbc-192"
				   : key_len == 32 ? "aes-cbc-256"
								   : NULL;
		default:
			return NULL;
	}
}

/* espgw's name of the HMAC that goes with AES-CBC; NULL for any other. */
const char *espgw_integrity_name(uint16_t int_alg)
{
	switch (int_alg)
	{
		case AUTH_HMAC_SHA1_96:
			return "hmac-sha1-96";
		case AUTH_HMAC_SHA2_256_128:
			return "hmac-sha2-256-128";
		case AUTH_HMAC_SHA2_384_192:
			return "hmac-sha2-384-192";
		case AUTH_HMAC_SHA2_512_256:
			return "hmac-sha2-512-256";
		default:
			return NULL;
	}
}

/* charon's copy_dscp as espgw's add-sa spells it */
const char *espgw_dscp_copy_word(dscp_copy_t copy)
{
	switch (copy)
	{
		case DSCP_COPY_IN_ONLY:
			return "in";
		case DSCP_COPY_YES:
			return "yes";
		case DSCP_COPY_NO:
			return "no";
		case DSCP_COPY_OUT_ONLY:
		default:
			return "out";
	}
}

const char *espgw_policy_type_name(policy_type_t type)
{
	switch (type)
	{
		case POLICY_IPSEC:
			return "protect";
		case POLICY_PASS:
			return "bypass";
		default:
			return "discard";
	}
}

const char *espgw_priority_name(policy_priority_t prio)
{
	switch (prio)
	{
		case POLICY_PRIORITY_PASS:
			return "pass";
		case POLICY_PRIORITY_ROUTED:
			return "routed";
		case POLICY_PRIORITY_FALLBACK:
			return "fallback";
		default:
			return "default";
	}
}
