/*
 * charon's socket_t: espgw owns UDP 500 and 4500 (port 4500 also carries ESP), so IKE
 * packets reach charon as events on the control connection and leave through an
 * "ike-send" command. It replaces socket-default. Like socket-default it moves UDP
 * payloads unchanged: charon's sender and receiver add and strip the non-ESP marker.
 */
#ifndef ESPGW_SOCKET_H_
#define ESPGW_SOCKET_H_

#include <network/socket.h>

socket_t *espgw_socket_create(void);

#endif
