/* json.h: JSON text for every part of cdc: string literals escaped as RFC 8259 requires. */
#ifndef CDC_JSON_H
#define CDC_JSON_H

#include "decoder/util.h"

/* Appends s as a JSON string literal (quotes included), escaping as RFC 8259 requires.
 * Invalid UTF-8 bytes are replaced with U+FFFD so the output is always valid JSON. */
void json_string(buf *out, const char *s, size_t len);

#endif
