#include "espgw_socket.h"
#include "espgw_control.h"
#include "espgw_vici_codec.h"

#include <daemon.h>

#include <arpa/inet.h>

typedef struct private_espgw_socket_t private_espgw_socket_t;

struct private_espgw_socket_t
{
	socket_t public;
	uint16_t port;
	uint16_t natt_port;
};

METHOD(socket_t, receive, status_t, private_espgw_socket_t *this, packet_t **packet)
{
	*packet = espgw_control->receive_ike(espgw_control);
	return SUCCESS;
}

static void add_endpoint(evc_builder_t *b, const char *address_key, const char *port_key,
						 host_t *host)
{
	char text[INET6_ADDRSTRLEN] = "";
	chunk_t address = host->get_address(host);

	inet_ntop(host->get_family(host), address.ptr, text, sizeof(text));
	evc_add_str(b, address_key, text);
	evc_add_u64(b, port_key, host->get_port(host));
}

METHOD(socket_t, send_, status_t, private_espgw_socket_t *this, packet_t *packet)
{
	host_t *src = packet->get_source(packet), *dst = packet->get_destination(packet);
	chunk_t request, response, name, message;
	evc_builder_t b;
	uint8_t type;
	status_t status = FAILED;

	/* charon's sender has added the non-ESP marker for the NAT-T port, and its receiver
	 * strips it: espgw carries the UDP payload unchanged both ways */
	evc_begin(&b, EVC_CMD_REQUEST, "ike-send");
	add_endpoint(&b, "src", "src-port", src);
	add_endpoint(&b, "dst", "dst-port", dst);
	evc_add_kv(&b, "data", packet->get_data(packet));
	request = evc_finish(&b);
	if (!request.len)
	{
		DBG1(DBG_NET, "IKE packet to %#H too large to pass to espgw", dst);
		return FAILED;
	}
	response = espgw_control->request(espgw_control, request);
	chunk_free(&request);
	if (response.len && evc_parse_packet(response, &type, &name, &message) &&
		type == EVC_CMD_RESPONSE && evc_success(message))
	{
		status = SUCCESS;
	}
	else
	{
		DBG1(DBG_NET, "espgw did not send the IKE packet to %#H", dst);
	}
	chunk_free(&response);
	return status;
}

METHOD(socket_t, get_port, uint16_t, private_espgw_socket_t *this, bool nat_t)
{
	return nat_t ? this->natt_port : this->port;
}

METHOD(socket_t, supported_families, socket_family_t, private_espgw_socket_t *this)
{
	return SOCKET_FAMILY_BOTH;
}

METHOD(socket_t, destroy, void, private_espgw_socket_t *this)
{
	free(this);
}

socket_t *espgw_socket_create(void)
{
	private_espgw_socket_t *this;

	if (!espgw_control)
	{
		return NULL;
	}
	INIT(this,
		 .public =
			 {
				 .send = _send_,
				 .receive = _receive,
				 .get_port = _get_port,
				 .supported_families = _supported_families,
				 .destroy = _destroy,
			 },
		 /* the same settings socket-default reads; espgw must listen on these ports */
		 .port =
			 lib->settings->get_int(lib->settings, "%s.port", CHARON_UDP_PORT, lib->ns),
		 .natt_port = lib->settings->get_int(lib->settings, "%s.port_nat_t",
											 CHARON_NATT_PORT, lib->ns), );
	return &this->public;
}
