/* registry.h: Confluent's Schema Registry over HTTP (libcurl): a schema registered under a subject,
 * a subject's compatibility level set and read, its latest version, and the compatibility check.
 * Each call blocks for one request: the Kafka sink calls them on its registry worker, off the event
 * loop, and cdc doctor calls them directly. Messages never hold the password. */
#ifndef CDC_REGISTRY_H
#define CDC_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kafka_registry_conf {
	const char *url;      /* http(s)://host:port, with a path prefix if the registry has one */
	const char *username; /* basic auth (NULL: none) */
	const char *password;
	const char *ca_file;   /* TLS: the CA of the registry's certificate (NULL: the system's) */
	const char *cert_file; /* TLS: a client certificate and its key (NULL: none) */
	const char *key_file;
	uint64_t timeout_ms; /* for each request, connecting included */
} kafka_registry_conf;

/* How a request ended. REFUSED: the registry answered with an error (err has its status, code and
 * message); sending the same again fails the same until someone changes the registry. NOT_FOUND:
 * the subject (or version) does not exist. UNREACHABLE: no answer (network, TLS, a 5xx). */
typedef enum kafka_registry_status {
	REGISTRY_OK,
	REGISTRY_REFUSED,
	REGISTRY_NOT_FOUND,
	REGISTRY_UNREACHABLE,
} kafka_registry_status;

/* Once, before any thread calls the others (libcurl's global setup). */
void kafka_registry_init(void);
/* POST /subjects/SUBJECT/versions: the id of schema (Avro schema JSON) under subject. */
kafka_registry_status kafka_registry_register(const kafka_registry_conf *conf, const char *subject,
					      const char *schema, uint32_t *id, char *err, size_t errlen);
/* GET /subjects/SUBJECT/versions/latest: its id and version number. */
kafka_registry_status kafka_registry_latest(const kafka_registry_conf *conf, const char *subject,
					    uint32_t *id, int *version, char *err, size_t errlen);
/* GET /config/SUBJECT?defaultToGlobal=true (subject NULL: GET /config): the level in force. */
kafka_registry_status kafka_registry_level(const kafka_registry_conf *conf, const char *subject, char *level,
					   size_t levellen, char *err, size_t errlen);
/* PUT /config/SUBJECT: its compatibility level. */
kafka_registry_status kafka_registry_set_level(const kafka_registry_conf *conf, const char *subject,
					       const char *level, char *err, size_t errlen);
/* POST /compatibility/subjects/SUBJECT/versions/latest?verbose=true: whether schema may be the next
 * version (why: the registry's messages when not). A subject without versions: compatible. */
kafka_registry_status kafka_registry_compatible(const kafka_registry_conf *conf, const char *subject,
						const char *schema, bool *compatible, char *why,
						size_t whylen, char *err, size_t errlen);

#endif
