#include "espgw_kernel_ipsec.h"
#include "espgw_control.h"
#include "espgw_vici_codec.h"

#include <daemon.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

typedef struct private_espgw_kernel_ipsec_t private_espgw_kernel_ipsec_t;

struct private_espgw_kernel_ipsec_t
{
	kernel_ipsec_t public;
};

/* Text form of an address (no port); "" for NULL or an unknown family. */
static void address_text(host_t *host, char *buf, size_t len)
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

static void add_host(evc_builder_t *b, const char *key, host_t *host)
{
	char text[INET6_ADDRSTRLEN];

	address_text(host, text, sizeof(text));
	evc_add_str(b, key, text);
}

/* "net/prefix" of a traffic selector; a range that is not a subnet becomes the smallest
 * subnet covering it. */
static void subnet_text(traffic_selector_t *ts, char *buf, size_t len)
{
	host_t *net;
	uint8_t mask;
	char address[INET6_ADDRSTRLEN];

	ts->to_subnet(ts, &net, &mask);
	address_text(net, address, sizeof(address));
	snprintf(buf, len, "%s/%u", address, mask);
	net->destroy(net);
}

/* add-sa's selector lists: "net/prefix", or "net/prefix[PROTO/FROM-TO]" when the selector
 * names a protocol or ports, so that espgw checks those too on decrypted packets (RFC
 * 4301 5.2; for ICMP, charon keeps type and code in the port fields). */
static void add_ts_list(evc_builder_t *b, const char *key, linked_list_t *list)
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
			subnet_text(ts, text, sizeof(text));
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
static void add_ts(evc_builder_t *b, const char *prefix, traffic_selector_t *ts)
{
	char key[32], text[INET6_ADDRSTRLEN + 8];

	subnet_text(ts, text, sizeof(text));
	snprintf(key, sizeof(key), "%s-net", prefix);
	evc_add_str(b, key, text);
	snprintf(key, sizeof(key), "%s-proto", prefix);
	evc_add_u64(b, key, ts->get_protocol(ts));
	snprintf(key, sizeof(key), "%s-port-from", prefix);
	evc_add_u64(b, key, ts->get_from_port(ts));
	snprintf(key, sizeof(key), "%s-port-to", prefix);
	evc_add_u64(b, key, ts->get_to_port(ts));
}

static const char *direction_name(policy_dir_t dir)
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

/* The key under which an SA or policy is remembered for replay. */
static void sa_key(char *buf, size_t len, uint32_t spi, host_t *dst)
{
	char address[INET6_ADDRSTRLEN];

	address_text(dst, address, sizeof(address));
	snprintf(buf, len, "sa/%08x/%s", ntohl(spi), address);
}

static void policy_key(char *buf, size_t len, kernel_ipsec_policy_id_t *id)
{
	char src[INET6_ADDRSTRLEN + 8], dst[INET6_ADDRSTRLEN + 8];

	subnet_text(id->src_ts, src, sizeof(src));
	subnet_text(id->dst_ts, dst, sizeof(dst));
	snprintf(buf, len, "policy/%s/%s/%u/%u-%u/%s/%u/%u-%u", direction_name(id->dir), src,
			 id->src_ts->get_protocol(id->src_ts), id->src_ts->get_from_port(id->src_ts),
			 id->src_ts->get_to_port(id->src_ts), dst,
			 id->dst_ts->get_protocol(id->dst_ts), id->dst_ts->get_from_port(id->dst_ts),
			 id->dst_ts->get_to_port(id->dst_ts));
}

/* Sends a finished request and returns SUCCESS, NOT_FOUND, NOT_SUPPORTED or FAILED from
 * espgw's answer; on success the response message is left in *response if asked for. */
static status_t send_request(chunk_t packet, const char *what, chunk_t *response_out)
{
	chunk_t response, name, message, errmsg;
	uint8_t type;
	status_t status = FAILED;

	if (!packet.len)
	{
		DBG1(DBG_KNL, "espgw: %s request could not be encoded", what);
		return FAILED;
	}
	response = espgw_control->request(espgw_control, packet);
	if (!response.len)
	{
		DBG1(DBG_KNL, "espgw: %s failed: espgw is not reachable", what);
		return FAILED;
	}
	if (!evc_parse_packet(response, &type, &name, &message) || type != EVC_CMD_RESPONSE)
	{
		DBG1(DBG_KNL, "espgw: %s: unexpected answer", what);
	}
	else if (evc_success(message))
	{
		status = SUCCESS;
	}
	else if (evc_find(message, "errmsg", &errmsg))
	{
		if (chunk_equals(errmsg, chunk_from_str("not found")))
		{
			status = NOT_FOUND;
		}
		else if (chunk_equals(errmsg, chunk_from_str("not supported")))
		{
			status = NOT_SUPPORTED;
		}
		else
		{
			DBG1(DBG_KNL, "espgw: %s failed: %.*s", what, (int)errmsg.len, errmsg.ptr);
		}
	}
	if (status == SUCCESS && response_out)
	{
		*response_out = response;
	}
	else
	{
		chunk_free(&response);
	}
	return status;
}

/* send_request() for a request nobody needs afterwards: the packet is wiped and freed. */
static status_t send_owned(chunk_t packet, const char *what, chunk_t *response_out)
{
	status_t status = send_request(packet, what, response_out);

	chunk_clear(&packet);
	return status;
}

/* A command without arguments. */
static status_t send_command(const char *command)
{
	evc_builder_t b;

	evc_begin(&b, EVC_CMD_REQUEST, command);
	return send_owned(evc_finish(&b), command, NULL);
}

/* The value of a numeric key of a successful response. */
static bool response_u64(chunk_t response, const char *key, uint64_t *value)
{
	chunk_t name, message;
	uint8_t type;

	return evc_parse_packet(response, &type, &name, &message) &&
		   evc_find_u64(message, key, value);
}

METHOD(kernel_ipsec_t, get_features, kernel_feature_t, private_espgw_kernel_ipsec_t *this)
{
	/* espgw strips TFC padding it receives (RFC 4303 2.4); policies find SAs by reqid,
	 * so an SA update needs no policy reinstall */
	return KERNEL_ESP_V3_TFC | KERNEL_NO_POLICY_UPDATES;
}

METHOD(kernel_ipsec_t, get_spi, status_t, private_espgw_kernel_ipsec_t *this, host_t *src,
	   host_t *dst, uint8_t protocol, uint32_t *spi)
{
	evc_builder_t b;
	chunk_t response;
	uint64_t value;
	status_t status;

	if (protocol != IPPROTO_ESP)
	{
		return NOT_SUPPORTED;
	}
	evc_begin(&b, EVC_CMD_REQUEST, "get-spi");
	add_host(&b, "src", src);
	add_host(&b, "dst", dst);
	status = send_owned(evc_finish(&b), "get-spi", &response);
	if (status != SUCCESS)
	{
		return status;
	}
	if (!response_u64(response, "spi", &value) || value == 0 || value > 0xffffffff)
	{
		chunk_free(&response);
		return FAILED;
	}
	chunk_free(&response);
	*spi = htonl((uint32_t)value);
	return SUCCESS;
}

METHOD(kernel_ipsec_t, get_cpi, status_t, private_espgw_kernel_ipsec_t *this, host_t *src,
	   host_t *dst, uint16_t *cpi)
{
	return NOT_SUPPORTED;
}

/* espgw's name of the cipher from the IKE transform and the key length charon hands
 * over: an AEAD's cipher key plus the 4-byte salt, or AES-CBC's key alone. */
static const char *algorithm_name(uint16_t enc_alg, size_t key_len)
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
static const char *integrity_name(uint16_t int_alg)
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
static const char *dscp_copy_word(dscp_copy_t copy)
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

METHOD(kernel_ipsec_t, add_sa, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_sa_id_t *id, kernel_ipsec_add_sa_t *data)
{
	const char *algorithm = algorithm_name(data->enc_alg, data->enc_key.len);
	const char *integrity = integrity_name(data->int_alg);
	bool aead = data->enc_alg != ENCR_AES_CBC;
	evc_builder_t b;
	chunk_t packet;
	ike_sa_t *ike_sa;
	char key[64];
	status_t status;

	if (id->proto != IPPROTO_ESP || data->mode != MODE_TUNNEL ||
		data->ipcomp != IPCOMP_NONE || !algorithm ||
		(aead ? data->int_alg != AUTH_UNDEFINED : !integrity))
	{
		DBG1(DBG_KNL,
			 "espgw: SA %.8x refused: espgw does ESP tunnel mode with AES-GCM-16, "
			 "ChaCha20-Poly1305 or AES-CBC with HMAC-SHA1-96/SHA2 only (got %N, %N, %N)",
			 ntohl(id->spi), ipsec_mode_names, data->mode, encryption_algorithm_names,
			 data->enc_alg, integrity_algorithm_names, data->int_alg);
		return NOT_SUPPORTED;
	}
	if (id->mark.value || id->if_id)
	{
		DBG1(DBG_KNL, "espgw: SA %.8x refused: marks and interface IDs are not supported",
			 ntohl(id->spi));
		return NOT_SUPPORTED;
	}
	evc_begin(&b, EVC_CMD_REQUEST, "add-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	add_host(&b, "src", id->src);
	add_host(&b, "dst", id->dst);
	evc_add_u64(&b, "reqid", data->reqid);
	evc_add_bool(&b, "inbound", data->inbound);
	evc_add_str(&b, "algorithm", algorithm);
	evc_add_kv(&b, "key", data->enc_key);
	if (!aead)
	{
		evc_add_str(&b, "integrity", integrity);
		evc_add_kv(&b, "integrity-key", data->int_key);
	}
	evc_add_bool(&b, "esn", data->esn);
	evc_add_u64(&b, "replay-window", data->replay_window);
	evc_add_bool(&b, "encap", data->encap);
	/* what crosses between inner and outer header: espgw writes the outer header */
	evc_add_str(&b, "copy-dscp", dscp_copy_word(data->copy_dscp));
	evc_add_bool(&b, "copy-ecn", data->copy_ecn);
	evc_add_bool(&b, "copy-df", data->copy_df);
	evc_add_u64(&b, "src-port", id->src->get_port(id->src));
	evc_add_u64(&b, "dst-port", id->dst->get_port(id->dst));
	if (data->lifetime)
	{
		/* charon rekeys a CHILD_SA when the kernel reports the soft limit, time
		 * included, and deletes it on the hard one: espgw plays the kernel's part */
		evc_add_u64(&b, "soft-bytes", data->lifetime->bytes.rekey);
		evc_add_u64(&b, "hard-bytes", data->lifetime->bytes.life);
		evc_add_u64(&b, "soft-packets", data->lifetime->packets.rekey);
		evc_add_u64(&b, "hard-packets", data->lifetime->packets.life);
		evc_add_u64(&b, "soft-seconds", data->lifetime->time.rekey);
		evc_add_u64(&b, "hard-seconds", data->lifetime->time.life);
	}
	/* the IKE_SA this thread works on: a rekeyed CHILD_SA keeps its ECMP slot */
	ike_sa = charon->bus->get_sa(charon->bus);
	if (ike_sa)
	{
		evc_add_u64(&b, "ike-sa", ike_sa->get_unique_id(ike_sa));
	}
	add_ts_list(&b, "src-ts", data->src_ts);
	add_ts_list(&b, "dst-ts", data->dst_ts);
	packet = evc_finish(&b);
	status = send_request(packet, "add-sa", NULL);
	if (status == SUCCESS)
	{
		sa_key(key, sizeof(key), id->spi, id->dst);
		espgw_control->remember(espgw_control, key, packet, id->spi, id->dst);
	}
	chunk_clear(&packet);
	return status;
}

METHOD(kernel_ipsec_t, update_sa, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_sa_id_t *id, kernel_ipsec_update_sa_t *data)
{
	evc_builder_t b;
	chunk_t packet;

	/* espgw moves no SA to new addresses; NOT_SUPPORTED makes charon rekey instead, which
	 * installs fresh SAs for the new addresses */
	evc_begin(&b, EVC_CMD_REQUEST, "update-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	add_host(&b, "src", id->src);
	add_host(&b, "dst", id->dst);
	add_host(&b, "new-src", data->new_src);
	add_host(&b, "new-dst", data->new_dst);
	evc_add_u64(&b, "src-port", id->src->get_port(id->src));
	evc_add_u64(&b, "dst-port", id->dst->get_port(id->dst));
	evc_add_u64(&b, "new-src-port", data->new_src->get_port(data->new_src));
	evc_add_u64(&b, "new-dst-port", data->new_dst->get_port(data->new_dst));
	evc_add_bool(&b, "encap", data->encap);
	evc_add_bool(&b, "new-encap", data->new_encap);
	packet = evc_finish(&b);
	return send_owned(packet, "update-sa", NULL);
}

METHOD(kernel_ipsec_t, query_sa, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_sa_id_t *id, kernel_ipsec_query_sa_t *data, uint64_t *bytes,
	   uint64_t *packets, time_t *time)
{
	evc_builder_t b;
	chunk_t packet, response;
	uint64_t value;
	status_t status;

	evc_begin(&b, EVC_CMD_REQUEST, "query-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	add_host(&b, "dst", id->dst);
	packet = evc_finish(&b);
	status = send_owned(packet, "query-sa", &response);
	if (status != SUCCESS)
	{
		return status;
	}
	if (bytes)
	{
		*bytes = response_u64(response, "bytes", &value) ? value : 0;
	}
	if (packets)
	{
		*packets = response_u64(response, "packets", &value) ? value : 0;
	}
	if (time)
	{
		/* espgw says how long ago the SA last carried a packet; charon wants the
		 * monotonic time of that moment, 0 if never */
		*time = response_u64(response, "idle-ms", &value)
					? time_monotonic(NULL) - (time_t)(value / 1000)
					: 0;
	}
	chunk_free(&response);
	return SUCCESS;
}

METHOD(kernel_ipsec_t, del_sa, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_sa_id_t *id, kernel_ipsec_del_sa_t *data)
{
	evc_builder_t b;
	chunk_t packet;
	char key[64];

	sa_key(key, sizeof(key), id->spi, id->dst);
	espgw_control->forget(espgw_control, key);
	evc_begin(&b, EVC_CMD_REQUEST, "del-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	add_host(&b, "dst", id->dst);
	packet = evc_finish(&b);
	return send_owned(packet, "del-sa", NULL);
}

METHOD(kernel_ipsec_t, flush_sas, status_t, private_espgw_kernel_ipsec_t *this)
{
	espgw_control->forget_all(espgw_control, "sa/");
	return send_command("flush-sas");
}

static const char *policy_type_name(policy_type_t type)
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

static const char *priority_name(policy_priority_t prio)
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

static chunk_t policy_request(const char *command, kernel_ipsec_policy_id_t *id,
							  kernel_ipsec_manage_policy_t *data)
{
	evc_builder_t b;

	evc_begin(&b, EVC_CMD_REQUEST, command);
	evc_add_str(&b, "dir", direction_name(id->dir));
	add_ts(&b, "src", id->src_ts);
	add_ts(&b, "dst", id->dst_ts);
	if (data)
	{
		evc_add_str(&b, "action", policy_type_name(data->type));
		evc_add_str(&b, "priority-class", priority_name(data->prio));
		evc_add_u64(&b, "manual-priority", data->manual_prio);
		if (data->sa)
		{
			evc_add_u64(&b, "reqid", data->sa->reqid);
		}
		add_host(&b, "tunnel-src", data->src);
		add_host(&b, "tunnel-dst", data->dst);
	}
	return evc_finish(&b);
}

METHOD(kernel_ipsec_t, add_policy, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_policy_id_t *id, kernel_ipsec_manage_policy_t *data)
{
	chunk_t packet;
	char key[256];
	status_t status;

	if (id->mark.value || id->if_id || id->label)
	{
		DBG1(DBG_KNL,
			 "espgw: policy %R === %R refused: marks, interface IDs and labels "
			 "are not supported",
			 id->src_ts, id->dst_ts);
		return NOT_SUPPORTED;
	}
	packet = policy_request("add-policy", id, data);
	status = send_request(packet, "add-policy", NULL);
	if (status == SUCCESS)
	{
		policy_key(key, sizeof(key), id);
		espgw_control->remember(espgw_control, key, packet, 0, NULL);
	}
	chunk_free(&packet);
	return status;
}

METHOD(kernel_ipsec_t, query_policy, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_policy_id_t *id, kernel_ipsec_query_policy_t *data, time_t *use_time)
{
	chunk_t packet, response;
	uint64_t value;
	status_t status;

	packet = policy_request("query-policy", id, NULL);
	status = send_owned(packet, "query-policy", &response);
	if (status != SUCCESS)
	{
		return status;
	}
	*use_time = response_u64(response, "idle-ms", &value)
					? time_monotonic(NULL) - (time_t)(value / 1000)
					: 0;
	chunk_free(&response);
	return SUCCESS;
}

METHOD(kernel_ipsec_t, del_policy, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_policy_id_t *id, kernel_ipsec_manage_policy_t *data)
{
	chunk_t packet;
	char key[256];

	policy_key(key, sizeof(key), id);
	espgw_control->forget(espgw_control, key);
	packet = policy_request("del-policy", id, data);
	return send_owned(packet, "del-policy", NULL);
}

METHOD(kernel_ipsec_t, flush_policies, status_t, private_espgw_kernel_ipsec_t *this)
{
	espgw_control->forget_all(espgw_control, "policy/");
	return send_command("flush-policies");
}

METHOD(kernel_ipsec_t, bypass_socket, bool, private_espgw_kernel_ipsec_t *this, int fd,
	   int family)
{
	/* espgw's own IKE sockets never meet its policies; there is nothing to exempt */
	return TRUE;
}

METHOD(kernel_ipsec_t, enable_udp_decap, bool, private_espgw_kernel_ipsec_t *this, int fd,
	   int family, uint16_t port)
{
	/* espgw's port-4500 socket demultiplexes ESP and IKE itself (RFC 3948) */
	return TRUE;
}

METHOD(kernel_ipsec_t, destroy, void, private_espgw_kernel_ipsec_t *this)
{
	free(this);
}

kernel_ipsec_t *espgw_kernel_ipsec_create(void)
{
	private_espgw_kernel_ipsec_t *this;

	if (!espgw_control)
	{
		return NULL;
	}
	INIT(this,
		 .public = {
			 .get_features = _get_features,
			 .get_spi = _get_spi,
			 .get_cpi = _get_cpi,
			 .add_sa = _add_sa,
			 .update_sa = _update_sa,
			 .query_sa = _query_sa,
			 .del_sa = _del_sa,
			 .flush_sas = _flush_sas,
			 .add_policy = _add_policy,
			 .query_policy = _query_policy,
			 .del_policy = _del_policy,
			 .flush_policies = _flush_policies,
			 .bypass_socket = _bypass_socket,
			 .enable_udp_decap = _enable_udp_decap,
			 .destroy = _destroy,
		 }, );
	return &this->public;
}
