/* One row of COPY's text format, as a backfill's chunk reads it. Fields are separated by tabs, \N is NULL,
 * and backslash escapes are read. The bytes are untrusted, so the row must hold exactly the fields asked for,
 * and every escape is checked. */
#ifndef CDC_BACKFILL_COPY_H
#define CDC_BACKFILL_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "cdc/backfill/window.h"
#include "decoder/base/util.h"

/* Appends line's fields, exactly count of them, to out in backfill_encode's format, unescaped, in one pass.
 * line is one CopyData message, a row and its newline. at[i] gets the offset in out where field i starts (its
 * 4-byte length), and at[count] the end. False with a message naming the field when the row has another
 * number of fields or a bad escape. out then holds a part of it. */
bool backfill_copy_encode(const char *line, size_t len, size_t count, buf *out, size_t *at, char *err,
			  size_t errlen) CDC_MUST_CHECK;

#endif
