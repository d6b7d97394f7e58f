/* copy.h: one row of COPY's text format, as a backfill's chunk reads it: fields separated by tabs,
 * \N for NULL, backslash escapes. Untrusted bytes: the row must hold exactly the fields asked for,
 * and every escape is checked. */
#ifndef CDC_BACKFILL_COPY_H
#define CDC_BACKFILL_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "cdc/backfill/window.h"
#include "decoder/base/util.h"

/* Splits line (one CopyData message: a row and its newline) into exactly count datums. A field with no
 * escape points into line; an escaped one is unescaped into scratch (reset first), which then
 * holds at most len bytes and is not moved. False with a message naming the field when the row has
 * another number of fields or a bad escape. */
bool bf_copy_split(const char *line, size_t len, bf_datum *out, size_t count, buf *scratch, char *err,
		   size_t errlen) CDC_MUST_CHECK;

#endif
