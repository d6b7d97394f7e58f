/* The position an exactly-once Kafka producer committed last. Reading it back with a read-committed
 * consumer gives the commit LSN up to which Kafka already holds everything. */
#ifndef CDC_KAFKA_POSITION_H
#define CDC_KAFKA_POSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sinks/kafka/kafka_sink.h"

/* Each Kafka transaction of the producer ends with one record in the positions topic, in partition 0.
 * Its key is the producer's transactional.id. Its value is the cdc.v1.Transaction of the newest source
 * transaction in it. */

/* Sets *commit_lsn from the last record keyed key in topic's partition 0 (read committed; 0 if none, or
 * no such topic yet), reading from 1,000 offsets before its end, then 8,000, ..., until it finds one or
 * has read the partition whole; *records counts the records read. Of properties, only those that say
 * how to reach the brokers (security.*, ssl.*, sasl.*, socket.*, broker.*) are passed on. False with
 * err when the brokers cannot be read within timeout_ms. */
bool kafka_position_read(const char *brokers, const kafka_property *properties, size_t nproperties,
			 const char *topic, const char *key, int timeout_ms, uint64_t *commit_lsn,
			 uint64_t *records, char *err, size_t errlen);

#endif
