/* The Kafka sink's exactly-once cycle (kafka.exactly_once, README "Exactly once"). A Kafka transaction opens
 * at the first event a source transaction has for Kafka, with a record of the position it goes on from. It
 * holds whole source transactions, and commits once they are whole (and old or big enough). First its events
 * are acknowledged, then its position record goes out and is acknowledged, then EndTxn. What arrives
 * meanwhile is held and goes out in the next one. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "decoder/pgoutput.h"
#include "sinks/kafka/kafka_internal.h"
#include "sinks/kafka/position.h"

/* Exactly once, the blocking calls' limits. The start waits for the brokers as long as a producer would for a
 * message. A commit's end is not held to these: it has a thread of its own (eo_end_start). */
#define INIT_TIMEOUT_MS 30000
#define ABORT_TIMEOUT_MS 30000
/* While a commit waits for acknowledgements, the brokers' threads are woken this often (kafka_eo_wake_ms). A
 * message can wait for a wake-up that never comes (eo_commit_end). */
#define NUDGE_MS 2
/* ... and librdkafka is asked this often whether the transaction failed (kafka_eo_failed). */
#define ASK_MS 50
/* A Kafka transaction whose newest source transaction committed more than BACKLOG_AGE_MS ago is part of a
 * backlog. Nobody waits for it, and each Kafka transaction costs librdkafka 2.0.2 about 2 ms of a busy
 * thread. Its main thread waits for the 1 ms timer that registers the transaction's partitions. It counts in
 * whole milliseconds, so as 0, and spins. Such a transaction then holds BACKLOG_MS of the stream at least. On
 * 100,000 single-row transactions, cdc's CPU went from 4.6-4.9 s to 1.3-1.7 s (bench's drain, 100 ms). */
#define BACKLOG_AGE_MS 1000
#define BACKLOG_MS 100

/* How far Kafka holds the stream, by the newest position record of this transactional.id. */
static bool read_back(kafka_sink *k, uint64_t *position, uint64_t *records)
{
	char why[700];
	if (kafka_position_read(k->set.brokers, k->set.properties, k->set.nproperties, k->set.positions_topic,
				k->tid, INIT_TIMEOUT_MS, position, records, why, sizeof(why)))
		return true;
	kafka_fail(k, "cannot read the committed position back from Kafka", why);
	return false;
}

/* Once per producer, before its first message. It fences every older producer with the same transactional.id
 * (the broker aborts what it left open). It reads back how far Kafka holds the stream. */
static bool eo_prepare(kafka_sink *k)
{
	if (k->eo.ready)
		return true;
	rd_kafka_error_t *e = rd_kafka_init_transactions(k->rk, INIT_TIMEOUT_MS);
	if (e) {
		kafka_fail(k, "cannot start Kafka transactions", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
		return false;
	}
	uint64_t position, records;
	if (!read_back(k, &position, &records))
		return false;
	/* The positions topic's leader now (a broker that may creates the topic), not at the first
	 * commit, which would wait for it after every event is acknowledged. */
	rd_kafka_topic_t *t = rd_kafka_topic_new(k->rk, k->set.positions_topic, NULL);
	const struct rd_kafka_metadata *md = NULL;
	if (rd_kafka_metadata(k->rk, 0, t, &md, INIT_TIMEOUT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(t);
	k->eo.ready = true;
	k->eo.position = k->stats.position = position;
	char lsn[LSN_STRLEN];
	util_lsn_format(position, lsn);
	log_info("exactly once: Kafka holds the stream up to the position read back",
		 "transactional_id=%s positions_topic=%s position=%s records_read=%" PRIu64, k->tid,
		 k->set.positions_topic, lsn, records);
	return true;
}

static uint64_t stream_now(const kafka_sink *k)
{
	return k->stream_fn ? k->stream_fn(k->stream_ctx) : 1;
}

/* Whether the open Kafka transaction may end now (kafka_sink_watch_stream). It may not while the stream is
 * lost. Under a newer stream, it may once Kafka's position is read back unmoved. */
static bool eo_stream_held(kafka_sink *k)
{
	uint64_t now = stream_now(k);
	if (!now || now == k->eo.stream)
		return now != 0;
	uint64_t position, records;
	if (!read_back(k, &position, &records))
		return false;
	if (position != k->eo.position) {
		k->eo.position = k->stats.position = position;
		kafka_fail(k,
			   "another process streamed the slot and committed to Kafka while this one had lost "
			   "the stream",
			   "the Kafka transaction is aborted; the slot sends what is after Kafka's position");
		return false;
	}
	k->eo.stream = now;
	return true;
}

/* A source transaction Kafka holds already, or the open Kafka transaction does. The slot sends it again after
 * a crash between the Kafka commit and the slot's confirmation. It also does after the stream broke while a
 * Kafka transaction was open. Nothing of it is produced again. */
static bool eo_skip(kafka_sink *k, const sink_commit *c, uint64_t seq)
{
	uint64_t held = k->eo.open ? k->eo.last.commit_lsn : k->eo.position;
	if (c->commit_lsn > held)
		return false;
	k->stats.skipped += seq != k->eo.skipped_seq; /* once per source transaction */
	k->eo.skipped_seq = seq;
	if (!k->eo.skip_logged) {
		char lsn[LSN_STRLEN];
		util_lsn_format(c->commit_lsn, lsn);
		log_info("exactly once: skipping source transactions Kafka already holds", "commit_lsn=%s",
			 lsn);
	}
	k->eo.skip_logged = true;
	return true;
}

/* The open Kafka transaction ended (committed, aborted or failed). */
static void eo_closed(kafka_sink *k)
{
	k->eo.open = k->eo.committing = k->eo.ending = false;
}

static void eo_committed(kafka_sink *k)
{
	int64_t now = util_wall_us();
	for (size_t i = 0; i < k->eo.nsources; i++) {
		int64_t us = now - k->eo.sources[i].commit_time;
		hist_add_n(&k->stats.latency, us > 0 ? (uint64_t)us : 0, k->eo.sources[i].events);
	}
	k->eo.nsources = 0;
	eo_closed(k);
	k->eo.committed_seq = k->eo.commit_seq;
	k->eo.position = k->stats.position = k->eo.last.commit_lsn;
	k->stats.commits++;
}

/* A Kafka transaction's end (EndTxn) that failed, or took longer than a request may take, could have reached
 * the coordinator late, or twice. librdkafka 2.0.2 keeps the producer's epoch from one transaction to the
 * next (no KIP-890). Such a copy could then end the next transaction. So the producer goes. The next one
 * fences this one's epoch and reads the position back (Jepsen's advice for Kafka transactions). */
static void eo_renew(kafka_sink *k, const char *what, const char *reason)
{
	char why[600];
	snprintf(why, sizeof(why), "%s (a new producer fences this one and reads the position back)", reason);
	k->eo.renew = true;
	kafka_fail(k, what, why);
}

void kafka_eo_abort(kafka_sink *k)
{
	k->eo.nsources = 0;
	eo_closed(k);
	k->stats.aborts++;
	uint64_t started = util_now_ms();
	rd_kafka_error_t *e = rd_kafka_abort_transaction(k->rk, ABORT_TIMEOUT_MS);
	if (e) {
		eo_renew(k, "cannot abort the Kafka transaction", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
		return;
	}
	/* The purged messages' delivery reports, so the counts in flight come back to zero. */
	for (uint64_t until = util_now_ms() + ABORT_TIMEOUT_MS;
	     rd_kafka_outq_len(k->rk) > 0 && util_now_ms() < until;)
		rd_kafka_poll(k->rk, 10);
	char lsn[LSN_STRLEN];
	util_lsn_format(k->eo.position, lsn);
	log_info("exactly once: aborted the Kafka transaction; the slot sends its source transactions again",
		 "position=%s", lsn);
	if (util_now_ms() - started >= k->request_timeout_ms)
		eo_renew(k, "the Kafka abort took longer than request.timeout.ms",
			 "its EndTxn may have been sent more than once");
}

bool kafka_eo_failed(kafka_sink *k)
{
	/* librdkafka 2.0.2 has no call that returns a transaction's state. Beginning one while one is
	 * open reports the open one's error when it failed, and else only a state error, which
	 * changes nothing. */
	k->eo.asked_ms = util_now_ms();
	rd_kafka_error_t *e = rd_kafka_begin_transaction(k->rk);
	if (!e) {
		kafka_fail(k, "the Kafka transaction failed", "librdkafka had none open");
		return true;
	}
	bool failed = rd_kafka_error_txn_requires_abort(e) || rd_kafka_error_is_fatal(e);
	if (failed)
		kafka_fail(k, "the Kafka transaction failed", rd_kafka_error_string(e));
	rd_kafka_error_destroy(e);
	return failed;
}

/* Sends what is queued at once. Otherwise it waits for linger.ms, or for librdkafka's wait to register the
 * transaction's partitions (about 45 ms against the mock, measured). A flush that does not wait wakes the
 * brokers' threads. */
static void send_now(kafka_sink *k)
{
	rd_kafka_flush(k->rk, 0);
	k->eo.woken_ms = util_now_ms();
}

/* A record of the positions topic: t, keyed by the transactional.id. */
static bool eo_produce_position(kafka_sink *k, const Cdc__V1__Transaction *t, uint64_t seq)
{
	buf_reset(&k->value);
	buf_reserve(&k->value, cdc__v1__transaction__get_packed_size(t));
	k->value.len = cdc__v1__transaction__pack(t, (uint8_t *)k->value.data);
	rendered r = {.xid = t->xid};
	return kafka_produce(k, k->set.positions_topic, 0, k->tid, strlen(k->tid), k->value.data,
			     k->value.len,
			     kafka_headers(k, &r, "", t->commit_lsn, false, CONTENT_TYPE_TRANSACTION), seq);
}

/* The first record of a Kafka transaction (seq its first source transaction's): the position it goes on
 * from, commit_lsn alone. librdkafka 2.0.2 registers a transaction's partitions 1 ms after the first
 * message of one, with its main thread spinning meanwhile. Produced with the first event, the positions
 * topic's partition is registered with the events'. Else the position record registers it at the commit,
 * which then waits for another timer and round trip (0.9 ms less CPU and wait per Kafka transaction, see
 * docs/performance.md). None before the first position (0 is no position to read back). */
static bool eo_start_record(kafka_sink *k, uint64_t seq)
{
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.commit_lsn = k->eo.position;
	return !t.commit_lsn || eo_produce_position(k, &t, seq);
}

/* The position record, the last of the Kafka transaction. It is produced once every other message of it is
 * acknowledged. So wherever it can be read (a broker without transactions' isolation, as the mock), every
 * event before it can be too. */
static void eo_position_record(kafka_sink *k)
{
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.xid = k->eo.last_xid;
	t.commit_lsn = k->eo.last.commit_lsn;
	t.commit_time = k->eo.last.commit_time;
	t.events = k->eo.events;
	if (eo_produce_position(k, &t, k->last_ended))
		k->eo.position_sent = true;
	send_now(k);
}

/* Starts the commit of the open Kafka transaction. From now on nothing may be produced into it until it ends,
 * and what arrives is held. */
static void eo_commit_start(kafka_sink *k)
{
	k->eo.committing = true;
	k->eo.position_sent = false;
	k->eo.commit_seq = k->last_ended;
	send_now(k);
}

/* Whether an error of EndTxn says the request timed out (answered so by the broker, or not
 * answered in time). */
static bool end_timed_out(const rd_kafka_error_t *e)
{
	rd_kafka_resp_err_t code = rd_kafka_error_code(e);
	return code == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT || code == RD_KAFKA_RESP_ERR__TIMED_OUT ||
	       code == RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE;
}

/* Set on a commit's end's thread. */
static _Thread_local bool on_end_thread;

static void *end_main(void *arg)
{
	kafka_sink *k = arg;
	on_end_thread = true;
	k->eo.end_error = rd_kafka_commit_transaction(k->rk, (int)k->request_timeout_ms);
	atomic_store(&k->eo.end_done, true);
	ssize_t n = write(k->pipe[1], "1", 1); /* wakes the event loop (kafka_fd) */
	(void)n;			       /* a full pipe wakes it already */
	return NULL;
}

bool kafka_eo_defer_error(kafka_sink *k, int err, const char *reason)
{
	if (!on_end_thread)
		return false;
	/* Only the event loop changes the sink. Past the few kept, the rest are only logged. */
	if (k->eo.nend_errors == sizeof(k->eo.end_errors) / sizeof(k->eo.end_errors[0])) {
		log_warn("kafka", "error=%s reason=\"%s\"", rd_kafka_err2name(err), reason);
		return true;
	}
	struct eo_deferred *d = &k->eo.end_errors[k->eo.nend_errors++];
	d->err = err;
	snprintf(d->reason, sizeof(d->reason), "%s", reason);
	return true;
}

/* The end of the Kafka transaction (flush, EndTxn, its answer), called once, on a thread of its own, for
 * request.timeout.ms. The event loop goes on meanwhile, and the thread wakes it as the call returns. A call
 * with a shorter limit, called again to resume, is what librdkafka 2.0.2 gets wrong when its main thread runs
 * late (a busy node, a container at its CPU limit): a resumed call whose first step times out forgets the
 * commit under way. It then takes the commit's answer for an abort's, and asserts. Or it never completes the
 * commit, and refuses every transaction after. */
static void eo_end_start(kafka_sink *k)
{
	k->eo.ending = true;
	k->eo.end_ms = util_now_ms();
	k->eo.nend_errors = 0;
	atomic_store(&k->eo.end_done, false);
	int rc = pthread_create(&k->eo.end_thread, NULL, end_main, k);
	if (rc != 0) {
		k->eo.ending = false;
		kafka_fail(k, "cannot start the Kafka commit's thread", strerror(rc));
	}
}

/* Once the commit's end returned. A commit that took longer than a request may take, or timed out, makes a
 * new producer (eo_renew), and so does any other failure but two. An abortable one aborts. A fatal one
 * (fenced, say) fails the producer. Either way the sink restarts. */
static void eo_end_result(kafka_sink *k)
{
	pthread_join(k->eo.end_thread, NULL);
	for (size_t i = 0; i < k->eo.nend_errors; i++)
		kafka_error(k, k->eo.end_errors[i].err, k->eo.end_errors[i].reason);
	rd_kafka_error_t *e = k->eo.end_error;
	k->eo.end_error = NULL;
	bool late = util_now_ms() - k->eo.end_ms >= k->request_timeout_ms;
	if (!e) {
		eo_committed(k);
		if (late)
			eo_renew(k, "the Kafka commit took longer than request.timeout.ms",
				 "its EndTxn may have been sent more than once");
		return;
	}
	if (late || end_timed_out(e)) {
		eo_renew(k, "the Kafka commit timed out", rd_kafka_error_string(e));
	} else if (rd_kafka_error_txn_requires_abort(e)) {
		kafka_fail(k, "the Kafka transaction failed and is aborted", rd_kafka_error_string(e));
		kafka_eo_abort(k);
	} else if (rd_kafka_error_is_fatal(e)) {
		kafka_error(k, RD_KAFKA_RESP_ERR__FATAL, rd_kafka_error_string(e));
	} else {
		eo_renew(k, "the Kafka transaction cannot commit", rd_kafka_error_string(e));
	}
	eo_closed(k);
	rd_kafka_error_destroy(e);
}

void kafka_eo_settle(kafka_sink *k)
{
	if (k->eo.ending)
		eo_end_result(k);
}

/* Once the brokers acknowledged every event, produces the position record. Once they acknowledged that, ends
 * the Kafka transaction (eo_end_start), and takes the end's result once it returned. */
static void eo_commit_end(kafka_sink *k)
{
	if (k->eo.ending) {
		if (atomic_load(&k->eo.end_done))
			eo_end_result(k);
		return;
	}
	if (k->stats.in_flight) {
		/* Their delivery reports call flush() again, and so does the daemon's tick. A broker thread
		 * of librdkafka that finds a partition not yet registered with the transaction sets itself no
		 * wake-up. The registration wakes none (its source). So the message waits for whatever wakes
		 * that thread next. Nothing may, while what arrives is held (debug log, a position record
		 * produced 43 ms after its registration). The daemon flushes every NUDGE_MS meanwhile
		 * (kafka_sink_wake_ms). */
		if (util_now_ms() - k->eo.woken_ms >= NUDGE_MS)
			send_now(k);
		/* A transaction librdkafka failed while messages were in flight sends nothing more. That can
		 * be an abortable error that needs an epoch bump. What it holds gets no delivery report until
		 * the abort, so waiting for them would wait for good. */
		if (util_now_ms() - k->eo.asked_ms >= ASK_MS && kafka_eo_failed(k))
			log_warn(
			    "exactly once: the Kafka transaction failed while its messages were in flight "
			    "(the restart aborts it)",
			    "in_flight=%llu", (unsigned long long)k->stats.in_flight);
		return;
	}
	if (!eo_stream_held(k))
		return; /* a new stream, or a restart, comes */
	if (!k->eo.position_sent) {
		eo_position_record(k);
		return;
	}
	eo_end_start(k);
}

/* Whether the open Kafka transaction should start its commit. It holds only whole source transactions, and it
 * is old or big enough, or force is set (a stop). By default it is due at once. Transactions pile up while
 * one commits, so under load they grow by themselves. */
static bool eo_due(const kafka_sink *k, bool force)
{
	if (!k->eo.open || k->eo.committing || k->failed)
		return false;
	if (k->cur_seq > k->last_ended) /* a source transaction is partly in it */
		return false;
	if (force || (k->set.commit_events && k->eo.events >= k->set.commit_events))
		return true;
	uint64_t age = util_now_ms() - k->eo.opened_ms;
	if (age < k->set.commit_interval_ms)
		return false;
	return age >= BACKLOG_MS || util_wall_us() - k->eo.last.commit_time <= BACKLOG_AGE_MS * 1000;
}

int kafka_eo_wake_ms(const kafka_sink *k)
{
	return k->eo.committing && !k->eo.ending ? NUDGE_MS : 0;
}

bool kafka_eo_can_finish(kafka_sink *k)
{
	const char *why;
	if (!k->eo.open || k->eo.ending)
		return true;
	if (!k->eo.committing && k->cur_seq > k->last_ended)
		why = "stopped inside a source transaction";
	else if (!stream_now(k))
		why = "stopped without the stream";
	else
		return true;
	kafka_fail(k, why, "the Kafka transaction is aborted");
	kafka_eo_abort(k);
	return false;
}

bool kafka_eo_holding(const kafka_sink *k)
{
	return k->eo.committing || k->held.len;
}

/* The exactly-once cycle, as far as it goes now. A due Kafka transaction starts its commit. A commit whose
 * messages are all acknowledged ends. What was held meanwhile goes out in the next transaction. That one may
 * be due at once (unless it waits for a schema's id). */
bool kafka_eo_step(kafka_sink *k, bool force, char *err, size_t errlen)
{
	for (;;) {
		if (eo_due(k, force))
			eo_commit_start(k);
		if (k->eo.committing)
			eo_commit_end(k);
		if (k->eo.committing || k->failed || !k->held.len || k->registry_wait)
			return true;
		if (!kafka_release(k, err, errlen))
			return false;
	}
}

bool kafka_eo_admit(kafka_sink *k, const sink_commit *c, uint32_t xid, uint64_t seq)
{
	if (seq != k->cur_seq && k->eo.open && k->eo.last_seq == k->cur_seq && k->cur_seq > k->last_ended) {
		/* A new source transaction while the last one never ended. The stream broke inside it, and
		 * the slot sends it again whole. The Kafka transaction holding part of it cannot commit. */
		kafka_fail(k, "the stream broke inside a source transaction",
			   "the Kafka transaction holding part of it is aborted; the slot sends it again");
		return false;
	}
	if (!eo_prepare(k))
		return false;
	if (seq != k->eo.last_seq) { /* the first event of a source transaction */
		if (eo_skip(k, c, seq))
			return false;
		if (!k->eo.open) {
			rd_kafka_error_t *e = rd_kafka_begin_transaction(k->rk);
			if (e) {
				kafka_fail(k, "cannot begin a Kafka transaction", rd_kafka_error_string(e));
				rd_kafka_error_destroy(e);
				return false;
			}
			k->eo.open = true;
			k->eo.stream = stream_now(k);
			k->eo.opened_ms = util_now_ms();
			k->eo.events = 0;
			if (!eo_start_record(k, seq))
				return false;
		}
		k->eo.last_seq = seq;
		k->eo.last = *c;
		k->eo.last_xid = xid;
		if (k->eo.nsources == k->eo.capsources) {
			k->eo.capsources = k->eo.capsources ? k->eo.capsources * 2 : 64;
			k->eo.sources =
			    util_xrealloc(k->eo.sources, k->eo.capsources * sizeof(*k->eo.sources));
		}
		k->eo.sources[k->eo.nsources++] = (struct eo_source){c->commit_time, 0};
	}
	k->eo.events++;
	k->eo.sources[k->eo.nsources - 1].events++;
	return true;
}
