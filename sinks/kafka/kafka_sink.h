/* `sink: kafka` produces each event with librdkafka. An event counts as delivered once the broker
 * acknowledged it (a delivery report without error). With exactly_once, it counts once the Kafka
 * transaction holding it committed. */
#ifndef CDC_KAFKA_SINK_H
#define CDC_KAFKA_SINK_H

#include "decoder/base/hist.h"
#include "sinks/kafka/subjects.h"
#include "sinks/module.h"
#include "sinks/sink.h"

/* The topic comes from the subscription's template. Key and value are in the subscription's format:
 * cdc.v1.Key and cdc.v1.Event, the event JSON, or Debezium's records. Records carry cdc-* headers.
 * A tombstone after a delete and records per transaction are optional. The producer is idempotent
 * unless configured otherwise. */
typedef struct kafka_property {
	const char *key, *value;
} kafka_property;

/* The producer's settings. Strings are copied. */
typedef struct kafka_sink_settings {
	const char *brokers;
	const kafka_property *properties; /* handed to librdkafka unchanged, after cdc's defaults */
	size_t nproperties;
	const char *transactions_topic; /* NULL for no record per transaction */
	/* Schema and DDL events, in partition 0 in stream order, keyed "SUBSCRIPTION/SCHEMA_ID" and
	 * "SUBSCRIPTION/ddl/LSN". NULL if they are not produced. Rows name theirs in cdc-schema-id. */
	const char *schemas_topic;
	/* kafka.exactly_once, a transactional producer. Each Kafka transaction holds whole source
	 * transactions and ends with a record in positions_topic (see position.h). A source transaction
	 * that Kafka already holds is skipped. Its commit LSN is at or before the position read back at
	 * the start. A transaction counts as delivered once its Kafka transaction committed. */
	bool exactly_once;
	const char *positions_topic;
	const char *transactional_id; /* unless kafka.properties set transactional.id */
	uint64_t commit_interval_ms;  /* a Kafka transaction stays open at least this long ... */
	uint64_t commit_events;	      /* ... unless it holds this many events (0 for no limit) */
	/* For format avro, the schema registry (url NULL if none), and the compatibility level of the
	 * subjects cdc creates (NULL for the registry's) */
	kafka_registry_conf registry;
	const char *compatibility;
} kafka_sink_settings;

/* A subscription's topic when it names none. */
#define KAFKA_DEFAULT_TOPIC "cdc.{schema}.{table}"

/* The topic of a change, tmpl with {schema} {table} {subscription} {tag} replaced. In the values put
 * in, every byte Kafka does not allow in a topic name ([A-Za-z0-9._-]) becomes '_'. tag may be NULL. */
void kafka_topic_name(buf *buffer, const char *tmpl, const char *schema, const char *table,
		      const char *subscription, const char *tag);
/* The value the producer gets for a librdkafka property. It is kafka.properties', else cdc's default
 * (with exactly_once, its transactional ones too), else NULL (librdkafka's own default). */
const char *kafka_producer_setting(const kafka_sink_settings *set, const char *key);

/* How a subscription's records are written. */
typedef enum kafka_format {
	KAFKA_PROTOBUF, /* key cdc.v1.Key, value cdc.v1.Event */
	KAFKA_JSON,	/* key the key columns' JSON, value the event JSON of `sink: stdout` */
	KAFKA_DEBEZIUM, /* as Debezium's PostgreSQL connector through JsonConverter (debezium.h) */
	KAFKA_AVRO,	/* the same through Confluent's AvroConverter and a schema registry (avro.h) */
} kafka_format;

/* One subscription, at the index render() and deliver() receive. */
typedef struct kafka_sub_settings {
	const char *topic; /* template ({schema} {table} {subscription} {tag}), NULL for the default */
	bool tombstones;   /* a tombstone after a delete (and after an update that moved the key) */
	kafka_format format;
	bool cdc_headers; /* the cdc-* headers and content-type on its records */
	/* for KAFKA_DEBEZIUM and KAFKA_AVRO */
	const char *server_name; /* source.name, NULL for "cdc" */
	bool placeholder;	 /* unchanged TOAST as Debezium's placeholder, else left out (Avro always) */
	bool context_headers;	 /* Debezium's __debezium.context.* headers on data change records */
	/* for KAFKA_DEBEZIUM */
	bool schemas; /* {schema, payload} */
	/* for KAFKA_AVRO */
	kafka_subject_strategy subjects;
} kafka_sub_settings;

/* NULL with err on a property librdkafka refuses. subs[i] is subscription index i. */
sink *kafka_sink_new(const kafka_sink_settings *settings, const kafka_sub_settings *subs, size_t nsubs,
		     char *err, size_t errlen);
/* After a reload, hands over the settings a restart of the producer takes, and the subscriptions to
 * take topics and tombstones from (copied). */
void kafka_sink_bind(sink *sk, const kafka_sink_settings *settings, const kafka_sub_settings *subs,
		     size_t nsubs);

/* The name of the database the slot streams (source.db of Debezium's records), known once cdc
 * connected. It is copied. */
void kafka_sink_set_database(sink *sk, const char *name);

/* For exactly once, which stream of the slot this process holds now, asked before each Kafka commit.
 * It is a number that changes with every new stream, 0 while none is held or its connection is closed.
 * A Kafka transaction ends only while the stream that carried its source transactions is held. Under
 * a newer stream, it ends only if Kafka's position did not move meanwhile. Otherwise another
 * process streamed the slot and committed, and the transaction is aborted. So a cdc stopped (SIGSTOP,
 * a frozen node) while another took over commits nothing when it resumes, even where the broker does
 * not fence it. When unset, the stream is always held. */
typedef uint64_t (*kafka_stream_fn)(void *ctx);
void kafka_sink_watch_stream(sink *sk, kafka_stream_fn fn, void *ctx);
/* Within how many milliseconds flush() should run again even if no delivery report comes. It is a few
 * while an exactly-once commit waits for the brokers, else 0 (only delivery reports need it). */
int kafka_sink_wake_ms(const sink *sk);

typedef struct kafka_stats {
	uint64_t in_flight, delivered, errors, restarts;
	/* for exactly once, Kafka transactions committed and aborted, source transactions skipped
	 * because Kafka held them already, and the commit LSN of the newest one Kafka holds */
	uint64_t commits, aborts, skipped, position;
	hist latency;	   /* commit time to delivery report, microseconds */
	bool brokers_down; /* every broker was reported down, and nothing was delivered since */
	bool auth_failed;  /* a broker refused the SASL credentials, and nothing was delivered since */
	/* For format avro (registry), schemas the registry gave an id, and the requests it refused or
	 * did not answer. While records wait for an id, the subject and why (the registry's words). */
	bool registry;
	uint64_t schemas_registered, registry_errors;
	bool registry_waiting;
	char registry_subject[256], registry_error[700];
} kafka_stats;
const kafka_stats *kafka_sink_stats(const sink *sk);
/* Whether the sink was made with exactly_once. */
bool kafka_sink_exactly_once(const sink *sk);

/* What the configuration file sets (kafka_module.c's tables), the kafka section and each Kafka
 * subscription's keys. */
typedef struct kafka_conf {
	char *brokers;
	sink_properties properties;
	char *transactions_topic; /* NULL if none */
	char *schemas_topic;	  /* schema and DDL events of Kafka subscriptions, NULL if none */
	bool exactly_once;
	char *positions_topic;		/* default "cdc.positions" */
	uint64_t commit_interval_ms;	/* default 0, as soon as whole transactions are in */
	uint64_t commit_events;		/* default 0, no limit */
	struct kafka_registry_section { /* the schema registry, for format avro */
		char *url, *username, *password, *ca_file, *cert_file, *key_file;
		uint64_t timeout_ms;
		int compatibility; /* an index of kafka_compatibility_names */
	} registry;
} kafka_conf;
/* The compatibility levels a subject cdc creates may get ("registry" for the registry's own). */
extern const char *const kafka_compatibility_names[];
typedef struct kafka_sub_conf {
	char *topic;	      /* template, default "cdc.{schema}.{table}" */
	bool tombstones;      /* default on with format debezium and avro */
	int format;	      /* kafka_format, default protobuf */
	dbz_sub_conf dbz;     /* format debezium and avro (schemas for debezium only) */
	int subject_strategy; /* kafka_subject_strategy, for format avro */
	bool cdc_headers;     /* default on */
} kafka_sub_conf;

/* The producer's settings from conf and the slot (the transactional id is "cdc-SLOT"). set borrows
 * conf's strings. Free with kafka_setup_free. */
typedef struct kafka_setup {
	kafka_sink_settings set;
	kafka_property *props;
	char *transactional_id;
} kafka_setup;
kafka_setup kafka_setup_make(const kafka_conf *conf, const char *slot);
void kafka_setup_free(kafka_setup *setup);

/* cdc doctor's checks of the brokers (kafka_doctor.c), and what frees what they kept. */
extern const sink_check kafka_checks[];
void kafka_doctor_done(sink_doctor *dr);

/* The figures' renderers (kafka_module.c) for the /status object and the /metrics families. They are
 * pure, so that tests compare them byte for byte. */
void kafka_status_json(const kafka_stats *stats, bool exactly_once, buf *out);
void kafka_metrics(const kafka_stats *stats, bool exactly_once, buf *out);

#endif
