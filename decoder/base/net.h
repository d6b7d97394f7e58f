/* Unix stream sockets, listening with the safe stale-socket rule and connecting. The status server,
 * the subscriber socket and the command-line clients share it. It also connects to a TCP address (the
 * status listener, a server's TLS check). */
#ifndef CDC_NET_H
#define CDC_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "decoder/base/util.h"

/* A listening socket at path, or -1 with err set (every message starts with path). A path that exists
 * and is not a socket is refused and never removed. A socket another process listens on is refused. A
 * stale one, left by a crashed process with nobody listening, is replaced. The socket is bound under
 * umask 0177 and only then given mode, so no one else can ever reach it with a wider one. */
int net_unix_listen(const char *path, mode_t mode, int backlog, char *err, size_t errlen) CDC_MUST_CHECK;

/* A connected socket, or -1 with err set ("PATH: reason") and errno left as connect(2) set it, so
 * that a command-line client can say what the user can do about ENOENT, ECONNREFUSED or EACCES. */
int net_unix_connect(const char *path, char *err, size_t errlen) CDC_MUST_CHECK;
/* As net_unix_connect, with timeout_ms (> 0) on the connect, every send and every receive. */
int net_unix_connect_timeout(const char *path, int timeout_ms, char *err, size_t errlen) CDC_MUST_CHECK;
/* A TCP connection to host (a name or an address) and port, each address tried in turn. timeout_ms
 * (> 0) applies to the connect, every send and every receive. -1 with err ("HOST:PORT: reason"). */
int net_tcp_connect_timeout(const char *host, const char *port, int timeout_ms, char *err,
			    size_t errlen) CDC_MUST_CHECK;
/* A TCP socket bound to host and port (a number), listening with backlog, SO_REUSEADDR set. host is a
 * name or an address. "" or NULL is not accepted. -1 with err as above. */
int net_tcp_listen(const char *host, const char *port, int backlog, char *err, size_t errlen) CDC_MUST_CHECK;

/* The process at the other end of a Unix socket, as it was when it connected. It holds SO_PEERCRED,
 * and its supplementary groups (SO_PEERGROUPS, at most NET_PEER_GROUPS of them). */
#define NET_PEER_GROUPS 64
typedef struct net_peer {
	bool known; /* false if the kernel did not say (the ids are then (uid_t)-1, no group) */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	gid_t groups[NET_PEER_GROUPS];
	size_t ngroups;
} net_peer;
void net_peer_of(int fd, net_peer *peer);
/* Whether peer's uid is in uids, or its group or one of its supplementary groups in gids. An unknown
 * peer never is. */
bool net_peer_in(const net_peer *peer, const id_list *uids, const id_list *gids);
/* "uid 1001 (groups 1001, 27)" for messages. */
void net_peer_text(const net_peer *peer, buf *out);
/* User ids (group ids, with groups) with their names where this machine has them ("10002 (app), 42"). */
void net_ids_text(const id_list *ids, bool groups, buf *out);

#endif
