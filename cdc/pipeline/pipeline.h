/* The data path of `cdc run`, apart from the replication connection and the event loop. pgoutput
 * messages come in (pipeline_feed) and are matched against the subscriptions, built into events,
 * rendered and delivered to the sinks. Unit tests drive it with a fake source and sink. */
#ifndef CDC_PIPELINE_H
#define CDC_PIPELINE_H

#include "cdc/backfill/backfill.h"
#include "cdc/match/rules.h"
#include "decoder/base/hist.h"
#include "decoder/txn.h"
#include "sinks/sink.h"

/* Streamed and prepared transactions are rendered as their changes arrive and delivered at their
 * commit. The flushed position is how far every sink has delivered. The slot may be confirmed up to
 * it. */
typedef struct pipeline pipeline;

/* One subscription as the pipeline sees it, at the index match_rules_match() returns. name and tag are
 * borrowed and must stay valid until the next pipeline_bind(). */
typedef struct pipeline_sub {
	const char *name, *tag; /* tag NULL if none */
	sink *sink;
} pipeline_sub;

/* What a subscription's sink was handed since the start, in events and rendered bytes. */
typedef struct pipeline_count {
	uint64_t events, bytes;
} pipeline_count;

typedef struct pipeline_figures {
	uint64_t transactions; /* numbered in commit order (the sinks' seq) */
	uint64_t events;       /* delivered to some sink */
	int64_t last_commit_time;
	/* commit time to its commit read from the slot, microseconds: a sample per commit, so its count is
	 * the stream's commits (not its non-transactional messages, a backfill's watermarks among them,
	 * nor a backfill's reads, which transactions counts too) */
	const hist *received;
} pipeline_figures;

/* spill_dir must exist. endpos works like pg_recvlogical --endpos. A transaction committing after it
 * is not delivered (0 for no end). at_boundary(ctx) is called after every commit, the moment a change
 * of the subscriptions may be applied (see pipeline_between_txns). */
pipeline *pipeline_new(const char *spill_dir, uint64_t endpos, void (*at_boundary)(void *ctx), void *ctx);
void pipeline_free(pipeline *pipe);
/* reached(ctx) is called when the stream passes a re-sync marker (SOURCE_RESYNC_PREFIX), after the
 * marker went to every subscription. What a re-sync backfills is read after the marker. */
void pipeline_on_resync(pipeline *pipe, void (*reached)(void *ctx));
/* With source.ddl, the DDL trigger's messages become DDL events. Without it, only what they tell of
 * their tables (renames, NOT NULL) is used. In that case another cdc of the database installed the
 * trigger. */
void pipeline_deliver_ddl(pipeline *pipe, bool on);
/* The relation cache the decoder keeps. The source adds the keys of REPLICA IDENTITY FULL tables. */
pgo_relcache *pipeline_relcache(pipeline *pipe);

/* Sets the subscriptions from now on. It takes rs. subs run parallel to rs's subscriptions. sinks is
 * every sink instance (NULLs skipped), including ones no subscription uses any more but whose
 * deliveries still hold the flushed position. The counts of subscriptions of the same name carry over. */
void pipeline_bind(pipeline *pipe, rules *rs, const pipeline_sub *subs, size_t nsubs, sink *const *sinks,
		   size_t nsinks);
/* A new stream from start_lsn (the slot's confirmed position) with protocol opt. What was held or
 * queued for the last stream is forgotten, because the server sends it again. */
bool pipeline_start(pipeline *pipe, const pgo_options *opt, uint64_t start_lsn, char *err,
		    size_t errlen) CDC_MUST_CHECK;
/* One XLogData payload that starts at WAL position lsn. */
bool pipeline_feed(pipeline *pipe, const uint8_t *data, size_t len, uint64_t lsn, char *err,
		   size_t errlen) CDC_MUST_CHECK;
/* A keepalive says the server has sent everything up to wal_end. With nothing in flight anywhere, the
 * flushed position moves to wal_end, so an idle slot never pins WAL. */
void pipeline_keepalive(pipeline *pipe, uint64_t wal_end);

/* Flushes every sink, then moves the flushed position as far as every sink has delivered (never past
 * a held prepared transaction). When it returns other than SINK_OK, *failed is the sink and err says
 * why. */
sink_status pipeline_flush(pipeline *pipe, sink **failed, char *err, size_t errlen);
/* After SINK_RESTART, forgets every transaction not yet confirmed and gives sk a fresh client. The
 * caller streams again from the slot's confirmed position. */
bool pipeline_restart_sink(pipeline *pipe, sink *sk, char *err, size_t errlen) CDC_MUST_CHECK;
/* Whether a sink has too much in flight. Stop feeding until it drains. */
bool pipeline_busy(const pipeline *pipe);
/* At a stop, waits for every asynchronous sink's messages in flight, up to timeout_ms each. */
void pipeline_finish(pipeline *pipe, int timeout_ms);

/* Whether pipeline_bind() may run. That is between transactions, with no streamed or prepared
 * transaction held. Their records were rendered for the subscriptions in force when their changes
 * arrived. */
bool pipeline_between_txns(const pipeline *pipe);
/* Inside a transaction (or a stream block) of the current stream. */
bool pipeline_in_txn(const pipeline *pipe);
/* The position every sink has delivered up to. It may be recorded and confirmed to the slot. */
uint64_t pipeline_flushed(const pipeline *pipe);
/* Where the last transaction ended (or the idle server's position). A change of the subscriptions
 * bound now applies to every transaction committing at or after it. */
uint64_t pipeline_boundary(const pipeline *pipe);
/* With endpos, whether everything up to it is flushed, or a transaction beyond it arrived. */
bool pipeline_at_endpos(const pipeline *pipe);

/* Backfills (cdc/backfill). The stream's watermarks (logical messages with prefix BFSQL_PREFIX) close
 * their chunks. A chunk's reads are delivered to the subscription's sink at the watermark's place, as
 * a transaction of their own. They are durable once the flushed position passes the watermark. The
 * keys of every change are reported where it is delivered, at its commit. A held transaction's keys
 * are in its spill record. The pipeline asks the backfills only through these hooks, which the daemon
 * sets (cdc/daemon/backfills.c). ctx is theirs. */
typedef struct pipeline_backfills {
	void *ctx;
	/* A change's keys where it is delivered. change->xid is its top-level transaction's. */
	void (*change)(void *ctx, const bf_change *change);
	/* hold appends a change of a held transaction as bytes to its spill record (xid not
	 * included). replay gets those bytes at the transaction's commit, false if they are malformed. */
	void (*hold)(const bf_change *change, buf *out);
	bool (*replay)(void *ctx, const void *data, size_t len, uint32_t xid);
	/* A watermark at lsn. emit(emit_ctx, ...) gets the reads of a chunk whose window it closes.
	 * emit's failure is returned. */
	bool (*watermark)(void *ctx, const char *content, size_t len, uint64_t lsn, bf_emit_fn emit,
			  void *emit_ctx, char *err, size_t errlen);
	/* The next read of a batch emit was given. values gets its columns. *pos starts at 0. */
	bool (*next_read)(const bf_batch *batch, size_t *pos, bf_datum *values);
} pipeline_backfills;
/* The hooks are copied. NULL for no backfills. */
void pipeline_set_backfills(pipeline *pipe, const pipeline_backfills *backfills);

/* Signals (source.signal_table). Each row inserted into that table is handed on where the insert is
 * delivered, at its commit, with its commit LSN and tx_index. A held transaction's rows are handed on
 * at its replay, so an aborted one's never are. The row still goes to the subscriptions that match the
 * table. */
typedef struct pipeline_signal {
	uint64_t commit_lsn;
	uint32_t tx_index;
	/* the columns id, type and data as text, NULL for SQL NULL or when the table has no such column */
	const char *id, *type, *data;
	size_t id_len, type_len, data_len;
} pipeline_signal;
typedef void (*pipeline_signal_fn)(void *ctx, const pipeline_signal *signal);
/* table is one table's name (match_table_name_problem), NULL for none. It is copied. */
void pipeline_set_signals(pipeline *pipe, const char *table, pipeline_signal_fn fn, void *ctx);

pipeline_figures pipeline_get_figures(const pipeline *pipe);
pipeline_count pipeline_sub_count(const pipeline *pipe, size_t sub);
/* The transaction assembler's figures (zeros before the first stream). */
txn_stats pipeline_held(const pipeline *pipe);

#endif
