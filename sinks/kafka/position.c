/* See position.h. A consumer without a group. It assigns itself partition 0 a window of offsets before its
 * end and reads to the end (partition EOF, which for a read-committed consumer is the last stable offset),
 * from further back each time until the key's record is found or the partition read whole. */
#include "sinks/kafka/position.h"

#include <librdkafka/rdkafka.h>
#include <string.h>

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/log.h"
#include "decoder/base/util.h"
#include "sinks/kafka/probe.h"

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *text)
{
	(void)rk;
	if (level <= 4)
		log_warn("kafka client", "facility=%s message=\"%s\"", fac, text);
}

static rd_kafka_t *consumer_new(const char *brokers, const kafka_property *properties, size_t n,
				const char *key, char *err, size_t errlen)
{
	char why[512], group[300];
	snprintf(group, sizeof(group), "%s.position", key);
	const kafka_property fixed[] = {
	    {"group.id", group},
	    {"enable.auto.commit", "false"},
	    {"isolation.level", "read_committed"},
	    {"enable.partition.eof", "true"},
	    /* the end of the partition is known at the first answer, not after the broker's wait */
	    {"fetch.wait.max.ms", "10"},
	};
	rd_kafka_conf_t *conf = kafka_client_conf(brokers, properties, n, "cdc-position", err, errlen);
	if (!conf)
		return NULL;
	bool ok = true;
	for (size_t i = 0; ok && i < sizeof(fixed) / sizeof(fixed[0]); i++)
		ok = kafka_conf_set(conf, fixed[i].key, fixed[i].value, err, errlen);
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_log_cb(conf, on_log);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		util_errf(err, errlen, "cannot create the consumer that reads the position back: %s", why);
	}
	return rk;
}

/* Whether topic exists (false with *failed when the brokers did not answer). */
static bool topic_exists(rd_kafka_t *rk, const char *topic, int timeout_ms, bool *failed, char *err,
			 size_t errlen)
{
	rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, timeout_ms);
	rd_kafka_topic_destroy(t);
	*failed = e != RD_KAFKA_RESP_ERR_NO_ERROR;
	if (*failed) {
		util_errf(err, errlen, "cannot read the metadata of %s: %s", topic, rd_kafka_err2str(e));
		return false;
	}
	bool exists = md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
		      md->topics[0].partition_cnt > 0;
	rd_kafka_metadata_destroy(md);
	return exists;
}

/* The commit LSN a positions record carries, or 0 if it is not one. */
static uint64_t record_lsn(const rd_kafka_message_t *m, const char *key)
{
	size_t klen = strlen(key);
	if (m->key_len != klen || memcmp(m->key, key, klen) != 0 || !m->payload)
		return 0;
	Cdc__V1__Transaction *t = cdc__v1__transaction__unpack(NULL, m->len, m->payload);
	if (!t) {
		log_warn("ignored a record of the positions topic that is not a cdc.v1.Transaction",
			 "offset=%lld", (long long)m->offset);
		return 0;
	}
	uint64_t lsn = t->commit_lsn;
	cdc__v1__transaction__free_unpacked(t, NULL);
	return lsn;
}

/* The offsets read back first, before the end of the partition; each further try reads WIDEN times as many.
 */
#define WINDOW 1000
#define WIDEN 8

/* Reads partition 0 of topic from offset from to its end (read committed). Sets *lsn from the last record
 * keyed key (unchanged if none) and counts the records read in *records. */
static bool read_from(rd_kafka_t *rk, const char *topic, int64_t from, const char *key, uint64_t deadline,
		      int timeout_ms, uint64_t *lsn, uint64_t *records, char *err, size_t errlen)
{
	rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(parts, topic, 0)->offset = from;
	rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		return util_errf(err, errlen, "cannot read %s: %s", topic, rd_kafka_err2str(e));
	bool failed = false, done = false;
	while (!failed && !done) {
		if (util_now_ms() >= deadline) {
			util_errf(err, errlen, "reading %s back did not reach its end within %d ms", topic,
				  timeout_ms);
			failed = true;
			break;
		}
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			done = true;
		} else if (m->err) {
			failed = true;
			util_errf(err, errlen, "cannot read %s: %s", topic, rd_kafka_message_errstr(m));
		} else {
			uint64_t v = record_lsn(m, key);
			(*records)++;
			if (v)
				*lsn = v;
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_assign(rk, NULL);
	return !failed;
}

bool kafka_position_read(const char *brokers, const kafka_property *properties, size_t nproperties,
			 const char *topic, const char *key, int timeout_ms, uint64_t *commit_lsn,
			 uint64_t *records, char *err, size_t errlen)
{
	*commit_lsn = *records = 0;
	rd_kafka_t *rk = consumer_new(brokers, properties, nproperties, key, err, errlen);
	if (!rk)
		return false;
	bool failed = false;
	if (!topic_exists(rk, topic, timeout_ms, &failed, err, errlen)) {
		rd_kafka_destroy(rk);
		return !failed;
	}
	/* From the end backwards: the key's last record is near the end unless other producers wrote much
	 * since, and the active segment, which compaction never shortens, may hold millions of records. */
	int64_t low = 0, high = 0;
	rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, topic, 0, &low, &high, timeout_ms);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		failed = true;
		util_errf(err, errlen, "cannot read the offsets of %s: %s", topic, rd_kafka_err2str(e));
	}
	uint64_t deadline = util_now_ms() + (uint64_t)timeout_ms;
	for (int64_t window = WINDOW; !failed; window *= WIDEN) {
		int64_t from = high - low > window ? high - window : low;
		failed =
		    !read_from(rk, topic, from, key, deadline, timeout_ms, commit_lsn, records, err, errlen);
		if (*commit_lsn || from == low)
			break;
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return !failed;
}
