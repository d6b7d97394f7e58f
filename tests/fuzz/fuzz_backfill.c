/* fuzz_backfill.c: libFuzzer harness for the body of POST /subscriptions/NAME/backfill
 * (backfill_request_parse): arbitrary bytes. A refusal always says why and leaves nothing behind; an
 * accepted body prints as JSON that parses again and prints the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bf_request_body r, again;
	char err[512] = "";
	if (!backfill_request_parse((const char *)data, size, &r, err, sizeof(err))) {
		if (!err[0] || r.ntables || r.tables || r.where)
			abort();
		return 0;
	}
	buf one = {0}, two = {0};
	backfill_request_json(&r, &one);
	if (!backfill_request_parse(one.data, one.len, &again, err, sizeof(err)))
		abort();
	backfill_request_json(&again, &two);
	if (one.len != two.len || memcmp(one.data, two.data, one.len) != 0)
		abort();
	backfill_request_free(&r);
	backfill_request_free(&again);
	buf_free(&one);
	buf_free(&two);
	return 0;
}
