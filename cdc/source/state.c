/* See state.h. The file is a few "key value" lines, easy to read by a human. */
#include "cdc/source/state.h"

#include "decoder/base/fsutil.h"
#include "decoder/base/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_FILE "position"

int source_state_lock(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		util_errf(err, errlen, "cannot create state_dir %s: %s", dir, strerror(errno));
		return -1;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		util_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		util_errf(
		    err, errlen,
		    "state_dir %s is in use by another cdc process (%s); give each cdc its own state_dir",
		    dir, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

bool source_state_read(const char *dir, state *st, bool *found, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	memset(st, 0, sizeof(*st));
	FILE *f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT) {
			*found = false;
			return true;
		}
		return util_errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
	}
	char line[256], lsn[32] = "";
	bool ok = true;
	while (ok && fgets(line, sizeof(line), f)) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (sscanf(line, "system_identifier %31s", st->system_id) == 1 ||
		    sscanf(line, "slot %63s", st->slot) == 1 || sscanf(line, "flushed_lsn %31s", lsn) == 1 ||
		    sscanf(line, "timeline %" SCNu32, &st->timeline) == 1)
			continue;
		if (strcmp(line, "streamed_by_another_process\n") == 0) {
			st->shared = true;
			continue;
		}
		ok = util_errf(err, errlen, "%s: unexpected line \"%.*s\"", path, (int)strcspn(line, "\n"),
			       line);
	}
	fclose(f);
	if (ok && (!st->system_id[0] || !st->slot[0] || !util_lsn_parse(lsn, &st->flushed_lsn)))
		ok = util_errf(
		    err, errlen,
		    "%s is incomplete or corrupt; if the slot is intact, remove the file to start from "
		    "the slot's position",
		    path);
	*found = ok;
	return ok;
}

bool source_state_write(const char *dir, const state *st, char *err, size_t errlen)
{
	char path[4096], lsn[LSN_STRLEN];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	util_lsn_format(st->flushed_lsn, lsn);
	char text[512], tli[32] = "";
	if (st->timeline)
		snprintf(tli, sizeof(tli), "timeline %" PRIu32 "\n", st->timeline);
	int n = snprintf(
	    text, sizeof(text),
	    "# cdc: the last position confirmed to the replication slot (written before it is sent)\n"
	    "system_identifier %s\nslot %s\nflushed_lsn %s\n%s%s",
	    st->system_id, st->slot, lsn, tli, st->shared ? "streamed_by_another_process\n" : "");
	return fsutil_replace(path, text, (size_t)n, 0600, err, errlen);
}

/* ---- the writer thread ---- */

struct state_writer {
	char *dir;
	worker *w;
	/* under the worker's lock */
	state next, done;
	char *file;   /* the path of a file to replace before next, or NULL */
	buf contents; /* and what it is to hold */
	bool have_done, failed;
	char err[512];
};

/* On the worker, writes the latest file and state posted, and records what is durable or why not. */
static void write_latest(void *arg)
{
	state_writer *sw = arg;
	worker_lock(sw->w);
	state st = sw->next;
	char *file = sw->file;
	buf contents = sw->contents;
	sw->file = NULL;
	sw->contents = (buf){0};
	worker_unlock(sw->w);
	char err[512];
	bool ok = !file || fsutil_replace(file, contents.data ? contents.data : "", contents.len, 0600, err,
					  sizeof(err));
	ok = ok && source_state_write(sw->dir, &st, err, sizeof(err));
	free(file);
	buf_free(&contents);
	worker_lock(sw->w);
	if (ok) {
		sw->done = st;
		sw->have_done = true;
	} else if (!sw->failed) {
		sw->failed = true;
		memcpy(sw->err, err, sizeof(err));
	}
	worker_unlock(sw->w);
}

state_writer *source_state_writer_new(const char *dir, char *err, size_t errlen)
{
	state_writer *sw = util_xcalloc(1, sizeof(*sw));
	sw->dir = util_xstrdup(dir);
	if (!(sw->w = worker_new("records the position", write_latest, sw, err, errlen))) {
		free(sw->dir);
		free(sw);
		return NULL;
	}
	return sw;
}

void source_state_writer_free(state_writer *sw)
{
	if (!sw)
		return;
	worker_free(sw->w);
	free(sw->file);
	buf_free(&sw->contents);
	free(sw->dir);
	free(sw);
}

int source_state_writer_fd(const state_writer *sw)
{
	return worker_fd(sw->w);
}

void source_state_writer_post(state_writer *sw, const state *st, const char *path, const void *data,
			      size_t len)
{
	worker_lock(sw->w);
	sw->next = *st;
	if (path) {
		free(sw->file);
		sw->file = util_xstrdup(path);
		buf_reset(&sw->contents);
		buf_append(&sw->contents, data, len);
	}
	worker_unlock(sw->w);
	worker_kick(sw->w);
}

bool source_state_writer_durable(state_writer *sw, state *st, bool *found, char *err, size_t errlen)
{
	worker_clear(sw->w);
	worker_lock(sw->w);
	bool ok = !sw->failed;
	if (!ok)
		util_errf(err, errlen, "%s", sw->err);
	*found = sw->have_done;
	if (sw->have_done)
		*st = sw->done;
	worker_unlock(sw->w);
	return ok;
}

void source_state_writer_wait(state_writer *sw)
{
	worker_wait(sw->w);
}
