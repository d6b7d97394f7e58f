/* kafka_sink.h: `sink: kafka` produces each event with librdkafka: topic from the subscription's
 * template, key cdc.v1.Key, value cdc.v1.Event, cdc-* headers, an optional tombstone after a
 * delete and an optional record per transaction. An event counts as delivered once the broker
 * acknowledged it (delivery report without error); the producer is idempotent unless configured
 * otherwise. */
#ifndef CDC_KAFKA_SINK_H
#define CDC_KAFKA_SINK_H

#include "cdc/config/config.h"
#include "decoder/hist.h"
#include "sinks/sink.h"

/* Uses c->kafka (brokers, properties passed to librdkafka unchanged, transactions_topic) and the
 * kafka subscriptions of c (topic, tombstones), which must outlive the sink or be replaced with
 * kafka_sink_bind(). NULL with err on a property librdkafka refuses. */
sink *kafka_sink_new(const cfg *c, char *err, size_t errlen);
/* After a reload: the subscriptions to take topics and tombstones from. */
void kafka_sink_bind(sink *s, const cfg *c);

typedef struct kafka_stats {
	uint64_t in_flight, delivered, errors, restarts;
	hist latency; /* commit time to delivery report, microseconds */
	bool brokers_down; /* every broker was reported down, and nothing was delivered since */
} kafka_stats;
const kafka_stats *kafka_sink_stats(const sink *s);

#endif
