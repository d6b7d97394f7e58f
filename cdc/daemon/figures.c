/* What `cdc run` tells about itself: the status socket's /status, /metrics and /subscriptions, the
 * progress and sinks' log lines, and the replication slot's health. cdc/status/report.c renders the
 * documents from the figures gathered here and those the sink modules render. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/sidecar.h"
#include "cdc/source/pgconn.h"
#include "cdc/status/report.h"
#include "decoder/base/log.h"

#define PROGRESS_LOG_MS 30000 /* a progress line at most this often while changes flow */
#define PUBLISH_MS 1000	      /* the status socket's figures are this fresh */
#define HEALTH_MS 5000	      /* pg_replication_slots is asked this often */
#define SERVER_MS 5000	      /* the server's role and failover readiness are asked this often */

void daemon_figures_log_sinks(sidecar *d)
{
	for (size_t m = 0; sink_modules[m]; m++)
		if (d->sinks.k[m] && sink_modules[m]->log_figures)
			sink_modules[m]->log_figures(d->sinks.k[m]);
}

void daemon_figures_log_progress(sidecar *d, uint64_t now)
{
	figures *f = &d->fig;
	pipeline_figures pf = pipeline_get_figures(d->pipe);
	if (pf.transactions == f->logged_seq || now - f->last_progress_ms < PROGRESS_LOG_MS)
		return;
	char received[LSN_STRLEN], flushed[LSN_STRLEN];
	util_lsn_format(d->conn.received_lsn, received);
	util_lsn_format(pipeline_flushed(d->pipe), flushed);
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
	daemon_figures_log_sinks(d);
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
	const char *sink_why = NULL;
	for (size_t m = 0; sink_modules[m] && !sink_why; m++)
		sink_why = d->sinks.k[m] && sink_modules[m]->not_ready
			       ? sink_modules[m]->not_ready(d->sinks.k[m])
			       : NULL;
	if (!d->conn.streaming && d->fig.last_progress_ms && sink_why) {
		/* a sink's restart reconnects the slot, so its reason is the one to read */
		snprintf(d->fig.not_ready, sizeof(d->fig.not_ready),
			 "not streaming from the slot (reconnecting): %s", sink_why);
		return d->fig.not_ready;
	}
	if (!d->conn.streaming)
		return d->fig.last_progress_ms ? "not streaming from the slot (reconnecting)" : "starting";
	if (d->conn.paused)
		return "paused: a sink is busy or a spool is full (when_full: block)";
	return sink_why;
}

/* Per subscription, what the pipeline handed its sink, and its sink's own members. Subscription i's
 * point into members[i]. */
static report_sub *sub_figures(const sidecar *d, buf *members)
{
	report_sub *subs = util_xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*subs));
	for (uint32_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *c = &d->cfg->subs[i];
		const sink_module *m = sink_modules[c->sink];
		const sink *k = d->sinks.k[c->sink];
		pipeline_count n = pipeline_sub_count(d->pipe, i);
		subs[i] = (report_sub){.name = c->name,
				       .sink = m->name,
				       .matched = n.events,
				       .delivered = n.events,
				       .bytes = n.bytes};
		if (k && m->sub_status && m->sub_status(k, i, &subs[i].delivered, &members[i]))
			subs[i].sink_members = members[i].data ? members[i].data : "";
	}
	return subs;
}

/* Each module's figures, as its sink renders them. Module m's point into texts[3 * m ...]. */
static report_sink *sink_figures(const sidecar *d, buf *texts)
{
	size_t n = sink_modules_count();
	report_sink *v = util_xcalloc(n, sizeof(*v));
	const char **names = util_xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*names));
	for (size_t m = 0; m < n; m++) {
		const sink_module *mod = sink_modules[m];
		const sink *k = d->sinks.k[m];
		v[m] = (report_sink){.name = mod->name, .sub_fields = mod->sub_fields};
		if (!k)
			continue;
		if (mod->status_json) {
			mod->status_json(k, &texts[3 * m]);
			v[m].status_json = texts[3 * m].data;
		}
		if (mod->metrics) {
			mod->metrics(k, &texts[3 * m + 1]);
			v[m].metrics = texts[3 * m + 1].data;
		}
		if (mod->sub_metrics) {
			for (size_t i = 0; i < d->cfg->nsubs; i++)
				names[i] = d->cfg->subs[i].sink == (int)m ? d->cfg->subs[i].name : NULL;
			mod->sub_metrics(k, names, d->cfg->nsubs, &texts[3 * m + 2]);
			v[m].sub_metrics = texts[3 * m + 2].data;
		}
		v[m].latency = mod->latency ? mod->latency(k) : NULL;
	}
	free(names);
	return v;
}

void daemon_figures_tick(sidecar *d, uint64_t now_us, uint64_t interval_us)
{
	figures *f = &d->fig;
	if (f->last_tick_us) {
		uint64_t due = f->last_tick_us + interval_us;
		hist_add(&f->loop_lag, now_us > due ? now_us - due : 0);
	}
	f->last_tick_us = now_us;
}

void daemon_figures_publish(sidecar *d, bool force)
{
	figures *f = &d->fig;
	uint64_t now = util_now_ms();
	if (!d->status || (!force && now - f->last_publish_ms < PUBLISH_MS))
		return;
	f->last_publish_ms = now;
	size_t nsinks = sink_modules_count();
	buf *members = util_xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*members));
	buf *texts = util_xcalloc(3 * nsinks, sizeof(*texts));
	report_sub *subs = sub_figures(d, members);
	report_sink *sinks = sink_figures(d, texts);
	int64_t now_us = util_wall_us();
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
		       .backlog_reads = f->backlog_reads,
		       .server = sv->host[0] ? sv->host : NULL,
		       .in_recovery = sv->host[0] && sv->in_recovery,
		       .timeline = sv->timeline,
		       .promotions = f->promotions,
		       .failover = {.configured = d->cfg->source.failover,
				    .known = fo->known,
				    .ready = fo->reason == FAILOVER_READY,
				    .slot_failover = fo->slot_failover,
				    .reason = source_failover_reason_name(fo->reason),
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
	    .sinks = sinks,
	    .nsinks = nsinks,
	    .status_unauthorized = d->status ? status_unauthorized(d->status) : 0,
	    .loop_lag = &f->loop_lag,
	    .received = pf.received,
	};
	const char *warnings[2];
	if (f->slot_warning[0])
		warnings[r.nwarnings++] = f->slot_warning;
	if (d->cfg->source.failover && fo->known && fo->reason != FAILOVER_READY)
		warnings[r.nwarnings++] = fo->why;
	r.warnings = warnings;
	report_failed_sub failed[d->rl.aside.n + 1];
	for (size_t i = 0; i < d->rl.aside.n; i++)
		failed[i] = (report_failed_sub){d->rl.aside.v[i].name, d->rl.aside.v[i].reason};
	r.failed = failed;
	r.nfailed = d->rl.aside.n;
	buf status = {0}, metrics = {0}, list = {0}, backfills = {0};
	report_backfill *bf_rows = NULL;
	r.nbackfills = daemon_backfills_report(d, &bf_rows, &backfills);
	daemon_signals_report(d, &r);
	r.backfills = bf_rows;
	r.backfills_json = backfills.data;
	status_report_status_json(&r, &status);
	status_report_metrics(&r, &metrics);
	status_report_subscriptions_json(d->cfg, &list);
	status_publish(d->status, status.data, metrics.data, list.data, !why, why ? why : "");
	buf_free(&status);
	buf_free(&metrics);
	buf_free(&list);
	buf_free(&backfills);
	free(bf_rows);
	for (size_t i = 0; i < d->cfg->nsubs; i++)
		buf_free(&members[i]);
	for (size_t i = 0; i < 3 * nsinks; i++)
		buf_free(&texts[i]);
	free(members);
	free(texts);
	free(subs);
	free(sinks);
}

/* A warning in the log (once) and in /status while the slot is in danger of losing the WAL it
 * needs (max_slot_wal_keep_size). */
void daemon_figures_slot_health(sidecar *d, uint64_t now)
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
	/* Keepalives bring the server's position only while the slot is read. While a sink holds
	 * reading paused, this one keeps the lag growing. It is not used otherwise. It may be ahead of
	 * the last keepalive for a moment, and lag_s would then count from the last commit. */
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

/* A standby cdc streams from was promoted meanwhile. The positions recorded from now on are on its
 * new timeline, and writes go to it. */
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
	daemon_backfills_follow(d);
}

void daemon_figures_server(sidecar *d, uint64_t now)
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
			 d->cfg->source.slot, source_failover_reason_name(fo->reason), fo->why);
}
