#include "espgw_plugin.h"
#include "espgw_control.h"
#include "espgw_kernel_ipsec.h"
#include "espgw_socket.h"

#include <daemon.h>

typedef struct private_espgw_plugin_t private_espgw_plugin_t;

struct private_espgw_plugin_t
{
	espgw_plugin_t public;
};

METHOD(plugin_t, get_name, char *, private_espgw_plugin_t *this)
{
	return "espgw";
}

METHOD(plugin_t, get_features, int, private_espgw_plugin_t *this,
	   plugin_feature_t *features[])
{
	static plugin_feature_t f[] = {
		PLUGIN_CALLBACK(kernel_ipsec_register, espgw_kernel_ipsec_create),
		PLUGIN_PROVIDE(CUSTOM, "kernel-ipsec"),
		PLUGIN_CALLBACK(socket_register, espgw_socket_create),
		PLUGIN_PROVIDE(CUSTOM, "socket"),
		PLUGIN_SDEPEND(CUSTOM, "kernel-ipsec"),
	};
	*features = f;
	return countof(f);
}

METHOD(plugin_t, destroy, void, private_espgw_plugin_t *this)
{
	if (espgw_control)
	{
		espgw_control->destroy(espgw_control);
		espgw_control = NULL;
	}
	free(this);
}

__attribute__((visibility("default"))) plugin_t *espgw_plugin_create(void)
{
	private_espgw_plugin_t *this;

	INIT(this,
		 .public = {
			 .plugin =
				 {
					 .get_name = _get_name,
					 .get_features = _get_features,
					 .destroy = _destroy,
				 },
		 }, );
	espgw_control = espgw_control_create();
	return &this->public.plugin;
}
