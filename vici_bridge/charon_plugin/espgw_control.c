#include "espgw_control.h"
#include "espgw_control_io.h"
#include "espgw_kernel_events.h"
#include "espgw_replay.h"
#include "espgw_vici_codec.h"

#include <daemon.h>
#include <collections/blocking_queue.h>
#include <collections/linked_list.h>
#include <threading/mutex.h>
#include <threading/thread.h>

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SOCKET "unix:///run/espgw/control.sock"
/* How long a command may wait for espgw; charon's kernel calls block meanwhile. */
#define COMMAND_TIMEOUT_S 10
/* IKE packets espgw pushed that charon's receiver has not taken yet. IKE is a few packets
 * per exchange; beyond this something is flooding us, and IKE retransmits recover. */
#define MAX_QUEUED_IKE 1024

espgw_control_t *espgw_control;

typedef struct private_espgw_control_t private_espgw_control_t;

struct private_espgw_control_t
{
	espgw_control_t public;
	char path[108];
	/* the command connection and espgw's instance; the replay store's replays */
	mutex_t *mutex;
	int fd;
	uint64_t instance;
	uint64_t espgw_instance;
	espgw_replay_t *replay;
	blocking_queue_t *ike;
	refcount_t ike_queued;
	thread_t *events;
	int event_fd;
};

static void close_command_locked(private_espgw_control_t *this)
{
	if (this->fd >= 0)
	{
		close(this->fd);
		this->fd = -1;
	}
}

/* Makes sure the command connection is up and espgw knows this charon. A new espgw
 * instance gets the remembered state again (its SAs go on `rekey`). Returns FALSE if
 * espgw is unreachable. */
static bool connect_locked(private_espgw_control_t *this, linked_list_t *rekey)
{
	evc_builder_t b;
	chunk_t hello, response, name, message;
	uint64_t espgw_instance = 0;
	uint8_t type;
	char instance[32];

	if (this->fd >= 0)
	{
		return TRUE;
	}
	this->fd = espgw_io_connect(this->path, COMMAND_TIMEOUT_S);
	if (this->fd < 0)
	{
		return FALSE;
	}
	snprintf(instance, sizeof(instance), "%016llx", (unsigned long long)this->instance);
	evc_begin(&b, EVC_CMD_REQUEST, "hello");
	evc_add_str(&b, "charon-instance", instance);
	hello = evc_finish(&b);
	response = espgw_io_exchange(this->fd, hello);
	chunk_free(&hello);
	if (!response.len || !evc_parse_packet(response, &type, &name, &message) ||
		type != EVC_CMD_RESPONSE || !evc_success(message) ||
		!evc_find_u64(message, "espgw-instance", &espgw_instance))
	{
		DBG1(DBG_KNL, "espgw at %s refused hello", this->path);
		chunk_free(&response);
		close_command_locked(this);
		return FALSE;
	}
	chunk_free(&response);
	if (espgw_instance != this->espgw_instance)
	{
		if (this->espgw_instance)
		{
			DBG1(DBG_KNL, "connected to a new espgw instance at %s", this->path);
		}
		else
		{
			DBG1(DBG_KNL, "connected to espgw at %s", this->path);
		}
		this->espgw_instance = espgw_instance;
		this->replay->replay(this->replay, this->fd, rekey);
	}
	return TRUE;
}

METHOD(espgw_control_t, request, chunk_t, private_espgw_control_t *this, chunk_t packet)
{
	linked_list_t *rekey = linked_list_create();
	chunk_t response = chunk_empty;
	int attempt;

	this->mutex->lock(this->mutex);
	for (attempt = 0; attempt < 2 && !response.len; attempt++)
	{
		if (!connect_locked(this, rekey))
		{
			break;
		}
		response = espgw_io_exchange(this->fd, packet);
		if (!response.len)
		{
			/* espgw went away (or timed out): reconnect once, it may be back */
			close_command_locked(this);
		}
	}
	this->mutex->unlock(this->mutex);
	espgw_rekey_replayed(rekey);
	rekey->destroy(rekey);
	return response;
}

METHOD(espgw_control_t, remember, void, private_espgw_control_t *this, char *key,
	   chunk_t packet, uint32_t spi, host_t *dst)
{
	this->replay->remember(this->replay, key, packet, spi, dst);
}

METHOD(espgw_control_t, moved, void, private_espgw_control_t *this, char *key,
	   char *new_key, host_t *new_dst, chunk_t update)
{
	this->replay->moved(this->replay, key, new_key, new_dst, update);
}

METHOD(espgw_control_t, forget, void, private_espgw_control_t *this, char *key)
{
	this->replay->forget(this->replay, key);
}

METHOD(espgw_control_t, forget_all, void, private_espgw_control_t *this, char *prefix)
{
	this->replay->forget_all(this->replay, prefix);
}

METHOD(espgw_control_t, receive_ike, packet_t *, private_espgw_control_t *this)
{
	packet_t *packet = this->ike->dequeue(this->ike);

	ref_put(&this->ike_queued);
	return packet;
}

/* A host from an event's address and port keys. */
static host_t *event_host(chunk_t message, const char *address_key, const char *port_key)
{
	chunk_t address;
	uint64_t port;
	char text[INET6_ADDRSTRLEN];

	if (!evc_find(message, address_key, &address) || address.len == 0 ||
		address.len >= sizeof(text) || !evc_find_u64(message, port_key, &port) ||
		port > 65535)
	{
		return NULL;
	}
	memcpy(text, address.ptr, address.len);
	text[address.len] = '\0';
	return host_create_from_string(text, (uint16_t)port);
}

static void handle_ike_packet(private_espgw_control_t *this, chunk_t message)
{
	host_t *src, *dst;
	chunk_t data;

	src = event_host(message, "src", "src-port");
	dst = event_host(message, "dst", "dst-port");
	if (!src || !dst || !evc_find(message, "data", &data) || !data.len)
	{
		DBG1(DBG_NET, "espgw sent a malformed ike-packet event, ignored");
		DESTROY_IF(src);
		DESTROY_IF(dst);
		return;
	}
	if (ref_get(&this->ike_queued) > MAX_QUEUED_IKE)
	{
		ref_put(&this->ike_queued);
		DBG1(DBG_NET, "dropping IKE packet from %#H: %d packets already queued", src,
			 MAX_QUEUED_IKE);
		src->destroy(src);
		dst->destroy(dst);
		return;
	}
	this->ike->enqueue(this->ike, packet_create_from_data(src, dst, chunk_clone(data)));
}

static bool subscribe(int fd, const char *event)
{
	evc_builder_t b;
	chunk_t packet, response, name, message;
	uint8_t type = 0;
	bool ok;

	evc_begin(&b, EVC_EVENT_REGISTER, event);
	packet = evc_finish(&b);
	response = espgw_io_exchange(fd, packet);
	chunk_free(&packet);
	ok = response.len && evc_parse_packet(response, &type, &name, &message) &&
		 type == EVC_EVENT_CONFIRM;
	chunk_free(&response);
	return ok;
}

static void sleep_cancellable(int seconds)
{
	bool old = thread_cancelability(TRUE);

	sleep(seconds);
	thread_cancelability(old);
}

static void dispatch_event(private_espgw_control_t *this, chunk_t packet)
{
	chunk_t name, message;
	uint8_t type;

	if (!evc_parse_packet(packet, &type, &name, &message) || type != EVC_EVENT)
	{
		return;
	}
	if (chunk_equals(name, chunk_from_str("ike-packet")))
	{
		handle_ike_packet(this, message);
	}
	else if (chunk_equals(name, chunk_from_str("sa-expire")))
	{
		espgw_event_expire(message);
	}
	else if (chunk_equals(name, chunk_from_str("acquire")))
	{
		espgw_event_acquire(message);
	}
}

/* The event connection: (re)connects, subscribes, resynchronises the command side, then
 * dispatches events until espgw goes away. */
static void *run_events(private_espgw_control_t *this)
{
	bool reported_down = FALSE;

	while (TRUE)
	{
		linked_list_t *rekey;
		chunk_t packet;
		bool old;

		this->event_fd = espgw_io_connect(this->path, 0);
		if (this->event_fd < 0)
		{
			if (!reported_down)
			{
				DBG1(DBG_KNL,
					 "espgw control socket %s unreachable; retrying every second",
					 this->path);
				reported_down = TRUE;
			}
			sleep_cancellable(1);
			continue;
		}
		/* an espgw without acquires (older) refuses that one alone: charon still gets
		 * its IKE and expiries, and trap policies stay without acquires */
		if (!subscribe(this->event_fd, "ike-packet") ||
			!subscribe(this->event_fd, "sa-expire"))
		{
			close(this->event_fd);
			this->event_fd = -1;
			sleep_cancellable(1);
			continue;
		}
		if (!subscribe(this->event_fd, "acquire"))
		{
			DBG1(DBG_KNL,
				 "espgw at %s raises no acquires: trap policies stay without SAs",
				 this->path);
		}
		reported_down = FALSE;

		/* a new espgw instance gets charon's SAs and policies now, not on the next call
		 */
		rekey = linked_list_create();
		this->mutex->lock(this->mutex);
		close_command_locked(this);
		connect_locked(this, rekey);
		this->mutex->unlock(this->mutex);
		espgw_rekey_replayed(rekey);
		rekey->destroy(rekey);

		while (TRUE)
		{
			old = thread_cancelability(TRUE);
			packet = espgw_io_read_packet(this->event_fd);
			thread_cancelability(old);
			if (!packet.len)
			{
				break;
			}
			dispatch_event(this, packet);
			chunk_free(&packet);
		}
		DBG1(DBG_KNL, "espgw closed the control connection; reconnecting");
		close(this->event_fd);
		this->event_fd = -1;
		sleep_cancellable(1);
	}
	return NULL;
}

METHOD(espgw_control_t, destroy, void, private_espgw_control_t *this)
{
	if (this->events)
	{
		this->events->cancel(this->events);
		this->events->join(this->events);
	}
	if (this->event_fd >= 0)
	{
		close(this->event_fd);
	}
	close_command_locked(this);
	this->replay->destroy(this->replay);
	this->ike->destroy_offset(this->ike, offsetof(packet_t, destroy));
	this->mutex->destroy(this->mutex);
	free(this);
}

espgw_control_t *espgw_control_create(void)
{
	private_espgw_control_t *this;
	char *uri;

	INIT(this,
		 .public =
			 {
				 .request = _request,
				 .remember = _remember,
				 .moved = _moved,
				 .forget = _forget,
				 .forget_all = _forget_all,
				 .receive_ike = _receive_ike,
				 .destroy = _destroy,
			 },
		 .mutex = mutex_create(MUTEX_TYPE_DEFAULT), .fd = -1, .event_fd = -1,
		 .replay = espgw_replay_create(), .ike = blocking_queue_create(), );
	uri = lib->settings->get_str(lib->settings, "%s.plugins.espgw.socket", DEFAULT_SOCKET,
								 lib->ns);
	if (strpfx(uri, "unix://"))
	{
		uri += strlen("unix://");
	}
	snprintf(this->path, sizeof(this->path), "%s", uri);
	/* tells espgw whether a hello comes from the charon it knows or from a new one */
	if (getrandom(&this->instance, sizeof(this->instance), 0) != sizeof(this->instance))
	{
		this->instance = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
	}
	this->events = thread_create((thread_main_t)run_events, this);
	return &this->public;
}
