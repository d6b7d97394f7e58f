/* window.c: the watermark rule of one backfill chunk; see window.h. Rows and changed keys live in
 * one arena reset per chunk; the changed keys in an open-addressing hash set over it. Besides the
 * keys, the window remembers which transactions touched the table recently (seeded from the
 * table's record when the chunk begins), to catch the one race the watermarks alone miss: a commit
 * that reaches the stream before the low watermark while the chunk's snapshot still sees it in
 * progress. */
#include "cdc/backfill/window.h"
#include "decoder/base/bytes.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/base/arena.h"

/* Recent commits kept at most; past it the oldest are forgotten and a chunk that might have needed
 * them is read again. */
#define BFW_MAX_RECENT 65536

typedef struct bfw_rowent {
	const uint8_t *key, *row;
	uint32_t keylen, rowlen;
	bool dropped;
} bfw_rowent;

typedef struct bfw_keyent {
	uint64_t hash;
	const uint8_t *key; /* NULL: empty slot */
	uint32_t len;
	bool partial; /* a change of this key left a column's value out of its new row */
} bfw_keyent;

enum bfw_state { BFW_IDLE, BFW_ARMED, BFW_OPEN, BFW_DONE };

struct bf_window {
	size_t max_bytes, bytes;
	arena *mem;
	enum bfw_state state;
	char *nonce;
	bfw_rowent *rows;
	size_t nrows, rowcap, ndropped;
	bfw_keyent *keys; /* power-of-two slots */
	size_t nkeys, keycap;
	bool drop_all;
	bfw_retry retry;
	bf_snapshot snap;
	bool has_snap;
	/* Top-level xids of the commits that touched the table, from the seed on, in stream order;
	 * before_low of them came before the chunk's low watermark. */
	bf_recent recent;
	size_t before_low;
};

/* ---- encoding ---- */

void backfill_encode(buf *out, const bf_datum *d, size_t n)
{
	/* Room for all of it at once: every row of every chunk goes through here. */
	size_t size = 4 * n;
	for (size_t i = 0; i < n; i++)
		size += d[i].len > 0 ? (size_t)d[i].len : 0;
	buf_reserve(out, size);
	uint8_t *p = (uint8_t *)out->data + out->len;
	for (size_t i = 0; i < n; i++) {
		uint32_t len = d[i].len < 0 ? UINT32_MAX - (uint32_t)(-1 - d[i].len) : (uint32_t)d[i].len;
		put_be32(p, len);
		p += 4;
		if (d[i].len > 0) {
			memcpy(p, d[i].data, (size_t)d[i].len);
			p += d[i].len;
		}
	}
	out->len += size;
	out->data[out->len] = '\0';
}

bool backfill_decode(const void *p, size_t len, bf_datum *d, size_t n)
{
	const uint8_t *s = p;
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (len - off < 4)
			return false;
		uint32_t l = get_be32(s + off);
		off += 4;
		if (l >= UINT32_MAX - 1) {
			d[i] = (bf_datum){.data = NULL, .len = l == UINT32_MAX ? -1 : -2};
			continue;
		}
		if (l > INT32_MAX || len - off < l)
			return false;
		d[i] = (bf_datum){.data = (const char *)s + off, .len = (int32_t)l};
		off += l;
	}
	return off == len;
}

/* ---- snapshots ---- */

/* a comes before b in the circular xid space, as PostgreSQL's TransactionIdPrecedes. */
static bool xid_precedes(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

/* One decimal xid8 of a snapshot's text, cut to 32 bits; *p moves past it. */
static bool snap_xid(const char **p, const char *end, uint32_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (s == end || *s < '0' || *s > '9')
		return false;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = (uint32_t)v;
	*p = s;
	return true;
}

bool backfill_snapshot_parse(const char *text, size_t len, bf_snapshot *out, char *err, size_t errlen)
{
	const char *p = text, *end = text + len;
	*out = (bf_snapshot){0};
	size_t cap = 0;
	if (!snap_xid(&p, end, &out->xmin) || p == end || *p++ != ':' || !snap_xid(&p, end, &out->xmax) ||
	    p == end || *p++ != ':')
		goto bad;
	while (p < end) {
		if (out->nxip == cap) {
			cap = cap ? 2 * cap : 8;
			out->xip = util_xrealloc(out->xip, cap * sizeof(*out->xip));
		}
		if (!snap_xid(&p, end, &out->xip[out->nxip++]))
			goto bad;
		if (p < end && *p++ != ',')
			goto bad;
		if (p == end && p[-1] == ',')
			goto bad;
	}
	return true;
bad:
	backfill_snapshot_free(out);
	return util_errf(err, errlen, "malformed snapshot '%.*s'", len > 64 ? 64 : (int)len, text);
}

void backfill_snapshot_free(bf_snapshot *s)
{
	free(s->xip);
	*s = (bf_snapshot){0};
}

bool backfill_snapshot_sees(const bf_snapshot *s, uint32_t xid)
{
	if (xid_precedes(xid, s->xmin))
		return true;
	if (!xid_precedes(xid, s->xmax))
		return false;
	for (size_t i = 0; i < s->nxip; i++)
		if (s->xip[i] == xid)
			return false;
	return true;
}

/* ---- recent commits ---- */

void backfill_recent_add(bf_recent *r, uint32_t xid)
{
	if (r->n && r->xids[r->n - 1] == xid)
		return;
	if (r->n == BFW_MAX_RECENT) {
		/* Forget the older half at once, remembering the span of the xids forgotten. */
		size_t half = BFW_MAX_RECENT / 2;
		for (size_t i = 0; i < half; i++) {
			if (!r->lost || xid_precedes(r->lost_max, r->xids[i]))
				r->lost_max = r->xids[i];
			if (!r->lost || xid_precedes(r->xids[i], r->lost_min))
				r->lost_min = r->xids[i];
			r->lost = true;
		}
		memmove(r->xids, r->xids + half, (r->n - half) * sizeof(*r->xids));
		r->n -= half;
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 64;
		r->xids = util_xrealloc(r->xids, r->cap * sizeof(*r->xids));
	}
	r->xids[r->n++] = xid;
}

void backfill_recent_settle(bf_recent *r, const bf_snapshot *s)
{
	size_t keep = 0;
	for (size_t i = 0; i < r->n; i++)
		if (!xid_precedes(r->xids[i], s->xmin))
			r->xids[keep++] = r->xids[i];
	r->n = keep;
	if (r->lost && xid_precedes(r->lost_max, s->xmin))
		r->lost = false;
}

void backfill_recent_free(bf_recent *r)
{
	free(r->xids);
	*r = (bf_recent){0};
}

/* r becomes a copy of from. */
static void recent_copy(bf_recent *r, const bf_recent *from)
{
	if (r->cap < from->n) {
		r->cap = from->n;
		r->xids = util_xrealloc(r->xids, r->cap * sizeof(*r->xids));
	}
	if (from->n)
		memcpy(r->xids, from->xids, from->n * sizeof(*r->xids));
	r->n = from->n;
	r->lost = from->lost;
	r->lost_min = from->lost_min;
	r->lost_max = from->lost_max;
}

/* ---- the window ---- */

bf_window *backfill_window_new(size_t max_bytes)
{
	bf_window *w = util_xcalloc(1, sizeof(*w));
	w->max_bytes = max_bytes;
	w->mem = arena_new(64 * 1024);
	return w;
}

static void forget_chunk(bf_window *w)
{
	arena_reset(w->mem);
	free(w->nonce);
	w->nonce = NULL;
	w->nrows = w->ndropped = w->bytes = 0;
	free(w->keys);
	w->keys = NULL;
	w->nkeys = w->keycap = 0;
	w->drop_all = false;
	w->retry = BFW_RETRY_NONE;
	backfill_snapshot_free(&w->snap);
	w->has_snap = false;
	w->state = BFW_IDLE;
}

void backfill_window_free(bf_window *w)
{
	if (!w)
		return;
	forget_chunk(w);
	arena_free(w->mem);
	free(w->rows);
	backfill_recent_free(&w->recent);
	free(w);
}

void backfill_window_begin(bf_window *w, const char *nonce, const bf_recent *seed)
{
	forget_chunk(w);
	w->nonce = util_xstrdup(nonce);
	w->state = BFW_ARMED;
	if (seed)
		recent_copy(&w->recent, seed);
	else
		w->recent.n = 0, w->recent.lost = false;
}

void backfill_window_reset(bf_window *w)
{
	forget_chunk(w);
}

const char *backfill_window_nonce(const bf_window *w)
{
	return w->state == BFW_IDLE ? NULL : w->nonce;
}

static uint8_t *copy_in(bf_window *w, const void *p, size_t n)
{
	w->bytes += n;
	return memcpy(arena_alloc_raw(w->mem, n ? n : 1), p, n);
}

bool backfill_window_add_row(bf_window *w, const void *key, size_t keylen, const void *row, size_t rowlen)
{
	uintptr_t k = (uintptr_t)key, r0 = (uintptr_t)row;
	bool inside = k >= r0 && k + keylen <= r0 + rowlen;
	size_t need = rowlen + (inside ? 0 : keylen);
	/* The first row always fits: a chunk of one row must be possible whatever its size. */
	if (w->nrows && w->bytes + need > w->max_bytes)
		return false;
	if (w->nrows == w->rowcap) {
		w->rowcap = w->rowcap ? 2 * w->rowcap : 256;
		w->rows = util_xrealloc(w->rows, w->rowcap * sizeof(*w->rows));
	}
	const uint8_t *r = copy_in(w, row, rowlen);
	w->rows[w->nrows++] = (bfw_rowent){.key = inside ? r + (k - r0) : copy_in(w, key, keylen),
					   .row = r,
					   .keylen = (uint32_t)keylen,
					   .rowlen = (uint32_t)rowlen};
	return true;
}

void backfill_window_set_snapshot(bf_window *w, bf_snapshot *s)
{
	backfill_snapshot_free(&w->snap);
	w->snap = *s;
	w->has_snap = true;
	*s = (bf_snapshot){0};
}

uint64_t backfill_hash(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3u;
	return h;
}

static bfw_keyent *key_slot(bfw_keyent *keys, size_t cap, uint64_t h, const void *key, size_t len)
{
	for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
		bfw_keyent *e = &keys[i];
		if (!e->key || (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0))
			return e;
	}
}

static bool key_seen(const bf_window *w, const void *key, size_t len)
{
	return w->keycap && key_slot(w->keys, w->keycap, backfill_hash(key, len), key, len)->key;
}

static void key_add(bf_window *w, const void *key, size_t len, bool partial)
{
	if (w->retry)
		return;
	if (2 * (w->nkeys + 1) > w->keycap) {
		size_t cap = w->keycap ? 2 * w->keycap : 64;
		bfw_keyent *keys = util_xcalloc(cap, sizeof(*keys));
		for (size_t i = 0; i < w->keycap; i++)
			if (w->keys[i].key)
				*key_slot(keys, cap, w->keys[i].hash, w->keys[i].key, w->keys[i].len) =
				    w->keys[i];
		free(w->keys);
		w->keys = keys;
		w->keycap = cap;
	}
	uint64_t h = backfill_hash(key, len);
	bfw_keyent *e = key_slot(w->keys, w->keycap, h, key, len);
	if (e->key) {
		e->partial |= partial;
		return;
	}
	if (w->bytes + len > w->max_bytes) {
		w->retry = BFW_RETRY_MEMORY;
		return;
	}
	*e = (bfw_keyent){.hash = h, .key = copy_in(w, key, len), .len = (uint32_t)len, .partial = partial};
	w->nkeys++;
}

void backfill_window_change(bf_window *w, uint32_t xid, const void *key, size_t keylen, const void *key2,
			    size_t key2len, bool partial)
{
	backfill_recent_add(&w->recent, xid);
	if (w->state != BFW_OPEN)
		return;
	if (!key) {
		w->retry = w->retry ? w->retry : BFW_RETRY_UNKEYED;
		return;
	}
	bool moved = key2 && (key2len != keylen || memcmp(key, key2, keylen) != 0);
	/* The new row is the one a partial change leaves incomplete: key2 when the key moved. */
	key_add(w, key, keylen, partial && !moved);
	if (moved)
		key_add(w, key2, key2len, partial);
}

void backfill_window_truncate(bf_window *w, uint32_t xid)
{
	backfill_recent_add(&w->recent, xid);
	if (w->state == BFW_OPEN)
		w->drop_all = true;
}

/* At the high watermark: did a commit reach the stream before the low watermark while the
 * snapshot still saw its transaction in progress? Then the chunk may hold a row's older version
 * than the stream delivered, with no change inside the window to drop it by. */
static bool snapshot_race(bf_window *w)
{
	if (!w->has_snap)
		return false;
	const bf_recent *r = &w->recent;
	/* A forgotten commit the snapshot did not see is in its xip, or at or past its xmax. */
	bool race = r->lost && !xid_precedes(r->lost_max, w->snap.xmax);
	for (size_t i = 0; r->lost && i < w->snap.nxip && !race; i++)
		race =
		    !xid_precedes(w->snap.xip[i], r->lost_min) && !xid_precedes(r->lost_max, w->snap.xip[i]);
	for (size_t i = 0; i < w->before_low && i < r->n && !race; i++)
		race = !backfill_snapshot_sees(&w->snap, r->xids[i]);
	return race;
}

bool backfill_window_open(bf_window *w)
{
	if (w->state != BFW_ARMED)
		return false;
	w->state = BFW_OPEN;
	w->before_low = w->recent.n;
	return true;
}

bfw_mark backfill_window_watermark(bf_window *w, const char *nonce, bool high)
{
	if (w->state == BFW_IDLE || w->state == BFW_DONE || strcmp(nonce, w->nonce) != 0)
		return BFW_FOREIGN;
	if (!high)
		return backfill_window_open(w) ? BFW_OPENED
					       : BFW_FOREIGN; /* a low watermark delivered twice */
	if (w->state == BFW_ARMED)
		w->retry = BFW_RETRY_NO_LOW;
	w->state = BFW_DONE;
	if (snapshot_race(w) && !w->retry)
		w->retry = BFW_RETRY_SNAPSHOT;
	w->before_low = 0;
	if (w->retry)
		return BFW_RETRY;
	for (size_t i = 0; i < w->nrows; i++) {
		bfw_rowent *r = &w->rows[i];
		r->dropped = w->drop_all || key_seen(w, r->key, r->keylen);
		w->ndropped += r->dropped;
	}
	return BFW_CLOSED;
}

size_t backfill_window_rows(const bf_window *w)
{
	return w->nrows;
}

void backfill_window_row(const bf_window *w, size_t i, const void **row, size_t *rowlen, bool *dropped)
{
	*row = w->rows[i].row;
	*rowlen = w->rows[i].rowlen;
	*dropped = w->rows[i].dropped;
}

size_t backfill_window_dropped(const bf_window *w)
{
	return w->ndropped;
}

bool backfill_window_partial_key(const bf_window *w, size_t *pos, const void **key, size_t *len)
{
	for (; *pos < w->keycap; (*pos)++)
		if (w->keys[*pos].key && w->keys[*pos].partial) {
			*key = w->keys[*pos].key;
			*len = w->keys[*pos].len;
			(*pos)++;
			return true;
		}
	return false;
}

size_t backfill_window_bytes(const bf_window *w)
{
	return w->bytes;
}

bfw_retry backfill_window_retry_reason(const bf_window *w)
{
	return w->retry;
}

const char *backfill_window_retry_name(bfw_retry r)
{
	static const char *const names[] = {
	    [BFW_RETRY_NONE] = "none",
	    [BFW_RETRY_MEMORY] = "the chunk's rows and changed keys passed the memory cap",
	    [BFW_RETRY_UNKEYED] = "a change without its key",
	    [BFW_RETRY_SNAPSHOT] = "a commit before the low watermark that the chunk's snapshot did not see",
	    [BFW_RETRY_NO_LOW] = "the high watermark without the low one",
	};
	return r <= BFW_RETRY_NO_LOW ? names[r] : "unknown";
}
