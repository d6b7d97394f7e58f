/* fuzz_signal.c: libFuzzer harness for a signal row (backfill_signal_parse): the input is the id, a
 * newline, the type, a newline and the data; a part that the input stops before is SQL's NULL. A
 * refusal always says why and leaves nothing behind; an accepted signal prints its data as JSON
 * that parses again and prints the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/signal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *part[3] = {NULL, NULL, NULL};
	size_t len[3] = {0, 0, 0}, at = 0;
	for (int i = 0; i < 3 && at <= size; i++) {
		const char *p = (const char *)data + at;
		const char *nl = i < 2 ? memchr(p, '\n', size - at) : NULL;
		part[i] = p;
		len[i] = nl ? (size_t)(nl - p) : size - at;
		at += len[i] + 1;
		if (i < 2 && !nl)
			break;
	}
	bf_signal s, again;
	char err[512] = "";
	if (!backfill_signal_parse(part[0], len[0], part[1], len[1], part[2], len[2], &s, err, sizeof(err))) {
		if (!err[0] || s.id || s.tables || s.ntables || s.subscriptions || s.nsubscriptions)
			abort();
		return 0;
	}
	buf one = {0}, two = {0};
	const char *type = backfill_signal_type(s.kind);
	backfill_signal_json(&s, &one);
	if (!backfill_signal_parse(s.id, strlen(s.id), type, strlen(type), one.data, one.len, &again, err,
				   sizeof(err)))
		abort();
	backfill_signal_json(&again, &two);
	if (one.len != two.len || memcmp(one.data, two.data, one.len) != 0 || again.kind != s.kind ||
	    strcmp(again.id, s.id) != 0)
		abort();
	backfill_signal_free(&s);
	backfill_signal_free(&again);
	buf_free(&one);
	buf_free(&two);
	return 0;
}
