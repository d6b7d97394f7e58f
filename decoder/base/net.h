/* net.h: Unix stream sockets, the one implementation the status server, the subscriber socket and
 * the command-line clients share: listening with the safe stale-socket rule, and connecting; and
 * connecting to a TCP address (the status listener, a server's TLS check). */
#ifndef CDC_NET_H
#define CDC_NET_H

#include <stddef.h>
#include <sys/types.h>

#include "decoder/base/util.h"

/* A listening socket at path, or -1 with err set (every message starts with path). A path that
 * exists and is not a socket is refused and never removed; a socket another process listens on is
 * refused; a stale one (left by a crashed process: nobody listens) is replaced. The socket is bound
 * under umask 0177 and only then given mode, so no one else can ever reach it with a wider one. */
int net_unix_listen(const char *path, mode_t mode, int backlog, char *err, size_t errlen) CDC_MUST_CHECK;

/* A connected socket, or -1 with err set ("PATH: reason") and errno left as connect(2) set it, so
 * that a command-line client can say what the user can do about ENOENT, ECONNREFUSED or EACCES. */
int net_unix_connect(const char *path, char *err, size_t errlen) CDC_MUST_CHECK;
/* As net_unix_connect, with timeout_ms (> 0) on the connect, every send and every receive. */
int net_unix_connect_timeout(const char *path, int timeout_ms, char *err, size_t errlen) CDC_MUST_CHECK;
/* A TCP connection to host (a name or an address) and port, each address tried in turn, with
 * timeout_ms (> 0) on the connect, every send and every receive; -1 with err ("HOST:PORT: reason"). */
int net_tcp_connect_timeout(const char *host, const char *port, int timeout_ms, char *err,
			    size_t errlen) CDC_MUST_CHECK;
/* A TCP socket bound to host (a name or an address; "" or NULL: not accepted) and port (a number)
 * and listening with backlog, SO_REUSEADDR set; -1 with err as above. */
int net_tcp_listen(const char *host, const char *port, int backlog, char *err, size_t errlen) CDC_MUST_CHECK;

#endif
