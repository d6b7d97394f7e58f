/* daemon.c: `cdc run`. One event loop moves changes one way: source -> decoder (txn assembler)
 * -> rules -> sinks; what every sink has delivered flows back as the flushed position that is
 * recorded in state_dir and then confirmed to the slot. */
#include "cdc/daemon/daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <event2/event.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "decoder/arena.h"
#include "decoder/event.h"
#include "decoder/json.h"
#include "decoder/log.h"
#include "cdc/daemon/progress.h"
#include "cdc/status/report.h"
#include "cdc/daemon/rules.h"
#include "cdc/daemon/source.h"
#include "cdc/daemon/state.h"
#include "cdc/status/status.h"
#include "sinks/kafka_sink.h"
#include "sinks/socket_sink.h"
#include "cdc/daemon/sinks_setup.h"
#include "decoder/txn.h"

#define TICK_MS 100
#define FEEDBACK_MIN_MS 100 /* at most this often when only the flushed position moved */
#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS 30000
#define PROGRESS_LOG_MS 30000                 /* a progress line at most this often while changes flow */
#define LARGE_TXN_BYTES (64 * 1024 * 1024)    /* held transactions this large are logged as delivered */
#define PUBLISH_MS 1000                       /* the status socket's figures are this fresh */
#define HEALTH_MS 5000                        /* pg_replication_slots is asked this often */
#define SAFE_WAL_LOW_PERCENT 20 /* warn when less than this share of max_slot_wal_keep_size is left */

typedef struct sidecar {
	cfg *cfg;
	const char *cfg_path;
	uint64_t endpos;
	int exit_code;

	struct event_base *base;
	struct event *ev_read, *ev_write, *ev_tick, *ev_retry, *ev_sig[3], *ev_kafka;

	source *src;
	state st;      /* st.flushed_lsn: recorded in state_dir, may be sent */
	char spill_dir[4096];
	int lock_fd;
	pgo_relcache *rc;
	txn_assembler *asm_; /* per connection: it depends on the negotiated protocol */
	txn_handler handler;
	source_handler source_handler;
	rules *rules;
	cfg_overlay *overlay; /* subscriptions changed over the status socket (state_dir) */
	/* PUT and DELETE requests waiting for the next transaction boundary, in arrival order; puts
	 * hold their parsed subscription */
	struct live_change {
		status_request *req;
		cfg_subscription *put; /* NULL: delete */
	} *changes;
	size_t nchanges;
	status_server *status;
	struct sub_count {
		uint64_t events, bytes;
	} *matched; /* per subscription (parallel to cfg->subs): events handed to its sink, rendered bytes */
	sink_set sinks;
	arena *arena;
	buf scratch; /* one rendered event of a plain transaction */
	progress prog;

	bool streaming, reload_pending, reply_requested;
	bool paused; /* a sink is busy: the slot is not read until it catches up */
	bool past_endpos; /* a transaction committing after endpos arrived: deliver nothing more */
	uint64_t backoff_ms;
	uint64_t seq, cur_seq; /* transactions numbered in commit order */
	uint32_t tx_index;
	uint64_t received_lsn, flushed_lsn, sent_flush_lsn;
	/* Where the last transaction processed ended (or the idle server's position): a change of the
	 * subscriptions applies to every transaction committing at or after it. */
	uint64_t boundary_lsn;
	uint64_t last_feedback_ms, last_data_ms, last_heartbeat_ms;
	bool got_data; /* XLogData in the current drain: last_data_ms is set once per drain */
	/* progress: totals, and what the last progress line reported */
	uint64_t events, logged_events, logged_seq, last_progress_ms, large_txn_start_ms;
	/* status: figures no other part keeps */
	uint64_t start_ms, last_publish_ms, server_wal_lsn, reconnects, errors_stream, errors_connect;
	int64_t last_commit_time;
	char server_version[32];
	bool heartbeat_warned;
	uint64_t last_health_ms;
	source_slot_health health;
	char slot_warning[256]; /* why the slot is in danger of losing WAL; "" when it is not */
	char err[1024];
} sidecar;

static void fail(sidecar *d, int code, const char *what)
{
	log_error(what, "error=\"%s\"", d->err);
	d->exit_code = code;
	event_base_loopbreak(d->base);
}

/* The assembler exists only while connected; between connections nothing is held. */
static bool in_txn(const sidecar *d)
{
	return d->asm_ && txn_in_progress(d->asm_);
}

static uint64_t oldest_prepared(const sidecar *d)
{
	return d->asm_ ? txn_oldest_prepared(d->asm_) : 0;
}

/* Delivery -------------------------------------------------------------------------------- */

/* Iterates k over the sink instances that exist. */
#define FOR_SINKS(d, k)                                                           \
	for (sink **k##_at = (d)->sinks.k, *k; k##_at < (d)->sinks.k + SINKS_N; k##_at++) \
		if ((k = *k##_at) != NULL)

/* A held change's record (see decoder/txn.h): [u32 slots: how many tx_index values the change
 * takes], then per rendered event [u32 subscription][u32 slot within the change][u32 length][bytes].
 * Events are rendered as they arrive; replay only adds the commit fields. */
#define HOLD_ENTRY 12

static void put_u32(char *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Hands ev to the sinks of the matching subscriptions: delivered now with commit fields c in a
 * plain transaction, rendered into the change's record in a held one. */
static bool emit(sidecar *d, Cdc__V1__Event *ev, const uint32_t *subs, size_t n, const sink_commit *c, uint32_t slot,
		 buf *hold, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (!rules_accept(d->rules, subs[i], ev, d->arena))
			continue;
		Cdc__V1__Event *e = rules_project(d->rules, subs[i], ev, d->arena);
		const cfg_subscription *s = &d->cfg->subs[subs[i]];
		e->subscription = s->name;
		e->tag_present_case = s->tag ? CDC__V1__EVENT__TAG_PRESENT_TAG : CDC__V1__EVENT__TAG_PRESENT__NOT_SET;
		e->tag = s->tag;
		sink *k = d->sinks.of_sub[subs[i]];
		if (hold) {
			size_t at = hold->len;
			buf_reserve(hold, HOLD_ENTRY);
			hold->len += HOLD_ENTRY;
			k->ops->render(k, subs[i], e, hold);
			put_u32(hold->data + at, subs[i]);
			put_u32(hold->data + at + 4, slot);
			put_u32(hold->data + at + 8, (uint32_t)(hold->len - at - HOLD_ENTRY));
			continue;
		}
		d->events++;
		buf_reset(&d->scratch);
		k->ops->render(k, subs[i], e, &d->scratch);
		d->matched[subs[i]].events++;
		d->matched[subs[i]].bytes += d->scratch.len;
		sink_commit at = *c;
		at.tx_index += slot;
		if (!k->ops->deliver(k, subs[i], d->scratch.data, d->scratch.len, &at, d->cur_seq, err, errlen))
			return false;
	}
	return true;
}

/* The fields known when the change arrives; the commit fields are the sinks' to add. */
static void stamp(Cdc__V1__Event *ev, const txn_info *t, pgo_lsn lsn)
{
	ev->lsn = lsn;
	ev->xid = t ? t->xid : 0;
	ev->origin = t && t->origin ? (char *)t->origin : "";
}

static const pgo_rel *relation(sidecar *d, const pgo_msg *m, uint32_t relid, char *err, size_t errlen)
{
	const pgo_rel *rel = pgo_relcache_get(d->rc, relid);
	if (!rel)
		errf(err, errlen, "%s for relation %u that no Relation message described", pgo_type_name(m->type), relid);
	return rel;
}

static const unsigned change_op[] = {[PGO_INSERT] = CFG_OP_INSERT, [PGO_UPDATE] = CFG_OP_UPDATE, [PGO_DELETE] = CFG_OP_DELETE};

/* One change: match it, build its event only if some subscription wants it, emit it. Sets *slots
 * to the number of tx_index values it takes (one per truncated relation; none for a heartbeat). */
static bool change_events(sidecar *d, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold, uint32_t *slots,
			  char *err, size_t errlen)
{
	const uint32_t *subs;
	size_t n;
	Cdc__V1__Event *ev;
	sink_commit c = {.commit_lsn = t ? t->commit_lsn : lsn, .commit_time = t ? t->commit_time : 0,
			 .tx_index = d->tx_index};
	bool ok = true;
	*slots = 1;
	switch (m->type) {
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE: {
		const pgo_rel *rel = relation(d, m, m->change.relid, err, errlen);
		if (!rel)
			return false;
		if ((n = rules_match(d->rules, rel, change_op[m->type], &subs)) == 0)
			break;
		if (!evt_from_change(d->arena, d->rc, rel, m, &ev, err, errlen))
			return false;
		stamp(ev, t, lsn);
		ok = emit(d, ev, subs, n, &c, 0, hold, err, errlen);
		break;
	}
	case PGO_TRUNCATE:
		*slots = m->truncate.nrels;
		for (uint32_t i = 0; i < m->truncate.nrels && ok; i++) {
			const pgo_rel *rel = relation(d, m, pgo_truncate_relid(m, i), err, errlen);
			if (!rel)
				return false;
			if ((n = rules_match(d->rules, rel, CFG_OP_TRUNCATE, &subs)) > 0) {
				ev = evt_from_truncate(d->arena, rel, m->truncate.flags);
				stamp(ev, t, lsn);
				ok = emit(d, ev, subs, n, &c, i, hold, err, errlen);
			}
		}
		break;
	case PGO_MESSAGE:
		if (strcmp(m->message.prefix, SOURCE_HEARTBEAT_PREFIX) == 0) {
			*slots = 0; /* not a change */
			break;
		}
		if ((n = rules_match(d->rules, NULL, CFG_OP_MESSAGE, &subs)) == 0)
			break;
		ev = evt_from_message(d->arena, m);
		stamp(ev, t, lsn);
		ok = emit(d, ev, subs, n, &c, 0, hold, err, errlen);
		break;
	default:
		return errf(err, errlen, "unexpected %s message inside a transaction", pgo_type_name(m->type));
	}
	arena_reset(d->arena);
	return ok;
}

static void end_txn(sidecar *d, uint64_t end_lsn)
{
	progress_push(&d->prog, d->cur_seq, end_lsn);
	if (end_lsn > d->boundary_lsn)
		d->boundary_lsn = end_lsn;
	FOR_SINKS(d, k)
		k->ops->end_txn(k, d->cur_seq);
}

/* Like pg_recvlogical --endpos: a transaction that commits after endpos is not delivered. */
static bool beyond_endpos(sidecar *d, uint64_t commit_lsn)
{
	if (d->endpos && commit_lsn > d->endpos)
		d->past_endpos = true;
	return d->past_endpos;
}

static bool on_begin(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	sidecar *d = ctx;
	if (t && beyond_endpos(d, t->commit_lsn))
		return true;
	d->cur_seq = ++d->seq;
	d->tx_index = 0;
	if (t && t->held_bytes >= LARGE_TXN_BYTES) {
		d->large_txn_start_ms = now_ms();
		log_info("delivering a large transaction held until its commit", "xid=%u spilled_mib=%llu", t->xid,
			 (unsigned long long)(t->held_bytes >> 20));
	}
	return true;
}

static bool on_change(void *ctx, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold, char *err,
		      size_t errlen)
{
	sidecar *d = ctx;
	uint32_t slots;
	if (!hold && beyond_endpos(d, t ? t->commit_lsn : lsn))
		return true;
	if (hold) {
		buf_reserve(hold, 4);
		hold->len = 4;
		if (!change_events(d, t, m, lsn, hold, &slots, err, errlen))
			return false;
		put_u32(hold->data, slots);
		return true;
	}
	if (t) {
		if (!change_events(d, t, m, lsn, NULL, &slots, err, errlen))
			return false;
		d->tx_index += slots;
		return true;
	}
	/* A non-transactional message is a transaction of its own, positioned at its LSN. */
	on_begin(ctx, NULL, err, errlen);
	if (!change_events(d, NULL, m, lsn, NULL, &slots, err, errlen))
		return false;
	end_txn(d, lsn);
	return true;
}

/* Delivers the events rendered into a held change's record, now with their commit fields. */
static bool on_replay(void *ctx, const txn_info *t, const uint8_t *rec, size_t len, char *err, size_t errlen)
{
	sidecar *d = ctx;
	if (d->past_endpos)
		return true;
	if (len < 4)
		return errf(err, errlen, "spill record of transaction %u: %zu bytes", t->xid, len);
	sink_commit c = {.commit_lsn = t->commit_lsn, .commit_time = t->commit_time};
	for (size_t pos = 4; pos < len;) {
		if (len - pos < HOLD_ENTRY || get_u32(rec + pos) >= d->cfg->nsubs ||
		    get_u32(rec + pos + 8) > len - pos - HOLD_ENTRY)
			return errf(err, errlen, "spill record of transaction %u is corrupt at byte %zu", t->xid, pos);
		uint32_t sub = get_u32(rec + pos), n = get_u32(rec + pos + 8);
		c.tx_index = d->tx_index + get_u32(rec + pos + 4);
		sink *k = d->sinks.of_sub[sub];
		d->events++;
		d->matched[sub].events++;
		d->matched[sub].bytes += n;
		if (!k->ops->deliver(k, sub, (const char *)rec + pos + HOLD_ENTRY, n, &c, d->cur_seq, err, errlen))
			return false;
		pos += HOLD_ENTRY + n;
	}
	d->tx_index += get_u32(rec);
	return true;
}

static bool apply_reload(sidecar *d);

/* A reload applies between transactions, and not while a streamed or prepared transaction is held:
 * its records were rendered for the subscriptions in force when its changes arrived. */
static void maybe_reload(sidecar *d)
{
	if (!d->reload_pending || in_txn(d))
		return;
	if (d->asm_) {
		txn_stats st = txn_get_stats(d->asm_);
		if (st.streamed_open + st.prepared_open)
			return;
	}
	apply_reload(d);
}

static bool on_commit(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	sidecar *d = ctx;
	if (d->past_endpos)
		return true;
	end_txn(d, t->end_lsn);
	d->last_commit_time = t->commit_time;
	if (t->held_bytes >= LARGE_TXN_BYTES)
		log_info("delivered the large transaction", "xid=%u in_ms=%llu", t->xid,
			 (unsigned long long)(now_ms() - d->large_txn_start_ms));
	maybe_reload(d);
	return true;
}

static const txn_handler txn_callbacks = {
	.begin = on_begin, .change = on_change, .replay = on_replay, .commit = on_commit};

/* Progress and feedback ----------------------------------------------------------------- */

static uint64_t sinks_delivered(sidecar *d)
{
	uint64_t delivered = d->seq;
	FOR_SINKS(d, k)
		if (k->ops->delivered(k) < delivered)
			delivered = k->ops->delivered(k);
	return delivered;
}

/* Moves flushed_lsn as far as every sink has delivered, but never past a held prepared
 * transaction (the server would not send its changes again). */
static void advance(sidecar *d)
{
	uint64_t lsn = progress_advance(&d->prog, sinks_delivered(d));
	uint64_t prepared = oldest_prepared(d);
	if (prepared && lsn > prepared)
		lsn = prepared;
	if (lsn > d->flushed_lsn)
		d->flushed_lsn = lsn;
}

static bool send_feedback(sidecar *d, bool force)
{
	uint64_t now = now_ms();
	bool moved = d->flushed_lsn != d->sent_flush_lsn;
	if (!force && !(moved && now - d->last_feedback_ms >= FEEDBACK_MIN_MS) &&
	    now - d->last_feedback_ms < d->cfg->source.status_interval_ms)
		return true;
	if (d->flushed_lsn > d->st.flushed_lsn) {
		state next = d->st;
		next.flushed_lsn = d->flushed_lsn;
		if (!state_write(d->cfg->state_dir, &next, d->err, sizeof(d->err))) {
			fail(d, 1, "cannot record the position in state_dir; stopping so nothing is confirmed unrecorded");
			return false;
		}
		d->st = next;
	}
	source_result r = source_send_status(d->src, d->received_lsn, d->flushed_lsn, false, d->err, sizeof(d->err));
	if (r != SOURCE_OK)
		return false;
	d->sent_flush_lsn = d->flushed_lsn;
	d->last_feedback_ms = now;
	if (source_output_pending(d->src))
		event_add(d->ev_write, NULL);
	return true;
}

static bool at_endpos(const sidecar *d)
{
	return d->endpos && (d->flushed_lsn >= d->endpos || d->past_endpos);
}

/* Source callbacks ---------------------------------------------------------------------- */

static bool on_xlogdata(void *ctx, const uint8_t *data, size_t len, uint64_t lsn, char *err, size_t errlen)
{
	sidecar *d = ctx;
	if (lsn > d->received_lsn)
		d->received_lsn = lsn;
	d->got_data = true;
	if (d->past_endpos)
		return true;
	if (txn_feed(d->asm_, data, len, lsn, err, errlen))
		return true;
	char at[LSN_STRLEN];
	lsn_format(lsn, at);
	size_t used = strlen(err);
	snprintf(err + used, errlen - used, " (WAL position %s)", at);
	return false;
}

static bool on_keepalive(void *ctx, uint64_t wal_end, bool reply, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	sidecar *d = ctx;
	if (wal_end > d->received_lsn)
		d->received_lsn = wal_end;
	if (wal_end > d->server_wal_lsn)
		d->server_wal_lsn = wal_end;
	if (!in_txn(d) && wal_end > d->boundary_lsn)
		d->boundary_lsn = wal_end;
	advance(d);
	/* Nothing in flight anywhere: everything up to wal_end is delivered, so an idle slot (or one
	 * whose WAL is all other databases' or unpublished tables') never pins WAL. */
	if (!in_txn(d) && progress_pending(&d->prog) == 0 && !oldest_prepared(d) &&
	    sinks_delivered(d) == d->seq && wal_end > d->flushed_lsn)
		d->flushed_lsn = wal_end;
	/* Answered right after this drain, in the same wakeup. */
	d->reply_requested |= reply;
	return true;
}

static const source_handler source_callbacks = {.xlogdata = on_xlogdata, .keepalive = on_keepalive};

/* Connection lifecycle ------------------------------------------------------------------ */

static void schedule_retry(sidecar *d)
{
	if (d->ev_read) {
		event_free(d->ev_read);
		d->ev_read = NULL;
	}
	event_del(d->ev_write);
	d->streaming = false;
	d->paused = false;
	source_disconnect(d->src);
	d->backoff_ms = d->backoff_ms ? d->backoff_ms * 2 : BACKOFF_FIRST_MS;
	if (d->backoff_ms > BACKOFF_MAX_MS)
		d->backoff_ms = BACKOFF_MAX_MS;
	/* Jitter keeps a fleet of sidecars from reconnecting in step. */
	uint64_t delay = d->backoff_ms / 2 + (uint64_t)rand() % (d->backoff_ms / 2 + 1);
	log_warn("not streaming; retrying", "in_ms=%llu error=\"%s\"", (unsigned long long)delay, d->err);
	struct timeval tv = {.tv_sec = (time_t)(delay / 1000), .tv_usec = (suseconds_t)(delay % 1000) * 1000};
	event_add(d->ev_retry, &tv);
}

/* A sink lost messages in flight: forget everything not confirmed yet, give the sink a fresh
 * client and stream again from the slot's confirmed position, which the server resends from. */
static bool restart_from_slot(sidecar *d, sink *k)
{
	log_warn("a sink failed; it restarts and streaming resumes from the slot's confirmed position",
		 "sink=%s error=\"%s\"", k->ops->name, d->err);
	progress_clear(&d->prog);
	if (!k->ops->restart || !k->ops->restart(k, d->err, sizeof(d->err))) {
		fail(d, 1, "the sink cannot restart");
		return false;
	}
	if (d->streaming)
		schedule_retry(d);
	return false;
}

/* Pushes out what sinks buffered and moves the flushed position; false when streaming stops. */
static bool flush_sinks(sidecar *d)
{
	FOR_SINKS(d, k) {
		switch (k->ops->flush(k, d->err, sizeof(d->err))) {
		case SINK_OK:
			break;
		case SINK_RESTART:
			return restart_from_slot(d, k);
		case SINK_FATAL:
			fail(d, 1, "sink failed");
			return false;
		}
	}
	advance(d);
	return true;
}

static bool sinks_busy(sidecar *d)
{
	FOR_SINKS(d, k)
		if (k->ops->busy && k->ops->busy(k))
			return true;
	return false;
}

/* Stops reading the slot while a sink is busy (memory stays bounded by the sink's queue); the
 * sink's delivery reports resume it. Status updates go on from the timer meanwhile. */
static void pause_or_resume(sidecar *d)
{
	if (!d->ev_read)
		return;
	bool busy = sinks_busy(d);
	char received[LSN_STRLEN];
	lsn_format(d->received_lsn, received);
	if (busy && !d->paused) {
		event_del(d->ev_read);
		log_info("paused reading the slot: a sink is busy", "received_lsn=%s", received);
	} else if (!busy && d->paused) {
		event_add(d->ev_read, NULL);
		event_active(d->ev_read, EV_READ, 0);
		log_info("resumed reading the slot", "received_lsn=%s", received);
	}
	d->paused = busy;
}

/* Status update (a lost connection is retried); false when streaming stopped. */
static bool feedback(sidecar *d, bool force)
{
	if (send_feedback(d, force))
		return true;
	if (!d->exit_code)
		schedule_retry(d);
	return false;
}

/* After input from the slot or a sink: report progress, pause or resume reading, stop at endpos. */
static void progressed(sidecar *d, bool force)
{
	if (!feedback(d, force))
		return;
	pause_or_resume(d);
	if (at_endpos(d))
		event_base_loopbreak(d->base);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	d->got_data = false;
	source_result r = source_read(d->src, &d->source_handler, d->err, sizeof(d->err));
	if (d->got_data)
		d->last_data_ms = now_ms();
	if (r == SOURCE_FATAL) {
		fail(d, 1, "cannot process the replication stream");
		return;
	}
	if (!flush_sinks(d))
		return;
	if (r == SOURCE_RETRY) {
		d->errors_stream++;
		schedule_retry(d);
		return;
	}
	bool reply = d->reply_requested;
	d->reply_requested = false;
	d->backoff_ms = 0;
	progressed(d, reply);
}

/* Delivery reports of an asynchronous sink. */
static void on_sink_event(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	d->sinks.k[SINKS_KAFKA]->ops->poll(d->sinks.k[SINKS_KAFKA]);
	if (flush_sinks(d) && d->streaming)
		progressed(d, false);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	if (source_output_pending(d->src))
		event_add(d->ev_write, NULL);
}

static void publish(sidecar *d, bool force);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	bool have_st = false;
	state st;
	if (!state_read(d->cfg->state_dir, &st, &have_st, d->err, sizeof(d->err))) {
		fail(d, 1, "cannot read the recorded position");
		return;
	}
	source_result r = source_start(d->src, &st, have_st, d->rc, d->err, sizeof(d->err));
	if (r == SOURCE_FATAL) {
		fail(d, 1, "cannot stream from the replication slot");
		return;
	}
	if (r == SOURCE_RETRY) {
		d->errors_connect++;
		schedule_retry(d);
		return;
	}
	if (!have_st && !state_write(d->cfg->state_dir, &st, d->err, sizeof(d->err))) {
		fail(d, 1, "cannot record the position in state_dir");
		return;
	}
	txn_free(d->asm_);
	if (!(d->asm_ = txn_new(d->spill_dir, source_protocol(d->src), d->rc, &d->handler, d->err, sizeof(d->err)))) {
		fail(d, 1, "cannot set up transaction spill files");
		return;
	}
	d->st = st;
	d->flushed_lsn = d->sent_flush_lsn = d->received_lsn = st.flushed_lsn;
	if (st.flushed_lsn > d->boundary_lsn)
		d->boundary_lsn = st.flushed_lsn;
	progress_clear(&d->prog);
	d->reconnects += d->last_progress_ms != 0;
	snprintf(d->server_version, sizeof(d->server_version), "%d.%d", source_server_version(d->src) / 10000,
		 source_server_version(d->src) % 10000);
	d->streaming = true;
	if (!d->last_progress_ms)
		d->last_progress_ms = now_ms();
	publish(d, true); /* /readyz turns 200 now, not at the next tick */
	int sock = source_fd(d->src);
	d->ev_read = event_new(d->base, sock, EV_READ | EV_PERSIST, on_read, d);
	event_free(d->ev_write);
	d->ev_write = event_new(d->base, sock, EV_WRITE, on_write, d);
	event_add(d->ev_read, NULL);
	/* libpq may already hold data read during the handshake. */
	event_active(d->ev_read, EV_READ, 0);
}

/* The Kafka sink's counters and its commit-to-delivery latency since the start. */
static void log_kafka(sidecar *d)
{
	if (!d->sinks.k[SINKS_KAFKA])
		return;
	const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
	log_info("kafka", "in_flight=%llu delivered=%llu errors=%llu restarts=%llu latency_p50_ms=%.2f latency_p99_ms=%.2f latency_max_ms=%.2f",
		 (unsigned long long)k->in_flight, (unsigned long long)k->delivered, (unsigned long long)k->errors,
		 (unsigned long long)k->restarts, (double)hist_quantile(&k->latency, 0.5) / 1000,
		 (double)hist_quantile(&k->latency, 0.99) / 1000, (double)k->latency.max / 1000);
}

/* While changes flow, one line every PROGRESS_LOG_MS says how far cdc got. */
static void log_progress(sidecar *d, uint64_t now)
{
	if (d->seq == d->logged_seq || now - d->last_progress_ms < PROGRESS_LOG_MS)
		return;
	char received[LSN_STRLEN], flushed[LSN_STRLEN];
	lsn_format(d->received_lsn, received);
	lsn_format(d->flushed_lsn, flushed);
	txn_stats st = d->asm_ ? txn_get_stats(d->asm_) : (txn_stats){0};
	double secs = d->last_progress_ms ? (double)(now - d->last_progress_ms) / 1000 : 0;
	log_info("progress",
		 "received_lsn=%s flushed_lsn=%s transactions=%llu events=%llu events_per_s=%.0f held=%llu "
		 "spilled_mib=%llu aborted_held=%llu",
		 received, flushed, (unsigned long long)(d->seq - d->logged_seq),
		 (unsigned long long)(d->events - d->logged_events),
		 secs > 0 ? (double)(d->events - d->logged_events) / secs : 0.0,
		 (unsigned long long)(st.streamed_open + st.prepared_open), (unsigned long long)(st.spilled_bytes >> 20),
		 (unsigned long long)st.aborted);
	d->logged_seq = d->seq;
	d->logged_events = d->events;
	d->last_progress_ms = now;
	log_kafka(d);
}

/* Status socket ------------------------------------------------------------------------- */

static const char *sink_name(cfg_sink k)
{
	return k == CFG_SINK_SOCKET ? "socket" : k == CFG_SINK_KAFKA ? "kafka" : "stdout";
}

/* Why /readyz says 503, or NULL when streaming with every sink able to take changes. */
static const char *not_ready(const sidecar *d)
{
	if (!d->streaming)
		return d->last_progress_ms ? "not streaming from the slot (reconnecting)" : "starting";
	if (d->paused)
		return "paused: a sink is busy or a spool is full (when_full: block)";
	if (d->sinks.k[SINKS_KAFKA]) {
		const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
		if (k->brokers_down && k->in_flight)
			return "kafka: every broker is down; messages wait in flight";
	}
	return NULL;
}

/* Renders the figures for the status socket: every PUBLISH_MS, or now with force. */
static void publish(sidecar *d, bool force)
{
	uint64_t now = now_ms();
	if (!d->status || (!force && now - d->last_publish_ms < PUBLISH_MS))
		return;
	d->last_publish_ms = now;
	report_sub *subs = xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*subs));
	for (size_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *c = &d->cfg->subs[i];
		subs[i] = (report_sub){.name = c->name, .sink = sink_name(c->sink), .matched = d->matched[i].events,
				       .delivered = d->matched[i].events, .bytes = d->matched[i].bytes};
	}
	socket_sub_stats st;
	for (uint32_t i = 0; d->sinks.k[SINKS_SOCKET] && i < d->cfg->nsubs; i++) {
		if (!socket_sink_stats(d->sinks.k[SINKS_SOCKET], i, &st))
			continue;
		report_sub *r = &subs[i];
		r->delivered = st.delivered;
		r->has_offsets = true;
		r->head_offset = st.head_offset;
		r->acked_offset = st.acked_offset;
		r->first_offset = st.first_offset;
		r->consumers = st.consumers;
		r->dead = st.dead;
		r->dropped = st.dropped;
		r->redelivered = st.redelivered;
		r->spool_bytes = st.spool_bytes;
		r->full = st.full;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t wall_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	const char *why = not_ready(d);
	report r = {
		.version = CDC_VERSION,
		.uptime_s = (double)(now - d->start_ms) / 1000,
		.ready = !why,
		.reason = why,
		.source = {.connected = d->streaming, .slot = d->cfg->source.slot,
			   .publication = d->cfg->source.publication,
			   .server_version = d->server_version[0] ? d->server_version : NULL,
			   .received_lsn = d->received_lsn, .flushed_lsn = d->flushed_lsn,
			   .server_wal_lsn = d->server_wal_lsn, .last_commit_time_us = d->last_commit_time,
			   .lag_s = !d->last_commit_time ? -1 :
				    d->flushed_lsn >= d->server_wal_lsn ? 0 :
				    (double)(wall_us - d->last_commit_time) / 1e6,
			   .reconnects = d->reconnects, .transactions = d->seq, .events = d->events,
			   .errors_stream = d->errors_stream, .errors_connect = d->errors_connect,
			   .wal_status = d->health.known ? d->health.wal_status : NULL,
			   .safe_wal_size_known = d->health.known && d->health.safe_wal_size_known,
			   .safe_wal_size = d->health.safe_wal_size},
		.subs = subs,
		.nsubs = d->cfg->nsubs,
		.has_kafka = d->sinks.k[SINKS_KAFKA] != NULL,
		.socket_latency = d->sinks.k[SINKS_SOCKET] ? socket_sink_latency(d->sinks.k[SINKS_SOCKET]) : NULL,
	};
	const char *warnings[] = {d->slot_warning};
	if (d->slot_warning[0]) {
		r.warnings = warnings;
		r.nwarnings = 1;
	}
	if (d->sinks.k[SINKS_KAFKA]) {
		const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
		r.kafka.in_flight = k->in_flight;
		r.kafka.delivered = k->delivered;
		r.kafka.errors = k->errors;
		r.kafka.restarts = k->restarts;
		r.kafka.latency = &k->latency;
	}
	buf status = {0}, metrics = {0}, list = {0};
	report_status_json(&r, &status);
	report_metrics(&r, &metrics);
	report_subscriptions_json(d->cfg, &list);
	status_publish(d->status, status.data, metrics.data, list.data, !why, why ? why : "");
	buf_free(&status);
	buf_free(&metrics);
	buf_free(&list);
	free(subs);
}

static void answer_error(sidecar *d, status_request *req, unsigned code, const char *error, const char *details)
{
	buf b = {0};
	buf_puts(&b, "{\"error\":");
	json_string(&b, error, strlen(error));
	if (details) {
		buf_puts(&b, ",\"details\":[");
		for (const char *line = details; *line;) {
			const char *nl = strchr(line, '\n');
			size_t n = nl ? (size_t)(nl - line) : strlen(line);
			if (line != details)
				buf_putc(&b, ',');
			json_string(&b, line, n);
			line += n + (nl != NULL);
		}
		buf_putc(&b, ']');
	}
	buf_puts(&b, "}\n");
	status_answer(d->status, req, code, b.data);
	buf_free(&b);
}

static bool pending_put(const sidecar *d, const char *name)
{
	bool put = false;
	for (size_t i = 0; i < d->nchanges; i++)
		if (strcmp(d->changes[i].req->name, name) == 0)
			put = d->changes[i].put != NULL;
	return put;
}

/* PUT and DELETE /subscriptions/NAME: checked now, applied at the next transaction boundary. */
static void on_control(void *ctx, status_request *req)
{
	sidecar *d = ctx;
	cfg_subscription *put = NULL;
	if (req->put) {
		buf errors = {0};
		if (!(put = cfg_parse_subscription(d->cfg, req->name, req->body, req->body_len, &errors))) {
			answer_error(d, req, 400, "invalid subscription", errors.data);
			buf_free(&errors);
			return;
		}
		buf_free(&errors);
	} else if (!cfg_find_subscription(d->cfg, req->name) && !pending_put(d, req->name)) {
		answer_error(d, req, 404, "no such subscription", NULL);
		return;
	}
	d->changes = xrealloc(d->changes, (d->nchanges + 1) * sizeof(*d->changes));
	d->changes[d->nchanges++] = (struct live_change){req, put};
	d->reload_pending = true;
	maybe_reload(d);
}

/* The slot's wal_status and safe_wal_size: a warning in the log (once) and in /status while the
 * slot is in danger of losing the WAL it needs (max_slot_wal_keep_size). */
static void check_slot_health(sidecar *d)
{
	char err[512], warning[sizeof(d->slot_warning)] = "";
	if (!source_poll_slot_health(d->src, &d->health, err, sizeof(err))) {
		log_debug("cannot read the slot's health", "error=\"%s\"", err);
		return;
	}
	const source_slot_health *h = &d->health;
	if (!h->known)
		return;
	if (strcmp(h->wal_status, "lost") == 0)
		snprintf(warning, sizeof(warning),
			 "the slot lost WAL it needs (wal_status lost): drop and recreate it, then resynchronise consumers");
	else if (strcmp(h->wal_status, "unreserved") == 0)
		snprintf(warning, sizeof(warning),
			 "the slot's WAL is no longer reserved (wal_status unreserved): it is lost at the next checkpoint "
			 "unless cdc catches up");
	else if (h->safe_wal_size_known && h->max_keep_size > 0 &&
		 h->safe_wal_size < h->max_keep_size / 100 * SAFE_WAL_LOW_PERCENT)
		snprintf(warning, sizeof(warning),
			 "safe_wal_size is low: %" PRId64 " of max_slot_wal_keep_size %" PRId64
			 " bytes left before the slot loses WAL; find what holds cdc back (a full spool, a Kafka outage)",
			 h->safe_wal_size, h->max_keep_size);
	if (warning[0] && !d->slot_warning[0])
		log_warn("the replication slot is in danger", "slot=%s wal_status=%s warning=\"%s\"", d->cfg->source.slot,
			 h->wal_status, warning);
	else if (!warning[0] && d->slot_warning[0])
		log_info("the replication slot is out of danger", "slot=%s wal_status=%s", d->cfg->source.slot,
			 h->wal_status);
	memcpy(d->slot_warning, warning, sizeof(warning));
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sidecar *d = arg;
	maybe_reload(d);
	publish(d, false);
	if (!d->streaming || !feedback(d, false))
		return;
	uint64_t hb = d->cfg->source.heartbeat_ms, now = now_ms();
	log_progress(d, now);
	if (now - d->last_health_ms >= HEALTH_MS) {
		d->last_health_ms = now;
		check_slot_health(d);
	}
	if (hb && now - d->last_data_ms >= hb && now - d->last_heartbeat_ms >= hb) {
		d->last_heartbeat_ms = now;
		char err[512];
		if (!source_heartbeat(d->src, err, sizeof(err))) {
			if (!d->heartbeat_warned)
				log_warn("heartbeat failed", "error=\"%s\"", err);
			d->heartbeat_warned = true;
		} else {
			d->heartbeat_warned = false;
		}
	}
}

/* Configuration ------------------------------------------------------------------------- */

static void on_sink_event(evutil_socket_t fd, short what, void *arg);

/* Consumers made room in a spool that was full: reading the slot may resume. */
static void on_consumers_acked(void *ctx)
{
	sidecar *d = ctx;
	if (d->paused)
		pause_or_resume(d);
}

/* Points each subscription at its sink, creating sinks on first use. The counts of subscriptions
 * that were in old (NULL at the start) carry over. */
static bool bind_sinks(sidecar *d, const cfg *old)
{
	struct sub_count *matched = xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*matched));
	for (size_t i = 0; old && i < d->cfg->nsubs; i++) {
		const cfg_subscription *was = cfg_find_subscription(old, d->cfg->subs[i].name);
		if (was)
			matched[i] = d->matched[was - old->subs];
	}
	free(d->matched);
	d->matched = matched;
	if (!sink_set_bind(&d->sinks, d->cfg, d->err, sizeof(d->err)))
		return false;
	if (d->sinks.k[SINKS_KAFKA] && !d->ev_kafka) {
		d->ev_kafka = event_new(d->base, d->sinks.k[SINKS_KAFKA]->ops->fd(d->sinks.k[SINKS_KAFKA]),
					EV_READ | EV_PERSIST, on_sink_event, d);
		event_add(d->ev_kafka, NULL);
	}
	return true;
}

/* Whether two configurations give the Kafka producer the same settings. */
static bool same_kafka(const cfg *a, const cfg *b)
{
	if (a->kafka.enabled != b->kafka.enabled || a->kafka.nproperties != b->kafka.nproperties ||
	    (a->kafka.enabled && strcmp(a->kafka.brokers, b->kafka.brokers)))
		return false;
	for (size_t i = 0; i < a->kafka.nproperties; i++)
		if (strcmp(a->kafka.properties[i].key, b->kafka.properties[i].key) ||
		    strcmp(a->kafka.properties[i].value, b->kafka.properties[i].value))
			return false;
	return true;
}

/* The configuration file with the subscriptions of ov laid over it, and its rules. NULL with the
 * problems in errors and the HTTP status a change waiting for it gets: 500 when the file itself is
 * broken, 400 when the subscriptions are. */
static cfg *load_config(sidecar *d, const cfg_overlay *ov, rules **r, buf *errors, unsigned *code)
{
	cfg *next = cfg_load(d->cfg_path, errors);
	*code = 500;
	if (!next)
		return NULL;
	*code = 400;
	if (cfg_overlay_apply(ov, next, errors) &&
	    (*r = rules_new(next->subs, next->nsubs, d->err, sizeof(d->err))))
		return next;
	if (!errors->len)
		buf_printf(errors, "%s\n", d->err);
	cfg_free(next);
	return NULL;
}

/* Answers the changes that waited for the reload: 200 with the LSN they apply from, or the error. */
static void settle_changes(sidecar *d, unsigned code, const char *error, const char *details)
{
	char lsn[LSN_STRLEN];
	lsn_format(d->boundary_lsn, lsn);
	for (size_t i = 0; i < d->nchanges; i++) {
		status_request *req = d->changes[i].req;
		cfg_subscription_free(d->changes[i].put);
		if (code != 200) {
			answer_error(d, req, code, error, details);
			continue;
		}
		log_info(req->put ? "subscription changed" : "subscription removed", "subscription=%s applied_lsn=%s",
			 req->name, lsn);
		buf b = {0};
		buf_puts(&b, "{\"subscription\":");
		json_string(&b, req->name, strlen(req->name));
		buf_printf(&b, ",\"action\":\"%s\",\"applied_lsn\":\"%s\"", req->put ? "put" : "delete", lsn);
		const cfg_subscription *now = cfg_find_subscription(d->cfg, req->name);
		if (req->put && now) {
			buf_puts(&b, ",\"config\":");
			report_subscription_json(now, &b);
		}
		buf_puts(&b, "}\n");
		status_answer(d->status, req, 200, b.data);
		buf_free(&b);
	}
	free(d->changes);
	d->changes = NULL;
	d->nchanges = 0;
}

/* SIGHUP, PUT and DELETE: the file is read again and the overlay (with the changes waiting) laid
 * over it; subscriptions are swapped at a transaction boundary; source settings need a restart. */
static bool apply_reload(sidecar *d)
{
	d->reload_pending = false;
	cfg_overlay *ov = cfg_overlay_copy(d->overlay);
	for (size_t i = 0; i < d->nchanges; i++) {
		if (d->changes[i].put) {
			cfg_overlay_put(ov, d->changes[i].put);
			d->changes[i].put = NULL;
		} else {
			cfg_overlay_delete(ov, d->changes[i].req->name);
		}
	}
	buf errors = {0};
	rules *r = NULL;
	unsigned code;
	cfg *next = load_config(d, ov, &r, &errors, &code);
	if (next && d->nchanges && !cfg_overlay_save(ov, d->cfg->state_dir, d->err, sizeof(d->err))) {
		buf_printf(&errors, "%s\n", d->err);
		code = 500;
		rules_free(r);
		cfg_free(next);
		next = NULL;
	}
	if (!next) {
		log_error("reload refused; keeping the running configuration", "errors=\"%s\"", errors.data);
		settle_changes(d, code,
			       code == 500 ? "cannot apply: the configuration file or state_dir has a problem; fix it and retry"
					   : "invalid subscription",
			       errors.data);
		buf_free(&errors);
		cfg_overlay_free(ov);
		return false;
	}
	buf_free(&errors);
	if (strcmp(next->source.dsn, d->cfg->source.dsn) || strcmp(next->source.slot, d->cfg->source.slot) ||
	    strcmp(next->source.publication, d->cfg->source.publication) || strcmp(next->state_dir, d->cfg->state_dir))
		log_warn("source and state_dir changes take effect at the next restart", "config=%s", d->cfg_path);
	if (d->sinks.k[SINKS_KAFKA] && !same_kafka(next, d->cfg))
		log_warn("kafka brokers and properties take effect at the next restart", "config=%s", d->cfg_path);
	rules_free(d->rules);
	d->rules = r;
	cfg_overlay_free(d->overlay);
	d->overlay = ov;
	cfg *old = d->cfg;
	d->cfg = next;
	if (!bind_sinks(d, old)) {
		cfg_free(old);
		settle_changes(d, 500, "cannot start a sink the new configuration needs", d->err);
		fail(d, 1, "cannot start a sink the new configuration needs");
		return false;
	}
	/* A deleted socket subscription's spool goes with it. */
	for (size_t i = 0; i < d->nchanges; i++) {
		const char *name = d->changes[i].req->name;
		if (!d->changes[i].req->put && d->sinks.k[SINKS_SOCKET] && !cfg_find_subscription(d->cfg, name) &&
		    !socket_sink_forget(d->sinks.k[SINKS_SOCKET], name, d->err, sizeof(d->err)))
			log_warn("cannot remove the spool of a deleted subscription", "subscription=%s error=\"%s\"", name,
				 d->err);
	}
	cfg_free(old);
	publish(d, true); /* GET answers with the new subscriptions before the change is answered */
	settle_changes(d, 200, NULL, NULL);
	log_info("reloaded subscriptions", "subscriptions=%zu", d->cfg->nsubs);
	return true;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	sidecar *d = arg;
	if (sig == SIGHUP) {
		d->reload_pending = true;
		maybe_reload(d);
		if (d->reload_pending)
			log_info("reload waits for the transactions in progress", "config=%s", d->cfg_path);
		return;
	}
	log_info("stopping", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	event_base_loopbreak(d->base);
}

/* Setup and teardown -------------------------------------------------------------------- */

#define FINISH_TIMEOUT_MS 30000 /* how long a stop waits for messages in flight */

static void shutdown_flush(sidecar *d)
{
	if (d->exit_code || !flush_sinks(d))
		return;
	FOR_SINKS(d, k)
		if (k->ops->finish && !k->ops->finish(k, FINISH_TIMEOUT_MS))
			log_warn("stopping with messages in flight: they are delivered again after the restart",
				 "sink=%s", k->ops->name);
	if (!flush_sinks(d))
		return;
	char lsn[LSN_STRLEN];
	if (d->streaming && send_feedback(d, true)) {
		/* Let the final status update reach the server before the connection closes. */
		while (source_output_pending(d->src))
			usleep(1000);
	}
	lsn_format(d->st.flushed_lsn, lsn);
	log_kafka(d);
	log_info("stopped", "flushed_lsn=%s", lsn);
}

int daemon_run(cfg *c, const char *cfg_path, uint64_t endpos)
{
	sidecar d = {.cfg = c, .cfg_path = cfg_path, .endpos = endpos, .lock_fd = -1};
	log_setup(c->log.level, c->log.format);
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	if ((d.lock_fd = state_lock(c->state_dir, d.err, sizeof(d.err))) < 0) {
		d.exit_code = 1;
		log_error("cannot use state_dir", "error=\"%s\"", d.err);
		goto out;
	}
	buf errors = {0};
	if (!(d.overlay = cfg_overlay_load(c->state_dir, &errors)) || !cfg_overlay_apply(d.overlay, c, &errors)) {
		d.exit_code = 2;
		log_error("the subscriptions changed over the status socket cannot be used", "errors=\"%s\"",
			  errors.data);
		buf_free(&errors);
		goto out;
	}
	buf_free(&errors);
	if (d.overlay->nput || d.overlay->deleted.n)
		log_info("subscriptions changed over the status socket apply", "file=%s/" CFG_OVERLAY_FILE
			 " changed=%zu deleted=%zu", c->state_dir, d.overlay->nput, d.overlay->deleted.n);
	if (!(d.rules = rules_new(c->subs, c->nsubs, d.err, sizeof(d.err)))) {
		d.exit_code = 2;
		log_error("configuration not supported", "error=\"%s\"", d.err);
		goto out;
	}
	snprintf(d.spill_dir, sizeof(d.spill_dir), "%s/spill", c->state_dir);
	if (mkdir(d.spill_dir, 0700) != 0 && errno != EEXIST) {
		d.exit_code = 1;
		log_error("cannot create spill directory", "dir=%s error=\"%s\"", d.spill_dir, strerror(errno));
		goto out;
	}
	d.handler = txn_callbacks;
	d.handler.ctx = &d;
	d.source_handler = source_callbacks;
	d.source_handler.ctx = &d;
	d.arena = arena_new(64 * 1024);
	d.rc = pgo_relcache_new();
	d.src = source_new(c);
	d.base = event_base_new();
	d.sinks = (sink_set){.base = d.base, .wake = on_consumers_acked, .ctx = &d};
	if (!bind_sinks(&d, NULL)) {
		d.exit_code = 2;
		log_error("cannot start a sink", "error=\"%s\"", d.err);
		goto out;
	}
	if (!(d.status = status_new(c, d.base, on_control, &d, d.err, sizeof(d.err)))) {
		d.exit_code = 1;
		log_error("cannot serve the status socket", "error=\"%s\"", d.err);
		goto out;
	}
	d.start_ms = now_ms();
	publish(&d, true);
	d.ev_write = event_new(d.base, -1, 0, on_write, &d);
	d.ev_retry = evtimer_new(d.base, on_retry, &d);
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
	event_active(d.ev_retry, EV_TIMEOUT, 0);
	event_base_dispatch(d.base);
	shutdown_flush(&d);
out:
	if (d.ev_read)
		event_free(d.ev_read);
	for (int i = 0; i < 3; i++)
		if (d.ev_sig[i])
			event_free(d.ev_sig[i]);
	if (d.ev_write)
		event_free(d.ev_write);
	if (d.ev_retry)
		event_free(d.ev_retry);
	if (d.ev_tick)
		event_free(d.ev_tick);
	/* Whatever has events on the loop goes before the loop. */
	for (size_t i = 0; i < d.nchanges; i++)
		cfg_subscription_free(d.changes[i].put);
	free(d.changes);
	status_free(d.status);
	if (d.ev_kafka)
		event_free(d.ev_kafka);
	sink_set_free(&d.sinks);
	if (d.base)
		event_base_free(d.base);
	txn_free(d.asm_);
	source_free(d.src);
	pgo_relcache_free(d.rc);
	arena_free(d.arena);
	buf_free(&d.scratch);
	progress_free(&d.prog);
	rules_free(d.rules);
	cfg_overlay_free(d.overlay);
	free(d.matched);
	cfg_free(d.cfg);
	if (d.lock_fd >= 0)
		close(d.lock_fd);
	return d.exit_code;
}
