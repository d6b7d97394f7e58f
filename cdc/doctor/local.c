/* The checks of this machine, for state_dir and the sockets' paths. They look (stat, access with the
 * effective uid, statvfs, a connect to a socket that exists) and create nothing. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cdc/doctor/doctor_internal.h"
#include "decoder/base/net.h"

static bool writable_dir(const char *dir)
{
	return faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) == 0;
}

/* path's directory (the caller frees it). */
static char *parent_of(const char *path)
{
	char *copy = util_xstrdup(path);
	char *p = util_xstrdup(dirname(copy));
	free(copy);
	return p;
}

/* s for a shell. It is as it is when it has only safe characters, else in single quotes. */
static void shell_word(buf *b, const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") ==
		      strlen(s)) {
		buf_puts(b, s);
		return;
	}
	buf_putc(b, '\'');
	for (const char *p = s; *p; p++)
		buf_puts(b, *p == '\'' ? "'\\''" : (char[]){*p, '\0'});
	buf_putc(b, '\'');
}

/* A directory cdc needs is missing (create true) or not writable. The line gives the commands that make it
 * this uid's. cdc doctor runs as cdc's user, or as root for cdc run as root. */
static void dir_fix(doctor *d, bool create, const char *dir, const char *key, const char *detail)
{
	unsigned uid = (unsigned)geteuid();
	char words[512];
	if (uid)
		snprintf(words, sizeof(words),
			 "as root, for uid %u (cdc's user, which cdc doctor runs as), or set %s", uid, key);
	else
		snprintf(words, sizeof(words), "as root, or set %s", key);
	doctor_say(d, DOCTOR_FAIL, words, "%s", detail);
	buf cmd = {0};
	if (create) {
		buf_puts(&cmd, "mkdir -p ");
		shell_word(&cmd, dir);
	}
	if (uid) {
		buf_printf(&cmd, "%schown %u ", create ? " && " : "", uid);
		shell_word(&cmd, dir);
	}
	if (cmd.len)
		doctor_command(d, cmd.data);
	buf_free(&cmd);
}

static void size_text(uint64_t bytes, char *out, size_t len)
{
	if (bytes >= 1ull << 30)
		snprintf(out, len, "%.1f GiB", (double)bytes / (1ull << 30));
	else
		snprintf(out, len, "%.1f MiB", (double)bytes / (1ull << 20));
}

/* The nearest directory of path that exists (path itself, a parent, "/"). The caller frees it. */
static char *existing_ancestor(const char *path)
{
	char *p = util_xstrdup(path);
	struct stat st;
	while (stat(p, &st) != 0 && strcmp(p, "/") != 0 && strcmp(p, ".") != 0) {
		char *up = parent_of(p);
		free(p);
		p = up;
	}
	return p;
}

void doctor_state_dir(doctor *d)
{
	const char *dir = d->c->state_dir;
	char fix[1024], need[32], free_text[32], made[256] = "";
	struct stat st;
	const char *probe = dir; /* the directory whose disk holds it (it, or its parent before it exists) */
	char *parent = parent_of(dir), *ancestor = NULL;
	const char *by = NULL;
	if (stat(dir, &st) != 0 && (by = doctor_unit_makes(d, dir))) {
		/* A fresh package install. The unit's StateDirectory= makes it, owned by cdc's user. */
		snprintf(made, sizeof(made), ", made by systemd when %s starts (%s)", d->unit.name, by);
		probe = ancestor = existing_ancestor(parent);
	} else if (stat(dir, &st) != 0) {
		if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(fix, sizeof(fix), "%s does not exist, nor its parent %s", dir, parent);
			dir_fix(d, true, dir, "state_dir", fix);
			goto out;
		}
		if (!writable_dir(parent)) {
			snprintf(fix, sizeof(fix), "%s does not exist, and cdc may not create it in %s", dir,
				 parent);
			dir_fix(d, true, dir, "state_dir", fix);
			goto out;
		}
		probe = parent;
	} else if (!S_ISDIR(st.st_mode)) {
		snprintf(fix, sizeof(fix), "set state_dir to a directory, or remove %s", dir);
		doctor_say(d, DOCTOR_FAIL, fix, "%s is not a directory", dir);
		goto out;
	} else if (!writable_dir(dir)) {
		snprintf(fix, sizeof(fix), "%s is not writable by uid %u", dir, (unsigned)geteuid());
		dir_fix(d, false, dir, "state_dir", fix);
		goto out;
	}
	/* What a sink keeps in state_dir (a socket subscription's spool) grows up to its limit. */
	uint64_t want = 0;
	size_t unbounded = 0;
	const sink_module *keeper = NULL;
	for (size_t i = 0; i < d->c->nsubs; i++) {
		const cfg_subscription *s = &d->c->subs[i];
		const sink_module *m = sink_modules[s->sink];
		uint64_t bytes;
		if (!m->state_bytes || !m->state_bytes(s->sink_settings[s->sink], &bytes))
			continue;
		keeper = m;
		want += bytes;
		unbounded += !bytes;
	}
	/* the limit's name in messages (one module keeps files there today) */
	const char *kind = keeper ? keeper->name : "socket",
		   *limit = keeper ? keeper->state_limit_key : "retention.max_bytes";
	struct statvfs fs;
	if (statvfs(probe, &fs) != 0) {
		doctor_say(d, DOCTOR_WARN, "check the filesystem of state_dir",
			   "cannot read the free space of %s: %s", probe, strerror(errno));
		goto out;
	}
	uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
	size_text(want, need, sizeof(need));
	size_text(avail, free_text, sizeof(free_text));
	if (avail < want) {
		snprintf(fix, sizeof(fix),
			 "give state_dir a larger disk, or lower the subscriptions' %s (they sum to %s)",
			 limit, need);
		doctor_say(d, DOCTOR_WARN, fix,
			   "%s has %s free, less than the %s the %s subscriptions' %s allow", dir, free_text,
			   need, kind, limit);
	} else
		doctor_say(d, DOCTOR_PASS, NULL, "%s: %s%s, %s free, %s sum to %s%s", dir,
			   *made ? "does not exist yet" : "writable", made, free_text, limit, need,
			   unbounded ? " (some of them have none)" : "");
out:
	free(parent);
	free(ancestor);
}

/* One socket path. Its directory exists and is writable, and the path is free or a socket. */
void doctor_socket_path(doctor *d, const char *key, const char *path)
{
	char fix[1024];
	char *dir = parent_of(path);
	struct stat st;
	const char *by = NULL;
	if (stat(dir, &st) != 0 && (by = doctor_unit_makes(d, dir)))
		/* A fresh package install. The unit's RuntimeDirectory= makes it, owned by cdc's user. */
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%s %s: directory %s does not exist yet, made by systemd when %s starts (%s)", key,
			   path, dir, d->unit.name, by);
	else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(fix, sizeof(fix), "%s %s: directory %s does not exist", key, path, dir);
		dir_fix(d, true, dir, key, fix);
	} else if (!writable_dir(dir)) {
		snprintf(fix, sizeof(fix), "%s %s: directory %s is not writable by uid %u", key, path, dir,
			 (unsigned)geteuid());
		dir_fix(d, false, dir, key, fix);
	} else if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		snprintf(fix, sizeof(fix), "remove %s, or set %s to another path", path, key);
		doctor_say(d, DOCTOR_FAIL, fix,
			   "%s %s exists and is not a socket (cdc never replaces what is not a socket)", key,
			   path);
	} else if (lstat(path, &st) == 0) {
		char why[256];
		int fd = net_unix_connect_timeout(path, 1000, why, sizeof(why));
		if (fd >= 0) {
			close(fd);
			snprintf(fix, sizeof(fix),
				 "stop the cdc that listens there, or give this one another %s", key);
			doctor_say(d, DOCTOR_WARN, fix, "%s %s: a running process listens there", key, path);
		} else
			doctor_say(d, DOCTOR_PASS, NULL, "%s %s: a socket left over; cdc replaces it", key,
				   path);
	} else
		doctor_say(d, DOCTOR_PASS, NULL, "%s %s: directory %s is writable", key, path, dir);
	free(dir);
}

/* The status socket's path. A sink's socket is its module's check. */
void doctor_sockets(doctor *d)
{
	doctor_socket_path(d, "status.socket", d->c->status.socket);
}
