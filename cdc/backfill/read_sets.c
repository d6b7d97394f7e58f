/* The two small sets a table's reading keeps. One is block ranges (which parts of a relation are read, taken
 * or durable). The other is the keys of rows to read again, each with the chunk's hold on it. */
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/backfill_internal.h"
#include "decoder/base/bytes.h"

/* ---- block ranges ---- */

static void rset_put(rset *s, size_t at, uint32_t lo, uint32_t hi)
{
	if (s->n + 2 > s->cap) {
		s->cap = s->cap ? 2 * s->cap : 8;
		s->v = util_xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	memmove(s->v + at + 2, s->v + at, (s->n - at) * sizeof(*s->v));
	s->v[at] = lo;
	s->v[at + 1] = hi;
	s->n += 2;
}

void backfill_ranges_add(rset *s, uint32_t lo, uint32_t hi)
{
	if (lo >= hi)
		return;
	/* The ranges that touch [lo, hi) merge into one. */
	size_t first = 0;
	while (first < s->n && s->v[first + 1] < lo)
		first += 2;
	size_t last = first;
	while (last < s->n && s->v[last] <= hi) {
		lo = s->v[last] < lo ? s->v[last] : lo;
		hi = s->v[last + 1] > hi ? s->v[last + 1] : hi;
		last += 2;
	}
	if (s->n > last) /* an empty set has no array, and memmove must not see its NULL */
		memmove(s->v + first, s->v + last, (s->n - last) * sizeof(*s->v));
	s->n -= last - first;
	rset_put(s, first, lo, hi);
}

void backfill_ranges_remove(rset *s, uint32_t lo, uint32_t hi)
{
	for (size_t i = 0; i < s->n && lo < hi;) {
		uint32_t a = s->v[i], b = s->v[i + 1];
		if (b <= lo || a >= hi) {
			i += 2;
			continue;
		}
		/* [a, b) overlaps, so keep what lies outside [lo, hi). */
		memmove(s->v + i, s->v + i + 2, (s->n - i - 2) * sizeof(*s->v));
		s->n -= 2;
		if (b > hi)
			rset_put(s, i, hi, b);
		if (a < lo)
			rset_put(s, i, a, lo), i += 2;
		if (b > hi)
			i += 2;
	}
}

/* The end of the range of s that covers block x, or x if none does. */
static uint32_t covered_to(const rset *s, uint32_t x)
{
	for (size_t i = 0; i < s->n; i += 2)
		if (s->v[i] <= x && x < s->v[i + 1])
			return s->v[i + 1];
	return x;
}

/* The first block of s at or after x, or end. */
static uint32_t next_start(const rset *s, uint32_t x, uint32_t end)
{
	for (size_t i = 0; i < s->n; i += 2)
		if (s->v[i] >= x)
			return s->v[i] < end ? s->v[i] : end;
	return end;
}

bool backfill_ranges_first_gap(const rset *a, const rset *b, uint32_t from, uint32_t end, uint32_t max,
			       uint32_t *lo, uint32_t *hi)
{
	uint32_t x = from;
	for (;;) {
		uint32_t y = covered_to(b, covered_to(a, x));
		if (y == x)
			break;
		x = y;
	}
	if (x >= end)
		return false;
	uint32_t stop = next_start(a, x, end), stop_b = next_start(b, x, end);
	stop = stop_b < stop ? stop_b : stop;
	*lo = x;
	*hi = stop - x > max ? x + max : stop;
	return true;
}

uint64_t backfill_ranges_blocks(const rset *s, uint32_t end)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->n && s->v[i] < end; i += 2)
		n += (s->v[i + 1] < end ? s->v[i + 1] : end) - s->v[i];
	return n;
}

void backfill_ranges_free(rset *s)
{
	free(s->v);
	*s = (rset){0};
}

/* ---- keys to read again ---- */

static keyent **key_find(const keyset *s, uint64_t h, const void *key, size_t len)
{
	keyent **e = &s->slots[h & (s->cap - 1)];
	while (*e && !((*e)->hash == h && (*e)->len == len && memcmp((*e)->key, key, len) == 0))
		e = &(*e)->next;
	return e;
}

bool backfill_keys_has(const keyset *s, const void *key, size_t len)
{
	return s->cap && *key_find(s, backfill_hash(key, len), key, len);
}

void backfill_keys_add(keyset *s, const void *key, size_t len)
{
	if (2 * (s->n + 1) > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		keyent **slots = util_xcalloc(cap, sizeof(*slots));
		for (size_t i = 0; i < s->cap; i++)
			for (keyent *e = s->slots[i], *next; e; e = next) {
				next = e->next;
				e->next = slots[e->hash & (cap - 1)];
				slots[e->hash & (cap - 1)] = e;
			}
		free(s->slots);
		s->slots = slots;
		s->cap = cap;
	}
	uint64_t h = backfill_hash(key, len);
	keyent **at = key_find(s, h, key, len);
	if (*at) {
		/* Taken by a chunk whose read may have come before this change. Read it again after. */
		if ((*at)->state == KEY_TAKEN)
			(*at)->state = KEY_TAKEN_AGAIN;
		return;
	}
	keyent *e = util_xmalloc(sizeof(*e) + len);
	*e = (keyent){.hash = h, .len = (uint32_t)len, .state = KEY_WAIT};
	memcpy(e->key, key, len);
	*at = e;
	s->n++;
	s->waiting++;
	s->bytes += len;
}

size_t backfill_keys_take(keyset *s, size_t max, buf *out)
{
	size_t n = 0;
	for (size_t i = 0; i < s->cap && n < max && s->waiting; i++)
		for (keyent *e = s->slots[i]; e && n < max; e = e->next) {
			if (e->state != KEY_WAIT)
				continue;
			uint8_t len[4];
			put_be32(len, e->len);
			buf_append(out, len, 4);
			buf_append(out, e->key, e->len);
			e->state = KEY_TAKEN;
			s->waiting--;
			n++;
		}
	return n;
}

/* Each key of a backfill_keys_take buffer, to fn. */
static void each_taken(keyset *s, const buf *taken, bool done)
{
	const uint8_t *p = (const uint8_t *)taken->data, *end = p + taken->len;
	while (end - p >= 4) {
		uint32_t len = get_be32(p);
		p += 4;
		if ((size_t)(end - p) < len)
			break;
		keyent **at = key_find(s, backfill_hash(p, len), p, len);
		keyent *e = *at;
		p += len;
		if (!e || e->state == KEY_WAIT)
			continue;
		if (done && e->state == KEY_TAKEN) {
			*at = e->next;
			s->n--;
			s->bytes -= e->len;
			free(e);
			continue;
		}
		e->state = KEY_WAIT;
		s->waiting++;
	}
}

void backfill_keys_give_back(keyset *s, const buf *taken)
{
	if (s->cap)
		each_taken(s, taken, false);
}

void backfill_keys_done(keyset *s, const buf *taken)
{
	if (s->cap)
		each_taken(s, taken, true);
}

const keyent *backfill_keys_next(const keyset *s, size_t *pos, const keyent *prev)
{
	if (prev && prev->next)
		return prev->next;
	if (prev)
		(*pos)++;
	for (; *pos < s->cap; (*pos)++)
		if (s->slots[*pos])
			return s->slots[*pos];
	return NULL;
}

void backfill_keys_free(keyset *s)
{
	for (size_t i = 0; i < s->cap; i++)
		for (keyent *e = s->slots[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	free(s->slots);
	*s = (keyset){0};
}
