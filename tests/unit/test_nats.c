/* test_nats.c: the NATS sink's pure parts: subjects from templates (what a token cannot hold), the
 * filters a stream needs and whether a stream's filter covers them, and its figures in /status and
 * /metrics, byte for byte. */
#include <string.h>

#include "sinks/nats/nats_sink.h"
#include "test.h"

static void test_subject_name(void)
{
	static const struct {
		const char *tmpl, *schema, *table, *sub, *tag, *want;
	} cases[] = {
	    {"cdc.{schema}.{table}", "public", "orders", "s", NULL, "cdc.public.orders"},
	    {"cdc.{schema}.{table}", "my schema", "a.b*c>d", "s", NULL, "cdc.my_schema.a_b_c_d"},
	    {"{subscription}.{tag}.x", "p", "t", "sub-1", "eu", "sub-1.eu.x"},
	    {"{subscription}.{tag}.x", "p", "t", "sub-1", NULL, "sub-1._.x"},
	    {"cdc.{schema}.{table}", "", "", "s", NULL, "cdc._._"}, /* a logical message has no table */
	    {"cdc.{schema}.{table}", "caf\xc3\xa9", "t\tab", "s", NULL, "cdc.caf\xc3\xa9.t_ab"},
	    {"plain.subject", "p", "t", "s", NULL, "plain.subject"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		buf b = {0};
		nats_subject_name(&b, cases[i].tmpl, cases[i].schema, cases[i].table, cases[i].sub,
				  cases[i].tag);
		CHECK_STR(b.data, cases[i].want);
		buf_free(&b);
	}
}

static void test_filters(void)
{
	static const struct {
		const char *tmpl, *want;
	} filters[] = {
	    {"cdc.{schema}.{table}", "cdc.*.*"},
	    {"json.{subscription}.{table}", "json.*.*"},
	    {"a.b{table}c.d", "a.*.d"},
	    {"plain", "plain"},
	};
	for (size_t i = 0; i < sizeof filters / sizeof *filters; i++) {
		buf b = {0};
		nats_subject_filter(&b, filters[i].tmpl);
		CHECK_STR(b.data, filters[i].want);
		buf_free(&b);
	}
	CHECK(nats_subject_covers("cdc.>", "cdc.*.*"));
	CHECK(nats_subject_covers("cdc.*.*", "cdc.*.*"));
	CHECK(nats_subject_covers("cdc.*.*", "cdc.public.*"));
	CHECK(nats_subject_covers(">", "a.b"));
	CHECK(!nats_subject_covers("cdc.public.*", "cdc.*.*"));
	CHECK(!nats_subject_covers("cdc.*", "cdc.*.*"));
	CHECK(!nats_subject_covers("cdc.*.*.*", "cdc.*.*"));
	CHECK(!nats_subject_covers("audit.*", "cdc.*"));
	CHECK(!nats_subject_covers("cd.*.*", "cdc.*.*"));
}

static void test_figures(void)
{
	nats_stats st = {.connected = true,
			 .in_flight = 3,
			 .delivered = 120,
			 .duplicates = 7,
			 .errors = 1,
			 .restarts = 1,
			 .reconnects = 2};
	buf b = {0};
	nats_status_json(&st, &b);
	CHECK_STR(b.data,
		  "{\"connected\":true,\"in_flight\":3,\"delivered\":120,\"duplicates\":7,\"errors\":1,"
		  "\"restarts\":1,\"reconnects\":2,\"error\":null}");
	buf_reset(&b);
	st.connected = false;
	strcpy(st.error, "JetStream refused a message: maximum messages exceeded");
	nats_status_json(&st, &b);
	CHECK(strstr(b.data, "\"connected\":false,") &&
	      strstr(b.data, "\"error\":\"JetStream refused a message: "
			     "maximum messages exceeded\"}"));
	buf_reset(&b);
	nats_metrics(&st, &b);
	CHECK(strstr(b.data, "# HELP cdc_nats_connected 1 while cdc is connected to a NATS server.\n"
			     "# TYPE cdc_nats_connected gauge\ncdc_nats_connected 0\n") == b.data);
	CHECK(strstr(b.data, "\ncdc_nats_in_flight_messages 3\n"));
	CHECK(strstr(b.data, "\ncdc_nats_delivered_messages_total 120\n"));
	CHECK(strstr(b.data, "\ncdc_nats_duplicate_messages_total 7\n"));
	CHECK(strstr(b.data, "\ncdc_nats_errors_total 1\n"));
	CHECK(strstr(b.data, "\ncdc_nats_restarts_total 1\n"));
	CHECK(strstr(b.data, "\n# TYPE cdc_nats_reconnects_total counter\ncdc_nats_reconnects_total 2\n"));
	buf_free(&b);
}

int main(void)
{
	test_subject_name();
	test_filters();
	test_figures();
	return TEST_SUMMARY("test_nats");
}
