/* See socket_sink.h. The sink interface (render, deliver to the spools, hold the events of held
 * transactions in them, flush, busy). Binding and forgetting subscriptions, stats and the tick timer. The
 * queues' delivery state is in acked.c, and the connections in connections.c. Their shared structs are in
 * socket_internal.h. */
#include "decoder/base/bytes.h"
#include "sinks/socket/socket_sink.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "decoder/base/net.h"
#include "sinks/pbwire.h"
#include "sinks/socket/socket_internal.h"

#define TICK_MS 100
#define TRIM_EVERY_MS 1000
#define RENDER_HEADER 4 /* [u32 key hash] before the packed event */

/* Timer for consumers that stopped reading, ack timeouts, heartbeats and retention. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	socket_sink *s = arg;
	uint64_t now = util_now_ms();
	bool trim_now = now - s->last_trim_ms >= TRIM_EVERY_MS;
	if (trim_now)
		s->last_trim_ms = now;
	socket_conn_check_first_frames(s, now);
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (!sub->set)
			continue;
		queue *qs[2] = {&sub->q, &sub->dead};
		for (int k = 0; k < 2; k++) {
			/* A failover consumer that stops reading goes last, so one may be seen twice. */
			for (consumer *c = qs[k]->consumers, *next; c; c = next) {
				next = c->next;
				socket_conn_watch_reading(c, now, sub->set->ack_timeout_ms);
			}
			socket_queue_check_timeouts(s, qs[k], now);
			for (consumer *c = qs[k]->consumers; c; c = c->next) {
				socket_conn_flush_reply(
				    c); /* answers held back while c had events in flight */
				/* An idle connection's heartbeat. One that has not read what it was sent has
				 * frames to read already. */
				if (!c->closing && !c->seen_unread &&
				    now - c->last_send_ms >= c->heartbeat_ms && !socket_queue_out_full(c))
					socket_conn_heartbeat(c);
				socket_queue_update_window(c, now);
			}
			if (trim_now)
				socket_queue_trim(s, qs[k]);
		}
	}
	if (trim_now)
		socket_queue_wake(s);
}

/* Subscriptions ------------------------------------------------------------------------- */

static bool make_dir(const char *path, char *err, size_t errlen)
{
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return util_errf(err, errlen, "cannot create %s: %s", path, strerror(errno));
	return true;
}

static subscription *open_subscription(socket_sink *s, const socket_sub_settings *c, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool", s->state_dir);
	if (!make_dir(dir, err, errlen))
		return NULL;
	snprintf(dir, sizeof(dir), "%s/spool/%s", s->state_dir, c->name);
	if (!make_dir(dir, err, errlen))
		return NULL;
	subscription *sub = util_xcalloc(1, sizeof(*sub));
	sub->s = s;
	sub->name = util_xstrdup(c->name);
	sub->set = c;
	if (!socket_queue_open(s, sub, &sub->q, false, err, errlen) ||
	    !socket_queue_open(s, sub, &sub->dead, true, err, errlen)) {
		socket_spool_close(sub->q.sp);
		free(sub->name);
		free(sub);
		return NULL;
	}
	sub->have_last = socket_spool_last_id(sub->q.sp, &sub->last_lsn, &sub->last_txi);
	return sub;
}

static void free_settings(socket_sink *s)
{
	for (size_t i = 0; i < s->nindex; i++) {
		free((char *)s->settings[i].name);
		util_id_list_free(&s->settings[i].allow_uids);
		util_id_list_free(&s->settings[i].allow_gids);
	}
	free(s->settings);
	free(s->by_index);
}

bool socket_sink_bind(sink *base, const socket_sub_settings *subs, size_t nsubs, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++)
		s->subs[i]->set = NULL;
	free_settings(s);
	s->nindex = nsubs;
	s->settings = util_xcalloc(nsubs ? nsubs : 1, sizeof(*s->settings));
	s->by_index = util_xcalloc(nsubs ? nsubs : 1, sizeof(subscription *));
	for (size_t i = 0; i < nsubs; i++) {
		s->settings[i] = subs[i];
		s->settings[i].name = util_xstrdup(subs[i].name);
		util_id_list_copy(&s->settings[i].allow_uids, &subs[i].allow_uids);
		util_id_list_copy(&s->settings[i].allow_gids, &subs[i].allow_gids);
	}
	for (size_t i = 0; i < nsubs; i++) {
		const socket_sub_settings *set = &s->settings[i];
		if (!set->serve)
			continue;
		subscription *sub = NULL;
		for (size_t k = 0; k < s->nsubs && !sub; k++)
			if (strcmp(s->subs[k]->name, set->name) == 0)
				sub = s->subs[k];
		if (!sub) {
			if (!(sub = open_subscription(s, set, err, errlen)))
				return false;
			s->subs = util_xrealloc(s->subs, (s->nsubs + 1) * sizeof(subscription *));
			s->subs[s->nsubs++] = sub;
		}
		sub->set = set;
		socket_spool_set_limits(sub->q.sp, &set->retention);
		s->by_index[i] = sub;
	}
	for (size_t i = 0; i < s->nsubs; i++)
		if (!s->subs[i]->set) {
			socket_conn_close_consumers(&s->subs[i]->q,
						    "the subscription was removed from the configuration");
			socket_conn_close_consumers(&s->subs[i]->dead,
						    "the subscription was removed from the configuration");
		} else {
			socket_conn_recheck_access(&s->subs[i]->q);
			socket_conn_recheck_access(&s->subs[i]->dead);
		}
	return true;
}

/* The sink interface --------------------------------------------------------------------- */

/* FNV-1a over the packed key, so the same row key always lands in the same bucket. */
static uint32_t key_hash(const Cdc__V1__Event *e)
{
	if (!e->key)
		return 0;
	size_t n = cdc__v1__row__get_packed_size(e->key);
	uint8_t stack[512], *p = n <= sizeof(stack) ? stack : util_xmalloc(n);
	cdc__v1__row__pack(e->key, p);
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	if (p != stack)
		free(p);
	return h;
}

static void socket_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	socket_sink *s = (socket_sink *)base;
	uint32_t h = sub < s->nindex && s->settings[sub].consumers == SOCKET_KEY_SHARED ? key_hash(e) : 0;
	buf_reserve(out, RENDER_HEADER);
	memcpy(out->data + out->len, &h, 4);
	out->len += RENDER_HEADER;
	sink_pb_put_event(out, e);
}

/* n more events committed at commit_time (µs), for the latency histogram at the next sync. */
static void count_commits(socket_sink *s, int64_t commit_time, uint64_t n)
{
	if (commit_time <= 0 || !n)
		return;
	if (s->nruns > s->sync.runs && s->runs[s->nruns - 1].commit_time == commit_time) {
		s->runs[s->nruns - 1].events += n;
		return;
	}
	if (s->nruns == s->runs_cap) {
		s->runs_cap = s->runs_cap ? 2 * s->runs_cap : 64;
		s->runs = util_xrealloc(s->runs, s->runs_cap * sizeof(*s->runs));
	}
	s->runs[s->nruns++] = (struct commit_run){commit_time, n};
}

static bool socket_deliver(sink *base, uint32_t idx, const char *rendered, size_t len, const sink_commit *c,
			   uint64_t seq, char *err, size_t errlen)
{
	(void)seq;
	socket_sink *s = (socket_sink *)base;
	if (len < RENDER_HEADER || idx >= s->nindex || !s->by_index[idx])
		return util_errf(err, errlen, "socket sink: rendered event for an unknown subscription");
	subscription *sub = s->by_index[idx];
	/* After a restart the slot resends what the spool may already hold, so skip that. A schema event
	 * comes before the row of the same tx_index. */
	if (sub->have_last && (c->commit_lsn < sub->last_lsn ||
			       (c->commit_lsn == sub->last_lsn &&
				(c->tx_index < sub->last_txi ||
				 (c->tx_index == sub->last_txi && (c->before_change || !sub->last_before))))))
		return true;
	buf_reset(&s->scratch);
	buf_append(&s->scratch, rendered + RENDER_HEADER, len - RENDER_HEADER);
	sink_pb_put_commit(&s->scratch, c);
	uint64_t off;
	if (!socket_spool_append(sub->q.sp, c->commit_lsn, c->tx_index, load_u32(rendered), s->scratch.data,
				 s->scratch.len, util_wall_ms(), &off, err, errlen))
		return false;
	sub->have_last = true;
	sub->last_lsn = c->commit_lsn;
	sub->last_txi = c->tx_index;
	sub->last_before = c->before_change;
	sub->in_txn = sub->dirty = true;
	sub->matched++;
	count_commits(s, c->commit_time, 1);
	return true;
}

static void socket_end_txn(sink *base, uint64_t seq)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (sub->in_txn && !socket_spool_commit(sub->q.sp, s->err, sizeof(s->err)))
			log_error("cannot end a transaction in the spool", "subscription=%s error=\"%s\"",
				  sub->name, s->err);
		sub->in_txn = false;
	}
	s->ended_seq = seq;
}

/* Held transactions ---------------------------------------------------------------------- */

/* A held transaction's events. There is one spool_held per subscription that has some (in the order they
 * came). The savepoints each keep where those files stood (files created later stood empty). */
typedef struct held_txn {
	uint32_t xid;
	spool_held **files;
	subscription **subs; /* files[i] is subs[i]'s */
	size_t nfiles;
	struct savepoint {
		uint32_t tx_index;
		size_t nfiles;
		spool_held_point *at;
	} * sp;
	size_t nsp, capsp;
	struct held_txn *next;
} held_txn;

static held_txn *held_find(socket_sink *s, uint32_t xid, bool create)
{
	for (held_txn *h = s->held; h; h = h->next)
		if (h->xid == xid)
			return h;
	if (!create)
		return NULL;
	held_txn *h = util_xcalloc(1, sizeof(*h));
	h->xid = xid;
	h->next = s->held;
	s->held = h;
	return h;
}

/* Frees h. Its files are deleted unless committed (then NULL). */
static void held_free(socket_sink *s, held_txn *h)
{
	for (held_txn **p = &s->held; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	for (size_t i = 0; i < h->nfiles; i++)
		socket_spool_held_discard(h->files[i]);
	for (size_t i = 0; i < h->nsp; i++)
		free(h->sp[i].at);
	free(h->files);
	free(h->subs);
	free(h->sp);
	free(h);
}

static bool socket_hold(sink *base, uint32_t idx, uint32_t xid, uint32_t tx_index, const char *rendered,
			size_t len, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	if (len < RENDER_HEADER || idx >= s->nindex || !s->by_index[idx])
		return util_errf(err, errlen, "socket sink: rendered event for an unknown subscription");
	subscription *sub = s->by_index[idx];
	held_txn *h = held_find(s, xid, true);
	size_t i = 0;
	while (i < h->nfiles && h->subs[i] != sub)
		i++;
	if (i == h->nfiles) {
		spool_held *f = socket_spool_hold(sub->q.sp, xid, err, errlen);
		if (!f)
			return false;
		h->files = util_xrealloc(h->files, (i + 1) * sizeof(*h->files));
		h->subs = util_xrealloc(h->subs, (i + 1) * sizeof(*h->subs));
		h->files[i] = f;
		h->subs[i] = sub;
		h->nfiles++;
	}
	return socket_spool_held_append(h->files[i], tx_index, load_u32(rendered), rendered + RENDER_HEADER,
					len - RENDER_HEADER, util_wall_ms(), err, errlen);
}

static void socket_hold_savepoint(sink *base, uint32_t xid, uint32_t tx_index)
{
	held_txn *h = held_find((socket_sink *)base, xid, true);
	if (h->nsp == h->capsp) {
		h->capsp = h->capsp ? 2 * h->capsp : 8;
		h->sp = util_xrealloc(h->sp, h->capsp * sizeof(*h->sp));
	}
	struct savepoint *sp = &h->sp[h->nsp++];
	*sp = (struct savepoint){tx_index, h->nfiles, NULL};
	if (h->nfiles)
		sp->at = util_xmalloc(h->nfiles * sizeof(*sp->at));
	for (size_t i = 0; i < h->nfiles; i++)
		sp->at[i] = socket_spool_held_at(h->files[i]);
}

/* Back to the first savepoint at or after tx_index, which stays. An enclosing subtransaction that started at
 * the same position may roll back to it later. */
static bool socket_hold_rollback(sink *base, uint32_t xid, uint32_t tx_index, char *err, size_t errlen)
{
	held_txn *h = held_find((socket_sink *)base, xid, false);
	size_t k = 0;
	while (h && k < h->nsp && h->sp[k].tx_index < tx_index)
		k++;
	if (!h || k == h->nsp)
		return true;
	for (size_t i = 0; i < h->nfiles; i++)
		if (!socket_spool_held_cut(h->files[i],
					   i < h->sp[k].nfiles ? h->sp[k].at[i] : (spool_held_point){0}, err,
					   errlen))
			return false;
	for (size_t j = k + 1; j < h->nsp; j++)
		free(h->sp[j].at);
	h->nsp = k + 1;
	return true;
}

static void socket_hold_abort(sink *base, uint32_t xid)
{
	socket_sink *s = (socket_sink *)base;
	held_txn *h;
	while ((h = xid ? held_find(s, xid, false) : s->held) != NULL)
		held_free(s, h);
}

/* The held events become the next offsets of each subscription's spool. That is skipped if the spool has the
 * transaction already. It was then spooled before a restart, and the slot resends what was not confirmed. */
static bool socket_hold_commit(sink *base, uint32_t xid, const sink_commit *c, uint64_t seq, char *err,
			       size_t errlen)
{
	(void)seq;
	socket_sink *s = (socket_sink *)base;
	held_txn *h = held_find(s, xid, false);
	bool ok = true;
	for (size_t i = 0; h && ok && i < h->nfiles; i++) {
		subscription *sub = h->subs[i];
		spool_held *f = h->files[i];
		uint64_t events = socket_spool_held_at(f).events;
		h->files[i] = NULL;
		if (sub->have_last && c->commit_lsn <= sub->last_lsn) {
			socket_spool_held_discard(f);
			continue;
		}
		ok = socket_spool_held_commit(f, c->commit_lsn, c->commit_time, err, errlen);
		sub->have_last = socket_spool_last_id(sub->q.sp, &sub->last_lsn, &sub->last_txi);
		sub->last_before = false;
		sub->dirty = true;
		sub->matched += events;
		count_commits(s, c->commit_time, events);
	}
	if (h)
		held_free(s, h);
	return ok;
}

/* Group commit off the event loop ---------------------------------------------------------- */

/* The acked cursors are fsynced apart, at most this often. So a batch of events waits for one fsync, not two.
 * An ack that is not durable yet is delivered again after a power loss, as before. */
#define ACKS_SYNC_MS 100

/* On a syncer's worker, a batch's fsyncs (the loop leaves the batch alone while it is busy). */
static void run_batch(void *arg)
{
	struct syncer *y = arg;
	uint64_t start = util_now_us();
	for (size_t i = 0; i < y->n; i++)
		socket_spool_sync_run(&y->jobs[i]);
	y->took_us = util_now_us() - start;
}

/* An events batch is back. Its spools' events up to where it began are visible (and dispatched), and its
 * transactions delivered. Commit to durable latency is counted for its events. When an acks batch is back,
 * the cursors are durable. */
static void sync_finish(socket_sink *s, struct syncer *y)
{
	y->busy = false;
	for (size_t i = 0; i < y->n; i++) {
		if (!socket_spool_sync_end(y->qs[i]->sp, &y->jobs[i], y->err, sizeof(y->err)))
			y->failed = true;
		if (y == &s->sync)
			socket_queue_dispatch(s, y->qs[i]);
	}
	if (y->failed || y != &s->sync)
		return;
	s->durable_seq = y->ended;
	hist_add(&s->spool_sync, y->took_us);
	int64_t now_us = util_wall_ms() * 1000;
	for (size_t i = 0; i < y->runs; i++)
		hist_add_n(&s->latency,
			   now_us > s->runs[i].commit_time ? (uint64_t)(now_us - s->runs[i].commit_time) : 0,
			   s->runs[i].events);
	memmove(s->runs, s->runs + y->runs, (s->nruns - y->runs) * sizeof(*s->runs));
	s->nruns -= y->runs;
	y->runs = 0;
}

/* A worker's eventfd, when a batch is back. After events, the daemon flushes again, which starts the next
 * one. */
static void on_synced(socket_sink *s, struct syncer *y)
{
	worker_clear(y->w);
	if (!y->busy || !worker_idle(y->w))
		return; /* sync_wait took that batch already, or this one is not back yet */
	sync_finish(s, y);
	if (y == &s->sync && s->durable)
		s->durable(s->wake_ctx);
}

static void on_events_synced(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	socket_sink *s = arg;
	on_synced(s, &s->sync);
}

static void on_acks_synced(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	socket_sink *s = arg;
	on_synced(s, &s->acks);
}

/* Blocks until the batches in flight, if any, are back, and takes them. */
static void sync_wait(socket_sink *s)
{
	struct syncer *ys[] = {&s->sync, &s->acks};
	for (size_t i = 0; i < 2; i++)
		if (ys[i]->busy) {
			worker_wait(ys[i]->w);
			sync_finish(s, ys[i]);
		}
}

/* Adds queue q's spool to the batch y begins, if it has something to sync. */
static bool sync_add(struct syncer *y, queue *q, bool events, char *err, size_t errlen)
{
	if (events ? !q->sub->dirty : !socket_spool_cursor_pending(q->sp))
		return true;
	if (y->n == y->cap) {
		y->cap = y->cap ? 2 * y->cap : 8;
		y->qs = util_xrealloc(y->qs, y->cap * sizeof(*y->qs));
		y->jobs = util_xrealloc(y->jobs, y->cap * sizeof(*y->jobs));
	}
	if (!socket_spool_sync_begin(q->sp, &y->jobs[y->n], events ? SPOOL_SYNC_EVENTS : SPOOL_SYNC_CURSOR,
				     err, errlen))
		return false;
	y->qs[y->n++] = q;
	if (events)
		q->sub->dirty = q->sub->in_txn;
	return true;
}

/* Starts a batch on syncer y of the spools that have something to sync. That is their events (the buffers are
 * written here), or their acked cursors and the segments retention let go (of the dead letters' spools too).
 * The fsyncs run on y's thread while the loop goes on. With no events to sync, what has ended is delivered at
 * once. */
static bool sync_start(socket_sink *s, struct syncer *y, char *err, size_t errlen)
{
	bool events = y == &s->sync;
	y->n = 0;
	for (size_t i = 0; i < s->nsubs; i++)
		if (!sync_add(y, &s->subs[i]->q, events, err, errlen) ||
		    (!events && !sync_add(y, &s->subs[i]->dead, false, err, errlen))) {
			y->n = 0; /* cdc stops on this, and the descriptors of the jobs begun close then */
			return false;
		}
	if (!events) {
		s->acks_synced_ms = util_now_ms();
	} else if (!y->n) {
		s->durable_seq = s->ended_seq;
		return true;
	} else {
		y->ended = s->ended_seq;
		y->runs = s->nruns;
	}
	if (!y->n)
		return true;
	y->busy = true;
	worker_kick(y->w);
	return true;
}

/* Starts whatever batch is due. The events' batch starts whenever the last one is back. The cursors' starts
 * at most every ACKS_SYNC_MS (or now with force). */
static bool sync_due(socket_sink *s, bool force)
{
	struct syncer *y = &s->sync;
	if (!y->failed && !y->busy && !sync_start(s, y, y->err, sizeof(y->err)))
		y->failed = true;
	y = &s->acks;
	if (!y->failed && !y->busy && (force || util_now_ms() - s->acks_synced_ms >= ACKS_SYNC_MS) &&
	    !sync_start(s, y, y->err, sizeof(y->err)))
		y->failed = true;
	return !s->sync.failed && !s->acks.failed;
}

static sink_status socket_flush(sink *base, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	if (sync_due(s, false))
		return SINK_OK;
	util_errf(err, errlen, "%s", s->sync.failed ? s->sync.err : s->acks.err);
	return SINK_FATAL;
}

/* At a stop, the batches in flight, then one of what is left. */
static bool socket_finish(sink *base, int timeout_ms)
{
	(void)timeout_ms; /* fsyncs are not abandoned */
	socket_sink *s = (socket_sink *)base;
	sync_wait(s);
	sync_due(s, true);
	sync_wait(s);
	return !s->sync.failed && !s->acks.failed;
}

static bool syncer_start(socket_sink *s, struct syncer *y, const char *what,
			 void (*on_back)(evutil_socket_t, short, void *), char *err, size_t errlen)
{
	if (!(y->w = worker_new(what, run_batch, y, err, errlen)))
		return false;
	y->ev = event_new(s->evb, worker_fd(y->w), EV_READ | EV_PERSIST, on_back, s);
	if (!y->ev || event_add(y->ev, NULL) != 0)
		return util_errf(err, errlen, "socket sink: cannot watch its syncer's eventfd");
	return true;
}

static void syncer_stop(socket_sink *s)
{
	sync_wait(s);
	struct syncer *ys[] = {&s->sync, &s->acks};
	for (size_t i = 0; i < 2; i++) {
		if (ys[i]->ev)
			event_free(ys[i]->ev);
		worker_free(ys[i]->w);
		free(ys[i]->qs);
		free(ys[i]->jobs);
	}
}

static uint64_t socket_delivered(const sink *base)
{
	return ((const socket_sink *)base)->durable_seq;
}

static bool socket_busy(const sink *base)
{
	const socket_sink *s = (const socket_sink *)base;
	int64_t now = util_wall_ms();
	for (size_t i = 0; i < s->nsubs; i++) {
		const subscription *sub = s->subs[i];
		if (sub->set && !sub->set->retention.drop_oldest && socket_spool_full(sub->q.sp, now))
			return true;
	}
	return false;
}

static void socket_free(sink *base)
{
	socket_sink *s = (socket_sink *)base;
	syncer_stop(s);
	socket_hold_abort(base, 0);
	while (s->pending) {
		consumer *c = s->pending;
		s->pending = c->next;
		socket_conn_consumer_release(c);
	}
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		socket_queue_free(&sub->q);
		socket_queue_free(&sub->dead);
		free(sub->name);
		free(sub);
	}
	free(s->subs);
	free_settings(s);
	free(s->state_dir);
	if (s->listener) {
		evconnlistener_free(s->listener);
		unlink(s->path);
	}
	if (s->ev_tick)
		event_free(s->ev_tick);
	buf_free(&s->scratch);
	buf_free(&s->events);
	free(s->runs);
	free(s);
}

static const sink_ops socket_ops = {
    .name = "socket",
    .render = socket_render,
    .deliver = socket_deliver,
    .end_txn = socket_end_txn,
    .flush = socket_flush,
    .finish = socket_finish,
    .delivered = socket_delivered,
    .busy = socket_busy,
    .free = socket_free,
    .hold = socket_hold,
    .hold_savepoint = socket_hold_savepoint,
    .hold_rollback = socket_hold_rollback,
    .hold_abort = socket_hold_abort,
    .hold_commit = socket_hold_commit,
};

sink *socket_sink_new(const socket_sink_settings *settings, const socket_sub_settings *subs, size_t nsubs,
		      struct event_base *base, void (*wake_fn)(void *), void (*durable_fn)(void *), void *ctx,
		      char *err, size_t errlen)
{
	socket_sink *s = util_xcalloc(1, sizeof(*s));
	s->base.ops = &socket_ops;
	s->state_dir = util_xstrdup(settings->state_dir);
	s->first_frame_timeout_ms = settings->first_frame_timeout_ms;
	s->max_connections = settings->max_connections;
	s->out_high = settings->max_output;
	s->out_low = settings->max_output / 4;
	s->evb = base;
	s->wake = wake_fn;
	s->durable = durable_fn;
	s->wake_ctx = ctx;
	if (!syncer_start(s, &s->sync, "syncs the spools", on_events_synced, err, errlen) ||
	    !syncer_start(s, &s->acks, "syncs the acked cursors", on_acks_synced, err, errlen))
		goto fail;
	snprintf(s->path, sizeof(s->path), "%s", settings->socket_path);
	char why[512];
	int fd = net_unix_listen(settings->socket_path, settings->mode, 128, why, sizeof(why));
	if (fd < 0) {
		util_errf(err, errlen, "subscribers.socket %s", why);
		goto fail;
	}
	evutil_make_socket_nonblocking(fd);
	s->listener = evconnlistener_new(base, socket_conn_on_accept, s, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!s->listener) {
		close(fd);
		util_errf(err, errlen, "subscribers.socket %s: cannot listen", settings->socket_path);
		goto fail;
	}
	s->ev_tick = event_new(base, -1, EV_PERSIST, on_tick, s);
	struct timeval tv = {.tv_sec = 0, .tv_usec = TICK_MS * 1000};
	event_add(s->ev_tick, &tv);
	if (!socket_sink_bind(&s->base, subs, nsubs, err, errlen))
		goto fail;
	log_info("serving subscribers", "socket=%s mode=%04o", settings->socket_path,
		 (unsigned)settings->mode);
	return &s->base;
fail:
	socket_free(&s->base);
	return NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

bool socket_sink_forget(sink *base, const char *name, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (sub->set || strcmp(sub->name, name) != 0)
			continue;
		sync_wait(s); /* the batch in flight may have its spool */
		socket_queue_free(&sub->q);
		socket_queue_free(&sub->dead);
		free(sub->name);
		free(sub);
		memmove(&s->subs[i], &s->subs[i + 1], (s->nsubs - i - 1) * sizeof(*s->subs));
		s->nsubs--;
		break;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool/%s", s->state_dir, name);
	if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
		return util_errf(err, errlen, "cannot remove %s: %s", dir, strerror(errno));
	log_info("removed the spool of a deleted subscription", "subscription=%s dir=%s", name, dir);
	return true;
}

const hist *socket_sink_latency(const sink *base)
{
	return &((const socket_sink *)base)->latency;
}

const hist *socket_sink_spool_sync(const sink *base)
{
	return &((const socket_sink *)base)->spool_sync;
}

bool socket_sink_stats(const sink *base, uint32_t i, socket_sub_stats *out)
{
	const socket_sink *s = (const socket_sink *)base;
	const subscription *sub = i < s->nindex ? s->by_index[i] : NULL;
	if (!sub)
		return false;
	spool_stats st = socket_spool_get_stats(sub->q.sp);
	uint64_t in_flight = 0, not_reading = 0;
	for (const consumer *c = sub->q.consumers; c; c = c->next) {
		in_flight += c->in_flight;
		not_reading += c->not_reading;
	}
	for (const consumer *c = sub->dead.consumers; c; c = c->next)
		not_reading += c->not_reading;
	*out = (socket_sub_stats){
	    .matched = sub->matched,
	    .delivered = sub->delivered,
	    .redelivered = sub->redelivered,
	    .in_flight = in_flight,
	    .acked = sub->acked,
	    .nacked = sub->nacked,
	    .progressed = sub->progressed,
	    .refused = sub->refused,
	    .denied = sub->denied,
	    .head_offset = socket_spool_head(sub->q.sp),
	    .acked_offset = socket_spool_acked(sub->q.sp),
	    .first_offset = socket_spool_first(sub->q.sp),
	    .consumers = sub->q.nconsumers,
	    .not_reading = not_reading,
	    .dead = socket_spool_head(sub->dead.sp) - socket_spool_acked(sub->dead.sp),
	    .dropped = st.dropped,
	    .spool_bytes = st.bytes,
	    .full = !sub->set->retention.drop_oldest && socket_spool_full(sub->q.sp, util_wall_ms()),
	};
	return true;
}

socket_consumer_stats *socket_sink_consumers(const sink *base, uint32_t i, size_t *n)
{
	const socket_sink *s = (const socket_sink *)base;
	const subscription *sub = i < s->nindex ? s->by_index[i] : NULL;
	*n = 0;
	if (!sub || !(sub->q.nconsumers + sub->dead.nconsumers))
		return NULL;
	socket_consumer_stats *out = util_xcalloc(sub->q.nconsumers + sub->dead.nconsumers, sizeof(*out));
	const queue *qs[2] = {&sub->q, &sub->dead};
	for (int k = 0; k < 2; k++)
		for (const consumer *c = qs[k]->consumers; c; c = c->next) {
			socket_consumer_stats *o = &out[(*n)++];
			snprintf(o->name, sizeof(o->name), "%s", c->name);
			o->pid = c->pid;
			o->uid = c->uid;
			o->mode = socket_queue_mode(qs[k]);
			o->dead_letters = qs[k]->dead_letters;
			o->active = socket_queue_is_active(c);
			o->reading = !c->not_reading;
			o->in_flight = c->in_flight;
			o->delivered = c->delivered;
			o->acked = c->acked;
			o->connected_us = c->connected_us;
		}
	return out;
}
