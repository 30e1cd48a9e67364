#include "espgw_vici_codec.h"

#include <stdio.h>
#include <string.h>

#define SECTION_START 1
#define SECTION_END 2
#define KEY_VALUE 3
#define LIST_START 4
#define LIST_ITEM 5
#define LIST_END 6

static void put(evc_builder_t *b, const void *data, size_t len)
{
	if (b->failed)
	{
		return;
	}
	if (b->used + len > EVC_MAX_PACKET + 4)
	{
		b->failed = TRUE;
		return;
	}
	if (b->used + len > b->buf.len)
	{
		size_t size = max(b->buf.len * 2, b->used + len + 256);
		chunk_t bigger = chunk_alloc(size);

		/* copy by hand, so a request with keys never sits in freed memory */
		memcpy(bigger.ptr, b->buf.ptr, b->used);
		chunk_clear(&b->buf);
		b->buf = bigger;
	}
	memcpy(b->buf.ptr + b->used, data, len);
	b->used += len;
}

static void put_u8(evc_builder_t *b, uint8_t v)
{
	put(b, &v, 1);
}

static void put_name(evc_builder_t *b, const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > 255)
	{
		b->failed = TRUE;
		return;
	}
	put_u8(b, (uint8_t)len);
	put(b, name, len);
}

static void put_value(evc_builder_t *b, chunk_t value)
{
	uint8_t len[2];

	if (value.len > 65535)
	{
		b->failed = TRUE;
		return;
	}
	len[0] = value.len >> 8;
	len[1] = value.len & 0xff;
	put(b, len, 2);
	put(b, value.ptr, value.len);
}

void evc_begin(evc_builder_t *b, uint8_t type, const char *name)
{
	static const uint8_t no_length[4];

	*b = (evc_builder_t){.buf = chunk_empty};
	put(b, no_length, 4);
	put_u8(b, type);
	if (name)
	{
		put_name(b, name);
	}
}

void evc_add_kv(evc_builder_t *b, const char *key, chunk_t value)
{
	put_u8(b, KEY_VALUE);
	put_name(b, key);
	put_value(b, value);
}

void evc_add_str(evc_builder_t *b, const char *key, const char *value)
{
	evc_add_kv(b, key, chunk_create((u_char *)value, strlen(value)));
}

void evc_add_u64(evc_builder_t *b, const char *key, uint64_t value)
{
	char text[32];

	snprintf(text, sizeof(text), "%llu", (unsigned long long)value);
	evc_add_str(b, key, text);
}

void evc_add_bool(evc_builder_t *b, const char *key, bool value)
{
	evc_add_str(b, key, value ? "yes" : "no");
}

void evc_begin_section(evc_builder_t *b, const char *name)
{
	put_u8(b, SECTION_START);
	put_name(b, name);
}

void evc_end_section(evc_builder_t *b)
{
	put_u8(b, SECTION_END);
}

void evc_begin_list(evc_builder_t *b, const char *name)
{
	put_u8(b, LIST_START);
	put_name(b, name);
}

void evc_add_item(evc_builder_t *b, chunk_t value)
{
	put_u8(b, LIST_ITEM);
	put_value(b, value);
}

void evc_end_list(evc_builder_t *b)
{
	put_u8(b, LIST_END);
}

chunk_t evc_finish(evc_builder_t *b)
{
	size_t len = b->used - 4;

	if (b->failed || b->used < 5)
	{
		chunk_clear(&b->buf);
		return chunk_empty;
	}
	b->buf.ptr[0] = len >> 24;
	b->buf.ptr[1] = len >> 16;
	b->buf.ptr[2] = len >> 8;
	b->buf.ptr[3] = len;
	b->buf.len = b->used;
	return b->buf;
}

chunk_t evc_append_kv(chunk_t packet, const char *key, chunk_t value)
{
	evc_builder_t b = {.buf = chunk_empty};
	size_t len;

	if (packet.len < 5)
	{
		return chunk_empty;
	}
	put(&b, packet.ptr, packet.len);
	evc_add_kv(&b, key, value);
	if (b.failed)
	{
		chunk_clear(&b.buf);
		return chunk_empty;
	}
	len = b.used - 4;
	b.buf.ptr[0] = len >> 24;
	b.buf.ptr[1] = len >> 16;
	b.buf.ptr[2] = len >> 8;
	b.buf.ptr[3] = len;
	b.buf.len = b.used;
	return b.buf;
}

bool evc_parse_packet(chunk_t packet, uint8_t *type, chunk_t *name, chunk_t *message)
{
	if (packet.len < 1)
	{
		return FALSE;
	}
	*type = packet.ptr[0];
	packet = chunk_skip(packet, 1);
	*name = chunk_empty;
	switch (*type)
	{
		case EVC_CMD_REQUEST:
		case EVC_EVENT_REGISTER:
		case EVC_EVENT_UNREGISTER:
		case EVC_EVENT:
			if (packet.len < 1 || packet.len < 1 + (size_t)packet.ptr[0] ||
				packet.ptr[0] == 0)
			{
				return FALSE;
			}
			*name = chunk_create(packet.ptr + 1, packet.ptr[0]);
			packet = chunk_skip(packet, 1 + packet.ptr[0]);
			break;
		case EVC_CMD_RESPONSE:
		case EVC_CMD_UNKNOWN:
		case EVC_EVENT_CONFIRM:
		case EVC_EVENT_UNKNOWN:
			break;
		default:
			return FALSE;
	}
	*message = packet;
	return TRUE;
}

static bool take_name(chunk_t *in, chunk_t *name)
{
	if (in->len < 1 || in->ptr[0] == 0 || in->len < 1 + (size_t)in->ptr[0])
	{
		return FALSE;
	}
	*name = chunk_create(in->ptr + 1, in->ptr[0]);
	*in = chunk_skip(*in, 1 + in->ptr[0]);
	return TRUE;
}

static bool take_value(chunk_t *in, chunk_t *value)
{
	size_t len;

	if (in->len < 2)
	{
		return FALSE;
	}
	len = (in->ptr[0] << 8) | in->ptr[1];
	if (in->len < 2 + len)
	{
		return FALSE;
	}
	*value = chunk_create(in->ptr + 2, len);
	*in = chunk_skip(*in, 2 + len);
	return TRUE;
}

bool evc_find(chunk_t message, const char *key, chunk_t *value)
{
	chunk_t name, data, wanted = chunk_from_str((char *)key);
	int depth = 0;
	bool in_list = FALSE, found = FALSE;

	while (message.len)
	{
		uint8_t element = message.ptr[0];

		message = chunk_skip(message, 1);
		switch (element)
		{
			case SECTION_START:
				if (in_list || !take_name(&message, &name) || ++depth > 32)
				{
					return FALSE;
				}
				break;
			case SECTION_END:
				if (in_list || depth-- == 0)
				{
					return FALSE;
				}
				break;
			case KEY_VALUE:
				if (in_list || !take_name(&message, &name) ||
					!take_value(&message, &data))
				{
					return FALSE;
				}
				if (depth == 0 && !found && chunk_equals(name, wanted))
				{
					*value = data;
					found = TRUE;
				}
				break;
			case LIST_START:
				if (in_list || !take_name(&message, &name))
				{
					return FALSE;
				}
				in_list = TRUE;
				break;
			case LIST_ITEM:
				if (!in_list || !take_value(&message, &data))
				{
					return FALSE;
				}
				break;
			case LIST_END:
				if (!in_list)
				{
					return FALSE;
				}
				in_list = FALSE;
				break;
			default:
				return FALSE;
		}
	}
	return found && depth == 0 && !in_list;
}

bool evc_find_u64(chunk_t message, const char *key, uint64_t *value)
{
	chunk_t data;
	uint64_t result = 0;
	size_t i;

	if (!evc_find(message, key, &data) || data.len == 0 || data.len > 20)
	{
		return FALSE;
	}
	for (i = 0; i < data.len; i++)
	{
		if (data.ptr[i] < '0' || data.ptr[i] > '9' ||
			result > (UINT64_MAX - (data.ptr[i] - '0')) / 10)
		{
			return FALSE;
		}
		result = result * 10 + (data.ptr[i] - '0');
	}
	*value = result;
	return TRUE;
}

bool evc_success(chunk_t message)
{
	chunk_t value;

	return evc_find(message, "success", &value) &&
		   chunk_equals(value, chunk_from_str("yes"));
}
