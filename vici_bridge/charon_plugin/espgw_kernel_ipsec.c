#include "espgw_kernel_ipsec.h"
#include "espgw_request_fields.h"
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

/* The key under which an SA or policy is remembered for replay. */
static void sa_key(char *buf, size_t len, uint32_t spi, host_t *dst)
{
	char address[INET6_ADDRSTRLEN];

	espgw_address_text(dst, address, sizeof(address));
	snprintf(buf, len, "sa/%08x/%s", ntohl(spi), address);
}

static void policy_key(char *buf, size_t len, kernel_ipsec_policy_id_t *id)
{
	char src[INET6_ADDRSTRLEN + 8], dst[INET6_ADDRSTRLEN + 8];

	espgw_subnet_text(id->src_ts, src, sizeof(src));
	espgw_subnet_text(id->dst_ts, dst, sizeof(dst));
	snprintf(buf, len, "policy/%s/%s/%u/%u-%u/%s/%u/%u-%u/%u",
			 espgw_direction_name(id->dir), src, id->src_ts->get_protocol(id->src_ts),
			 id->src_ts->get_from_port(id->src_ts), id->src_ts->get_to_port(id->src_ts),
			 dst, id->dst_ts->get_protocol(id->dst_ts),
			 id->dst_ts->get_from_port(id->dst_ts), id->dst_ts->get_to_port(id->dst_ts),
			 id->if_id);
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
	/* espgw strips TFC padding it receives and pads what it sends to the tfc add_sa
	 * passes (RFC 4303 2.7); policies find SAs by reqid,
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
	espgw_add_host(&b, "src", src);
	espgw_add_host(&b, "dst", dst);
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

METHOD(kernel_ipsec_t, add_sa, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_sa_id_t *id, kernel_ipsec_add_sa_t *data)
{
	const char *algorithm = espgw_algorithm_name(data->enc_alg, data->enc_key.len);
	const char *integrity = espgw_integrity_name(data->int_alg);
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
	if (id->mark.value)
	{
		/* a mark selects packets by the kernel's skb mark, which espgw's TUN devices
		 * never see: route-based tunnels take if_id_in/if_id_out instead */
		DBG1(DBG_KNL,
			 "espgw: SA %.8x refused: marks are not supported (use if_id_in and "
			 "if_id_out with an interface in espgw.conf)",
			 ntohl(id->spi));
		return NOT_SUPPORTED;
	}
	evc_begin(&b, EVC_CMD_REQUEST, "add-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	espgw_add_host(&b, "src", id->src);
	espgw_add_host(&b, "dst", id->dst);
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
	evc_add_str(&b, "copy-dscp", espgw_dscp_copy_word(data->copy_dscp));
	evc_add_bool(&b, "copy-ecn", data->copy_ecn);
	evc_add_bool(&b, "copy-df", data->copy_df);
	if (data->tfc)
	{
		/* the child's tfc_padding (outbound only): pad to that many bytes, "mtu" is
		 * 2^32-1 and espgw caps it at the SA's tunnel MTU */
		evc_add_u64(&b, "tfc", data->tfc);
	}
	evc_add_u64(&b, "src-port", id->src->get_port(id->src));
	evc_add_u64(&b, "dst-port", id->dst->get_port(id->dst));
	/* route-based VPN: the interface (TUN device) an inbound SA delivers into */
	if (id->if_id)
	{
		evc_add_u64(&b, "if-id", id->if_id);
	}
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
	espgw_add_ts_list(&b, "src-ts", data->src_ts);
	espgw_add_ts_list(&b, "dst-ts", data->dst_ts);
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
	char key[64], new_key[64];
	status_t status;

	/* espgw moves the peer's end of an SA in place (same SA, counters and replay
	 * window); what needs another local address, port or encapsulation it answers
	 * NOT_SUPPORTED, and charon rekeys instead, installing fresh SAs */
	evc_begin(&b, EVC_CMD_REQUEST, "update-sa");
	evc_add_u64(&b, "spi", ntohl(id->spi));
	espgw_add_host(&b, "src", id->src);
	espgw_add_host(&b, "dst", id->dst);
	espgw_add_host(&b, "new-src", data->new_src);
	espgw_add_host(&b, "new-dst", data->new_dst);
	evc_add_u64(&b, "src-port", id->src->get_port(id->src));
	evc_add_u64(&b, "dst-port", id->dst->get_port(id->dst));
	evc_add_u64(&b, "new-src-port", data->new_src->get_port(data->new_src));
	evc_add_u64(&b, "new-dst-port", data->new_dst->get_port(data->new_dst));
	evc_add_bool(&b, "encap", data->encap);
	evc_add_bool(&b, "new-encap", data->new_encap);
	packet = evc_finish(&b);
	status = send_request(packet, "update-sa", NULL);
	if (status == SUCCESS)
	{
		/* a replay after an espgw restart moves the SA again, and del_sa finds it */
		sa_key(key, sizeof(key), id->spi, id->dst);
		sa_key(new_key, sizeof(new_key), id->spi, data->new_dst);
		espgw_control->moved(espgw_control, key, new_key, data->new_dst, packet);
	}
	chunk_free(&packet);
	return status;
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
	espgw_add_host(&b, "dst", id->dst);
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
	espgw_add_host(&b, "dst", id->dst);
	packet = evc_finish(&b);
	return send_owned(packet, "del-sa", NULL);
}

METHOD(kernel_ipsec_t, flush_sas, status_t, private_espgw_kernel_ipsec_t *this)
{
	espgw_control->forget_all(espgw_control, "sa/");
	return send_command("flush-sas");
}

static chunk_t policy_request(const char *command, kernel_ipsec_policy_id_t *id,
							  kernel_ipsec_manage_policy_t *data)
{
	evc_builder_t b;

	evc_begin(&b, EVC_CMD_REQUEST, command);
	evc_add_str(&b, "dir", espgw_direction_name(id->dir));
	espgw_add_ts(&b, "src", id->src_ts);
	espgw_add_ts(&b, "dst", id->dst_ts);
	/* part of the policy's identity: two peers' 0.0.0.0/0 policies differ only in it */
	if (id->if_id)
	{
		evc_add_u64(&b, "if-id", id->if_id);
	}
	if (data)
	{
		evc_add_str(&b, "action", espgw_policy_type_name(data->type));
		evc_add_str(&b, "priority-class", espgw_priority_name(data->prio));
		evc_add_u64(&b, "manual-priority", data->manual_prio);
		if (data->sa)
		{
			evc_add_u64(&b, "reqid", data->sa->reqid);
		}
		espgw_add_host(&b, "tunnel-src", data->src);
		espgw_add_host(&b, "tunnel-dst", data->dst);
	}
	return evc_finish(&b);
}

METHOD(kernel_ipsec_t, add_policy, status_t, private_espgw_kernel_ipsec_t *this,
	   kernel_ipsec_policy_id_t *id, kernel_ipsec_manage_policy_t *data)
{
	chunk_t packet;
	char key[256];
	status_t status;

	if (id->mark.value || id->label)
	{
		DBG1(DBG_KNL,
			 "espgw: policy %R === %R refused: marks and security labels are not "
			 "supported (route-based tunnels: if_id_in and if_id_out)",
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
