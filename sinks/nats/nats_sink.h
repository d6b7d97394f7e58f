/* `sink: nats` publishes each event to a NATS JetStream stream through libnats. A change counts as
 * delivered once JetStream acknowledged its publish, so the slot moves past it only then. */
#ifndef CDC_NATS_SINK_H
#define CDC_NATS_SINK_H

#include <nats/nats.h>

#include "decoder/base/hist.h"
#include "sinks/debezium.h"
#include "sinks/module.h"
#include "sinks/sink.h"

/* Publishes are asynchronous, a bounded number in flight. Each message carries a Nats-Msg-Id made
 * from the change's position, so JetStream's duplicate window drops what a restart sends again. */

/* What the configuration file sets in the nats section (nats_module.c's tables). */
typedef struct nats_conf {
	char *servers;		      /* "nats://host:4222,nats://host2:4222" */
	char *stream;		      /* the JetStream stream, default "CDC" */
	bool create;		      /* create the stream when it is missing */
	uint64_t duplicate_window_ms; /* the stream's duplicate window when cdc creates it */
	uint32_t max_in_flight;	      /* publishes awaiting an acknowledgement */
	uint64_t ack_timeout_ms;      /* an acknowledgement that takes longer fails the publish */
	char *schemas_subject;	      /* schema and DDL events, NULL if none */
	char *credentials;	      /* a .creds file (JWT and nkey seed) */
	char *nkey_seed;	      /* a file holding an nkey seed */
	char *user, *password, *token;
	bool tls;		  /* require TLS */
	char *tls_ca;		  /* CA certificates file */
	char *tls_cert, *tls_key; /* a client certificate and its key */
} nats_conf;

/* How a subscription's messages are written (as Kafka's formats). */
typedef enum nats_format { NATS_PROTOBUF, NATS_JSON, NATS_DEBEZIUM } nats_format;

/* Each NATS subscription's keys. */
typedef struct nats_sub_conf {
	char *subject;	  /* template with {schema} {table} {subscription} {tag} */
	int format;	  /* nats_format */
	bool cdc_headers; /* the cdc-* headers and content-type on its messages (default on) */
	dbz_sub_conf dbz; /* format debezium */
} nats_sub_conf;

#define NATS_DEFAULT_SUBJECT "cdc.{schema}.{table}"

/* A subject from a template, with {schema} {table} {subscription} {tag} replaced. In what replaces
 * them, every byte a subject token cannot hold (".", "*", ">", white space, control bytes) becomes "_".
 * tag may be NULL. */
void nats_subject_name(buf *out, const char *tmpl, const char *schema, const char *table,
		       const char *subscription, const char *tag);
/* Whether a stream's subject filter (with * and >) takes every subject of filter (whose * stand
 * for any token). */
bool nats_subject_covers(const char *stream_filter, const char *filter);
/* The subject filter a stream needs to hold a template's subjects. Each token with a placeholder
 * is "*". */
void nats_subject_filter(buf *out, const char *tmpl);

/* The connection's credentials and TLS from conf (the sink's and doctor's connections). */
natsStatus nats_set_access(natsOptions *opts, const nats_conf *conf);
/* Makes the sink. It connects in the background, and again after every loss. */
sink *nats_sink_new(const nats_conf *conf, const sink_sub *subs, size_t nsubs, char *err, size_t errlen);
/* The subscriptions to take from now on (copied). */
void nats_sink_bind(sink *sk, const sink_sub *subs, size_t nsubs);
/* The name of the database the slot streams (source.db of Debezium's records), once cdc knows it
 * (copied). */
void nats_sink_set_database(sink *sk, const char *name);

typedef struct nats_stats {
	uint64_t in_flight, delivered, duplicates, errors, restarts, reconnects;
	bool connected;
	hist latency;	 /* commit time to JetStream's acknowledgement, microseconds */
	char error[512]; /* why the last publish failed ("" when none since the last success) */
} nats_stats;
const nats_stats *nats_sink_stats(const sink *sk);

/* cdc doctor's checks of the server and the stream (nats_doctor.c). */
extern const sink_check nats_checks[];
void nats_doctor_done(sink_doctor *dr);

/* The figures' renderers (nats_module.c) for the /status object and the /metrics families. They are
 * pure, so that tests compare them byte for byte. */
void nats_status_json(const nats_stats *stats, buf *out);
void nats_metrics(const nats_stats *stats, buf *out);

#endif
