/* test_kafka_eo.c: the exactly-once cycle of the Kafka sink (sinks/kafka/kafka_sink.c) against
 * librdkafka's mock cluster in this process: commits and the position record, what arrives during
 * a commit held and sent in the next Kafka transaction, a source transaction Kafka holds skipped,
 * a stream that broke inside a source transaction aborting the Kafka one, and a Kafka transaction
 * that waits while the stream is lost, commits under a new one, and is aborted if another process
 * committed meanwhile; the position read back from the end of a long positions topic; then, without
 * exactly once, a fatal producer error that a message meets first. */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "sinks/kafka/kafka_internal.h"
#include "sinks/kafka/position.h"
#include "test.h"

static sink *k;
static char err[1100];

/* The commit time of the source transactions delivered (0: now, a live stream). */
static int64_t commit_time;

/* Renders and delivers one insert of row id in source transaction seq (commit LSN lsn). */
static void deliver(uint64_t seq, uint64_t lsn, int id)
{
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.subscription = "s";
	e.schema = "public";
	e.table = "t";
	e.op = CDC__V1__OP__OP_INSERT;
	e.xid = (uint32_t)seq;
	e.lsn = lsn - 8;
	char v[16];
	snprintf(v, sizeof(v), "%d", id);
	e.tag = v; /* a value that differs per row, for the byte count */
	buf out = {0};
	k->ops->render(k, 0, &e, &out);
	sink_commit c = {.commit_lsn = lsn,
			 .commit_time = commit_time ? commit_time : util_wall_us(),
			 .tx_index = (uint32_t)id};
	CHECK(k->ops->deliver(k, 0, out.data, out.len, &c, seq, err, sizeof(err)));
	buf_free(&out);
}

/* The stream the sink is told this process holds (kafka_sink_watch_stream). */
static uint64_t stream_no = 1;

static uint64_t held_stream(void *ctx)
{
	(void)ctx;
	return stream_no;
}

/* Polls and flushes for about half a second (the sink should not deliver). */
static sink_status linger(void)
{
	sink_status st = SINK_OK;
	for (int i = 0; i < 50 && st == SINK_OK; i++) {
		usleep(10000);
		k->ops->poll(k);
		st = k->ops->flush(k, err, sizeof(err));
	}
	return st;
}

/* count position records keyed key, each with commit LSN lsn, as another producer writes them (a cdc that
 * took over, or others sharing the topic). */
static void positions_from_elsewhere(const char *brokers, const char *key, uint64_t lsn, int count)
{
	char why[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	CHECK(rd_kafka_conf_set(conf, "bootstrap.servers", brokers, why, sizeof(why)) == RD_KAFKA_CONF_OK);
	rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.commit_lsn = lsn;
	uint8_t v[64];
	size_t n = cdc__v1__transaction__pack(&t, v);
	for (int i = 0; i < count; i++)
		while (rd_kafka_producev(p, RD_KAFKA_V_TOPIC("cdc.positions"), RD_KAFKA_V_PARTITION(0),
					 RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE(v, n),
					 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
					 RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			rd_kafka_poll(p, 10);
	CHECK_INT(rd_kafka_flush(p, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_destroy(p);
}

/* A whole source transaction seq of one row. */
static void whole(uint64_t seq, uint64_t lsn)
{
	deliver(seq, lsn, 1);
	k->ops->end_txn(k, seq);
}

/* Polls and flushes until the sink says every transaction up to seq is delivered (or 10 s). */
static sink_status settle_to(uint64_t seq)
{
	sink_status st = SINK_OK;
	for (int i = 0; i < 1000 && st == SINK_OK && k->ops->delivered(k) < seq; i++) {
		usleep(10000);
		k->ops->poll(k);
		st = k->ops->flush(k, err, sizeof(err));
	}
	return st;
}

int main(void)
{
	log_setup(LOG_LEVEL_WARN, LOG_FORMAT_TEXT);
	char why[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_conf_set(conf, "log_level", "0", why,
			  sizeof(why)); /* the mock's own handle has no brokers */
	rd_kafka_t *mrk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(mrk, 1);
	const kafka_property props[] = {{"linger.ms", "5"}};
	kafka_sink_settings set = {.brokers = rd_kafka_mock_cluster_bootstraps(mc),
				   .properties = props,
				   .nproperties = 1,
				   .exactly_once = true,
				   .positions_topic = "cdc.positions",
				   .transactional_id = "cdc-test"};
	kafka_sub_settings sub = {.topic = "t"};
	k = kafka_sink_new(&set, &sub, 1, err, sizeof(err));
	CHECK(k != NULL);
	const kafka_stats *st = kafka_sink_stats(k);

	/* One source transaction: one Kafka transaction, its position the commit LSN. */
	deliver(1, 0x1000, 1);
	deliver(1, 0x1000, 2);
	k->ops->end_txn(k, 1);
	CHECK_INT(k->ops->delivered(k), 0); /* not before the Kafka commit */
	CHECK_INT(settle_to(1), SINK_OK);
	CHECK_INT(k->ops->delivered(k), 1);
	CHECK_INT(st->commits, 1);
	CHECK_INT(st->position, 0x1000);

	/* A transaction that arrives while the commit of the one before is under way is held, then
	 * goes out in the next Kafka transaction. */
	whole(2, 0x2000);
	CHECK_INT(k->ops->flush(k, err, sizeof(err)), SINK_OK); /* starts the commit: messages in flight */
	CHECK(k->ops->busy(k) == false);			/* holding costs little: reading goes on */
	whole(3, 0x3000);
	CHECK_INT(k->ops->delivered(k), 1);
	CHECK_INT(settle_to(3), SINK_OK);
	CHECK_INT(k->ops->delivered(k), 3);
	CHECK_INT(st->commits, 3);
	CHECK_INT(st->position, 0x3000);

	/* Sent again by the slot (a crash before it was confirmed): Kafka holds it, it is skipped. */
	whole(4, 0x2000);
	CHECK_INT(settle_to(4), SINK_OK);
	CHECK_INT(st->skipped, 1);
	CHECK_INT(st->commits, 3);

	/* The stream breaks inside transaction 5; the slot sends it again as 6: the Kafka
	 * transaction holding part of 5 is aborted, and nothing counts as delivered past 4. */
	deliver(5, 0x5000, 1);
	deliver(6, 0x5000, 1);
	CHECK_INT(k->ops->flush(k, err, sizeof(err)), SINK_RESTART);
	CHECK(strstr(err, "the stream broke inside a source transaction") != NULL);
	CHECK_INT(k->ops->delivered(k), 0);
	CHECK(k->ops->restart(k, err, sizeof(err)));
	CHECK_INT(st->aborts, 1);
	/* The slot sends it again, whole: it goes out and commits. */
	deliver(7, 0x5000, 1);
	deliver(7, 0x5000, 2);
	k->ops->end_txn(k, 7);
	CHECK_INT(settle_to(7), SINK_OK);
	CHECK_INT(st->commits, 4);
	CHECK_INT(st->position, 0x5000);

	/* The stream is lost with a whole source transaction in the open Kafka transaction: it waits
	 * (no position record, no commit), and commits under the next stream, Kafka's position being
	 * unmoved. */
	kafka_sink_watch_stream(k, held_stream, NULL);
	whole(8, 0x8000);
	stream_no = 0;
	CHECK_INT(linger(), SINK_OK);
	CHECK_INT(k->ops->delivered(k), 7);
	CHECK_INT(st->commits, 4);
	stream_no = 2;
	CHECK_INT(settle_to(8), SINK_OK);
	CHECK_INT(st->commits, 5);
	CHECK_INT(st->position, 0x8000);

	/* Lost again, and meanwhile another process streamed the slot and committed up to 0x9500:
	 * under the next stream the open Kafka transaction is aborted, and the position is Kafka's. */
	whole(9, 0x9000);
	stream_no = 0;
	CHECK_INT(linger(), SINK_OK);
	positions_from_elsewhere(set.brokers, "cdc-test", 0x9500, 1);
	stream_no = 3;
	CHECK_INT(settle_to(9), SINK_RESTART);
	CHECK(strstr(err, "another process streamed the slot and committed to Kafka") != NULL);
	CHECK(k->ops->restart(k, err, sizeof(err)));
	CHECK_INT(st->aborts, 2);
	CHECK_INT(st->commits, 5);
	CHECK_INT(st->position, 0x9500);
	/* What the slot sends again up to there is skipped. */
	whole(10, 0x9000);
	CHECK_INT(settle_to(10), SINK_OK);
	CHECK_INT(st->skipped, 2);

	/* A backlog (commits older than a second): a Kafka transaction holds 100 ms of the stream at
	 * least, so these two go in one. */
	commit_time = util_wall_us() - 5000000;
	uint64_t commits = st->commits, t0 = util_now_ms();
	whole(11, 0xA000);
	CHECK_INT(k->ops->flush(k, err, sizeof(err)), SINK_OK);
	whole(12, 0xB000);
	CHECK_INT(settle_to(12), SINK_OK);
	CHECK_INT(st->commits, commits + 1);
	CHECK(util_now_ms() - t0 >= 100);
	CHECK_INT(st->position, 0xB000);

	k->ops->free(k);

	/* The position is read back from the end: behind 5,000 records of other keys, a key's last record
	 * is found in the first 1,000 offsets before the end, an older one by reading further back, and
	 * a key without a record reads the partition whole. */
	positions_from_elsewhere(set.brokers, "others", 0x1, 5000);
	positions_from_elsewhere(set.brokers, "near", 0xC000, 1);
	uint64_t lsn, records;
	CHECK(kafka_position_read(set.brokers, NULL, 0, "cdc.positions", "near", 10000, &lsn, &records, err,
				  sizeof(err)));
	CHECK_INT(lsn, 0xC000);
	CHECK(records >= 1 && records <= 1000);
	CHECK(kafka_position_read(set.brokers, NULL, 0, "cdc.positions", "cdc-test", 10000, &lsn, &records,
				  err, sizeof(err)));
	CHECK_INT(lsn, 0xB000);
	CHECK(records > 5000);
	uint64_t all;
	CHECK(kafka_position_read(set.brokers, NULL, 0, "cdc.positions", "nobody", 10000, &lsn, &all, err,
				  sizeof(err)));
	CHECK_INT(lsn, 0);
	CHECK(all >= records);

	/* A fatal error of the producer that a message meets before the error callback is served: the
	 * sink names it as the callback would (CI saw "a message could not be queued: Local: Fatal
	 * error" in test_kafka.py's restart test). */
	set.exactly_once = false;
	k = kafka_sink_new(&set, &sub, 1, err, sizeof(err));
	CHECK(k != NULL);
	whole(1, 0x1000);
	CHECK_INT(settle_to(1), SINK_OK);
	CHECK_INT(rd_kafka_test_fatal_error(((kafka_sink *)k)->rk,
					    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
					    "sequence desynchronised"),
		  RD_KAFKA_RESP_ERR_NO_ERROR);
	whole(2, 0x2000); /* no poll in between */
	CHECK_INT(k->ops->flush(k, err, sizeof(err)), SINK_RESTART);
	CHECK(strstr(err, "fatal producer error") != NULL);
	CHECK(strstr(err, "sequence desynchronised") != NULL);
	k->ops->free(k);
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(mrk);
	return TEST_SUMMARY("test_kafka_eo");
}
