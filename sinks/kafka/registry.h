/* Confluent's Schema Registry over HTTP (libcurl). Each call blocks for one request. The Kafka sink
 * calls them on its registry worker, off the event loop, and cdc doctor calls them directly. */
#ifndef CDC_REGISTRY_H
#define CDC_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The calls register a schema under a subject, set and read a subject's compatibility level, read its
 * latest version, and check compatibility. Messages never hold the password. */
typedef struct kafka_registry_conf {
	const char *url;      /* http(s)://host:port, with a path prefix if the registry has one */
	const char *username; /* basic auth (NULL if none) */
	const char *password;
	const char *ca_file;   /* the CA of the registry's TLS certificate (NULL for the system's) */
	const char *cert_file; /* a TLS client certificate and its key (NULL if none) */
	const char *key_file;
	uint64_t timeout_ms; /* for each request, connecting included */
} kafka_registry_conf;

/* How a request ended. REFUSED means the registry answered with an error, and err has its status,
 * code and message. Sending the same again fails the same until someone changes the registry.
 * NOT_FOUND means the subject (or version) does not exist. UNREACHABLE means no answer (network, TLS,
 * a 5xx). */
typedef enum kafka_registry_status {
	REGISTRY_OK,
	REGISTRY_REFUSED,
	REGISTRY_NOT_FOUND,
	REGISTRY_UNREACHABLE,
} kafka_registry_status;

/* Call it once, before any thread calls the others (libcurl's global setup). */
void kafka_registry_init(void);
/* POST /subjects/SUBJECT/versions, for the id of schema (Avro schema JSON) under subject. */
kafka_registry_status kafka_registry_register(const kafka_registry_conf *conf, const char *subject,
					      const char *schema, uint32_t *id, char *err, size_t errlen);
/* GET /subjects/SUBJECT/versions/latest, for its id and version number. */
kafka_registry_status kafka_registry_latest(const kafka_registry_conf *conf, const char *subject,
					    uint32_t *id, int *version, char *err, size_t errlen);
/* GET /config/SUBJECT?defaultToGlobal=true (GET /config with subject NULL), for the level in force. */
kafka_registry_status kafka_registry_level(const kafka_registry_conf *conf, const char *subject, char *level,
					   size_t levellen, char *err, size_t errlen);
/* PUT /config/SUBJECT, to set its compatibility level. */
kafka_registry_status kafka_registry_set_level(const kafka_registry_conf *conf, const char *subject,
					       const char *level, char *err, size_t errlen);
/* POST /compatibility/subjects/SUBJECT/versions/latest?verbose=true, for whether schema may be the
 * next version. When not, why gets the registry's messages. A subject without versions is compatible. */
kafka_registry_status kafka_registry_compatible(const kafka_registry_conf *conf, const char *subject,
						const char *schema, bool *compatible, char *why,
						size_t whylen, char *err, size_t errlen);

#endif
