/* sinks_setup.h: the daemon's sink instances: one per kind, created when a subscription first needs
 * it, and bound again after every reload. The settings each sink takes are derived here from the
 * configuration, so no sink reads the daemon's config. */
#ifndef CDC_SINKS_SETUP_H
#define CDC_SINKS_SETUP_H

#include <event2/event.h>

#include "cdc/config/config.h"
#include "sinks/kafka/kafka_sink.h"
#include "sinks/sink.h"

struct event_base;

enum { SINKS_STDOUT, SINKS_KAFKA, SINKS_SOCKET, SINKS_N };

typedef struct sink_set {
	sink *k[SINKS_N]; /* by kind; NULL until a subscription needs it */
	sink **of_sub;	  /* per subscription, parallel to the bound cfg's subs */
	/* for the socket sink: its loop, whom to tell that consumers made room, and that a group
	 * commit is back */
	struct event_base *base;
	void (*wake)(void *ctx);
	void (*durable)(void *ctx);
	void *ctx;
	/* for the Kafka sink: its delivery reports wake the loop (kafka_event(fd, what, ctx) on
	 * ev_kafka, made with the sink), and which stream this process holds (held, see
	 * kafka_sink_watch_stream) */
	event_callback_fn kafka_event;
	kafka_stream_fn held;
	struct event *ev_kafka; /* NULL until the Kafka sink exists */
} sink_set;

/* Points each subscription of c at its sink, creating sinks on first use, and hands every sink
 * that exists the settings c gives it (even with none of its subscriptions left: a sink must not
 * keep an old configuration). */
bool sink_set_bind(sink_set *s, const cfg *c, char *err, size_t errlen) CDC_MUST_CHECK;
void sink_set_free(sink_set *s);

/* What the Kafka sink takes from c (also what `cdc doctor` checks the brokers with): the producer's
 * settings (props: room for the properties) and the subscriptions' topics, tombstones and formats, at their
 * indexes in c. Borrows c's strings. */
typedef struct kafka_setup {
	kafka_sink_settings set;
	kafka_property *props;
	kafka_sub_settings *subs;
	char *tid;
} kafka_setup;
kafka_setup sinks_kafka_setup(const cfg *c);
void sinks_kafka_setup_free(kafka_setup *k);

#endif
