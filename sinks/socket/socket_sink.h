/* `sink: socket` appends each socket subscription's events to its durable spool (spool.h) and pushes
 * them to the consumers attached over subscribers.socket. Consumers acknowledge offsets
 * (proto/cdc/v1/subscriber.proto). */
#ifndef CDC_SOCKET_SINK_H
#define CDC_SOCKET_SINK_H

#include <sys/types.h>

#include "decoder/base/hist.h"
#include "sinks/sink.h"
#include "sinks/socket/spool.h"

/* A transaction counts as delivered once it is durably spooled. So slow or absent consumers never
 * hold the slot back, and retention decides instead. */
struct event_base;

/* The sink's own settings. Strings are copied. */
typedef struct socket_sink_settings {
	const char *socket_path;	 /* where consumers connect */
	mode_t mode;			 /* the socket's file mode */
	const char *state_dir;		 /* spools live in state_dir/spool/NAME */
	uint64_t first_frame_timeout_ms; /* a connection must Subscribe this soon */
	uint32_t max_connections;	 /* then the oldest that has not subscribed gives way */
	size_t max_output; /* a consumer's unread output (dispatch resumes when a quarter is left) */
} socket_sink_settings;

/* How the consumers of one subscription share its events (values as cdc.v1.ConsumerMode). */
typedef enum socket_consumers { SOCKET_FAILOVER, SOCKET_SHARED, SOCKET_KEY_SHARED } socket_consumers;

/* One subscription, at the index render() and deliver() receive. */
typedef struct socket_sub_settings {
	const char *name;
	bool serve; /* false if it delivers to another sink (a consumer asking for it is told so) */
	socket_consumers consumers;
	uint64_t ack_timeout_ms; /* an event unacknowledged this long is redelivered */
	uint32_t max_deliveries; /* then moved to the dead letters (0 for unlimited) */
	uint32_t max_unacked;	 /* the most a consumer may ask for */
	bool batch_transaction;	 /* a transaction's events go out in one delivery */
	spool_limits retention;	 /* with drop_oldest false, a full spool blocks (busy()) */
	/* Who may Subscribe to it (its events and its dead letters), by the peer's SO_PEERCRED. It is
	 * uids, or gids (its group or a supplementary one). With restricted false, whoever can connect. */
	bool restricted;
	id_list allow_uids, allow_gids;
} socket_sub_settings;

/* What the configuration file sets (the module's tables, socket_module.c), the subscribers section and
 * each socket subscription's keys. */
typedef struct socket_conf {
	char *socket;			 /* default "/run/cdc/events.sock" */
	mode_t mode;			 /* default 0660, the status socket's too */
	uint64_t first_frame_timeout_ms; /* default 10 s */
	uint32_t max_connections;	 /* default 1024 */
	uint64_t max_output;		 /* bytes, default 1 MiB */
} socket_conf;
typedef enum socket_when_full { SOCKET_FULL_BLOCK, SOCKET_FULL_DROP_OLDEST } socket_when_full;
typedef enum socket_batch { SOCKET_BATCH_NONE, SOCKET_BATCH_TRANSACTION } socket_batch;
typedef struct socket_sub_conf {
	int consumers;		 /* socket_consumers, default failover */
	uint64_t ack_timeout_ms; /* default 30s */
	uint32_t max_deliveries; /* default 0 (unlimited) */
	uint32_t max_unacked;	 /* default 1000 */
	int batch;		 /* socket_batch */
	struct {
		uint64_t max_events, max_age_ms, max_bytes; /* 0 for no limit */
		int when_full;				    /* socket_when_full, default block */
	} retention;
	struct {
		id_list uids, gids; /* no allow list when both are empty */
	} allow;
} socket_sub_conf;
#define SOCKET_DEFAULT_PATH "/run/cdc/events.sock"

/* Binds settings->socket_path and serves consumers on base, then binds subs as socket_sink_bind()
 * does. wake(ctx) is called when busy() may have turned false (consumers acknowledged events).
 * durable(ctx) is called when a group commit is back. delivered() may then have moved, and flush()
 * starts the next one. The spools' fsyncs run on a thread of the sink's, one group commit at a time,
 * while the loop goes on. */
sink *socket_sink_new(const socket_sink_settings *settings, const socket_sub_settings *subs, size_t nsubs,
		      struct event_base *base, void (*wake)(void *ctx), void (*durable)(void *ctx), void *ctx,
		      char *err, size_t errlen);
/* (Re)binds the subscriptions, which are copied. subs[i] is subscription index i. It opens and
 * recovers the spool of each new one it serves in state_dir/spool/NAME. Consumers of a subscription
 * that is gone are told so and disconnected. Its spool stays on disk. */
bool socket_sink_bind(sink *sk, const socket_sub_settings *subs, size_t nsubs, char *err,
		      size_t errlen) CDC_MUST_CHECK;
/* Closes the spools of a subscription the last bind removed and deletes state_dir/spool/NAME. */
bool socket_sink_forget(sink *sk, const char *name, char *err, size_t errlen) CDC_MUST_CHECK;
/* Commit time to durably spooled, per event, in microseconds. */
const hist *socket_sink_latency(const sink *sk);
/* How long each group commit took (the writes and fsyncs of one batch of spools), µs. */
const hist *socket_sink_spool_sync(const sink *sk);

typedef struct socket_sub_stats {
	uint64_t matched;   /* events appended since the start */
	uint64_t delivered; /* deliveries pushed to consumers (redeliveries included) */
	uint64_t redelivered;
	uint64_t in_flight; /* delivered to the attached consumers, not acknowledged yet */
	/* offsets acknowledged, given back (Nack), kept in progress (Progress), and refused because
	 * they were not in flight to the consumer that sent them */
	uint64_t acked, nacked, progressed, refused;
	uint64_t denied; /* Subscribes refused by its allow list */
	uint64_t head_offset, acked_offset, first_offset;
	uint64_t consumers;
	uint64_t not_reading; /* consumers (events and dead letters) that stopped reading their socket */
	uint64_t dead;	      /* dead letters retained */
	uint64_t dropped;     /* discarded by retention (persisted) */
	uint64_t spool_bytes;
	bool full; /* at a limit, with when_full block */
} socket_sub_stats;
/* Stats of subscription index sub. False when the sink does not serve it. */
bool socket_sink_stats(const sink *sk, uint32_t sub, socket_sub_stats *out);

/* One consumer attached to a subscription, to its events or its dead letters. */
typedef struct socket_consumer_stats {
	char name[256];
	pid_t pid;
	uid_t uid;
	socket_consumers mode; /* always failover for dead letters */
	bool dead_letters;
	bool active;  /* in failover, the one receiving while the others wait (always in shared modes) */
	bool reading; /* false if it stopped reading its socket (see socket_conn_watch_reading) */
	uint32_t in_flight;
	uint64_t delivered;   /* deliveries to it (withdrawn ones, never written, not counted) */
	uint64_t acked;	      /* offsets its acks acknowledged */
	int64_t connected_us; /* when it connected, µs since the Unix epoch */
} socket_consumer_stats;
/* The consumers attached to subscription index sub, as a malloc'd array of *count (NULL when none).
 * Its events' consumers come in order (in failover, the active one first), then its dead letters'
 * readers. */
socket_consumer_stats *socket_sink_consumers(const sink *sk, uint32_t sub, size_t *count);

/* The figures' renderers (socket_module.c), pure so that tests compare them byte for byte.
 * socket_sub_json renders one subscription's /status members after "bytes" (",\"head_offset\":..."
 * up to its consumers). socket_sub_metrics renders the spool's /metrics families for the
 * subscriptions whose names[i] is not NULL. */
void socket_sub_json(const socket_sub_stats *st, const socket_consumer_stats *consumers, size_t count,
		     buf *out);
void socket_sub_metrics(const socket_sub_stats *stats, const char *const *names, size_t count, buf *out);

#endif
