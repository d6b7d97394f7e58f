/* text.h: a cursor over a value in PostgreSQL's text output (not NUL-terminated) and the small
 * readers that the decoder's type conversions (event.c) and the Debezium renderer share. Static
 * inline: they run for every date and time of every row. */
#ifndef CDC_TEXT_H
#define CDC_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define TEXT_USECS_PER_SEC INT64_C(1000000)

typedef struct cur {
	const char *p, *end;
} cur;

static inline bool cur_eat(cur *cursor, char ch)
{
	if (cursor->p < cursor->end && *cursor->p == ch) {
		cursor->p++;
		return true;
	}
	return false;
}

static inline bool cur_lit(cur *cursor, const char *lit, size_t count)
{
	if ((size_t)(cursor->end - cursor->p) >= count && memcmp(cursor->p, lit, count) == 0) {
		cursor->p += count;
		return true;
	}
	return false;
}

/* Between min and max decimal digits (max <= 18, so no overflow). */
static inline __attribute__((always_inline)) bool cur_digits(cur *cursor, int min, int max, int64_t *out)
{
	int64_t v = 0;
	int n = 0;
	while (n < max && cursor->p < cursor->end && (unsigned char)(*cursor->p - '0') <= 9) {
		v = v * 10 + (*cursor->p++ - '0');
		n++;
	}
	*out = v;
	return n >= min;
}

/* "[.f{1,6}]" after the seconds, as microseconds: 0 when there is no '.'. */
static inline bool cur_fraction(cur *cursor, int64_t *us)
{
	*us = 0;
	if (!cur_eat(cursor, '.'))
		return true;
	const char *start = cursor->p;
	if (!cur_digits(cursor, 1, 6, us))
		return false;
	for (ptrdiff_t k = cursor->p - start; k < 6; k++)
		*us *= 10;
	return true;
}

/* The two decimal digits at digits as a number, or -1 when they are not both digits. */
static inline int text_two_digits(const char *digits)
{
	unsigned hi = (unsigned char)digits[0] - '0', lo = (unsigned char)digits[1] - '0';
	return hi <= 9 && lo <= 9 ? (int)(hi * 10 + lo) : -1;
}

/* "HH:MM:SS[.f{1,6}]" as microseconds: hours of 2 to hour_digits digits (an interval's exceed 24),
 * minutes and seconds below 60. */
static inline bool cur_hms(cur *cursor, int hour_digits, int64_t *us)
{
	int64_t h, mi, s, frac;
	if (!cur_digits(cursor, 2, hour_digits, &h) || !cur_eat(cursor, ':') ||
	    !cur_digits(cursor, 2, 2, &mi) || !cur_eat(cursor, ':') || !cur_digits(cursor, 2, 2, &s))
		return false;
	if (!cur_fraction(cursor, &frac))
		return false;
	*us = ((h * 60 + mi) * 60 + s) * TEXT_USECS_PER_SEC + frac;
	return mi < 60 && s < 60;
}

/* A zone offset "+HH[:MM[:SS]]" or "-...", as signed microseconds east of UTC. */
static inline bool cur_offset(cur *cursor, int64_t *us)
{
	if (cursor->p == cursor->end || (*cursor->p != '+' && *cursor->p != '-'))
		return false;
	int64_t sign = *cursor->p++ == '-' ? -1 : 1, oh, om = 0, os = 0;
	if (!cur_digits(cursor, 2, 2, &oh))
		return false;
	if (cur_eat(cursor, ':')) {
		if (!cur_digits(cursor, 2, 2, &om))
			return false;
		if (cur_eat(cursor, ':') && !cur_digits(cursor, 2, 2, &os))
			return false;
	}
	*us = sign * ((oh * 60 + om) * 60 + os) * TEXT_USECS_PER_SEC;
	return om < 60 && os < 60;
}

#endif
