/* The body of POST /subscriptions/NAME/backfill, {"tables": [...], "where": "..."}. Both are optional and an
 * empty body is allowed. It is parsed and checked, with a message naming what is wrong for the 400 answer.
 * The bytes are untrusted, so every part is checked before it is used. */
#ifndef CDC_BACKFILL_REQUEST_H
#define CDC_BACKFILL_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "decoder/base/util.h"

/* Tables one request may name. */
#define BF_REQUEST_MAX_TABLES 1024

typedef struct bf_request_body {
	char **tables; /* "schema.table" patterns */
	size_t ntables;
	char *where; /* NULL if none */
} bf_request_body;

/* False with a message in err, e.g. "tables[1]: expected a string", "where: position 5: ...", "unknown key
 * 'x'". out is then empty. */
bool backfill_request_parse(const char *body, size_t len, bf_request_body *out, char *err,
			    size_t errlen) CDC_MUST_CHECK;
void backfill_request_free(bf_request_body *body);
/* The body as JSON, the form backfill_request_parse reads. */
void backfill_request_json(const bf_request_body *body, buf *out);

#endif
