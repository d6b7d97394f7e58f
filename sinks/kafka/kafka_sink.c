/* The Kafka sink (see kafka_sink.h). Its exactly-once cycle is exactly_once.c. Delivery reports come through
 * librdkafka's main queue, which signals a pipe the daemon's event loop watches. So there is no thread and no
 * busy poll. Transactions in flight are tracked in commit order with a count of unacknowledged messages. */
#include "sinks/kafka/kafka_internal.h"
#include "sinks/kafka/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>

#include "decoder/event.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "sinks/kafka/avro.h"

/* Stop reading the slot once this share of librdkafka's queue (queue.buffering.max.messages or
 * queue.buffering.max.kbytes) is in use. A transaction being delivered may still fill the rest. */
#define BUSY_SHARE 2

/* cdc's producer defaults, which kafka.properties override each. README "Kafka" documents them.
 * - Kafka's Java partitioner (murmur2 of the key), as Kafka Connect and so Debezium place records.
 *   librdkafka's own default hashes with CRC32, which puts a key in another partition.
 * - A queue bounded in messages and bytes, so memory stays flat whatever the size of a transaction.
 *   librdkafka's own limits (100,000 messages and 1 GiB) let one large transaction take hundreds of MiB.
 * - A linger of 1 ms. A busy stream still fills batches, a quiet one waits less, and the flow is steadier:
 *   with the queue below, a 1,000,000-row transaction over the server's Unix socket took 3.36 s against
 *   4.20 with librdkafka's 5 ms (the same CPU and memory; bench, mock cluster). 0 would send a large
 *   transaction's burst in small requests (three times slower).
 * - No compression. lz4 cost 2.5 CPU seconds per million events on the broker threads, the bottleneck of a
 *   large transaction's delivery (bench, mock cluster). */
static const kafka_property producer_defaults[] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"client.id", "cdc"},
    {"partitioner", "murmur2_random"},
    {"linger.ms", "1"},
    {"batch.num.messages", "10000"},
    /* What the throughput needs. The queue holds what arrives during linger.ms and a round trip (a few
     * thousand messages at a few hundred thousand a second). A queued message costs 1.3-2.7 KiB at the
     * peak, most of it its headers (allocated one by one), whatever its size. 10,000 messages and 16 MiB took
     * cdc to 45 MiB resident (bench, 1,000,000-row transaction). 6,000 and 4 MiB took it to 26 MiB, as fast.
     * 2 MiB and batches of 256 KiB (librdkafka's default is 1 MB) took the Debezium format from 34-38 MiB
     * to 26-27 and JSON from 30 to 26, as fast (two to six runs each). Small records (Avro's, about 200
     * bytes) fill 6,000 messages first: Avro's peak was 32-37 MiB. 3,000, about what 2 MiB holds of
     * Debezium's records, took Avro to 26-27 and protobuf from 25-26 to 21, as fast (five to nine runs). */
    {"queue.buffering.max.messages", "3000"},
    {"queue.buffering.max.kbytes", "2048"},
    {"batch.size", "262144"},
};

/* Whether kafka.properties set key. */
static bool user_set(const kafka_sink *k, const char *key)
{
	for (size_t i = 0; i < k->set.nproperties; i++)
		if (strcmp(k->set.properties[i].key, key) == 0)
			return true;
	return false;
}

/* librdkafka answers QUEUE_FULL to a record larger than queue.buffering.max.kbytes even when the queue is
 * empty, so such a record would wait for good. So the queue holds the largest record that message.max.bytes
 * allows. kafka.properties that set neither or only message.max.bytes get the queue raised to it. Those that
 * set only the queue get message.max.bytes lowered to it, so a larger record stops cdc with what to raise.
 * Those that set both the other way are refused. */
static bool queue_fits_largest(const kafka_sink *k, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
	char v[32];
	size_t len = sizeof(v);
	if (rd_kafka_conf_get(conf, "message.max.bytes", v, &len) != RD_KAFKA_CONF_OK)
		return true;
	uint64_t largest = strtoull(v, NULL, 10), need = (largest + 1023) / 1024;
	len = sizeof(v);
	if (rd_kafka_conf_get(conf, "queue.buffering.max.kbytes", v, &len) != RD_KAFKA_CONF_OK)
		return true;
	uint64_t queue = strtoull(v, NULL, 10);
	if (queue >= need)
		return true;
	bool queue_set = user_set(k, "queue.buffering.max.kbytes");
	if (queue_set && user_set(k, "message.max.bytes"))
		return util_errf(
		    err, errlen,
		    "kafka.properties: queue.buffering.max.kbytes %llu holds less than one record of "
		    "message.max.bytes %llu, so such a record could never be queued: raise "
		    "queue.buffering.max.kbytes to %llu or more, or leave it out (cdc then sizes it)",
		    (unsigned long long)queue, (unsigned long long)largest, (unsigned long long)need);
	if (queue_set) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)queue * 1024);
		return kafka_conf_set(conf, "message.max.bytes", v, err, errlen);
	}
	snprintf(v, sizeof(v), "%llu", (unsigned long long)need);
	return kafka_conf_set(conf, "queue.buffering.max.kbytes", v, err, errlen);
}

/* Exactly once adds these to the defaults. A Kafka transaction holds at least one whole source transaction,
 * so its timeout bounds the largest one. The brokers' transaction.max.timeout.ms (15 minutes by default) must
 * allow it. */
static const kafka_property transactional_defaults[] = {
    {"transaction.timeout.ms", "600000"},
};

const char *kafka_producer_setting(const kafka_sink_settings *set, const char *key)
{
	for (size_t i = set->nproperties; i-- > 0;)
		if (strcmp(set->properties[i].key, key) == 0)
			return set->properties[i].value;
	for (size_t i = 0;
	     set->exactly_once && i < sizeof(transactional_defaults) / sizeof(*transactional_defaults); i++)
		if (strcmp(transactional_defaults[i].key, key) == 0)
			return transactional_defaults[i].value;
	for (size_t i = 0; i < sizeof(producer_defaults) / sizeof(*producer_defaults); i++)
		if (strcmp(producer_defaults[i].key, key) == 0)
			return producer_defaults[i].value;
	return NULL;
}

/* ---- small helpers ---- */

/* Kafka topic names allow [A-Za-z0-9._-]. Other bytes of schema or table names become '_'. */
static void put_topic_part(buf *b, const char *s)
{
	size_t n = strlen(s);
	buf_reserve(b, n);
	char *out = b->data + b->len;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '_' || c == '-';
		out[i] = ok ? c : '_';
	}
	b->len += n;
	b->data[b->len] = '\0';
}

/* Made for every event. The text between variables is copied in one piece, and only a '{' is compared with
 * the variables' names. */
void kafka_topic_name(buf *b, const char *tmpl, const char *schema, const char *table,
		      const char *subscription, const char *tag)
{
	static const struct {
		const char *name;
		size_t len;
	} vars[] = {{"{schema}", 8}, {"{table}", 7}, {"{subscription}", 14}, {"{tag}", 5}};
	while (*tmpl) {
		size_t run = strcspn(tmpl + 1, "{") + 1; /* the first byte goes as it is, if no variable */
		size_t i = 4;
		if (*tmpl == '{')
			for (i = 0; i < 4; i++)
				if (strncmp(tmpl, vars[i].name, vars[i].len) == 0)
					break;
		if (i == 4) {
			buf_append(b, tmpl, run);
			tmpl += run;
			continue;
		}
		const char *v = i == 0 ? schema : i == 1 ? table : i == 2 ? subscription : tag ? tag : "";
		put_topic_part(b, v);
		tmpl += vars[i].len;
	}
}

/* ---- in-flight transactions ---- */

/* The in-flight entry of transaction seq. Entries are in seq order. Producing appends to the newest, and
 * delivery reports mostly come for the oldest. So look at both ends, then bisect. */
static kafka_txn *txn_find(kafka_sink *k, uint64_t seq)
{
	size_t lo = 0, hi = k->q.len;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		kafka_txn *t = ring_at(&k->q, mid);
		if (t->seq == seq)
			return t;
		if (t->seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static kafka_txn *txn_entry(kafka_sink *k, uint64_t seq)
{
	kafka_txn *last = k->q.len ? ring_at(&k->q, k->q.len - 1) : NULL;
	if (last && last->seq == seq)
		return last;
	kafka_txn *t = ring_push(&k->q);
	*t = (kafka_txn){.seq = seq, .commit_time = k->cur_commit.commit_time};
	return t;
}

static void settle(kafka_sink *k)
{
	size_t n = 0;
	while (n < k->q.len) {
		const kafka_txn *t = ring_at(&k->q, n);
		if (t->outstanding || t->seq > k->last_ended)
			break;
		n++;
	}
	ring_pop(&k->q, n);
}

/* ---- topic handles ---- */

/* The handle of topic name, made at its first use. librdkafka 2.0.2 asks the brokers for a topic's leaders
 * when rd_kafka_topic_new() makes its handle. It does not when rd_kafka_producev() is given the name. Its
 * messages then waited for the next periodic metadata refresh, up to a second (the bench paused about 0.9 s
 * at every start). A handle also spares each message librdkafka's lookup by name. */
static rd_kafka_topic_t *topic_handle(kafka_sink *k, const char *name)
{
	size_t lo = 0, hi = k->ntopics;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(k->topics[mid].name, name);
		if (c == 0)
			return k->topics[mid].rkt;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(k->rk, name, NULL);
	if (!rkt)
		return NULL;
	if (k->ntopics == k->captopics) {
		k->captopics = k->captopics ? k->captopics * 2 : 8;
		k->topics = util_xrealloc(k->topics, k->captopics * sizeof(*k->topics));
	}
	memmove(&k->topics[lo + 1], &k->topics[lo], (k->ntopics - lo) * sizeof(*k->topics));
	k->topics[lo] = (kafka_topic){util_xstrdup(name), rkt};
	k->ntopics++;
	return rkt;
}

/* Before the producer goes, its topic handles go. */
static void topics_clear(kafka_sink *k)
{
	for (size_t i = 0; i < k->ntopics; i++) {
		rd_kafka_topic_destroy(k->topics[i].rkt);
		free(k->topics[i].name);
	}
	k->ntopics = 0;
}

/* ---- librdkafka callbacks ---- */

void kafka_fail(kafka_sink *k, const char *what, const char *reason)
{
	if (!k->failed)
		snprintf(k->failure, sizeof(k->failure), "%s: %s", what, reason);
	k->failed = true;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	kafka_sink *k = opaque;
	uint64_t seq = (uint64_t)(uintptr_t)m->_private;
	kafka_txn *first = k->q.len ? ring_at(&k->q, 0) : NULL;
	kafka_txn *t = first && first->seq == seq ? first : txn_find(k, seq);
	if (t && t->outstanding)
		t->outstanding--;
	k->stats.in_flight--;
	k->queued_bytes -= m->len + m->key_len;
	/* Exactly once, a purge is cdc's own abort (the slot sends it again). At least once, it is a
	 * failure. */
	if (k->set.exactly_once &&
	    (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT))
		return;
	if (m->err) {
		/* librdkafka has retried already, so this message is lost to the broker. */
		k->stats.errors++;
		kafka_fail(k, "a message could not be delivered", rd_kafka_err2str(m->err));
		return;
	}
	k->stats.delivered++;
	k->stats.brokers_down = k->stats.auth_failed = false;
	if (t && !k->set.exactly_once) { /* exactly once, visible and counted at the Kafka commit */
		int64_t us = util_wall_us() - t->commit_time;
		hist_add(&k->stats.latency, us > 0 ? (uint64_t)us : 0);
	}
	settle(k);
}

/* The producer failed for good. Seen first by the error callback or by a refused message, whichever
 * comes first: the same words either way. */
static void fail_fatal(kafka_sink *k)
{
	char why[512];
	rd_kafka_resp_err_t code = rd_kafka_fatal_error(k->rk, why, sizeof(why));
	/* A failed batch stops the producer by design (enable.gapless.guarantee). Say so. Exactly once,
	 * fenced means another cdc on this slot took over. */
	if (code == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE)
		kafka_fail(k, "a message could not be delivered", why);
	else if (code == RD_KAFKA_RESP_ERR__FENCED)
		kafka_fail(k, "fenced: a newer producer with the same transactional.id took over", why);
	else
		kafka_fail(k, "fatal producer error", why);
}

void kafka_error(kafka_sink *k, int err, const char *reason)
{
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		fail_fatal(k);
		return;
	}
	/* Transient (brokers down, ...). librdkafka retries, and the slot waits for delivery reports. */
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		k->stats.brokers_down = true;
	if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
		/* Said once until a delivery succeeds, since librdkafka retries each broker every few
		 * seconds. */
		if (!k->stats.auth_failed)
			log_error(
			    "kafka: a broker refused cdc's credentials; cdc retries and delivers nothing to "
			    "Kafka meanwhile: check sasl.mechanism, sasl.username and sasl.password in "
			    "kafka.properties (a reload applies the username and password)",
			    "reason=\"%s\"", reason);
		else
			log_debug("kafka", "error=%s reason=\"%s\"", rd_kafka_err2name(err), reason);
		k->stats.auth_failed = true;
		return;
	}
	log_warn("kafka", "error=%s reason=\"%s\"", rd_kafka_err2name(err), reason);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	(void)rk; /* k->rk */
	kafka_sink *k = opaque;
	if (!kafka_eo_defer_error(k, err, reason))
		kafka_error(k, err, reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *text)
{
	const kafka_sink *k = rd_kafka_opaque(rk);
	/* librdkafka 2.0.2 calls every set experimental property out at each start. cdc sets
	 * enable.gapless.guarantee itself, on purpose (see producer_new and the README). A warning the user
	 * can do nothing about is noise. Set in kafka.properties, it is the user's, and warned. */
	if (k && k->own_gapless && strcmp(fac, "CONFWARN") == 0 &&
	    strstr(text, "enable.gapless.guarantee is experimental"))
		return;
	if (level <= 4)
		log_warn("kafka client", "facility=%s message=\"%s\"", fac, text);
	else
		log_debug("kafka client", "facility=%s message=\"%s\"", fac, text);
}

/* ---- producer lifecycle ---- */

static bool producer_new(kafka_sink *k, char *err, size_t errlen)
{
	char why[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	/* cdc's defaults first, which kafka.properties override. */
	bool ok = kafka_conf_set(conf, "bootstrap.servers", k->set.brokers, err, errlen);
	for (size_t i = 0; ok && i < sizeof(producer_defaults) / sizeof(producer_defaults[0]); i++)
		ok = kafka_conf_set(conf, producer_defaults[i].key, producer_defaults[i].value, err, errlen);
	if (k->set.exactly_once) {
		ok = ok && kafka_conf_set(conf, "transactional.id", k->set.transactional_id, err, errlen);
		for (size_t i = 0;
		     ok && i < sizeof(transactional_defaults) / sizeof(transactional_defaults[0]); i++)
			ok = kafka_conf_set(conf, transactional_defaults[i].key,
					    transactional_defaults[i].value, err, errlen);
	}
	for (size_t i = 0; ok && i < k->set.nproperties; i++)
		ok = kafka_conf_set(conf, k->set.properties[i].key, k->set.properties[i].value, err, errlen);
	ok = ok && queue_fits_largest(k, conf, err, errlen);
	/* A batch that fails for good must stop the producer. That is a fatal error, so the sink restarts and
	 * the slot sends the failed messages again. Otherwise librdkafka goes on delivering the batches
	 * queued behind it. The failed messages, sent again, would land after later changes of the same rows.
	 * A row's versions would go backwards in its partition. A transactional producer aborts instead. */
	char idem[16];
	size_t idemlen = sizeof(idem);
	if (ok && !user_set(k, "enable.gapless.guarantee") && !k->set.exactly_once &&
	    rd_kafka_conf_get(conf, "enable.idempotence", idem, &idemlen) == RD_KAFKA_CONF_OK &&
	    strcmp(idem, "true") == 0) {
		ok = kafka_conf_set(conf, "enable.gapless.guarantee", "true", err, errlen);
		k->own_gapless = true;
	}
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return false;
	}
	char max[32];
	size_t maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "request.timeout.ms", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->request_timeout_ms = strtoull(max, NULL, 10);
	maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "message.max.bytes", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->message_max_bytes = strtoull(max, NULL, 10);
	maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "queue.buffering.max.messages", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->busy_at = strtoull(max, NULL, 10) / BUSY_SHARE;
	maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "queue.buffering.max.kbytes", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->busy_bytes = strtoull(max, NULL, 10) * 1024 / BUSY_SHARE;
	rd_kafka_conf_set_opaque(conf, k);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, on_log);
	k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	if (!k->rk) {
		rd_kafka_conf_destroy(conf);
		return util_errf(
		    err, errlen,
		    "cannot create the Kafka producer: %s (kafka.properties go to librdkafka as they are; "
		    "its own messages above name the file or setting)",
		    why);
	}
	rd_kafka_queue_t *q = rd_kafka_queue_get_main(k->rk);
	rd_kafka_queue_io_event_enable(q, k->pipe[1], "1", 1);
	rd_kafka_queue_destroy(q);
	size_t tidlen = sizeof(k->tid);
	if (rd_kafka_conf_get(rd_kafka_conf(k->rk), "transactional.id", k->tid, &tidlen) != RD_KAFKA_CONF_OK)
		k->tid[0] = '\0';
	return true;
}

static void tables_clear(kafka_sink *k)
{
	for (size_t i = 0; i < k->ntables; i++) {
		free(k->tables[i].schema);
		free(k->tables[i].table);
	}
	k->ntables = 0;
	k->cur_events = 0;
}

/* ---- sink operations ---- */

/* Produces one message, waiting while librdkafka's queue is full (the daemon stops reading before
 * that, but one large transaction can fill it alone). */
bool kafka_produce(kafka_sink *k, const char *topic, int32_t partition, const void *key, size_t key_len,
		   const void *value, size_t value_len, rd_kafka_headers_t *h, uint64_t seq)
{
	rd_kafka_topic_t *rkt = topic_handle(k, topic);
	rd_kafka_resp_err_t err = rkt ? RD_KAFKA_RESP_ERR__QUEUE_FULL : rd_kafka_last_error();
	while (rkt && err == RD_KAFKA_RESP_ERR__QUEUE_FULL && !k->failed) {
		err = rd_kafka_producev(
		    k->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key, key_len),
		    RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		    RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE((void *)(uintptr_t)seq), RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
			txn_entry(k, seq)->outstanding++;
			k->stats.in_flight++;
			k->queued_bytes += key_len + value_len;
			return true;
		}
		if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			rd_kafka_poll(k->rk, 100);
	}
	if (h)
		rd_kafka_headers_destroy(h);
	if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
		/* Refused before it is sent, as it would be again after any restart. So cdc stops rather than
		 * loop. */
		char why[600];
		snprintf(
		    why, sizeof(why),
		    "%zu bytes for topic %s, more than message.max.bytes (%llu): raise message.max.bytes "
		    "in kafka.properties and max.message.bytes of the topic on the brokers, or leave the "
		    "large columns out (subscriptions[].columns)",
		    key_len + value_len, topic, (unsigned long long)k->message_max_bytes);
		kafka_fail(k, "a message is larger than the producer sends", why);
		k->for_good = true;
	} else if (err == RD_KAFKA_RESP_ERR__FATAL) {
		fail_fatal(k);
	} else if (err != RD_KAFKA_RESP_ERR__STATE || !k->set.exactly_once || !kafka_eo_failed(k)) {
		/* Exactly once, librdkafka refuses messages once it failed the transaction. Give its
		 * reason. */
		kafka_fail(k, "a message could not be queued", rd_kafka_err2str(err));
	}
	return false;
}

rd_kafka_headers_t *kafka_headers(kafka_sink *k, const rendered *r, const char *sub, uint64_t commit_lsn,
				  bool event, const char *content_type)
{
	/* The commit's values are the same for every message of a transaction, so they are formatted once.
	 * Formatted for each message, they were about 8% of cdc's thread while it delivered a large
	 * transaction (perf, 1,000,000 rows). */
	if (!k->hdr_cache.set || k->hdr_cache.commit_lsn != commit_lsn || k->hdr_cache.xid != r->xid) {
		k->hdr_cache.set = true;
		k->hdr_cache.commit_lsn = commit_lsn;
		k->hdr_cache.xid = r->xid;
		k->hdr_cache.commit_len = util_lsn_format(commit_lsn, k->hdr_cache.commit);
		k->hdr_cache.xid_len = (size_t)snprintf(k->hdr_cache.xid_text, sizeof(k->hdr_cache.xid_text),
							"%" PRIu32, r->xid);
	}
	/* Every length is given, so that librdkafka does not measure seven names and values per record. */
#define ADD(name, value, len) rd_kafka_header_add(h, name, sizeof(name) - 1, value, (ssize_t)(len))
	rd_kafka_headers_t *h = rd_kafka_headers_new(7);
	if (event) { /* a record about a transaction has only the commit's */
		char lsn[LSN_STRLEN], id[17];
		const char *op = pgo_event_op_name((Cdc__V1__Op)r->op);
		op = op ? op : "unknown";
		ADD("cdc-op", op, strlen(op));
		ADD("cdc-lsn", lsn, util_lsn_format(r->lsn, lsn));
		ADD("cdc-subscription", sub, r->sub_len);
		if (r->schema_id) {
			util_hex64(r->schema_id, id);
			ADD("cdc-schema-id", id, 16);
		}
	}
	ADD("cdc-commit-lsn", k->hdr_cache.commit, k->hdr_cache.commit_len);
	ADD("cdc-xid", k->hdr_cache.xid_text, k->hdr_cache.xid_len);
	ADD("content-type", content_type, strlen(content_type));
#undef ADD
	return h;
}

/* Counts one more event of schema.table in the transaction being delivered. Returns how many the table has
 * now. */
static uint64_t count_table(kafka_sink *k, const char *schema, size_t slen, const char *table, size_t tlen)
{
	k->cur_events++;
	for (size_t i = 0; i < k->ntables; i++)
		if (strlen(k->tables[i].schema) == slen && strlen(k->tables[i].table) == tlen &&
		    memcmp(k->tables[i].schema, schema, slen) == 0 &&
		    memcmp(k->tables[i].table, table, tlen) == 0)
			return ++k->tables[i].events;
	if (k->ntables == k->captables) {
		k->captables = k->captables ? k->captables * 2 : 8;
		k->tables = util_xrealloc(k->tables, k->captables * sizeof(*k->tables));
	}
	table_count *t = &k->tables[k->ntables++];
	t->schema = util_xmalloc(slen + 1);
	memcpy(t->schema, schema, slen);
	t->schema[slen] = '\0';
	t->table = util_xmalloc(tlen + 1);
	memcpy(t->table, table, tlen);
	t->table[tlen] = '\0';
	t->events = 1;
	return 1;
}

static const char *const content_types[] = {[KAFKA_PROTOBUF] = CONTENT_TYPE_EVENT,
					    [KAFKA_JSON] = CONTENT_TYPE_JSON,
					    [KAFKA_DEBEZIUM] = CONTENT_TYPE_JSON,
					    [KAFKA_AVRO] = CONTENT_TYPE_AVRO};

/* A record on the transactions topic. All are in partition 0, in commit order like the transactions they
 * describe. */
static void produce_txn_record(kafka_sink *k, kafka_format format, bool end, uint64_t seq)
{
	kafka_txn_record(k, format, end);
	rendered r = {.xid = k->cur_xid};
	kafka_produce(
	    k, k->set.transactions_topic, 0, k->key.data, k->key.len, k->value.data, k->value.len,
	    kafka_headers(k, &r, "", k->cur_commit.commit_lsn, false,
			  format == KAFKA_PROTOBUF ? CONTENT_TYPE_TRANSACTION : content_types[format]),
	    seq);
}

/* Deliveries and ends wait while an exactly-once commit is under way, or a record for a schema's
 * id, and after them everything that comes (it keeps its order). */
static bool holding(const kafka_sink *k)
{
	return kafka_eo_holding(k) || k->registry_wait;
}

static void hold(kafka_sink *k, const held_hdr *h, const char *data)
{
	buf_append(&k->held, h, sizeof(*h));
	if (h->len)
		buf_append(&k->held, data, h->len);
}

bool kafka_release(kafka_sink *k, char *err, size_t errlen)
{
	buf h = k->held;
	k->held = (buf){0};
	bool ok = true;
	for (size_t off = 0; ok && off < h.len && !k->failed;) {
		held_hdr hd;
		memcpy(&hd, h.data + off, sizeof(hd));
		off += sizeof(hd);
		if (hd.end)
			kafka_end_txn(&k->base, hd.seq);
		else
			ok =
			    kafka_deliver(&k->base, hd.sub, h.data + off, hd.len, &hd.c, hd.seq, err, errlen);
		off += hd.len;
	}
	if (k->held.len) { /* some waits again, with all that came after it */
		buf_free(&h);
		return ok;
	}
	buf_free(&k->held);
	buf_reset(&h);
	k->held = h; /* its room, for the next time */
	return ok;
}

/* How long a record may hold the event loop for its schema's id. It was asked for at its schema event moments
 * before, and a registry nearby answers in a few milliseconds. Then the record waits with what follows it,
 * and the loop goes on. */
#define REGISTRY_AWAIT_MS 100

/* Format avro. Whether every schema the event's records (from p to end) and the transactions topic need has
 * its id. If not, records wait for the first that has none (registry_wait). */
static bool avro_ready(kafka_sink *k, const char *p, const char *end, unsigned nrecords)
{
	uint32_t need[2] = {k->txn_key_schema, k->txn_value_schema};
	for (unsigned i = 0; i < (k->set.transactions_topic ? 2u : 0u); i++)
		if (!kafka_subjects_await(k->subjects, need[i], REGISTRY_AWAIT_MS)) {
			k->wait_schema = need[i];
			return !(k->registry_wait = true);
		}
	for (unsigned i = 0; i < nrecords && (size_t)(end - p) >= sizeof(rendered_record); i++) {
		rendered_record rec;
		memcpy(&rec, p, sizeof(rec));
		p += sizeof(rec) + (size_t)rec.key_len + rec.value_len + rec.header_len;
		need[0] = rec.key_schema;
		need[1] = rec.value_schema;
		for (int j = 0; j < 2; j++)
			if (need[j] != KAFKA_NO_SCHEMA &&
			    !kafka_subjects_await(k->subjects, need[j], REGISTRY_AWAIT_MS)) {
				k->wait_schema = need[j];
				return !(k->registry_wait = true);
			}
	}
	return true;
}

/* h (a new list if NULL and there are any) with a record's extra headers the renderer wrote at p, each as
 * "name\0", a u32 length and the value. */
static rd_kafka_headers_t *add_headers(rd_kafka_headers_t *h, const char *p, size_t len)
{
	if (!h && len)
		h = rd_kafka_headers_new(4);
	const char *end = p + len;
	while (p < end) {
		size_t name_len = strnlen(p, (size_t)(end - p));
		uint32_t n;
		if ((size_t)(end - p) < name_len + 1 + sizeof(n))
			break;
		memcpy(&n, p + name_len + 1, sizeof(n));
		const char *value = p + name_len + 1 + sizeof(n);
		if ((size_t)(end - value) < n)
			break;
		rd_kafka_header_add(h, p, (ssize_t)name_len, value, (ssize_t)n);
		p = value + n;
	}
	return h;
}

bool kafka_deliver(sink *base, uint32_t subscription, const char *data, size_t len, const sink_commit *c,
		   uint64_t seq, char *err, size_t errlen)
{
	kafka_sink *k = (kafka_sink *)base;
	rendered r;
	if (k->failed)
		return true; /* a restart is coming, and the slot will send this again */
	held_hdr held = {.seq = seq, .c = *c, .sub = subscription, .len = (uint32_t)len};
	if (holding(k)) {
		hold(k, &held, data);
		return true;
	}
	if (len < sizeof(r))
		return util_errf(err, errlen, "kafka sink: rendered event of %zu bytes", len);
	memcpy(&r, data, sizeof(r));
	size_t fixed = sizeof(r) + (size_t)r.topic_len + r.sub_len + r.schema_len + r.table_len;
	if (fixed > len || r.format > KAFKA_AVRO || (r.format == KAFKA_AVRO && !k->subjects))
		return util_errf(err, errlen, "kafka sink: rendered event is corrupt");
	const char *topic_p = data + sizeof(r), *sub = topic_p + r.topic_len;
	const char *schema = sub + r.sub_len, *table = schema + r.schema_len, *p = table + r.table_len;
	const char *end = data + len;
	char topic[256];
	size_t topic_len = r.topic_len < sizeof(topic) ? r.topic_len : sizeof(topic) - 1;
	memcpy(topic, topic_p, topic_len);
	topic[topic_len] = '\0';
	if (r.format == KAFKA_AVRO && !avro_ready(k, p, end, r.nrecords)) {
		hold(k, &held, data);
		return true;
	}

	if (k->set.exactly_once && !kafka_eo_admit(k, c, r.xid, seq))
		return true;
	if (seq != k->cur_seq) {
		tables_clear(k);
		k->cur_seq = seq;
	}
	k->cur_xid = r.xid;
	k->cur_commit = *c;
	k->cur_format = (kafka_format)r.format;
	k->cur_schemas = r.schemas;
	for (unsigned i = 0; i < r.nrecords; i++) {
		rendered_record rec;
		if ((size_t)(end - p) < sizeof(rec))
			return util_errf(err, errlen, "kafka sink: rendered event is corrupt");
		memcpy(&rec, p, sizeof(rec));
		const char *key = p + sizeof(rec), *value = key + rec.key_len, *hdr = value + rec.value_len;
		if ((size_t)(end - key) < (size_t)rec.key_len + rec.value_len + rec.header_len ||
		    rec.kind > REC_ERROR)
			return util_errf(err, errlen, "kafka sink: rendered event is corrupt");
		p = hdr + rec.header_len;
		if (rec.kind == REC_ERROR) { /* the stream holds here until the cause is gone */
			char why[600];
			snprintf(why, sizeof(why), "%.*s", (int)rec.value_len, value);
			kafka_fail(k, "an event cannot be written in Avro", why);
			return true;
		}
		uint64_t nth = 0;
		/* Only the transactions topic's records need the counts (and Debezium's transaction block,
		 * there only with one). Schema and DDL events are not events of the data topics. */
		bool about_table = kafka_table_event(r.op);
		if (k->set.transactions_topic && rec.kind != REC_TOMBSTONE && !about_table) {
			if ((r.format == KAFKA_DEBEZIUM || r.format == KAFKA_AVRO) && r.xid && !k->cur_events)
				produce_txn_record(k, (kafka_format)r.format, false, seq); /* BEGIN */
			nth = count_table(k, schema, r.schema_len, table, r.table_len);
		}
		rd_kafka_headers_t *h =
		    r.cdc_headers ? kafka_headers(k, &r, sub, c->commit_lsn, true, content_types[r.format])
				  : NULL;
		h = add_headers(h, hdr, rec.header_len);
		if (rec.kind != REC_TOMBSTONE)
			kafka_record_value(k, rec.kind,
					   rec.value_schema == KAFKA_NO_SCHEMA
					       ? 0
					       : kafka_subjects_id(k->subjects, rec.value_schema),
					   value, rec.value_len, &r, c, k->cur_events, nth);
		if (rec.has_key && rec.key_schema != KAFKA_NO_SCHEMA) { /* Avro, the wire format's header */
			buf_reset(&k->key_out);
			kafka_avro_header(&k->key_out, kafka_subjects_id(k->subjects, rec.key_schema));
			buf_append(&k->key_out, key, rec.key_len);
			key = k->key_out.data;
			rec.key_len = (uint32_t)k->key_out.len;
		}
		/* Partitioned by key (the Java partitioner, producer_defaults), so one row's changes stay in
		 * order. Schema and DDL events go to kafka.schemas_topic's partition 0, in stream order. */
		if (!kafka_produce(k, topic, about_table ? 0 : RD_KAFKA_PARTITION_UA,
				   rec.has_key ? key : NULL, rec.key_len,
				   rec.kind == REC_TOMBSTONE ? NULL : k->value.data,
				   rec.kind == REC_TOMBSTONE ? 0 : k->value.len, h, seq))
			return true;
	}
	return true;
}

/* The transactions_topic record of the transaction that just ended, if it had Kafka events. It is Debezium's
 * END for a transaction it gave a BEGIN. */
static void transaction_record(kafka_sink *k, uint64_t seq)
{
	if (!k->set.transactions_topic || k->cur_seq != seq || !k->cur_events || k->failed)
		return;
	if ((k->cur_format != KAFKA_DEBEZIUM && k->cur_format != KAFKA_AVRO) || k->cur_xid)
		produce_txn_record(k, k->cur_format, true, seq);
}

void kafka_end_txn(sink *base, uint64_t seq)
{
	kafka_sink *k = (kafka_sink *)base;
	if (holding(k)) {
		hold(k, &(held_hdr){.seq = seq, .end = true}, NULL);
		return;
	}
	transaction_record(k, seq);
	tables_clear(k);
	if (seq > k->last_ended)
		k->last_ended = seq;
	settle(k);
}

static void kafka_poll(sink *base)
{
	kafka_sink *k = (kafka_sink *)base;
	char drain[64];
	while (read(k->pipe[0], drain, sizeof(drain)) > 0)
		;
	rd_kafka_poll(k->rk, 0);
}

/* Format avro. While records wait for a schema's id, whether it came. A failure is logged once per attempt,
 * with what to do. Records go out again once it came (exactly once, at the next step). */
static void registry_check(kafka_sink *k)
{
	bool refused;
	char why[700];
	if (kafka_subjects_id(k->subjects, k->wait_schema)) {
		k->stats.registry_error[0] = k->stats.registry_subject[0] = '\0';
		k->registry_wait = false;
		k->stats.registry_waiting = false;
		k->wait_logged = 0;
		return;
	}
	kafka_subjects_error(k->subjects, k->wait_schema, why, sizeof(why), &refused);
	if (!why[0] || strcmp(why, k->stats.registry_error) == 0)
		return; /* no answer yet, or the same answer again */
	k->stats.registry_waiting = true;
	snprintf(k->stats.registry_subject, sizeof(k->stats.registry_subject), "%s",
		 kafka_subjects_subject(k->subjects, k->wait_schema));
	snprintf(k->stats.registry_error, sizeof(k->stats.registry_error), "%s", why);
	log_warn(refused
		     ? "the schema registry refused a schema: its records and every change after them wait"
		     : "the schema registry cannot be asked: records that need a schema wait",
		 "subject=%s error=\"%s\" next=\"%s\"", k->stats.registry_subject, why,
		 refused ? "make the schema compatible (the table's change, or the subject's compatibility "
			   "level: PUT /config/SUBJECT); cdc asks again at least once a minute, and at once "
			   "after a reload (SIGHUP)"
			 : "cdc asks again at least once a minute, and at once after a reload (SIGHUP)");
}

static sink_status kafka_flush(sink *base, char *err, size_t errlen)
{
	kafka_sink *k = (kafka_sink *)base;
	rd_kafka_poll(k->rk, 0);
	if (k->registry_wait)
		registry_check(k);
	if (k->subjects) {
		k->stats.registry = true;
		kafka_subjects_counts(k->subjects, &k->stats.schemas_registered, &k->stats.registry_errors);
	}
	if (!k->set.exactly_once && !k->registry_wait && k->held.len && !kafka_release(k, err, errlen))
		return SINK_FATAL;
	if (k->set.exactly_once && !kafka_eo_step(k, false, err, errlen))
		return SINK_FATAL;
	if (!k->failed)
		return SINK_OK;
	util_errf(err, errlen, "kafka: %s", k->failure);
	return k->for_good ? SINK_FATAL : SINK_RESTART;
}

static uint64_t kafka_delivered(const sink *base)
{
	const kafka_sink *k = (const kafka_sink *)base;
	if (k->failed)
		return 0;
	if (k->eo.open)
		return k->eo.committed_seq;
	const kafka_txn *first = k->q.len ? ring_at(&k->q, 0) : NULL;
	return first && first->seq <= k->last_ended ? first->seq - 1 : k->last_ended;
}

bool kafka_sink_exactly_once(const sink *base)
{
	return ((const kafka_sink *)base)->set.exactly_once;
}

int kafka_sink_wake_ms(const sink *base)
{
	const kafka_sink *k = (const kafka_sink *)base;
	int ms = k->set.exactly_once ? kafka_eo_wake_ms(k) : 0;
	uint64_t retry = k->registry_wait ? kafka_subjects_retry_ms(k->subjects) : 0;
	if (retry && (!ms || retry < (uint64_t)ms))
		ms = (int)retry;
	return ms;
}

static int kafka_fd(const sink *base)
{
	return ((const kafka_sink *)base)->pipe[0];
}

static bool kafka_busy(const sink *base)
{
	const kafka_sink *k = (const kafka_sink *)base;
	return (k->held.len && k->held.len >= k->busy_bytes) ||
	       (k->busy_at && (size_t)rd_kafka_outq_len(k->rk) >= k->busy_at) ||
	       (k->busy_bytes && k->queued_bytes >= k->busy_bytes);
}

static bool kafka_finish(sink *base, int timeout_ms)
{
	kafka_sink *k = (kafka_sink *)base;
	char err[512];
	for (uint64_t until = util_now_ms() + (uint64_t)timeout_ms;
	     (k->eo.open || (k->held.len && !k->registry_wait)) && !k->failed && util_now_ms() < until;) {
		if (!kafka_eo_can_finish(k))
			break;
		if (!kafka_eo_step(k, true, err, sizeof(err)))
			kafka_fail(k, "cannot deliver", err);
		rd_kafka_poll(k->rk, 10);
	}
	return rd_kafka_flush(k->rk, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR && !k->failed;
}

static bool kafka_restart(sink *base, char *err, size_t errlen)
{
	kafka_sink *k = (kafka_sink *)base;
	/* Exactly once, a commit's end under way is waited for, and what the open Kafka transaction holds
	 * is aborted. A producer that can go on (the failure was abortable) is kept. */
	kafka_eo_settle(k);
	if (k->eo.open)
		kafka_eo_abort(k);
	bool keep = k->set.exactly_once && k->eo.ready && !rd_kafka_fatal_error(k->rk, NULL, 0) &&
		    !k->eo.open && !k->eo.renew;
	if (!k->set.exactly_once) /* what can still be delivered is (a consumer may see it twice) */
		rd_kafka_flush(k->rk, 5000);
	ring_clear(&k->q);
	buf_reset(&k->held);
	k->registry_wait = false; /* what waited comes again from the slot */
	k->failed = false;
	k->stats.in_flight = 0;
	k->queued_bytes = 0;
	k->stats.restarts++;
	tables_clear(k);
	if (keep)
		return true;
	topics_clear(k);
	rd_kafka_destroy(k->rk);
	k->rk = NULL;
	k->eo = (struct kafka_eo){
	    .committed_seq = k->eo.committed_seq, .sources = k->eo.sources, .capsources = k->eo.capsources};
	return producer_new(k, err, errlen);
}

/* Format avro. It starts the registry's worker once a subscription needs it, and tells it the registry in
 * force. It also adds the transactions topic's schemas. */
static void avro_bind(kafka_sink *k)
{
	bool avro = false;
	for (size_t i = 0; i < k->nsubs; i++)
		avro |= k->subs[i].format == KAFKA_AVRO;
	char err[256];
	if (avro && !k->subjects && !(k->subjects = kafka_subjects_new(k->pipe[1], err, sizeof(err))))
		log_error("format: avro cannot write records", "error=\"%s\"", err);
	if (!k->subjects)
		return;
	kafka_subjects_bind(k->subjects, &k->set.registry, k->set.compatibility);
	if (avro && k->set.transactions_topic) {
		kafka_subject_strategy strategy = KAFKA_SUBJECT_TOPIC;
		for (size_t i = 0; i < k->nsubs; i++)
			if (k->subs[i].format == KAFKA_AVRO)
				strategy = k->subs[i].subjects;
		k->txn_key_schema = kafka_subjects_fixed(k->subjects, &dbz_txn_key_schema,
							 k->set.transactions_topic, true, strategy);
		k->txn_value_schema = kafka_subjects_fixed(k->subjects, &dbz_txn_value_schema,
							   k->set.transactions_topic, false, strategy);
	}
}

static void free_settings(kafka_sink *k)
{
	for (size_t i = 0; i < k->set.nproperties; i++) {
		free((char *)k->set.properties[i].key);
		free((char *)k->set.properties[i].value);
	}
	free((kafka_property *)k->set.properties);
	free((char *)k->set.brokers);
	free((char *)k->set.transactions_topic);
	free((char *)k->set.schemas_topic);
	free((char *)k->set.positions_topic);
	free((char *)k->set.transactional_id);
	free((char *)k->set.registry.url);
	free((char *)k->set.registry.username);
	free((char *)k->set.registry.password);
	free((char *)k->set.registry.ca_file);
	free((char *)k->set.registry.cert_file);
	free((char *)k->set.registry.key_file);
	free((char *)k->set.compatibility);
	for (size_t i = 0; i < k->nsubs; i++) {
		free((char *)k->subs[i].topic);
		free((char *)k->subs[i].server_name);
	}
	free(k->subs);
}

static char *dup_or_null(const char *s)
{
	return s ? util_xstrdup(s) : NULL;
}

static bool same_setting(const kafka_sink_settings *a, const kafka_sink_settings *b, const char *key)
{
	const char *x = kafka_producer_setting(a, key), *y = kafka_producer_setting(b, key);
	return x == y || (x && y && strcmp(x, y) == 0);
}

/* A reload read sasl.username or sasl.password again (from their files, say). librdkafka takes them at its
 * next authentication, without a restart. The other properties wait for one. */
static void renew_credentials(kafka_sink *k, const kafka_sink_settings *next)
{
	if (!k->rk ||
	    (same_setting(&k->set, next, "sasl.username") && same_setting(&k->set, next, "sasl.password")))
		return;
	const char *user = kafka_producer_setting(next, "sasl.username");
	const char *password = kafka_producer_setting(next, "sasl.password");
	rd_kafka_error_t *e =
	    rd_kafka_sasl_set_credentials(k->rk, user ? user : "", password ? password : "");
	if (e) {
		log_warn("kafka: cannot change the SASL credentials; they take effect at the next restart",
			 "error=\"%s\"", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
	} else {
		k->stats.auth_failed = false; /* a refusal of the new ones is said again */
		log_info("kafka: SASL credentials changed; the next authentication uses them",
			 "username_changed=%s",
			 same_setting(&k->set, next, "sasl.username") ? "false" : "true");
	}
}

void kafka_sink_bind(sink *s, const kafka_sink_settings *settings, const kafka_sub_settings *subs,
		     size_t nsubs)
{
	kafka_sink *k = (kafka_sink *)s;
	renew_credentials(k, settings);
	free_settings(k);
	k->topic_sub = UINT32_MAX; /* the topics may be others now */
	k->set = (kafka_sink_settings){.brokers = util_xstrdup(settings->brokers),
				       .nproperties = settings->nproperties,
				       .transactions_topic = dup_or_null(settings->transactions_topic),
				       .schemas_topic = dup_or_null(settings->schemas_topic),
				       .exactly_once = settings->exactly_once,
				       .positions_topic = dup_or_null(settings->positions_topic),
				       .transactional_id = dup_or_null(settings->transactional_id),
				       .commit_interval_ms = settings->commit_interval_ms,
				       .commit_events = settings->commit_events,
				       .registry = {.url = dup_or_null(settings->registry.url),
						    .username = dup_or_null(settings->registry.username),
						    .password = dup_or_null(settings->registry.password),
						    .ca_file = dup_or_null(settings->registry.ca_file),
						    .cert_file = dup_or_null(settings->registry.cert_file),
						    .key_file = dup_or_null(settings->registry.key_file),
						    .timeout_ms = settings->registry.timeout_ms},
				       .compatibility = dup_or_null(settings->compatibility)};
	kafka_property *props =
	    util_xcalloc(settings->nproperties ? settings->nproperties : 1, sizeof(*props));
	for (size_t i = 0; i < settings->nproperties; i++)
		props[i] = (kafka_property){util_xstrdup(settings->properties[i].key),
					    util_xstrdup(settings->properties[i].value)};
	k->set.properties = props;
	k->nsubs = nsubs;
	k->subs = util_xcalloc(nsubs ? nsubs : 1, sizeof(*k->subs));
	for (size_t i = 0; i < nsubs; i++) {
		k->subs[i] = subs[i];
		k->subs[i].topic = dup_or_null(subs[i].topic);
		k->subs[i].server_name = dup_or_null(subs[i].server_name);
	}
	avro_bind(k);
}

void kafka_sink_set_database(sink *s, const char *name)
{
	kafka_sink *k = (kafka_sink *)s;
	free(k->database);
	k->database = dup_or_null(name);
}

static void kafka_free(sink *base)
{
	kafka_sink *k = (kafka_sink *)base;
	topics_clear(k);
	free(k->topics);
	kafka_eo_settle(k);
	if (k->rk)
		rd_kafka_destroy(k->rk);
	free_settings(k);
	tables_clear(k);
	free(k->tables);
	ring_free(&k->q);
	kafka_render_free(k);
	free(k->database);
	free(k->eo.sources);
	buf_free(&k->held);
	kafka_subjects_free(k->subjects); /* before the pipe its worker writes to */
	close(k->pipe[0]);
	close(k->pipe[1]);
	free(k);
}

static const sink_ops kafka_ops = {
    .name = "kafka",
    .render = kafka_render,
    .deliver = kafka_deliver,
    .end_txn = kafka_end_txn,
    .flush = kafka_flush,
    .delivered = kafka_delivered,
    .free = kafka_free,
    .fd = kafka_fd,
    .poll = kafka_poll,
    .busy = kafka_busy,
    .finish = kafka_finish,
    .restart = kafka_restart,
};

sink *kafka_sink_new(const kafka_sink_settings *settings, const kafka_sub_settings *subs, size_t nsubs,
		     char *err, size_t errlen)
{
	kafka_sink *k = util_xcalloc(1, sizeof(*k));
	k->q = RING_INIT(kafka_txn);
	k->base.ops = &kafka_ops;
	if (pipe2(k->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		util_errf(err, errlen, "kafka sink: pipe: %s", strerror(errno));
		free(k);
		return NULL;
	}
	kafka_sink_bind(&k->base, settings, subs, nsubs);
	if (!producer_new(k, err, errlen)) {
		kafka_free(&k->base);
		return NULL;
	}
	return &k->base;
}

void kafka_sink_watch_stream(sink *s, kafka_stream_fn fn, void *ctx)
{
	kafka_sink *k = (kafka_sink *)s;
	k->stream_fn = fn;
	k->stream_ctx = ctx;
}

const kafka_stats *kafka_sink_stats(const sink *s)
{
	return &((const kafka_sink *)s)->stats;
}
