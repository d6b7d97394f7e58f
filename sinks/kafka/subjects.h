/* What `format: avro` needs from the schema registry, kept by the Kafka sink. A worker thread
 * registers the schemas, so the event loop never waits on HTTP. */
#ifndef CDC_SUBJECTS_H
#define CDC_SUBJECTS_H

#include "sinks/debezium.h"
#include "sinks/kafka/registry.h"

/* A shape is a table as an Avro subscription's schema event described it. Each shape's key and
 * envelope schemas are registered under their subjects (TopicNameStrategy, RecordNameStrategy or
 * TopicRecordNameStrategy). Ids are kept for the process's life. So a schema met again is not
 * registered again, though every new stream sends schema events again. A refusal or an unreachable
 * registry is kept with its reason and asked again later, with backoff. Records that need the id wait,
 * and the sink holds them. */

/* How a schema's subject is named (Confluent's subject name strategies). */
typedef enum kafka_subject_strategy {
	KAFKA_SUBJECT_TOPIC,	    /* TopicNameStrategy, TOPIC-key and TOPIC-value */
	KAFKA_SUBJECT_RECORD,	    /* RecordNameStrategy, the record's full name */
	KAFKA_SUBJECT_TOPIC_RECORD, /* TopicRecordNameStrategy, TOPIC-FULLNAME */
} kafka_subject_strategy;

/* Appends the subject of a schema named name (a Connect name) as the key's (key) or the value's
 * in topic, under strategy. */
void kafka_subject_name(buf *out, kafka_subject_strategy strategy, const char *topic, bool key,
			const char *name);

/* No schema, for a record without a key (a table without a replica identity). */
#define KAFKA_NO_SCHEMA UINT32_MAX

typedef struct kafka_subjects kafka_subjects;

/* wake_fd (the sink's pipe) is written to after each answer, so the event loop looks. NULL with err
 * if the worker cannot start. */
kafka_subjects *kafka_subjects_new(int wake_fd, char *err, size_t errlen);
void kafka_subjects_free(kafka_subjects *ks);
/* The registry to ask and the compatibility level a subject cdc creates gets (NULL for the
 * registry's). Both are copied. What failed is asked again at once (a reload after fixing the
 * registry). */
void kafka_subjects_bind(kafka_subjects *ks, const kafka_registry_conf *conf, const char *compatibility);

/* A schema event of subscription sub (its table_schema, event->schema_id) gives the shape of the rows
 * that follow it. */
void kafka_subjects_learn(kafka_subjects *ks, const char *sub, const Cdc__V1__Event *event);
/* The shape subscription sub's rows of schema schema_id have. It gives its columns, and its key and
 * value schemas' indexes (registered, or on their way) for topic, server name and strategy. False if
 * no schema event described it. */
bool kafka_subjects_shape(kafka_subjects *ks, const char *sub, uint64_t schema_id, const char *topic,
			  const char *server, kafka_subject_strategy strategy, const dbz_column **cols,
			  size_t *ncols, uint32_t *key, uint32_t *value);
/* The same for the newest shape subscription sub learned of table schema.table. This is for a
 * truncate's envelope, which carries no rows. */
bool kafka_subjects_latest(kafka_subjects *ks, const char *sub, const char *schema, const char *table,
			   const char *topic, const char *server, kafka_subject_strategy strategy,
			   const dbz_column **cols, size_t *ncols, uint32_t *key, uint32_t *value);
/* The index of schema (Debezium's fixed records) for topic as the key's or the value's. */
uint32_t kafka_subjects_fixed(kafka_subjects *ks, const dbz_schema *schema, const char *topic, bool key,
			      kafka_subject_strategy strategy);

/* The registry's id of schema index, 0 while it is not known. Asks again for a schema whose last
 * attempt failed, once its backoff is over. */
uint32_t kafka_subjects_id(kafka_subjects *ks, uint32_t index);
/* The same, waiting up to wait_ms for the registry's answer to a request under way. This is for a new
 * shape's first record, whose schema was asked for at its schema event, moments before. */
uint32_t kafka_subjects_await(kafka_subjects *ks, uint32_t index, uint64_t wait_ms);
/* Why schema index has no id yet, in the registry's words, into out ("" while the registry has not
 * answered). *refused is true if the registry refused it, false if it could not be asked. */
void kafka_subjects_error(kafka_subjects *ks, uint32_t index, char *out, size_t outlen, bool *refused);
/* Its subject, for messages. */
const char *kafka_subjects_subject(const kafka_subjects *ks, uint32_t index);
/* How many schemas have their id, and how many requests to register one failed (refused or
 * unanswered), since the sink started. */
void kafka_subjects_counts(kafka_subjects *ks, uint64_t *registered, uint64_t *failures);
/* Milliseconds until a failed schema is asked again (0 if none waits). */
uint64_t kafka_subjects_retry_ms(kafka_subjects *ks);

#endif
