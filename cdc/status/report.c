/* See report.h. /status and /subscriptions are compact JSON, with strings escaped by json_string. /metrics is
 * the Prometheus text format 0.0.4. It puts "# HELP" and "# TYPE" before every family and names counters
 * *_total. Label values are escaped and always valid UTF-8. */
#include "cdc/status/report.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "decoder/base/json.h"
#include "decoder/base/prom.h"

/* ---- shared formatting ---- */

/* ---- JSON ---- */

/* v, or null when !known. */
static void j_u64_or_null(buf *out, bool *first, const char *key, bool known, uint64_t v)
{
	json_key(out, first, key);
	if (known)
		json_u64(out, v);
	else
		json_null(out);
}

static void j_i64_or_null(buf *out, bool *first, const char *key, bool known, int64_t v)
{
	json_key(out, first, key);
	if (known)
		json_i64(out, v);
	else
		json_null(out);
}

static void j_bool_or_null(buf *out, bool *first, const char *key, bool known, bool v)
{
	json_key(out, first, key);
	if (known)
		json_boolean(out, v);
	else
		json_null(out);
}

/* Always with a decimal point, so that JSON readers see a double. null when not finite. */
/* source.failover, null unless configured. ready, reason, slot_failover and synchronized_standby_slots are
 * null until checked. */
static void status_failover(const report *r, buf *out)
{
	if (!r->source.failover.configured) {
		json_null(out);
		return;
	}
	bool f = true, k = r->source.failover.known;
	buf_putc(out, '{');
	j_bool_or_null(out, &f, "ready", k, r->source.failover.ready);
	json_key_str(out, &f, "reason", k ? r->source.failover.reason : NULL);
	j_bool_or_null(out, &f, "slot_failover", k, r->source.failover.slot_failover);
	json_key_str(out, &f, "synchronized_standby_slots", k ? r->source.failover.setting : NULL);
	json_key_str(out, &f, "message", k && !r->source.failover.ready ? r->source.failover.message : NULL);
	buf_putc(out, '}');
}

static void status_source(const report *r, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_boolean(out, &f, "connected", r->source.connected);
	json_key_boolean(out, &f, "standby", r->source.standby);
	json_key_str(out, &f, "slot", r->source.slot);
	json_key_str(out, &f, "publication", r->source.publication);
	json_key_str(out, &f, "server_version", r->source.server_version);
	json_key_lsn(out, &f, "received_lsn", r->source.received_lsn);
	json_key_lsn(out, &f, "flushed_lsn", r->source.flushed_lsn);
	json_key_lsn(out, &f, "server_wal_lsn", r->source.server_wal_lsn);
	uint64_t wal = r->source.server_wal_lsn, flushed = r->source.flushed_lsn;
	json_key_u64(out, &f, "lag_bytes", wal && flushed && wal > flushed ? wal - flushed : 0);
	json_key_fixed3(out, &f, "lag_s", r->source.lag_s >= 0, r->source.lag_s);
	json_key_time(out, &f, "last_commit_time", r->source.last_commit_time_us);
	json_key_str(out, &f, "wal_status", r->source.wal_status);
	j_i64_or_null(out, &f, "safe_wal_size", r->source.safe_wal_size_known, r->source.safe_wal_size);
	const char *reason = r->source.invalidation_reason;
	json_key_str(out, &f, "invalidation_reason", reason && reason[0] ? reason : NULL);
	json_key_time(out, &f, "inactive_since", r->source.inactive_since_us);
	j_i64_or_null(out, &f, "idle_replication_slot_timeout_s", r->source.idle_timeout_known,
		      r->source.idle_timeout_s);
	json_key_u64(out, &f, "reconnects", r->source.reconnects);
	json_key_u64(out, &f, "resyncs", r->source.resyncs);
	json_key_u64(out, &f, "backlog_reads", r->source.backlog_reads);
	json_key_str(out, &f, "server", r->source.server);
	json_key(out, &f, "server_role");
	if (r->source.server)
		json_str(out, r->source.in_recovery ? "standby" : "primary");
	else
		json_null(out);
	j_u64_or_null(out, &f, "timeline", r->source.timeline != 0, r->source.timeline);
	json_key_u64(out, &f, "promotions", r->source.promotions);
	json_key(out, &f, "failover");
	status_failover(r, out);
	json_key_u64(out, &f, "transactions", r->source.transactions);
	json_key_u64(out, &f, "events", r->source.events);
	json_key(out, &f, "errors");
	bool fe = true;
	buf_putc(out, '{');
	json_key_u64(out, &fe, "stream", r->source.errors_stream);
	json_key_u64(out, &fe, "connect", r->source.errors_connect);
	buf_putc(out, '}');
	json_key(out, &f, "warnings");
	buf_putc(out, '[');
	bool fw = true;
	for (size_t i = 0; i < r->nwarnings; i++) {
		json_sep(out, &fw);
		json_str(out, r->warnings[i] ? r->warnings[i] : "");
	}
	buf_puts(out, "]}");
}

static void status_sub(const report *r, const report_sub *s, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_str(out, &f, "name", s->name);
	json_key_str(out, &f, "sink", s->sink);
	json_key_u64(out, &f, "matched", s->matched);
	json_key_u64(out, &f, "delivered", s->delivered);
	json_key_u64(out, &f, "bytes", s->bytes);
	for (size_t m = 0; m < r->nsinks; m++) {
		const report_sink *k = &r->sinks[m];
		if (!k->sub_fields)
			continue;
		if (s->sink_members && strcmp(s->sink, k->name) == 0) {
			buf_puts(out, s->sink_members);
			continue;
		}
		for (const char *const *name = k->sub_fields; *name; name++) {
			json_key(out, &f, *name);
			json_null(out);
		}
	}
	buf_putc(out, '}');
}

/* {"version", "uptime_s" (whole seconds), "ready", "reason" (null when ready),
 *  "source": {"connected", "standby", "slot", "publication", "server_version", "received_lsn", "flushed_lsn",
 *             "server_wal_lsn" (LSNs as "X/X", null unknown), "lag_bytes" (server_wal_lsn -
 *             flushed_lsn, 0 unknown), "lag_s" (null unknown), "last_commit_time" (RFC 3339 or null),
 *             "wal_status", "safe_wal_size" (null unknown), "invalidation_reason" (PostgreSQL 17+,
 *             null while valid), "inactive_since" (17+, RFC 3339, null while streamed),
 *             "idle_replication_slot_timeout_s" (18+, null unknown), "reconnects", "resyncs",
 *             "backlog_reads", "server" (host:port), "server_role" ("primary" or "standby"),
 *             "timeline" (null unknown), "promotions", "failover" (null unless source.failover:
 *             {"ready", "reason", "slot_failover", "synchronized_standby_slots", "message"}),
 *             "transactions", "events", "errors": {"stream", "connect"}, "warnings": [...]},
 *  "subscriptions": [{"name", "sink", "matched", "delivered", "bytes", "head_offset", "acked_offset",
 *                     "first_offset", "pending", "consumers", "dead", "dropped", "redelivered",
 *                     "in_flight", "acked", "nacked", "progressed", "refused", "spool_bytes",
 *                     "full", "attached", "dead_letter_readers"}] (from head_offset on: null
 *                     unless a socket sink, each sink module's sub_fields. The last two are arrays of
 * {"name", "pid", "uid", "mode", "active", "reading", "in_flight", "delivered", "acked", "connected_since"}),
 *  "backfills": GET /backfills' array (left out when empty),
 *  "failed_subscriptions": [{"name", "reason"}] (left out when none),
 *  "signals": {"table", "received", "refused", "backfills_started", "backfills_stopped", "last": {"id",
 *              "type", "lsn", "error", "backfills": [{"subscription", "backfill", "error"}]} or null}
 *             (only with source.signal_table),
 *  a running sink's object under its module's name ("kafka": {"in_flight", "delivered", "errors",
 *  "restarts", ...}), "receive_latency_ms": {"count", "p50", "p99", "p999", "max"} (commit to cdc reading
 *  the commit from the slot; left out when NULL), "latency_ms": {"kafka"/"socket": {"count", "p50", "p99",
 *  "p999", "max"}} (commit to delivery, by sink), "event_loop_lag_ms": {"count", "p50", "p99", "p999", "max"}
 * (how late each 100 ms tick of the event loop came; left out when NULL)} */
void status_report_status_json(const report *r, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_str(out, &f, "version", r->version);
	json_key_u64(out, &f, "uptime_s",
		     r->uptime_s > 0 && isfinite(r->uptime_s) ? (uint64_t)r->uptime_s : 0);
	json_key_boolean(out, &f, "ready", r->ready);
	json_key_str(out, &f, "reason", r->ready ? NULL : r->reason ? r->reason : "unknown");
	json_key(out, &f, "source");
	status_source(r, out);
	json_key(out, &f, "subscriptions");
	buf_putc(out, '[');
	bool fs = true;
	for (size_t i = 0; i < r->nsubs; i++) {
		json_sep(out, &fs);
		status_sub(r, &r->subs[i], out);
	}
	buf_putc(out, ']');
	if (r->backfills_json && strcmp(r->backfills_json, "[]") != 0) {
		json_key(out, &f, "backfills");
		buf_puts(out, r->backfills_json);
	}
	if (r->nfailed) {
		json_key(out, &f, "failed_subscriptions");
		buf_putc(out, '[');
		bool ff = true;
		for (size_t i = 0; i < r->nfailed; i++) {
			bool m = true;
			json_sep(out, &ff);
			buf_putc(out, '{');
			json_key_str(out, &m, "name", r->failed[i].name);
			json_key_str(out, &m, "reason", r->failed[i].reason);
			buf_putc(out, '}');
		}
		buf_putc(out, ']');
	}
	if (r->signals.table) {
		bool fg = true;
		json_key(out, &f, "signals");
		buf_putc(out, '{');
		json_key_str(out, &fg, "table", r->signals.table);
		json_key_u64(out, &fg, "received", r->signals.received);
		json_key_u64(out, &fg, "refused", r->signals.refused);
		json_key_u64(out, &fg, "backfills_started", r->signals.started);
		json_key_u64(out, &fg, "backfills_stopped", r->signals.stopped);
		json_key(out, &fg, "last");
		buf_puts(out, r->signals.last_json ? r->signals.last_json : "null");
		buf_putc(out, '}');
	}
	for (size_t m = 0; m < r->nsinks; m++)
		if (r->sinks[m].status_json) {
			json_key(out, &f, r->sinks[m].name);
			buf_puts(out, r->sinks[m].status_json);
		}
	if (r->received)
		json_key_hist_ms(out, &f, "receive_latency_ms", r->received);
	bool fl = true;
	json_key(out, &f, "latency_ms");
	buf_putc(out, '{');
	for (size_t m = 0; m < r->nsinks; m++)
		if (r->sinks[m].latency)
			json_key_hist_ms(out, &fl, r->sinks[m].name, r->sinks[m].latency);
	buf_putc(out, '}');
	if (r->loop_lag)
		json_key_hist_ms(out, &f, "event_loop_lag_ms", r->loop_lag);
	buf_puts(out, "}\n");
}

/* ---- /subscriptions ---- */

void status_report_subscription_json(const cfg_subscription *s, buf *out)
{
	cfg_subscription_json(s, out);
}

void status_report_subscriptions_json(const cfg *c, buf *out)
{
	buf_puts(out, "{\"subscriptions\":[");
	bool f = true;
	for (size_t i = 0; i < c->nsubs; i++) {
		json_sep(out, &f);
		status_report_subscription_json(&c->subs[i], out);
	}
	buf_puts(out, "]}\n");
}

/* ---- /metrics ---- */

static void family(buf *out, const char *name, const char *type, const char *help)
{
	prom_family(out, name, type, help);
}

static void sample(buf *out, const char *name, const char *k1, const char *v1, const char *k2, const char *v2)
{
	prom_sample(out, name, k1, v1, k2, v2);
}

static void m_u64(buf *out, const char *name, const char *type, const char *help, uint64_t v)
{
	prom_u64(out, name, type, help, v);
}

static void m_bool(buf *out, const char *name, const char *help, bool v)
{
	m_u64(out, name, "gauge", help, v ? 1 : 0);
}

/* A gauge in seconds with millisecond precision. No sample when unknown. */
static void m_seconds(buf *out, const char *name, const char *help, bool known, double v)
{
	family(out, name, "gauge", help);
	if (known && isfinite(v))
		buf_printf(out, "%s %.3f\n", name, v);
}

/* Per-subscription families of every sink, by subscription and sink. Then each sink's own. */
static const struct {
	const char *name, *type, *help;
} sub_metrics[] = {
    {"cdc_subscription_matched_events_total", "counter", "Events the subscription's rules matched."},
    {"cdc_subscription_delivered_events_total", "counter",
     "Events the sink delivered (socket: pushed to consumers, redeliveries included)."},
    {"cdc_subscription_delivered_bytes_total", "counter", "Rendered bytes the sink delivered."},
};

static void metrics_subs(const report *r, buf *out)
{
	for (size_t m = 0; m < sizeof(sub_metrics) / sizeof(*sub_metrics); m++) {
		family(out, sub_metrics[m].name, sub_metrics[m].type, sub_metrics[m].help);
		for (size_t i = 0; i < r->nsubs; i++) {
			const report_sub *s = &r->subs[i];
			uint64_t v = m == 0 ? s->matched : m == 1 ? s->delivered : s->bytes;
			sample(out, sub_metrics[m].name, "subscription", s->name, "sink", s->sink);
			buf_printf(out, " %" PRIu64 "\n", v);
		}
	}
	for (size_t m = 0; m < r->nsinks; m++)
		if (r->sinks[m].sub_metrics)
			buf_puts(out, r->sinks[m].sub_metrics);
}

/* A histogram's samples, labelled sink=sink_name, or by le alone when sink_name is NULL. */
static const char *const wal_statuses[] = {"reserved", "extended", "unreserved", "lost"};
static const char *const invalidation_reasons[] = {"wal_removed", "rows_removed", "wal_level_insufficient",
						   "idle_timeout"};

/* A gauge labelled by state. Each known state gets a sample (1 for the current one, else 0). The current one
 * gets a series of its own when it is not among them. No sample when current is NULL (unknown). "" is none of
 * them. */
static void m_state(buf *out, const char *name, const char *help, const char *label, const char *const *known,
		    size_t n, const char *current)
{
	family(out, name, "gauge", help);
	if (!current)
		return;
	bool found = !current[0];
	for (size_t i = 0; i < n; i++) {
		found |= strcmp(current, known[i]) == 0;
		sample(out, name, label, known[i], NULL, NULL);
		buf_printf(out, " %d\n", strcmp(current, known[i]) == 0);
	}
	if (!found) {
		sample(out, name, label, current, NULL, NULL);
		buf_puts(out, " 1\n");
	}
}

/* Per table of each backfill, labelled subscription, backfill and table (schema.table). */
static void metrics_backfills(const report *r, buf *out)
{
	static const struct {
		const char *name, *type, *help;
		/* The offset of a uint64_t in report_backfill. SIZE_MAX stands for the estimate,
		 * SIZE_MAX - 1 for whether it runs and SIZE_MAX - 2 for whether it failed. */
		size_t field;
	} M[] = {
	    {"cdc_backfill_rows_read_total", "counter", "Rows a backfill read from the table.",
	     offsetof(report_backfill, read)},
	    {"cdc_backfill_rows_delivered_total", "counter",
	     "Rows a backfill delivered as reads to the subscription's sink.",
	     offsetof(report_backfill, delivered)},
	    {"cdc_backfill_rows_dropped_total", "counter",
	     "Rows a backfill read but dropped, changed between the chunk's watermarks (their changes "
	     "carry them).",
	     offsetof(report_backfill, dropped)},
	    {"cdc_backfill_rows_filtered_total", "counter",
	     "Rows a backfill read that the where (the parts cdc evaluates itself) left out.",
	     offsetof(report_backfill, filtered)},
	    {"cdc_backfill_rows_estimate", "gauge",
	     "The table's rows, estimated (from its statistics, else from the rows read per block read).",
	     SIZE_MAX},
	    {"cdc_backfill_running", "gauge", "1 while the backfill reads the table.", SIZE_MAX - 1},
	    {"cdc_backfill_failed", "gauge",
	     "1 when the backfill of the table failed (GET /backfills says why).", SIZE_MAX - 2},
	};
	if (!r->nbackfills)
		return;
	for (size_t m = 0; m < sizeof(M) / sizeof(M[0]); m++) {
		family(out, M[m].name, M[m].type, M[m].help);
		for (size_t i = 0; i < r->nbackfills; i++) {
			const report_backfill *b = &r->backfills[i];
			if (M[m].field == SIZE_MAX && b->estimate < 0)
				continue;
			char table[2 * 64 + 2];
			snprintf(table, sizeof(table), "%s.%s", b->schema, b->table);
			buf_printf(out, "%s{subscription=", M[m].name);
			prom_label_value(out, b->subscription);
			buf_puts(out, ",backfill=");
			prom_label_value(out, b->id);
			buf_puts(out, ",table=");
			prom_label_value(out, table);
			uint64_t v = M[m].field == SIZE_MAX	  ? (uint64_t)b->estimate
				     : M[m].field == SIZE_MAX - 1 ? strcmp(b->state, "running") == 0
				     : M[m].field == SIZE_MAX - 2
					 ? strcmp(b->state, "failed") == 0
					 : *(const uint64_t *)((const char *)b + M[m].field);
			buf_printf(out, "} %" PRIu64 "\n", v);
		}
	}
}

void status_report_metrics(const report *r, buf *out)
{
	m_u64(out, "cdc_up", "gauge", "1 while cdc answers.", 1);
	family(out, "cdc_build_info", "gauge", "The running cdc's version.");
	sample(out, "cdc_build_info", "version", r->version, NULL, NULL);
	buf_puts(out, " 1\n");
	m_seconds(out, "cdc_uptime_seconds", "Seconds since cdc started.", true, r->uptime_s);
	m_bool(out, "cdc_ready", "1 while streaming from the slot with healthy sinks (as /readyz).",
	       r->ready);
	m_u64(out, "cdc_status_unauthorized_requests_total", "counter",
	      "Requests over status.listen refused (401) for want of status.token.", r->status_unauthorized);

	m_bool(out, "cdc_source_connected", "1 while the replication connection streams.",
	       r->source.connected);
	m_bool(out, "cdc_standby",
	       "1 while another process streams the slot and this cdc waits to take over.",
	       r->source.standby);
	family(out, "cdc_source_info", "gauge", "The replication slot, publication and server version.");
	buf_puts(out, "cdc_source_info{slot=");
	prom_label_value(out, r->source.slot);
	buf_puts(out, ",publication=");
	prom_label_value(out, r->source.publication);
	buf_puts(out, ",server_version=");
	prom_label_value(out, r->source.server_version);
	buf_puts(out, "} 1\n");
	m_u64(out, "cdc_source_received_lsn", "gauge",
	      "Newest WAL position received from the slot (an LSN as a number).", r->source.received_lsn);
	m_u64(out, "cdc_source_flushed_lsn", "gauge",
	      "WAL position every sink has made durable, reported to the server (an LSN as a number).",
	      r->source.flushed_lsn);
	family(out, "cdc_source_server_wal_lsn", "gauge",
	       "The server's current WAL position (an LSN as a number).");
	if (r->source.server_wal_lsn)
		buf_printf(out, "cdc_source_server_wal_lsn %" PRIu64 "\n", r->source.server_wal_lsn);
	uint64_t wal = r->source.server_wal_lsn, flushed = r->source.flushed_lsn;
	m_u64(out, "cdc_source_lag_bytes", "gauge",
	      "Bytes of WAL between the server's position and the flushed one.",
	      wal && flushed && wal > flushed ? wal - flushed : 0);
	m_seconds(out, "cdc_source_lag_seconds",
		  "Seconds since the commit time of the last delivered change.", r->source.lag_s >= 0,
		  r->source.lag_s);
	family(out, "cdc_source_last_commit_timestamp_seconds", "gauge",
	       "Commit time of the last delivered change (Unix time).");
	char secs[32];
	if (r->source.last_commit_time_us > 0)
		buf_printf(out, "cdc_source_last_commit_timestamp_seconds %s\n",
			   prom_seconds((uint64_t)r->source.last_commit_time_us, secs));
	m_state(out, "cdc_source_wal_status",
		"The slot's wal_status in pg_replication_slots (1 for the current one).", "status",
		wal_statuses, sizeof(wal_statuses) / sizeof(*wal_statuses), r->source.wal_status);
	family(out, "cdc_source_safe_wal_size_bytes", "gauge",
	       "Bytes of WAL that can still be written before the slot is in danger of being lost.");
	if (r->source.safe_wal_size_known)
		buf_printf(out, "cdc_source_safe_wal_size_bytes %" PRId64 "\n", r->source.safe_wal_size);
	family(
	    out, "cdc_source_max_slot_wal_keep_size_bytes", "gauge",
	    "The server's max_slot_wal_keep_size (absent while unlimited: safe_wal_size is then unknown).");
	if (r->source.safe_wal_size_known)
		buf_printf(out, "cdc_source_max_slot_wal_keep_size_bytes %" PRId64 "\n",
			   r->source.max_wal_keep_size);
	m_state(out, "cdc_source_slot_invalidation_reason",
		"Why the server invalidated the slot (pg_replication_slots.invalidation_reason, PostgreSQL "
		"17+): 1 for the reason, all 0 while the slot is valid.",
		"reason", invalidation_reasons, sizeof(invalidation_reasons) / sizeof(*invalidation_reasons),
		r->source.invalidation_reason);
	family(out, "cdc_source_slot_inactive_since_timestamp_seconds", "gauge",
	       "Since when no process streams the slot (Unix time; PostgreSQL 17+; none while one does).");
	if (r->source.inactive_since_us > 0)
		buf_printf(out, "cdc_source_slot_inactive_since_timestamp_seconds %s\n",
			   prom_seconds((uint64_t)r->source.inactive_since_us, secs));
	family(out, "cdc_source_idle_replication_slot_timeout_seconds", "gauge",
	       "The server's idle_replication_slot_timeout (PostgreSQL 18+; 0: off): the server invalidates "
	       "a slot no process streamed for that long.");
	if (r->source.idle_timeout_known)
		buf_printf(out, "cdc_source_idle_replication_slot_timeout_seconds %" PRId64 "\n",
			   r->source.idle_timeout_s);
	m_u64(out, "cdc_source_reconnects_total", "counter",
	      "Reconnections to the server after a lost connection.", r->source.reconnects);
	m_u64(out, "cdc_source_resyncs_total", "counter",
	      "Re-syncs (source.on_slot_lost or on_publication_newer: resync): the slot moved on and every "
	      "subscription was backfilled.",
	      r->source.resyncs);
	m_u64(out, "cdc_source_backlog_reads_total", "counter",
	      "Times cdc began reading the slot as a backlog, in large pieces (a streamed transaction open, "
	      "or commits older than a second when read).",
	      r->source.backlog_reads);
	m_bool(out, "cdc_source_server_in_recovery",
	       "1 while the server cdc reads is a hot standby (the slot was made there).",
	       r->source.in_recovery);
	family(out, "cdc_source_timeline", "gauge", "The server's timeline (a promotion starts a new one).");
	if (r->source.timeline)
		buf_printf(out, "cdc_source_timeline %" PRIu32 "\n", r->source.timeline);
	m_u64(out, "cdc_source_promotions_total", "counter",
	      "Starts that followed a promotion of a standby (the server on a newer timeline).",
	      r->source.promotions);
	if (r->source.failover.configured) {
		family(
		    out, "cdc_source_failover_ready", "gauge",
		    "source.failover: 1 while a promotion now is safe (synchronized_standby_slots names only "
		    "active physical slots, and the slot is a failover slot); reason says why not.");
		if (r->source.failover.known) {
			sample(out, "cdc_source_failover_ready", "reason", r->source.failover.reason, NULL,
			       NULL);
			buf_printf(out, " %d\n", r->source.failover.ready);
		}
	}
	m_u64(out, "cdc_transactions_total", "counter", "Transactions decoded from the slot.",
	      r->source.transactions);
	m_u64(out, "cdc_events_total", "counter", "Change events decoded from the slot.", r->source.events);
	family(
	    out, "cdc_errors_total", "counter",
	    "Errors by kind (stream: the replication stream broke; connect: a connection attempt failed).");
	buf_printf(out, "cdc_errors_total{kind=\"stream\"} %" PRIu64 "\n", r->source.errors_stream);
	buf_printf(out, "cdc_errors_total{kind=\"connect\"} %" PRIu64 "\n", r->source.errors_connect);
	m_u64(out, "cdc_warnings", "gauge", "Warnings shown in /status (source.warnings).", r->nwarnings);

	metrics_subs(r, out);
	metrics_backfills(r, out);
	if (r->signals.table) {
		m_u64(out, "cdc_signals_received_total", "counter",
		      "Rows inserted into source.signal_table that cdc read from the stream.",
		      r->signals.received);
		m_u64(out, "cdc_signals_refused_total", "counter",
		      "Signals cdc could not act on (the log and /status signals.last say why).",
		      r->signals.refused);
		m_u64(out, "cdc_signal_backfills_started_total", "counter",
		      "Backfills that execute-snapshot signals started.", r->signals.started);
		m_u64(out, "cdc_signal_backfills_stopped_total", "counter",
		      "Backfills that stop-snapshot signals cancelled.", r->signals.stopped);
	}
	if (r->nfailed)
		family(out, "cdc_subscription_failed", "gauge",
		       "1 for each subscription cdc runs without: changed over the status socket, it cannot "
		       "work "
		       "(/status failed_subscriptions says why); PUT a corrected one or DELETE it.");
	for (size_t i = 0; i < r->nfailed; i++) {
		sample(out, "cdc_subscription_failed", "subscription", r->failed[i].name, NULL, NULL);
		buf_puts(out, " 1\n");
	}

	for (size_t m = 0; m < r->nsinks; m++)
		if (r->sinks[m].metrics)
			buf_puts(out, r->sinks[m].metrics);

	if (r->received) {
		family(out, "cdc_source_receive_latency_seconds", "histogram",
		       "Seconds from a transaction's commit to cdc reading its commit from the slot (the "
		       "server's decoding and sending, and cdc's reading).");
		prom_histogram(out, "cdc_source_receive_latency_seconds", NULL, NULL, r->received);
	}
	family(out, "cdc_delivery_latency_seconds", "histogram",
	       "Seconds from a change's commit to its delivery (kafka: delivery report; socket: durably "
	       "spooled).");
	for (size_t m = 0; m < r->nsinks; m++)
		if (r->sinks[m].latency)
			prom_histogram(out, "cdc_delivery_latency_seconds", "sink", r->sinks[m].name,
				       r->sinks[m].latency);
	if (r->loop_lag) {
		family(
		    out, "cdc_event_loop_lag_seconds", "histogram",
		    "How late each tick of cdc's event loop (every 100 ms) came: time the loop spent in one "
		    "piece of work, or waiting for a core.");
		prom_histogram(out, "cdc_event_loop_lag_seconds", NULL, NULL, r->loop_lag);
	}
}
