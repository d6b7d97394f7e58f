/* test_report.c: what the status socket answers, rendered from known figures: the exact /status
 * JSON (full, nothing known, odd names), that `cdc status` reads it, /metrics lines and their
 * HELP/TYPE structure, histogram buckets for known samples, and /subscriptions read back by the
 * config loader. */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/cli/status_cmd.h"
#include "cdc/config/config.h"
#include "cdc/status/report.h"
#include "sinks/kafka/kafka_sink.h"
#include "sinks/modules.h"
#include "sinks/socket/socket_sink.h"
#include "test.h"

static hist kafka_h, socket_h, loop_h, recv_h;
/* Two consumers of the events (a failover one active, one waiting that stopped reading; a name
 * with a quote and a terminal escape) and a dead letters' reader. */
static const socket_consumer_stats consumers[] = {
    {.name = "worker-1",
     .mode = SOCKET_FAILOVER,
     .pid = 4242,
     .uid = 1000,
     .active = true,
     .reading = true,
     .in_flight = 5,
     .delivered = 118,
     .acked = 100,
     .connected_us = 1714566896000123},
    {.name = "we\"ird\x1b[2J",
     .mode = SOCKET_FAILOVER,
     .pid = 4243,
     .uid = 0,
     .connected_us = 1714566900000000},
    {.name = "tail-77",
     .mode = SOCKET_FAILOVER,
     .pid = 77,
     .uid = 1000,
     .dead_letters = true,
     .active = true,
     .reading = true,
     .in_flight = 1,
     .delivered = 1,
     .connected_us = 1714566901500000},
};
static const socket_sub_stats orders_stats = {.head_offset = 120,
					      .acked_offset = 100,
					      .first_offset = 90,
					      .consumers = 2,
					      .dead = 1,
					      .dropped = 3,
					      .redelivered = 4,
					      .in_flight = 5,
					      .acked = 100,
					      .nacked = 6,
					      .progressed = 7,
					      .refused = 8,
					      .denied = 9,
					      .spool_bytes = 1048576,
					      .full = true,
					      .not_reading = 1};
static const kafka_stats kafka_figures = {.in_flight = 5, .delivered = 6, .errors = 1, .restarts = 0};
static const char *const warnings[] = {"safe_wal_size is 10.0 MiB (below 64 MiB): the slot may be lost"};
static report_sub subs[] = {
    {.name = "orders", .sink = "socket", .matched = 120, .delivered = 118, .bytes = 40960},
    {.name = "audit", .sink = "kafka", .matched = 7, .delivered = 6, .bytes = 700},
};

/* What the modules render for the report: the socket subscription's members and the spool's
 * families, and the Kafka sink's object and families (kept for the test's whole run). */
static buf orders_members, socket_metrics, kafka_json, kafka_text;
static report_sink sinks[3];

static void render_sinks(const kafka_stats *k, bool exactly_once)
{
	buf_reset(&orders_members);
	buf_reset(&socket_metrics);
	buf_reset(&kafka_json);
	buf_reset(&kafka_text);
	socket_sub_json(&orders_stats, consumers, 3, &orders_members);
	subs[0].sink_members = orders_members.data;
	const socket_sub_stats stats[] = {orders_stats, {0}};
	const char *const names[] = {"orders", NULL};
	socket_sub_metrics(stats, names, 2, &socket_metrics);
	kafka_status_json(k, exactly_once, &kafka_json);
	kafka_metrics(k, exactly_once, &kafka_text);
	sinks[0] = (report_sink){.name = "socket",
				 .sub_metrics = socket_metrics.data,
				 .latency = &socket_h,
				 .sub_fields = sink_module_find("socket")->sub_fields};
	sinks[1] = (report_sink){
	    .name = "kafka", .status_json = kafka_json.data, .metrics = kafka_text.data, .latency = &kafka_h};
	sinks[2] = (report_sink){.name = "stdout"};
}

/* Samples around the bounds: 500 µs and 1 ms are counted at their own `le`, 501 µs and 1.001 ms
 * at the next; 60 s is the last bound and 60.000001 s only in +Inf. */
static const uint64_t kafka_samples[] = {0, 500, 501, 1000, 1001, 2500000, 60000000, 60000001};

static report full_report(void)
{
	memset(&kafka_h, 0, sizeof(kafka_h));
	memset(&socket_h, 0, sizeof(socket_h));
	for (size_t i = 0; i < sizeof(kafka_samples) / sizeof(*kafka_samples); i++)
		hist_add(&kafka_h, kafka_samples[i]);
	hist_add(&socket_h, 3000);
	memset(&loop_h, 0, sizeof(loop_h));
	hist_add_n(&loop_h, 0, 97);
	hist_add(&loop_h, 2000);
	hist_add(&loop_h, 40000);
	hist_add(&loop_h, 450000);
	memset(&recv_h, 0, sizeof(recv_h));
	hist_add(&recv_h, 1000);
	hist_add(&recv_h, 3000);
	render_sinks(&kafka_figures, false);
	return (report){
	    .version = "0.1.0",
	    .uptime_s = 3725.75,
	    .ready = true,
	    .reason = "ignored when ready",
	    .source = {.connected = true,
		       .slot = "cdc_slot",
		       .publication = "cdc_pub",
		       .server_version = "16.3",
		       .received_lsn = 0x16B3748,
		       .flushed_lsn = 0x16B3700,
		       .server_wal_lsn = 0x100016B3800,
		       .last_commit_time_us = 1714566896000123, /* 2024-05-01T12:34:56.000123Z */
		       .lag_s = 0.25,
		       .wal_status = "reserved",
		       .safe_wal_size = 10485760,
		       .max_wal_keep_size = 1073741824,
		       .safe_wal_size_known = true,
		       .reconnects = 2,
		       .resyncs = 1,
		       .backlog_reads = 4,
		       .server = "db-1:5432",
		       .timeline = 3,
		       .promotions = 1,
		       .failover = {.configured = true,
				    .known = true,
				    .ready = false,
				    .slot_failover = true,
				    .reason = "synchronized_standby_slots_empty",
				    .setting = "",
				    .message = "synchronized_standby_slots is empty"},
		       .transactions = 50,
		       .events = 128,
		       .errors_stream = 1,
		       .errors_connect = 3},
	    .subs = subs,
	    .nsubs = 2,
	    .sinks = sinks,
	    .nsinks = 3,
	    .warnings = warnings,
	    .nwarnings = 1,
	    .loop_lag = &loop_h,
	    .received = &recv_h,
	};
}

/* Nothing known yet: never connected, no subscriptions, no Kafka. */
static const report empty_report = {
    .version = "0.1.0", .reason = "connecting to PostgreSQL", .source.lag_s = -1};

static bool json_ok(const char *s)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = json_tokener_parse_ex(tok, s, (int)strlen(s));
	bool ok =
	    json_tokener_get_error(tok) == json_tokener_success && json_object_is_type(o, json_type_object);
	json_tokener_free(tok);
	json_object_put(o);
	return ok;
}

static void test_status_full(void)
{
	report r = full_report();
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK_STR(
	    b.data,
	    "{\"version\":\"0.1.0\",\"uptime_s\":3725,\"ready\":true,\"reason\":null,"
	    "\"source\":{\"connected\":true,\"standby\":false,\"slot\":\"cdc_slot\",\"publication\":\"cdc_"
	    "pub\","
	    "\"server_version\":\"16.3\",\"received_lsn\":\"0/16B3748\",\"flushed_lsn\":\"0/16B3700\","
	    "\"server_wal_lsn\":\"100/16B3800\",\"lag_bytes\":1099511628032,\"lag_s\":0.250,"
	    "\"last_commit_time\":\"2024-05-01T12:34:56.000123Z\",\"wal_status\":\"reserved\","
	    "\"safe_wal_size\":10485760,\"invalidation_reason\":null,\"inactive_since\":null,"
	    "\"idle_replication_slot_timeout_s\":null,\"reconnects\":2,\"resyncs\":1,\"backlog_reads\":4,"
	    "\"server\":\"db-1:"
	    "5432\","
	    "\"server_role\":\"primary\",\"timeline\":3,\"promotions\":1,\"failover\":{\"ready\":false,"
	    "\"reason\":\"synchronized_standby_slots_empty\",\"slot_failover\":true,"
	    "\"synchronized_standby_slots\":\"\",\"message\":\"synchronized_standby_slots is empty\"},"
	    "\"transactions\":50,\"events\":128,"
	    "\"errors\":{\"stream\":1,\"connect\":3},"
	    "\"warnings\":[\"safe_wal_size is 10.0 MiB (below 64 MiB): the slot may be lost\"]},"
	    "\"subscriptions\":["
	    "{\"name\":\"orders\",\"sink\":\"socket\",\"matched\":120,\"delivered\":118,\"bytes\":40960,"
	    "\"head_offset\":120,\"acked_offset\":100,\"first_offset\":90,\"pending\":20,\"consumers\":2,"
	    "\"dead\":1,\"dropped\":3,\"redelivered\":4,\"in_flight\":5,\"acked\":100,\"nacked\":6,"
	    "\"progressed\":7,\"refused\":8,\"denied\":9,\"spool_bytes\":1048576,\"full\":true,"
	    "\"attached\":[{\"name\":\"worker-1\",\"pid\":4242,\"uid\":1000,\"mode\":\"failover\","
	    "\"active\":true,\"reading\":true,\"in_flight\":5,\"delivered\":118,\"acked\":100,"
	    "\"connected_since\":\"2024-05-01T12:34:56.000123Z\"},"
	    "{\"name\":\"we\\\"ird\\u001b[2J\",\"pid\":4243,\"uid\":0,\"mode\":\"failover\","
	    "\"active\":false,\"reading\":false,\"in_flight\":0,\"delivered\":0,\"acked\":0,"
	    "\"connected_since\":\"2024-05-01T12:35:00.000000Z\"}],"
	    "\"dead_letter_readers\":[{\"name\":\"tail-77\",\"pid\":77,\"uid\":1000,\"mode\":\"failover\","
	    "\"active\":true,\"reading\":true,\"in_flight\":1,\"delivered\":1,\"acked\":0,"
	    "\"connected_since\":\"2024-05-01T12:35:01.500000Z\"}]},"
	    "{\"name\":\"audit\",\"sink\":\"kafka\",\"matched\":7,\"delivered\":6,\"bytes\":700,"
	    "\"head_offset\":null,\"acked_offset\":null,\"first_offset\":null,\"pending\":null,"
	    "\"consumers\":null,\"dead\":null,\"dropped\":null,\"redelivered\":null,\"in_flight\":null,"
	    "\"acked\":null,\"nacked\":null,\"progressed\":null,\"refused\":null,\"denied\":null,\"spool_"
	    "bytes\":null,"
	    "\"full\":null,\"attached\":null,\"dead_letter_readers\":null}],"
	    "\"kafka\":{\"in_flight\":5,\"delivered\":6,\"errors\":1,\"restarts\":0,\"exactly_once\":false},"
	    "\"receive_latency_ms\":{\"count\":2,\"p50\":1.023,\"p99\":3.000,\"p999\":3.000,\"max\":3.000},"
	    "\"latency_ms\":{\"socket\":{\"count\":1,\"p50\":3.000,\"p99\":3.000,\"p999\":3.000,"
	    "\"max\":3.000},\"kafka\":{\"count\":8,\"p50\":1.023,\"p99\":60000.001,\"p999\":60000.001,"
	    "\"max\":60000.001}},\"event_loop_lag_ms\":{\"count\":100,\"p50\":0.000,\"p99\":40.959,"
	    "\"p999\":450.000,\"max\":450.000}}\n");
	CHECK(json_ok(b.data));

	/* What `cdc status` makes of it. */
	buf s = {0};
	char err[256];
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK_STR(
	    s.data,
	    "cdc 0.1.0  up 1h02m  ready\n"
	    "source  streaming  slot=cdc_slot  server=16.3  received=0/16B3748  flushed=0/16B3700  "
	    "lag=1024.0 GiB/0.2s  wal_status=reserved  timeline=3  promotions=1\n"
	    "failover  NOT READY: synchronized_standby_slots_empty  synchronized_standby_slots=\n"
	    "warning: safe_wal_size is 10.0 MiB (below 64 MiB): the slot may be lost\n"
	    "SUBSCRIPTION  SINK    MATCHED  DELIVERED  PENDING  IN_FLIGHT  ACKED  CONSUMERS  NACKED  "
	    "DEAD  DROPPED\n"
	    "orders        socket      120        118       20          5    100          2       6    "
	    " 1        3\n"
	    "  CONSUMER     PID   UID  READS         MODE      STATE        IN_FLIGHT  DELIVERED  ACKED  "
	    "CONNECTED\n"
	    "  worker-1    4242  1000  events        failover  active               5        118    100  "
	    "2024-05-01T12:34:56.000123Z\n"
	    "  we\"ird?[2J  4243     0  events        failover  not reading          0          0      0  "
	    "2024-05-01T12:35:00.000000Z\n"
	    "  tail-77       77  1000  dead letters  failover  active               1          1      0  "
	    "2024-05-01T12:35:01.500000Z\n"
	    "audit         kafka         7          6        -          -      -          -       -    "
	    " -        -\n"
	    "kafka   in_flight=5  delivered=6  errors=1\n");
	buf_free(&s);
	buf_free(&b);
}

static void test_status_nulls(void)
{
	buf b = {0};
	status_report_status_json(&empty_report, &b);
	CHECK_STR(
	    b.data,
	    "{\"version\":\"0.1.0\",\"uptime_s\":0,\"ready\":false,\"reason\":\"connecting to PostgreSQL\","
	    "\"source\":{\"connected\":false,\"standby\":false,\"slot\":null,\"publication\":null,\"server_"
	    "version\":null,"
	    "\"received_lsn\":null,\"flushed_lsn\":null,\"server_wal_lsn\":null,\"lag_bytes\":0,"
	    "\"lag_s\":null,\"last_commit_time\":null,\"wal_status\":null,\"safe_wal_size\":null,"
	    "\"invalidation_reason\":null,\"inactive_since\":null,\"idle_replication_slot_timeout_s\":null,"
	    "\"reconnects\":0,\"resyncs\":0,\"backlog_reads\":0,\"server\":null,\"server_role\":null,"
	    "\"timeline\":null,"
	    "\"promotions\":0,\"failover\":null,\"transactions\":0,\"events\":0,\"errors\":{\"stream\":0,"
	    "\"connect\":0},"
	    "\"warnings\":[]},\"subscriptions\":[],\"latency_ms\":{}}\n");
	CHECK(json_ok(b.data));
	buf s = {0};
	char err[256];
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK_STR(s.data, "cdc 0.1.0  up 0s  not ready: connecting to PostgreSQL\n"
			  "source  not streaming  slot=-  server=-  received=-  flushed=-  lag=0 B/-  "
			  "wal_status=-\n"
			  "no subscriptions\n");
	buf_free(&s);

	/* Not ready without a reason; a flushed position past the sampled server position is no lag;
	 * a negative safe_wal_size (past max_slot_wal_keep_size) is shown as it is; a commit time
	 * before the epoch and a non-finite lag are not hidden as something else. */
	report r = empty_report;
	r.reason = NULL;
	r.source.flushed_lsn = 0x200;
	r.source.server_wal_lsn = 0x100;
	r.source.safe_wal_size = -4096;
	r.source.safe_wal_size_known = true;
	r.source.last_commit_time_us = -1;
	r.source.lag_s = INFINITY;
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"reason\":\"unknown\"") != NULL);
	CHECK(strstr(b.data,
		     "\"flushed_lsn\":\"0/200\",\"server_wal_lsn\":\"0/100\",\"lag_bytes\":0,\"lag_s\":null,"
		     "\"last_commit_time\":\"1969-12-31T23:59:59.999999Z\"") != NULL);
	CHECK(strstr(b.data, "\"safe_wal_size\":-4096,") != NULL);
	CHECK(json_ok(b.data));
	buf_free(&b);
}

/* Names the config would refuse still never break the JSON or the exposition format. */
static void test_escaping(void)
{
	/* acked past head (a race between two reads) */
	const socket_sub_stats stats[] = {{0}, {.head_offset = 5, .acked_offset = 7}};
	const char *const names[] = {NULL, "caf\xc3\xa9\t"};
	buf members = {0}, spool_text = {0};
	socket_sub_json(&stats[1], NULL, 0, &members);
	socket_sub_metrics(stats, names, 2, &spool_text);
	const report_sub odd[] = {
	    {.name = "we\"ird\\name\nx\xff", .sink = "stdout", .matched = 1, .delivered = 1, .bytes = 10},
	    {.name = "caf\xc3\xa9\t", .sink = "socket", .sink_members = members.data},
	};
	const report_sink odd_sinks[] = {{.name = "socket",
					  .sub_metrics = spool_text.data,
					  .sub_fields = sink_module_find("socket")->sub_fields}};
	report r = empty_report;
	r.subs = odd;
	r.nsubs = 2;
	r.sinks = odd_sinks;
	r.nsinks = 1;
	r.source.wal_status = "weird\"status";
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(json_ok(b.data));
	CHECK(strstr(b.data, "\"name\":\"we\\\"ird\\\\name\\nx\xef\xbf\xbd\"") != NULL);
	CHECK(strstr(b.data, "\"name\":\"caf\xc3\xa9\\t\"") != NULL);
	/* acked past head (a race between two reads) is nothing pending, not 2^64 - 2. */
	CHECK(strstr(b.data, "\"head_offset\":5,\"acked_offset\":7,\"first_offset\":0,\"pending\":0,") !=
	      NULL);

	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(
	    strstr(
		b.data,
		"\ncdc_subscription_matched_events_total{subscription=\"we\\\"ird\\\\name\\nx\xef\xbf\xbd\","
		"sink=\"stdout\"} 1\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_subscription_pending_events{subscription=\"caf\xc3\xa9\t\"} 0\n") !=
	      NULL);
	/* An unknown wal_status gets a series of its own beside the four known ones at 0. */
	CHECK(strstr(b.data, "cdc_source_wal_status{status=\"lost\"} 0\n"
			     "cdc_source_wal_status{status=\"weird\\\"status\"} 1\n") != NULL);
	buf_free(&b);
	buf_free(&members);
	buf_free(&spool_text);
}

/* Every sample belongs to the family whose "# HELP" and "# TYPE" lines come just before it (a
 * histogram's as NAME_bucket/_sum/_count), no family appears twice, every value is a number. */
static void check_exposition(const char *text)
{
	char family[128] = "", type[16] = "";
	char seen[64][128];
	size_t nseen = 0;
	bool ok = true;
	for (const char *p = text; *p && ok;) {
		const char *eol = strchr(p, '\n');
		if (!eol) {
			ok = false; /* the last line ends with a newline too */
			break;
		}
		char line[512];
		snprintf(line, sizeof(line), "%.*s", (int)(eol - p), p);
		p = eol + 1;
		if (strncmp(line, "# HELP ", 7) == 0) {
			char name[128];
			ok = sscanf(line + 7, "%127s", name) == 1 && nseen < 64;
			for (size_t i = 0; ok && i < nseen; i++)
				ok = strcmp(seen[i], name) != 0;
			if (ok)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", name);
			/* TYPE must follow at once, for the same name */
			char want[160], got[160];
			const char *eol2 = strchr(p, '\n');
			snprintf(want, sizeof(want), "# TYPE %s ", name);
			snprintf(got, sizeof(got), "%.*s", eol2 ? (int)(eol2 - p) : 0, p);
			ok = ok && eol2 && strncmp(got, want, strlen(want)) == 0;
			if (ok) {
				snprintf(family, sizeof(family), "%s", name);
				snprintf(type, sizeof(type), "%s", got + strlen(want));
				p = eol2 + 1;
			}
			continue;
		}
		size_t n = strcspn(line, "{ ");
		char name[128];
		snprintf(name, sizeof(name), "%.*s", (int)n, line);
		bool mine = strcmp(name, family) == 0;
		if (strcmp(type, "histogram") == 0) {
			size_t fl = strlen(family);
			mine = strncmp(name, family, fl) == 0 &&
			       (strcmp(name + fl, "_bucket") == 0 || strcmp(name + fl, "_sum") == 0 ||
				strcmp(name + fl, "_count") == 0);
		}
		if (strcmp(type, "counter") == 0)
			ok = ok && n > 6 && strcmp(name + n - 6, "_total") == 0;
		const char *value = strrchr(line, ' ');
		char *end = NULL;
		if (value)
			strtod(value + 1, &end);
		ok = ok && mine && value && end && *end == '\0' && end > value + 1;
		if (!ok)
			fprintf(stderr, "bad exposition line: %s\n", line);
	}
	CHECK(ok);
}

static void test_metrics(void)
{
	report r = full_report();
	buf b = {0};
	status_report_metrics(&r, &b);
	check_exposition(b.data);
	static const char *const lines[] = {
	    "# HELP cdc_up 1 while cdc answers.\n# TYPE cdc_up gauge\ncdc_up 1\n",
	    "\ncdc_build_info{version=\"0.1.0\"} 1\n",
	    "\ncdc_uptime_seconds 3725.750\n",
	    "\ncdc_ready 1\n",
	    "\ncdc_source_connected 1\n",
	    "\ncdc_standby 0\n",
	    "\ncdc_source_info{slot=\"cdc_slot\",publication=\"cdc_pub\",server_version=\"16.3\"} 1\n",
	    "\ncdc_source_received_lsn 23803720\n",
	    "\ncdc_source_flushed_lsn 23803648\n",
	    "\ncdc_source_server_wal_lsn 1099535431680\n",
	    "\ncdc_source_lag_bytes 1099511628032\n",
	    "\ncdc_source_lag_seconds 0.250\n",
	    "\ncdc_source_last_commit_timestamp_seconds 1714566896.000123\n",
	    "\ncdc_source_wal_status{status=\"reserved\"} 1\ncdc_source_wal_status{status=\"extended\"} 0\n"
	    "cdc_source_wal_status{status=\"unreserved\"} 0\ncdc_source_wal_status{status=\"lost\"} 0\n#",
	    "\ncdc_source_safe_wal_size_bytes 10485760\n",
	    "\ncdc_source_max_slot_wal_keep_size_bytes 1073741824\n",
	    "\n# TYPE cdc_source_reconnects_total counter\ncdc_source_reconnects_total 2\n",
	    "\ncdc_source_resyncs_total 1\n",
	    "\n# TYPE cdc_source_backlog_reads_total counter\ncdc_source_backlog_reads_total 4\n",
	    "\ncdc_source_server_in_recovery 0\n",
	    "\ncdc_source_timeline 3\n",
	    "\ncdc_source_promotions_total 1\n",
	    "\ncdc_source_failover_ready{reason=\"synchronized_standby_slots_empty\"} 0\n",
	    "\ncdc_transactions_total 50\n",
	    "\ncdc_events_total 128\n",
	    "\n# TYPE cdc_errors_total counter\ncdc_errors_total{kind=\"stream\"} 1\n"
	    "cdc_errors_total{kind=\"connect\"} 3\n",
	    "\ncdc_warnings 1\n",
	    "\ncdc_subscription_matched_events_total{subscription=\"orders\",sink=\"socket\"} 120\n"
	    "cdc_subscription_matched_events_total{subscription=\"audit\",sink=\"kafka\"} 7\n#",
	    "\ncdc_subscription_delivered_events_total{subscription=\"orders\",sink=\"socket\"} 118\n"
	    "cdc_subscription_delivered_events_total{subscription=\"audit\",sink=\"kafka\"} 6\n#",
	    "\ncdc_subscription_delivered_bytes_total{subscription=\"orders\",sink=\"socket\"} 40960\n"
	    "cdc_subscription_delivered_bytes_total{subscription=\"audit\",sink=\"kafka\"} 700\n#",
	    /* socket figures: for the socket subscription only */
	    "\ncdc_subscription_pending_events{subscription=\"orders\"} 20\n#",
	    "\ncdc_subscription_consumers{subscription=\"orders\"} 2\n#",
	    "\n# TYPE cdc_subscription_not_reading_consumers gauge\n"
	    "cdc_subscription_not_reading_consumers{subscription=\"orders\"} 1\n#",
	    "\ncdc_subscription_dead_events{subscription=\"orders\"} 1\n#",
	    "\ncdc_subscription_dropped_events_total{subscription=\"orders\"} 3\n#",
	    "\ncdc_subscription_redelivered_events_total{subscription=\"orders\"} 4\n#",
	    "\ncdc_subscription_in_flight_events{subscription=\"orders\"} 5\n#",
	    "\ncdc_subscription_acked_events_total{subscription=\"orders\"} 100\n#",
	    "\ncdc_subscription_nacked_events_total{subscription=\"orders\"} 6\n#",
	    "\ncdc_subscription_progress_total{subscription=\"orders\"} 7\n#",
	    "\ncdc_subscription_refused_total{subscription=\"orders\"} 8\n#",
	    "\ncdc_subscription_denied_subscribes_total{subscription=\"orders\"} 9\n#",
	    "\ncdc_subscription_head_offset{subscription=\"orders\"} 120\n#",
	    "\ncdc_subscription_acked_offset{subscription=\"orders\"} 100\n#",
	    "\ncdc_subscription_full{subscription=\"orders\"} 1\n#",
	    "\ncdc_spool_bytes{subscription=\"orders\"} 1048576\n#",
	    "\ncdc_kafka_in_flight_messages 5\n",
	    "\ncdc_kafka_delivered_messages_total 6\n",
	    "\ncdc_kafka_errors_total 1\n",
	    "\ncdc_kafka_restarts_total 0\n",
	    "\n# TYPE cdc_delivery_latency_seconds histogram\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"socket\",le=\"0.0005\"} 0\n",
	    "\ncdc_delivery_latency_seconds_bucket{sink=\"socket\",le=\"0.0025\"} 0\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"socket\",le=\"0.005\"} 1\n",
	    "\ncdc_delivery_latency_seconds_bucket{sink=\"socket\",le=\"+Inf\"} 1\n"
	    "cdc_delivery_latency_seconds_sum{sink=\"socket\"} 0.003\n"
	    "cdc_delivery_latency_seconds_count{sink=\"socket\"} 1\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.0005\"} 2\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.001\"} 4\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.0025\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.005\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.01\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.025\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.05\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.1\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.25\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"0.5\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"1\"} 5\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"2.5\"} 6\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"5\"} 6\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"10\"} 6\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"30\"} 6\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"60\"} 7\n"
	    "cdc_delivery_latency_seconds_bucket{sink=\"kafka\",le=\"+Inf\"} 8\n"
	    "cdc_delivery_latency_seconds_sum{sink=\"kafka\"} 122.503003\n"
	    "cdc_delivery_latency_seconds_count{sink=\"kafka\"} 8\n",
	    "\n# TYPE cdc_source_receive_latency_seconds histogram\n"
	    "cdc_source_receive_latency_seconds_bucket{le=\"0.0005\"} 0\n"
	    "cdc_source_receive_latency_seconds_bucket{le=\"0.001\"} 1\n",
	    "\ncdc_source_receive_latency_seconds_bucket{le=\"0.005\"} 2\n",
	    "\ncdc_source_receive_latency_seconds_sum 0.004\ncdc_source_receive_latency_seconds_count 2\n"
	    "# HELP cdc_delivery_latency_seconds ",
	    "\n# TYPE cdc_event_loop_lag_seconds histogram\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.0005\"} 97\n",
	    "\ncdc_event_loop_lag_seconds_bucket{le=\"0.001\"} 97\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.0025\"} 98\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.005\"} 98\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.01\"} 98\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.025\"} 98\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.05\"} 99\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.1\"} 99\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.25\"} 99\n"
	    "cdc_event_loop_lag_seconds_bucket{le=\"0.5\"} 100\n",
	    "\ncdc_event_loop_lag_seconds_bucket{le=\"+Inf\"} 100\n"
	    "cdc_event_loop_lag_seconds_sum 0.492\n"
	    "cdc_event_loop_lag_seconds_count 100\n",
	};
	for (size_t i = 0; i < sizeof(lines) / sizeof(*lines); i++) {
		if (strstr(b.data, lines[i])) {
			test_passed++;
		} else {
			test_failed++;
			fprintf(stderr, "%s:%d: /metrics lacks:\n%s\n", __FILE__, __LINE__, lines[i]);
		}
	}
	/* The event loop's histogram ends the exposition. */
	const char *tail = "\ncdc_event_loop_lag_seconds_count 100\n";
	CHECK(b.len >= strlen(tail) && strcmp(b.data + b.len - strlen(tail), tail) == 0);

	/* Nothing known: families are all declared, unknown gauges have no sample (absent, not 0), Kafka
	 * families and histogram series are left out. */
	buf_reset(&b);
	status_report_metrics(&empty_report, &b);
	check_exposition(b.data);
	CHECK(strstr(b.data, "\ncdc_ready 0\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_source_connected 0\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_source_info{slot=\"\",publication=\"\",server_version=\"\"} 1\n") !=
	      NULL);
	CHECK(strstr(b.data, "# TYPE cdc_source_lag_seconds gauge\n# HELP") != NULL);
	CHECK(strstr(b.data, "# TYPE cdc_source_server_wal_lsn gauge\n# HELP") != NULL);
	CHECK(strstr(b.data, "# TYPE cdc_source_safe_wal_size_bytes gauge\n# HELP") != NULL);
	CHECK(strstr(b.data, "# TYPE cdc_source_wal_status gauge\n# HELP") != NULL);
	CHECK(strstr(b.data, "# TYPE cdc_source_last_commit_timestamp_seconds gauge\n# HELP") != NULL);
	CHECK(strstr(b.data, "cdc_kafka") == NULL);
	CHECK(strstr(b.data, "_bucket") == NULL);
	CHECK(strstr(b.data, "\ncdc_source_lag_bytes 0\n") != NULL);
	buf_free(&b);
}

/* hist counts exactly at the fixed bounds, whatever its log-linear buckets are. */
/* kafka.exactly_once: its figures in /status and /metrics, exactly. */
/* PostgreSQL 17 and 18's slot health: an invalidated slot, when it was last streamed, and the
 * server's idle_replication_slot_timeout; a valid one; an invalidation reason of a later server.
 * Before 17 (full_report: all unknown) the families have no samples. */
static void test_slot_health(void)
{
	report r = full_report();
	r.source.server_version = "18.4";
	r.source.wal_status = "lost";
	r.source.safe_wal_size_known = false;
	r.source.invalidation_reason = "wal_removed";
	r.source.inactive_since_us = 1714566896000123;
	r.source.idle_timeout_known = true;
	r.source.idle_timeout_s = 3600;
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"wal_status\":\"lost\",\"safe_wal_size\":null,\"invalidation_reason\":"
			     "\"wal_removed\",\"inactive_since\":\"2024-05-01T12:34:56.000123Z\","
			     "\"idle_replication_slot_timeout_s\":3600,\"reconnects\":2,") != NULL);
	buf s = {0};
	char err[256];
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data,
		     "\nsource  streaming  slot=cdc_slot  server=18.4  received=0/16B3748  "
		     "flushed=0/16B3700  lag=1024.0 GiB/0.2s  wal_status=lost  timeline=3  promotions=1  "
		     "invalidated=wal_removed  inactive_since=2024-05-01T12:34:56.000123Z  "
		     "idle_timeout=1h00m\n") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	check_exposition(b.data);
	CHECK(strstr(b.data, "\ncdc_source_slot_invalidation_reason{reason=\"wal_removed\"} 1\n"
			     "cdc_source_slot_invalidation_reason{reason=\"rows_removed\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"wal_level_insufficient\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"idle_timeout\"} 0\n#") != NULL);
	CHECK(strstr(b.data, "\ncdc_source_slot_inactive_since_timestamp_seconds 1714566896.000123\n") !=
	      NULL);
	CHECK(strstr(b.data, "\ncdc_source_idle_replication_slot_timeout_seconds 3600\n") != NULL);

	/* Valid and streamed, the timeout off: nulls and zeros, nothing more in `cdc status`. */
	r.source.wal_status = "reserved";
	r.source.invalidation_reason = "";
	r.source.inactive_since_us = 0;
	r.source.idle_timeout_s = 0;
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"invalidation_reason\":null,\"inactive_since\":null,"
			     "\"idle_replication_slot_timeout_s\":0,") != NULL);
	buf_reset(&s);
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data, "  wal_status=reserved  timeline=3  promotions=1\n") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "\ncdc_source_slot_invalidation_reason{reason=\"wal_removed\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"rows_removed\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"wal_level_insufficient\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"idle_timeout\"} 0\n#") != NULL);
	CHECK(strstr(b.data, "\n# TYPE cdc_source_slot_inactive_since_timestamp_seconds gauge\n#") != NULL);
	CHECK(strstr(b.data, "\ncdc_source_idle_replication_slot_timeout_seconds 0\n") != NULL);

	/* A reason this cdc does not know gets a series of its own. */
	r.source.invalidation_reason = "some_new_reason";
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "cdc_source_slot_invalidation_reason{reason=\"idle_timeout\"} 0\n"
			     "cdc_source_slot_invalidation_reason{reason=\"some_new_reason\"} 1\n") != NULL);

	/* Before PostgreSQL 17: the families, no samples. */
	r = full_report();
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "\n# TYPE cdc_source_slot_invalidation_reason gauge\n# HELP "
			     "cdc_source_slot_inactive_since_timestamp_seconds ") != NULL);
	CHECK(strstr(b.data, "\n# TYPE cdc_source_idle_replication_slot_timeout_seconds gauge\n# HELP ") !=
	      NULL);
	buf_free(&s);
	buf_free(&b);
}

static void test_exactly_once(void)
{
	report r = full_report();
	kafka_stats k = kafka_figures;
	k.commits = 12;
	k.aborts = 1;
	k.skipped = 3;
	k.position = 0x16B3700;
	render_sinks(&k, true);
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"kafka\":{\"in_flight\":5,\"delivered\":6,\"errors\":1,\"restarts\":0,"
			     "\"exactly_once\":true,\"transactions_committed\":12,\"transactions_aborted\":1,"
			     "\"transactions_skipped\":3,\"position\":\"0/16B3700\"}") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	check_exposition(b.data);
	CHECK(strstr(b.data, "\ncdc_kafka_transactions_total{outcome=\"committed\"} 12\n"
			     "cdc_kafka_transactions_total{outcome=\"aborted\"} 1\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_kafka_skipped_transactions_total 3\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_kafka_position_lsn 23803648\n") != NULL);
	buf_free(&b);
}

/* source.failover ready, then configured but not checked yet; cdc reading a standby. */
static void test_failover(void)
{
	report r = full_report();
	r.source.failover = (report_failover){.configured = true,
					      .known = true,
					      .ready = true,
					      .slot_failover = true,
					      .reason = "ready",
					      .setting = "sb1, sb2",
					      .message = "ignored when ready"};
	r.source.in_recovery = true;
	r.nwarnings = 0;
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"server\":\"db-1:5432\",\"server_role\":\"standby\",\"timeline\":3,"
			     "\"promotions\":1,\"failover\":{\"ready\":true,\"reason\":\"ready\","
			     "\"slot_failover\":true,\"synchronized_standby_slots\":\"sb1, sb2\","
			     "\"message\":null},") != NULL);
	buf s = {0};
	char err[256];
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data, "wal_status=reserved  reading a standby  timeline=3  promotions=1\n"
			     "failover  ready  synchronized_standby_slots=sb1, sb2\n"
			     "SUBSCRIPTION") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	check_exposition(b.data);
	CHECK(strstr(b.data, "\ncdc_source_failover_ready{reason=\"ready\"} 1\n") != NULL);
	CHECK(strstr(b.data, "\ncdc_source_server_in_recovery 1\n") != NULL);

	r.source.failover.known = false;
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"failover\":{\"ready\":null,\"reason\":null,\"slot_failover\":null,"
			     "\"synchronized_standby_slots\":null,\"message\":null},") != NULL);
	buf_reset(&s);
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data, "\nfailover  not checked yet\n") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	check_exposition(b.data);
	/* the family is described, with no sample until the first answer */
	CHECK(strstr(b.data, "# TYPE cdc_source_failover_ready gauge\n# HELP") != NULL ||
	      strstr(b.data, "# TYPE cdc_source_failover_ready gauge\n#") != NULL);
	CHECK(strstr(b.data, "cdc_source_failover_ready{") == NULL);
	buf_free(&s);
	buf_free(&b);
}

static void test_hist_le(void)
{
	static hist h;
	static const struct {
		uint64_t us;
		unsigned first_le; /* the first bound index it counts in; HIST_LE_N: only +Inf */
	} T[] = {
	    {0, 0},
	    {499, 0},
	    {500, 0},
	    {501, 1},
	    {999, 1},
	    {1000, 1},
	    {1001, 2},
	    {9999999, 13},
	    {10000000, 13},
	    {10000001, 14},
	    {60000000, 15},
	    {60000001, HIST_LE_N},
	    {UINT64_MAX, HIST_LE_N},
	};
	for (size_t t = 0; t < sizeof(T) / sizeof(*T); t++) {
		memset(&h, 0, sizeof(h));
		hist_add(&h, T[t].us);
		for (unsigned i = 0; i < HIST_LE_N; i++)
			CHECK_INT(hist_count_le(&h, i), i >= T[t].first_le);
	}
	CHECK_INT(hist_le_us[0], 500);
	CHECK_INT(hist_le_us[HIST_LE_N - 1], 60000000);
	/* n samples at once are n samples one by one */
	hist one = {0}, many = {0};
	for (int i = 0; i < 3; i++)
		hist_add(&one, 1500);
	hist_add(&one, 70000000);
	hist_add_n(&many, 1500, 3);
	hist_add_n(&many, 70000000, 1);
	hist_add_n(&many, 42, 0);
	CHECK(memcmp(&one, &many, sizeof(one)) == 0);
}

static const char subs_yaml[] =
    "kafka: {brokers: k:9092}\n"
    "subscriptions:\n"
    "  - name: orders\n"
    "    tables: [public.orders, \"\\\"Odd\\\".t*\"]\n"
    "    operations: [insert, update]\n"
    "    tag: billing\n"
    "    changed: [status]\n"
    "    where: \"new.status = 'paid' and new.amount >= 100\"\n"
    "    columns: [id, status]\n"
    "    consumers: key_shared\n"
    "    ack_timeout: 1h30m\n"
    "    max_deliveries: 5\n"
    "    max_unacked: 10\n"
    "    batch: transaction\n"
    "    retention: {max_events: 1000000, max_age: 250ms, max_bytes: 1GiB, when_full: drop_oldest}\n"
    "  - {name: audit, tables: [audit.*], sink: kafka, topic: \"audit.{table}\", tombstones: true}\n"
    "  - {name: plain, tables: [a.b], sink: stdout}\n"
    "  - {name: defaults, tables: [a.b], retention: {max_bytes: 1000001}}\n";

static void test_subscriptions(void)
{
	buf e = {0}, b = {0};
	cfg *c = cfg_parse("t.yaml", subs_yaml, strlen(subs_yaml), &e);
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s", e.data ? e.data : "");
		buf_free(&e);
		return;
	}
	status_report_subscriptions_json(c, &b);
	CHECK_STR(
	    b.data,
	    "{\"subscriptions\":["
	    "{\"name\":\"orders\",\"tables\":[\"public.orders\",\"\\\"Odd\\\".t*\"],"
	    "\"operations\":[\"insert\",\"update\"],\"tag\":\"billing\",\"sink\":\"socket\","
	    "\"changed\":[\"status\"],\"where\":\"new.status = 'paid' and new.amount >= 100\","
	    "\"columns\":[\"id\",\"status\"],\"consumers\":\"key_shared\",\"ack_timeout\":\"1h30m\","
	    "\"max_deliveries\":5,\"max_unacked\":10,\"batch\":\"transaction\","
	    "\"retention\":{\"max_events\":1000000,\"max_age\":\"250ms\",\"max_bytes\":\"1GiB\","
	    "\"when_full\":\"drop_oldest\"}},"
	    "{\"name\":\"audit\",\"tables\":[\"audit.*\"],\"operations\":[\"insert\",\"update\",\"delete\","
	    "\"truncate\",\"schema\",\"ddl\"],\"sink\":\"kafka\",\"topic\":\"audit.{table}\",\"tombstones\":"
	    "true,\"format\":"
	    "\"protobuf\",\"cdc_headers\":true},"
	    "{\"name\":\"plain\",\"tables\":[\"a.b\"],\"operations\":[\"insert\",\"update\",\"delete\","
	    "\"truncate\",\"schema\",\"ddl\"],\"sink\":\"stdout\"},"
	    "{\"name\":\"defaults\",\"tables\":[\"a.b\"],\"operations\":[\"insert\",\"update\",\"delete\","
	    "\"truncate\",\"schema\",\"ddl\"],\"sink\":\"socket\",\"consumers\":\"failover\",\"ack_timeout\":"
	    "\"30s\","
	    "\"max_deliveries\":0,\"max_unacked\":1000,\"batch\":\"none\",\"retention\":{\"max_events\":0,"
	    "\"max_age\":\"0\",\"max_bytes\":\"1000001\",\"when_full\":\"block\"}}]}\n");
	CHECK(json_ok(b.data));

	/* JSON is YAML: the answer, as a configuration, loads back to the same subscriptions. */
	buf yaml = {0}, again = {0};
	buf_puts(&yaml, "{\"kafka\":{\"brokers\":\"k:9092\"},");
	buf_puts(&yaml, b.data + 1); /* {"subscriptions":...} without its opening brace */
	buf_reset(&e);
	cfg *c2 = cfg_parse("again.yaml", yaml.data, yaml.len, &e);
	CHECK(c2 != NULL);
	if (c2) {
		status_report_subscriptions_json(c2, &again);
		CHECK_STR(again.data, b.data);
	} else {
		fprintf(stderr, "%s", e.data ? e.data : "");
	}
	cfg_free(c2);

	/* No subscriptions at all. */
	cfg empty = {0};
	buf_reset(&b);
	status_report_subscriptions_json(&empty, &b);
	CHECK_STR(b.data, "{\"subscriptions\":[]}\n");

	cfg_free(c);
	buf_free(&b);
	buf_free(&e);
	buf_free(&yaml);
	buf_free(&again);
}

/* Subscriptions cdc runs without: in /status with why, and in /metrics; left out when none. */
static void test_failed_subscriptions(void)
{
	static const report_failed_sub failed[] = {{"chg", "subscription chg uses changed: on table \"t\""}};
	report r = empty_report;
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "failed_subscriptions") == NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "cdc_subscription_failed") == NULL);
	r.failed = failed;
	r.nfailed = 1;
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data,
		     ",\"failed_subscriptions\":[{\"name\":\"chg\",\"reason\":\"subscription chg uses "
		     "changed: on table \\\"t\\\"\"}]") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(
	    b.data,
	    "# TYPE cdc_subscription_failed gauge\ncdc_subscription_failed{subscription=\"chg\"} 1\n"));
	buf_free(&b);
}

/* source.signal_table: in /status with the last signal as given, in /metrics, and in cdc status;
 * nothing of it without a signal table. */
static void test_signals(void)
{
	report r = empty_report;
	buf b = {0}, s = {0};
	char err[256];
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "signals") == NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "cdc_signal") == NULL);
	r.signals.table = "public.cdc_signal";
	r.signals.received = 3;
	r.signals.refused = 1;
	r.signals.started = 2;
	r.signals.last_json = "{\"id\":\"ad-hoc-2\",\"type\":\"execute-snapshot\",\"lsn\":\"0/1A2B3C8\","
			      "\"error\":null,\"backfills\":[{\"subscription\":\"orders\",\"backfill\":"
			      "\"4f2a9c1e0b3d5e7f\",\"error\":null},{\"subscription\":\"audit\",\"backfill\":"
			      "null,\"error\":\"where: ...\"}]}";
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data,
		     ",\"signals\":{\"table\":\"public.cdc_signal\",\"received\":3,\"refused\":1,"
		     "\"backfills_started\":2,\"backfills_stopped\":0,\"last\":{\"id\":\"ad-hoc-2\",") !=
	      NULL);
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data,
		     "signals public.cdc_signal: 3 received, 1 refused, 2 backfills started, 0 stopped\n"
		     "  last ad-hoc-2 (execute-snapshot at 0/1A2B3C8): backfill 4f2a9c1e0b3d5e7f of orders, "
		     "backfill - of audit: where: ...\n") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "# TYPE cdc_signals_received_total counter\ncdc_signals_received_total 3\n") !=
	      NULL);
	CHECK(strstr(b.data, "cdc_signals_refused_total 1\n") != NULL);
	CHECK(strstr(b.data, "cdc_signal_backfills_started_total 2\n") != NULL);
	CHECK(strstr(b.data, "cdc_signal_backfills_stopped_total 0\n") != NULL);
	/* a refused last signal, and none yet */
	r.signals.last_json = "{\"id\":\"bad\",\"type\":\"log\",\"lsn\":\"0/1\",\"error\":\"type: 'log' is "
			      "not a signal cdc acts on\",\"backfills\":[]}";
	buf_reset(&b);
	buf_reset(&s);
	status_report_status_json(&r, &b);
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data, "  last bad (log at 0/1): refused: type: 'log' is not a signal cdc acts on\n") !=
	      NULL);
	r.signals.last_json = NULL;
	buf_reset(&b);
	buf_reset(&s);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "\"backfills_stopped\":0,\"last\":null}") != NULL);
	CHECK(cli_status_summary(b.data, b.len, &s, err, sizeof(err)));
	CHECK(strstr(s.data, "  last") == NULL);
	buf_free(&b);
	buf_free(&s);
}

/* Backfills: in /status as given, and per table in /metrics (the estimate only when known). */
static void test_backfills(void)
{
	static const report_backfill rows[] = {
	    {"orders", "4f2a", "public", "orders", "running", .read = 1200, .delivered = 1100, .dropped = 50,
	     .filtered = 50, .estimate = 5000},
	    {"orders", "4f2a", "public", "items", "queued", .estimate = -1},
	    {"orders", "4f2a", "public", "lines", "failed", .read = 10, .delivered = 10, .estimate = -1},
	};
	report r = empty_report;
	r.backfills_json = "[{\"id\":\"4f2a\"}]";
	r.backfills = rows;
	r.nbackfills = 3;
	buf b = {0};
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, ",\"backfills\":[{\"id\":\"4f2a\"}]") != NULL);
	buf_reset(&b);
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "# TYPE cdc_backfill_rows_read_total counter\n"
			     "cdc_backfill_rows_read_total{subscription=\"orders\",backfill=\"4f2a\",table="
			     "\"public.orders\"} 1200\n"
			     "cdc_backfill_rows_read_total{subscription=\"orders\",backfill=\"4f2a\",table="
			     "\"public.items\"} 0\n") != NULL);
	CHECK(strstr(b.data, "cdc_backfill_rows_dropped_total{subscription=\"orders\",backfill=\"4f2a\","
			     "table=\"public.orders\"} 50\n") != NULL);
	CHECK(strstr(b.data, "cdc_backfill_rows_delivered_total{subscription=\"orders\",backfill=\"4f2a\","
			     "table=\"public.orders\"} 1100\n") != NULL);
	CHECK(strstr(b.data, "cdc_backfill_rows_filtered_total{subscription=\"orders\",backfill=\"4f2a\","
			     "table=\"public.orders\"} 50\n") != NULL);
	CHECK(strstr(b.data, "# TYPE cdc_backfill_rows_estimate gauge\n"
			     "cdc_backfill_rows_estimate{subscription=\"orders\",backfill=\"4f2a\",table="
			     "\"public.orders\"} 5000\n"
			     "# HELP cdc_backfill_running") != NULL);
	CHECK(strstr(b.data, "cdc_backfill_running{subscription=\"orders\",backfill=\"4f2a\",table=\"public."
			     "items\"} 0\n") != NULL);
	CHECK(strstr(
		  b.data,
		  "# TYPE cdc_backfill_failed gauge\n"
		  "cdc_backfill_failed{subscription=\"orders\",backfill=\"4f2a\",table=\"public.orders\"} 0\n"
		  "cdc_backfill_failed{subscription=\"orders\",backfill=\"4f2a\",table=\"public.items\"} 0\n"
		  "cdc_backfill_failed{subscription=\"orders\",backfill=\"4f2a\",table=\"public.lines\"} "
		  "1\n") != NULL);
	/* none: nothing of it */
	buf_reset(&b);
	r.nbackfills = 0;
	r.backfills_json = "[]";
	status_report_metrics(&r, &b);
	CHECK(strstr(b.data, "cdc_backfill") == NULL);
	buf_reset(&b);
	status_report_status_json(&r, &b);
	CHECK(strstr(b.data, "backfills") == NULL);
	buf_free(&b);
}

int main(void)
{
	test_backfills();
	test_signals();
	test_failed_subscriptions();
	test_status_full();
	test_status_nulls();
	test_escaping();
	test_metrics();
	test_slot_health();
	test_exactly_once();
	test_failover();
	test_hist_le();
	test_subscriptions();
	buf_free(&orders_members);
	buf_free(&socket_metrics);
	buf_free(&kafka_json);
	buf_free(&kafka_text);
	return TEST_SUMMARY("test_report");
}
