/* See net.h. Modelled on Redis's anet.c, as one small module every listener and client uses, with errors in
 * the caller's buffer. */
#include "decoder/base/net.h"

#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "decoder/base/log.h"

static bool unix_addr(const char *path, struct sockaddr_un *sa, char *err, size_t errlen)
{
	*sa = (struct sockaddr_un){.sun_family = AF_UNIX};
	size_t n = strlen(path);
	if (n >= sizeof(sa->sun_path))
		return util_errf(err, errlen, "%s: path longer than %zu bytes", path,
				 sizeof(sa->sun_path) - 1);
	memcpy(sa->sun_path, path, n + 1);
	return true;
}

/* bind() found path in use. Replace it only if it is a socket nobody listens on. Anything else (a regular
 * file, a directory, a live socket) may be someone's data or service, and is refused. */
static bool remove_stale(const char *path, const struct sockaddr_un *sa, char *err, size_t errlen)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return util_errf(err, errlen, "%s: %s", path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return util_errf(err, errlen, "%s: exists and is not a socket", path);
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe < 0)
		return util_errf(err, errlen, "%s: socket: %s", path, strerror(errno));
	int rc = connect(probe, (const struct sockaddr *)sa, sizeof(*sa)), e = errno;
	close(probe);
	if (rc == 0)
		return util_errf(err, errlen,
				 "%s: another process is listening on it (is cdc already running?)", path);
	if (e != ECONNREFUSED)
		return util_errf(err, errlen, "%s: cannot tell whether it is in use: %s", path, strerror(e));
	if (unlink(path) != 0)
		return util_errf(err, errlen, "%s: cannot remove the stale socket: %s", path,
				 strerror(errno));
	log_info("removed a stale socket", "path=%s", path);
	return true;
}

/* bind() under umask 0177, so the file is never reachable by others, even before the chmod. */
static int bind_private(int fd, const struct sockaddr_un *sa)
{
	mode_t old = umask(0177);
	int rc = bind(fd, (const struct sockaddr *)sa, sizeof(*sa));
	int e = errno;
	umask(old);
	errno = e;
	return rc;
}

int net_unix_listen(const char *path, mode_t mode, int backlog, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	if (!unix_addr(path, &sa, err, errlen))
		return -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return util_errf(err, errlen, "%s: socket: %s", path, strerror(errno)), -1;
	int rc = bind_private(fd, &sa);
	if (rc != 0 && errno == EADDRINUSE) {
		if (!remove_stale(path, &sa, err, errlen))
			goto fail;
		rc = bind_private(fd, &sa);
	}
	if (rc != 0) {
		util_errf(err, errlen, "%s: %s (does its directory exist and is it writable?)", path,
			  strerror(errno));
		goto fail;
	}
	/* No one can connect before listen(), so the umask's mode is never exposed. */
	if (chmod(path, mode) != 0 || listen(fd, backlog) != 0) {
		util_errf(err, errlen, "%s: %s", path, strerror(errno));
		unlink(path); /* ours, just bound */
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

static void set_timeouts(int fd, int timeout_ms)
{
	if (timeout_ms <= 0)
		return;
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* on Linux, the connect's too */
}

int net_unix_connect_timeout(const char *path, int timeout_ms, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	if (!unix_addr(path, &sa, err, errlen)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return util_errf(err, errlen, "%s: socket: %s", path, strerror(errno)), -1;
	set_timeouts(fd, timeout_ms);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	int e = errno;
	close(fd);
	util_errf(err, errlen, "%s: %s", path, strerror(e));
	errno = e;
	return -1;
}

/* A TCP socket for host and port, each address tried in turn. It is connected (with timeout_ms), or bound and
 * listening (listen, when backlog > 0). -1 with err ("HOST:PORT: reason", [HOST] for IPv6). */
static int tcp_open(const char *host, const char *port, int backlog, int timeout_ms, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = backlog > 0 ? AI_PASSIVE | AI_NUMERICSERV : 0},
			*res;
	bool v6 = strchr(host, ':') != NULL;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0)
		return util_errf(err, errlen, "%s%s%s:%s: %s", v6 ? "[" : "", host, v6 ? "]" : "", port,
				 gai_strerror(rc)),
		       -1;
	int fd = -1, e = 0, one = 1;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (backlog > 0)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		else
			set_timeouts(fd, timeout_ms);
		if (backlog > 0 ? bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0
				: connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			e = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		util_errf(err, errlen, "%s%s%s:%s: %s", v6 ? "[" : "", host, v6 ? "]" : "", port,
			  strerror(e));
		errno = e;
	}
	return fd;
}

int net_tcp_connect_timeout(const char *host, const char *port, int timeout_ms, char *err, size_t errlen)
{
	return tcp_open(host, port, 0, timeout_ms, err, errlen);
}

int net_tcp_listen(const char *host, const char *port, int backlog, char *err, size_t errlen)
{
	return tcp_open(host, port, backlog > 0 ? backlog : 1, 0, err, errlen);
}

int net_unix_connect(const char *path, char *err, size_t errlen)
{
	return net_unix_connect_timeout(path, 0, err, errlen);
}

void net_peer_of(int fd, net_peer *p)
{
	*p = (net_peer){.uid = (uid_t)-1, .gid = (gid_t)-1};
	struct ucred cred;
	socklen_t len = sizeof cred;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return;
	p->known = true;
	p->pid = cred.pid;
	p->uid = cred.uid;
	p->gid = cred.gid;
	/* Its supplementary groups, as when it connected (Linux 4.13+). If more than fit, the first ones. */
	gid_t groups[NET_PEER_GROUPS];
	len = sizeof groups;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0 || errno == ERANGE) {
		p->ngroups = len / sizeof *groups;
		if (p->ngroups > NET_PEER_GROUPS)
			p->ngroups = NET_PEER_GROUPS;
		memcpy(p->groups, groups, p->ngroups * sizeof *groups);
	}
}

bool net_peer_in(const net_peer *p, const id_list *uids, const id_list *gids)
{
	if (!p->known)
		return false;
	if (util_id_list_has(uids, p->uid) || util_id_list_has(gids, p->gid))
		return true;
	for (size_t i = 0; i < p->ngroups; i++)
		if (util_id_list_has(gids, p->groups[i]))
			return true;
	return false;
}

void net_peer_text(const net_peer *p, buf *out)
{
	if (!p->known) {
		buf_puts(out, "an unknown peer (SO_PEERCRED failed)");
		return;
	}
	buf_printf(out, "uid %lu (group %lu", (unsigned long)p->uid, (unsigned long)p->gid);
	for (size_t i = 0, n = 0; i < p->ngroups; i++)
		if (p->groups[i] != p->gid)
			buf_printf(out, "%s%lu", n++ ? ", " : "; supplementary groups ",
				   (unsigned long)p->groups[i]);
	buf_putc(out, ')');
}

void net_ids_text(const id_list *ids, bool groups, buf *out)
{
	char scratch[16384];
	for (size_t i = 0; i < ids->n; i++) {
		const char *name = NULL;
		struct passwd pw, *user = NULL;
		struct group gr, *grp = NULL;
		if (groups ? getgrgid_r(ids->v[i], &gr, scratch, sizeof scratch, &grp) == 0 && grp
			   : getpwuid_r(ids->v[i], &pw, scratch, sizeof scratch, &user) == 0 && user)
			name = groups ? grp->gr_name : user->pw_name;
		buf_printf(out, "%s%lu", i ? ", " : "", (unsigned long)ids->v[i]);
		if (name)
			buf_printf(out, " (%s)", name);
	}
}
