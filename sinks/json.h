/* json.h: the contract's event JSON (one object per line), used by the stdout sink and cdc tail. */
#ifndef CDC_JSON_H
#define CDC_JSON_H

#include "cdc/v1/event.pb-c.h"
#include "util.h"

/* Appends the event as one JSON object and a newline. */
void json_event(buf *out, const Cdc__V1__Event *e);

/* Appends s as a JSON string literal (quotes included), escaping as RFC 8259 requires.
 * Invalid UTF-8 bytes are replaced with U+FFFD so the output is always valid JSON. */
void json_string(buf *out, const char *s, size_t len);

#endif
