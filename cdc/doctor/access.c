/* access.c: cdc doctor's report of the access model it sees: who may connect to each socket (its
 * mode and owner), who may change subscriptions, and where each secret of the configuration comes
 * from (a file, and who may read it, or the configuration itself, in clear). It only looks: stat
 * on the paths the configuration names. */
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

/* The status socket: who may connect, who may change subscriptions. */
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
