/* mock_cluster.c: a librdkafka mock Kafka cluster as a process of its own, the broker of the
 * integration tests. Prints "bootstrap=HOST:PORT,..." as its first line, then obeys one command
 * per line on stdin (answering "ok", "ok VALUE" or "error: ..." per line) until "quit" or end of
 * input.
 *
 * Usage: kafka_mock [--brokers N] [--partitions N]
 *
 * Commands (broker ids are 1..N; error codes are numbers or librdkafka names such as
 * REQUEST_TIMED_OUT or _TRANSPORT; api keys are Kafka protocol numbers, Produce = 0):
 *   down ID | up ID           disconnect a broker and refuse its connections / accept them again
 *   alldown | allup           the same for every broker
 *   error APIKEY ERR COUNT    the next COUNT requests of APIKEY, on any broker, fail with ERR
 *   clear APIKEY              forget the errors still queued for APIKEY (those of "error")
 *   brokererror ID APIKEY ERR COUNT [MS]
 *                             the next COUNT requests of APIKEY to broker ID fail with ERR
 *                             (before any of "error"), answered MS milliseconds late (default 0;
 *                             ERR 0 or NO_ERROR: answered late, without an error)
 *   pending ID APIKEY         answers "ok N": N errors of "brokererror" still queued
 *   rtt ID MS                 delay every response of broker ID (-1: all) by MS milliseconds
 *   topic NAME [PARTITIONS]   create a topic (default: --partitions, else 4)
 *   coordinator ID TXNID      make broker ID the transaction coordinator of transactional.id TXNID
 *   leader TOPIC PARTITION ID make broker ID the leader of a partition of an existing topic
 *   quit
 *
 * A broker that was given errors of its own for an api key ("brokererror") keeps an error stack for
 * it, empty or not, and librdkafka's mock then never applies the cluster's errors ("error") of that
 * api key to it: in one mock's lifetime, use one kind or the other per api key.
 *
 * Topics a client auto-creates get the mock's own default of 4 partitions (librdkafka 2.0.2 has
 * no setter for it): tests that depend on a partition count create their topics first. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define DEFAULT_BROKERS 3
#define DEFAULT_PARTITIONS 4 /* the mock's own default for auto-created topics */
#define MAX_ARGS 8

typedef struct mock {
	rd_kafka_t *rk; /* only for the mock cluster's bookkeeping: never produces */
	rd_kafka_mock_cluster_t *mcluster;
	int brokers;
	int partitions;
} mock;

static void usage(FILE *f)
{
	fprintf(f, "usage: kafka_mock [--brokers N] [--partitions N]\n"
		   "Runs a librdkafka mock Kafka cluster on 127.0.0.1; prints bootstrap=HOST:PORT,...\n"
		   "then reads commands on stdin (see tests/kafka/mock_cluster.c).\n");
}

/* Parses a whole decimal int in [lo, hi]. */
static bool parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* An error code given as a number or as librdkafka's name for it (REQUEST_TIMED_OUT, _TRANSPORT;
 * an "ERR_" or "RD_KAFKA_RESP_ERR_" prefix is accepted). */
static bool parse_err(const char *s, rd_kafka_resp_err_t *out)
{
	const struct rd_kafka_err_desc *descs;
	size_t n;
	long v;

	if (parse_int(s, INT_MIN, INT_MAX, &v)) {
		*out = (rd_kafka_resp_err_t)v;
		return true;
	}
	if (strncmp(s, "RD_KAFKA_RESP_ERR_", 18) == 0)
		s += 18;
	else if (strncmp(s, "ERR_", 4) == 0)
		s += 4;
	rd_kafka_get_err_descs(&descs, &n);
	for (size_t i = 0; i < n; i++) {
		if (descs[i].name && strcmp(descs[i].name, s) == 0) {
			*out = descs[i].code;
			return true;
		}
	}
	return false;
}

/* Writes one answer line; stdout is line buffered, so the test reads it at once. */
static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void reply_err(rd_kafka_resp_err_t err)
{
	if (err)
		reply("error: %s (%s)", rd_kafka_err2str(err), rd_kafka_err2name(err));
	else
		reply("ok");
}

/* Splits line in place on blanks into at most MAX_ARGS words; returns the count, or -1 if there
 * are more. */
static int split(char *line, char **argv)
{
	int argc = 0;
	char *save = NULL;

	for (char *w = strtok_r(line, " \t\r\n", &save); w; w = strtok_r(NULL, " \t\r\n", &save)) {
		if (argc == MAX_ARGS)
			return -1;
		argv[argc++] = w;
	}
	return argc;
}

/* Runs one command line. Returns false on "quit". */
static bool run_command(mock *m, char *line)
{
	char *argv[MAX_ARGS];
	int argc = split(line, argv);
	long id, api, count, ms;
	rd_kafka_resp_err_t err;

	if (argc < 0) {
		reply("error: too many words");
		return true;
	}
	if (argc == 0) /* a blank line: nothing to do, still one answer per line */
		reply("ok");
	else if (strcmp(argv[0], "quit") == 0 && argc == 1) {
		reply("ok");
		return false;
	} else if ((strcmp(argv[0], "down") == 0 || strcmp(argv[0], "up") == 0) && argc == 2) {
		if (!parse_int(argv[1], 1, m->brokers, &id))
			reply("error: broker id must be 1..%d", m->brokers);
		else if (argv[0][0] == 'd')
			reply_err(rd_kafka_mock_broker_set_down(m->mcluster, (int32_t)id));
		else
			reply_err(rd_kafka_mock_broker_set_up(m->mcluster, (int32_t)id));
	} else if (strcmp(argv[0], "alldown") == 0 && argc == 1) {
		reply_err(rd_kafka_mock_broker_set_down(m->mcluster, -1));
	} else if (strcmp(argv[0], "allup") == 0 && argc == 1) {
		reply_err(rd_kafka_mock_broker_set_up(m->mcluster, -1));
	} else if (strcmp(argv[0], "error") == 0 && argc == 4) {
		if (!parse_int(argv[1], 0, INT16_MAX, &api))
			reply("error: bad api key '%s'", argv[1]);
		else if (!parse_err(argv[2], &err))
			reply("error: unknown error code '%s'", argv[2]);
		else if (!parse_int(argv[3], 1, 100000, &count))
			reply("error: count must be 1..100000");
		else {
			rd_kafka_resp_err_t *errs = malloc((size_t)count * sizeof(*errs));

			if (!errs) {
				reply("error: out of memory");
				return true;
			}
			for (long i = 0; i < count; i++)
				errs[i] = err;
			rd_kafka_mock_push_request_errors_array(m->mcluster, (int16_t)api, (size_t)count,
								errs);
			free(errs);
			reply("ok");
		}
	} else if (strcmp(argv[0], "brokererror") == 0 && (argc == 5 || argc == 6)) {
		if (!parse_int(argv[1], 1, m->brokers, &id))
			reply("error: broker id must be 1..%d", m->brokers);
		else if (!parse_int(argv[2], 0, INT16_MAX, &api))
			reply("error: bad api key '%s'", argv[2]);
		else if (!parse_err(argv[3], &err))
			reply("error: unknown error code '%s'", argv[3]);
		else if (!parse_int(argv[4], 1, 100000, &count))
			reply("error: count must be 1..100000");
		else if (argc == 6 && !parse_int(argv[5], 0, INT_MAX, &ms))
			reply("error: bad milliseconds '%s'", argv[5]);
		else {
			rd_kafka_resp_err_t r = RD_KAFKA_RESP_ERR_NO_ERROR;

			/* One (error, rtt) pair per call: the count is not known at compile time. */
			for (long i = 0; i < count && !r; i++)
				r = rd_kafka_mock_broker_push_request_error_rtts(
				    m->mcluster, (int32_t)id, (int16_t)api, 1, err, argc == 6 ? (int)ms : 0);
			reply_err(r);
		}
	} else if (strcmp(argv[0], "pending") == 0 && argc == 3) {
		size_t n = 0;

		if (!parse_int(argv[1], 1, m->brokers, &id))
			reply("error: broker id must be 1..%d", m->brokers);
		else if (!parse_int(argv[2], 0, INT16_MAX, &api))
			reply("error: bad api key '%s'", argv[2]);
		else if ((err = rd_kafka_mock_broker_error_stack_cnt(m->mcluster, (int32_t)id, (int16_t)api,
								     &n)))
			reply_err(err);
		else
			reply("ok %zu", n);
	} else if (strcmp(argv[0], "clear") == 0 && argc == 2) {
		if (!parse_int(argv[1], 0, INT16_MAX, &api))
			reply("error: bad api key '%s'", argv[1]);
		else {
			rd_kafka_mock_clear_request_errors(m->mcluster, (int16_t)api);
			reply("ok");
		}
	} else if (strcmp(argv[0], "rtt") == 0 && argc == 3) {
		if (!parse_int(argv[1], -1, m->brokers, &id) || id == 0)
			reply("error: broker id must be 1..%d or -1", m->brokers);
		else if (!parse_int(argv[2], 0, INT_MAX, &ms))
			reply("error: bad milliseconds '%s'", argv[2]);
		else
			reply_err(rd_kafka_mock_broker_set_rtt(m->mcluster, (int32_t)id, (int)ms));
	} else if (strcmp(argv[0], "topic") == 0 && (argc == 2 || argc == 3)) {
		long parts = m->partitions;

		if (argc == 3 && !parse_int(argv[2], 1, 100000, &parts))
			reply("error: partitions must be 1..100000");
		else
			reply_err(rd_kafka_mock_topic_create(m->mcluster, argv[1], (int)parts,
							     m->brokers < 3 ? m->brokers : 3));
	} else if (strcmp(argv[0], "coordinator") == 0 && argc == 3) {
		if (!parse_int(argv[1], 1, m->brokers, &id))
			reply("error: broker id must be 1..%d", m->brokers);
		else
			reply_err(
			    rd_kafka_mock_coordinator_set(m->mcluster, "transaction", argv[2], (int32_t)id));
	} else if (strcmp(argv[0], "leader") == 0 && argc == 4) {
		long partition;
		if (!parse_int(argv[2], 0, 99999, &partition))
			reply("error: partition must be 0..99999");
		else if (!parse_int(argv[3], 1, m->brokers, &id))
			reply("error: broker id must be 1..%d", m->brokers);
		else
			reply_err(rd_kafka_mock_partition_set_leader(m->mcluster, argv[1], (int32_t)partition,
								     (int32_t)id));
	} else {
		reply("error: unknown command or wrong arguments: %s", argv[0]);
	}
	return true;
}

/* Kafka brokers answer with Nagle's algorithm off (TCP_NODELAY); librdkafka 2.0.2's mock leaves it
 * on, so a response written while the one before is unacknowledged waits for the client's delayed
 * acknowledgement, 40 ms on Linux: measured, it put 40 ms into most commits of cdc's exactly-once
 * latency bench in some runs (p50 55-65 ms instead of 19 ms, every run with a client that disables
 * Nagle itself). The brokers' listening sockets get it here; the connections they accept inherit
 * it. */
static void no_delay_listeners(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		int fd = atoi(e->d_name), listening = 0, domain = 0, one = 1;
		socklen_t len = sizeof(int);
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
		    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
		    (domain == AF_INET || domain == AF_INET6))
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (d)
		closedir(d);
}

int main(int argc, char **argv)
{
	mock m = {.brokers = DEFAULT_BROKERS, .partitions = DEFAULT_PARTITIONS};
	char errstr[512];
	char *line = NULL;
	size_t cap = 0;
	rd_kafka_conf_t *conf;
	long v;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc &&
			   parse_int(argv[i + 1], 1, 64, &v)) {
			m.brokers = (int)v;
			i++;
		} else if (strcmp(argv[i], "--partitions") == 0 && i + 1 < argc &&
			   parse_int(argv[i + 1], 1, 100000, &v)) {
			m.partitions = (int)v;
			i++;
		} else {
			usage(stderr);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* The handle only hosts the cluster. Warnings and up are enough: it has no bootstrap servers
	 * on purpose and would otherwise say so. */
	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
		fprintf(stderr, "kafka_mock: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	m.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr)); /* takes conf */
	if (!m.rk) {
		fprintf(stderr, "kafka_mock: rd_kafka_new: %s\n", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	m.mcluster = rd_kafka_mock_cluster_new(m.rk, m.brokers);
	if (!m.mcluster) {
		fprintf(stderr, "kafka_mock: cannot create a mock cluster of %d brokers\n", m.brokers);
		goto out;
	}
	no_delay_listeners();
	printf("bootstrap=%s\n", rd_kafka_mock_cluster_bootstraps(m.mcluster));
	fflush(stdout);

	while (getline(&line, &cap, stdin) != -1) {
		if (!run_command(&m, line))
			break;
	}
	rc = 0;
out:
	free(line);
	if (m.mcluster)
		rd_kafka_mock_cluster_destroy(m.mcluster);
	rd_kafka_destroy(m.rk);
	return rc;
}
