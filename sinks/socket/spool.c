/* See spool.h. Segment files hold CRC-32C checked records and are named by their first offset. An in-memory
 * write buffer is written and fsynced by socket_spool_sync (group commit). A sparse in-memory index per
 * segment serves random reads. A two-slot cursor file means a torn write never loses both. A held
 * transaction's file
 * ("held-<xid>") is written in the records of a segment and renamed into place at its commit. */
#include "sinks/socket/spool.h"
#include "decoder/base/bytes.h"

#include "decoder/base/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A record is little-endian. Its header is as follows, and len payload bytes come after it.
 * - magic u8, type u8, zero u16
 * - crc u32, of every other header byte and the payload
 * - len u32, offset u64, commit_lsn u64, tx_index u32, key_hash u32, time_ms i64
 * A marker's offset is the last event offset it declares committed. Its id fields repeat the newest
 * committed event, so a segment that starts with one still knows the last id. A held transaction's
 * segment has REC_HELD events, whose offset is their index in the segment (the segment's name gives
 * the first) and whose commit_lsn is 0. One REC_TXN follows them. Its offset is the number of events,
 * its commit_lsn and tx_index are the last event's, and its time_ms is the commit time in µs. */
#define REC_HDR 44
#define REC_MAGIC 0xC5
#define REC_EVENT 1
#define REC_MARK 2
#define REC_HELD 3
#define REC_TXN 4
#define HELD_PREFIX "held-"
#define REC_MAX_LEN (1u << 30)

#define INDEX_EVERY 128	      /* index the file position of every 128th event of a segment */
#define WBUF_EARLY (1u << 20) /* write (not fsync) the buffer once it holds this much */
#define WIN_BYTES (64u << 10) /* read-ahead, one pread serving the next records in order */
#define SEGMENT_DEFAULT (64ull << 20)
#define SEG_DIGITS 20
#define CURSOR_FILE "cursor"
#define CURSOR_SLOT 64 /* two slots of seq, acked, first, dropped, crc */
/* Delivery counts. Each record is from u64, n u32, count u32, zero u32, crc u32 (of the 20 bytes before). It
 * says offsets from..from+n-1 were delivered count times. Records are appended as deliveries are made, and
 * the newest record of an offset wins. The file is rewritten with only the offsets after acked once it is
 * COUNTS_COMPACT times larger than that (and at least COUNTS_COMPACT_MIN). */
#define COUNTS_FILE "deliveries"
#define COUNTS_REC 24
#define COUNTS_COMPACT 4
#define COUNTS_COMPACT_MIN (64u << 10)

typedef struct rec_hdr {
	uint8_t type;
	uint32_t len;
	uint64_t offset, commit_lsn;
	uint32_t tx_index, key_hash;
	int64_t time_ms;
} rec_hdr;

typedef struct seg {
	uint64_t first; /* its name, the offset of its first event */
	uint64_t bytes; /* in the file (the last segment's buffered bytes are not counted) */
	/* idx[k] is the file position of event first + k * INDEX_EVERY (a prefix, grown lazily). */
	uint64_t *idx;
	size_t nidx, cidx;
	bool txn_known; /* a held transaction's segment, with its REC_TXN read into the two below */
	uint64_t commit_lsn;
	int64_t commit_time;
} seg;

/* A read-ahead window over one segment plus where the last record read ended, so that reading
 * offsets in order neither searches nor preads per record. */
typedef struct reader {
	uint64_t seg_first; /* the segment of fd, window and cursor, 0 if none */
	int fd;		    /* own descriptor for a closed segment, -1 for the write segment */
	uint8_t *win;
	size_t win_len, win_cap;
	uint64_t win_pos;
	uint64_t next_off, next_pos; /* the event after the last one found, and its position */
	uint64_t last_pos;	     /* where the last one found (next_off - 1) starts */
} reader;

struct spool {
	char *dir;
	spool_limits lim;
	seg *segs; /* oldest first, the last being the one appended to */
	size_t nsegs, csegs;
	int wfd;
	uint64_t written; /* == segs[nsegs - 1].bytes */
	bool unsynced;	  /* written since the last fsync of wfd */
	buf wbuf;
	int cfd;
	uint64_t cseq;
	bool cursor_dirty; /* written since its last fsync */
	buf doomed;	   /* acknowledged segments to delete ("PATH\0" each), by the next cursor sync */
	uint64_t next, head, marked, acked, first, dropped;
	bool pending; /* events appended since the last marker */
	bool have_last;
	uint64_t last_lsn, mark_lsn; /* the newest event's commit_lsn, and the newest committed one's */
	uint32_t last_tx, mark_tx;
	int64_t first_ms, ack_ms;      /* time_ms of event first and of event acked + 1, when appended */
	uint64_t first_seg, first_pos; /* where event first is (or will be) */
	uint64_t ack_seg, ack_pos;     /* where event acked + 1 is, when appended */
	reader rd, meta; /* rd serves socket_spool_read, meta the lookups that must not move r->data */
	char *broken;	 /* a failed write left the file in an unknown state, to reopen */
	/* Delivery counts of the offsets dc_base..dc_base + dc_len - 1 (0 if never delivered), and the file
	 * they are kept in. */
	uint32_t *dc;
	size_t dc_len, dc_cap;
	uint64_t dc_base;
	int dfd;
	buf dc_out;	   /* records not written yet */
	uint64_t dc_bytes; /* the file's size */
	bool dc_empty;	   /* every count was acknowledged, so the file can be emptied */
};

/* ---- encoding ---- */

/* CRC-32C over bytes, continuing from crc as it is inside the loop (not inverted). It uses the table version,
 * or the SSE4.2 instruction where the CPU has it (a fifth of the socket path's CPU went to checksumming byte
 * by byte). Chosen by socket_spool_open, which the daemon calls from its main thread. */
static uint32_t crc_table[256];
static uint32_t (*crc_update)(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t crc_update_table(uint32_t crc, const uint8_t *p, size_t n)
{
	while (n--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_update_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
	uint64_t c = crc;
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t v;
		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	crc = (uint32_t)c;
	while (n--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}
#endif

static void crc_init(void)
{
	if (crc_update)
		return;
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
	crc_update = crc_update_table;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		crc_update = crc_update_sse42;
#endif
}

/* CRC-32C. Pass the previous result as crc to continue over more bytes (0 to start). */
static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
	return ~crc_update(~crc, p, n);
}

static uint32_t rec_crc(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
	uint32_t c = crc32c(0, hdr, 4);
	c = crc32c(c, hdr + 8, REC_HDR - 8);
	return crc32c(c, payload, len);
}

static void rec_encode(uint8_t *p, const rec_hdr *h, const void *payload)
{
	p[0] = REC_MAGIC;
	p[1] = h->type;
	p[2] = p[3] = 0;
	put_le32(p + 8, h->len);
	put_le64(p + 12, h->offset);
	put_le64(p + 20, h->commit_lsn);
	put_le32(p + 28, h->tx_index);
	put_le32(p + 32, h->key_hash);
	put_le64(p + 36, (uint64_t)h->time_ms);
	if (h->len)
		memcpy(p + REC_HDR, payload, h->len);
	put_le32(p + 4, rec_crc(p, p + REC_HDR, h->len));
}

/* Header fields only. NULL if sane, else what is wrong. The CRC is checked once the payload is in. */
static const char *rec_decode(const uint8_t *p, rec_hdr *h)
{
	if (p[0] != REC_MAGIC)
		return "bad magic";
	if (p[1] < REC_EVENT || p[1] > REC_TXN || p[2] || p[3])
		return "bad record type";
	h->type = p[1];
	h->len = get_le32(p + 8);
	h->offset = get_le64(p + 12);
	h->commit_lsn = get_le64(p + 20);
	h->tx_index = get_le32(p + 28);
	h->key_hash = get_le32(p + 32);
	h->time_ms = (int64_t)get_le64(p + 36);
	if (h->len > REC_MAX_LEN || ((h->type == REC_MARK || h->type == REC_TXN) && h->len))
		return "bad payload length";
	return NULL;
}

static bool rec_is_event(const rec_hdr *h)
{
	return h->type == REC_EVENT || h->type == REC_HELD;
}

/* An event record's offset. A held transaction's events count from the segment's first. */
static uint64_t rec_offset(uint64_t seg_first, const rec_hdr *h)
{
	return h->type == REC_HELD ? seg_first + h->offset : h->offset;
}

/* ---- files ---- */

static void seg_path(const spool *s, uint64_t first, char *out, size_t n)
{
	snprintf(out, n, "%s/%0*" PRIu64 ".seg", s->dir, SEG_DIGITS, first);
}

static bool fsync_dir(const char *dir, char *err, size_t errlen)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool ok = fd >= 0 && fsync(fd) == 0;
	int saved = errno;
	if (fd >= 0)
		close(fd);
	return ok ? true
		  : util_errf(err, errlen, "spool %s: cannot fsync the directory: %s", dir, strerror(saved));
}

static bool pread_full(int fd, void *dst, size_t n, uint64_t pos)
{
	uint8_t *p = dst;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)pos);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EIO; /* the file is shorter than its bookkeeping says */
			return false;
		}
		p += r, n -= (size_t)r, pos += (uint64_t)r;
	}
	return true;
}

/* mkdir -p, mode 0700, since state_dir/spool may not exist yet. */
static bool make_dirs(const char *dir, char *err, size_t errlen)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return util_errf(err, errlen, "spool %s: path too long", dir);
	for (char *p = path + 1;; p++) {
		if (*p && *p != '/')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			return util_errf(err, errlen, "spool %s: cannot create %s: %s", dir, path,
					 strerror(errno));
		if (!c)
			return true;
		*p = c;
	}
}

/* ---- segments and the sparse index ---- */

static seg *last_seg(spool *s)
{
	return &s->segs[s->nsegs - 1];
}

static bool is_current(const spool *s, const seg *sg)
{
	return sg == &s->segs[s->nsegs - 1];
}

/* Bytes of the segment including what is still buffered for it. */
static uint64_t seg_size(const spool *s, const seg *sg)
{
	return is_current(s, sg) ? s->written + s->wbuf.len : sg->bytes;
}

/* The last event offset in the segment (first - 1 if it has none). */
static uint64_t seg_last(const spool *s, const seg *sg)
{
	return is_current(s, sg) ? s->next - 1 : sg[1].first - 1;
}

/* The segment holding offset, the last whose first is <= offset. */
static seg *seg_find(spool *s, uint64_t offset)
{
	size_t lo = 0, hi = s->nsegs;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (s->segs[mid].first <= offset)
			lo = mid;
		else
			hi = mid;
	}
	return &s->segs[lo];
}

static void seg_push(spool *s, uint64_t first, uint64_t bytes)
{
	if (s->nsegs == s->csegs) {
		s->csegs = s->csegs ? 2 * s->csegs : 8;
		s->segs = util_xrealloc(s->segs, s->csegs * sizeof(*s->segs));
	}
	s->segs[s->nsegs++] = (seg){.first = first, .bytes = bytes};
}

/* Records pos as event offset's position if it is the next index entry the segment lacks. */
static void idx_note(seg *sg, uint64_t offset, uint64_t pos)
{
	uint64_t rel = offset - sg->first;
	if (rel % INDEX_EVERY || rel / INDEX_EVERY != sg->nidx)
		return;
	if (sg->nidx == sg->cidx) {
		sg->cidx = sg->cidx ? 2 * sg->cidx : 16;
		sg->idx = util_xrealloc(sg->idx, sg->cidx * sizeof(*sg->idx));
	}
	sg->idx[sg->nidx++] = pos;
}

/* ---- reading ---- */

static void reader_close(reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->seg_first = 0;
	r->win_len = 0;
}

/* Switches the reader to segment sg, opening it unless it is the write segment. */
static bool reader_use(spool *s, reader *r, const seg *sg, char *err, size_t errlen)
{
	if (r->seg_first == sg->first && (r->fd >= 0 || is_current(s, sg)))
		return true;
	reader_close(r);
	if (!is_current(s, sg)) {
		char path[4200];
		seg_path(s, sg->first, path, sizeof(path));
		r->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (r->fd < 0)
			return util_errf(err, errlen, "spool %s: cannot open: %s", path, strerror(errno));
	}
	r->seg_first = sg->first;
	r->next_off = 0;
	return true;
}

/* Makes bytes [pos, pos + n) of sg available at *p. Returns 1 when done, 0 when the segment ends before, -1
 * on error. The write segment's bytes past what is written come from the write buffer. */
static int win_get(spool *s, reader *r, const seg *sg, uint64_t pos, size_t n, const uint8_t **p, char *err,
		   size_t errlen)
{
	if (!reader_use(s, r, sg, err, errlen))
		return -1;
	if (pos >= r->win_pos && pos + n <= r->win_pos + r->win_len) {
		*p = r->win + (pos - r->win_pos);
		return 1;
	}
	uint64_t size = seg_size(s, sg);
	if (pos + n > size)
		return 0;
	size_t want = n > WIN_BYTES ? n : WIN_BYTES;
	if (want > size - pos)
		want = (size_t)(size - pos);
	if (want > r->win_cap) {
		free(r->win);
		r->win = util_xmalloc(want);
		r->win_cap = want;
	}
	r->win_len = 0;
	uint64_t disk_end = is_current(s, sg) ? s->written : size;
	size_t from_disk = pos < disk_end ? (size_t)(disk_end - pos < want ? disk_end - pos : want) : 0;
	if (from_disk && !pread_full(r->fd >= 0 ? r->fd : s->wfd, r->win, from_disk, pos)) {
		char path[4200];
		seg_path(s, sg->first, path, sizeof(path));
		util_errf(err, errlen, "spool %s: cannot read at byte %" PRIu64 ": %s", path, pos,
			  strerror(errno));
		return -1;
	}
	if (want > from_disk)
		memcpy(r->win + from_disk, s->wbuf.data + (pos + from_disk - s->written), want - from_disk);
	r->win_pos = pos;
	r->win_len = want;
	*p = r->win;
	return 1;
}

/* The record at pos, checksum verified. Returns 1 with *h and *payload set. Returns 0 with *why saying what
 * is wrong (a short record says "truncated record"). Returns -1 on an I/O error, in err. */
static int rec_at(spool *s, reader *r, const seg *sg, uint64_t pos, rec_hdr *h, const uint8_t **payload,
		  const char **why, char *err, size_t errlen)
{
	const uint8_t *p;
	int got = win_get(s, r, sg, pos, REC_HDR, &p, err, errlen);
	if (got <= 0) {
		*why = "truncated record";
		return got;
	}
	if ((*why = rec_decode(p, h)) != NULL)
		return 0;
	got = win_get(s, r, sg, pos, REC_HDR + (size_t)h->len, &p, err, errlen);
	if (got <= 0) {
		*why = "truncated record";
		return got;
	}
	if (get_le32(p + 4) != rec_crc(p, p + REC_HDR, h->len)) {
		*why = "checksum mismatch";
		return 0;
	}
	*payload = p + REC_HDR;
	return 1;
}

static bool corrupt(spool *s, const seg *sg, uint64_t pos, const char *why, char *err, size_t errlen)
{
	char path[4200];
	seg_path(s, sg->first, path, sizeof(path));
	return util_errf(err, errlen, "spool %s: record at byte %" PRIu64 ": %s", path, pos, why);
}

/* Where to start scanning for offset in sg, the nearest index entry or the reader's cursor. */
static void scan_start(const seg *sg, const reader *r, uint64_t offset, uint64_t *off, uint64_t *pos)
{
	uint64_t k = (offset - sg->first) / INDEX_EVERY;
	*off = sg->first, *pos = 0;
	if (sg->nidx) {
		if (k >= sg->nidx)
			k = sg->nidx - 1;
		*off = sg->first + k * INDEX_EVERY, *pos = sg->idx[k];
	}
	if (r->seg_first != sg->first || !r->next_off)
		return;
	if (r->next_off <= offset && r->next_off > *off)
		*off = r->next_off, *pos = r->next_pos;
	else if (r->next_off - 1 == offset) /* the same one again, for a consumer that had no room before */
		*off = offset, *pos = r->last_pos;
}

/* Finds event offset (which must exist). It seeks near it with the index, scans forward through the
 * read-ahead window and extends the index on the way. */
static bool locate(spool *s, reader *r, uint64_t offset, rec_hdr *h, const uint8_t **payload, seg **where,
		   uint64_t *at, char *err, size_t errlen)
{
	seg *sg = seg_find(s, offset);
	if (!reader_use(s, r, sg, err, errlen))
		return false;
	uint64_t expect, pos;
	scan_start(sg, r, offset, &expect, &pos);
	for (;;) {
		const char *why;
		int got = rec_at(s, r, sg, pos, h, payload, &why, err, errlen);
		if (got < 0)
			return false;
		if (got == 0)
			return corrupt(s, sg, pos, why, err, errlen);
		if (rec_is_event(h)) {
			if (rec_offset(sg->first, h) != expect)
				return corrupt(s, sg, pos, "offset out of sequence", err, errlen);
			idx_note(sg, expect, pos);
			if (expect == offset)
				break;
			expect++;
		}
		pos += REC_HDR + h->len;
	}
	r->next_off = offset + 1;
	r->next_pos = pos + REC_HDR + h->len;
	r->last_pos = pos;
	*where = sg;
	*at = pos;
	return true;
}

/* ---- the cursor file ---- */

static bool cursor_write(spool *s, char *err, size_t errlen)
{
	uint8_t slot[CURSOR_SLOT] = {0};
	s->cseq++;
	put_le64(slot, s->cseq);
	put_le64(slot + 8, s->acked);
	put_le64(slot + 16, s->first);
	put_le64(slot + 24, s->dropped);
	put_le32(slot + 32, crc32c(0, slot, 32));
	off_t at = (off_t)(s->cseq & 1) * CURSOR_SLOT;
	if (pwrite(s->cfd, slot, sizeof(slot), at) != (ssize_t)sizeof(slot))
		return util_errf(err, errlen, "spool %s/" CURSOR_FILE ": cannot write: %s", s->dir,
				 strerror(errno));
	s->cursor_dirty = true;
	return true;
}

/* Opens the cursor file and loads the valid slot with the higher sequence. *found is false when neither slot
 * is valid (a new spool, or both torn). The caller then derives the cursor. */
static bool cursor_open(spool *s, bool *found, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/" CURSOR_FILE, s->dir);
	s->cfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->cfd < 0)
		return util_errf(err, errlen, "spool %s: cannot open: %s", path, strerror(errno));
	uint8_t d[2 * CURSOR_SLOT] = {0};
	ssize_t n = pread(s->cfd, d, sizeof(d), 0);
	if (n < 0)
		return util_errf(err, errlen, "spool %s: cannot read: %s", path, strerror(errno));
	*found = false;
	for (int i = 0; i < 2; i++) {
		const uint8_t *p = d + i * CURSOR_SLOT;
		if ((i + 1) * CURSOR_SLOT > n || get_le32(p + 32) != crc32c(0, p, 32) || get_le64(p) == 0)
			continue;
		if (*found && get_le64(p) < s->cseq)
			continue;
		*found = true;
		s->cseq = get_le64(p);
		s->acked = get_le64(p + 8);
		s->first = get_le64(p + 16);
		s->dropped = get_le64(p + 24);
	}
	return true;
}

/* ---- recovery ---- */

typedef struct scan {
	uint64_t end;  /* position after the last good record */
	uint64_t next; /* the offset after the last event */
	bool marked;   /* a marker was seen, and mark is the last one's offset */
	uint64_t mark;
	bool have_id; /* id of the newest committed event (a marker repeats it, a REC_TXN has it) */
	uint64_t lsn;
	uint32_t tx;
	uint64_t mark_end; /* position after the last marker (or REC_TXN) */
	bool txn;	   /* a held transaction's segment, complete */
	const char *why;   /* the first bad record, NULL if the segment ended cleanly */
} scan;

/* Validates every record of sg from the start, building its index. An I/O error fails. A bad record stops the
 * scan with sc->why set and sc->end at its position. */
static bool scan_seg(spool *s, seg *sg, scan *sc, char *err, size_t errlen)
{
	*sc = (scan){.next = sg->first};
	sg->nidx = 0;
	for (;;) {
		rec_hdr h;
		const uint8_t *payload;
		int got = rec_at(s, &s->meta, sg, sc->end, &h, &payload, &sc->why, err, errlen);
		if (got < 0)
			return false;
		if (got == 0) {
			if (sc->end == seg_size(s, sg))
				sc->why = NULL; /* a clean end */
			return true;
		}
		if (sc->txn || (rec_is_event(&h) && rec_offset(sg->first, &h) != sc->next)) {
			sc->why = "offset out of sequence";
			return true;
		}
		if ((h.type == REC_MARK && (h.offset >= sc->next || (sc->marked && h.offset < sc->mark))) ||
		    (h.type == REC_TXN && h.offset != sc->next - sg->first)) {
			sc->why = "marker offset out of sequence";
			return true;
		}
		sc->end += REC_HDR + h.len;
		if (rec_is_event(&h)) {
			idx_note(sg, sc->next++, sc->end - REC_HDR - h.len);
			continue;
		}
		sc->marked = sc->have_id = true;
		sc->mark = h.type == REC_TXN ? sc->next - 1 : h.offset;
		sc->lsn = h.commit_lsn, sc->tx = h.tx_index, sc->mark_end = sc->end;
		if (h.type == REC_TXN) {
			sc->txn = sg->txn_known = true;
			sg->commit_lsn = h.commit_lsn, sg->commit_time = h.time_ms;
		}
	}
}

/* Cuts the write segment at the first bad record. */
static bool cut_tail(spool *s, const scan *sc, spool_recovery *rec, char *err, size_t errlen)
{
	seg *sg = last_seg(s);
	if (!sc->why)
		return true;
	char path[4200];
	seg_path(s, sg->first, path, sizeof(path));
	if (ftruncate(s->wfd, (off_t)sc->end) != 0 || fsync(s->wfd) != 0)
		return util_errf(err, errlen, "spool %s: cannot cut the torn tail at byte %" PRIu64 ": %s",
				 path, sc->end, strerror(errno));
	rec->torn_bytes = sg->bytes - sc->end;
	sg->bytes = s->written = sc->end;
	reader_close(&s->meta);
	return true;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Parses "<20 digits>.seg". -1 for another file, 0 for a malformed segment name. */
static int seg_name(const char *name, uint64_t *first)
{
	size_t n = strlen(name);
	if (n < 4 || strcmp(name + n - 4, ".seg") != 0)
		return -1;
	if (n != SEG_DIGITS + 4)
		return 0;
	uint64_t v = 0;
	for (size_t i = 0; i < SEG_DIGITS; i++) {
		if (name[i] < '0' || name[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	*first = v;
	return v ? 1 : 0;
}

static bool list_segs(spool *s, char *err, size_t errlen)
{
	DIR *d = opendir(s->dir);
	if (!d)
		return util_errf(err, errlen, "spool %s: cannot list: %s", s->dir, strerror(errno));
	uint64_t *firsts = NULL;
	size_t n = 0, cap = 0;
	bool ok = true;
	struct dirent *e;
	while (ok && (e = readdir(d)) != NULL) {
		uint64_t first;
		/* A held transaction of the last run, which the slot resends. */
		if (strncmp(e->d_name, HELD_PREFIX, strlen(HELD_PREFIX)) == 0 &&
		    unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
			ok = util_errf(err, errlen, "spool %s: cannot remove %s: %s", s->dir, e->d_name,
				       strerror(errno));
		int kind = seg_name(e->d_name, &first);
		if (kind == 0)
			ok = util_errf(
			    err, errlen,
			    "spool %s: malformed segment name \"%s\" (want %d digits, from 1, then .seg)",
			    s->dir, e->d_name, SEG_DIGITS);
		if (kind != 1)
			continue;
		if (n == cap)
			firsts = util_xrealloc(firsts, (cap = cap ? 2 * cap : 16) * sizeof(*firsts));
		firsts[n++] = first;
	}
	closedir(d);
	if (ok && n)
		qsort(firsts, n, sizeof(*firsts), cmp_u64);
	for (size_t i = 0; ok && i < n; i++) {
		char path[4200];
		struct stat st;
		seg_path(s, firsts[i], path, sizeof(path));
		if (stat(path, &st) != 0)
			ok = util_errf(err, errlen, "spool %s: %s", path, strerror(errno));
		else
			seg_push(s, firsts[i], (uint64_t)st.st_size);
	}
	free(firsts);
	return ok;
}

static bool create_seg(spool *s, uint64_t first, char *err, size_t errlen)
{
	char path[4200];
	seg_path(s, first, path, sizeof(path));
	s->wfd = open(path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (s->wfd < 0)
		return util_errf(err, errlen, "spool %s: cannot create: %s", path, strerror(errno));
	seg_push(s, first, 0);
	s->written = 0;
	return fsync_dir(s->dir, err, errlen);
}

static bool open_last(spool *s, char *err, size_t errlen)
{
	char path[4200];
	seg_path(s, last_seg(s)->first, path, sizeof(path));
	s->wfd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
	if (s->wfd < 0)
		return util_errf(err, errlen, "spool %s: cannot open: %s", path, strerror(errno));
	s->written = last_seg(s)->bytes;
	return true;
}

/* The head and the last id when the write segment holds no marker (a crash in a transaction that spans a
 * rollover, or an empty new segment). They come from the newest marker of an earlier, intact segment. */
static bool scan_back(spool *s, scan *last, char *err, size_t errlen)
{
	for (size_t i = s->nsegs - 1; i-- > 0 && (!last->marked || !last->have_id);) {
		seg *sg = &s->segs[i];
		scan sc;
		if (!scan_seg(s, sg, &sc, err, errlen))
			return false;
		if (sc.why || sc.next != sg[1].first)
			return corrupt(s, sg, sc.end,
				       sc.why ? sc.why : "segment ends before the next one starts", err,
				       errlen);
		if (!last->have_id && sc.have_id)
			last->have_id = true, last->lsn = sc.lsn, last->tx = sc.tx;
		if (!last->marked && sc.marked)
			last->marked = true, last->mark = sc.mark;
	}
	if (!last->marked) /* all before the oldest segment was committed, or it would not be gone */
		last->mark = s->segs[0].first - 1;
	return true;
}

static bool read_time(spool *s, uint64_t offset, int64_t *ms, uint64_t *segfirst, uint64_t *pos, char *err,
		      size_t errlen);
static bool acked_moved(spool *s, char *err, size_t errlen);
static void put_marker(spool *s, uint64_t offset);

/* Cuts off the events after the head. They are a transaction a crash cut short, never confirmed to the slot,
 * which resends it whole. Its first event may be in an earlier segment than the last (it spanned a rollover).
 * The segments after that one go. */
static bool cut_uncommitted(spool *s, char *err, size_t errlen)
{
	int64_t ms;
	uint64_t segfirst, pos;
	char path[4200];
	if (s->next - 1 == s->head)
		return true;
	if (!read_time(s, s->head + 1, &ms, &segfirst, &pos, err, errlen))
		return false;
	reader_close(&s->rd);
	reader_close(&s->meta);
	close(s->wfd);
	s->wfd = -1;
	for (; last_seg(s)->first > segfirst; s->nsegs--) {
		seg_path(s, last_seg(s)->first, path, sizeof(path));
		if (unlink(path) != 0)
			return util_errf(err, errlen, "spool %s: cannot delete: %s", path, strerror(errno));
		free(last_seg(s)->idx);
	}
	seg *sg = last_seg(s);
	seg_path(s, sg->first, path, sizeof(path));
	if (truncate(path, (off_t)pos) != 0)
		return util_errf(err, errlen, "spool %s: cannot cut at byte %" PRIu64 ": %s", path, pos,
				 strerror(errno));
	sg->bytes = pos;
	if (sg->nidx > (s->head + 1 - sg->first + INDEX_EVERY - 1) / INDEX_EVERY)
		sg->nidx = (s->head + 1 - sg->first + INDEX_EVERY - 1) / INDEX_EVERY;
	s->next = s->head + 1;
	if (!open_last(s, err, errlen))
		return false;
	if (fsync(s->wfd) != 0)
		return util_errf(err, errlen, "spool %s: cannot fsync: %s", path, strerror(errno));
	return fsync_dir(s->dir, err, errlen);
}

/* Reconciles the cursor with what the segments hold. Nothing below the oldest segment is retained, and
 * nothing above head can be acked or dropped. */
static bool settle_cursor(spool *s, bool found, char *err, size_t errlen)
{
	uint64_t oldest = s->segs[0].first;
	if (!found || s->first < oldest)
		s->first = oldest;
	if (s->first > s->head + 1)
		s->first = s->head + 1;
	if (s->acked < s->first - 1)
		s->acked = s->first - 1;
	if (s->acked > s->head)
		s->acked = s->head;
	if (s->first < s->next &&
	    !read_time(s, s->first, &s->first_ms, &s->first_seg, &s->first_pos, err, errlen))
		return false;
	if (s->first == s->next)
		s->first_seg = last_seg(s)->first, s->first_pos = s->written;
	if (!acked_moved(s, err, errlen))
		return false;
	return found ? true : cursor_write(s, err, errlen);
}

static bool recover(spool *s, spool_recovery *rec, char *err, size_t errlen)
{
	bool found;
	if (!list_segs(s, err, errlen) || !cursor_open(s, &found, err, errlen))
		return false;
	if (s->nsegs == 0) {
		uint64_t first = found && s->first ? s->first : 1;
		if (!create_seg(s, first, err, errlen))
			return false;
	} else if (!open_last(s, err, errlen)) {
		return false;
	}
	scan sc;
	if (!scan_seg(s, last_seg(s), &sc, err, errlen) || !cut_tail(s, &sc, rec, err, errlen))
		return false;
	s->next = sc.next;
	bool txn = sc.txn;
	if ((!sc.marked || !sc.have_id) && !scan_back(s, &sc, err, errlen))
		return false;
	s->head = s->marked = sc.mark;
	s->have_last = sc.have_id;
	s->last_lsn = s->mark_lsn = sc.lsn, s->last_tx = s->mark_tx = sc.tx;
	rec->uncommitted = s->next - 1 - s->head;
	if (!cut_uncommitted(s, err, errlen))
		return false;
	/* A held transaction's segment is never appended to. A crash came before the next one. */
	if (txn) {
		close(s->wfd);
		if (!create_seg(s, s->next, err, errlen))
			return false;
		put_marker(s, s->marked);
	}
	return settle_cursor(s, found, err, errlen);
}

/* ---- delivery counts ---- */

static void counts_set(spool *s, uint64_t offset, uint32_t count)
{
	if (offset <= s->acked)
		return;
	if (!s->dc_len)
		s->dc_base = offset;
	uint64_t base = offset < s->dc_base ? offset : s->dc_base;
	uint64_t end = offset >= s->dc_base + s->dc_len ? offset + 1 : s->dc_base + s->dc_len;
	if (end - base > s->dc_cap) {
		s->dc_cap = s->dc_cap ? s->dc_cap : 64;
		while (s->dc_cap < end - base)
			s->dc_cap *= 2;
		s->dc = util_xrealloc(s->dc, s->dc_cap * sizeof(*s->dc));
	}
	if (base < s->dc_base) {
		size_t shift = (size_t)(s->dc_base - base);
		memmove(s->dc + shift, s->dc, s->dc_len * sizeof(*s->dc));
		memset(s->dc, 0, shift * sizeof(*s->dc));
		s->dc_len += shift;
		s->dc_base = base;
	}
	if (end - base > s->dc_len) {
		memset(s->dc + s->dc_len, 0, (size_t)(end - base - s->dc_len) * sizeof(*s->dc));
		s->dc_len = (size_t)(end - base);
	}
	s->dc[offset - base] = count;
	s->dc_empty = false;
}

/* The acked cursor moved. Counts at or before it are of no use any more. */
static void counts_prune(spool *s)
{
	if (!s->dc_len || s->acked < s->dc_base)
		return;
	uint64_t drop = s->acked + 1 - s->dc_base;
	if (drop >= s->dc_len) {
		s->dc_len = 0;
		s->dc_empty = true;
		return;
	}
	memmove(s->dc, s->dc + drop, (size_t)(s->dc_len - drop) * sizeof(*s->dc));
	s->dc_len -= (size_t)drop;
	s->dc_base += drop;
}

static void counts_put(buf *out, uint64_t from, uint32_t n, uint32_t count)
{
	uint8_t r[COUNTS_REC] = {0};
	put_le64(r, from);
	put_le32(r + 8, n);
	put_le32(r + 12, count);
	put_le32(r + 20, crc32c(0, r, 20));
	buf_append(out, r, sizeof(r));
}

/* The file rewritten with the counts after acked only (runs of equal counts). */
static bool counts_compact(spool *s, char *err, size_t errlen)
{
	buf out = {0};
	for (size_t i = 0, j; i < s->dc_len; i = j) {
		for (j = i + 1; j < s->dc_len && s->dc[j] == s->dc[i]; j++)
			;
		if (s->dc[i])
			counts_put(&out, s->dc_base + i, (uint32_t)(j - i), s->dc[i]);
	}
	char path[4200];
	snprintf(path, sizeof(path), "%s/" COUNTS_FILE, s->dir);
	bool ok = fsutil_replace(path, out.data ? out.data : "", out.len, 0600, err, errlen);
	if (ok) {
		close(s->dfd);
		s->dfd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (s->dfd < 0)
			ok = util_errf(err, errlen, "spool %s: cannot open: %s", path, strerror(errno));
		s->dc_bytes = out.len;
	}
	buf_free(&out);
	return ok;
}

/* Loads the counts of the offsets after acked. A torn or corrupt tail is cut off. */
static bool counts_open(spool *s, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/" COUNTS_FILE, s->dir);
	s->dfd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	struct stat st;
	if (s->dfd < 0 || fstat(s->dfd, &st) != 0)
		return util_errf(err, errlen, "spool %s: cannot open: %s", path, strerror(errno));
	uint8_t *d = util_xmalloc((size_t)st.st_size + 1);
	bool ok = pread_full(s->dfd, d, (size_t)st.st_size, 0);
	size_t good = 0;
	for (; ok && good + COUNTS_REC <= (size_t)st.st_size; good += COUNTS_REC) {
		const uint8_t *r = d + good;
		if (get_le32(r + 16) || get_le32(r + 20) != crc32c(0, r, 20))
			break;
		uint64_t from = get_le64(r);
		uint32_t n = get_le32(r + 8), count = get_le32(r + 12);
		/* Only what the spool holds. A count for an offset it never had is noise. */
		for (uint64_t o = from; o - from < n && o < s->next; o++)
			counts_set(s, o, count);
	}
	free(d);
	if (!ok)
		return util_errf(err, errlen, "spool %s: cannot read: %s", path, strerror(errno));
	s->dc_bytes = good;
	if (good < (uint64_t)st.st_size && ftruncate(s->dfd, (off_t)good) != 0)
		return util_errf(err, errlen, "spool %s: cannot cut its torn tail: %s", path,
				 strerror(errno));
	return true;
}

void socket_spool_note_delivery(spool *s, uint64_t offset, uint32_t count)
{
	counts_set(s, offset, count);
	/* deliveries of consecutive offsets (a batch, the first delivery of a backlog) share a record */
	buf *o = &s->dc_out;
	if (o->len) {
		uint8_t *last = (uint8_t *)o->data + o->len - COUNTS_REC;
		uint32_t n = get_le32(last + 8);
		if (get_le64(last) + n == offset && get_le32(last + 12) == count) {
			put_le32(last + 8, n + 1);
			put_le32(last + 20, crc32c(0, last, 20));
			return;
		}
	}
	counts_put(o, offset, 1, count);
}

uint32_t socket_spool_deliveries(const spool *s, uint64_t offset)
{
	return offset >= s->dc_base && offset - s->dc_base < s->dc_len ? s->dc[offset - s->dc_base] : 0;
}

bool socket_spool_save_deliveries(spool *s, char *err, size_t errlen)
{
	if (s->dc_empty && !s->dc_len) {
		/* Every delivery it counted is acknowledged, so nothing in it is needed any more. */
		buf_reset(&s->dc_out);
		if (s->dc_bytes && ftruncate(s->dfd, 0) != 0)
			return util_errf(err, errlen, "spool %s/" COUNTS_FILE ": cannot empty: %s", s->dir,
					 strerror(errno));
		s->dc_bytes = 0;
		s->dc_empty = false;
		return true;
	}
	if (!s->dc_out.len)
		return true;
	if (!fsutil_write_all(s->dfd, s->dc_out.data, s->dc_out.len))
		return util_errf(err, errlen, "spool %s/" COUNTS_FILE ": cannot write: %s", s->dir,
				 strerror(errno));
	s->dc_bytes += s->dc_out.len;
	buf_reset(&s->dc_out);
	if (s->dc_bytes >= COUNTS_COMPACT_MIN &&
	    s->dc_bytes > COUNTS_COMPACT * COUNTS_REC * (uint64_t)s->dc_len)
		return counts_compact(s, err, errlen);
	return true;
}

/* ---- lifecycle ---- */

static void set_limits(spool *s, const spool_limits *lim)
{
	s->lim = *lim;
	if (!s->lim.segment_bytes)
		s->lim.segment_bytes = SEGMENT_DEFAULT;
}

spool *socket_spool_open(const char *dir, const spool_limits *lim, spool_recovery *rec, char *err,
			 size_t errlen)
{
	crc_init();
	*rec = (spool_recovery){0};
	if (!make_dirs(dir, err, errlen))
		return NULL;
	spool *s = util_xcalloc(1, sizeof(*s));
	s->dir = util_xstrdup(dir);
	s->wfd = s->cfd = s->dfd = s->rd.fd = s->meta.fd = -1;
	set_limits(s, lim);
	if (!recover(s, rec, err, errlen) || !counts_open(s, err, errlen)) {
		socket_spool_close(s);
		return NULL;
	}
	return s;
}

void socket_spool_close(spool *s)
{
	if (!s)
		return;
	reader_close(&s->rd);
	reader_close(&s->meta);
	free(s->rd.win);
	free(s->meta.win);
	if (s->wfd >= 0)
		close(s->wfd);
	if (s->cfd >= 0)
		close(s->cfd);
	if (s->dfd >= 0)
		close(s->dfd);
	free(s->dc);
	buf_free(&s->dc_out);
	for (size_t i = 0; i < s->nsegs; i++)
		free(s->segs[i].idx);
	free(s->segs);
	buf_free(&s->wbuf);
	free(s->broken);
	buf_free(&s->doomed); /* what is left is deleted again by the next trim after a restart */
	free(s->dir);
	free(s);
}

void socket_spool_set_limits(spool *s, const spool_limits *lim)
{
	set_limits(s, lim);
}

bool socket_spool_destroy(const char *dir, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return true;
		return util_errf(err, errlen, "spool %s: cannot list: %s", dir, strerror(errno));
	}
	bool ok = true;
	struct dirent *e;
	while (ok && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) != 0)
			ok = util_errf(err, errlen, "spool %s: cannot remove %s: %s", dir, e->d_name,
				       strerror(errno));
	}
	closedir(d);
	if (ok && rmdir(dir) != 0)
		ok =
		    util_errf(err, errlen, "spool %s: cannot remove the directory: %s", dir, strerror(errno));
	return ok;
}

/* ---- writing ---- */

static bool fail(spool *s, const char *err)
{
	if (!s->broken)
		s->broken = util_xstrdup(err);
	return false;
}

static bool check_broken(const spool *s, char *err, size_t errlen)
{
	return s->broken ? util_errf(err, errlen, "%s (the spool must be reopened)", s->broken) : true;
}

/* Writes the buffer to the write segment (no fsync). A failed write leaves an unknown tail. The spool then
 * refuses further writes, and the next socket_spool_open cuts it. */
static bool flush_wbuf(spool *s, char *err, size_t errlen)
{
	if (!s->wbuf.len)
		return true;
	if (!fsutil_write_all(s->wfd, s->wbuf.data, s->wbuf.len)) {
		char path[4200];
		seg_path(s, last_seg(s)->first, path, sizeof(path));
		util_errf(err, errlen, "spool %s: cannot write: %s", path, strerror(errno));
		return fail(s, err);
	}
	s->written += s->wbuf.len;
	last_seg(s)->bytes = s->written;
	s->unsynced = true;
	buf_reset(&s->wbuf);
	return true;
}

static void put_record(spool *s, const rec_hdr *h, const void *payload)
{
	buf_reserve(&s->wbuf, REC_HDR + h->len);
	rec_encode((uint8_t *)s->wbuf.data + s->wbuf.len, h, payload);
	s->wbuf.len += REC_HDR + h->len;
}

static void put_marker(spool *s, uint64_t offset)
{
	rec_hdr h = {.type = REC_MARK, .offset = offset, .commit_lsn = s->mark_lsn, .tx_index = s->mark_tx};
	put_record(s, &h, NULL);
}

/* Closes the write segment, after writing out and fsyncing what it buffered if durable. */
static bool close_write_seg(spool *s, bool durable, char *err, size_t errlen)
{
	if (durable) {
		if (!flush_wbuf(s, err, errlen))
			return false;
		if (fsync(s->wfd) != 0) {
			char path[4200];
			seg_path(s, last_seg(s)->first, path, sizeof(path));
			util_errf(err, errlen, "spool %s: cannot fsync: %s", path, strerror(errno));
			return fail(s, err);
		}
	}
	close(s->wfd);
	s->wfd = -1;
	s->unsynced = false;
	reader_close(&s->rd); /* their windows stay valid, but they read through the closed descriptor */
	reader_close(&s->meta);
	return true;
}

/* Closes the write segment durably before starting the next, so that only the last segment can have a torn
 * tail. The new one starts with a marker repeating the (now durable) committed offset and the last id. So
 * recovery rarely needs to look at an earlier segment. */
static bool roll(spool *s, char *err, size_t errlen)
{
	if (!close_write_seg(s, true, err, errlen))
		return false;
	if (!create_seg(s, s->next, err, errlen))
		return fail(s, err);
	put_marker(s, s->marked);
	return true;
}

bool socket_spool_append(spool *s, uint64_t commit_lsn, uint32_t tx_index, uint32_t key_hash,
			 const void *data, size_t len, int64_t now_ms, uint64_t *offset, char *err,
			 size_t errlen)
{
	if (!check_broken(s, err, errlen))
		return false;
	if (len > REC_MAX_LEN)
		return util_errf(err, errlen, "spool %s: event of %zu bytes is too large", s->dir, len);
	seg *sg = last_seg(s);
	if (s->next > sg->first && seg_size(s, sg) >= s->lim.segment_bytes && !roll(s, err, errlen))
		return false;
	sg = last_seg(s);
	uint64_t pos = seg_size(s, sg);
	rec_hdr h = {REC_EVENT, (uint32_t)len, s->next, commit_lsn, tx_index, key_hash, now_ms};
	idx_note(sg, s->next, pos);
	put_record(s, &h, data);
	if (s->next == s->first)
		s->first_ms = now_ms, s->first_seg = sg->first, s->first_pos = pos;
	if (s->next == s->acked + 1)
		s->ack_ms = now_ms, s->ack_seg = sg->first, s->ack_pos = pos;
	*offset = s->next++;
	s->pending = s->have_last = true;
	s->last_lsn = commit_lsn, s->last_tx = tx_index;
	return s->wbuf.len < WBUF_EARLY || flush_wbuf(s, err, errlen);
}

bool socket_spool_commit(spool *s, char *err, size_t errlen)
{
	if (!check_broken(s, err, errlen))
		return false;
	if (!s->pending)
		return true;
	s->mark_lsn = s->last_lsn, s->mark_tx = s->last_tx;
	put_marker(s, s->next - 1);
	s->marked = s->next - 1;
	s->pending = false;
	return s->wbuf.len < WBUF_EARLY || flush_wbuf(s, err, errlen);
}

bool socket_spool_sync_begin(spool *s, spool_sync_job *j, int what, char *err, size_t errlen)
{
	bool events = what & SPOOL_SYNC_EVENTS, cursor = what & SPOOL_SYNC_CURSOR;
	*j = (spool_sync_job){.fd = {-1, -1}, .dirfd = -1, .head = events ? s->marked : 0};
	if (!check_broken(s, err, errlen) || (events && !flush_wbuf(s, err, errlen)))
		return false;
	/* The job's own descriptors, since the segment may be closed (rolled, adopted) meanwhile. */
	if (events && s->unsynced && (j->fd[0] = dup(s->wfd)) < 0)
		return util_errf(err, errlen, "spool %s: cannot dup: %s", s->dir, strerror(errno));
	if (cursor && s->cursor_dirty && (j->fd[1] = dup(s->cfd)) < 0) {
		if (j->fd[0] >= 0)
			close(j->fd[0]);
		j->fd[0] = -1;
		return util_errf(err, errlen, "spool %s: cannot dup: %s", s->dir, strerror(errno));
	}
	if (events)
		s->unsynced = false;
	if (cursor && s->doomed.len && (j->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		j->doomed = s->doomed; /* the job's now */
		s->doomed = (buf){0};
	}
	if (cursor)
		s->cursor_dirty = false;
	return true;
}

bool socket_spool_cursor_pending(const spool *s)
{
	return s->cursor_dirty || s->doomed.len;
}

void socket_spool_sync_run(spool_sync_job *j)
{
	for (int i = 0; i < 2; i++)
		if (j->fd[i] >= 0) {
			j->error[i] = fsync(j->fd[i]) != 0 ? errno : 0;
			close(j->fd[i]);
			j->fd[i] = -1;
		}
	/* acknowledged segments, once the cursor that acknowledges them is durable */
	for (size_t at = 0; !j->error[1] && at < j->doomed.len; at += strlen(j->doomed.data + at) + 1)
		if (unlink(j->doomed.data + at) != 0 && errno != ENOENT && !j->delete_error)
			j->delete_error = errno;
	if (j->dirfd >= 0) {
		if (!j->error[1] && !j->delete_error && fsync(j->dirfd) != 0)
			j->delete_error = errno;
		close(j->dirfd);
		j->dirfd = -1;
	}
}

bool socket_spool_sync_end(spool *s, spool_sync_job *j, char *err, size_t errlen)
{
	buf_free(&j->doomed);
	if (j->error[0]) {
		util_errf(err, errlen, "spool %s: cannot fsync its write segment: %s", s->dir,
			  strerror(j->error[0]));
		return fail(s, err); /* after a failed fsync the page cache cannot be trusted */
	}
	if (j->head > s->head)
		s->head = j->head;
	if (j->error[1])
		return util_errf(err, errlen, "spool %s/" CURSOR_FILE ": cannot fsync: %s", s->dir,
				 strerror(j->error[1]));
	if (j->delete_error)
		return util_errf(err, errlen, "spool %s: cannot delete acknowledged segments: %s", s->dir,
				 strerror(j->delete_error));
	return true;
}

bool socket_spool_sync(spool *s, char *err, size_t errlen)
{
	spool_sync_job j;
	if (!socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS | SPOOL_SYNC_CURSOR, err, errlen))
		return false;
	socket_spool_sync_run(&j);
	return socket_spool_sync_end(s, &j, err, errlen);
}

bool socket_spool_last_id(const spool *s, uint64_t *commit_lsn, uint32_t *tx_index)
{
	if (!s->have_last)
		return false;
	*commit_lsn = s->last_lsn;
	*tx_index = s->last_tx;
	return true;
}

/* ---- reading and the cursor ---- */

/* The commit of a held transaction's segment, from its last record (a REC_TXN), once. */
static bool seg_txn(spool *s, seg *sg, char *err, size_t errlen)
{
	rec_hdr h;
	const uint8_t *payload;
	const char *why = "no transaction record at its end";
	if (sg->txn_known)
		return true;
	int got = sg->bytes >= REC_HDR
		      ? rec_at(s, &s->meta, sg, sg->bytes - REC_HDR, &h, &payload, &why, err, errlen)
		      : 0;
	if (got < 0)
		return false;
	if (got == 0 || h.type != REC_TXN)
		return corrupt(s, sg, sg->bytes - REC_HDR, why, err, errlen);
	sg->txn_known = true;
	sg->commit_lsn = h.commit_lsn, sg->commit_time = h.time_ms;
	return true;
}

bool socket_spool_read(spool *s, uint64_t offset, spool_record *r, char *err, size_t errlen)
{
	if (offset < s->first || offset > s->head)
		return util_errf(err, errlen,
				 "spool %s: offset %" PRIu64
				 " is not readable (retained and committed: %" PRIu64 "..%" PRIu64 ")",
				 s->dir, offset, s->first, s->head);
	rec_hdr h;
	const uint8_t *payload;
	seg *sg;
	uint64_t pos;
	if (!locate(s, &s->rd, offset, &h, &payload, &sg, &pos, err, errlen))
		return false;
	*r = (spool_record){h.offset, h.commit_lsn, h.tx_index, h.key_hash, h.time_ms, payload, h.len};
	if (h.type == REC_HELD) {
		if (!seg_txn(s, sg, err, errlen))
			return false;
		*r = (spool_record){offset,  sg->commit_lsn, h.tx_index, h.key_hash,	 h.time_ms,
				    payload, h.len,	     true,	 sg->commit_time};
	}
	return true;
}

/* time_ms and position of an appended event, through the reader that socket_spool_read does not use. */
static bool read_time(spool *s, uint64_t offset, int64_t *ms, uint64_t *segfirst, uint64_t *pos, char *err,
		      size_t errlen)
{
	rec_hdr h;
	const uint8_t *payload;
	seg *sg;
	uint64_t at;
	if (!locate(s, &s->meta, offset, &h, &payload, &sg, &at, err, errlen))
		return false;
	*ms = h.time_ms;
	if (segfirst)
		*segfirst = sg->first, *pos = at;
	return true;
}

uint64_t socket_spool_first(const spool *s)
{
	return s->first;
}

uint64_t socket_spool_head(const spool *s)
{
	return s->head;
}

uint64_t socket_spool_acked(const spool *s)
{
	return s->acked;
}

/* acked moved. Keep the time of the oldest unacknowledged event for max_age. */
static bool acked_moved(spool *s, char *err, size_t errlen)
{
	if (s->acked + 1 < s->next)
		return read_time(s, s->acked + 1, &s->ack_ms, &s->ack_seg, &s->ack_pos, err, errlen);
	return true;
}

bool socket_spool_set_acked(spool *s, uint64_t acked, char *err, size_t errlen)
{
	if (acked > s->head)
		return util_errf(err, errlen,
				 "spool %s: cannot acknowledge %" PRIu64 " beyond the head %" PRIu64, s->dir,
				 acked, s->head);
	if (acked <= s->acked)
		return true;
	s->acked = acked;
	counts_prune(s);
	return acked_moved(s, err, errlen) && cursor_write(s, err, errlen);
}

/* ---- limits ---- */

/* Bytes from position pos of segment segfirst to the end, buffered ones included. */
static uint64_t bytes_from(const spool *s, uint64_t segfirst, uint64_t pos)
{
	uint64_t n = 0;
	for (size_t i = s->nsegs; i-- > 0 && s->segs[i].first >= segfirst;)
		n += seg_size(s, &s->segs[i]);
	return n - pos;
}

bool socket_spool_full(const spool *s, int64_t now_ms)
{
	uint64_t unacked = s->next - 1 - s->acked; /* uncommitted too, as a huge transaction counts */
	if (!unacked)
		return false;
	if (s->lim.max_events && unacked >= s->lim.max_events)
		return true;
	if (s->lim.max_bytes && bytes_from(s, s->ack_seg, s->ack_pos) >= s->lim.max_bytes)
		return true;
	return s->lim.max_age_ms && now_ms - s->ack_ms >= (int64_t)s->lim.max_age_ms;
}

static bool over_limits(const spool *s, int64_t now_ms)
{
	const spool_limits *l = &s->lim;
	return (l->max_events && s->next - s->first > l->max_events) ||
	       (l->max_bytes && bytes_from(s, s->first_seg, s->first_pos) > l->max_bytes) ||
	       (l->max_age_ms && now_ms - s->first_ms > (int64_t)l->max_age_ms);
}

/* Moves first forward past events beyond the limits, never past head (uncommitted events stay). */
static bool drop_oldest(spool *s, int64_t now_ms, char *err, size_t errlen)
{
	uint64_t first = s->first;
	if (s->lim.max_events && s->next - first > s->lim.max_events)
		first = s->next - s->lim.max_events; /* skip ahead, with no need to visit each one */
	if (first > s->head + 1)
		first = s->head + 1;
	for (;;) {
		if (first < s->next && first != s->first &&
		    !read_time(s, first, &s->first_ms, &s->first_seg, &s->first_pos, err, errlen))
			return false;
		if (first >= s->next)
			s->first_seg = last_seg(s)->first, s->first_pos = seg_size(s, last_seg(s));
		s->first = first;
		if (first > s->head || !over_limits(s, now_ms))
			return true;
		first++;
	}
}

/* Deletes the oldest segments whose every event is acknowledged (or discarded) and below keep (never the
 * write segment). The cursor is made durable first, so that a crash cannot bring back an acked position below
 * them. */
static bool delete_acked(spool *s, uint64_t keep, char *err, size_t errlen)
{
	if (keep < s->first)
		keep = s->first;
	size_t n = 0;
	while (n + 1 < s->nsegs && seg_last(s, &s->segs[n]) <= s->acked && seg_last(s, &s->segs[n]) < keep)
		n++;
	if (!n)
		return true;
	reader_close(&s->rd);
	reader_close(&s->meta);
	/* The files go at the next cursor sync, after the cursor's fsync (socket_spool_sync_run). Unlinking a
	 * 64 MiB file took 60-90 ms on a disk mounted with discard, on the event loop. */
	for (size_t i = 0; i < n; i++) {
		char path[4200];
		seg_path(s, s->segs[i].first, path, sizeof(path));
		buf_append(&s->doomed, path, strlen(path) + 1);
		free(s->segs[i].idx);
		s->segs[i].idx = NULL;
	}
	memmove(s->segs, s->segs + n, (s->nsegs - n) * sizeof(*s->segs));
	s->nsegs -= n;
	if (s->first >= s->segs[0].first)
		return true;
	/* Acked events that were kept only because they shared a file are no longer retained. */
	s->first = s->segs[0].first;
	if (s->first >= s->next) {
		s->first_seg = s->first, s->first_pos = seg_size(s, last_seg(s));
		return true;
	}
	return read_time(s, s->first, &s->first_ms, &s->first_seg, &s->first_pos, err, errlen);
}

bool socket_spool_trim(spool *s, int64_t now_ms, uint64_t keep, uint64_t *from, uint64_t *to, char *err,
		       size_t errlen)
{
	*from = *to = 0;
	uint64_t before = s->first;
	if (s->lim.drop_oldest && !drop_oldest(s, now_ms, err, errlen))
		return false;
	if (s->first > before) {
		*from = before, *to = s->first - 1;
		s->dropped += *to - *from + 1;
		if (s->acked < *to) {
			s->acked = *to;
			if (!acked_moved(s, err, errlen))
				return false;
		}
		if (!cursor_write(s, err, errlen))
			return false;
	}
	return delete_acked(s, keep, err, errlen);
}

spool_stats socket_spool_get_stats(const spool *s)
{
	spool_stats st = {.dropped = s->dropped, .segments = s->nsegs};
	if (s->head >= s->first)
		st.events = s->head - s->first + 1, st.oldest_ms = s->first_ms;
	for (size_t i = 0; i < s->nsegs; i++)
		st.bytes += s->segs[i].bytes;
	return st;
}

/* ---- held transactions ---- */

struct spool_held {
	spool *s;
	int fd; /* O_APPEND, so writes go to the end, also after a cut */
	char *path;
	buf wbuf;
	uint64_t flushed; /* bytes in the file, with wbuf's after them */
	uint64_t events;
	uint32_t last_tx;
	int64_t first_ms; /* time_ms of the first event */
};

static bool held_error(spool_held *h, const char *op, char *err, size_t errlen)
{
	return util_errf(err, errlen, "spool %s: cannot %s: %s", h->path, op, strerror(errno));
}

static bool held_flush(spool_held *h, char *err, size_t errlen)
{
	if (h->wbuf.len && !fsutil_write_all(h->fd, h->wbuf.data, h->wbuf.len))
		return held_error(h, "write", err, errlen);
	h->flushed += h->wbuf.len;
	buf_reset(&h->wbuf);
	return true;
}

spool_held *socket_spool_hold(spool *s, uint32_t xid, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/" HELD_PREFIX "%" PRIu32, s->dir, xid);
	int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		util_errf(err, errlen, "spool %s: cannot create: %s", path, strerror(errno));
		return NULL;
	}
	spool_held *h = util_xcalloc(1, sizeof(*h));
	h->s = s;
	h->fd = fd;
	h->path = util_xstrdup(path);
	return h;
}

bool socket_spool_held_append(spool_held *h, uint32_t tx_index, uint32_t key_hash, const void *data,
			      size_t len, int64_t now_ms, char *err, size_t errlen)
{
	if (len > REC_MAX_LEN)
		return util_errf(err, errlen, "spool %s: event of %zu bytes is too large", h->path, len);
	rec_hdr r = {REC_HELD, (uint32_t)len, h->events, 0, tx_index, key_hash, now_ms};
	buf_reserve(&h->wbuf, REC_HDR + len);
	rec_encode((uint8_t *)h->wbuf.data + h->wbuf.len, &r, data);
	h->wbuf.len += REC_HDR + len;
	if (!h->events)
		h->first_ms = now_ms;
	h->events++;
	h->last_tx = tx_index;
	return h->wbuf.len < WBUF_EARLY || held_flush(h, err, errlen);
}

spool_held_point socket_spool_held_at(const spool_held *h)
{
	return (spool_held_point){h->flushed + h->wbuf.len, h->events, h->last_tx};
}

bool socket_spool_held_cut(spool_held *h, spool_held_point at, char *err, size_t errlen)
{
	if (at.bytes >= h->flushed) {
		h->wbuf.len = (size_t)(at.bytes - h->flushed);
	} else {
		if (ftruncate(h->fd, (off_t)at.bytes) != 0)
			return held_error(h, "truncate", err, errlen);
		h->flushed = at.bytes;
		buf_reset(&h->wbuf);
	}
	h->events = at.events;
	h->last_tx = at.last_tx;
	return true;
}

void socket_spool_held_discard(spool_held *h)
{
	if (!h)
		return;
	close(h->fd);
	(void)unlink(h->path); /* best effort, as the next socket_spool_open removes what is left */
	buf_free(&h->wbuf);
	free(h->path);
	free(h);
}

/* The held file, complete and durable, renamed to be segment first. The write segment is closed
 * first (durably), or replaced when it holds no event (only a marker repeating what is durable). */
static bool adopt(spool *s, spool_held *h, uint64_t commit_lsn, int64_t commit_time, char *err, size_t errlen)
{
	rec_hdr t = {REC_TXN, 0, h->events, commit_lsn, h->last_tx, 0, commit_time};
	buf_reserve(&h->wbuf, REC_HDR);
	rec_encode((uint8_t *)h->wbuf.data + h->wbuf.len, &t, NULL);
	h->wbuf.len += REC_HDR;
	if (!held_flush(h, err, errlen))
		return false;
	if (fsync(h->fd) != 0)
		return held_error(h, "fsync", err, errlen);
	if (!check_broken(s, err, errlen))
		return false;
	if (s->pending)
		return util_errf(err, errlen, "spool %s: a held transaction commits inside another", s->dir);
	uint64_t first = s->next;
	bool replace = s->next == last_seg(s)->first;
	if (replace)
		buf_reset(&s->wbuf);
	if (!close_write_seg(s, !replace, err, errlen))
		return false;
	char path[4200];
	seg_path(s, first, path, sizeof(path));
	if (rename(h->path, path) != 0) {
		util_errf(err, errlen, "spool %s: cannot rename to %s: %s", h->path, path, strerror(errno));
		return fail(s, err);
	}
	if (replace) {
		free(last_seg(s)->idx);
		s->nsegs--;
	}
	seg_push(s, first, h->flushed);
	seg *sg = last_seg(s);
	sg->txn_known = true;
	sg->commit_lsn = commit_lsn, sg->commit_time = commit_time;
	if (s->next == s->first)
		s->first_ms = h->first_ms, s->first_seg = first, s->first_pos = 0;
	if (s->next == s->acked + 1)
		s->ack_ms = h->first_ms, s->ack_seg = first, s->ack_pos = 0;
	s->next += h->events;
	s->marked = s->next - 1;
	s->have_last = true;
	s->last_lsn = s->mark_lsn = commit_lsn;
	s->last_tx = s->mark_tx = h->last_tx;
	/* The next appends go to a new segment. Its creation makes the rename durable too. */
	if (!create_seg(s, s->next, err, errlen))
		return fail(s, err);
	put_marker(s, s->marked); /* socket_spool_sync writes it and moves the head */
	return true;
}

bool socket_spool_held_commit(spool_held *h, uint64_t commit_lsn, int64_t commit_time, char *err,
			      size_t errlen)
{
	bool ok = !h->events || adopt(h->s, h, commit_lsn, commit_time, err, errlen);
	socket_spool_held_discard(h);
	return ok;
}
