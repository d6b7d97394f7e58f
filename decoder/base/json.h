/* JSON text out for every part of cdc (the event renderer, the status documents, the JSON log lines).
 * Everything appends to a buf, and nothing allocates but the buf's growth. JSON text in is json-c's
 * parse of one whole document, with a message that names what is wrong. */
#ifndef CDC_JSON_H
#define CDC_JSON_H

#include "decoder/base/hist.h"
#include "decoder/base/util.h"

/* The writers give string literals escaped as RFC 8259 requires, numbers, literals, and the commas
 * between members. */
struct json_object;

/* Appends text as a JSON string literal (quotes included), escaping as RFC 8259 requires.
 * Invalid UTF-8 bytes are replaced with U+FFFD so the output is always valid JSON. */
void json_string(buf *out, const char *text, size_t len);
/* The same without the quotes, for the inside of a string literal written in parts. */
void json_escape(buf *out, const char *text, size_t len);
/* A NUL-terminated string as a literal. NULL is null. */
void json_str(buf *out, const char *text);
void json_u64(buf *out, uint64_t value);
/* "00" to "99": two decimal digits at a time. */
extern const char json_digit_pairs[201];
void json_i64(buf *out, int64_t value);
/* A double that is not finite as the JSON string "NaN", "Infinity" or "-Infinity", since JSON has no
 * number for them. False, writing nothing, for a finite one. */
bool json_nonfinite(buf *out, double value);
/* Bytes as a JSON string of their base64 (RFC 4648, with padding). */
void json_base64(buf *out, const uint8_t *bytes, size_t count);
void json_boolean(buf *out, bool value);
void json_null(buf *out);

/* Members of an object and elements of an array. *first is true before the first one. Every other
 * gets a comma before it. */
void json_sep(buf *out, bool *first);
/* A member's key and colon, after the comma it needs. */
void json_key(buf *out, bool *first, const char *key);
/* A whole member, "key":value. */
void json_key_str(buf *out, bool *first, const char *key, const char *text);
void json_key_u64(buf *out, bool *first, const char *key, uint64_t value);
void json_key_i64(buf *out, bool *first, const char *key, int64_t value);
void json_key_boolean(buf *out, bool *first, const char *key, bool value);
/* An LSN as PostgreSQL prints it ("16/B374D848"). 0 (InvalidXLogRecPtr) is unknown, written null. */
void json_key_lsn(buf *out, bool *first, const char *key, uint64_t lsn);
/* RFC 3339 in UTC with microseconds ("2024-05-01T12:34:56.000123Z"). 0 is unknown, written null. */
void json_key_time(buf *out, bool *first, const char *key, int64_t us);
/* key: value with three decimals, or null when !known or not finite. */
void json_key_fixed3(buf *out, bool *first, const char *key, bool known, double value);
/* key: {"count", "p50", "p99", "p999", "max"} of a histogram of µs, in milliseconds (null when empty). */
void json_key_hist_ms(buf *out, bool *first, const char *key, const hist *histogram);

/* A member of object as text for a terminal. It is "-" when missing or null, a boolean is yes or no,
 * and control characters (a terminal's escapes) are '?'. Returns out. */
const char *json_field_text(struct json_object *object, const char *key, char *out, size_t count);

/* Parses text[0..len) as one JSON document (whitespace around it allowed), nested at most depth
 * levels. Returns its root, which the caller json_object_put()s. Or NULL with err "not JSON (what is
 * wrong)". */
struct json_object *json_parse(const char *text, size_t len, int depth, char *err, size_t errlen);

#endif
