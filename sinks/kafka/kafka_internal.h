/* What the Kafka sink's files share: its state, the rendered form of an event, and the helpers that
 * produce. kafka_sink.c is the sink, render.c renders, exactly_once.c runs kafka.exactly_once's cycle.
 * Other folders use kafka_sink.h instead. */
#ifndef CDC_KAFKA_INTERNAL_H
#define CDC_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>

#include "decoder/base/ring.h"
#include "sinks/debezium.h"
#include "sinks/event_json.h"
#include "sinks/kafka/kafka_sink.h"

/* kafka_sink.c produces, takes the delivery reports and runs the producer's life. render.c renders
 * events and transaction records in each format. */

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

typedef dbz_count table_count;

typedef struct kafka_sink {
	sink base;
	/* copies of the settings last bound */
	kafka_sink_settings set;
	kafka_sub_settings *subs;
	size_t nsubs;
	rd_kafka_t *rk;
	int pipe[2];		     /* the main queue's event signal */
	uint64_t request_timeout_ms; /* the producer's request.timeout.ms */
	uint64_t message_max_bytes;  /* ... and message.max.bytes */
	size_t busy_at, busy_bytes;
	uint64_t queued_bytes; /* keys and values in librdkafka's queue, as its kbytes limit counts */
	bool own_gapless;      /* cdc set enable.gapless.guarantee, not kafka.properties */
	kafka_topic *topics;   /* sorted by name, of rk */
	size_t ntopics, captopics;

	ring q; /* of kafka_txn, in seq order */
	uint64_t last_ended;

	bool failed;
	bool for_good; /* the failure recurs whatever is retried, so the sink stops cdc */
	char failure[1100];
	kafka_stats stats;

	/* The transaction being delivered, for its transactions_topic records. */
	uint64_t cur_seq;
	uint32_t cur_xid;
	sink_commit cur_commit;
	kafka_format cur_format; /* of its events (one, with a transactions topic) */
	bool cur_schemas;	 /* ... and whether with schemas */
	bool begun;		 /* Debezium's BEGIN record is produced */
	table_count *tables;
	size_t ntables, captables;
	uint64_t cur_events;

	char *database; /* kafka_sink_set_database */
	/* For format avro, the schemas and their ids. While records wait for an id (registry_wait),
	 * wait_schema is the index of the one the first of them needs. Then the transactions topic's
	 * schemas. */
	kafka_subjects *subjects;
	bool registry_wait;
	uint32_t wait_schema, txn_key_schema, txn_value_schema;
	unsigned wait_logged; /* the failed attempts logged */
	/* the renderer's scratch. Nothing is allocated per event once they have grown. */
	buf topic, key, prev_key, key_out;
	/* What topic was made of ("SCHEMA\0TABLE\0TAG"), for subscription topic_sub. Events come in
	 * runs of one table, and the name is made again only when these change (bind resets it). */
	buf topic_of;
	uint32_t topic_sub;
	dbz_scratch dbz;
	json_commit jcommit; /* the JSON format's commit fields, rendered once a transaction */
	json_cache json;     /* the JSON format's names */
	buf value;	     /* one message value, rendered head + commit tail */
	struct kafka_hdr {   /* the commit's header values, of the last message's transaction */
		bool set;
		uint64_t commit_lsn;
		uint32_t xid;
		char commit[LSN_STRLEN], xid_text[16];
		size_t commit_len, xid_len;
	} hdr_cache;

	kafka_stream_fn stream_fn; /* kafka_sink_watch_stream */
	void *stream_ctx;

	/* Exactly once (set.exactly_once). */
	char tid[256]; /* the producer's transactional.id */
	buf held;      /* what arrived while a commit was under way (held_hdr, data), in order */
	struct kafka_eo {
		bool ready;		/* transactions initialised, position read back */
		bool open;		/* a Kafka transaction is open */
		bool committing;	/* its commit is under way, and nothing may be produced */
		bool position_sent;	/* ... and its position record is produced */
		bool ending;		/* ... and its end is called, on end_thread (eo_end_start) */
		uint64_t stream;	/* the stream its source transactions came on (stream_fn) */
		uint64_t position;	/* commit LSN of the newest source transaction Kafka holds */
		uint64_t committed_seq; /* every seq up to it is committed (or had nothing for Kafka) */
		uint64_t commit_seq;	/* last_ended when the commit began */
		uint64_t opened_ms, events;
		uint64_t woken_ms; /* the brokers' threads last woken (send_now) */
		uint64_t asked_ms; /* librdkafka last asked whether the transaction failed */
		uint64_t end_ms;   /* the commit's end called */
		pthread_t end_thread;
		atomic_bool end_done; /* ... returned, with end_error */
		rd_kafka_error_t *end_error;
		/* the errors librdkafka reported on end_thread (kafka_eo_defer_error), for the event loop */
		struct eo_deferred {
			int err;
			char reason[256];
		} end_errors[4];
		size_t nend_errors;
		/* The transaction's end timed out. The next restart makes a new producer. */
		bool renew;
		/* the newest source transaction in the open Kafka transaction */
		uint64_t last_seq;
		sink_commit last;
		uint32_t last_xid;
		uint64_t skipped_seq;
		bool skip_logged;
		/* per source transaction in the open Kafka transaction, for the latency to its commit */
		struct eo_source {
			int64_t commit_time;
			uint64_t events;
		} * sources;
		size_t nsources, capsources;
	} eo;
} kafka_sink;

/* The rendered form of an event, private to the sink, which may be spilled to disk. It is this
 * header, the topic, subscription, schema and table, then nrecords Kafka records. Each record is a
 * rendered_record followed by its key, its value without the commit's fields, and its extra headers.
 * Each header is "name\0", a u32 length, and the value. */
typedef struct rendered {
	uint32_t topic_len, sub_len, schema_len, table_len;
	uint32_t xid;
	uint64_t lsn;
	uint64_t schema_id; /* cdc-schema-id (0 if none) */
	uint8_t op, format, nrecords;
	bool schemas;	  /* format debezium with schemas */
	bool cdc_headers; /* kafka_sub_settings.cdc_headers */
} rendered;

/* What deliver() adds to a record's value, by kind:
 * - REC_PROTOBUF, cdc.v1.Event's commit fields.
 * - REC_JSON, the event JSON's commit fields.
 * - REC_DEBEZIUM, Debezium's marks filled.
 * - REC_AVRO, the wire format's header and the commit's fields.
 * REC_TOMBSTONE has no value. REC_ERROR's value says why the event cannot be written, and the sink
 * fails with it. */
enum { REC_PROTOBUF, REC_JSON, REC_DEBEZIUM, REC_AVRO, REC_TOMBSTONE, REC_ERROR };
typedef struct rendered_record {
	uint32_t key_len, value_len, header_len;
	uint32_t key_schema, value_schema; /* for format avro, the schemas' indexes (or KAFKA_NO_SCHEMA) */
	uint8_t kind;
	bool has_key; /* else a null key (Debezium's truncate) */
} rendered_record;

/* One delivery (or, with end set, one end_txn) held while an exactly-once commit is under way, or
 * while a record waits for its schema's id. */
typedef struct held_hdr {
	uint64_t seq;
	sink_commit c;
	uint32_t sub, len;
	bool end;
} held_hdr;

void kafka_fail(kafka_sink *ks, const char *what, const char *reason);
/* An error librdkafka reports (its error callback): logged, and the sink fails (fatal) or its status
 * says the brokers are down or refused cdc's credentials. */
void kafka_error(kafka_sink *ks, int err, const char *reason);
/* Produces one message of transaction seq, waiting while librdkafka's queue is full. False after
 * kafka_fail(). Takes headers (NULL: none). */
bool kafka_produce(kafka_sink *ks, const char *topic, int32_t partition, const void *key, size_t key_len,
		   const void *value, size_t value_len, rd_kafka_headers_t *headers, uint64_t seq);
/* A schema or DDL event, about a table, not a row (kafka.schemas_topic). */
static inline bool kafka_table_event(int op)
{
	return op == CDC__V1__OP__OP_SCHEMA || op == CDC__V1__OP__OP_DDL;
}
/* The cdc-* headers of an event (event) or of a record about a transaction, and content_type. */
rd_kafka_headers_t *kafka_headers(kafka_sink *ks, const rendered *rec, const char *sub, uint64_t commit_lsn,
				  bool event, const char *content_type);
/* The content types of the records in each format. */
#define CONTENT_TYPE_EVENT "application/x-protobuf; messageType=cdc.v1.Event"
#define CONTENT_TYPE_TRANSACTION "application/x-protobuf; messageType=cdc.v1.Transaction"
#define CONTENT_TYPE_JSON "application/json"
#define CONTENT_TYPE_AVRO "application/vnd.confluent.avro"

/* render.c. The sink's render(). */
void kafka_render(sink *base, uint32_t sub, const Cdc__V1__Event *event, buf *out);
/* Frees what the renderer keeps in ks (its scratch buffers, ks->value). */
void kafka_render_free(kafka_sink *ks);
/* The value of record kind of an event rendered in format, into ks->value. head is what render()
 * wrote. It is for transaction commit, as the total-th record of the transaction and the nth of its
 * table. */
void kafka_record_value(kafka_sink *ks, int kind, uint32_t schema_id, const char *head, size_t len,
			const rendered *rec, const sink_commit *commit, uint64_t total, uint64_t nth);
/* The records of the transactions topic in format. It is the transaction's one record (protobuf,
 * json), or Debezium's BEGIN (end false) or END (debezium, avro). Key and value go into ks->key and
 * ks->value. */
void kafka_txn_record(kafka_sink *ks, kafka_format format, bool end);
/* The sink's deliver() and end_txn(), for what the exactly-once cycle held. */
bool kafka_deliver(sink *base, uint32_t subscription, const char *data, size_t len, const sink_commit *commit,
		   uint64_t seq, char *err, size_t errlen);
void kafka_end_txn(sink *base, uint64_t seq);

/* What was held goes out, in order. What must wait again is held again. False when a delivery
 * failed for good (err). */
bool kafka_release(kafka_sink *ks, char *err, size_t errlen);

/* exactly_once.c. Whether a commit is under way or what it held is not sent yet. */
bool kafka_eo_holding(const kafka_sink *ks);
/* Called before producing an event of source transaction seq (commit commit). False to leave it out,
 * because Kafka holds it or the sink failed. */
bool kafka_eo_admit(kafka_sink *ks, const sink_commit *commit, uint32_t xid, uint64_t seq);
/* Runs the cycle as far as it goes now, from flush() (force at a stop). False with err when a held
 * delivery failed for good. */
bool kafka_eo_step(kafka_sink *ks, bool force, char *err, size_t errlen);
/* Aborts the open Kafka transaction (its messages are purged). */
void kafka_eo_abort(kafka_sink *ks);
/* Whether librdkafka failed the open Kafka transaction (abortable or fatal). If so, the sink fails
 * with librdkafka's reason. */
bool kafka_eo_failed(kafka_sink *ks);
/* At a stop, false if the open Kafka transaction cannot commit and was aborted. It cannot when a
 * source transaction is partly in it, or the stream is lost. */
bool kafka_eo_can_finish(kafka_sink *ks);
/* For kafka_sink_wake_ms, NUDGE_MS while a commit waits for acknowledgements, else 0. */
int kafka_eo_wake_ms(const kafka_sink *ks);
/* Waits for a commit's end under way on its thread, and takes its result: before the producer is
 * restarted or destroyed. */
void kafka_eo_settle(kafka_sink *ks);
/* True if called on a commit's end's thread, where librdkafka serves callbacks too (the commit call
 * polls): the error is kept for the event loop, which takes it once the call returned. */
bool kafka_eo_defer_error(kafka_sink *ks, int err, const char *reason);

#endif
