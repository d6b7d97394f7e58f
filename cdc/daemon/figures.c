/* figures.c: what `cdc run` tells about itself: the status socket's /status, /metrics and
 * /subscriptions (rendered by cdc/status/report.c from the figures gathered here), the progress
 * and Kafka log lines, and the replication slot's health. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/sidecar.h"
#include "cdc/source/pgconn.h"
#include "cdc/status/report.h"
#include "decoder/base/log.h"
#include "sinks/kafka/kafka_sink.h"
#include "sinks/socket/socket_sink.h"

#define PROGRESS_LOG_MS 30000 /* a progress line at most this often while changes flow */
#define PUBLISH_MS 1000	      /* the status socket's figures are this fresh */
#define HEALTH_MS 5000	      /* pg_replication_slots is asked this often */
#define SERVER_MS 5000	      /* the server's role and failover readiness are asked this often */

void figures_log_kafka(sidecar *d)
{
	if (!d->sinks.k[SINKS_KAFKA])
		return;
	const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
	log_info("kafka",
		 "in_flight=%llu delivered=%llu errors=%llu restarts=%llu latency_p50_ms=%.2f "
		 "latency_p99_ms=%.2f latency_p999_ms=%.2f latency_max_ms=%.2f",
		 (unsigned long long)k->in_flight, (unsigned long long)k->delivered,
		 (unsigned long long)k->errors, (unsigned long long)k->restarts,
		 (double)hist_quantile(&k->latency, 0.5) / 1000,
		 (double)hist_quantile(&k->latency, 0.99) / 1000,
		 (double)hist_quantile(&k->latency, 0.999) / 1000, (double)k->latency.max / 1000);
}

void figures_log_progress(sidecar *d, uint64_t now)
{
	figures *f = &d->fig;
	pipeline_figures pf = pipeline_get_figures(d->pipe);
	if (pf.transactions == f->logged_seq || now - f->last_progress_ms < PROGRESS_LOG_MS)
		return;
	char received[LSN_STRLEN], flushed[LSN_STRLEN];
	lsn_format(d->conn.received_lsn, received);
	lsn_format(pipeline_flushed(d->pipe), flushed);
	txn_stats st = pipeline_held(d->pipe);
	double secs = f->last_progress_ms ? (double)(now - f->last_progress_ms) / 1000 : 0;
	log_info("progress",
		 "received_lsn=%s flushed_lsn=%s transactions=%llu events=%llu events_per_s=%.0f held=%llu "
		 "spilled_mib=%llu aborted_held=%llu",
		 received, flushed, (unsigned long long)(pf.transactions - f->logged_seq),
		 (unsigned long long)(pf.events - f->logged_events),
		 secs > 0 ? (double)(pf.events - f->logged_events) / secs : 0.0,
		 (unsigned long long)(st.streamed_open + st.prepared_open),
		 (unsigned long long)(st.spilled_bytes >> 20), (unsigned long long)st.aborted);
	f->logged_seq = pf.transactions;
	f->logged_events = pf.events;
	f->last_progress_ms = now;
	figures_log_kafka(d);
}

/* Why /readyz says 503, or NULL when streaming with every sink able to take changes. */
static const char *not_ready(sidecar *d)
{
	if (d->conn.standby) {
		snprintf(d->fig.not_ready, sizeof(d->fig.not_ready),
			 "standby: replication slot %s is streamed by another process (walsender PID %d)",
			 d->cfg->source.slot, d->conn.standby);
		return d->fig.not_ready;
	}
	if (!d->conn.streaming)
		return d->fig.last_progress_ms ? "not streaming from the slot (reconnecting)" : "starting";
	if (d->conn.paused)
		return "paused: a sink is busy or a spool is full (when_full: block)";
	if (d->sinks.k[SINKS_KAFKA]) {
		const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
		if (k->brokers_down && k->in_flight)
			return "kafka: every broker is down; messages wait in flight";
	}
	return NULL;
}

static const char *const mode_names[] = {
    [SOCKET_FAILOVER] = "failover", [SOCKET_SHARED] = "shared", [SOCKET_KEY_SHARED] = "key_shared"};

/* A socket subscription's consumers (*stats: what their names point into; both freed by the
 * caller). */
static report_consumer *consumer_figures(const sink *k, uint32_t i, socket_consumer_stats **stats, size_t *n)
{
	*stats = socket_sink_consumers(k, i, n);
	report_consumer *out = xcalloc(*n ? *n : 1, sizeof(*out));
	for (size_t j = 0; j < *n; j++) {
		const socket_consumer_stats *c = &(*stats)[j];
		out[j] = (report_consumer){.name = c->name,
					   .mode = mode_names[c->mode],
					   .pid = c->pid,
					   .uid = c->uid,
					   .dead_letters = c->dead_letters,
					   .active = c->active,
					   .reading = c->reading,
					   .in_flight = c->in_flight,
					   .delivered = c->delivered,
					   .acked = c->acked,
					   .connected_us = c->connected_us};
	}
	return out;
}

/* Per subscription: what the pipeline handed its sink, and the socket sink's offsets and
 * consumers (*stats[i]: what subscription i's consumer names point into). */
static report_sub *sub_figures(const sidecar *d, socket_consumer_stats ***stats)
{
	report_sub *subs = xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*subs));
	*stats = xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(**stats));
	socket_sub_stats st;
	for (uint32_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *c = &d->cfg->subs[i];
		pipeline_count n = pipeline_sub_count(d->pipe, i);
		report_sub *r = &subs[i];
		*r = (report_sub){.name = c->name,
				  .sink = cfg_sink_name(c->sink),
				  .matched = n.events,
				  .delivered = n.events,
				  .bytes = n.bytes};
		if (!d->sinks.k[SINKS_SOCKET] || !socket_sink_stats(d->sinks.k[SINKS_SOCKET], i, &st))
			continue;
		r->delivered = st.delivered;
		r->has_offsets = true;
		r->head_offset = st.head_offset;
		r->acked_offset = st.acked_offset;
		r->first_offset = st.first_offset;
		r->consumers = st.consumers;
		r->dead = st.dead;
		r->dropped = st.dropped;
		r->redelivered = st.redelivered;
		r->in_flight = st.in_flight;
		r->acked = st.acked;
		r->nacked = st.nacked;
		r->progressed = st.progressed;
		r->refused = st.refused;
		r->spool_bytes = st.spool_bytes;
		r->full = st.full;
		r->not_reading = st.not_reading;
		r->attached = consumer_figures(d->sinks.k[SINKS_SOCKET], i, &(*stats)[i], &r->nattached);
	}
	return subs;
}

static void free_sub_figures(report_sub *subs, socket_consumer_stats **stats, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free((void *)subs[i].attached);
		free(stats[i]);
	}
	free(subs);
	free(stats);
}

void figures_publish(sidecar *d, bool force)
{
	figures *f = &d->fig;
	uint64_t now = now_ms();
	if (!d->status || (!force && now - f->last_publish_ms < PUBLISH_MS))
		return;
	f->last_publish_ms = now;
	socket_consumer_stats **consumers;
	report_sub *subs = sub_figures(d, &consumers);
	int64_t now_us = wall_us();
	const char *why = not_ready(d);
	pipeline_figures pf = pipeline_get_figures(d->pipe);
	uint64_t flushed = pipeline_flushed(d->pipe);
	const source_server *sv = source_server_info(d->conn.src);
	const source_failover *fo = &f->failover;
	report r = {
	    .version = CDC_VERSION,
	    .uptime_s = (double)(now - f->start_ms) / 1000,
	    .ready = !why,
	    .reason = why,
	    .source = {.connected = d->conn.streaming,
		       .standby = d->conn.standby != 0,
		       .slot = d->cfg->source.slot,
		       .publication = d->cfg->source.publication,
		       .server_version = f->server_version[0] ? f->server_version : NULL,
		       .received_lsn = d->conn.received_lsn,
		       .flushed_lsn = flushed,
		       .server_wal_lsn = f->server_wal_lsn,
		       .last_commit_time_us = pf.last_commit_time,
		       .lag_s = !pf.last_commit_time	       ? -1
				: flushed >= f->server_wal_lsn ? 0
							       : (double)(now_us - pf.last_commit_time) / 1e6,
		       .reconnects = f->reconnects,
		       .resyncs = f->resyncs,
		       .server = sv->host[0] ? sv->host : NULL,
		       .in_recovery = sv->host[0] && sv->in_recovery,
		       .timeline = sv->timeline,
		       .promotions = f->promotions,
		       .failover = {.configured = d->cfg->source.failover,
				    .known = fo->known,
				    .ready = fo->reason == FAILOVER_READY,
				    .slot_failover = fo->slot_failover,
				    .reason = failover_reason_name(fo->reason),
				    .setting = fo->setting,
				    .message = fo->why},
		       .transactions = pf.transactions,
		       .events = pf.events,
		       .errors_stream = f->errors_stream,
		       .errors_connect = f->errors_connect,
		       .wal_status = f->health.known ? f->health.wal_status : NULL,
		       .safe_wal_size_known = f->health.known && f->health.safe_wal_size_known,
		       .safe_wal_size = f->health.safe_wal_size,
		       .max_wal_keep_size = f->health.max_keep_size,
		       .invalidation_reason = f->health.known && f->health.has_invalidation
						  ? f->health.invalidation_reason
						  : NULL,
		       .inactive_since_us = f->health.known ? f->health.inactive_since_us : 0,
		       .idle_timeout_known = f->health.known && f->health.idle_timeout_s >= 0,
		       .idle_timeout_s = f->health.idle_timeout_s},
	    .subs = subs,
	    .nsubs = d->cfg->nsubs,
	    .has_kafka = d->sinks.k[SINKS_KAFKA] != NULL,
	    .socket_latency = d->sinks.k[SINKS_SOCKET] ? socket_sink_latency(d->sinks.k[SINKS_SOCKET]) : NULL,
	};
	const char *warnings[2];
	if (f->slot_warning[0])
		warnings[r.nwarnings++] = f->slot_warning;
	if (d->cfg->source.failover && fo->known && fo->reason != FAILOVER_READY)
		warnings[r.nwarnings++] = fo->why;
	r.warnings = warnings;
	if (d->sinks.k[SINKS_KAFKA]) {
		const kafka_stats *k = kafka_sink_stats(d->sinks.k[SINKS_KAFKA]);
		r.kafka.in_flight = k->in_flight;
		r.kafka.delivered = k->delivered;
		r.kafka.errors = k->errors;
		r.kafka.restarts = k->restarts;
		r.kafka.latency = &k->latency;
		r.kafka.exactly_once = d->cfg->kafka.exactly_once;
		r.kafka.commits = k->commits;
		r.kafka.aborts = k->aborts;
		r.kafka.skipped = k->skipped;
		r.kafka.position = k->position;
	}
	report_failed_sub failed[d->rl.aside.n + 1];
	for (size_t i = 0; i < d->rl.aside.n; i++)
		failed[i] = (report_failed_sub){d->rl.aside.v[i].name, d->rl.aside.v[i].reason};
	r.failed = failed;
	r.nfailed = d->rl.aside.n;
	buf status = {0}, metrics = {0}, list = {0}, backfills = {0};
	report_backfill *bf_rows = NULL;
	r.nbackfills = backfills_report(d, &bf_rows, &backfills);
	r.backfills = bf_rows;
	r.backfills_json = backfills.data;
	report_status_json(&r, &status);
	report_metrics(&r, &metrics);
	report_subscriptions_json(d->cfg, &list);
	status_publish(d->status, status.data, metrics.data, list.data, !why, why ? why : "");
	buf_free(&status);
	buf_free(&metrics);
	buf_free(&list);
	buf_free(&backfills);
	free(bf_rows);
	free_sub_figures(subs, consumers, d->cfg->nsubs);
}

/* A warning in the log (once) and in /status while the slot is in danger of losing the WAL it
 * needs (max_slot_wal_keep_size). */
void figures_slot_health(sidecar *d, uint64_t now)
{
	figures *f = &d->fig;
	if (now - f->last_health_ms < HEALTH_MS)
		return;
	f->last_health_ms = now;
	char err[512], warning[sizeof(f->slot_warning)] = "";
	if (!source_poll_slot_health(d->conn.src, &f->health, err, sizeof(err))) {
		log_debug("cannot read the slot's health", "error=\"%s\"", err);
		return;
	}
	const source_slot_health *h = &f->health;
	if (!h->known)
		return;
	/* Keepalives bring the server's position only while the slot is read: while a sink holds
	 * reading paused, this one keeps the lag growing. (Not otherwise: it may be ahead of the last
	 * keepalive for a moment, and lag_s would then count from the last commit.) */
	if (d->conn.paused && h->server_lsn > f->server_wal_lsn)
		f->server_wal_lsn = h->server_lsn;
	if (strcmp(h->wal_status, "lost") == 0 && h->invalidation_reason[0])
		snprintf(
		    warning, sizeof(warning),
		    "the server invalidated the slot (wal_status lost, invalidation_reason %s): drop and "
		    "recreate it, then resynchronise consumers (source.on_slot_lost: resync does both)",
		    h->invalidation_reason);
	else if (strcmp(h->wal_status, "lost") == 0)
		snprintf(warning, sizeof(warning),
			 "the slot lost WAL it needs (wal_status lost): drop and recreate it, then "
			 "resynchronise consumers");
	else if (strcmp(h->wal_status, "unreserved") == 0)
		snprintf(warning, sizeof(warning),
			 "the slot's WAL is no longer reserved (wal_status unreserved): it is lost at the "
			 "next checkpoint "
			 "unless cdc catches up");
	else if (h->safe_wal_size_known && h->max_keep_size > 0 &&
		 h->safe_wal_size < h->max_keep_size / 100 * PG_SAFE_WAL_LOW_PERCENT)
		snprintf(warning, sizeof(warning),
			 "safe_wal_size is low: %" PRId64 " of max_slot_wal_keep_size %" PRId64
			 " bytes left before the slot loses WAL; find what holds cdc back (a full spool, a "
			 "Kafka outage)",
			 h->safe_wal_size, h->max_keep_size);
	if (warning[0] && !f->slot_warning[0])
		log_warn("the replication slot is in danger", "slot=%s wal_status=%s warning=\"%s\"",
			 d->cfg->source.slot, h->wal_status, warning);
	else if (!warning[0] && f->slot_warning[0])
		log_info("the replication slot is out of danger", "slot=%s wal_status=%s",
			 d->cfg->source.slot, h->wal_status);
	memcpy(f->slot_warning, warning, sizeof(warning));
}

/* A standby cdc streams from was promoted meanwhile: the positions recorded from now on are on
 * its new timeline, and writes go to it. */
static void promoted_under_us(sidecar *d, const source_server *sv)
{
	connection *c = &d->conn;
	if (!c->streaming || !sv->timeline || sv->timeline == c->st.timeline)
		return;
	log_warn("the server cdc streams from was promoted: it goes on streaming on the new timeline",
		 "slot=%s timeline=%u previous_timeline=%u server=%s", d->cfg->source.slot, sv->timeline,
		 c->st.timeline, sv->host);
	c->st.timeline = sv->timeline;
	d->fig.promotions++;
	backfills_follow(d);
}

void figures_server(sidecar *d, uint64_t now)
{
	figures *f = &d->fig;
	bool ask = !f->last_server_ms || now - f->last_server_ms >= SERVER_MS;
	source_failover was = f->failover;
	char err[512];
	if (!source_poll_server(d->conn.src, &ask, &f->failover, err, sizeof(err))) {
		log_debug("cannot ask the server's role", "error=\"%s\"", err);
		return;
	}
	if (ask)
		f->last_server_ms = now;
	promoted_under_us(d, source_server_info(d->conn.src));
	const source_failover *fo = &f->failover;
	if (!fo->known || (was.known && was.reason == fo->reason && strcmp(was.setting, fo->setting) == 0))
		return;
	if (fo->reason == FAILOVER_READY)
		log_info("failover: a promotion of a standby now loses nothing (the slot is a failover slot, "
			 "and synchronized_standby_slots names only active physical slots)",
			 "slot=%s synchronized_standby_slots=\"%s\"", d->cfg->source.slot, fo->setting);
	else
		log_warn("failover: a promotion of a standby now is not safe", "slot=%s reason=%s why=\"%s\"",
			 d->cfg->source.slot, failover_reason_name(fo->reason), fo->why);
}
