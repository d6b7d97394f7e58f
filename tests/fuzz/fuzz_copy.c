/* fuzz_copy.c: libFuzzer harness for a chunk's COPY rows (bf_copy_split): the first byte says how
 * many fields to ask for, the rest is the row. A refusal always says why; an accepted row's fields
 * lie inside the row or the scratch, and written back in COPY's text format they split the same. */
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
	size_t n = data[0] % 16 + 1;
	const char *line = (const char *)data + 1;
	size_t len = size - 1;
	bf_datum out[16], again[16];
	buf scratch = {0}, scratch2 = {0}, row = {0};
	char err[256] = "";
	if (!bf_copy_split(line, len, out, n, &scratch, err, sizeof(err))) {
		if (!err[0])
			abort();
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		const char *p = out[i].data;
		bool in_line = p >= line && p + out[i].len <= line + len;
		bool in_scratch = p >= scratch.data && p + out[i].len <= scratch.data + scratch.len;
		if (out[i].len >= 0 && !in_line && !in_scratch)
			abort();
		if (i)
			buf_putc(&row, '\t');
		put_field(&row, &out[i]);
	}
	buf_putc(&row, '\n');
	if (!bf_copy_split(row.data, row.len, again, n, &scratch2, err, sizeof(err)))
		abort();
	for (size_t i = 0; i < n; i++)
		if (again[i].len != out[i].len ||
		    (out[i].len > 0 && memcmp(again[i].data, out[i].data, (size_t)out[i].len) != 0))
			abort();
done:
	buf_free(&scratch);
	buf_free(&scratch2);
	buf_free(&row);
	return 0;
}
