/* `cdc run`'s event loop: the replication connection, the wiring of the pipeline, sinks, status
 * server and signals, and the stop. Changes move one way, source -> pipeline -> sinks. The flushed
 * position comes back, is recorded in state_dir and then confirmed to the slot. */
#include "cdc/daemon/daemon.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cdc/daemon/notify.h"
#include "cdc/daemon/setup.h"
#include "cdc/daemon/sidecar.h"
#include "decoder/base/log.h"

#define TICK_MS 100
#define FEEDBACK_MIN_MS 100 /* at most this often when only the flushed position moved */
#define BACKOFF_FIRST_MS 500
#define STANDBY_POLL_MS 1000
#define BACKOFF_MAX_MS 30000
#define FINISH_TIMEOUT_MS 30000 /* how long a stop waits for messages in flight */
#define PUBLICATION_MS 10000	/* the tables source.publish matches are looked for this often */

/* Feedback ------------------------------------------------------------------------------ */

/* Sends the server the position recorded in state_dir (never one beyond it). */
static bool send_status(sidecar *d)
{
	connection *c = &d->conn;
	if (source_send_status(c->src, c->received_lsn, c->st.flushed_lsn, false, d->err, sizeof(d->err)) !=
	    SOURCE_OK)
		return false;
	c->sent_flush_lsn = c->st.flushed_lsn;
	c->last_feedback_ms = util_now_ms();
	if (source_output_pending(c->src))
		event_add(c->ev_write, NULL);
	return true;
}

/* The replication connection connects, reconnects with backoff, and sends standby status updates and
 * heartbeats. */

/* Hands the sinks' new position to the writer, which confirms it once it is on disk
 * (on_state_written). It tells the backfills and sends a status update. It does so at most every
 * FEEDBACK_MIN_MS unless forced. */
static bool send_feedback(sidecar *d, bool force)
{
	connection *c = &d->conn;
	uint64_t now = util_now_ms(), flushed = pipeline_flushed(d->pipe);
	bool moved = flushed != c->handled_lsn;
	/* A table that waits only for its last chunks to be durable finishes (and the next one
	 * starts) now, not after FEEDBACK_MIN_MS. */
	bool drained = moved && daemon_backfills_draining(d);
	if (!force && !drained && !(moved && now - c->last_feedback_ms >= FEEDBACK_MIN_MS) &&
	    now - c->last_feedback_ms < d->cfg->source.status_interval_ms)
		return true;
	if (moved)
		daemon_backfills_delivered(d, flushed);
	daemon_sidecar_post(d, flushed);
	return send_status(d);
}

void daemon_sidecar_post(sidecar *d, uint64_t flushed)
{
	connection *c = &d->conn;
	if (!c->st.slot[0])
		return; /* no record yet (before the first connection), so the next one takes it */
	buf bf = {0};
	const char *path = daemon_backfills_state(d, &bf);
	if (flushed > c->handled_lsn || path) {
		state next = c->st;
		next.flushed_lsn = flushed > c->handled_lsn ? flushed : c->handled_lsn;
		source_state_writer_post(d->sw, &next, path, bf.data, bf.len);
	}
	buf_free(&bf);
	if (flushed > c->handled_lsn)
		c->handled_lsn = flushed;
}

/* What the writer has on disk becomes what may be confirmed. False with d->err if a write failed. */
static bool absorb_recorded(sidecar *d)
{
	state st;
	bool found;
	if (!source_state_writer_durable(d->sw, &st, &found, d->err, sizeof(d->err))) {
		daemon_sidecar_fail(
		    d, 1,
		    "cannot record the position in state_dir; stopping so nothing is confirmed unrecorded");
		return false;
	}
	if (found && st.flushed_lsn > d->conn.st.flushed_lsn)
		d->conn.st.flushed_lsn = st.flushed_lsn;
	return true;
}

bool daemon_sidecar_record(sidecar *d, const state *st)
{
	source_state_writer_post(d->sw, st, NULL, NULL, 0);
	source_state_writer_wait(d->sw);
	state done;
	bool found;
	return source_state_writer_durable(d->sw, &done, &found, d->err, sizeof(d->err));
}

/* Source callbacks ---------------------------------------------------------------------- */

static bool on_xlogdata(void *ctx, const uint8_t *data, size_t len, uint64_t lsn, char *err, size_t errlen)
{
	sidecar *d = ctx;
	if (lsn > d->conn.received_lsn)
		d->conn.received_lsn = lsn;
	d->conn.got_data = true;
	return pipeline_feed(d->pipe, data, len, lsn, err, errlen);
}

static bool on_keepalive(void *ctx, uint64_t wal_end, bool reply, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	sidecar *d = ctx;
	if (wal_end > d->conn.received_lsn)
		d->conn.received_lsn = wal_end;
	if (wal_end > d->fig.server_wal_lsn)
		d->fig.server_wal_lsn = wal_end;
	pipeline_keepalive(d->pipe, wal_end);
	/* Answered right after this drain, in the same wakeup. */
	d->conn.reply_requested |= reply;
	return true;
}

/* Connection lifecycle ------------------------------------------------------------------ */

static void schedule_retry(sidecar *d)
{
	connection *c = &d->conn;
	if (c->ev_read) {
		event_free(c->ev_read);
		c->ev_read = NULL;
	}
	event_del(c->ev_write);
	c->streaming = false;
	c->paused = false;
	source_disconnect(c->src);
	c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_FIRST_MS;
	if (c->backoff_ms > BACKOFF_MAX_MS)
		c->backoff_ms = BACKOFF_MAX_MS;
	/* Jitter keeps a fleet of sidecars from reconnecting in step. */
	uint64_t delay = c->backoff_ms / 2 + (uint64_t)rand() % (c->backoff_ms / 2 + 1);
	log_warn("not streaming; retrying", "in_ms=%llu error=\"%s\"", (unsigned long long)delay, d->err);
	daemon_notify_started("not streaming; retrying in %llu ms: %s", (unsigned long long)delay, d->err);
	struct timeval tv = {.tv_sec = (time_t)(delay / 1000), .tv_usec = (suseconds_t)(delay % 1000) * 1000};
	event_add(c->ev_retry, &tv);
}

/* Another process streams the slot. Wait as a standby, quietly, asking again every STANDBY_POLL_MS.
 * It does not back off, since the takeover should come within seconds of the active one's end. */
static void standby(sidecar *d)
{
	connection *c = &d->conn;
	source_disconnect(c->src);
	if (!c->standby) {
		log_info("standby: another process streams the replication slot; this cdc takes over when it "
			 "lets go",
			 "slot=%s holder_walsender_pid=%d", d->cfg->source.slot, source_holder(c->src));
		daemon_notify_started(
		    "standby: another process streams slot %s; this cdc takes over when it lets go",
		    d->cfg->source.slot);
	}
	c->standby = source_holder(c->src);
	source_after_standby(c->src, true);
	c->backoff_ms = 0;
	struct timeval tv = {.tv_sec = STANDBY_POLL_MS / 1000, .tv_usec = STANDBY_POLL_MS % 1000 * 1000};
	event_add(c->ev_retry, &tv);
}

/* The slot cannot send what follows cdc's position. Stop, or re-sync and stream again. */
static void on_gap(sidecar *d)
{
	switch (daemon_resync(d)) {
	case RESYNC_STOP:
		daemon_sidecar_fail(
		    d, 1, "the replication slot cannot send the changes that follow cdc's position");
		return;
	case RESYNC_RETRY:
		d->fig.errors_connect++;
		schedule_retry(d);
		return;
	case RESYNC_DONE:
		d->conn.backoff_ms = 0;
		schedule_retry(d);
		return;
	}
}

/* Pushes out what sinks buffered and moves the flushed position. False when streaming stops. A sink
 * that lost messages in flight restarts. Streaming then resumes from the slot's confirmed position,
 * which the server resends from. */
static bool flush_sinks(sidecar *d)
{
	sink *k = NULL;
	switch (pipeline_flush(d->pipe, &k, d->err, sizeof(d->err))) {
	case SINK_OK:
		daemon_sink_set_watch(&d->sinks);
		return true;
	case SINK_RESTART:
		log_warn(
		    "a sink failed; it restarts and streaming resumes from the slot's confirmed position",
		    "sink=%s error=\"%s\"", k->ops->name, d->err);
		if (!pipeline_restart_sink(d->pipe, k, d->err, sizeof(d->err)))
			daemon_sidecar_fail(d, 1, "the sink cannot restart");
		else if (d->conn.streaming)
			schedule_retry(d);
		return false;
	case SINK_FATAL:
		daemon_sidecar_fail(d, 1, "sink failed");
		return false;
	}
	return false;
}

/* Reading a backlog in larger pieces (source_batch). The socket is then also read every
 * BATCH_POLL_MS. A backlog is a streamed transaction still open (one larger than the server's
 * logical_decoding_work_mem), or commits that were older than BATCH_AGE_MS when they were read.
 * A live stream's commits are fresh, and a read that brings nothing ends it. So a transaction that
 * comes after a backlog waits BATCH_POLL_MS at most, once. Only commits count: a non-transactional
 * message has no commit time. A backfill writes one a chunk; counted as old commits, they would
 * switch the mode on after every chunk on a quiet stream, and each high watermark would wait for
 * the poll. Over a Unix socket, whose readiness ignores SO_RCVLOWAT, a backlog is read every
 * BATCH_UNIX_US after the last read instead, readable or not (a timerfd: libevent's own timers count in
 * milliseconds unless every timer of the loop is made precise, which cost CPU on TCP). Woken by the socket,
 * cdc took the server's messages one or two a read, as they landed, and the walsender's own calls cost more
 * meanwhile. 60 us apart, a read finds a few dozen (the socket fills in about 500 us, so the server never
 * waits): on the 1,000,000-row transaction, 5 times fewer reads and a fifth less of cdc's CPU
 * (docs/performance.md). */
#define BATCH_POLL_MS 2
#define BATCH_UNIX_US 60
#define BATCH_AGE_MS 1000

/* Sets c->batch_timer to tick once, BATCH_UNIX_US from now (on), or never. False if there is no timer.
 * Set again after each read, so that the reads are that far apart however long each takes. */
static bool batch_tick(connection *c, bool on)
{
	if (c->batch_timer < 0 && on)
		c->batch_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->batch_timer < 0)
		return false;
	struct itimerspec its = {.it_value = {0, on ? BATCH_UNIX_US * 1000 : 0}};
	return timerfd_settime(c->batch_timer, 0, &its, NULL) == 0 && on;
}

static void on_read(evutil_socket_t fd, short what, void *arg);

static void watch_read(sidecar *d)
{
	connection *c = &d->conn;
	bool tick = batch_tick(c, c->batching && source_unix_socket(c->src));
	event_del(c->ev_read);
	event_assign(c->ev_read, d->base, tick ? c->batch_timer : source_fd(c->src), EV_READ | EV_PERSIST,
		     on_read, d);
	struct timeval poll = {0, BATCH_POLL_MS * 1000};
	event_add(c->ev_read, c->batching && !tick ? &poll : NULL);
}

static void choose_batching(sidecar *d, uint64_t commits_before)
{
	connection *c = &d->conn;
	bool on = false;
	if (c->got_data) {
		pipeline_figures pf = pipeline_get_figures(d->pipe);
		on = pf.received->count != commits_before
			 ? util_wall_us() - pf.last_commit_time > BATCH_AGE_MS * 1000
			 : c->batching;
		on = on || pipeline_held(d->pipe).streamed_open > 0;
	}
	if (on == c->batching) {
		if (on && event_get_fd(c->ev_read) == c->batch_timer)
			batch_tick(c, true); /* the next read, BATCH_UNIX_US after this one */
		return;
	}
	c->batching = on;
	if (on)
		d->fig.backlog_reads++;
	source_batch(c->src, on);
	if (!c->paused)
		watch_read(d);
}

/* Whether a change of the subscriptions waits for the end of a transaction that reading stopped in:
 * inside it, or between the blocks of a streamed one. (A prepared transaction's end may never come:
 * not for that.) */
static bool reload_waits_for_txn_end(const sidecar *d)
{
	return d->rl.pending && (pipeline_in_txn(d->pipe) || pipeline_held(d->pipe).streamed_open > 0);
}

/* Stops reading the slot while a sink is busy, so memory stays bounded by the sink's queue. The
 * sink's delivery reports resume it. Status updates go on from the timer meanwhile. A change of the
 * subscriptions waits for a transaction boundary: while one waits, reading goes on to the end of
 * the transaction it stopped in (the sink takes that one past its limit), the change applies
 * there, and reading stops again. */
static void pause_or_resume(sidecar *d)
{
	connection *c = &d->conn;
	if (!c->ev_read)
		return;
	bool busy = pipeline_busy(d->pipe) && !reload_waits_for_txn_end(d);
	char received[LSN_STRLEN];
	util_lsn_format(c->received_lsn, received);
	if (busy && !c->paused) {
		event_del(c->ev_read);
		log_info("paused reading the slot: a sink is busy", "received_lsn=%s", received);
	} else if (!busy && c->paused) {
		watch_read(d);
		event_active(c->ev_read, EV_READ, 0);
		log_info("resumed reading the slot", "received_lsn=%s", received);
	}
	c->paused = busy;
}

/* Status update (a lost connection is retried). False when streaming stopped. */
static bool feedback(sidecar *d, bool force)
{
	if (send_feedback(d, force))
		return true;
	if (!d->exit_code)
		schedule_retry(d);
	return false;
}

/* After input from the slot or a sink, report progress, pause or resume reading, stop at endpos. */
static void progressed(sidecar *d, bool force)
{
	if (!feedback(d, force))
		return;
	pause_or_resume(d);
	if (pipeline_at_endpos(d->pipe))
		event_base_loopbreak(d->base);
}

static const source_handler source_callbacks = {.xlogdata = on_xlogdata, .keepalive = on_keepalive};

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	sidecar *d = arg;
	connection *c = &d->conn;
	if (!source_connected(c->src)) {
		/* What the server sent before it closed the connection is left unread. The slot sends it
		 * again to whoever streams next. A process resumed after a long pause acts on none of
		 * it. */
		util_errf(
		    d->err, sizeof(d->err),
		    "the server closed the replication connection; what it sent last is read again from the "
		    "slot");
		d->fig.errors_stream++;
		schedule_retry(d);
		return;
	}
	if (fd == c->batch_timer) { /* its tick (the event is level-triggered) */
		uint64_t ticks;
		ssize_t n = read(fd, &ticks, sizeof(ticks));
		(void)n;
	}
	source_handler h = source_callbacks;
	h.ctx = d;
	c->got_data = false;
	uint64_t commits = pipeline_get_figures(d->pipe).received->count;
	source_result r = source_read(c->src, &h, d->err, sizeof(d->err));
	if (c->got_data)
		c->last_data_ms = util_now_ms();
	if (r == SOURCE_FATAL) {
		daemon_sidecar_fail(d, 1, "cannot process the replication stream");
		return;
	}
	if (!flush_sinks(d))
		return;
	if (r == SOURCE_RETRY) {
		d->fig.errors_stream++;
		schedule_retry(d);
		return;
	}
	if (r == SOURCE_GAP) {
		on_gap(d);
		return;
	}
	bool reply = c->reply_requested;
	c->reply_requested = false;
	c->backoff_ms = 0;
	choose_batching(d, commits);
	progressed(d, reply);
	daemon_backfills_kick(d); /* a watermark may have closed a chunk, so the next one is due */
}

/* Delivery reports of an asynchronous sink. */
static void on_sink_event(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	daemon_sink_set_poll(&d->sinks);
	if (flush_sinks(d) && d->conn.streaming)
		progressed(d, false);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	if (source_output_pending(d->conn.src))
		event_add(d->conn.ev_write, NULL);
}

/* A position is on disk. It is confirmed to the server at once. */
static void on_state_written(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	connection *c = &d->conn;
	if (absorb_recorded(d) && c->streaming && c->st.flushed_lsn > c->sent_flush_lsn && !send_status(d) &&
	    !d->exit_code)
		schedule_retry(d);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	connection *c = &d->conn;
	bool have_st = false;
	state st;
	source_state_writer_wait(d->sw); /* the newest record, not one still being written */
	if (!source_state_read(d->cfg->state_dir, &st, &have_st, d->err, sizeof(d->err))) {
		daemon_sidecar_fail(d, 1, "cannot read the recorded position");
		return;
	}
	if (have_st && st.shared) /* this state_dir's process was a standby, so the slot may be ahead */
		source_after_standby(c->src, true);
	catalog cat = {0};
	uint32_t recorded_timeline = st.timeline;
	source_result r =
	    source_start(c->src, &st, have_st, pipeline_relcache(d->pipe), &cat, d->err, sizeof(d->err));
	if (r != SOURCE_OK)
		source_catalog_free(&cat);
	if (r == SOURCE_FATAL) {
		daemon_sidecar_fail(d, 1, "cannot stream from the replication slot");
		return;
	}
	if (r == SOURCE_RETRY) {
		d->fig.errors_connect++;
		schedule_retry(d);
		return;
	}
	if (r == SOURCE_GAP) {
		on_gap(d);
		return;
	}
	if (r == SOURCE_BUSY) {
		/* Recorded, so that a restart that finds the slot ahead (the other one moved it) accepts it.
		 */
		if (have_st && !st.shared) {
			st.shared = true;
			if (!daemon_sidecar_record(d, &st)) {
				daemon_sidecar_fail(d, 1, "cannot record the position in state_dir");
				return;
			}
		}
		standby(d);
		return;
	}
	/* Before anything streams, check the subscriptions against the tables as they are now. */
	if (!daemon_reload_connected(d, &cat, c->streams == 0)) {
		daemon_sidecar_fail(d, 1,
				    "a subscription of the configuration file cannot work on its tables");
		return;
	}
	if (c->standby) {
		log_info("taking over: the slot was let go, this cdc streams it now", "slot=%s",
			 d->cfg->source.slot);
		c->standby = 0;
	}
	source_after_standby(c->src, false); /* streaming it, so from now on the slot moves only with cdc */
	/* A new timeline (a promotion) is recorded at once. The position is on it from now on. */
	if ((!have_st || st.timeline != recorded_timeline) && !daemon_sidecar_record(d, &st)) {
		daemon_sidecar_fail(d, 1, "cannot record the position in state_dir");
		return;
	}
	if (!pipeline_start(d->pipe, source_protocol(c->src), st.flushed_lsn, d->err, sizeof(d->err))) {
		daemon_sidecar_fail(d, 1, "cannot set up transaction spill files");
		return;
	}
	c->st = st;
	c->st.shared = false; /* this process streams the slot now, so the next record is its own */
	c->sent_flush_lsn = c->handled_lsn = c->received_lsn = st.flushed_lsn;
	c->publication_ms = 0; /* tables created while cdc was away join the publication now */
	daemon_backfills_restart(d);
	daemon_sidecar_tell_database(d);
	figures *f = &d->fig;
	f->reconnects += f->last_progress_ms != 0;
	f->promotions += source_server_info(c->src)->promoted_from != 0;
	f->last_server_ms = 0; /* asked again at once, since the server may be another one */
	snprintf(f->server_version, sizeof(f->server_version), "%d.%d", source_server_version(c->src) / 10000,
		 source_server_version(c->src) % 10000);
	c->streaming = true;
	c->streams++;
	if (!f->last_progress_ms)
		f->last_progress_ms = util_now_ms();
	daemon_figures_publish(d, true); /* /readyz turns 200 now, not at the next tick */
	daemon_notify_started("streaming from slot %s (PostgreSQL %s)", d->cfg->source.slot,
			      f->server_version);
	int sock = source_fd(c->src);
	c->ev_read = event_new(d->base, sock, EV_READ | EV_PERSIST, on_read, d);
	event_free(c->ev_write);
	c->ev_write = event_new(d->base, sock, EV_WRITE, on_write, d);
	c->batching = false;
	watch_read(d);
	/* libpq may already hold data read during the handshake. */
	event_active(c->ev_read, EV_READ, 0);
}

/* Tables created since that source.publish matches join the publication (source.create). */
static void keep_publication(sidecar *d, uint64_t now)
{
	connection *c = &d->conn;
	bool due = now - c->publication_ms >= PUBLICATION_MS;
	if (due)
		c->publication_ms = now;
	cfg_strlist added = {0};
	char err[512];
	if (!source_keep_publication(c->src, due, &added, err, sizeof(err)))
		log_warn("cannot keep the publication current; trying again", "publication=%s error=\"%s\"",
			 d->cfg->source.publication, err);
	for (size_t i = 0; i + 1 < added.n; i += 2)
		log_info("added a table to the publication", "publication=%s schema=%s table=%s",
			 d->cfg->source.publication, added.v[i], added.v[i + 1]);
	if (added.n)
		daemon_backfills_tables_added(d, &added);
	cfg_strlist_free(&added);
}

/* Sends a heartbeat when the slot has been quiet for source.heartbeat. */
static void heartbeat(sidecar *d, uint64_t now)
{
	connection *c = &d->conn;
	uint64_t hb = d->cfg->source.heartbeat_ms;
	if (!hb || now - c->last_data_ms < hb || now - c->last_heartbeat_ms < hb)
		return;
	c->last_heartbeat_ms = now;
	char err[512];
	if (!source_heartbeat(c->src, err, sizeof(err))) {
		if (!c->heartbeat_warned)
			log_warn("heartbeat failed", "error=\"%s\"", err);
		c->heartbeat_warned = true;
	} else {
		c->heartbeat_warned = false;
	}
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	daemon_figures_tick(d, util_now_us(), TICK_MS * 1000);
	daemon_notify_watchdog(util_now_ms());
	daemon_reload_maybe(d);
	if (d->conn.paused && d->rl.pending)
		pause_or_resume(d); /* a change waits for the end of the transaction reading stopped in */
	daemon_backfills_tick(d, util_now_ms());
	daemon_figures_publish(d, false);
	/* A sink's transaction kept open for a while (Kafka's commit_interval) commits when it is due,
	 * and a commit call that timed out resumes, even if nothing else arrives. */
	if (d->conn.streaming && daemon_sink_set_ticks(&d->sinks)) {
		if (!flush_sinks(d))
			return;
		pause_or_resume(d); /* a commit that ended here lets reading go on */
	}
	if (!d->conn.streaming || !feedback(d, false))
		return;
	uint64_t now = util_now_ms();
	daemon_figures_log_progress(d, now);
	daemon_figures_slot_health(d, now);
	keep_publication(d, now);
	daemon_figures_server(d, now);
	heartbeat(d, now);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	sidecar *d = arg;
	if (sig == SIGHUP) {
		daemon_reload_request(d);
		return;
	}
	log_info("stopping", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	event_base_loopbreak(d->base);
}

/* Wiring -------------------------------------------------------------------------------- */

/* Consumers made room in a spool that was full. Reading the slot may resume. */
static void on_consumers_acked(void *ctx)
{
	sidecar *d = ctx;
	if (d->conn.paused)
		pause_or_resume(d);
}

/* The stream this process holds now (sink_env.stream, asked before an exactly-once commit). It asks
 * the kernel too. So a process resumed after a pause commits nothing before it has read that its
 * stream ended. A stream found closed is handed to on_read at once. That holds even while reading is
 * paused for a sink that is busy with the very commit that waits for it. */
static uint64_t held_stream(void *ctx)
{
	connection *c = &((sidecar *)ctx)->conn;
	if (!c->streaming)
		return 0;
	if (source_connected(c->src))
		return c->streams;
	event_active(c->ev_read, EV_READ, 0);
	return 0;
}

/* The socket sink's group commit is back. The flushed position may move, and the next one starts. */
static void on_spooled(void *ctx)
{
	sidecar *d = ctx;
	if (flush_sinks(d) && d->conn.streaming)
		progressed(d, false);
}

/* A reload may apply after every commit. */
static void at_boundary(void *ctx)
{
	daemon_reload_maybe(ctx);
}

/* Setup and teardown -------------------------------------------------------------------- */

static void shutdown_flush(sidecar *d)
{
	if (d->exit_code || !flush_sinks(d))
		return;
	pipeline_finish(d->pipe, FINISH_TIMEOUT_MS);
	if (!flush_sinks(d))
		return;
	char lsn[LSN_STRLEN];
	if (d->conn.streaming && send_feedback(d, true)) {
		source_state_writer_wait(d->sw);
		/* Let the final status update reach the server before the connection closes. */
		if (absorb_recorded(d) && send_status(d))
			while (source_output_pending(d->conn.src))
				usleep(1000);
	}
	util_lsn_format(d->conn.st.flushed_lsn, lsn);
	daemon_figures_log_sinks(d);
	log_info("stopped", "flushed_lsn=%s", lsn);
}

/* Everything up to the loop. Returns 0, or the exit code of what failed (logged). */
static int setup(sidecar *d, uint64_t endpos)
{
	cfg *c = d->cfg;
	if ((d->lock_fd = source_state_lock(c->state_dir, d->err, sizeof(d->err))) < 0) {
		log_error("cannot use state_dir", "error=\"%s\"", d->err);
		return 1;
	}
	if (!daemon_reload_init(d))
		return 2;
	rules *r = daemon_setup_rules(c, d->err, sizeof(d->err));
	if (!r) {
		log_error("configuration not supported", "error=\"%s\"", d->err);
		return 2;
	}
	char spill_dir[4096];
	snprintf(spill_dir, sizeof(spill_dir), "%s/spill", c->state_dir);
	if (mkdir(spill_dir, 0700) != 0 && errno != EEXIST) {
		log_error("cannot create spill directory", "dir=%s error=\"%s\"", spill_dir, strerror(errno));
		match_rules_free(r);
		return 1;
	}
	d->pipe = pipeline_new(spill_dir, endpos, at_boundary, d);
	pipeline_on_resync(d->pipe, daemon_resync_reached);
	pipeline_deliver_ddl(d->pipe, c->source.ddl);
	source_settings src = daemon_setup_source(c);
	d->conn.src = source_new(&src);
	d->base = event_base_new();
	if (!(d->sw = source_state_writer_new(c->state_dir, d->err, sizeof(d->err)))) {
		log_error("cannot record positions", "error=\"%s\"", d->err);
		match_rules_free(r);
		return 1;
	}
	d->ev_state =
	    event_new(d->base, source_state_writer_fd(d->sw), EV_READ | EV_PERSIST, on_state_written, d);
	event_add(d->ev_state, NULL);
	d->sinks = (sink_set){.env = {.base = d->base,
				      .wake = on_consumers_acked,
				      .durable = on_spooled,
				      .stream = held_stream,
				      .ctx = d},
			      .on_event = on_sink_event};
	if (!daemon_sidecar_bind(d, r)) {
		log_error("cannot start a sink", "error=\"%s\"", d->err);
		return 2;
	}
	if (!(d->status = status_new(c, d->base, daemon_reload_on_control, d, d->err, sizeof(d->err)))) {
		log_error("cannot serve the status socket", "error=\"%s\"", d->err);
		return 1;
	}
	return daemon_backfills_init(d) && daemon_signals_init(d) ? 0 : 1;
}

int daemon_run(cfg *c, const char *cfg_path, uint64_t endpos)
{
	sidecar d = {.cfg = c, .cfg_path = cfg_path, .lock_fd = -1, .conn.batch_timer = -1};
	log_setup(c->log.level, c->log.format);
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	if ((d.exit_code = setup(&d, endpos)) != 0)
		goto out;
	d.fig.start_ms = util_now_ms();
	daemon_figures_publish(&d, true);
	d.conn.ev_write = event_new(d.base, -1, 0, on_write, &d);
	d.conn.ev_retry = evtimer_new(d.base, on_retry, &d);
	d.ev_tick = event_new(d.base, -1, EV_PERSIST, on_tick, &d);
	int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	for (int i = 0; i < 3; i++) {
		d.ev_sig[i] = evsignal_new(d.base, sigs[i], on_signal, &d);
		event_add(d.ev_sig[i], NULL);
	}
	struct timeval tick = {.tv_sec = 0, .tv_usec = TICK_MS * 1000};
	event_add(d.ev_tick, &tick);
	log_info("starting", "version=" CDC_VERSION " slot=%s state_dir=%s subscriptions=%zu", c->source.slot,
		 c->state_dir, c->nsubs);
	daemon_notify_status("connecting to PostgreSQL to stream slot %s", c->source.slot);
	event_active(d.conn.ev_retry, EV_TIMEOUT, 0);
	event_base_dispatch(d.base);
	daemon_notify_stopping(d.exit_code
				   ? "stopping after an error (see the log)"
				   : "stopping: delivering what is in flight and confirming it to the slot");
	shutdown_flush(&d);
out:
	if (d.conn.ev_read)
		event_free(d.conn.ev_read);
	for (int i = 0; i < 3; i++)
		if (d.ev_sig[i])
			event_free(d.ev_sig[i]);
	if (d.conn.ev_write)
		event_free(d.conn.ev_write);
	if (d.conn.ev_retry)
		event_free(d.conn.ev_retry);
	if (d.ev_tick)
		event_free(d.ev_tick);
	if (d.ev_state)
		event_free(d.ev_state);
	source_state_writer_free(d.sw); /* after what it has left to write */
	/* Whatever has events on the loop goes before the loop. */
	daemon_reload_free(&d);
	daemon_signals_free(&d);
	daemon_backfills_free(&d);
	status_free(d.status);
	daemon_sink_set_free(&d.sinks);
	if (d.base)
		event_base_free(d.base);
	pipeline_free(d.pipe);
	source_free(d.conn.src);
	cfg_free(d.cfg);
	if (d.lock_fd >= 0)
		close(d.lock_fd);
	if (d.conn.batch_timer >= 0)
		close(d.conn.batch_timer);
	return d.exit_code;
}
