/* Allocation that cannot fail silently, id lists, LSN formatting, UTF-8 and the clocks. It is the
 * lowest layer of cdc, and every module may use it. It brings buf.h too, since every module writes
 * into a buffer. */
#ifndef CDC_UTIL_H
#define CDC_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/buf.h"

#define CDC_MUST_CHECK __attribute__((warn_unused_result))
#define CDC_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Out of memory is not recoverable for a CDC daemon. These abort with a message. */
void *util_xmalloc(size_t count);
void *util_xcalloc(size_t count, size_t size);
void *util_xrealloc(void *data, size_t count);
char *util_xstrdup(const char *text);

/* A list of user or group ids, an allow list. */
typedef struct id_list {
	uint32_t *v;
	size_t n;
} id_list;
bool util_id_list_has(const id_list *list, uint32_t id);
void util_id_list_copy(id_list *dst, const id_list *src); /* dst's old list is not freed */
bool util_id_list_same(const id_list *list, const id_list *list2);
void util_id_list_free(id_list *list);

/* Adds one to an eventfd, which is how a thread wakes the event loop. Aborts on overflow, which
 * takes 2^64 - 1 signals unread. */
void util_efd_signal(int fd);

/* "X/X" with upper-case hex, as PostgreSQL prints an LSN. out needs 18 bytes. Returns the length. */
#define LSN_STRLEN 18
size_t util_lsn_format(uint64_t lsn, char out[LSN_STRLEN]);
bool util_lsn_parse(const char *text, uint64_t *lsn) CDC_MUST_CHECK;
/* value as 16 lower-case hex digits and a NUL (how a schema id is shown). */
void util_hex64(uint64_t value, char out[17]);
/* The value of a hex digit (either case), or -1. */
static inline int util_hex_digit(char digit)
{
	return digit >= '0' && digit <= '9'   ? digit - '0'
	       : digit >= 'a' && digit <= 'f' ? digit - 'a' + 10
	       : digit >= 'A' && digit <= 'F' ? digit - 'A' + 10
					      : -1;
}

/* Length of the well-formed UTF-8 sequence at text, by Unicode table 3-7 (no overlongs, surrogates or
 * code points past U+10FFFF). Or 0, with *skip set to the bytes of its maximal ill-formed prefix (at
 * least 1), which is what one U+FFFD replaces. text[0] >= 0x80. */
size_t util_utf8_seq(const unsigned char *text, size_t avail, size_t *skip);
/* Whether text[0..len) is well-formed UTF-8 without NUL bytes. */
bool util_utf8_valid(const char *text, size_t len);
/* The code point of a well-formed sequence of count bytes (as util_utf8_seq measured it). */
uint32_t util_utf8_codepoint(const unsigned char *text, size_t count);

/* Milliseconds of CLOCK_MONOTONIC, for timeouts and intervals, which a clock step must not bend. */
uint64_t util_now_ms(void);
/* The same in microseconds. */
uint64_t util_now_us(void);
/* Milliseconds since the Unix epoch (CLOCK_REALTIME), for what is compared with commit times and
 * stored (spool retention by age). */
int64_t util_wall_ms(void);
/* The same in microseconds, the unit of commit times, for commit-to-delivery latency. */
int64_t util_wall_us(void);
/* value / value2 rounded toward minus infinity (value2 > 0), for the days or milliseconds of a time
 * before 1970. */
int64_t util_floor_div(int64_t value, int64_t value2);

/* Error text into a caller's buffer, snprintf-style. Returns false so callers can `return util_errf(...)`. */
bool util_errf(char *err, size_t errlen, const char *fmt, ...) CDC_PRINTF(3, 4);

#endif
