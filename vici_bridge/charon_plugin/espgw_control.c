#include "espgw_control.h"
#include "espgw_vici_codec.h"

#include <daemon.h>
#include <collections/blocking_queue.h>
#include <collections/hashtable.h>
#include <collections/linked_list.h>
#include <threading/mutex.h>
#include <threading/thread.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
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

typedef struct
{
	char *key;
	chunk_t packet;
	int refs;
	uint32_t spi;
	host_t *dst;
} remembered_t;

typedef struct
{
	uint32_t spi;
	host_t *dst;
} pending_rekey_t;

struct private_espgw_control_t
{
	espgw_control_t public;
	char path[108];
	/* the command connection, the remembered state, and espgw's instance */
	mutex_t *mutex;
	int fd;
	uint64_t instance;
	uint64_t espgw_instance;
	hashtable_t *state;
	blocking_queue_t *ike;
	refcount_t ike_queued;
	thread_t *events;
	int event_fd;
};

static int connect_socket(private_espgw_control_t *this, bool timeouts)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct timeval timeout = {.tv_sec = COMMAND_TIMEOUT_S};
	int fd;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		return -1;
	}
	memcpy(addr.sun_path, this->path, sizeof(addr.sun_path));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
	{
		close(fd);
		return -1;
	}
	if (timeouts)
	{
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	}
	return fd;
}

static bool write_all(int fd, chunk_t data)
{
	while (data.len)
	{
		ssize_t n = send(fd, data.ptr, data.len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
		{
			continue;
		}
		if (n <= 0)
		{
			return FALSE;
		}
		data = chunk_skip(data, n);
	}
	return TRUE;
}

static bool read_all(int fd, u_char *buf, size_t len)
{
	while (len)
	{
		ssize_t n = recv(fd, buf, len, 0);

		if (n < 0 && errno == EINTR)
		{
			continue;
		}
		if (n <= 0)
		{
			return FALSE;
		}
		buf += n;
		len -= n;
	}
	return TRUE;
}

/* One packet without its length prefix, or chunk_empty on EOF, timeout or a bad length.
 */
static chunk_t read_packet(int fd)
{
	u_char prefix[4];
	uint32_t len;
	chunk_t packet;

	if (!read_all(fd, prefix, sizeof(prefix)))
	{
		return chunk_empty;
	}
	len = untoh32(prefix);
	if (len == 0 || len > EVC_MAX_PACKET)
	{
		return chunk_empty;
	}
	packet = chunk_alloc(len);
	if (!read_all(fd, packet.ptr, len))
	{
		chunk_free(&packet);
		return chunk_empty;
	}
	return packet;
}

static chunk_t exchange(int fd, chunk_t request)
{
	if (!write_all(fd, request))
	{
		return chunk_empty;
	}
	return read_packet(fd);
}

static void close_command_locked(private_espgw_control_t *this)
{
	if (this->fd >= 0)
	{
		close(this->fd);
		this->fd = -1;
	}
}

/* Sends everything remembered again: policies first (as often as they are referenced),
 * then SAs, whose (spi, dst) go on `rekey`. */
static void replay_locked(private_espgw_control_t *this, linked_list_t *rekey)
{
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;
	int pass, i, sent = 0, failed = 0;

	for (pass = 0; pass < 2; pass++)
	{
		enumerator = this->state->create_enumerator(this->state);
		while (enumerator->enumerate(enumerator, &key, &entry))
		{
			if ((pass == 0) != (entry->spi == 0))
			{
				continue;
			}
			for (i = 0; i < entry->refs; i++)
			{
				/* SAs go back marked: their keys were used by the previous espgw, whose
				 * counters the new one must continue (or hold the SA until the rekey
				 * asked for below). Without the mark it would take them for new keys. */
				chunk_t marked = entry->spi ? evc_append_kv(entry->packet, "replayed",
															chunk_from_str("yes"))
											: chunk_empty;
				chunk_t response =
					entry->spi ? (marked.len ? exchange(this->fd, marked) : chunk_empty)
							   : exchange(this->fd, entry->packet);
				uint8_t type;
				chunk_t name, message;

				chunk_clear(&marked);

				if (response.len && evc_parse_packet(response, &type, &name, &message) &&
					type == EVC_CMD_RESPONSE && evc_success(message))
				{
					sent++;
				}
				else
				{
					failed++;
				}
				chunk_free(&response);
			}
			if (entry->spi)
			{
				pending_rekey_t *pending;

				INIT(pending, .spi = entry->spi, .dst = entry->dst->clone(entry->dst), );
				rekey->insert_last(rekey, pending);
			}
		}
		enumerator->destroy(enumerator);
	}
	DBG1(DBG_KNL, "espgw restarted: %d SA and policy installations replayed, %d failed",
		 sent, failed);
}

/* Makes sure the command connection is up and espgw knows this charon. A new espgw
 * instance gets the remembered state again. Returns FALSE if espgw is unreachable. */
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
	this->fd = connect_socket(this, TRUE);
	if (this->fd < 0)
	{
		return FALSE;
	}
	snprintf(instance, sizeof(instance), "%016llx", (unsigned long long)this->instance);
	evc_begin(&b, EVC_CMD_REQUEST, "hello");
	evc_add_str(&b, "charon-instance", instance);
	hello = evc_finish(&b);
	response = exchange(this->fd, hello);
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
		if (this->state->get_count(this->state))
		{
			replay_locked(this, rekey);
		}
	}
	return TRUE;
}

/* Asks charon to rekey the CHILD_SAs whose SAs were replayed (soft expire). */
static void rekey_replayed(linked_list_t *rekey)
{
	pending_rekey_t *pending;

	while (rekey->remove_first(rekey, (void **)&pending) == SUCCESS)
	{
		charon->kernel->expire(charon->kernel, IPPROTO_ESP, pending->spi, pending->dst,
							   FALSE);
		pending->dst->destroy(pending->dst);
		free(pending);
	}
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
		response = exchange(this->fd, packet);
		if (!response.len)
		{
			/* espgw went away (or timed out): reconnect once, it may be back */
			close_command_locked(this);
		}
	}
	this->mutex->unlock(this->mutex);
	rekey_replayed(rekey);
	rekey->destroy(rekey);
	return response;
}

METHOD(espgw_control_t, remember, void, private_espgw_control_t *this, char *key,
	   chunk_t packet, uint32_t spi, host_t *dst)
{
	remembered_t *entry;

	this->mutex->lock(this->mutex);
	entry = this->state->get(this->state, key);
	if (entry && spi == 0)
	{
		entry->refs++;
	}
	else
	{
		if (entry)
		{
			/* an SA installed again under its key: the new request replaces the old */
			chunk_clear(&entry->packet);
			entry->packet = chunk_clone(packet);
		}
		else
		{
			INIT(entry, .key = strdup(key), .packet = chunk_clone(packet), .refs = 1,
				 .spi = spi, .dst = dst ? dst->clone(dst) : NULL, );
			this->state->put(this->state, entry->key, entry);
		}
	}
	this->mutex->unlock(this->mutex);
}

static void destroy_remembered(remembered_t *entry)
{
	chunk_clear(&entry->packet);
	DESTROY_IF(entry->dst);
	free(entry->key);
	free(entry);
}

METHOD(espgw_control_t, forget, void, private_espgw_control_t *this, char *key)
{
	remembered_t *entry;

	this->mutex->lock(this->mutex);
	entry = this->state->get(this->state, key);
	if (entry && --entry->refs <= 0)
	{
		this->state->remove(this->state, key);
		destroy_remembered(entry);
	}
	this->mutex->unlock(this->mutex);
}

METHOD(espgw_control_t, forget_all, void, private_espgw_control_t *this, char *prefix)
{
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;

	this->mutex->lock(this->mutex);
	enumerator = this->state->create_enumerator(this->state);
	while (enumerator->enumerate(enumerator, &key, &entry))
	{
		if (strpfx(entry->key, prefix))
		{
			this->state->remove_at(this->state, enumerator);
			destroy_remembered(entry);
		}
	}
	enumerator->destroy(enumerator);
	this->mutex->unlock(this->mutex);
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

static void handle_expire(chunk_t message)
{
	uint64_t spi;
	chunk_t hard, address;
	host_t *dst;
	char text[INET6_ADDRSTRLEN];

	if (!evc_find_u64(message, "spi", &spi) || spi > 0xffffffff ||
		!evc_find(message, "dst", &address) || address.len == 0 ||
		address.len >= sizeof(text) || !evc_find(message, "hard", &hard))
	{
		DBG1(DBG_KNL, "espgw sent a malformed sa-expire event, ignored");
		return;
	}
	memcpy(text, address.ptr, address.len);
	text[address.len] = '\0';
	dst = host_create_from_string(text, 0);
	if (!dst)
	{
		return;
	}
	charon->kernel->expire(charon->kernel, IPPROTO_ESP, htonl((uint32_t)spi), dst,
						   chunk_equals(hard, chunk_from_str("yes")));
	dst->destroy(dst);
}

static bool subscribe(int fd, const char *event)
{
	evc_builder_t b;
	chunk_t packet, response, name, message;
	uint8_t type = 0;
	bool ok;

	evc_begin(&b, EVC_EVENT_REGISTER, event);
	packet = evc_finish(&b);
	response = exchange(fd, packet);
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

/* The event connection: (re)connects, subscribes, resynchronises the command side, then
 * dispatches events until espgw goes away. */
static void *run_events(private_espgw_control_t *this)
{
	bool reported_down = FALSE;

	while (TRUE)
	{
		linked_list_t *rekey;
		chunk_t packet, name, message;
		uint8_t type;
		bool old;

		this->event_fd = connect_socket(this, FALSE);
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
		if (!subscribe(this->event_fd, "ike-packet") ||
			!subscribe(this->event_fd, "sa-expire"))
		{
			close(this->event_fd);
			this->event_fd = -1;
			sleep_cancellable(1);
			continue;
		}
		reported_down = FALSE;

		/* a new espgw instance gets charon's SAs and policies now, not on the next call
		 */
		rekey = linked_list_create();
		this->mutex->lock(this->mutex);
		close_command_locked(this);
		connect_locked(this, rekey);
		this->mutex->unlock(this->mutex);
		rekey_replayed(rekey);
		rekey->destroy(rekey);

		while (TRUE)
		{
			old = thread_cancelability(TRUE);
			packet = read_packet(this->event_fd);
			thread_cancelability(old);
			if (!packet.len)
			{
				break;
			}
			if (evc_parse_packet(packet, &type, &name, &message) && type == EVC_EVENT)
			{
				if (chunk_equals(name, chunk_from_str("ike-packet")))
				{
					handle_ike_packet(this, message);
				}
				else if (chunk_equals(name, chunk_from_str("sa-expire")))
				{
					handle_expire(message);
				}
			}
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
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;

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
	enumerator = this->state->create_enumerator(this->state);
	while (enumerator->enumerate(enumerator, &key, &entry))
	{
		destroy_remembered(entry);
	}
	enumerator->destroy(enumerator);
	this->state->destroy(this->state);
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
				 .forget = _forget,
				 .forget_all = _forget_all,
				 .receive_ike = _receive_ike,
				 .destroy = _destroy,
			 },
		 .mutex = mutex_create(MUTEX_TYPE_DEFAULT), .fd = -1, .event_fd = -1,
		 .state = hashtable_create(hashtable_hash_str, hashtable_equals_str, 64),
		 .ike = blocking_queue_create(), );
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
