#include "espgw_control_io.h"
#include "espgw_vici_codec.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int espgw_io_connect(const char *path, int timeout_s)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct timeval timeout = {.tv_sec = timeout_s};
	int fd;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		return -1;
	}
	strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
	{
		close(fd);
		return -1;
	}
	if (timeout_s > 0)
	{
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	}
	return fd;
}

bool espgw_io_write_all(int fd, chunk_t data)
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

chunk_t espgw_io_read_packet(int fd)
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

chunk_t espgw_io_exchange(int fd, chunk_t request)
{
	if (!espgw_io_write_all(fd, request))
	{
		return chunk_empty;
	}
	return espgw_io_read_packet(fd);
}
