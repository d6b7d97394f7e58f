/* access.c: cdc doctor's report of the access model it sees: where each secret of the configuration
 * comes from (a file, and who may read it, or the configuration itself, in clear). It only looks:
 * stat on the files the configuration names. */
#include <string.h>
#include <sys/stat.h>

#include "cdc/doctor/internal.h"

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
