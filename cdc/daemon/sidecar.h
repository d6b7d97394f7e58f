/* sidecar.h: the state of `cdc run` that its files share, one struct per job: the replication
 * connection and the loop (daemon.c), reloads and live changes (reload.c), and the figures for
 * the status server and the log (figures.c). The data path is pipeline.h's. Internal to
 * cdc/daemon/. */
#ifndef CDC_SIDECAR_H
#define CDC_SIDECAR_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/backfill/reader.h"
#include "cdc/config/config.h"
#include "cdc/daemon/sinks_setup.h"
#include "cdc/pipeline/pipeline.h"
#include "cdc/source/source.h"
#include "cdc/source/state.h"
#include "cdc/status/report.h"
#include "cdc/status/status.h"

/* The replication connection (daemon.c). */
typedef struct connection {
	source *src;
	state st; /* st.flushed_lsn: recorded in state_dir, may be sent */
	struct event *ev_read, *ev_write, *ev_retry;
	bool streaming, reply_requested;
	bool paused;   /* a sink is busy: the slot is not read until it catches up */
	bool got_data; /* XLogData in the current drain: last_data_ms is set once per drain */
	bool batching; /* reading a backlog in larger pieces (source_batch; daemon.c) */
	uint64_t backoff_ms;
	uint64_t streams; /* how many times streaming started: the stream's number */
	int standby;	  /* the PID of the walsender that streams the slot for another process; 0: none */
	uint64_t received_lsn;
	uint64_t sent_flush_lsn; /* confirmed to the server: st.flushed_lsn when it was sent */
	uint64_t handled_lsn;	 /* the sinks' position last handled (posted for recording) */
	uint64_t last_feedback_ms, last_data_ms, last_heartbeat_ms;
	bool heartbeat_warned;
} connection;

/* SIGHUP, PUT and DELETE, applied at a transaction boundary (reload.c). */
typedef struct reloads {
	bool pending;
	bool hup;	      /* the pending reload includes a SIGHUP's: systemd is told when it is done */
	cfg_overlay *overlay; /* subscriptions changed over the status socket (state_dir) */
	/* PUT and DELETE requests waiting for the next transaction boundary, in arrival order; puts
	 * hold their parsed subscription */
	struct live_change {
		status_request *req;
		cfg_subscription *put; /* NULL: delete */
	} * changes;
	size_t nchanges;
} reloads;

/* Figures no other part keeps (figures.c). */
typedef struct figures {
	uint64_t start_ms, last_publish_ms, server_wal_lsn, reconnects, errors_stream, errors_connect;
	uint64_t resyncs;    /* re-syncs after a lost slot or a publication newer than it */
	uint64_t promotions; /* starts that followed a promotion (a newer timeline) */
	char server_version[32];
	/* what the last progress line reported */
	uint64_t logged_events, logged_seq, last_progress_ms;
	uint64_t last_health_ms;
	source_slot_health health;
	char slot_warning[256];	  /* why the slot is in danger of losing WAL; "" when it is not */
	uint64_t last_server_ms;  /* the server's role last asked (0: ask now) */
	source_failover failover; /* its last answer (source.failover) */
	char not_ready[192];	  /* /readyz's reason when it is made up */
} figures;

typedef struct sidecar {
	cfg *cfg;
	const char *cfg_path;
	int exit_code;
	struct event_base *base;
	struct event *ev_tick, *ev_sig[3], *ev_kafka, *ev_state;
	int kafka_wake_ms; /* ev_kafka's timeout now (watch_kafka) */
	int lock_fd;
	state_writer *sw; /* records the position off the loop; conn.st is what it has on disk */
	pipeline *pipe;
	sink_set sinks;
	status_server *status;
	bf_set *bf; /* backfills (backfills.c) */
	bf_reader *bf_reader;
	bool bf_warned; /* the backfills' state file could not be written */
	connection conn;
	reloads rl;
	figures fig;
	char err[1024];
} sidecar;

/* daemon.c */
/* Logs d->err under what and stops the loop with exit code code. */
void sidecar_fail(sidecar *d, int code, const char *what);
/* Records st in state_dir now (waiting for the writer's thread), before what follows relies on it;
 * false with d->err. */
bool sidecar_record(sidecar *d, const state *st) CDC_MUST_CHECK;
/* Binds the sinks and the pipeline to d->cfg with rules r (taken), creating the sinks it needs
 * first. False with d->err when a sink cannot start. */
bool sidecar_bind(sidecar *d, rules *r) CDC_MUST_CHECK;

/* reload.c */
/* The overlay of state_dir laid over d->cfg at the start: false (exit code 2) if unusable. */
bool reload_init(sidecar *d);
void reload_free(sidecar *d);
/* SIGHUP: reloads now if at a transaction boundary, else at the next one. */
void reload_request(sidecar *d);
/* Applies a pending reload if at a transaction boundary. */
void reload_maybe(sidecar *d);
/* PUT and DELETE /subscriptions/NAME (the status server's control callback, ctx = d). */
void reload_on_control(void *ctx, status_request *req);

/* Answers req with an error: {"error": error, "details": [lines of details]} (details may be NULL). */
void sidecar_answer_error(sidecar *d, status_request *req, unsigned code, const char *error,
			  const char *details);

/* backfills.c */
/* The backfills kept in state_dir, their reader, and the `snapshot: true` subscriptions seen for
 * the first time: false (logged) if state_dir's backfill file is unusable. */
bool backfills_init(sidecar *d);
void backfills_free(sidecar *d);
/* After a reload (old: the configuration before): settings, removed and added subscriptions. */
void backfills_reloaded(sidecar *d, const cfg *old);
/* POST /subscriptions/NAME/backfill and DELETE /subscriptions/NAME/backfill/ID. */
void backfills_on_control(sidecar *d, status_request *req);
/* A re-sync marker reached: queues a backfill of every subscription (every table of it),
 * appending [{"subscription", "backfill": ID}] to ids. */
bool backfills_resync(sidecar *d, buf *ids, char *err, size_t errlen);
/* The sinks made everything before flushed durable. */
void backfills_delivered(sidecar *d, uint64_t flushed);
/* Whether a backfill's table waits only for its last chunks to be durable. */
bool backfills_draining(const sidecar *d);
/* The stream starts again from the slot's confirmed position. */
void backfills_restart(sidecar *d);
/* The backfills read from the primary (source.primary_dsn) while the source is a standby, else from
 * source.dsn: at each start, and when a standby cdc streams from is promoted. */
void backfills_follow(sidecar *d);
/* Something may be due for the reader. */
void backfills_kick(sidecar *d);
/* GET /backfills from now on. */
void backfills_publish(sidecar *d);
/* For /status and /metrics: one row per table of every backfill (*rows, to free) and the JSON
 * array (published as GET /backfills too). Returns the rows' count. */
size_t backfills_report(sidecar *d, report_backfill **rows, buf *json);

/* resync.c */
typedef enum resync_result { RESYNC_DONE, RESYNC_RETRY, RESYNC_STOP } resync_result;
/* The slot cannot send what follows cdc's position (SOURCE_GAP): STOP unless the matching
 * source.on_* setting says resync; else the slot is moved on, the marker written after its new
 * position and the position recorded (DONE), or a step failed and d->err says why (RETRY). */
resync_result resync(sidecar *d);
/* The stream passed a re-sync marker: every subscription is backfilled (pipeline_on_resync). */
void resync_reached(void *ctx);

/* figures.c */
/* Renders the figures for the status socket: every second, or now with force. */
void figures_publish(sidecar *d, bool force);
/* While changes flow, a progress line every 30 s. */
void figures_log_progress(sidecar *d, uint64_t now);
/* The Kafka sink's counters and its commit-to-delivery latency since the start. */
void figures_log_kafka(sidecar *d);
/* Every few seconds: the slot's wal_status and safe_wal_size, warned about while in danger. */
void figures_slot_health(sidecar *d, uint64_t now);
/* Every 5 s (and at once after each start): whether the server is a standby, its timeline (a
 * standby promoted under cdc), and with source.failover whether a promotion now is safe, which
 * the log says once, then on each change. */
void figures_server(sidecar *d, uint64_t now);

#endif
