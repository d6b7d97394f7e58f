/* fuzz_copy.c: libFuzzer harness for a chunk's COPY rows (backfill_copy_encode): the first byte says how
 * many fields to ask for, the rest is the row. A refusal always says why; an accepted row's
 * encoding decodes into exactly its fields at the offsets given, and written back in COPY's text
 * format it encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/copy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A field as the server writes it (CopyAttributeOutText): \N for NULL, the rest escaped. */
static void put_field(buf *out, const bf_datum *d)
{
	if (d->len < 0) {
		buf_puts(out, "\\N");
		return;
	}
	for (int32_t i = 0; i < d->len; i++) {
		unsigned char c = (unsigned char)d->data[i];
		const char *esc = c == '\\'   ? "\\\\"
				  : c == '\t' ? "\\t"
				  : c == '\n' ? "\\n"
				  : c == '\r' ? "\\r"
					      : NULL;
		if (esc)
			buf_puts(out, esc);
		else
			buf_putc(out, (char)c);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n = data[0] % 16 + 1, at[17], again_at[17];
	bf_datum fields[16];
	buf enc = {0}, again = {0}, row = {0};
	char err[256] = "";
	if (!backfill_copy_encode((const char *)data + 1, size - 1, n, &enc, at, err, sizeof(err))) {
		if (!err[0])
			abort();
		goto done;
	}
	if (at[0] != 0 || at[n] != enc.len || !backfill_decode(enc.data, enc.len, fields, n))
		abort();
	for (size_t i = 0; i < n; i++) {
		/* field i's encoding starts at at[i] */
		bf_datum one;
		if (at[i] > at[i + 1] || !backfill_decode(enc.data + at[i], at[i + 1] - at[i], &one, 1) ||
		    one.len != fields[i].len)
			abort();
		if (i)
			buf_putc(&row, '\t');
		put_field(&row, &fields[i]);
	}
	buf_putc(&row, '\n');
	if (!backfill_copy_encode(row.data, row.len, n, &again, again_at, err, sizeof(err)) ||
	    again.len != enc.len || memcmp(again.data, enc.data, enc.len) != 0 ||
	    memcmp(again_at, at, (n + 1) * sizeof(*at)) != 0)
		abort();
done:
	buf_free(&enc);
	buf_free(&again);
	buf_free(&row);
	return 0;
}
