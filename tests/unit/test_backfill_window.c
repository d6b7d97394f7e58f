/* test_backfill_window.c: the watermark rule of a backfill chunk (cdc/backfill/window.c), driven by
 * scripts of rows, watermarks and changes in stream order, the table's record of recent commits that
 * seeds each chunk, and the key/row encoding and snapshot parsing it relies on. */
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/window.h"
#include "test.h"

/* A key of one text column. */
static void key_of(buf *b, const char *k, size_t n)
{
	bf_datum d = {.data = k, .len = (int32_t)n};
	buf_reset(b);
	backfill_encode(b, &d, 1);
}

/* Runs a script against a window begun with nonce "n1"; tokens separated by spaces:
 *   Rk       the SELECT read the row of key k
 *   L / Lx   the low watermark of n1 / of the foreign nonce x
 *   O        the previous chunk's high watermark, standing for n1's low one (backfill_window_open)
 *   H / Hx   the high watermark of n1 / of x
 *   Ck@x     a change of key k committed by xid x (@x optional: xid 100)
 *   Mk>j@x   a change moving key k to j
 *   Uk@x     a change of key k lacking a column (unchanged TOAST): marked partial
 *   N@x      a change without a key
 *   T@x      a truncate
 *   Pxmin:xmax:xip  the COPY's snapshot (which also settles the table's record)
 *   B        a new chunk (n1 again), seeded with the table's record of recent commits
 * Every change and truncate goes into the table's record too. Returns the mark of the last
 * watermark; *out gets the surviving keys, space-separated, then "partial:" and the keys marked
 * partial. */
static bfw_mark run(bf_window *w, const char *script, char *out, size_t outlen)
{
	char *copy = strdup(script), *save = NULL;
	bfw_mark last = BFW_FOREIGN;
	buf k = {0}, k2 = {0};
	bf_recent table = {0};
	backfill_window_begin(w, "n1", NULL);
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		char *at = strchr(t, '@');
		uint32_t xid = at ? (uint32_t)strtoul(at + 1, NULL, 10) : 100;
		size_t n = at ? (size_t)(at - t) - 1 : strlen(t) - 1;
		char *gt = memchr(t + 1, '>', n);
		switch (t[0]) {
		case 'R': {
			char row[64];
			snprintf(row, sizeof(row), "row-%.*s", (int)n, t + 1);
			bf_datum d = {.data = row, .len = (int32_t)strlen(row)};
			buf r = {0};
			backfill_encode(&r, &d, 1);
			key_of(&k, t + 1, n);
			CHECK(backfill_window_add_row(w, k.data, k.len, r.data, r.len));
			buf_free(&r);
			break;
		}
		case 'L':
		case 'H':
			last = backfill_window_watermark(w, n ? t + 1 : "n1", t[0] == 'H');
			break;
		case 'C':
		case 'U':
			key_of(&k, t + 1, n);
			backfill_window_change(w, xid, k.data, k.len, NULL, 0, t[0] == 'U');
			backfill_recent_add(&table, xid);
			break;
		case 'M':
			key_of(&k, t + 1, (size_t)(gt - t - 1));
			key_of(&k2, gt + 1, n - (size_t)(gt - t));
			backfill_window_change(w, xid, k.data, k.len, k2.data, k2.len, false);
			backfill_recent_add(&table, xid);
			break;
		case 'N':
			backfill_window_change(w, xid, NULL, 0, NULL, 0, false);
			backfill_recent_add(&table, xid);
			break;
		case 'T':
			backfill_window_truncate(w, xid);
			backfill_recent_add(&table, xid);
			break;
		case 'P': {
			bf_snapshot s;
			char err[128];
			CHECK(backfill_snapshot_parse(t + 1, strlen(t + 1), &s, err, sizeof(err)));
			backfill_recent_settle(&table, &s);
			backfill_window_set_snapshot(w, &s);
			break;
		}
		case 'B':
			backfill_window_begin(w, "n1", &table);
			break;
		case 'O':
			last = backfill_window_open(w) ? BFW_OPENED : BFW_FOREIGN;
			break;
		}
	}
	out[0] = '\0';
	if (last == BFW_CLOSED) {
		for (size_t i = 0; i < backfill_window_rows(w); i++) {
			const void *row;
			size_t len;
			bool dropped;
			backfill_window_row(w, i, &row, &len, &dropped);
			bf_datum d;
			CHECK(backfill_decode(row, len, &d, 1));
			if (!dropped)
				snprintf(out + strlen(out), outlen - strlen(out), "%s%.*s", out[0] ? " " : "",
					 d.len - 4, d.data + 4);
		}
		size_t pos = 0, len;
		const void *key;
		bool any = false;
		while (backfill_window_partial_key(w, &pos, &key, &len)) {
			bf_datum d;
			CHECK(backfill_decode(key, len, &d, 1));
			snprintf(out + strlen(out), outlen - strlen(out), "%s%.*s",
				 any ? " " : " partial:", d.len, d.data);
			any = true;
		}
	}
	backfill_recent_free(&table);
	buf_free(&k);
	buf_free(&k2);
	free(copy);
	return last;
}

static void test_rule(void)
{
	static const struct {
		const char *script;
		bfw_mark mark;
		const char *survivors;
		bfw_retry why;
	} cases[] = {
	    /* nothing changed: every row, in read order */
	    {"R1 R2 R3 L H", BFW_CLOSED, "1 2 3"},
	    /* changes before the low watermark and after the high one do not drop */
	    {"C2 R1 R2 R3 L H C3", BFW_CLOSED, "1 2 3"},
	    {"R1 R2 L H C1", BFW_CLOSED, "1 2"},
	    /* a change between the watermarks drops its row, whether the rows came before or after it */
	    {"R1 R2 R3 L C2 H", BFW_CLOSED, "1 3"},
	    {"L C2 R1 R2 R3 H", BFW_CLOSED, "1 3"},
	    {"L R1 C3 R2 R3 H", BFW_CLOSED, "1 2"},
	    /* a key changed twice, and changes of keys the chunk does not hold */
	    {"R1 R2 L C2@101 C2@102 C9 H", BFW_CLOSED, "1"},
	    /* a key change drops both the old and the new key */
	    {"R1 R2 R3 L M1>3 H", BFW_CLOSED, "2"},
	    {"R1 R2 L M7>2 H", BFW_CLOSED, "1"},
	    /* a streamed transaction counts at its commit: a commit inside the window drops, the same
	     * transaction's commit after the high watermark does not (its changes came before) */
	    {"R1 R2 L C1@500 H", BFW_CLOSED, "2"},
	    {"R1 R2 L H C1@500", BFW_CLOSED, "1 2"},
	    /* watermarks of other chunks are ignored: no window opens or closes */
	    {"R1 R2 Lold Cx Hold C1", BFW_FOREIGN, ""},
	    {"R1 R2 Lold L C1 Hold H", BFW_CLOSED, "2"},
	    {"R1 R2 L Lold C1 H", BFW_CLOSED, "2"},
	    /* a truncate inside the window drops everything, outside nothing */
	    {"R1 R2 L T H", BFW_CLOSED, ""},
	    {"T R1 R2 L H", BFW_CLOSED, "1 2"},
	    /* a change the window cannot key makes the chunk be read again */
	    {"R1 R2 L N H", BFW_RETRY, "", BFW_RETRY_UNKEYED},
	    {"N R1 R2 L H N", BFW_CLOSED, "1 2"},
	    /* one lacking a column drops its row and marks its key (its new key when it moved) */
	    {"R1 R2 L U1 H", BFW_CLOSED, "2 partial:1"},
	    {"R1 R2 L C1 U1 H", BFW_CLOSED, "2 partial:1"},
	    {"R1 R2 L U9 H", BFW_CLOSED, "1 2 partial:9"},
	    {"R1 R2 U1 L H U2", BFW_CLOSED, "1 2"},
	    /* the high watermark without the low one */
	    {"R1 H", BFW_RETRY, "", BFW_RETRY_NO_LOW},
	    /* an empty chunk */
	    {"L H", BFW_CLOSED, ""},
	    /* the snapshot race: xid 150 reached the stream before the low watermark but the
	     * snapshot (xmin 140, xmax 160, 150 in progress) did not see it */
	    {"C1@150 R1 R2 P140:160:150 L H", BFW_RETRY, "", BFW_RETRY_SNAPSHOT},
	    {"C1@150 R1 R2 P140:160: L H", BFW_CLOSED, "1 2"},
	    {"C1@150 R1 R2 P151:160: L H", BFW_CLOSED, "1 2"},
	    {"C1@150 R1 R2 P140:150: L H", BFW_RETRY, "", BFW_RETRY_SNAPSHOT},
	    /* ... inside the window it is an ordinary change: its row is dropped */
	    {"R1 R2 P140:160:150 L C1@150 H", BFW_CLOSED, "2"},
	    /* a commit of the table that the chunk's snapshot did not see is checked by the next chunk,
	     * which the table's record seeds, until a snapshot's xmin passes it */
	    {"R1 P140:160:150 L C1@150 H B R2 P140:160:150 L H", BFW_RETRY, "", BFW_RETRY_SNAPSHOT},
	    {"R1 P140:160:150 L C1@150 H B R2 P151:160: L H", BFW_CLOSED, "2"},
	    {"C1@150 P151:160: B R2 P140:160:150 L H", BFW_CLOSED, "2"},
	    /* the previous chunk's high watermark opens the window as the low one would, and a low
	     * watermark after it changes nothing */
	    {"C1 R1 R2 R3 O C2 H", BFW_CLOSED, "1 3"},
	    {"R1 R2 O C1 L C2 H", BFW_CLOSED, ""},
	    {"C1@150 R1 R2 P140:160:150 O H", BFW_RETRY, "", BFW_RETRY_SNAPSHOT},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_window *w = backfill_window_new(1 << 20);
		char got[256];
		bfw_mark m = run(w, cases[i].script, got, sizeof(got));
		if (m != cases[i].mark)
			fprintf(stderr, "case %zu: %s\n", i, cases[i].script);
		CHECK_INT(m, cases[i].mark);
		CHECK_STR(got, cases[i].survivors);
		CHECK_INT(backfill_window_retry_reason(w), cases[i].why);
		backfill_window_free(w);
	}
}

/* The memory cap: rows past it are refused (the first always fits), changed keys past it make the
 * chunk be read again. */
static void test_memory(void)
{
	bf_window *w = backfill_window_new(40);
	char got[256];
	CHECK_INT(run(w, "R1 R2 L H", got, sizeof(got)), BFW_CLOSED);
	CHECK_STR(got, "1 2");
	CHECK_INT(backfill_window_bytes(w), 2 * (5 + 9));
	buf k = {0};
	key_of(&k, "3", 1);
	CHECK(!backfill_window_add_row(w, k.data, k.len, "0123456789abc", 13));
	backfill_window_begin(w, "n1", NULL);
	CHECK(backfill_window_add_row(w, k.data, k.len, "a row far longer than the cap of forty bytes", 44));
	CHECK_INT(run(w, "R1 L C5 C6 C7 C8 C9 Ca Cb H", got, sizeof(got)), BFW_RETRY);
	CHECK_INT(backfill_window_retry_reason(w), BFW_RETRY_MEMORY);
	buf_free(&k);
	backfill_window_free(w);
}

static void test_reset(void)
{
	bf_window *w = backfill_window_new(1 << 20);
	char got[256];
	backfill_window_begin(w, "n1", NULL);
	CHECK_STR(backfill_window_nonce(w), "n1");
	backfill_window_reset(w);
	CHECK(backfill_window_nonce(w) == NULL);
	CHECK_INT(backfill_window_watermark(w, "n1", false), BFW_FOREIGN);
	CHECK_INT(backfill_window_watermark(w, "n1", true), BFW_FOREIGN);
	/* a closed window ignores its own watermarks replayed */
	CHECK_INT(run(w, "R1 L H", got, sizeof(got)), BFW_CLOSED);
	CHECK_INT(backfill_window_watermark(w, "n1", true), BFW_FOREIGN);
	/* a key that is the row itself (a table without a key) is kept once */
	backfill_window_begin(w, "n2", NULL);
	CHECK(backfill_window_add_row(w, "row", 3, "row", 3));
	CHECK_INT(backfill_window_bytes(w), 3);
	/* and so is a key that is a column of the row (a key of one column) */
	static const char two[] = "keyrest";
	CHECK(backfill_window_add_row(w, two, 3, two, 7));
	CHECK_INT(backfill_window_bytes(w), 10);
	backfill_window_free(w);
}

/* The table's record of recent commits past its cap: the span forgotten still counts when a
 * snapshot could have missed a commit in it (an xid of the span in progress, or the span at or
 * past its xmax). */
static void test_recent(void)
{
	bf_recent r = {0};
	for (uint32_t x = 1000; x < 1000 + 70000; x++)
		backfill_recent_add(&r, x);
	CHECK(r.lost);
	CHECK_INT(r.lost_min, 1000);
	CHECK_INT(r.lost_max, 1000 + 32767);
	static const struct {
		const char *snap;
		bool race;
	} cases[] = {
	    {"900:900:", true},		    /* the span is past xmax */
	    {"900:200000:950", false},	    /* an xid in progress before the span */
	    {"900:200000:950,20000", true}, /* one in the span */
	    {"50000:60000:", true},	    /* kept xids at or past xmax */
	    {"100000:200000:", false},	    /* every xid before xmin */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_window *w = backfill_window_new(1 << 20);
		bf_snapshot s;
		CHECK(backfill_snapshot_parse(cases[i].snap, strlen(cases[i].snap), &s, NULL, 0));
		backfill_window_begin(w, "n", &r);
		backfill_window_set_snapshot(w, &s);
		CHECK_INT(backfill_window_watermark(w, "n", false), BFW_OPENED);
		bfw_mark m = backfill_window_watermark(w, "n", true);
		if ((m == BFW_RETRY) != cases[i].race)
			fprintf(stderr, "recent case %zu: %s\n", i, cases[i].snap);
		CHECK_INT(m == BFW_RETRY, cases[i].race);
		backfill_window_free(w);
	}
	/* a snapshot's xmin past every xid: all forgotten */
	bf_snapshot s;
	CHECK(backfill_snapshot_parse("500000:500000:", 14, &s, NULL, 0));
	backfill_recent_settle(&r, &s);
	CHECK(!r.lost);
	CHECK_INT(r.n, 0);
	backfill_snapshot_free(&s);
	backfill_recent_free(&r);
}

static void test_encoding(void)
{
	bf_datum in[] = {{"abc", 3}, {NULL, -1}, {"", 0}}, out[3];
	buf b = {0};
	backfill_encode(&b, in, 3);
	CHECK_INT(b.len, 4 + 3 + 4 + 4);
	CHECK(memcmp(b.data, "\0\0\0\3abc\377\377\377\377\0\0\0\0", b.len) == 0);
	CHECK(backfill_decode(b.data, b.len, out, 3));
	CHECK(out[0].len == 3 && memcmp(out[0].data, "abc", 3) == 0 && out[1].len == -1 && out[2].len == 0);
	CHECK(!backfill_decode(b.data, b.len, out, 2));	    /* bytes left over */
	CHECK(!backfill_decode(b.data, b.len - 1, out, 3)); /* cut short */
	CHECK(!backfill_decode(b.data, 6, out, 1));
	buf_free(&b);

	static const struct {
		const char *text;
		bool ok;
		uint32_t xmin, xmax;
		size_t nxip;
	} snaps[] = {
	    {"740:745:740,742", true, 740, 745, 2},
	    {"740:740:", true, 740, 740, 0},
	    {"4294967396:4294967400:4294967397", true, 100, 104, 1}, /* an epoch past the first */
	    {"740:745", false},
	    {"740:745:740,", false},
	    {"x:745:", false},
	    {"740::", false},
	    {"99999999999999999999:1:", false},
	};
	for (size_t i = 0; i < sizeof(snaps) / sizeof(snaps[0]); i++) {
		bf_snapshot s;
		char err[128];
		bool ok = backfill_snapshot_parse(snaps[i].text, strlen(snaps[i].text), &s, err, sizeof(err));
		CHECK_INT(ok, snaps[i].ok);
		if (ok) {
			CHECK_INT(s.xmin, snaps[i].xmin);
			CHECK_INT(s.xmax, snaps[i].xmax);
			CHECK_INT(s.nxip, snaps[i].nxip);
		} else {
			CHECK(strstr(err, "malformed snapshot") != NULL);
		}
		backfill_snapshot_free(&s);
	}
	/* visibility, across the wrap of 32-bit xids */
	bf_snapshot s;
	char err[128];
	CHECK(backfill_snapshot_parse("4294967290:4294967300:4294967295", 32, &s, err, sizeof(err)));
	CHECK(backfill_snapshot_sees(&s, 4294967280u));
	CHECK(backfill_snapshot_sees(&s, 4294967294u));
	CHECK(!backfill_snapshot_sees(&s, 4294967295u));
	CHECK(backfill_snapshot_sees(&s, 2));
	CHECK(!backfill_snapshot_sees(&s, 4));
	CHECK(!backfill_snapshot_sees(&s, 5000));
	backfill_snapshot_free(&s);
}

int main(void)
{
	test_rule();
	test_memory();
	test_reset();
	test_recent();
	test_encoding();
	return TEST_SUMMARY("test_backfill_window");
}
