/* test_signal.c: signal rows (cdc/backfill/signal.c) as Debezium's tools write them, and each bad
 * one refused with what is wrong. */
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/signal.h"
#include "test.h"

/* Parses a row (NULL columns stay NULL); want_err "" for an accepted one, whose data is then
 * printed as JSON into json. */
static void row(const char *id, const char *type, const char *data, const char *want_err,
		const char *want_json)
{
	bf_signal s;
	char err[512] = "";
	bool ok = backfill_signal_parse(id, id ? strlen(id) : 0, type, type ? strlen(type) : 0, data,
					data ? strlen(data) : 0, &s, err, sizeof(err));
	CHECK_STR(ok ? "" : err, want_err);
	if (!ok) {
		CHECK(!s.id && !s.tables && !s.subscriptions);
		return;
	}
	buf j = {0};
	backfill_signal_json(&s, &j);
	CHECK_STR(j.data, want_json);
	/* what it prints parses again to the same */
	bf_signal again;
	CHECK(backfill_signal_parse(s.id, strlen(s.id), backfill_signal_type(s.kind),
				    strlen(backfill_signal_type(s.kind)), j.data, j.len, &again, err,
				    sizeof(err)));
	buf k = {0};
	backfill_signal_json(&again, &k);
	CHECK_STR(k.data, j.data);
	backfill_signal_free(&again);
	backfill_signal_free(&s);
	buf_free(&j);
	buf_free(&k);
}

int main(void)
{
	/* Debezium's documented shapes */
	row("ad-hoc-1", "execute-snapshot",
	    "{\"data-collections\": [\"schema1.table1\", \"schema1.table2\"], "
	    "\"type\": \"incremental\"}",
	    "", "{\"data-collections\":[\"schema1.table1\",\"schema1.table2\"],\"subscriptions\":[]}");
	row("ad-hoc-2", "execute-snapshot",
	    "{\"data-collections\": [\"public.orders\"], \"additional-conditions\": "
	    "[{\"data-collection\": \"public.orders\", \"filter\": \"new.status = 'paid'\"}]}",
	    "",
	    "{\"data-collections\":[\"public.orders\"],\"additional-conditions\":[{\"data-collection\":"
	    "\"public.orders\",\"filter\":\"new.status = 'paid'\"}],\"subscriptions\":[]}");
	row("old-style", "execute-snapshot",
	    "{\"data-collections\": [\"a.b\", \"a.c\"], \"additional-condition\": \"new.id > 10\"}", "",
	    "{\"data-collections\":[\"a.b\",\"a.c\"],\"additional-conditions\":[{\"data-collection\":\"a.b\","
	    "\"filter\":\"new.id > 10\"},{\"data-collection\":\"a.c\",\"filter\":\"new.id > 10\"}],"
	    "\"subscriptions\":[]}");
	row("stop-1", "stop-snapshot",
	    "{\"data-collections\": [\"schema1.table1\"], \"type\": \"incremental\"}", "",
	    "{\"data-collections\":[\"schema1.table1\"],\"subscriptions\":[]}");
	row("stop-all", "stop-snapshot", NULL, "", "{\"data-collections\":[],\"subscriptions\":[]}");
	row("stop-all", "stop-snapshot", "  ", "", "{\"data-collections\":[],\"subscriptions\":[]}");
	/* cdc's own key; quoted names; the same table written two ways is named twice */
	row("x", "execute-snapshot",
	    "{\"data-collections\": [\"\\\"Odd Schema\\\".\\\"T\\\"\"], \"subscriptions\": [\"orders\"]}", "",
	    "{\"data-collections\":[\"\\\"Odd Schema\\\".\\\"T\\\"\"],\"subscriptions\":[\"orders\"]}");
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\", \"\\\"a\\\".\\\"b\\\"\"]}",
	    "data: data-collections[1]: \"a\".\"b\" is named twice", NULL);

	/* bad rows: each says what is wrong */
	row(NULL, "execute-snapshot", "{}", "id: missing (NULL)", NULL);
	row("", "execute-snapshot", "{}", "id: expected 1 to 128 bytes of text, got 0", NULL);
	row("a\nb", "execute-snapshot", "{}", "id: control characters are not allowed", NULL);
	row("x", NULL, "{}", "type: NULL is not a signal cdc acts on (execute-snapshot, stop-snapshot)",
	    NULL);
	row("x", "log", "{\"message\": \"hi\"}",
	    "type: 'log' is not a signal cdc acts on (execute-snapshot, stop-snapshot)", NULL);
	row("x", "execute-snapshot", NULL,
	    "data: missing (execute-snapshot needs {\"data-collections\": [...]})", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\"",
	    "data: not JSON (unexpected end of data)", NULL);
	row("x", "execute-snapshot", "[\"a.b\"]",
	    "data: expected a JSON object ({\"data-collections\": [...]})", NULL);
	row("x", "execute-snapshot", "{}", "data: data-collections: missing (the tables to backfill)", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": []}",
	    "data: data-collections: empty (the tables to backfill)", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": \"a.b\"}",
	    "data: data-collections: expected an array of \"schema.table\" names", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [7]}",
	    "data: data-collections[0]: expected a string", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"public\\\\.orders\"]}",
	    "data: data-collections[0]: public\\.orders is not a table's name (character '\\' is only "
	    "allowed "
	    "inside double quotes): cdc takes schema.table names, not regular expressions",
	    NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"public.*\"]}",
	    "data: data-collections[0]: public.* is not a table's name (a table's name, without * or ? "
	    "(write "
	    "the glob's character in double quotes)): cdc takes schema.table names, not regular expressions",
	    NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\"], \"type\": \"blocking\"}",
	    "data: type: blocking is not done: cdc's backfills never pause the stream (leave type out, or "
	    "write "
	    "incremental)",
	    NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\"], \"surrogate-key\": \"id\"}",
	    "data: unknown key 'surrogate-key' (a signal's data takes data-collections, type, "
	    "additional-conditions and subscriptions)",
	    NULL);
	row("x", "execute-snapshot",
	    "{\"data-collections\": [\"a.b\"], \"additional-conditions\": [{\"data-collection\": \"a.b\", "
	    "\"filter\": \"color='blue'\"}]}",
	    "data: additional-conditions[0]: position 1: unknown name 'color' (columns are new.<name> or "
	    "old.<name>) (a filter is cdc's where language: new.color = 'blue')",
	    NULL);
	row("x", "execute-snapshot",
	    "{\"data-collections\": [\"a.b\"], \"additional-conditions\": [{\"data-collection\": \"a.c\", "
	    "\"filter\": \"new.x = 1\"}]}",
	    "data: additional-conditions[0]: a.c is not one of data-collections", NULL);
	row("x", "execute-snapshot",
	    "{\"data-collections\": [\"a.b\"], \"additional-conditions\": [{\"data-collection\": \"a.b\", "
	    "\"filter\": \"new.x = 1\"}, {\"data-collection\": \"a.b\", \"filter\": \"new.x = 2\"}]}",
	    "data: additional-conditions[1]: a second condition for a.b", NULL);
	row("x", "execute-snapshot",
	    "{\"data-collections\": [\"a.b\"], \"additional-conditions\": [{\"x\": 1}]}",
	    "data: additional-conditions[0]: expected {\"data-collection\": \"schema.table\", \"filter\": "
	    "\"...\"}",
	    NULL);
	row("x", "stop-snapshot", "{\"additional-condition\": \"new.x = 1\"}",
	    "data: stop-snapshot takes no conditions", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\"], \"subscriptions\": [\"\"]}",
	    "data: subscriptions[0]: expected 1 to 128 bytes of text, got 0", NULL);
	row("x", "execute-snapshot", "{\"data-collections\": [[[[\"a.b\"]]]]}",
	    "data: not JSON (nesting too deep)", NULL);
	/* lengths: an id of 129 bytes, data past 64 KiB, text that is not UTF-8 */
	{
		char id[130];
		memset(id, 'i', 129);
		id[129] = '\0';
		row(id, "stop-snapshot", NULL, "id: expected 1 to 128 bytes of text, got 129", NULL);
		id[128] = '\0';
		row(id, "stop-snapshot", NULL, "", "{\"data-collections\":[],\"subscriptions\":[]}");
		size_t n = BF_SIGNAL_MAX_DATA + 1;
		char *big = malloc(n + 1);
		memset(big, ' ', n);
		memcpy(big, "{\"data-collections\": [\"a.b\"]}", 29);
		big[n] = '\0';
		row("x", "execute-snapshot", big, "data: more than 65536 bytes", NULL);
		big[n - 1] = '\0';
		row("x", "execute-snapshot", big, "",
		    "{\"data-collections\":[\"a.b\"],\"subscriptions\":[]}");
		free(big);
		row("x", "execute-snapshot", "{\"data-collections\": [\"a.\xff\"]}",
		    "data: not valid UTF-8 text", NULL);
	}
	/* an embedded NUL (JSON's \u0000) never reaches a name */
	row("x", "execute-snapshot", "{\"data-collections\": [\"a.b\\u0000c\"]}",
	    "data: data-collections[0]: not valid UTF-8 text", NULL);
	return TEST_SUMMARY("test_signal");
}
