/* position.h: the position an exactly-once Kafka producer committed last. Each of its Kafka
 * transactions ends with one record in the positions topic (partition 0, keyed by the producer's
 * transactional.id, value cdc.v1.Transaction of the newest source transaction in it); reading that
 * partition back with a read-committed consumer gives the commit LSN up to which Kafka already
 * holds everything. */
#ifndef CDC_KAFKA_POSITION_H
#define CDC_KAFKA_POSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sinks/kafka/kafka_sink.h"

/* Reads topic's partition 0 to its end (read committed) and sets *commit_lsn from the last record
 * keyed key (0: none, or no such topic yet). Of properties, only those that say how to reach the
 * brokers (security.*, ssl.*, sasl.*, socket.*, broker.*) are passed on. false with err when the
 * brokers cannot be read within timeout_ms. */
bool kafka_position_read(const char *brokers, const kafka_property *properties, size_t nproperties,
			 const char *topic, const char *key, int timeout_ms, uint64_t *commit_lsn, char *err,
			 size_t errlen);

#endif
