/* cdc doctor's report of the access model it sees. It says who may connect to each socket (its mode and
 * owner) and who may change subscriptions. It also says where each secret of the configuration comes from: a
 * file (and who may read it), or the configuration itself, in clear. It only looks, with stat on the paths
 * the configuration names. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdc/doctor/doctor_internal.h"
#include "decoder/base/net.h"

void doctor_socket_access(doctor *d, const char *key, const char *path, mode_t mode)
{
	struct stat st;
	buf owner = {0}, group = {0};
	bool there = lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
	uint32_t uid = there ? st.st_uid : geteuid(), gid = there ? st.st_gid : getegid();
	if (there)
		mode = st.st_mode & 0777;
	net_ids_text(&(id_list){&uid, 1}, false, &owner);
	net_ids_text(&(id_list){&gid, 1}, true, &group);
	const char *who = (mode & 0002)	  ? "every user of this machine"
			  : (mode & 0020) ? "its owner and the members of its group"
					  : "its owner only";
	doctor_say(d, (mode & 0002) ? DOCTOR_WARN : DOCTOR_PASS,
		   (mode & 0002) ? "chmod o-w the socket" : NULL,
		   "%s %s: %smode %04o, owner uid %s, group %s: %s may connect%s", key, path,
		   there ? "" : "not there yet; cdc makes it with ", (unsigned)mode, owner.data, group.data,
		   who, there ? "" : " (cdc's own uid and group: here, the uid running cdc doctor)");
	buf_free(&owner);
	buf_free(&group);
}

/* Whether status.listen's address is the loopback's. That address is reachable from this machine only (in a
 * pod, from its containers). */
static bool loopback(const char *listen)
{
	return strncmp(listen, "127.", 4) == 0 || strncmp(listen, "localhost:", 10) == 0 ||
	       strncmp(listen, "[::1]:", 6) == 0;
}

/* status.listen, plain or HTTPS, who may read and who may change. Reading open beyond the loopback, or a
 * token sent in clear beyond it, warns. */
static void listener_access(doctor *d)
{
	const cfg *c = d->c;
	bool local = loopback(c->status.listen), tls = c->status.tls_cert != NULL;
	static const char *const reading[] = {
	    [CFG_TCP_READ_OPEN] = "reading open to whoever reaches the port",
	    [CFG_TCP_READ_PROBES] =
		"/healthz and /readyz open, the other reading endpoints need status.token",
	    [CFG_TCP_READ_TOKEN] = "every endpoint needs status.token"};
	const char *fix = NULL;
	if (!local && c->status.tcp_read == CFG_TCP_READ_OPEN)
		fix = "set status.tcp_read: probes (or token) with status.token: {file: PATH}, or listen on "
		      "127.0.0.1; a NetworkPolicy can keep others from the port";
	else if (!local && c->status.token && !tls)
		fix = "set status.tls_cert and status.tls_key (the token travels in clear), or listen on "
		      "127.0.0.1";
	doctor_say(d, fix ? DOCTOR_WARN : DOCTOR_PASS, fix, "status.listen %s (%s, %s): %s; changes %s",
		   c->status.listen, tls ? "HTTPS" : "plain HTTP",
		   local ? "this machine's processes only (in a pod: its containers)"
			 : "whoever the network lets in",
		   reading[c->status.tcp_read], c->status.tcp_control ? "need status.token" : "off");
}

/* The status socket (who may connect, who may change subscriptions), then status.listen. */
void doctor_access(doctor *d)
{
	doctor_socket_access(d, "status.socket", d->c->status.socket,
			     cfg_get_number(d->c, "subscribers.mode"));
	buf uids = {0};
	net_ids_text(&d->c->status.control_uids, false, &uids);
	doctor_say(
	    d, DOCTOR_PASS, NULL,
	    "status.control_uids: uids %s may change subscriptions and start backfills over status.socket",
	    uids.data);
	buf_free(&uids);
	if (d->c->status.listen)
		listener_access(d);
}

void doctor_secrets(doctor *d)
{
	const cfg *c = d->c;
	char fix[1024];
	for (size_t i = 0; i < c->nsecrets; i++) {
		const cfg_secret *s = &c->secrets[i];
		struct stat st;
		if (!s->file) {
			snprintf(
			    fix, sizeof fix,
			    "put it in a file only cdc's user may read (chmod 0400) and write %s: {file: "
			    "PATH}%s",
			    s->key,
			    strncmp(s->key, "source.", 7) == 0
				? " (for the password: source.password: {file: PATH}, or libpq's passfile)"
				: "");
			doctor_say(d, DOCTOR_WARN, fix,
				   "%s is written in %s in clear: whoever reads the file reads it", s->key,
				   c->path);
		} else if (stat(s->file, &st) != 0) {
			/* cfg_load read it a moment ago */
			doctor_say(d, DOCTOR_WARN, "check the file", "%s: %s is gone since it was read",
				   s->key, s->file);
		} else if (st.st_mode & S_IROTH) {
			snprintf(fix, sizeof fix, "chmod o-r %s", s->file);
			doctor_say(d, DOCTOR_WARN, fix,
				   "%s comes from %s, which every user of this machine may read (mode %04o)",
				   s->key, s->file, (unsigned)(st.st_mode & 07777));
		} else {
			doctor_say(d, DOCTOR_PASS, NULL,
				   "%s comes from %s (mode %04o, owner uid %u, group %u)", s->key, s->file,
				   (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid);
		}
	}
	if (!c->nsecrets)
		doctor_say(
		    d, DOCTOR_PASS, NULL,
		    "no secret in the configuration (a password, if any, is libpq's: PGPASSWORD, .pgpass, a "
		    "passfile or a service file)");
}
