/* Asks the Kafka cluster what `cdc doctor` needs to know, changing nothing. It also makes the client
 * configuration every non-producing client of cdc starts from. */
#ifndef CDC_KAFKA_PROBE_H
#define CDC_KAFKA_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "sinks/kafka/kafka_sink.h"

/* The probe reads the brokers (metadata within a timeout) and the topics that exist. With the admin
 * API's DescribeConfigs, it reads the brokers' settings that matter to cdc and the cleanup.policy of
 * chosen topics. */
struct rd_kafka_conf_s;

/* rd_kafka_conf_set, with err naming the property. It does not name the value, which may be a secret. */
bool kafka_conf_set(struct rd_kafka_conf_s *conf, const char *key, const char *value, char *err,
		    size_t errlen) CDC_MUST_CHECK;

/* A client's configuration reaching the producer's brokers. It sets bootstrap.servers, client.id, and
 * those of properties that say how to connect (security.*, ssl.*, sasl.*, socket.*, broker.*). NULL
 * with err on a property librdkafka refuses. err names it but does not repeat its value, which may be
 * a secret. */
struct rd_kafka_conf_s *kafka_client_conf(const char *brokers, const kafka_property *properties, size_t count,
					  const char *client_id, char *err, size_t errlen);

/* A setting as DescribeConfigs answered it. */
typedef struct kafka_probe_config {
	bool known;	 /* false if not asked, or the broker did not answer (error says why) */
	char value[64];	 /* "" for a null value */
	char error[256]; /* why it is unknown */
} kafka_probe_config;

typedef struct kafka_probe_topic {
	char *name;
	bool exists;
	kafka_probe_config cleanup_policy; /* asked only for the topics in kafka_probe_run's configs */
} kafka_probe_topic;

typedef struct kafka_probe {
	bool reachable;	 /* the metadata came */
	char error[512]; /* why not */
	int brokers;	 /* in the metadata */
	kafka_probe_topic *topics;
	size_t ntopics;
	/* of the first broker in the metadata */
	kafka_probe_config auto_create;		    /* auto.create.topics.enable */
	kafka_probe_config transaction_max_timeout; /* transaction.max.timeout.ms */
} kafka_probe;

/* Connects with set's brokers and connection properties. Within timeout_ms it reads the metadata of
 * every topic, whether each of topics exists, and the brokers' settings above. It reads the
 * cleanup.policy of topics[i] where configs[i]. False (err) only when the client cannot be made (a
 * property librdkafka refuses). Unreachable brokers make probe->reachable false. */
bool kafka_probe_run(const kafka_sink_settings *set, const char *const *topics, const bool *configs,
		     size_t count, int timeout_ms, kafka_probe *probe, char *err,
		     size_t errlen) CDC_MUST_CHECK;
void kafka_probe_free(kafka_probe *probe);

#endif
