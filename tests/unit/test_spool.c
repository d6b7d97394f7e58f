/* test_spool.c: unit tests for the spool. Each test works in its own directory under a mkdtemp
 * directory, reopens spools to check recovery and damages files by hand (torn tails, flipped
 * bytes, torn cursor slots) to check what socket_spool_open cuts and reports. */
#include "sinks/socket/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#define HDR 44 /* record header bytes, as spool.c writes them */

static char tmp[64];
static char err[512];

static const char *dir_for(const char *name)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	return path;
}

static spool *sp_open(const char *dir, const spool_limits *lim, spool_recovery *rec)
{
	spool_limits none = {0};
	spool_recovery r;
	err[0] = '\0';
	spool *s = socket_spool_open(dir, lim ? lim : &none, rec ? rec : &r, err, sizeof(err));
	if (!s)
		fprintf(stderr, "spool_open %s: %s\n", dir, err);
	return s;
}

/* The event at offset o: fields derived from o so that any read can be checked exactly. */
static size_t payload_of(uint64_t o, char *out)
{
	return (size_t)sprintf(out, "event-%" PRIu64 "%.*s", o, (int)(o % 13), "xxxxxxxxxxxxx");
}

static uint64_t lsn_of(uint64_t o)
{
	return 0x1000000 + o * 16;
}
static uint32_t tx_of(uint64_t o)
{
	return (uint32_t)(o % 5);
}
static uint32_t key_of(uint64_t o)
{
	return (uint32_t)(o * 2654435761u);
}
static int64_t time_of(uint64_t o)
{
	return 1700000000000 + (int64_t)o;
}

/* Appends events from..to (checking the offsets the spool hands out). */
static void add(spool *s, uint64_t from, uint64_t to)
{
	for (uint64_t o = from; o <= to; o++) {
		char p[64];
		size_t n = payload_of(o, p);
		uint64_t got = 0;
		CHECK(socket_spool_append(s, lsn_of(o), tx_of(o), key_of(o), p, n, time_of(o), &got, err,
					  sizeof(err)));
		CHECK_INT(got, o);
	}
}

static void commit_sync(spool *s)
{
	CHECK(socket_spool_commit(s, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
}

/* Reads offset o into r; false (a failed check, with the reason) if it cannot. */
static bool read_ok(spool *s, uint64_t o, spool_record *r)
{
	bool ok = socket_spool_read(s, o, r, err, sizeof(err));
	CHECK(ok);
	if (!ok)
		fprintf(stderr, "  read %" PRIu64 ": %s\n", o, err);
	return ok;
}

/* Reads offset and checks every field. */
static void check_read(spool *s, uint64_t o)
{
	spool_record r;
	char p[64];
	size_t n = payload_of(o, p);
	if (!read_ok(s, o, &r))
		return;
	CHECK_INT(r.offset, o);
	CHECK_INT(r.commit_lsn, lsn_of(o));
	CHECK_INT(r.tx_index, tx_of(o));
	CHECK_INT(r.key_hash, key_of(o));
	CHECK_INT(r.time_ms, time_of(o));
	CHECK_INT(r.len, n);
	CHECK(r.len == n && memcmp(r.data, p, n) == 0);
}

static void check_range(spool *s, uint64_t from, uint64_t to)
{
	for (uint64_t o = from; o <= to; o++)
		check_read(s, o);
}

static uint64_t rec_bytes(uint64_t o)
{
	char p[64];
	return HDR + payload_of(o, p);
}

static void check_last_id(spool *s, uint64_t o)
{
	uint64_t lsn = 0;
	uint32_t tx = 99;
	CHECK(socket_spool_last_id(s, &lsn, &tx));
	CHECK_INT(lsn, lsn_of(o));
	CHECK_INT(tx, tx_of(o));
}

static const char *seg_file(const char *dir, uint64_t first)
{
	static char path[512];
	snprintf(path, sizeof(path), "%s/%020" PRIu64 ".seg", dir, first);
	return path;
}

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

static int count_segs(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d)) != NULL;)
		n += strstr(e->d_name, ".seg") != NULL;
	if (d)
		closedir(d);
	return n;
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t b = 0;
	CHECK(pread(fd, &b, 1, at) == 1);
	b ^= 0x40;
	CHECK(pwrite(fd, &b, 1, at) == 1);
	close(fd);
}

/* ---- tests ---- */

static void test_round_trip(void)
{
	const char *dir = dir_for("round");
	spool *s = sp_open(dir, NULL, NULL);
	CHECK_INT(socket_spool_head(s), 0);
	CHECK_INT(socket_spool_first(s), 1);
	CHECK_INT(socket_spool_acked(s), 0);
	uint64_t lsn;
	uint32_t tx;
	CHECK(!socket_spool_last_id(s, &lsn, &tx));
	add(s, 1, 3);
	uint64_t off = 0;
	CHECK(socket_spool_append(s, 77, 3, 0, "", 0, 5, &off, err, sizeof(err))); /* an empty event */
	CHECK_INT(off, 4);
	commit_sync(s);
	CHECK_INT(socket_spool_head(s), 4);
	check_range(s, 1, 3);
	spool_record r;
	CHECK(socket_spool_read(s, 4, &r, err, sizeof(err)));
	CHECK_INT(r.offset, 4);
	CHECK_INT(r.commit_lsn, 77);
	CHECK_INT(r.tx_index, 3);
	CHECK_INT(r.key_hash, 0);
	CHECK_INT(r.time_ms, 5);
	CHECK_INT(r.len, 0);
	spool_stats st = socket_spool_get_stats(s);
	CHECK_INT(st.events, 4);
	CHECK_INT(st.bytes, rec_bytes(1) + rec_bytes(2) + rec_bytes(3) + HDR + HDR);
	CHECK_INT(st.bytes, file_size(seg_file(dir, 1)));
	CHECK_INT(st.segments, 1);
	CHECK_INT(st.dropped, 0);
	CHECK_INT(st.oldest_ms, time_of(1));
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

static void test_visibility(void)
{
	const char *dir = dir_for("visible");
	spool *s = sp_open(dir, NULL, NULL);
	spool_record r;
	add(s, 1, 2);
	CHECK(!socket_spool_read(s, 1, &r, err, sizeof(err)));
	char want[512];
	snprintf(want, sizeof(want), "spool %s: offset 1 is not readable (retained and committed: 1..0)",
		 dir);
	CHECK_STR(err, want);
	CHECK(socket_spool_sync(s, err, sizeof(err))); /* durable but not committed */
	CHECK_INT(socket_spool_head(s), 0);
	CHECK(socket_spool_commit(s, err, sizeof(err))); /* committed but not durable */
	CHECK_INT(socket_spool_head(s), 0);
	CHECK(!socket_spool_read(s, 2, &r, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 2);
	check_range(s, 1, 2);
	CHECK(!socket_spool_read(s, 3, &r, err, sizeof(err)));
	CHECK(!socket_spool_read(s, 0, &r, err, sizeof(err)));
	/* a commit with nothing appended writes no marker */
	off_t size = file_size(seg_file(dir, 1));
	commit_sync(s);
	CHECK_INT(file_size(seg_file(dir, 1)), size);
	add(s, 3, 3);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 2);
	CHECK(!socket_spool_read(s, 3, &r, err, sizeof(err)));
	commit_sync(s);
	check_read(s, 3); /* just synced, read right after */
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* The group commit in steps (fsynced off the spool's thread): the events committed when it began
 * become visible at its end, not those appended, committed or rolled into a new segment meanwhile;
 * a failed fsync of the write segment leaves the spool refusing writes. */
static void test_sync_in_steps(void)
{
	const char *dir = dir_for("steps");
	spool_limits lim = {.segment_bytes = 4 * rec_bytes(9)};
	spool *s = sp_open(dir, &lim, NULL);
	CHECK(socket_spool_sync(s, err, sizeof(err))); /* the new cursor file */
	spool_record r;
	add(s, 1, 2);
	CHECK(socket_spool_commit(s, err, sizeof(err)));
	spool_sync_job j;
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS | SPOOL_SYNC_CURSOR, err, sizeof(err)));
	CHECK(j.fd[0] >= 0);
	CHECK_INT(j.fd[1], -1); /* the cursor did not move */
	CHECK_INT(j.head, 2);
	add(s, 3, 12); /* rolls over to new segments while the job holds the first one */
	CHECK(count_segs(dir) > 1);
	CHECK(socket_spool_commit(s, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 0);
	CHECK(!socket_spool_read(s, 1, &r, err, sizeof(err)));
	socket_spool_sync_run(&j);
	CHECK_INT(j.fd[0], -1);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 2);
	check_range(s, 1, 2);
	CHECK(!socket_spool_read(s, 3, &r, err, sizeof(err)));
	CHECK(socket_spool_set_acked(s, 1, err, sizeof(err)));
	CHECK(socket_spool_cursor_pending(s));
	/* the events alone: the cursor stays to be fsynced */
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS, err, sizeof(err)));
	CHECK(j.fd[0] >= 0);
	CHECK_INT(j.fd[1], -1);
	CHECK(socket_spool_cursor_pending(s));
	socket_spool_sync_run(&j);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 12);
	/* the cursor alone: it makes nothing visible */
	add(s, 13, 13);
	CHECK(socket_spool_commit(s, err, sizeof(err)));
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_CURSOR, err, sizeof(err)));
	CHECK_INT(j.fd[0], -1);
	CHECK(j.fd[1] >= 0);
	CHECK_INT(j.head, 0);
	CHECK(!socket_spool_cursor_pending(s));
	socket_spool_sync_run(&j);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 12);
	CHECK(!socket_spool_read(s, 13, &r, err, sizeof(err)));
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS | SPOOL_SYNC_CURSOR, err, sizeof(err)));
	CHECK_INT(j.fd[1], -1); /* the cursor is durable already */
	CHECK_INT(j.head, 13);
	socket_spool_sync_run(&j);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 13);
	check_range(s, 2, 13);
	add(s, 14, 14);
	CHECK(socket_spool_commit(s, err, sizeof(err)));
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS | SPOOL_SYNC_CURSOR, err, sizeof(err)));
	socket_spool_sync_run(&j);
	j.error[0] = EIO;
	CHECK(!socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 13);
	uint64_t off;
	CHECK(!socket_spool_append(s, 1, 0, 0, "x", 1, 0, &off, err, sizeof(err)) &&
	      strstr(err, "cannot fsync its write segment") && strstr(err, "must be reopened"));
	socket_spool_close(s);
	s = sp_open(dir, &lim, NULL); /* what was written is there: only its fsync is in doubt */
	CHECK_INT(socket_spool_head(s), 14);
	CHECK_INT(socket_spool_acked(s), 1);
	check_range(s, 2, 14);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

static void test_reopen(void)
{
	const char *dir = dir_for("reopen");
	spool *s = sp_open(dir, NULL, NULL);
	add(s, 1, 3);
	commit_sync(s);
	add(s, 4, 5);
	commit_sync(s);
	socket_spool_close(s);
	spool_recovery rec = {9, 9};
	s = sp_open(dir, NULL, &rec);
	CHECK_INT(rec.torn_bytes, 0);
	CHECK_INT(rec.uncommitted, 0);
	CHECK_INT(socket_spool_head(s), 5);
	CHECK_INT(socket_spool_first(s), 1);
	check_last_id(s, 5);
	check_range(s, 1, 5);
	add(s, 6, 6);
	commit_sync(s);
	check_range(s, 1, 6);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* Three transactions of one event each: E1 M E2 M E3 M; then damage to the tail. */
static void test_torn_tail(void)
{
	const uint64_t e3 = rec_bytes(1) + rec_bytes(2) + 2 * HDR; /* where E3 starts */
	const uint64_t end = e3 + rec_bytes(3) + HDR;
	static const struct {
		const char *name;
		int how;	    /* 0: truncate to at, 1: flip the byte at at, 2: append at zero bytes */
		int64_t at_from_e3; /* at, relative to E3's start (how 2: a count) */
		uint64_t torn, head, next, uncommitted;
	} cases[] = {
	    {"marker cut", 0, 0, 0, 2, 3, 1}, /* at filled in below: end - 10; E3 cut too */
	    {"payload flipped", 1, HDR + 2, 0, 2, 3, 0},
	    {"header cut", 0, 20, 20, 2, 3, 0},
	    {"zero tail", 2, 7, 7, 3, 4, 0},
	    {"crc flipped", 1, 5, 0, 2, 3, 0},
	    {"offset flipped", 1, 13, 0, 2, 3, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *dir = dir_for(cases[i].name);
		spool *s = sp_open(dir, NULL, NULL);
		for (uint64_t o = 1; o <= 3; o++) {
			add(s, o, o);
			commit_sync(s);
		}
		socket_spool_close(s);
		const char *path = seg_file(dir, 1);
		CHECK_INT(file_size(path), end);
		uint64_t torn = cases[i].torn;
		if (i == 0) {
			CHECK(truncate(path, (off_t)(end - 10)) == 0);
			torn = HDR - 10;
		} else if (cases[i].how == 0) {
			CHECK(truncate(path, (off_t)e3 + cases[i].at_from_e3) == 0);
		} else if (cases[i].how == 1) {
			flip_byte(path, (off_t)e3 + cases[i].at_from_e3);
			torn = end - e3;
		} else {
			CHECK(truncate(path, (off_t)end + cases[i].at_from_e3) == 0);
		}
		spool_recovery rec;
		s = sp_open(dir, NULL, &rec);
		if (!s) {
			test_failed++;
			continue;
		}
		CHECK_INT(rec.torn_bytes, torn);
		CHECK_INT(rec.uncommitted, cases[i].uncommitted);
		CHECK_INT(socket_spool_head(s), cases[i].head);
		check_range(s, 1, cases[i].head);
		check_last_id(s, cases[i].next - 1);
		uint64_t next = cases[i].next;
		add(s, next, next + 1);
		commit_sync(s);
		check_range(s, 1, next + 1);
		socket_spool_close(s);
		s = sp_open(dir, NULL, &rec); /* the repaired file is clean */
		CHECK_INT(rec.torn_bytes, 0);
		CHECK_INT(socket_spool_head(s), next + 1);
		socket_spool_close(s);
		CHECK(socket_spool_destroy(dir, err, sizeof(err)));
	}
}

static void test_uncommitted(void)
{
	const char *dir = dir_for("uncommitted");
	spool *s = sp_open(dir, NULL, NULL);
	add(s, 1, 2);
	commit_sync(s);
	add(s, 3, 5);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	socket_spool_close(s);
	spool_recovery rec;
	s = sp_open(dir, NULL, &rec);
	CHECK_INT(rec.torn_bytes, 0);
	CHECK_INT(rec.uncommitted, 3); /* cut off */
	CHECK_INT(socket_spool_head(s), 2);
	check_last_id(s, 2);
	spool_record r;
	CHECK(!socket_spool_read(s, 3, &r, err, sizeof(err)));
	add(s, 3, 6); /* the transaction, resent whole by the slot, at the same offsets */
	commit_sync(s);
	CHECK_INT(socket_spool_head(s), 6);
	check_range(s, 1, 6);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* Many small segments: reads across them in every order, and recovery when the write segment has
 * no commit marker of its own. */
static void test_rollover_and_random_reads(void)
{
	const char *dir = dir_for("rollover");
	spool_limits lim = {.segment_bytes = 2000};
	spool *s = sp_open(dir, &lim, NULL);
	const uint64_t n = 1000;
	for (uint64_t o = 1; o <= n; o += 10) {
		add(s, o, o + 9);
		commit_sync(s);
	}
	spool_stats st = socket_spool_get_stats(s);
	CHECK(st.segments > 20);
	CHECK_INT(st.segments, count_segs(dir));
	CHECK_INT(st.events, n);
	check_range(s, 1, n);
	for (uint64_t o = n; o >= 1; o--)
		check_read(s, o);
	uint64_t o = 1;
	for (int i = 0; i < 3000; i++) {
		o = (o * 48271) % 2147483647;
		check_read(s, 1 + o % n);
	}
	/* a transaction spanning a rollover, cut short by a crash */
	add(s, n + 1, n + 60);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	socket_spool_close(s);
	spool_recovery rec;
	s = sp_open(dir, &lim, &rec);
	CHECK_INT(rec.uncommitted, 60); /* cut off, with the segments it had started */
	CHECK_INT(socket_spool_head(s), n);
	check_last_id(s, n);
	CHECK_INT(socket_spool_get_stats(s).segments, count_segs(dir));
	check_read(s, 1);
	check_read(s, n);
	add(s, n + 1, n + 1);
	commit_sync(s);
	socket_spool_close(s);
	/* an empty write segment (a crash right after creating it): the head and the last id come
	 * from the segment before */
	int fd = open(seg_file(dir, n + 2), O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	close(fd);
	s = sp_open(dir, &lim, &rec);
	CHECK_INT(rec.uncommitted, 0);
	CHECK_INT(socket_spool_head(s), n + 1);
	check_last_id(s, n + 1);
	add(s, n + 2, n + 2);
	commit_sync(s);
	check_range(s, n - 5, n + 2);
	CHECK_INT(socket_spool_get_stats(s).events, n + 2);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

static void test_bad_names(void)
{
	const char *dir = dir_for("names");
	spool *s = sp_open(dir, NULL, NULL);
	add(s, 1, 1);
	commit_sync(s);
	socket_spool_close(s);
	char path[512];
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	FILE *f = fopen(path, "w");
	fclose(f);
	s = sp_open(dir, NULL, NULL); /* unrelated files are ignored */
	CHECK(s != NULL);
	socket_spool_close(s);
	snprintf(path, sizeof(path), "%s/12.seg", dir);
	f = fopen(path, "w");
	fclose(f);
	spool_recovery rec;
	CHECK(socket_spool_open(dir, &(spool_limits){0}, &rec, err, sizeof(err)) == NULL);
	char want[512];
	snprintf(want, sizeof(want),
		 "spool %s: malformed segment name \"12.seg\" (want 20 digits, from 1, then .seg)", dir);
	CHECK_STR(err, want);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
	CHECK(socket_spool_destroy(dir, err, sizeof(err))); /* already gone */
	CHECK(access(dir, F_OK) != 0);
}

static void check_cursor(const char *dir, uint64_t acked)
{
	spool *s = sp_open(dir, NULL, NULL);
	CHECK_INT(socket_spool_acked(s), acked);
	socket_spool_close(s);
}

/* Flips a byte in the cursor slot with the higher sequence number (the newer one). */
static void tear_newest_slot(const char *dir)
{
	char path[512];
	uint8_t d[128];
	snprintf(path, sizeof(path), "%s/cursor", dir);
	int fd = open(path, O_RDONLY);
	CHECK(pread(fd, d, sizeof(d), 0) == (ssize_t)sizeof(d));
	close(fd);
	uint64_t a = 0, b = 0;
	memcpy(&a, d, 8); /* little-endian hosts only, as the tests run */
	memcpy(&b, d + 64, 8);
	flip_byte(path, a > b ? 8 : 64 + 8);
}

static void test_acked(void)
{
	const char *dir = dir_for("acked");
	spool *s = sp_open(dir, NULL, NULL);
	add(s, 1, 5);
	commit_sync(s);
	CHECK(socket_spool_set_acked(s, 2, err, sizeof(err)));
	CHECK(socket_spool_set_acked(s, 3, err, sizeof(err)));
	CHECK(socket_spool_set_acked(s, 1, err, sizeof(err))); /* never back */
	CHECK_INT(socket_spool_acked(s), 3);
	CHECK(!socket_spool_set_acked(s, 6, err, sizeof(err)));
	char want[512];
	snprintf(want, sizeof(want), "spool %s: cannot acknowledge 6 beyond the head 5", dir);
	CHECK_STR(err, want);
	socket_spool_close(s); /* no socket_spool_sync: the written cursor survives a process exit */
	check_cursor(dir, 3);
	tear_newest_slot(dir);
	check_cursor(dir, 2); /* the other slot */
	s = sp_open(dir, NULL, NULL);
	CHECK(socket_spool_set_acked(s, 4, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	socket_spool_close(s);
	check_cursor(dir, 4);
	char path[512];
	snprintf(path, sizeof(path), "%s/cursor", dir);
	flip_byte(path, 8);
	flip_byte(path, 64 + 8);
	check_cursor(dir, 0); /* both torn: from the oldest segment */
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

static void test_full(void)
{
	static const struct {
		const char *name;
		spool_limits lim;
	} cases[] = {
	    {"full events", {.max_events = 3}},
	    {"full bytes", {.max_bytes = 3 * HDR + 8 + 9 + 10}}, /* events 1..3 exactly */
	    {"full age", {.max_age_ms = 100}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *dir = dir_for(cases[i].name);
		spool *s = sp_open(dir, &cases[i].lim, NULL);
		int64_t t0 = time_of(1);
		CHECK(!socket_spool_full(s, t0 + 1000));
		add(s, 1, 2);
		CHECK(!socket_spool_full(s, t0 + 99));
		add(s, 3, 3); /* uncommitted events count */
		/* events: 3 >= 3; bytes: 3 records; age: from event 1 */
		bool want = i != 2;
		CHECK_INT(socket_spool_full(s, t0 + 99), want);
		CHECK_INT(socket_spool_full(s, t0 + 100), true);
		commit_sync(s);
		CHECK(socket_spool_set_acked(s, 1, err, sizeof(err)));
		CHECK_INT(socket_spool_full(s, t0 + 100), false); /* oldest unacked is event 2, 99 ms old */
		CHECK_INT(socket_spool_full(s, t0 + 101), i == 2);
		CHECK(socket_spool_set_acked(s, 3, err, sizeof(err)));
		CHECK_INT(socket_spool_full(s, t0 + 10000), false);
		add(s, 4, 4);
		CHECK_INT(socket_spool_full(s, time_of(4) + 100), i == 2);
		socket_spool_close(s);
		CHECK(socket_spool_destroy(dir, err, sizeof(err)));
	}
}

static void test_trim(void)
{
	const char *dir = dir_for("trim");
	spool_limits lim = {.max_events = 5, .drop_oldest = true};
	spool *s = sp_open(dir, &lim, NULL);
	add(s, 1, 10);
	commit_sync(s);
	CHECK(socket_spool_set_acked(s, 2, err, sizeof(err)));
	uint64_t from = 9, to = 9;
	CHECK(socket_spool_trim(s, time_of(10), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 1);
	CHECK_INT(to, 5);
	CHECK_INT(socket_spool_first(s), 6);
	CHECK_INT(socket_spool_acked(s), 5);
	spool_stats st = socket_spool_get_stats(s);
	CHECK_INT(st.dropped, 5);
	CHECK_INT(st.events, 5);
	CHECK_INT(st.oldest_ms, time_of(6));
	spool_record r;
	CHECK(!socket_spool_read(s, 5, &r, err, sizeof(err)));
	check_range(s, 6, 10);
	CHECK(socket_spool_trim(s, time_of(10), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 0); /* nothing more */
	CHECK_INT(to, 0);
	socket_spool_close(s);

	s = sp_open(dir, &lim, NULL);
	CHECK_INT(socket_spool_first(s), 6);
	CHECK_INT(socket_spool_acked(s), 5);
	CHECK_INT(socket_spool_get_stats(s).dropped, 5);
	CHECK_INT(socket_spool_get_stats(s).oldest_ms, time_of(6));
	/* uncommitted events are not discarded, even beyond the limit */
	add(s, 11, 18);
	CHECK(socket_spool_trim(s, time_of(18), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 6);
	CHECK_INT(to, 10);
	CHECK_INT(socket_spool_first(s), 11);
	CHECK_INT(socket_spool_get_stats(s).events, 0);
	CHECK_INT(socket_spool_get_stats(s).dropped, 10);
	commit_sync(s);
	CHECK(socket_spool_trim(s, time_of(18), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 11);
	CHECK_INT(to, 13);
	check_range(s, 14, 18);

	/* by age: events older than 3 ms at time_of(18) go, 15 stays (exactly 3 ms old) */
	lim = (spool_limits){.max_age_ms = 3, .drop_oldest = true};
	socket_spool_set_limits(s, &lim);
	CHECK(socket_spool_trim(s, time_of(18), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 14);
	CHECK_INT(to, 14);
	CHECK_INT(socket_spool_get_stats(s).oldest_ms, time_of(15));

	/* by bytes: keep what fits, from event 17 on */
	lim = (spool_limits){.max_bytes = rec_bytes(17) + rec_bytes(18) + HDR, .drop_oldest = true};
	socket_spool_set_limits(s, &lim);
	CHECK(socket_spool_trim(s, time_of(18), UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(from, 15);
	CHECK_INT(to, 16);
	CHECK_INT(socket_spool_first(s), 17);
	CHECK_INT(socket_spool_get_stats(s).dropped, 16);
	check_range(s, 17, 18);
	socket_spool_close(s);
	s = sp_open(dir, &lim, NULL);
	CHECK_INT(socket_spool_first(s), 17);
	CHECK_INT(socket_spool_acked(s), 16);
	CHECK_INT(socket_spool_get_stats(s).dropped, 16);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

static void test_delete_acked(void)
{
	const char *dir = dir_for("delete");
	spool_limits lim = {.segment_bytes = 500}; /* block mode: nothing is discarded */
	spool *s = sp_open(dir, &lim, NULL);
	for (uint64_t o = 1; o <= 100; o += 4) {
		add(s, o, o + 3);
		commit_sync(s);
	}
	int segs = count_segs(dir);
	CHECK(segs > 10);
	uint64_t from, to;
	CHECK(socket_spool_trim(s, 0, UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(count_segs(dir), segs); /* nothing acked */
	CHECK(socket_spool_set_acked(s, 50, err, sizeof(err)));
	/* a consumer reading again from 20: the segment holding 20 and those after it stay; the
	 * files of the others go at the next sync of the cursor (after its fsync), not on the loop */
	CHECK(socket_spool_trim(s, 0, 20, &from, &to, err, sizeof(err)));
	uint64_t kept = socket_spool_first(s);
	CHECK(kept <= 20 && kept > 10);
	CHECK_INT(count_segs(dir), segs);
	CHECK(socket_spool_cursor_pending(s));
	spool_sync_job j;
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_EVENTS, err, sizeof(err))); /* events only: not yet */
	socket_spool_sync_run(&j);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK_INT(count_segs(dir), segs);
	CHECK(socket_spool_sync_begin(s, &j, SPOOL_SYNC_CURSOR, err, sizeof(err)));
	CHECK(!socket_spool_cursor_pending(s));
	socket_spool_sync_run(&j);
	CHECK(socket_spool_sync_end(s, &j, err, sizeof(err)));
	CHECK(count_segs(dir) < segs);
	check_range(s, kept, 100);
	CHECK(socket_spool_trim(s, 0, UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(from, 0);
	CHECK_INT(socket_spool_get_stats(s).dropped, 0);
	/* the oldest remaining segment holds 51, and first is where it starts */
	uint64_t first = socket_spool_first(s);
	CHECK(first <= 51 && first > 40);
	CHECK(access(seg_file(dir, first), F_OK) == 0);
	CHECK_INT(socket_spool_get_stats(s).segments, count_segs(dir));
	CHECK(count_segs(dir) < segs);
	CHECK_INT(socket_spool_get_stats(s).events, 100 - first + 1);
	check_range(s, first, 100);
	socket_spool_close(s);
	s = sp_open(dir, &lim, NULL);
	CHECK_INT(socket_spool_first(s), first);
	CHECK_INT(socket_spool_acked(s), 50);
	check_range(s, first, 100);
	/* everything acked: the write segment stays */
	CHECK(socket_spool_set_acked(s, 100, err, sizeof(err)));
	CHECK(socket_spool_trim(s, 0, UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK_INT(socket_spool_get_stats(s).segments, 1);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(count_segs(dir), 1);
	add(s, 101, 101);
	commit_sync(s);
	check_read(s, 101);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* Events larger than the read-ahead window and a write buffer that is written before socket_spool_sync. */
static void test_large(void)
{
	const char *dir = dir_for("large");
	spool *s = sp_open(dir, NULL, NULL);
	const size_t n = 400000;
	uint8_t *p = malloc(n);
	for (uint64_t o = 1; o <= 4; o++) {
		memset(p, (int)o, n);
		uint64_t got;
		CHECK(socket_spool_append(s, o, 0, 0, p, n, 0, &got, err, sizeof(err)));
	}
	CHECK(file_size(seg_file(dir, 1)) >= (off_t)(3 * (HDR + n))); /* written early, not yet durable */
	CHECK_INT(socket_spool_head(s), 0);
	commit_sync(s);
	for (uint64_t o = 4; o >= 1; o--) {
		spool_record r;
		memset(p, (int)o, n);
		CHECK(socket_spool_read(s, o, &r, err, sizeof(err)));
		CHECK(r.len == n && memcmp(r.data, p, n) == 0);
	}
	free(p);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* Delivery counts: noted, saved, back after a reopen (also after a kill: nothing is fsynced), the
 * newest count of an offset wins, acknowledged ones are forgotten, a torn record is cut off, and
 * the file is compacted to the counts still needed. */
static void test_delivery_counts(void)
{
	const char *dir = dir_for("counts");
	char path[300];
	snprintf(path, sizeof(path), "%s/deliveries", dir);
	spool *s = sp_open(dir, NULL, NULL);
	add(s, 1, 10);
	commit_sync(s);
	for (uint64_t o = 1; o <= 6; o++) /* a first delivery of 1..6: one record */
		socket_spool_note_delivery(s, o, 1);
	socket_spool_note_delivery(s, 3, 2);
	socket_spool_note_delivery(s, 5, 3);
	CHECK(socket_spool_save_deliveries(s, err, sizeof(err)));
	CHECK_INT(file_size(path), 3 * 24);
	CHECK_INT(socket_spool_deliveries(s, 3), 2);
	CHECK_INT(socket_spool_deliveries(s, 7), 0);
	socket_spool_close(s);
	s = sp_open(dir, NULL, NULL);
	uint32_t want[] = {0, 1, 1, 2, 1, 3, 1, 0, 0, 0, 0, 0};
	for (uint64_t o = 0; o <= 11; o++)
		CHECK_INT(socket_spool_deliveries(s, o), want[o]);
	/* acknowledged: forgotten, and once nothing is left the file is emptied */
	CHECK(socket_spool_set_acked(s, 3, err, sizeof(err)));
	CHECK_INT(socket_spool_deliveries(s, 3), 0);
	CHECK_INT(socket_spool_deliveries(s, 5), 3);
	socket_spool_close(s);
	s = sp_open(dir, NULL, NULL);
	CHECK_INT(socket_spool_deliveries(s, 2), 0);
	CHECK_INT(socket_spool_deliveries(s, 4), 1);
	CHECK(socket_spool_set_acked(s, 10, err, sizeof(err)));
	CHECK(socket_spool_save_deliveries(s, err, sizeof(err)));
	CHECK_INT(file_size(path), 0);
	/* a torn record at the end is cut off, the ones before it stay */
	socket_spool_note_delivery(s, 11, 1); /* not retained: ignored when loaded */
	add(s, 11, 12);
	commit_sync(s);
	socket_spool_note_delivery(s, 12, 4);
	CHECK(socket_spool_save_deliveries(s, err, sizeof(err)));
	socket_spool_close(s);
	int fd = open(path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0 && write(fd, "torn", 4) == 4);
	close(fd);
	s = sp_open(dir, NULL, NULL);
	CHECK_INT(socket_spool_deliveries(s, 12), 4);
	CHECK_INT(file_size(path) % 24, 0);
	/* many redeliveries of a few offsets: the file stays small */
	add(s, 13, 20);
	commit_sync(s);
	for (uint32_t k = 1; k <= 5000; k++) {
		socket_spool_note_delivery(s, 13 + k % 8, k);
		CHECK(socket_spool_save_deliveries(s, err, sizeof(err)));
	}
	CHECK(file_size(path) < 70 * 1024);
	socket_spool_close(s);
	s = sp_open(dir, NULL, NULL);
	for (uint64_t o = 13; o <= 20; o++)
		CHECK_INT(socket_spool_deliveries(s, o), 5000 - (21 - o) % 8);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

/* Held transactions: events appended before the commit is known, invisible until it, cut back to
 * a point (a rolled-back subtransaction) or discarded (an abort), and at the commit a segment of
 * their own with the next offsets; reopened, also after a crash before the next segment existed. */
static void hold_add(spool_held *h, uint64_t o, uint32_t tx)
{
	char p[64];
	size_t n = payload_of(o, p);
	CHECK(socket_spool_held_append(h, tx, key_of(o), p, n, time_of(o), err, sizeof(err)));
}

static void check_held_read(spool *s, uint64_t o, uint64_t lsn, uint32_t tx, int64_t commit_time)
{
	spool_record r;
	char p[64];
	size_t n = payload_of(o, p);
	if (!read_ok(s, o, &r))
		return;
	CHECK(r.held);
	CHECK_INT(r.offset, o);
	CHECK_INT(r.commit_lsn, lsn);
	CHECK_INT(r.tx_index, tx);
	CHECK_INT(r.commit_time, commit_time);
	CHECK_INT(r.key_hash, key_of(o));
	CHECK_INT(r.time_ms, time_of(o));
	CHECK(r.len == n && memcmp(r.data, p, n) == 0);
}

static void test_held(void)
{
	const char *dir = dir_for("held");
	char stale[300];
	const uint64_t la = 0x5000000, lb = 0x5000100, lc = 0x5000200;
	spool_limits lim = {.segment_bytes = 2000};
	spool *s = sp_open(dir, &lim, NULL);
	add(s, 1, 3);
	commit_sync(s);
	spool_held *a = socket_spool_hold(s, 77, err, sizeof(err));
	spool_held *gone = socket_spool_hold(s, 78, err, sizeof(err));
	for (uint64_t o = 4; o <= 6; o++)
		hold_add(a, o, (uint32_t)(o - 4));
	hold_add(gone, 100, 0);
	spool_held_point sp = socket_spool_held_at(a);
	for (uint64_t o = 7; o <= 40; o++) /* a subtransaction, rolled back; past the write buffer */
		hold_add(a, 1000 + o, (uint32_t)(o - 4));
	CHECK(socket_spool_held_cut(a, sp, err, sizeof(err)));
	for (uint64_t o = 7; o <= 8; o++)
		hold_add(a, o, (uint32_t)(o - 4));
	socket_spool_held_discard(gone);
	snprintf(stale, sizeof(stale), "%s/held-78", dir);
	CHECK_INT(file_size(stale), -1);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 3); /* nothing of a held transaction before its commit */
	CHECK(socket_spool_held_commit(a, la, 111, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 3);
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(socket_spool_head(s), 8);
	/* the write segment holds no event now: the next held one takes its place */
	spool_held *b = socket_spool_hold(s, 79, err, sizeof(err));
	hold_add(b, 9, 0);
	hold_add(b, 10, 1);
	CHECK(socket_spool_held_commit(b, lb, 222, err, sizeof(err)));
	add(s, 11, 12);
	commit_sync(s);
	uint64_t lsn;
	uint32_t tx;
	CHECK(socket_spool_last_id(s, &lsn, &tx) && lsn == lsn_of(12) && tx == tx_of(12));
	for (int round = 0; round < 2; round++) {
		check_range(s, 1, 3);
		for (uint64_t o = 4; o <= 8; o++)
			check_held_read(s, o, la, (uint32_t)(o - 4), 111);
		check_held_read(s, 9, lb, 0, 222);
		check_held_read(s, 10, lb, 1, 222);
		check_range(s, 11, 12);
		CHECK_INT(socket_spool_get_stats(s).segments, count_segs(dir));
		socket_spool_close(s);
		s = sp_open(dir, &lim, NULL);
		CHECK_INT(socket_spool_head(s), 12);
	}
	/* a crash after a held transaction's segment was renamed into place, before the next one */
	spool_held *c = socket_spool_hold(s, 80, err, sizeof(err));
	hold_add(c, 13, 0);
	hold_add(c, 14, 1);
	CHECK(socket_spool_held_commit(c, lc, 333, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	socket_spool_close(s);
	CHECK(unlink(seg_file(dir, 15)) == 0);
	snprintf(stale, sizeof(stale), "%s/held-81", dir);
	int fd = open(stale, O_WRONLY | O_CREAT | O_EXCL, 0600); /* one left held */
	CHECK(fd >= 0);
	close(fd);
	spool_recovery rec;
	s = sp_open(dir, &lim, &rec);
	CHECK_INT(rec.uncommitted, 0);
	CHECK_INT(file_size(stale), -1);
	CHECK_INT(socket_spool_head(s), 14);
	CHECK(socket_spool_last_id(s, &lsn, &tx) && lsn == lc && tx == 1);
	check_held_read(s, 14, lc, 1, 333);
	add(s, 15, 15);
	commit_sync(s);
	check_range(s, 15, 15);
	/* acknowledged, held segments go like any other */
	CHECK(socket_spool_set_acked(s, 14, err, sizeof(err)));
	uint64_t from, to;
	CHECK(socket_spool_trim(s, 0, UINT64_MAX, &from, &to, err, sizeof(err)));
	CHECK(socket_spool_sync(s, err, sizeof(err)));
	CHECK_INT(count_segs(dir), 1);
	CHECK_INT(socket_spool_first(s), 15);
	socket_spool_close(s);
	CHECK(socket_spool_destroy(dir, err, sizeof(err)));
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/test_spool.XXXXXX");
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	test_round_trip();
	test_visibility();
	test_sync_in_steps();
	test_reopen();
	test_torn_tail();
	test_uncommitted();
	test_rollover_and_random_reads();
	test_bad_names();
	test_acked();
	test_full();
	test_trim();
	test_delete_acked();
	test_large();
	test_delivery_counts();
	test_held();
	if (rmdir(tmp) != 0)
		fprintf(stderr, "leftovers in %s\n", tmp), test_failed++;
	return TEST_SUMMARY("test_spool");
}
