/* See worker.h. */
#include "decoder/base/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "decoder/base/util.h"

struct worker {
	void (*run)(void *arg);
	void *arg;
	int efd;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool asked, running, stop; /* under mu */
};

static void *worker_main(void *p)
{
	worker *w = p;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->asked && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->asked)
			break;
		w->asked = false;
		w->running = true;
		pthread_mutex_unlock(&w->mu);
		w->run(w->arg);
		pthread_mutex_lock(&w->mu);
		w->running = false;
		pthread_cond_broadcast(&w->cv);
		util_efd_signal(w->efd);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

worker *worker_new(const char *what, void (*run)(void *arg), void *arg, char *err, size_t errlen)
{
	worker *w = util_xcalloc(1, sizeof(*w));
	w->run = run;
	w->arg = arg;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	int e = w->efd < 0 ? errno : pthread_create(&w->thread, NULL, worker_main, w);
	if (e) {
		util_errf(err, errlen, "cannot start the thread that %s: %s", what, strerror(e));
		if (w->efd >= 0)
			close(w->efd);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		free(w);
		return NULL;
	}
	return w;
}

void worker_free(worker *w)
{
	if (!w)
		return;
	worker_wait(w);
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	close(w->efd);
	free(w);
}

void worker_kick(worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->asked = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int worker_fd(const worker *w)
{
	return w->efd;
}

void worker_clear(worker *w)
{
	uint64_t n;
	while (read(w->efd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		;
}

bool worker_idle(worker *w)
{
	pthread_mutex_lock(&w->mu);
	bool idle = !w->asked && !w->running;
	pthread_mutex_unlock(&w->mu);
	return idle;
}

void worker_wait(worker *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->asked || w->running)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

void worker_lock(worker *w)
{
	pthread_mutex_lock(&w->mu);
}

void worker_unlock(worker *w)
{
	pthread_mutex_unlock(&w->mu);
}
