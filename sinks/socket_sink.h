/* socket_sink.h: `sink: socket`. Each socket subscription's events are appended to its durable spool
 * (sinks/spool.h) and pushed to the consumers attached over subscribers.socket, who acknowledge
 * offsets (proto/cdc/v1/subscriber.proto). A transaction counts as delivered once it is durably
 * spooled: slow or absent consumers never hold the slot back (retention decides instead). */
#ifndef CDC_SOCKET_SINK_H
#define CDC_SOCKET_SINK_H

#include "cdc/config/config.h"
#include "decoder/hist.h"
#include "sinks/sink.h"

struct event_base;

/* Binds subscribers.socket (mode subscribers.mode) and serves consumers on base. wake(ctx) is
 * called when busy() may have turned false (consumers acknowledged events). */
sink *socket_sink_new(const cfg *c, struct event_base *base, void (*wake)(void *ctx), void *ctx, char *err,
		      size_t errlen);
/* (Re)binds the socket subscriptions of c (which must outlive the sink or be replaced by another
 * bind): opens the spool of each new one in state_dir/spool/NAME, recovering it; consumers of a
 * subscription that is gone are told so and disconnected (its spool stays on disk). */
bool socket_sink_bind(sink *s, const cfg *c, char *err, size_t errlen) CDC_MUST_CHECK;
/* Closes the spools of a subscription the last bind removed and deletes state_dir/spool/NAME. */
bool socket_sink_forget(sink *s, const char *name, char *err, size_t errlen) CDC_MUST_CHECK;
/* Commit time to durably spooled, per event, in microseconds. */
const hist *socket_sink_latency(const sink *s);

typedef struct socket_sub_stats {
	const char *name;
	uint64_t matched;     /* events appended since the start */
	uint64_t delivered;   /* deliveries pushed to consumers (redeliveries included) */
	uint64_t redelivered;
	uint64_t head_offset, acked_offset, first_offset;
	uint64_t consumers;
	uint64_t dead;        /* dead letters retained */
	uint64_t dropped;     /* discarded by retention (persisted) */
	uint64_t spool_bytes;
	bool full;            /* when_full: block and at a limit */
} socket_sub_stats;
/* Stats of the i-th socket subscription; false past the last. */
bool socket_sink_stats(const sink *s, size_t i, socket_sub_stats *out);

#endif
