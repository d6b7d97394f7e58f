/* The transaction assembler (see txn.h). Plain transactions pass straight through. The handler's records of
 * streamed and prepared ones are held in one spill file each ("txn-<xid>.spill"). They are replayed record by
 * record when the server reports their commit, so memory stays bounded whatever their size. */
#include "decoder/txn.h"
#include "decoder/base/bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The write buffer of the one open spill file, reused as the read buffer during replay. */
#define TXN_IO_SIZE (64 * 1024)
/* A spill record is a 4-byte length, then the handler's bytes for one change. */
#define TXN_REC_HDR 4

/* Where a subtransaction's first message landed in its top-level transaction's file. */
typedef struct txn_subxact {
	uint32_t xid;
	uint64_t offset;
	uint32_t positions; /* the transaction's positions before that message */
} txn_subxact;

typedef enum txn_held_kind {
	TXN_HELD_STREAMED,  /* Stream Start seen, no Stream Commit / Abort / Prepare yet */
	TXN_HELD_PREPARING, /* between Begin Prepare and Prepare */
	TXN_HELD_PREPARED,  /* prepared (Prepare or Stream Prepare), awaiting Commit/Rollback Prepared */
} txn_held_kind;

/* A transaction held in a spill file. */
typedef struct txn_held {
	uint32_t xid;
	txn_held_kind kind;
	/* A write or truncate failed. The file may be incomplete and must never be replayed. */
	bool broken;
	uint64_t size;	    /* logical file size, including bytes still in the write buffer */
	uint32_t positions; /* the handler's positions of its changes (txn_info.tx_index) */
	char *gid;	    /* prepared only */
	char *origin;	    /* from an Origin message inside the transaction, or NULL */
	pgo_lsn prepare_lsn;
	/* Streamed only. The first offset of each subtransaction, in order of first appearance. */
	txn_subxact *subs;
	size_t nsubs, capsubs;
	uint32_t sub_last; /* the xid of the last message, which skips the lookup for runs of one xid */
} txn_held;

typedef enum txn_state {
	TXN_IDLE,
	TXN_PLAIN,     /* between Begin and Commit */
	TXN_PREPARING, /* between Begin Prepare and Prepare */
} txn_state;

struct txn_assembler {
	char *dir;
	pgo_options opt;
	pgo_relcache *rc;
	txn_handler h;
	/* pgo_msg holds two full tuples (about 100 KB). There is one on the heap, reused for every
	 * message. */
	pgo_msg *msg;
	buf hold; /* the handler's record for the held change being processed */

	txn_state state;
	bool in_stream;
	txn_info info; /* the plain transaction being passed through, or the one being replayed */
	buf origin;    /* info.origin points here when set */

	/* The one open spill file. It is cur's, during a stream block or Begin Prepare ... Prepare. At most
	 * one file is open at a time, so memory does not grow with the number of held transactions. */
	txn_held *cur;
	int fd;
	uint64_t flushed; /* bytes of cur's file on disk. The rest of cur->size is in io. */
	uint8_t *io;	  /* TXN_IO_SIZE bytes */
	size_t iolen;	  /* bytes buffered when writing, bytes loaded when reading */
	size_t iopos;	  /* bytes of io consumed when reading */
	uint8_t *rec;	  /* one record's payload in replay. It grows only to the largest record. */
	size_t reccap;

	txn_held **held;
	size_t nheld, capheld;
	uint64_t aborted;
	char path[PATH_MAX];
};

/* ---- spill file names ---- */

static const char *spill_path(txn_assembler *a, uint32_t xid)
{
	snprintf(a->path, sizeof(a->path), "%s/txn-%" PRIu32 ".spill", a->dir, xid);
	return a->path;
}

/* True for the names spill_path() makes, "txn-", 1 to 10 digits, ".spill". */
static bool spill_name(const char *name)
{
	size_t digits = 0;
	if (strncmp(name, "txn-", 4) != 0)
		return false;
	for (name += 4; *name >= '0' && *name <= '9'; name++)
		digits++;
	return digits >= 1 && digits <= 10 && strcmp(name, ".spill") == 0;
}

static bool io_error(txn_assembler *a, uint32_t xid, const char *op, char *err, size_t errlen)
{
	int e = errno;
	return util_errf(err, errlen, "spill file %s: %s: %s", spill_path(a, xid), op, strerror(e));
}

/* ---- held transactions ---- */

static txn_held *held_find(const txn_assembler *a, uint32_t xid)
{
	for (size_t i = 0; i < a->nheld; i++)
		if (a->held[i]->xid == xid)
			return a->held[i];
	return NULL;
}

static txn_held *held_add(txn_assembler *a, uint32_t xid, txn_held_kind kind)
{
	if (a->nheld == a->capheld) {
		a->capheld = a->capheld ? a->capheld * 2 : 8;
		a->held = util_xrealloc(a->held, a->capheld * sizeof(*a->held));
	}
	txn_held *t = util_xcalloc(1, sizeof(*t));
	t->xid = xid;
	t->kind = kind;
	a->held[a->nheld++] = t;
	return t;
}

static void held_forget(txn_assembler *a, txn_held *t)
{
	for (size_t i = 0; i < a->nheld; i++) {
		if (a->held[i] == t) {
			a->held[i] = a->held[--a->nheld];
			break;
		}
	}
	free(t->gid);
	free(t->origin);
	free(t->subs);
	free(t);
}

/* Deletes a held transaction's file and state. The file must not be open. */
static bool held_drop(txn_assembler *a, txn_held *t, char *err, size_t errlen)
{
	uint32_t xid = t->xid;
	held_forget(a, t);
	if (unlink(spill_path(a, xid)) != 0 && errno != ENOENT)
		return io_error(a, xid, "unlink", err, errlen);
	return true;
}

/* Remembers where subtransaction xid's first message goes, the way PostgreSQL's apply worker does
 * (subxact_info_add in worker.c). A run of messages of one xid is the common case. True when this is its
 * first message. */
static bool held_note_subxact(txn_held *t, uint32_t xid)
{
	if (xid == t->xid || xid == t->sub_last)
		return false;
	t->sub_last = xid;
	for (size_t i = t->nsubs; i > 0; i--)
		if (t->subs[i - 1].xid == xid)
			return false;
	if (t->nsubs == t->capsubs) {
		t->capsubs = t->capsubs ? t->capsubs * 2 : 16;
		t->subs = util_xrealloc(t->subs, t->capsubs * sizeof(*t->subs));
	}
	t->subs[t->nsubs++] = (txn_subxact){.xid = xid, .offset = t->size, .positions = t->positions};
	return true;
}

/* ---- the open spill file ---- */

static bool file_open(txn_assembler *a, txn_held *t, bool create, char *err, size_t errlen)
{
	int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
	int fd = open(spill_path(a, t->xid), flags, 0600);
	if (fd < 0) {
		t->broken = true;
		return io_error(a, t->xid, create ? "create" : "open", err, errlen);
	}
	a->fd = fd;
	a->cur = t;
	a->flushed = t->size;
	a->iolen = 0;
	return true;
}

static bool write_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (w == 0) {
			errno = ENOSPC;
			return false;
		}
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return true;
}

static bool file_flush(txn_assembler *a, char *err, size_t errlen)
{
	if (a->iolen == 0)
		return true;
	if (!write_all(a->fd, a->io, a->iolen, a->flushed)) {
		a->cur->broken = true;
		return io_error(a, a->cur->xid, "write", err, errlen);
	}
	a->flushed += a->iolen;
	a->iolen = 0;
	return true;
}

static bool file_write(txn_assembler *a, const void *p, size_t n, char *err, size_t errlen)
{
	const uint8_t *src = p;
	while (n > 0) {
		if (a->iolen == TXN_IO_SIZE && !file_flush(a, err, errlen))
			return false;
		size_t k = TXN_IO_SIZE - a->iolen;
		if (k > n)
			k = n;
		memcpy(a->io + a->iolen, src, k);
		a->iolen += k;
		a->cur->size += k;
		src += k;
		n -= k;
	}
	return true;
}

/* Flushes and closes the open file. There is no fsync, as after a crash the slot resends what was held. A
 * broken file is not flushed. It will never be replayed, and the failure was already reported. */
static bool file_close(txn_assembler *a, char *err, size_t errlen)
{
	bool ok = a->cur->broken || file_flush(a, err, errlen);
	if (close(a->fd) != 0 && ok) {
		a->cur->broken = true;
		ok = io_error(a, a->cur->xid, "close", err, errlen);
	}
	a->fd = -1;
	a->cur = NULL;
	a->iolen = 0;
	return ok;
}

/* Closes the open file without writing what is buffered, as its transaction is being discarded. */
static void file_discard(txn_assembler *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	a->cur = NULL;
	a->iolen = 0;
}

static bool call_change(txn_assembler *a, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold,
			uint32_t *positions, char *err, size_t errlen);

/* A change of the current held transaction. The handler sees it now, and its record goes to the file. */
static bool hold_change(txn_assembler *a, pgo_lsn lsn, char *err, size_t errlen)
{
	txn_held *t = a->cur;
	const pgo_msg *m = a->msg;
	uint8_t hdr[TXN_REC_HDR];
	bool savepoint = false;
	uint32_t positions = 0;

	if (t->broken)
		return util_errf(err, errlen,
				 "spill file %s: an earlier write failed, transaction %" PRIu32
				 " cannot be held",
				 spill_path(a, t->xid), t->xid);
	if (a->in_stream) {
		if (m->xid == 0)
			return util_errf(err, errlen,
					 "%s message in the stream block of transaction %" PRIu32
					 " has invalid transaction ID 0",
					 pgo_type_name(m->type), t->xid);
		savepoint = held_note_subxact(t, m->xid);
	}
	txn_info info = {
	    .xid = t->xid, .origin = t->origin, .tx_index = t->positions, .savepoint = savepoint};
	buf_reset(&a->hold);
	if (!call_change(a, &info, m, lsn, &a->hold, &positions, err, errlen))
		return false;
	t->positions += positions;
	if (a->hold.len > UINT32_MAX)
		return util_errf(err, errlen,
				 "%s record of %zu bytes in transaction %" PRIu32 " is too large to spill",
				 pgo_type_name(m->type), a->hold.len, t->xid);
	put_be32(hdr, (uint32_t)a->hold.len);
	return file_write(a, hdr, sizeof(hdr), err, errlen) &&
	       file_write(a, a->hold.data, a->hold.len, err, errlen);
}

/* ---- replay ---- */

/* Reads exactly n bytes of the file being replayed through the io buffer. */
static bool replay_read(txn_assembler *a, int fd, uint64_t *off, void *dst, size_t n, uint32_t xid, char *err,
			size_t errlen)
{
	uint8_t *p = dst;
	while (n > 0) {
		if (a->iopos == a->iolen) {
			ssize_t r = pread(fd, a->io, TXN_IO_SIZE, (off_t)*off);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				return io_error(a, xid, "read", err, errlen);
			}
			if (r == 0)
				return util_errf(
				    err, errlen,
				    "spill file %s: read: unexpected end of file at offset %" PRIu64,
				    spill_path(a, xid), *off);
			a->iolen = (size_t)r;
			a->iopos = 0;
			*off += (uint64_t)r;
		}
		size_t k = a->iolen - a->iopos;
		if (k > n)
			k = n;
		memcpy(p, a->io + a->iopos, k);
		a->iopos += k;
		p += k;
		n -= k;
	}
	return true;
}

/* Handler calls. A handler that fails without saying why still gets an error message. */
static bool handler_failed(const char *what, uint32_t xid, char *err, size_t errlen)
{
	if (err && errlen && err[0] == '\0')
		util_errf(err, errlen, "handler %s failed for transaction %" PRIu32, what, xid);
	return false;
}

static void clear_err(char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
}

static bool call_begin(txn_assembler *a, const txn_info *t, char *err, size_t errlen)
{
	clear_err(err, errlen);
	return a->h.begin(a->h.ctx, t, err, errlen) || handler_failed("begin", t->xid, err, errlen);
}

static bool call_change(txn_assembler *a, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold,
			uint32_t *positions, char *err, size_t errlen)
{
	clear_err(err, errlen);
	return a->h.change(a->h.ctx, t, m, lsn, hold, positions, err, errlen) ||
	       handler_failed("change", t ? t->xid : 0, err, errlen);
}

static bool call_commit(txn_assembler *a, const txn_info *t, char *err, size_t errlen)
{
	clear_err(err, errlen);
	return a->h.commit(a->h.ctx, t, err, errlen) || handler_failed("commit", t->xid, err, errlen);
}

/* Delivers a held transaction. It calls begin with a->info, then replay for every record in the order it
 * arrived, then commit. */
static bool replay(txn_assembler *a, txn_held *t, char *err, size_t errlen)
{
	bool ok = false;
	uint64_t off = 0, pos = 0;
	int fd;

	if (t->broken)
		return util_errf(err, errlen,
				 "spill file %s: an earlier write failed, transaction %" PRIu32
				 " cannot be replayed",
				 spill_path(a, t->xid), t->xid);
	fd = open(spill_path(a, t->xid), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return io_error(a, t->xid, "open", err, errlen);
	a->iolen = a->iopos = 0;
	a->info.origin = t->origin;
	a->info.held_bytes = t->size;
	a->info.held = true;

	if (!call_begin(a, &a->info, err, errlen))
		goto out;
	while (pos < t->size) {
		uint8_t hdr[TXN_REC_HDR];
		uint32_t len = 0;
		if (t->size - pos >= TXN_REC_HDR) {
			if (!replay_read(a, fd, &off, hdr, sizeof(hdr), t->xid, err, errlen))
				goto out;
			len = get_be32(hdr);
		}
		if (t->size - pos < TXN_REC_HDR || len > t->size - pos - TXN_REC_HDR) {
			util_errf(err, errlen, "spill file %s: corrupt record at offset %" PRIu64,
				  spill_path(a, t->xid), pos);
			goto out;
		}
		if (len > a->reccap) {
			a->reccap = len;
			a->rec = util_xrealloc(a->rec, a->reccap);
		}
		if (!replay_read(a, fd, &off, a->rec, len, t->xid, err, errlen))
			goto out;
		clear_err(err, errlen);
		if (!a->h.replay(a->h.ctx, &a->info, a->rec, len, err, errlen)) {
			handler_failed("replay", t->xid, err, errlen);
			goto out;
		}
		pos += TXN_REC_HDR + (uint64_t)len;
	}
	ok = call_commit(a, &a->info, err, errlen);
out:
	close(fd);
	a->iolen = a->iopos = 0;
	a->info = (txn_info){0};
	return ok;
}

/* A held transaction aborted. It is discarded and the handler is told. */
static bool held_abort(txn_assembler *a, txn_held *t, char *err, size_t errlen)
{
	a->aborted++;
	if (a->h.abort)
		a->h.abort(a->h.ctx, t->xid);
	return held_drop(a, t, err, errlen);
}

/* ---- message handling ---- */

/* Transaction-control messages that may only arrive between transactions and stream blocks. */
static bool expect_idle(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	if (a->in_stream)
		return util_errf(err, errlen,
				 "%s for transaction %" PRIu32
				 " inside the stream block of transaction %" PRIu32,
				 pgo_type_name(m->type), m->xid, a->cur->xid);
	if (a->state == TXN_PLAIN)
		return util_errf(err, errlen,
				 "%s for transaction %" PRIu32 " while transaction %" PRIu32
				 " is in progress",
				 pgo_type_name(m->type), m->xid, a->info.xid);
	if (a->state == TXN_PREPARING)
		return util_errf(err, errlen,
				 "%s for transaction %" PRIu32 " while prepared transaction %" PRIu32
				 " is in progress (no Prepare yet)",
				 pgo_type_name(m->type), m->xid, a->cur->xid);
	return true;
}

static bool on_begin(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	if (!expect_idle(a, err, errlen))
		return false;
	a->state = TXN_PLAIN;
	buf_reset(&a->origin);
	a->info = (txn_info){
	    .xid = m->xid,
	    .commit_lsn = m->begin.final_lsn,
	    .commit_time = m->begin.commit_time,
	};
	return call_begin(a, &a->info, err, errlen);
}

static bool on_commit(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	char got[LSN_STRLEN], want[LSN_STRLEN];
	bool ok;

	if (a->in_stream)
		return util_errf(err, errlen, "Commit inside the stream block of transaction %" PRIu32,
				 a->cur->xid);
	if (a->state == TXN_PREPARING)
		return util_errf(err, errlen,
				 "Commit inside prepared transaction %" PRIu32 " (expected Prepare)",
				 a->cur->xid);
	if (a->state != TXN_PLAIN)
		return util_errf(err, errlen, "Commit without Begin");
	if (m->commit.commit_lsn != a->info.commit_lsn) {
		util_lsn_format(m->commit.commit_lsn, got);
		util_lsn_format(a->info.commit_lsn, want);
		return util_errf(err, errlen,
				 "Commit of transaction %" PRIu32
				 " at %s does not match the final LSN %s of its Begin",
				 a->info.xid, got, want);
	}
	a->state = TXN_IDLE;
	a->info.end_lsn = m->commit.end_lsn;
	ok = call_commit(a, &a->info, err, errlen);
	buf_reset(&a->origin);
	a->info = (txn_info){0};
	return ok;
}

static bool on_stream_start(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;

	if (!expect_idle(a, err, errlen))
		return false;
	if (m->xid == 0)
		return util_errf(err, errlen, "Stream Start with invalid transaction ID 0");
	t = held_find(a, m->xid);
	if (m->stream_start.first_segment) {
		if (t)
			return util_errf(err, errlen,
					 "Stream Start (first segment) for transaction %" PRIu32
					 " that is already held",
					 m->xid);
		t = held_add(a, m->xid, TXN_HELD_STREAMED);
	} else {
		if (!t)
			return util_errf(err, errlen,
					 "Stream Start for transaction %" PRIu32
					 " whose first segment was never received",
					 m->xid);
		if (t->kind != TXN_HELD_STREAMED)
			return util_errf(err, errlen,
					 "Stream Start for transaction %" PRIu32 " that is already prepared",
					 m->xid);
		if (t->broken)
			return util_errf(err, errlen,
					 "spill file %s: an earlier write failed, transaction %" PRIu32
					 " cannot be held",
					 spill_path(a, t->xid), t->xid);
	}
	if (!file_open(a, t, m->stream_start.first_segment, err, errlen))
		return false;
	a->in_stream = true;
	return true;
}

static bool on_stream_stop(txn_assembler *a, char *err, size_t errlen)
{
	if (!a->in_stream)
		return util_errf(err, errlen, "Stream Stop outside a stream block");
	a->in_stream = false;
	return file_close(a, err, errlen);
}

/* The held streamed transaction a Stream Commit / Abort / Prepare names, into *t. One not held is an error,
 * or *t is NULL with missing_ok. */
static bool streamed(txn_assembler *a, bool missing_ok, txn_held **t, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	if (!expect_idle(a, err, errlen))
		return false;
	*t = held_find(a, m->xid);
	if (!*t)
		return missing_ok ||
		       util_errf(err, errlen, "%s for transaction %" PRIu32 " that was never streamed",
				 pgo_type_name(m->type), m->xid);
	if ((*t)->kind != TXN_HELD_STREAMED)
		return util_errf(err, errlen,
				 "%s for transaction %" PRIu32 " that is prepared, not streaming",
				 pgo_type_name(m->type), m->xid);
	return true;
}

static bool on_stream_commit(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	if (!streamed(a, false, &t, err, errlen))
		return false;
	a->info = (txn_info){
	    .xid = t->xid,
	    .commit_lsn = m->commit.commit_lsn,
	    .end_lsn = m->commit.end_lsn,
	    .commit_time = m->commit.commit_time,
	};
	return replay(a, t, err, errlen) && held_drop(a, t, err, errlen);
}

/* A subtransaction abort truncates the file back to where that subtransaction's first message went. It
 * forgets the subtransactions first seen after it, as PostgreSQL's apply worker does (stream_abort_internal
 * in worker.c). Changes reach the stream in WAL order and subtransactions nest. So until a subtransaction
 * ends, everything after its first message is its own or its descendants'. One that ended by RELEASE can only
 * abort with an ancestor. That abort record lists the released children, and each of them gets its own Stream
 * Abort (DecodeAbort). Whichever offset is lowest wins, in either order. A subtransaction with no messages is
 * not found.
 *
 * A transaction that was never streamed has nothing to discard. PostgreSQL sends such an abort. It marks a
 * top-level transaction streamed whenever it tried to stream it. It does so also when it found the
 * transaction aborted already before sending its first change. That is a concurrent abort, as when a
 * restarted slot decodes again a transaction that aborted meanwhile. So a Stream Abort can come with no
 * Stream Start before it. PostgreSQL's own apply worker ignores it too (the files it would delete are
 * missing_ok). */
static bool on_stream_abort(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	uint32_t subxid = m->stream_abort.subxid;
	txn_held *t;
	size_t i;

	if (!streamed(a, true, &t, err, errlen))
		return false;
	if (!t)
		return true;
	if (subxid == t->xid)
		return held_abort(a, t, err, errlen);
	for (i = t->nsubs; i > 0; i--)
		if (t->subs[i - 1].xid == subxid)
			break;
	if (i == 0)
		return true;
	i--;
	if (truncate(spill_path(a, t->xid), (off_t)t->subs[i].offset) != 0) {
		t->broken = true;
		return io_error(a, t->xid, "truncate", err, errlen);
	}
	t->size = t->subs[i].offset;
	t->positions = t->subs[i].positions;
	t->nsubs = i;
	t->sub_last = 0;
	clear_err(err, errlen);
	return !a->h.rollback || a->h.rollback(a->h.ctx, t->xid, t->positions, err, errlen) ||
	       handler_failed("rollback", t->xid, err, errlen);
}

static bool on_stream_prepare(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	if (!streamed(a, false, &t, err, errlen))
		return false;
	t->kind = TXN_HELD_PREPARED;
	t->gid = util_xstrdup(m->prepare.gid);
	t->prepare_lsn = m->prepare.prepare_lsn;
	free(t->subs);
	t->subs = NULL;
	t->nsubs = t->capsubs = 0;
	return true;
}

static bool on_begin_prepare(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	if (!expect_idle(a, err, errlen))
		return false;
	if (held_find(a, m->xid))
		return util_errf(err, errlen,
				 "Begin Prepare for transaction %" PRIu32 " that is already held", m->xid);
	t = held_add(a, m->xid, TXN_HELD_PREPARING);
	if (!file_open(a, t, true, err, errlen))
		return false;
	a->state = TXN_PREPARING;
	return true;
}

static bool on_prepare(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t = a->cur;
	if (a->in_stream)
		return util_errf(err, errlen, "Prepare inside the stream block of transaction %" PRIu32,
				 a->cur->xid);
	if (a->state != TXN_PREPARING)
		return util_errf(err, errlen, "Prepare for transaction %" PRIu32 " without Begin Prepare",
				 m->xid);
	if (m->xid != t->xid)
		return util_errf(err, errlen,
				 "Prepare for transaction %" PRIu32 " inside prepared transaction %" PRIu32,
				 m->xid, t->xid);
	a->state = TXN_IDLE;
	t->kind = TXN_HELD_PREPARED;
	t->gid = util_xstrdup(m->prepare.gid);
	t->prepare_lsn = m->prepare.prepare_lsn;
	return file_close(a, err, errlen);
}

/* The held prepared transaction a Commit / Rollback Prepared names, checking its GID. */
static bool prepared(txn_assembler *a, uint32_t xid, const char *gid, txn_held **out, char *err,
		     size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	*out = NULL;
	if (!expect_idle(a, err, errlen))
		return false;
	t = held_find(a, xid);
	if (!t)
		return true;
	if (t->kind != TXN_HELD_PREPARED)
		return util_errf(err, errlen, "%s for transaction %" PRIu32 " that is not prepared",
				 pgo_type_name(m->type), xid);
	if (strcmp(t->gid, gid) != 0)
		return util_errf(err, errlen,
				 "%s for transaction %" PRIu32
				 " with GID \"%s\", but it was prepared as \"%s\"",
				 pgo_type_name(m->type), xid, gid, t->gid);
	*out = t;
	return true;
}

static bool on_commit_prepared(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	if (!prepared(a, m->xid, m->commit_prepared.gid, &t, err, errlen))
		return false;
	if (!t)
		return util_errf(err, errlen,
				 "Commit Prepared for transaction %" PRIu32 " that was never prepared",
				 m->xid);
	a->info = (txn_info){
	    .xid = t->xid,
	    .commit_lsn = m->commit_prepared.commit_lsn,
	    .end_lsn = m->commit_prepared.end_lsn,
	    .commit_time = m->commit_prepared.commit_time,
	    .gid = t->gid,
	};
	return replay(a, t, err, errlen) && held_drop(a, t, err, errlen);
}

/* A Rollback Prepared for a transaction never seen is not an error. The server also sends it when the PREPARE
 * came before decoding reached a consistent point or two_phase was enabled. PostgreSQL's apply worker notes
 * so (apply_handle_rollback_prepared). Nothing is held to discard. */
static bool on_rollback_prepared(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	txn_held *t;
	if (!prepared(a, m->xid, m->rollback_prepared.gid, &t, err, errlen))
		return false;
	if (!t)
		return true;
	return held_abort(a, t, err, errlen);
}

static bool on_origin(txn_assembler *a, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	if (a->in_stream || a->state == TXN_PREPARING) {
		free(a->cur->origin);
		a->cur->origin = util_xstrdup(m->origin.name);
		return true;
	}
	if (a->state != TXN_PLAIN)
		return util_errf(err, errlen, "Origin outside a transaction");
	buf_reset(&a->origin);
	buf_puts(&a->origin, m->origin.name);
	a->info.origin = a->origin.data;
	return true;
}

/* Relation and Type are applied at once. Held changes are handled as they arrive, so each sees the schema of
 * its time. An ALTER TABLE inside a streamed transaction resends the Relation before the next change. */
static void on_schema(txn_assembler *a)
{
	const pgo_msg *m = a->msg;
	if (m->type == PGO_RELATION)
		pgo_relcache_put(a->rc, m);
	else
		pgo_relcache_put_type(a->rc, m);
}

static bool on_change(txn_assembler *a, pgo_lsn lsn, char *err, size_t errlen)
{
	const pgo_msg *m = a->msg;
	if (m->type == PGO_MESSAGE && !(m->message.flags & 1))
		return call_change(a, NULL, m, lsn, NULL, NULL, err, errlen);
	if (a->in_stream || a->state == TXN_PREPARING)
		return hold_change(a, lsn, err, errlen);
	if (a->state != TXN_PLAIN)
		return util_errf(err, errlen, "%s outside a transaction", pgo_type_name(m->type));
	return call_change(a, &a->info, m, lsn, NULL, NULL, err, errlen);
}

bool pgo_txn_feed(txn_assembler *a, const uint8_t *data, size_t len, pgo_lsn lsn, char *err, size_t errlen)
{
	if (!pgo_parse(data, len, &a->opt, a->in_stream, a->msg, err, errlen))
		return false;
	switch (a->msg->type) {
	case PGO_BEGIN:
		return on_begin(a, err, errlen);
	case PGO_COMMIT:
		return on_commit(a, err, errlen);
	case PGO_ORIGIN:
		return on_origin(a, err, errlen);
	case PGO_RELATION:
	case PGO_TYPE:
		on_schema(a);
		return true;
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE:
	case PGO_TRUNCATE:
	case PGO_MESSAGE:
		return on_change(a, lsn, err, errlen);
	case PGO_STREAM_START:
		return on_stream_start(a, err, errlen);
	case PGO_STREAM_STOP:
		return on_stream_stop(a, err, errlen);
	case PGO_STREAM_COMMIT:
		return on_stream_commit(a, err, errlen);
	case PGO_STREAM_ABORT:
		return on_stream_abort(a, err, errlen);
	case PGO_STREAM_PREPARE:
		return on_stream_prepare(a, err, errlen);
	case PGO_BEGIN_PREPARE:
		return on_begin_prepare(a, err, errlen);
	case PGO_PREPARE:
		return on_prepare(a, err, errlen);
	case PGO_COMMIT_PREPARED:
		return on_commit_prepared(a, err, errlen);
	case PGO_ROLLBACK_PREPARED:
		return on_rollback_prepared(a, err, errlen);
	}
	return util_errf(err, errlen, "unexpected %s message", pgo_type_name(a->msg->type));
}

/* ---- lifecycle ---- */

/* Removes spill files a previous run left. The slot resends their transactions. */
static bool remove_stale(const char *dir, char *err, size_t errlen)
{
	bool ok = false;
	struct dirent *e;
	DIR *d = opendir(dir);
	if (!d)
		return util_errf(err, errlen, "spill directory %s: %s", dir, strerror(errno));
	while ((errno = 0, e = readdir(d)) != NULL) {
		if (!spill_name(e->d_name))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT) {
			util_errf(err, errlen, "spill file %s/%s: unlink: %s", dir, e->d_name,
				  strerror(errno));
			goto out;
		}
	}
	if (errno != 0) {
		util_errf(err, errlen, "spill directory %s: readdir: %s", dir, strerror(errno));
		goto out;
	}
	ok = true;
out:
	closedir(d);
	return ok;
}

txn_assembler *pgo_txn_new(const char *spill_dir, const pgo_options *opt, pgo_relcache *rc,
			   const txn_handler *h, char *err, size_t errlen)
{
	txn_assembler *a;
	if (strlen(spill_dir) + sizeof("/txn-4294967295.spill") > PATH_MAX) {
		util_errf(err, errlen, "spill directory %s: path too long", spill_dir);
		return NULL;
	}
	if (!remove_stale(spill_dir, err, errlen))
		return NULL;
	a = util_xcalloc(1, sizeof(*a));
	a->dir = util_xstrdup(spill_dir);
	a->opt = *opt;
	a->rc = rc;
	a->h = *h;
	a->msg = util_xmalloc(sizeof(*a->msg));
	a->io = util_xmalloc(TXN_IO_SIZE);
	a->fd = -1;
	return a;
}

/* Forgets held transactions and stream state. */
static void reset(txn_assembler *a)
{
	file_discard(a);
	while (a->nheld > 0) {
		uint32_t xid = a->held[a->nheld - 1]->xid;
		held_forget(a, a->held[a->nheld - 1]);
		/* Best effort. A file left behind is removed by the next pgo_txn_new, or truncated if its xid
		 * is held again. */
		(void)unlink(spill_path(a, xid));
	}
	a->state = TXN_IDLE;
	a->in_stream = false;
	a->info = (txn_info){0};
	buf_reset(&a->origin);
}

void pgo_txn_free(txn_assembler *a)
{
	if (!a)
		return;
	reset(a);
	free(a->held);
	buf_free(&a->hold);
	free(a->dir);
	free(a->msg);
	free(a->io);
	free(a->rec);
	buf_free(&a->origin);
	free(a);
}

bool pgo_txn_in_progress(const txn_assembler *a)
{
	return a->in_stream || a->state != TXN_IDLE;
}

pgo_lsn pgo_txn_oldest_prepared(const txn_assembler *a)
{
	pgo_lsn oldest = 0;
	for (size_t i = 0; i < a->nheld; i++) {
		const txn_held *t = a->held[i];
		if (t->kind == TXN_HELD_PREPARED && (oldest == 0 || t->prepare_lsn < oldest))
			oldest = t->prepare_lsn;
	}
	return oldest;
}

txn_stats pgo_txn_get_stats(const txn_assembler *a)
{
	txn_stats s = {.aborted = a->aborted};
	for (size_t i = 0; i < a->nheld; i++) {
		const txn_held *t = a->held[i];
		if (t->kind == TXN_HELD_STREAMED)
			s.streamed_open++;
		else
			s.prepared_open++;
		s.spilled_bytes += t->size;
	}
	return s;
}
