/* Renders what the status socket answers (GET /status, /metrics, /subscriptions) from plain numbers
 * the daemon fills in. The functions are pure, with no clock, no I/O and no daemon internals. So the
 * exact output is unit-tested, and the daemon only gathers figures. */
#ifndef CDC_REPORT_H
#define CDC_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/config/config.h"
#include "decoder/base/hist.h"
#include "decoder/base/util.h"

/* One subscription. Strings are borrowed for the duration of the call. */
typedef struct report_sub {
	const char *name;
	const char *sink; /* its sink module's name */
	uint64_t matched; /* events the rules matched */
	/* Events the sink delivered (for the socket, pushed to consumers, redeliveries included). */
	uint64_t delivered;
	uint64_t bytes; /* rendered bytes delivered */
	/* Its sink's own members of /status, as the module rendered them (",\"key\":value" each, its
	 * report_sink's sub_fields). NULL renders them as null. */
	const char *sink_members;
} report_sub;

/* One sink module's figures, rendered by the module. A field is NULL where it has none, or where its
 * sink does not run. Strings are borrowed. */
typedef struct report_sink {
	const char *name;
	const char *status_json; /* its object in /status, under its name */
	const char *metrics;	 /* its families in /metrics */
	const char *sub_metrics; /* its subscriptions' families, after every subscription's own */
	const hist *latency;	 /* commit time to delivery, microseconds */
	/* the members its subscriptions show in /status, null for subscriptions of other sinks */
	const char *const *sub_fields;
} report_sink;

/* One table of one backfill, for /metrics. Strings are borrowed. */
typedef struct report_backfill {
	const char *subscription, *id, *schema, *table, *state;
	uint64_t read, delivered, dropped, filtered; /* as bf_progress */
	int64_t estimate;			     /* rows, < 0 if unknown */
} report_backfill;

/* A subscription cdc runs without, and why. It was changed over the status socket and cannot work,
 * because the database or the file changed under it. Strings are borrowed. */
typedef struct report_failed_sub {
	const char *name, *reason;
} report_failed_sub;

/* source.failover, when configured. It holds whether a promotion now is safe (known once checked),
 * why (source_failover_reason_name), the slot's own failover flag, synchronized_standby_slots, and what to do
 * (NULL when ready). Unless configured, it is rendered as null and left out of /metrics. */
typedef struct report_failover {
	bool configured, known, ready, slot_failover;
	const char *reason, *setting, *message;
} report_failover;

typedef struct report {
	const char *version;
	double uptime_s;
	bool ready;
	const char *reason; /* why not ready (ignored when ready) */
	struct {
		bool connected;
		bool standby; /* another process streams the slot, and this cdc waits to take over */
		const char *slot, *publication;
		const char *server_version; /* NULL if unknown (never connected) */
		/* LSNs. 0 (InvalidXLogRecPtr) is unknown and rendered as null. */
		uint64_t received_lsn, flushed_lsn, server_wal_lsn;
		/* Commit time of the last delivered change, µs since the Unix epoch, 0 if unknown. */
		int64_t last_commit_time_us;
		double lag_s;		/* now - last_commit_time while behind, < 0 if unknown */
		const char *wal_status; /* pg_replication_slots.wal_status, NULL if unknown */
		bool safe_wal_size_known;
		int64_t safe_wal_size;	   /* pg_replication_slots.safe_wal_size, bytes (may be negative) */
		int64_t max_wal_keep_size; /* max_slot_wal_keep_size, bytes (when safe_wal_size_known) */
		/* From PostgreSQL 17 (NULL before, or not known yet), pg_replication_slots'
		 * invalidation_reason, "" while the slot is valid. Also inactive_since, in µs since the
		 * Unix epoch (0 while a process streams the slot). From PostgreSQL 18,
		 * idle_replication_slot_timeout in seconds (0 off). */
		const char *invalidation_reason;
		int64_t inactive_since_us;
		bool idle_timeout_known;
		int64_t idle_timeout_s;
		uint64_t reconnects;
		uint64_t resyncs;	/* re-syncs after a lost slot or a publication newer than it */
		uint64_t backlog_reads; /* times the slot began to be read as a backlog, in large pieces */
		/* The server cdc reads. These are its host:port (NULL if unknown), whether it is a hot
		 * standby, its timeline (0 if unknown), and the starts that followed a promotion (a newer
		 * timeline). */
		const char *server;
		bool in_recovery;
		uint32_t timeline;
		uint64_t promotions;
		report_failover failover;
		uint64_t transactions, events; /* decoded from the slot since the start */
		uint64_t errors_stream, errors_connect;
	} source;
	const report_sub *subs;
	size_t nsubs;
	const report_sink *sinks; /* in the module list's order */
	size_t nsinks;
	const char *const *warnings; /* such as safe_wal_size running low, shown in source.warnings */
	size_t nwarnings;
	/* Backfills for /status's "backfills" (backfill_json's array, left out when NULL or "[]"), and
	 * /metrics' rows, one per table (left out when none). */
	const char *backfills_json;
	const report_backfill *backfills;
	size_t nbackfills;
	/* source.signal_table, with table NULL when none (rendered as null and left out of /metrics).
	 * It counts the signals received and refused, and the backfills they started and stopped. It
	 * holds the last one with what came of it (a JSON object, NULL before the first). */
	struct {
		const char *table;
		uint64_t received, refused, started, stopped;
		const char *last_json;
	} signals;
	/* /status's "failed_subscriptions" and /metrics' cdc_subscription_failed (left out when none) */
	const report_failed_sub *failed;
	size_t nfailed;
	/* Requests over status.listen refused for want of status.token (/metrics only). */
	uint64_t status_unauthorized;
	/* How late each tick of the event loop came, microseconds (NULL: none). */
	const hist *loop_lag;
	/* From each transaction's commit to cdc reading its commit from the slot, microseconds (NULL: none).
	 */
	const hist *received;
} report;

/* GET /status, one JSON object and a newline. The comment above status_report_status_json in report.c has
 * every field. Appends to out. */
void status_report_status_json(const report *rep, buf *out);
/* GET /metrics, in Prometheus text format 0.0.4. Appends to out. */
void status_report_metrics(const report *rep, buf *out);
/* GET /subscriptions, {"subscriptions":[...]} with one object per subscription. It holds the keys of
 * its YAML, defaults filled in, durations as "30s" and sizes as "1GiB". Keys that do not apply to its
 * sink or are unset are left out, so that an object can be PUT back as it is. Appends to out. */
void status_report_subscriptions_json(const cfg *conf, buf *out);
/* One subscription's object, as in status_report_subscriptions_json(). */
void status_report_subscription_json(const cfg_subscription *sub, buf *out);

#endif
