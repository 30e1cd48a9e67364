/*
 * The espgw charon plugin (libstrongswan-espgw.so): charon's kernel_ipsec_t and socket_t,
 * both carried to espgw's control socket, so that charon negotiates and espgw does every
 * byte of ESP and owns the IKE ports.
 */
#ifndef ESPGW_PLUGIN_H_
#define ESPGW_PLUGIN_H_

#include <plugins/plugin.h>

typedef struct espgw_plugin_t espgw_plugin_t;

struct espgw_plugin_t
{
	plugin_t plugin;
};

#endif
