/* A thread that runs one job off the event loop, one run at a time, and says on an eventfd when a run
 * is back. cdc's blocking writers (the position file, the spools' fsyncs) take this shape, so that the
 * loop never waits on a disk. */
#ifndef CDC_WORKER_H
#define CDC_WORKER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct worker worker;

/* Starts the thread. run(arg) is called on it for each kick. NULL with err if it cannot start. */
worker *worker_new(const char *what, void (*run)(void *arg), void *arg, char *err, size_t errlen);
/* Waits for the run in progress and any asked for, then ends the thread. */
void worker_free(worker *wk);
/* Asks for a run after the one in progress, if any. Kicks before it starts make one run. */
void worker_kick(worker *wk);
/* Readable after each run. worker_clear empties it. */
int worker_fd(const worker *wk);
void worker_clear(worker *wk);
/* Whether no run is asked for or in progress. */
bool worker_idle(worker *wk);
/* Blocks until no run is asked for or in progress. */
void worker_wait(worker *wk);
/* The worker's lock, for what run() and the loop share. Not held while run() runs. */
void worker_lock(worker *wk);
void worker_unlock(worker *wk);

#endif
