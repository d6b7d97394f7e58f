/* copy.h: one row of COPY's text format, as a backfill's chunk reads it: fields separated by tabs,
 * \N for NULL, backslash escapes. Untrusted bytes: the row must hold exactly the fields asked for,
 * and every escape is checked. */
#ifndef CDC_BACKFILL_COPY_H
#define CDC_BACKFILL_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "cdc/backfill/window.h"
#include "decoder/base/util.h"

/* Appends line's fields (one CopyData message: a row and its newline), exactly count of them, to out
 * in bf_encode's format, unescaped, in one pass; at[i] gets the offset in out where field i starts
 * (its 4-byte length), at[count] the end. False with a message naming the field when the row has
 * another number of fields or a bad escape (out then holds a part of it). */
bool bf_copy_encode(const char *line, size_t len, size_t count, buf *out, size_t *at, char *err,
		    size_t errlen) CDC_MUST_CHECK;

#endif
