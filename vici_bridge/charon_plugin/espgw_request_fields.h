/*
 * charon's types as espgw's control requests write them (espgw_kernel_ipsec.c's
 * requests).
 */

#ifndef ESPGW_REQUEST_FIELDS_H_
#define ESPGW_REQUEST_FIELDS_H_

#include "espgw_vici_codec.h"

#include <daemon.h>

/* Text form of an address (no port); "" for NULL or an unknown family. */
void espgw_address_text(host_t *host, char *buf, size_t len);

void espgw_add_host(evc_builder_t *b, const char *key, host_t *host);

/* "net/prefix" of a traffic selector; a range that is not a subnet becomes the smallest
 * subnet covering it. */
void espgw_subnet_text(traffic_selector_t *ts, char *buf, size_t len);

/* add-sa's selector lists: "net/prefix", or "net/prefix[PROTO/FROM-TO]" when the selector
 * names a protocol or ports, so that espgw checks those too on decrypted packets (RFC
 * 4301 5.2; for ICMP, charon keeps type and code in the port fields). */
void espgw_add_ts_list(evc_builder_t *b, const char *key, linked_list_t *list);

/* A selector as the policy messages carry it: subnet, protocol and port range. */
void espgw_add_ts(evc_builder_t *b, const char *prefix, traffic_selector_t *ts);

const char *espgw_direction_name(policy_dir_t dir);

/* espgw's name of the cipher from the IKE transform and the key length charon hands
 * over: an AEAD's cipher key plus the 4-byte salt, or AES-CBC's key alone. */
const char *espgw_algorithm_name(uint16_t enc_alg, size_t key_len);

/* espgw's name of the HMAC that goes with AES-CBC; NULL for any other. */
const char *espgw_integrity_name(uint16_t int_alg);

/* charon's copy_dscp as espgw's add-sa spells it */
const char *espgw_dscp_copy_word(dscp_copy_t copy);

const char *espgw_policy_type_name(policy_type_t type);

const char *espgw_priority_name(policy_priority_t prio);

#endif /* ESPGW_REQUEST_FIELDS_H_ */
