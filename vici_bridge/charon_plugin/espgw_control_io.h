/*
 * The control socket's framing as the plugin uses it: a unix stream connection that
 * carries VICI packets, each behind a 4-byte big-endian length.
 */
#ifndef ESPGW_CONTROL_IO_H_
#define ESPGW_CONTROL_IO_H_

#include <library.h>

/* Connects to the unix socket at `path`; with `timeout_s` > 0, sends and receives give
 * up after that long (a command must not block charon forever). -1 on failure. */
int espgw_io_connect(const char *path, int timeout_s);

/* Sends all of `data`; FALSE if the connection failed. */
bool espgw_io_write_all(int fd, chunk_t data);

/* One packet without its length prefix (chunk_free() it), or chunk_empty on EOF,
 * timeout or a bad length. */
chunk_t espgw_io_read_packet(int fd);

/* Sends a finished packet (length prefix included) and reads the answer. */
chunk_t espgw_io_exchange(int fd, chunk_t request);

#endif
