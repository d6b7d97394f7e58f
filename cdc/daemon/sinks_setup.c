/* sinks_setup.c: see sinks_setup.h. The only place that knows both the configuration and the
 * sinks' settings structs. */
#include "cdc/daemon/sinks_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sinks/kafka/kafka_sink.h"
#include "sinks/socket/socket_sink.h"
#include "sinks/stdout/stdout_sink.h"

static const socket_consumers consumers_of[] = {
    [CFG_CONSUMERS_FAILOVER] = SOCKET_FAILOVER,
    [CFG_CONSUMERS_SHARED] = SOCKET_SHARED,
    [CFG_CONSUMERS_KEY_SHARED] = SOCKET_KEY_SHARED,
};

/* Per subscription of c, what the socket sink takes (serve: whether it is a socket one). */
static socket_sub_settings *socket_subs(const cfg *c)
{
	socket_sub_settings *v = xcalloc(c->nsubs ? c->nsubs : 1, sizeof(*v));
	for (size_t i = 0; i < c->nsubs; i++) {
		const cfg_subscription *s = &c->subs[i];
		v[i] = (socket_sub_settings){
		    .name = s->name,
		    .serve = s->sink == CFG_SINK_SOCKET,
		    .consumers = consumers_of[s->consumers],
		    .ack_timeout_ms = s->ack_timeout_ms,
		    .max_deliveries = s->max_deliveries,
		    .max_unacked = s->max_unacked,
		    .batch_transaction = s->batch == CFG_BATCH_TRANSACTION,
		    .retention = {.max_events = s->retention.max_events,
				  .max_age_ms = s->retention.max_age_ms,
				  .max_bytes = s->retention.max_bytes,
				  .drop_oldest = s->retention.when_full == CFG_FULL_DROP_OLDEST},
		};
	}
	return v;
}

static const kafka_format formats[] = {[CFG_FORMAT_PROTOBUF] = KAFKA_PROTOBUF,
				       [CFG_FORMAT_JSON] = KAFKA_JSON,
				       [CFG_FORMAT_DEBEZIUM] = KAFKA_DEBEZIUM};

kafka_setup sinks_kafka_setup(const cfg *c)
{
	kafka_setup k = {.props =
			     xcalloc(c->kafka.nproperties ? c->kafka.nproperties : 1, sizeof(kafka_property)),
			 .subs = xcalloc(c->nsubs ? c->nsubs : 1, sizeof(kafka_sub_settings)),
			 .tid = xmalloc(strlen(c->source.slot) + 5)};
	/* Stable for the slot: the producer that streams it next fences this one. */
	sprintf(k.tid, "cdc-%s", c->source.slot);
	for (size_t i = 0; i < c->kafka.nproperties; i++)
		k.props[i] = (kafka_property){c->kafka.properties[i].key, c->kafka.properties[i].value};
	k.set = (kafka_sink_settings){.brokers = c->kafka.brokers ? c->kafka.brokers : "",
				      .properties = k.props,
				      .nproperties = c->kafka.nproperties,
				      .transactions_topic = c->kafka.transactions_topic,
				      .schemas_topic = c->kafka.schemas_topic,
				      .exactly_once = c->kafka.exactly_once,
				      .positions_topic = c->kafka.positions_topic,
				      .transactional_id = k.tid,
				      .commit_interval_ms = c->kafka.commit_interval_ms,
				      .commit_events = c->kafka.commit_events};
	for (size_t i = 0; i < c->nsubs; i++)
		k.subs[i] =
		    (kafka_sub_settings){.topic = c->subs[i].topic,
					 .tombstones = c->subs[i].tombstones,
					 .format = formats[c->subs[i].format],
					 .schemas = c->subs[i].schemas,
					 .server_name = c->subs[i].server_name,
					 .placeholder = c->subs[i].unchanged_toast == CFG_TOAST_PLACEHOLDER};
	return k;
}

void sinks_kafka_setup_free(kafka_setup *k)
{
	free(k->props);
	free(k->subs);
	free(k->tid);
}

bool sink_set_bind(sink_set *s, const cfg *c, char *err, size_t errlen)
{
	kafka_setup kafka = sinks_kafka_setup(c);
	socket_sub_settings *socket = socket_subs(c);
	bool ok = false;
	free(s->of_sub);
	s->of_sub = xcalloc(c->nsubs ? c->nsubs : 1, sizeof(sink *));
	for (size_t i = 0; i < c->nsubs; i++) {
		int kind = c->subs[i].sink == CFG_SINK_STDOUT	? SINKS_STDOUT
			   : c->subs[i].sink == CFG_SINK_SOCKET ? SINKS_SOCKET
								: SINKS_KAFKA;
		if (!s->k[kind] && kind == SINKS_STDOUT)
			s->k[kind] = stdout_sink_new(STDOUT_FILENO);
		if (!s->k[kind] && kind == SINKS_SOCKET) {
			socket_sink_settings set = {.socket_path = c->subscribers.socket,
						    .mode = c->subscribers.mode,
						    .state_dir = c->state_dir,
						    .first_frame_timeout_ms =
							c->subscribers.first_frame_timeout_ms,
						    .max_connections = c->subscribers.max_connections,
						    .max_output = c->subscribers.max_output};
			if (!(s->k[kind] = socket_sink_new(&set, socket, c->nsubs, s->base, s->wake,
							   s->durable, s->ctx, err, errlen)))
				goto out;
		}
		if (!s->k[kind] && kind == SINKS_KAFKA &&
		    !(s->k[kind] = kafka_sink_new(&kafka.set, kafka.subs, c->nsubs, err, errlen)))
			goto out;
		s->of_sub[i] = s->k[kind];
	}
	if (s->k[SINKS_KAFKA])
		kafka_sink_bind(s->k[SINKS_KAFKA], &kafka.set, kafka.subs, c->nsubs);
	ok = !s->k[SINKS_SOCKET] || socket_sink_bind(s->k[SINKS_SOCKET], socket, c->nsubs, err, errlen);
	if (ok && s->k[SINKS_KAFKA] && !s->ev_kafka) {
		s->ev_kafka = event_new(s->base, s->k[SINKS_KAFKA]->ops->fd(s->k[SINKS_KAFKA]),
					EV_READ | EV_PERSIST, s->kafka_event, s->ctx);
		event_add(s->ev_kafka, NULL);
	}
	if (ok && s->k[SINKS_KAFKA])
		kafka_sink_watch_stream(s->k[SINKS_KAFKA], s->held, s->ctx);
out:
	sinks_kafka_setup_free(&kafka);
	free(socket);
	return ok;
}

void sink_set_free(sink_set *s)
{
	if (s->ev_kafka)
		event_free(s->ev_kafka);
	for (int i = 0; i < SINKS_N; i++)
		if (s->k[i])
			s->k[i]->ops->free(s->k[i]);
	free(s->of_sub);
	*s = (sink_set){0};
}
