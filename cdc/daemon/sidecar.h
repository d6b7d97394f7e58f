/* The state of `cdc run` that its files share, one struct per job: the connection and loop (daemon.c),
 * reloads and live changes (reload.c), figures for status and log (figures.c). sidecar.c holds what
 * they all call, and calls none of them. The data path is pipeline.h's. Internal to cdc/daemon/. */
#ifndef CDC_SIDECAR_H
#define CDC_SIDECAR_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/backfill/reader.h"
#include "cdc/backfill/request.h"
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
	state st; /* st.flushed_lsn is recorded in state_dir and may be sent */
	struct event *ev_read, *ev_write, *ev_retry;
	bool streaming, reply_requested;
	bool paused;	 /* a sink is busy, so the slot is not read until it catches up */
	bool got_data;	 /* XLogData in the current drain (last_data_ms is set once per drain) */
	bool batching;	 /* reading a backlog in larger pieces (source_batch, daemon.c) */
	int batch_timer; /* a timerfd: its ticks read a backlog over a Unix socket (watch_read), or -1 */
	uint64_t backoff_ms;
	uint64_t streams; /* how many times streaming started, the stream's number */
	int standby;	  /* the PID of the walsender that streams the slot for another process, or 0 */
	uint64_t received_lsn;
	uint64_t sent_flush_lsn; /* confirmed to the server, st.flushed_lsn when it was sent */
	uint64_t handled_lsn;	 /* the sinks' position last handled (posted for recording) */
	uint64_t last_feedback_ms, last_data_ms, last_heartbeat_ms;
	bool heartbeat_warned;
	uint64_t publication_ms; /* when the publication's tables were last listed, 0 if due now */
} connection;

/* Subscriptions of the overlay that cdc runs without, each with its problem (reload.c). */
typedef struct aside_list {
	struct aside {
		char *name, *reason;
	} * v;
	size_t n;
} aside_list;

/* SIGHUP, PUT and DELETE, applied at a transaction boundary once the subscriptions they add or
 * change passed their checks against the catalog (reload.c). */
typedef struct reloads {
	bool pending;
	uint64_t pending_ms;  /* when the reload under way was asked for (its catalog is read after) */
	bool waits_for_db;    /* it needs the catalog while not connected ("reload waits" said) */
	bool hup;	      /* the pending reload includes a SIGHUP's, so systemd is told when it is done */
	cfg_overlay *overlay; /* subscriptions changed over the status socket (state_dir) */
	/* PUT and DELETE requests waiting for the next transaction boundary, in arrival order. Puts
	 * hold their parsed subscription, and the warnings of its checks. */
	struct live_change {
		status_request *req;
		cfg_subscription *put; /* NULL for a delete */
		buf warnings;
	} * changes;
	size_t nchanges;
	aside_list aside;
	catalog *catalog; /* read for the reload under way, NULL until then */
} reloads;

/* Figures no other part keeps (figures.c). */
typedef struct figures {
	uint64_t start_ms, last_publish_ms, server_wal_lsn, reconnects, errors_stream, errors_connect;
	uint64_t resyncs;	/* re-syncs after a lost slot or a publication newer than it */
	uint64_t backlog_reads; /* times the slot began to be read as a backlog (daemon.c, choose_batching) */
	uint64_t promotions;	/* starts that followed a promotion (a newer timeline) */
	char server_version[32];
	/* what the last progress line reported */
	uint64_t logged_events, logged_seq, last_progress_ms;
	uint64_t last_health_ms;
	source_slot_health health;
	char slot_warning[256];	  /* why the slot is in danger of losing WAL, "" when it is not */
	uint64_t last_server_ms;  /* the server's role last asked (0 to ask now) */
	source_failover failover; /* its last answer (source.failover) */
	char not_ready[192];	  /* /readyz's reason when it is made up */
	/* How late each tick of the event loop came (after the one before, plus its interval): the time
	 * the loop spent elsewhere, or waiting for a core. */
	hist loop_lag;
	uint64_t last_tick_us;
} figures;

/* Backfills asked for from SQL, as rows of source.signal_table (signals.c). */
typedef struct signals {
	/* the last signal acted on, by its position. The stream may bring it again after a crash. */
	bool done;
	uint64_t done_lsn;
	uint32_t done_index;
	/* the backfills signals started, which a stop-snapshot signal may cancel */
	struct signal_started {
		char *signal, *subscription;
		char id[BF_ID_SIZE];
		cfg_strlist tables; /* the signal's names of the tables it reads */
	} * started;
	size_t nstarted;
	uint64_t received, refused, backfills_started, backfills_stopped;
	buf last; /* the last signal and what came of it, a JSON object ("" before the first) */
} signals;

typedef struct sidecar {
	cfg *cfg;
	const char *cfg_path;
	int exit_code;
	struct event_base *base;
	struct event *ev_tick, *ev_sig[3], *ev_state;
	int lock_fd;
	state_writer *sw; /* records the position off the loop. conn.st is what it has on disk. */
	pipeline *pipe;
	sink_set sinks;
	status_server *status;
	bf_set *bf; /* backfills (backfills.c) */
	bf_reader *bf_reader;
	char *bf_path; /* the backfills' state file */
	/* POST /subscriptions/NAME/backfill requests answered once their backfill's checks are done */
	struct bf_waiting {
		status_request *req;
		char id[BF_ID_SIZE];
		uint64_t since_ms;
	} * bf_waiting;
	size_t nbf_waiting;
	signals sig;
	connection conn;
	reloads rl;
	figures fig;
	char err[1024];
} sidecar;

/* sidecar.c, what the other files call, which calls none of them */
/* Logs sc->err under what and stops the loop with exit code code. */
void daemon_sidecar_fail(sidecar *sc, int code, const char *what);
/* Binds the sinks and the pipeline to sc->cfg with rules rs, which it takes. It creates the sinks it
 * needs first. False with sc->err when a sink cannot start. */
bool daemon_sidecar_bind(sidecar *sc, rules *rs) CDC_MUST_CHECK;
/* Tells the sinks the database's name (Debezium's source.db), once connected. */
void daemon_sidecar_tell_database(sidecar *sc);
/* Answers req with {"error": error, "details": [lines of details]}. details may be NULL. */
void daemon_sidecar_answer_error(sidecar *sc, status_request *req, unsigned code, const char *error,
				 const char *details);

/* daemon.c */
/* Records st in state_dir now, before what follows relies on it. It waits for the writer's thread.
 * False with sc->err. */
bool daemon_sidecar_record(sidecar *sc, const state *st) CDC_MUST_CHECK;
/* Hands the writer's thread the position flushed, when it passed the last one handed. It also hands
 * the backfills' state file when that changed, and the thread writes the file first. The file holds
 * the keys to read again that changes before the marked position touched. A restart from that
 * position would not replay those changes. */
void daemon_sidecar_post(sidecar *sc, uint64_t flushed);

/* reload.c */
/* Lays the overlay of state_dir over sc->cfg at the start. A subscription of it that the
 * configuration cannot take is set aside. False (exit code 2) if the file is unusable. */
bool daemon_reload_init(sidecar *sc);
/* Checks the running subscriptions against the catalog at every connect, before streaming. It takes
 * cat. A subscription of the overlay that fails is set aside, so cdc runs without it and /status says
 * why. A subscription of the file that fails stops cdc. It returns false, with sc->err naming the
 * problem and its fix. first is true at the first connect, whose warnings are logged. */
bool daemon_reload_connected(sidecar *sc, catalog *cat, bool first);
void daemon_reload_free(sidecar *sc);
/* On SIGHUP, reloads now if at a transaction boundary, else at the next one. */
void daemon_reload_request(sidecar *sc);
/* Applies a pending reload if at a transaction boundary. */
void daemon_reload_maybe(sidecar *sc);
/* PUT and DELETE /subscriptions/NAME (the status server's control callback, ctx is the sidecar). */
void daemon_reload_on_control(void *ctx, status_request *req);

/* backfills.c */
/* Sets up the backfills kept in state_dir, their reader, and the `snapshot: true` subscriptions seen
 * for the first time. False (logged) if state_dir's backfill file is unusable. */
bool daemon_backfills_init(sidecar *sc);
void daemon_backfills_free(sidecar *sc);
/* Follows a reload's settings and its removed and added subscriptions. old is the configuration
 * before. */
void daemon_backfills_reloaded(sidecar *sc, const cfg *old);
/* Subscription name is gone from the running configuration. Its backfills are forgotten. */
void daemon_backfills_removed(sidecar *sc, const char *name);
/* Tables were added to the publication (schema, table pairs). The `snapshot: true` subscriptions
 * that have them backfill them, since the stream has none of their rows from before. */
void daemon_backfills_tables_added(sidecar *sc, const cfg_strlist *added);
/* Queues a backfill of sub, of every table or of those of req. id gets its id. False with a message.
 * Its checks run on the reader's connection. A refused one fails with the reason in GET /backfills. */
bool daemon_backfills_queue(sidecar *sc, const cfg_subscription *sub, const bf_request_body *req,
			    bool snapshot, char id[BF_ID_SIZE], char *err, size_t errlen) CDC_MUST_CHECK;
/* POST /subscriptions/NAME/backfill and DELETE /subscriptions/NAME/backfill/ID. */
void daemon_backfills_on_control(sidecar *sc, status_request *req);
/* A re-sync marker was reached. Queues a backfill of every subscription (every table of it). It
 * appends [{"subscription", "backfill": ID}] to ids. */
bool daemon_backfills_resync(sidecar *sc, buf *ids, char *err, size_t errlen);
/* The sinks made everything before flushed durable. */
void daemon_backfills_delivered(sidecar *sc, uint64_t flushed);
/* The path of the backfills' state file, with its new contents appended to out, when it changed.
 * NULL when it did not. */
const char *daemon_backfills_state(sidecar *sc, buf *out);
/* Whether a backfill's table waits only for its last chunks to be durable. */
bool daemon_backfills_draining(const sidecar *sc);
/* The stream starts again from the slot's confirmed position. */
void daemon_backfills_restart(sidecar *sc);
/* The backfills read from the primary (source.primary_dsn) while the source is a standby, else from
 * source.dsn. This is settled at each start, and when a standby cdc streams from is promoted. */
void daemon_backfills_follow(sidecar *sc);
/* Something may be due for the reader. */
void daemon_backfills_kick(sidecar *sc);
/* Called every tick. It refuses requests whose checks take too long (the database does not answer). */
void daemon_backfills_tick(sidecar *sc, uint64_t now);
/* GET /backfills from now on. */
void daemon_backfills_publish(sidecar *sc);
/* For /status and /metrics, one row per table of every backfill (*rows, to free) and the JSON array
 * (published as GET /backfills too). Returns the rows' count. */
size_t daemon_backfills_report(sidecar *sc, report_backfill **rows, buf *json);

/* signals.c */
/* With source.signal_table, reads what signals did before (state_dir/signals.json). The pipeline
 * hands each signal row on from now. False (logged) if the file is unusable. */
bool daemon_signals_init(sidecar *sc);
void daemon_signals_free(sidecar *sc);
/* Their figures for /status and /metrics. */
void daemon_signals_report(const sidecar *sc, report *rep);

/* resync.c */
typedef enum resync_result { RESYNC_DONE, RESYNC_RETRY, RESYNC_STOP } resync_result;
/* The slot cannot send what follows cdc's position (SOURCE_GAP). Returns STOP unless the matching
 * source.on_* setting says resync. Otherwise it moves the slot on, writes the marker after its new
 * position and records the position (DONE). RETRY means a step failed, and sc->err says why. */
resync_result daemon_resync(sidecar *sc);
/* The stream passed a re-sync marker. Every subscription is backfilled (pipeline_on_resync). */
void daemon_resync_reached(void *ctx);

/* figures.c */
/* A tick of the event loop, every interval_us: how late it came goes into the loop's lag histogram. */
void daemon_figures_tick(sidecar *sc, uint64_t now_us, uint64_t interval_us);
/* Renders the figures for the status socket every second, or now with force. */
void daemon_figures_publish(sidecar *sc, bool force);
/* While changes flow, a progress line every 30 s. */
void daemon_figures_log_progress(sidecar *sc, uint64_t now);
/* The sinks' counters and their commit-to-delivery latency since the start, in the log. */
void daemon_figures_log_sinks(sidecar *sc);
/* Every few seconds, reads the slot's wal_status and safe_wal_size, and warns while in danger. */
void daemon_figures_slot_health(sidecar *sc, uint64_t now);
/* Every 5 s (and at once after each start), asks whether the server is a standby and its timeline
 * (a standby promoted under cdc). With source.failover it also asks whether a promotion now is safe.
 * The log says that once, then on each change. */
void daemon_figures_server(sidecar *sc, uint64_t now);

#endif
