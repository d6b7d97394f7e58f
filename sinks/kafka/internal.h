/* internal.h: what the Kafka sink's two files share: its state, the rendered form of an
 * event, and the helpers that produce. kafka_sink.c is the sink (rendering, producing, delivery
 * reports, the producer's life); exactly_once.c is its exactly-once cycle (kafka.exactly_once). Not for
 * other rooms: they use kafka_sink.h. */
#ifndef CDC_KAFKA_INTERNAL_H
#define CDC_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>

#include "decoder/base/ring.h"
#include "sinks/kafka/kafka_sink.h"

/* A transaction with messages in flight. */
typedef struct kafka_txn {
	uint64_t seq;
	uint64_t outstanding;
	int64_t commit_time; /* for the commit-to-delivery latency */
} kafka_txn;

/* A topic's handle, by name. */
typedef struct kafka_topic {
	char *name;
	rd_kafka_topic_t *rkt;
} kafka_topic;

typedef struct table_count {
	char *schema, *table;
	uint64_t events;
} table_count;

typedef struct kafka_sink {
	sink base;
	/* copies of the settings last bound */
	kafka_sink_settings set;
	kafka_sub_settings *subs;
	size_t nsubs;
	rd_kafka_t *rk;
	int pipe[2]; /* the main queue's event signal */
	size_t busy_at, busy_bytes;
	uint64_t queued_bytes; /* keys and values in librdkafka's queue, as its kbytes limit counts */
	bool own_gapless;      /* cdc set enable.gapless.guarantee, not kafka.properties */
	kafka_topic *topics;   /* sorted by name; of rk */
	size_t ntopics, captopics;

	ring q; /* of kafka_txn, in seq order */
	uint64_t last_ended;

	bool failed;
	char failure[1100];
	kafka_stats stats;

	/* The transaction being delivered, for its transactions_topic record. */
	uint64_t cur_seq;
	uint32_t cur_xid;
	sink_commit cur_commit;
	table_count *tables;
	size_t ntables, captables;
	uint64_t cur_events;

	buf value;	   /* one message value: rendered head + commit tail */
	struct kafka_hdr { /* the commit's header values, of the last message's transaction */
		bool set;
		uint64_t commit_lsn;
		uint32_t xid;
		char commit[LSN_STRLEN], xid_text[16];
	} hdr;

	kafka_stream_fn stream_fn; /* kafka_sink_watch_stream */
	void *stream_ctx;

	/* Exactly once (set.exactly_once). */
	char tid[256]; /* the producer's transactional.id */
	buf held;      /* what arrived while a commit was under way (held_hdr, data), in order */
	struct kafka_eo {
		bool ready;		/* transactions initialised, position read back */
		bool open;		/* a Kafka transaction is open */
		bool committing;	/* its commit is under way: nothing may be produced */
		bool position_sent;	/* ... and its position record is produced */
		bool ending;		/* ... and EndTxn is called: it cannot be called back */
		uint64_t stream;	/* the stream its source transactions came on (stream_fn) */
		uint64_t position;	/* commit LSN of the newest source transaction Kafka holds */
		uint64_t committed_seq; /* every seq up to it is committed (or had nothing for Kafka) */
		uint64_t commit_seq;	/* last_ended when the commit began */
		uint64_t opened_ms, events;
		uint64_t woken_ms; /* the brokers' threads last woken (send_now) */
		/* the newest source transaction in the open Kafka transaction */
		uint64_t last_seq;
		sink_commit last;
		uint32_t last_xid;
		uint64_t skipped_seq;
		bool skip_logged;
		/* per source transaction in the open Kafka transaction: the latency is to its commit */
		struct eo_source {
			int64_t commit_time;
			uint64_t events;
		} * sources;
		size_t nsources, capsources;
	} eo;
} kafka_sink;

/* The rendered form (sink-private, may be spilled to disk): a header, then the fields, then the
 * packed cdc.v1.Event without its commit fields. */
typedef struct rendered {
	uint32_t topic_len, key_len, prev_key_len, sub_len, schema_len, table_len;
	uint32_t xid;
	uint64_t lsn;
	uint64_t schema_id;    /* cdc-schema-id (0: none) */
	uint8_t op, tombstone; /* tombstone: after a delete; for prev_key when an update changed the key */
} rendered;

/* Exactly once: one delivery (or, with end set, one end_txn) held while a commit is under way. */
typedef struct held_hdr {
	uint64_t seq;
	sink_commit c;
	uint32_t sub, len;
	bool end;
} held_hdr;

void kafka_fail(kafka_sink *k, const char *what, const char *reason);
/* Produces one message of transaction seq (waiting while librdkafka's queue is full); false after
 * kafka_fail(). Takes h. */
bool kafka_produce(kafka_sink *k, const char *topic, int32_t partition, const void *key, size_t key_len,
		   const void *value, size_t value_len, rd_kafka_headers_t *h, uint64_t seq);
/* The cdc-* headers of an event (type "Event") or of a record about a transaction ("Transaction"). */
rd_kafka_headers_t *kafka_headers(kafka_sink *k, const rendered *r, const char *sub, uint64_t commit_lsn,
				  const char *type);
/* The sink's deliver() and end_txn(), for what the exactly-once cycle held. */
bool kafka_deliver(sink *base, uint32_t subscription, const char *data, size_t len, const sink_commit *c,
		   uint64_t seq, char *err, size_t errlen);
void kafka_end_txn(sink *base, uint64_t seq);

/* exactly_once.c. Whether deliveries and ends are held now (a commit is under way, or what it held is
 * not sent yet). */
bool kafka_eo_holding(const kafka_sink *k);
void kafka_eo_hold(kafka_sink *k, const held_hdr *h, const char *data);
/* Before producing an event of source transaction seq (commit c): false to leave it out (Kafka
 * holds it, or the sink failed). */
bool kafka_eo_admit(kafka_sink *k, const sink_commit *c, uint32_t xid, uint64_t seq);
/* As far as the cycle goes now (from flush(); force at a stop): false with err when a held delivery
 * failed for good. */
bool kafka_eo_step(kafka_sink *k, bool force, char *err, size_t errlen);
/* Aborts the open Kafka transaction (its messages are purged). */
void kafka_eo_abort(kafka_sink *k);
/* At a stop: false if the open Kafka transaction cannot commit (a source transaction is partly in
 * it, or the stream is lost) and was aborted. */
bool kafka_eo_can_finish(kafka_sink *k);

#endif
