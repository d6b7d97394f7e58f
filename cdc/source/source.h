/* The PostgreSQL side. It checks (and with source.create makes) the publication and the pgoutput slot,
 * and compares the slot with the position recorded in state_dir. It streams at the server's highest
 * pgoutput protocol and sends standby status updates. */
#ifndef CDC_SOURCE_H
#define CDC_SOURCE_H

#include "cdc/config/config.h"
#include "cdc/source/catalog.h"
#include "cdc/source/failover.h"
#include "cdc/source/state.h"
#include "decoder/pgoutput.h"

/* A second, ordinary connection runs the setup queries and the heartbeat. Streaming uses
 * START_REPLICATION. */

/* Prefix of the logical messages source.heartbeat writes. They are never delivered as events. */
#define SOURCE_HEARTBEAT_PREFIX "cdc.heartbeat"
/* Prefix of the logical message a re-sync writes. It is delivered to every subscription as its marker. */
#define SOURCE_RESYNC_PREFIX "cdc.resync"

typedef enum source_result {
	SOURCE_OK,
	SOURCE_RETRY, /* transient (connection lost or refused, slot busy), so try again later */
	SOURCE_FATAL, /* needs a human, and the message says what happened and what to do */
	/* The slot cannot send what follows cdc's position (source_gap() says why). A human, or a
	 * re-sync (source_resync), must decide. The message says what happened and the ways out. */
	SOURCE_GAP,
	/* Another process streams the slot (source_holder() says which). Wait as a standby. */
	SOURCE_BUSY,
} source_result;

typedef enum source_gap_kind {
	SOURCE_GAP_SLOT_LOST,	      /* dropped, or its WAL is gone (wal_status lost) */
	SOURCE_GAP_PUBLICATION_NEWER, /* created after the slot's position, so the server cannot decode */
} source_gap_kind;

typedef struct source_handler {
	void *ctx;
	/* One XLogData payload (a pgoutput message) that starts at WAL position lsn. */
	bool (*xlogdata)(void *ctx, const uint8_t *data, size_t len, uint64_t lsn, char *err, size_t errlen);
	/* A keepalive says the server has sent everything up to wal_end. */
	bool (*keepalive)(void *ctx, uint64_t wal_end, bool reply_requested, char *err, size_t errlen);
} source_handler;

typedef struct source source;

/* What the source takes of the configuration (its source section and state_dir). The daemon fills it
 * (cdc/daemon/setup.c). */
typedef struct source_settings {
	const char *dsn, *slot, *publication;
	const char *primary_dsn; /* NULL if none */
	const char *password;	 /* source.password, for dsn and primary_dsn when they have none, or NULL */
	const char *state_dir;	 /* NULL for "." */
	bool create, failover, ddl, generated_columns;
	bool heartbeat;		    /* source.heartbeat is set */
	const char *const *publish; /* source.publish's patterns */
	size_t npublish;
	const char *signal_table; /* published too (source.signal_table), NULL if none */
} source_settings;

/* Copies what it needs from set. */
source *source_new(const source_settings *set);
void source_free(source *src);
/* source.password was read again (a reload). The next connection uses it (NULL if none). */
void source_set_password(source *src, const char *password);

/* Replaces in err (NUL-terminated, errlen bytes) every password of source.dsn and of PGPASSWORD by
 * "********", cutting the message short if it must. Passwords are password and sslpassword, also inside
 * a dbname that is a connection string, when 4 bytes or longer. Every error the source returns has been
 * through it already. It is for messages about the source made elsewhere. */
void source_redact(const source *src, char *err, size_t errlen);

/* Connects and starts streaming. st is the recorded position (have_st false on a first run). On
 * success it holds the position streaming starts from, to be recorded by the caller. The primary keys
 * of published REPLICA IDENTITY FULL tables go to rc. The catalog the subscriptions are checked
 * against (source_catalog_check) goes to cat. The caller frees cat, also after a failure. */
source_result source_start(source *src, state *st, bool have_st, pgo_relcache *rc, catalog *cat, char *err,
			   size_t errlen);
/* The replication connection's socket while streaming, else -1. */
int source_fd(const source *src);
/* False once the server closed the replication connection, although what it sent last is not read
 * yet. A walsender may have ended while this process was stopped, say. It asks the kernel and reads
 * nothing. */
bool source_connected(const source *src);
const pgo_options *source_protocol(const source *src);
/* The server's version number (150008 for 15.8) while connected, else 0. */
int source_server_version(const source *src);
/* The database the slot streams (the connection's, defaults applied), NULL before a connect. */
const char *source_database(const source *src);
/* Drains everything the server has sent, calling handler for each message. */
source_result source_read(source *src, const source_handler *handler, char *err, size_t errlen);
/* Reading a backlog in larger pieces. The server sends one message per write, so a reader faster than
 * its decoding wakes for every few hundred bytes. A drain of 1,000,000 rows woke cdc 120,000 to
 * 350,000 times, and those wake-ups doubled its CPU. While on, the socket is readable only once
 * SOURCE_BATCH_BYTES have arrived (SO_RCVLOWAT). source_read then takes all the kernel holds, up to
 * SOURCE_BATCH_READS of libpq's buffers. The caller must then also read every few milliseconds, for
 * what stays below the mark. */
#define SOURCE_BATCH_BYTES (64 * 1024)
#define SOURCE_BATCH_READS 16
void source_batch(source *src, bool on);
/* Whether the replication connection is a Unix socket, whose readiness ignores SO_RCVLOWAT: the caller
 * then reads a backlog on a timer instead (daemon.c, watch_read). */
bool source_unix_socket(const source *src);
/* Sends a standby status update, saying received up to write_lsn and durable up to flush_lsn. */
source_result source_send_status(source *src, uint64_t write_lsn, uint64_t flush_lsn, bool reply, char *err,
				 size_t errlen);
/* True while output is queued in libpq (wait for the socket to be writable, then call again). */
bool source_output_pending(source *src);
/* The PID (on the server) of the walsender that held the slot at the last SOURCE_BUSY. */
int source_holder(const source *src);
/* A standby saw another process stream the slot. The slot's position may then be ahead of the one
 * recorded in state_dir, because the other cdc moved it. A start otherwise refuses that. */
void source_after_standby(source *src, bool yes);
/* Why the last SOURCE_GAP came. */
source_gap_kind source_gap(const source *src);
/* Re-syncs after a gap. It recreates a lost slot, or moves the slot to the server's current WAL
 * position (past the publication's creation). *lsn gets the slot's new position. That is after every
 * position cdc has recorded (*st) or read. A promoted server's history may have forked before them.
 * cdc then first writes the WAL up past them, so that positions never repeat for the sinks and
 * consumers. The sinks skip what they hold by commit LSN. st->timeline becomes the server's. Changes
 * before *lsn are skipped. The caller backfills the tables, then writes the marker
 * (source_resync_marker). */
source_result source_resync(source *src, source_gap_kind gap, state *st, uint64_t *lsn, char *err,
			    size_t errlen);
/* Writes the marker, a non-transactional logical message SOURCE_RESYNC_PREFIX with content json,
 * into the WAL after the slot's new position, so every consumer sees where the re-sync happened. */
source_result source_resync_marker(source *src, const char *json, char *err, size_t errlen);
/* Keeps the publication holding the tables source.publish matches (with source.create). When due, it
 * lists the matching tables the publication lacks. On a later call it adds those cdc's role owns
 * (ALTER PUBLICATION ... ADD TABLE). A table it may not add is warned about once, with the statement
 * its owner runs. It does not block. Call it from every tick while streaming. The tables added since
 * the last call are appended to added, schema then table. False with err when a step failed. */
bool source_keep_publication(source *src, bool due, cfg_strlist *added, char *err,
			     size_t errlen) CDC_MUST_CHECK;
/* Reads the catalog (source_catalog_sql) through the ordinary connection without blocking. Call again until
 * *out gets one whose query went out at or after asked_ms. The caller frees it. False with err if the
 * connection or the query failed. */
bool source_read_catalog(source *src, uint64_t asked_ms, catalog **out, char *err,
			 size_t errlen) CDC_MUST_CHECK;
/* Writes a heartbeat message through the ordinary connection, without blocking. Its return value
 * reports the outcome of the previous one. False means it failed, and err says why. */
bool source_heartbeat(source *src, char *err, size_t errlen);

/* The server the last start reached. */
typedef struct source_server {
	uint32_t timeline; /* IDENTIFY_SYSTEM's */
	bool in_recovery;  /* a hot standby, where cdc decodes a slot made there (PostgreSQL 16+) */
	char host[128];	   /* host:port of the replication connection (PQhost, PQport) */
	/* The last start found a newer timeline than the one cdc recorded or streamed last. That means
	 * a promotion since (or a point-in-time recovery). 0 if none. */
	uint32_t promoted_from;
	char previous_host[128]; /* the host:port of the stream before, if this process had one */
} source_server;
const source_server *source_server_info(const source *src);

/* For source.failover, whether a promotion now is safe (the primary's synchronized_standby_slots). */
typedef struct source_failover {
	bool known;
	failover_reason reason;
	bool slot_failover; /* the slot's own failover flag */
	char setting[256];  /* synchronized_standby_slots as the primary has it */
	char why[512];	    /* what is wrong and what to set, "" when ready */
} source_failover;
/* Every few seconds, asks whether the server is still a standby, and its timeline. A standby promoted
 * while cdc streams from it goes on streaming. With source.failover on PostgreSQL 17+, it also asks
 * whether a promotion now is safe. It collects the answer of the last question without blocking. With
 * *ask, it sends the next. *ask becomes whether it went out, which it does not while another query
 * runs. *failover gets the last failover answer (unknown without source.failover). source_server_info()
 * gives the rest. False with err if the ordinary connection failed. */
bool source_poll_server(source *src, bool *ask, source_failover *failover, char *err, size_t errlen);

/* The slot's health as pg_replication_slots tells it. */
typedef struct source_slot_health {
	bool known;
	char wal_status[16];	  /* reserved, extended, unreserved, lost */
	bool safe_wal_size_known; /* NULL unless max_slot_wal_keep_size is set */
	int64_t safe_wal_size;	  /* bytes that may still be written before the slot risks losing WAL */
	int64_t max_keep_size;	  /* max_slot_wal_keep_size in bytes, -1 for unlimited */
	uint64_t server_lsn;	  /* the server's WAL position, known even while reading is paused */
	/* From PostgreSQL 17 (has_invalidation false before), why the slot was invalidated ("" while it
	 * is valid), and since when no process has streamed it (0 while one does). */
	bool has_invalidation;
	char invalidation_reason[32];
	int64_t inactive_since_us; /* µs since the Unix epoch */
	int64_t idle_timeout_s;	   /* idle_replication_slot_timeout (0 off) from PostgreSQL 18, -1 before */
} source_slot_health;
/* Asks for the slot's health through the ordinary connection without blocking. *health gets the last
 * answer (known false until one came). False with err if the connection failed. */
bool source_poll_slot_health(source *src, source_slot_health *health, char *err, size_t errlen);
void source_disconnect(source *src);

#endif
