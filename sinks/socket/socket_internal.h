/* What the files of the socket sink share (durable.c, acked.c, connections.c) and nothing else
 * includes. Each subscription has two queues, its events and its dead letters. */
#ifndef CDC_SOCKET_INTERNAL_H
#define CDC_SOCKET_INTERNAL_H

#include <event2/util.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "cdc/v1/subscriber.pb-c.h"
#include "decoder/base/hist.h"
#include "decoder/base/util.h"
#include "decoder/base/worker.h"
#include "sinks/sink.h"
#include "sinks/socket/socket_sink.h"
#include "sinks/socket/spool.h"

struct bufferevent;
struct event;
struct event_base;
struct evconnlistener;
struct sockaddr;

/* A queue is a spool plus the consumers attached to it and a window of per-offset delivery state.
 * The window covers the offsets from the first unacknowledged one to the first never sent. */

#define KEY_BUCKETS 256
/* In shared and key_shared, a consumer is handed at most what it can start on before its deadline.
 * That is its window, the acks it made per ack_timeout / 2, measured over RATE_PERIOD_MS. The window
 * is at most max_unacked and at least WINDOW_MIN. A new consumer starts at WINDOW_START. */
#define WINDOW_START 16
#define WINDOW_MIN 1
#define RATE_PERIOD_MS 500

typedef struct consumer consumer;
typedef struct subscription subscription;
typedef struct socket_sink socket_sink;
typedef struct slot slot; /* one offset's delivery state (acked.c) */

/* Delivery state of the offsets [base, next), a ring that grows by doubling. */
typedef struct window {
	slot *v;
	size_t cap, head; /* v[head] is base's slot */
	uint64_t base;
} window;

typedef struct queue {
	subscription *sub;
	bool dead_letters;
	spool *sp;
	consumer *consumers; /* in attach order (in failover, the first one is active) */
	size_t nconsumers;
	window w;
	uint64_t next;	   /* the lowest offset not sent yet (offsets from here on are implicitly unsent) */
	uint64_t returned; /* slots in the window back to UNSENT, waiting for redelivery */
	uint64_t min_deadline;
	uint64_t drop_from, drop_to; /* a discarded range the next consumer is told of (drop_to 0 if none) */
	consumer *bucket[KEY_BUCKETS];
	/* In key_shared, the consumer a bucket was taken from after an ack timeout. It does not get the
	 * bucket back while another consumer can take it. */
	consumer *avoid[KEY_BUCKETS];
	size_t rr;
} queue;

struct subscription {
	socket_sink *s;
	char *name;
	const socket_sub_settings *set; /* NULL when no longer bound */
	queue q, dead;
	bool in_txn, dirty, have_last;
	uint64_t last_lsn;
	uint32_t last_txi;
	bool last_before; /* the last event was a schema event (sink_commit.before_change). A spool's last
			   * event never is, since its row follows it in the same transaction. */
	uint64_t matched, delivered, redelivered;
	uint64_t acked, nacked, progressed, refused; /* offsets in consumers' Ack, Nack, Progress frames */
	uint64_t denied;			     /* Subscribes refused by its allow list */
};

struct consumer {
	socket_sink *s;
	queue *q; /* NULL until subscribed */
	consumer *next;
	struct bufferevent *bev;
	char name[256];
	uid_t uid;
	pid_t pid;
	uint32_t max_unacked, in_flight;
	uint32_t window; /* in shared modes, in flight at most (see WINDOW_START) */
	uint32_t acks;	 /* of its deliveries since rate_since_ms */
	uint64_t rate_since_ms;
	bool window_full; /* in_flight reached the window since rate_since_ms */
	uint64_t heartbeat_ms, last_send_ms;
	uint64_t accepted_ms;
	int64_t connected_us;	   /* wall clock, for status */
	uint64_t delivered, acked; /* its deliveries (withdrawn ones not counted) and the offsets it acked */
	bool closing;
	bool stalled; /* its output reached out_high, so dispatch waits for the drain to out_low */
	/* It has not read its socket for ack_timeout (socket_conn_watch_reading). What it held went to the
	 * others, and nothing is dispatched to it until it reads again. */
	bool not_reading;
	/* Its output (connections.c), the bytes ever queued, and the start of every frame that may not
	 * be wholly written yet, oldest first. A Delivery frame none of which is written can still be
	 * withdrawn (socket_conn_withdraw). */
	uint64_t out_added;
	struct frame_starts {
		uint64_t *v;
		size_t head, n, cap;
	} starts;
	/* What the last reading check saw. These are bytes written and bytes unread by the peer
	 * (SIOCOUTQ), when it last saw the peer read, and when a frame from it last arrived. */
	uint64_t seen_written, read_ms, heard_ms;
	int seen_unread;
	/* The Acked owed for the Ack, Nack and Progress frames read since the last one. */
	struct reply {
		uint32_t answered;
		size_t n, cap;
		uint64_t *offsets;
		uint8_t *reasons; /* Cdc__V1__Refused__Reason */
	} reply;
};

struct socket_sink {
	sink base;
	char *state_dir;
	uint64_t first_frame_timeout_ms;
	uint32_t max_connections;
	/* Output buffered for one connection. Above out_high nothing more is dispatched to it (nor a
	 * heartbeat) until it drains to out_low. */
	size_t out_high, out_low;
	struct event_base *evb;
	struct evconnlistener *listener;
	struct event *ev_tick;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	void (*wake)(void *);
	void *wake_ctx;
	subscription **subs; /* every subscription ever bound, by name */
	size_t nsubs;
	socket_sub_settings *settings; /* copies of the last bind's, by subscription index */
	subscription **by_index;       /* subscription index -> subscription (NULL if not a socket one) */
	size_t nindex;
	consumer *pending;     /* connected, not subscribed yet (and closing ones), oldest first */
	struct held_txn *held; /* held transactions' events, per subscription (durable.c) */
	size_t nconnections, nclosing;
	uint64_t ended_seq, durable_seq, last_trim_ms;
	/* Group commit off the event loop (durable.c). The fsyncs of one batch of spools at a time run
	 * on the syncer thread. Their events become visible, and their transactions delivered, when it
	 * is back. The acked cursors are fsynced apart, on a thread of their own (acks). */
	struct syncer {
		worker *w;	  /* runs a batch's fsyncs */
		struct event *ev; /* the worker's eventfd, which says a batch is back */
		/* the batch in flight (the loop leaves it alone meanwhile) */
		bool busy;
		size_t n, cap;
		queue **qs; /* jobs[i] is qs[i]'s spool's */
		spool_sync_job *jobs;
		uint64_t ended;	  /* for events, it makes the transactions up to this seq durable */
		uint64_t took_us; /* how long the worker took for the batch's writes and fsyncs */
		size_t runs;	  /* and the first runs of commit times */
		bool failed;	  /* a batch failed, and the sink cannot go on */
		char err[512];
	} sync, acks;
	uint64_t acks_synced_ms; /* when the last acks batch began */
	void (*durable)(void *); /* called with wake_ctx when a batch is back */
	buf scratch, events;
	/* commit times (µs) of the events appended since the last sync, for the latency histogram. One
	 * run per transaction, since its events share their commit time. */
	struct commit_run {
		int64_t commit_time;
		uint64_t events;
	} * runs;
	size_t nruns, runs_cap;
	hist latency;
	hist spool_sync; /* each events batch's took_us: what the disk's fsync costs a transaction */
	char err[512];
};

/* acked.c */
socket_consumers socket_queue_mode(const queue *qu);
void socket_queue_unlink_consumer(consumer **list, consumer *cons);
void socket_queue_append_consumer(consumer **list, consumer *cons);
bool socket_queue_is_active(const consumer *cons);
bool socket_queue_out_full(consumer *cons);
void socket_queue_update_window(consumer *cons, uint64_t now);
uint64_t socket_queue_resume_at(const queue *qu);
void socket_queue_dispatch(socket_sink *ss, queue *qu);
void socket_queue_wake(socket_sink *ss);
/* An Ack's or Nack's effect on the window. socket_queue_settle, once after the frames of a read, records it
 * and dispatches what it freed. */
void socket_queue_handle_ack(consumer *cons, const Cdc__V1__Ack *Ack);
void socket_queue_handle_nack(socket_sink *ss, consumer *cons, const Cdc__V1__Nack *Nack);
void socket_queue_settle(socket_sink *ss, queue *qu);
void socket_queue_handle_progress(consumer *cons, const Cdc__V1__Progress *Progress);
void socket_queue_check_timeouts(socket_sink *ss, queue *qu, uint64_t now);
void socket_queue_trim(socket_sink *ss, queue *qu);
void socket_queue_detach(consumer *cons);
uint64_t socket_queue_position(socket_sink *ss, queue *qu, const Cdc__V1__Subscribe *sub);
bool socket_queue_open(socket_sink *ss, subscription *sub, queue *qu, bool dead, char *err, size_t errlen);
void socket_queue_free(queue *qu);

/* cons has not read its socket for ack_timeout. What it holds goes to the others. */
void socket_queue_not_reading(socket_sink *ss, consumer *cons);

/* connections.c */
/* Queues one frame, given in two pieces (data2 may be empty), to cons's output. */
void socket_conn_write_frame(consumer *cons, const void *data, size_t alen, const void *data2, size_t blen);
void socket_conn_send_frame(consumer *cons, const Cdc__V1__ServerFrame *ServerFrame);
/* The bytes of cons's output written to its socket so far (a position in the stream of its frames). */
uint64_t socket_conn_written(consumer *cons);
/* Removes from cons's output every Delivery frame none of whose bytes is written yet, keeping the
 * other frames in order. Returns the position the first of them had (the Deliveries that started
 * there or later were withdrawn), or UINT64_MAX when there was none. */
uint64_t socket_conn_withdraw(consumer *cons);
/* Once a tick, checks whether cons's peer reads its socket. After ack_timeout (timeout_ms) without,
 * the queue takes back what cons holds (socket_queue_not_reading). It dispatches to it again once it reads.
 */
void socket_conn_watch_reading(consumer *cons, uint64_t now, uint64_t timeout_ms);
void socket_conn_heartbeat(consumer *cons);
/* Sends the Acked owed for the Ack, Nack and Progress frames read since the last one, if any. */
void socket_conn_flush_reply(consumer *cons);
void socket_conn_consumer_release(consumer *cons);
void socket_conn_check_first_frames(socket_sink *ss, uint64_t now);
void socket_conn_on_accept(struct evconnlistener *listener, evutil_socket_t fd, struct sockaddr *addr,
			   int len, void *arg);
void socket_conn_close_consumers(queue *qu, const char *why);
/* After a bind, the consumers of qu that its subscription's allow list no longer admits are told so
 * (PERMISSION_DENIED) and disconnected. */
void socket_conn_recheck_access(queue *qu);

#endif
