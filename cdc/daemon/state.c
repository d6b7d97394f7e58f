/* state.c: see state.h. The file is a few "key value" lines, easy to read by a human. */
#include "cdc/daemon/state.h"

#include "decoder/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_FILE "position"

int state_lock(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		errf(err, errlen, "cannot create state_dir %s: %s", dir, strerror(errno));
		return -1;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		errf(err, errlen,
		     "state_dir %s is in use by another cdc process (%s); give each cdc its own state_dir",
		     dir, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

bool state_read(const char *dir, state *st, bool *found, char *err, size_t errlen)
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
		return errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
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
		ok = errf(err, errlen, "%s: unexpected line \"%.*s\"", path, (int)strcspn(line, "\n"), line);
	}
	fclose(f);
	if (ok && (!st->system_id[0] || !st->slot[0] || !lsn_parse(lsn, &st->flushed_lsn)))
		ok = errf(err, errlen,
			  "%s is incomplete or corrupt; if the slot is intact, remove the file to start from "
			  "the slot's position",
			  path);
	*found = ok;
	return ok;
}

bool state_write(const char *dir, const state *st, char *err, size_t errlen)
{
	char path[4096], lsn[LSN_STRLEN];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	lsn_format(st->flushed_lsn, lsn);
	char text[512], tli[32] = "";
	if (st->timeline)
		snprintf(tli, sizeof(tli), "timeline %" PRIu32 "\n", st->timeline);
	int n = snprintf(
	    text, sizeof(text),
	    "# cdc: the last position confirmed to the replication slot (written before it is sent)\n"
	    "system_identifier %s\nslot %s\nflushed_lsn %s\n%s%s",
	    st->system_id, st->slot, lsn, tli, st->shared ? "streamed_by_another_process\n" : "");
	return file_replace(path, text, (size_t)n, 0600, err, errlen);
}

/* ---- the writer thread ---- */

struct state_writer {
	char *dir;
	int efd; /* readable when a write is back */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	state next, done;
	bool posted, busy, have_done, failed, stop;
	char err[512];
};

static void *writer_main(void *arg)
{
	state_writer *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->posted && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->posted)
			break;
		state st = w->next;
		w->posted = false;
		w->busy = true;
		pthread_mutex_unlock(&w->mu);
		char err[512];
		bool ok = state_write(w->dir, &st, err, sizeof(err));
		pthread_mutex_lock(&w->mu);
		w->busy = false;
		if (ok) {
			w->done = st;
			w->have_done = true;
		} else if (!w->failed) {
			w->failed = true;
			memcpy(w->err, err, sizeof(err));
		}
		pthread_cond_broadcast(&w->cv);
		efd_signal(w->efd);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

state_writer *state_writer_new(const char *dir, char *err, size_t errlen)
{
	state_writer *w = xcalloc(1, sizeof(*w));
	w->dir = xstrdup(dir);
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	int e = w->efd < 0 ? errno : pthread_create(&w->thread, NULL, writer_main, w);
	if (e) {
		errf(err, errlen, "cannot start the thread that records the position: %s", strerror(e));
		if (w->efd >= 0)
			close(w->efd);
		free(w->dir);
		free(w);
		return NULL;
	}
	return w;
}

void state_writer_free(state_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	close(w->efd);
	free(w->dir);
	free(w);
}

int state_writer_fd(const state_writer *w)
{
	return w->efd;
}

void state_writer_post(state_writer *w, const state *st)
{
	pthread_mutex_lock(&w->mu);
	w->next = *st;
	w->posted = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

bool state_writer_durable(state_writer *w, state *st, bool *found, char *err, size_t errlen)
{
	uint64_t n;
	while (read(w->efd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		;
	pthread_mutex_lock(&w->mu);
	bool ok = !w->failed;
	if (!ok)
		errf(err, errlen, "%s", w->err);
	*found = w->have_done;
	if (w->have_done)
		*st = w->done;
	pthread_mutex_unlock(&w->mu);
	return ok;
}

void state_writer_wait(state_writer *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->posted || w->busy)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}
