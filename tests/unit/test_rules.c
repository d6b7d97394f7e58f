/* test_rules.c: table patterns and subscription matching, the progress queue, the state_dir position file,
 * and the latency histogram. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdc/match/rules.h"
#include "cdc/pipeline/progress.h"
#include "cdc/source/state.h"
#include "decoder/base/hist.h"
#include "test.h"

static pgo_rel rel(uint32_t relid, const char *schema, const char *table, uint64_t version)
{
	return (pgo_rel){
	    .relid = relid, .nspname = (char *)schema, .relname = (char *)table, .version = version};
}

static match_sub sub(const char *name, char **tables, size_t ntables, unsigned ops)
{
	return (match_sub){.name = name, .tables = {tables, ntables}, .ops = ops};
}

static void test_table_match(void)
{
	static const struct {
		const char *pattern, *schema, *table;
		bool match;
	} t[] = {
	    {"public.orders", "public", "orders", true},
	    {"public.orders", "public", "Orders", false},
	    {"public.*", "public", "orders", true},
	    {"public.*", "other", "orders", false},
	    {"*.*", "s", "t", true},
	    {"pub*.ord?rs", "public", "orders", true},
	    {"pub*.ord?rs", "public", "ordrs", false},
	    {"*s*s*s*s*s*s*s*s*s*s*s*s.t", "sssssssssssssssssssssssssssssssssssssssssx", "t", false},
	    {"*s*s*s*s*s*s*s*s*s*s*s*s*.t", "sssssssssssssssssssssssssssssssssssssssssx", "t", true},
	    {"a*.*b", "a", "b", true},
	    {"\"Odd.Schema\".t?", "Odd.Schema", "t1", true},
	    {"\"Odd.Schema\".t?", "odd.schema", "t1", false},
	    {"\"a*\".t", "a*", "t", true},
	    {"\"a*\".t", "ab", "t", false}, /* quoted: no globs */
	    {"\"say \"\"hi\"\"\".\"my-table\"", "say \"hi\"", "my-table", true},
	    /* malformed: never matches, never crashes */
	    {"", "", "", false},
	    {"nodot", "nodot", "", false},
	    {"a.b.c", "a", "b.c", false},
	    {"\"a.b", "a", "b", false},
	    {"a\"b\".c", "ab", "c", false},
	    {".t", "", "t", false},
	    {"s.", "s", "", false},
	    {"\"\".t", "", "t", false},
	    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.t",
	     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "t", false},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		if (match_table(t[i].pattern, t[i].schema, t[i].table) == t[i].match) {
			test_passed++;
		} else {
			test_failed++;
			fprintf(stderr, "match_table(%s, %s, %s) != %d\n", t[i].pattern, t[i].schema,
				t[i].table, t[i].match);
		}
	}
}

/* A literal pattern that names no table: the closest names (issue 31: public.ordres). */
static void test_suggest(void)
{
	static const char *const tables[][2] = {
	    {"public", "orders"},     {"public", "order_lines"}, {"public", "customers"},
	    {"public", "ordres_old"}, {"sales", "orders"},	 {"public", "Orders"},
	    {"odd", "my-table"},      {"public", "x"},
	};
	static const struct {
		const char *pattern, *want;
	} t[] = {
	    {"public.ordres", "did you mean public.orders or public.Orders?"},
	    {"public.order", "did you mean public.orders or public.Orders?"},
	    {"sales.ordres", "did you mean sales.orders?"},
	    {"publik.customer", "did you mean public.customers?"},
	    {"odd.my_table", "did you mean odd.\"my-table\"?"},
	    {"\"odd\".\"my-tabel\"", "did you mean odd.\"my-table\"?"},
	    {"public.invoices", ""},
	    {"public.y", "did you mean public.x?"},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		match_suggest m;
		match_suggest_start(&m, t[i].pattern);
		for (size_t k = 0; k < sizeof tables / sizeof *tables; k++)
			match_suggest_add(&m, tables[k][0], tables[k][1]);
		char out[512];
		CHECK_STR(match_suggest_text(&m, out, sizeof(out)), t[i].want);
	}
	CHECK(match_table_literal("public.orders") && match_table_literal("\"a*\".\"b?\""));
	CHECK(!match_table_literal("public.*") && !match_table_literal("p?.t") &&
	      !match_table_literal("\"a\".b*"));
}

static void test_matching(void)
{
	char *orders[] = {"public.orders"}, *all_public[] = {"public.*"}, *two[] = {"app.job?", "*.audit_*"};
	match_sub subs[] = {
	    sub("orders", orders, 1, MATCH_OP_INSERT | MATCH_OP_UPDATE),
	    sub("public", all_public, 1,
		MATCH_OP_INSERT | MATCH_OP_DELETE | MATCH_OP_TRUNCATE | MATCH_OP_MESSAGE),
	    sub("globs", two, 2, MATCH_OP_DELETE),
	};
	char err[256];
	rules *r = match_rules_new(subs, 3, err, sizeof(err));
	CHECK(r != NULL);
	const uint32_t *idx;
	static const struct {
		uint32_t relid;
		const char *schema, *table;
		unsigned op;
		size_t n;
		uint32_t first, second;
	} cases[] = {
	    {1, "public", "orders", MATCH_OP_INSERT, 2, 0, 1},
	    {1, "public", "orders", MATCH_OP_UPDATE, 1, 0, 0},
	    {1, "public", "orders", MATCH_OP_DELETE, 1, 1, 0},
	    {1, "public", "orders", MATCH_OP_TRUNCATE, 1, 1, 0},
	    {2, "public", "orders_archive", MATCH_OP_UPDATE, 0, 0, 0},
	    {3, "app", "jobs", MATCH_OP_DELETE, 1, 2, 0},
	    {4, "app", "jobs_old", MATCH_OP_DELETE, 0, 0, 0},
	    {5, "billing", "audit_log", MATCH_OP_DELETE, 1, 2, 0},
	    {5, "billing", "audit_log", MATCH_OP_INSERT, 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pgo_rel x = rel(cases[i].relid, cases[i].schema, cases[i].table, 1);
		size_t n = match_rules_match(r, &x, cases[i].op, &idx);
		CHECK_INT(n, cases[i].n);
		if (n >= 1)
			CHECK_INT(idx[0], cases[i].first);
		if (n >= 2)
			CHECK_INT(idx[1], cases[i].second);
	}
	/* A relation id whose schema changed (new version) is matched again by its new name. */
	pgo_rel renamed = rel(1, "public", "orders_v2", 2);
	CHECK_INT(match_rules_match(r, &renamed, MATCH_OP_INSERT, &idx), 1);
	CHECK_INT(idx[0], 1);
	/* Logical messages: the subscriptions with the message operation. */
	CHECK_INT(match_rules_match(r, NULL, MATCH_OP_MESSAGE, &idx), 1);
	CHECK_INT(idx[0], 1);
	/* Many relations: the cache grows and keeps answering right. */
	for (uint32_t id = 100; id < 1100; id++) {
		pgo_rel x = rel(id, id % 2 ? "public" : "other", "t", 1);
		CHECK_INT(match_rules_match(r, &x, MATCH_OP_INSERT, &idx), id % 2 ? 1 : 0);
	}
	match_rules_free(r);

	/* Quoted parts match exactly: a schema with a dot, a table with a literal star. */
	char *quoted[] = {"\"my.app\".\"t*\""};
	match_sub q = sub("quoted", quoted, 1, MATCH_OP_INSERT);
	r = match_rules_new(&q, 1, err, sizeof(err));
	pgo_rel dotted = rel(7, "my.app", "t*", 1), starry = rel(8, "my.app", "tx", 1),
		other = rel(9, "myXapp", "t*", 1);
	CHECK_INT(match_rules_match(r, &dotted, MATCH_OP_INSERT, &idx), 1);
	CHECK_INT(match_rules_match(r, &starry, MATCH_OP_INSERT, &idx), 0);
	CHECK_INT(match_rules_match(r, &other, MATCH_OP_INSERT, &idx), 0);
	match_rules_free(r);

	/* A where that does not parse is refused with its subscription's name and the position. */
	match_sub w = sub("paid", orders, 1, MATCH_OP_UPDATE);
	w.where = "new.status = ";
	CHECK(match_rules_new(&w, 1, err, sizeof(err)) == NULL);
	CHECK_STR(err, "subscription paid: where: position 12: expected a value after '='");
}

/* An event whose new row is one int column, amount. */
static Cdc__V1__Event *amount_event(arena *a, int64_t amount)
{
	Cdc__V1__Value *v = arena_alloc(a, sizeof(*v));
	cdc__v1__value__init(v);
	v->kind_case = CDC__V1__VALUE__KIND_INT_VALUE;
	v->int_value = amount;
	Cdc__V1__Column *c = arena_alloc(a, sizeof(*c));
	cdc__v1__column__init(c);
	c->name = "amount";
	c->value = v;
	Cdc__V1__Column **cols = arena_alloc(a, sizeof(*cols));
	cols[0] = c;
	Cdc__V1__Row *row = arena_alloc(a, sizeof(*row));
	cdc__v1__row__init(row);
	row->n_columns = 1;
	row->columns = cols;
	Cdc__V1__Event *e = arena_alloc(a, sizeof(*e));
	cdc__v1__event__init(e);
	e->op = CDC__V1__OP__OP_INSERT;
	e->new_row = row;
	return e;
}

/* Subscriptions with the same where text share one evaluation per event (match_rules_event starts the
 * next one); a different text is its own; one without a where takes every event. */
static void test_where_shared(void)
{
	char *orders[] = {"public.orders"};
	match_sub subs[] = {sub("neg1", orders, 1, MATCH_OP_INSERT), sub("neg2", orders, 1, MATCH_OP_INSERT),
			    sub("big", orders, 1, MATCH_OP_INSERT), sub("all", orders, 1, MATCH_OP_INSERT),
			    sub("neg3", orders, 1, MATCH_OP_INSERT)};
	subs[0].where = subs[1].where = subs[4].where = "new.amount < 0";
	subs[2].where = "new.amount > 100";
	char err[256];
	rules *r = match_rules_new(subs, 5, err, sizeof(err));
	CHECK(r != NULL);
	arena *a = arena_new(4096);
	static const struct {
		int64_t amount;
		bool want[5];
	} cases[] = {
	    {-5, {true, true, false, true, true}},
	    {500, {false, false, true, true, false}},
	    {7, {false, false, false, true, false}},
	    {-1, {true, true, false, true, true}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		Cdc__V1__Event *e = amount_event(a, cases[i].amount);
		match_rules_event(r);
		for (uint32_t k = 0; k < 5; k++)
			CHECK_INT(match_rules_accept(r, k, e, a), cases[i].want[k]);
		arena_reset(a);
	}
	arena_free(a);
	match_rules_free(r);
}

static void test_progress(void)
{
	progress p = PROGRESS_INIT;
	CHECK_INT(pipeline_progress_advance(&p, 10), 0);
	/* More than the initial capacity, with the ring wrapping. */
	for (uint64_t seq = 1; seq <= 3000; seq++)
		pipeline_progress_push(&p, seq, 1000 + seq * 10);
	CHECK_INT(progress_pending(&p), 3000);
	CHECK_INT(pipeline_progress_advance(&p, 0), 0);
	CHECK_INT(pipeline_progress_advance(&p, 5), 1050);
	CHECK_INT(progress_pending(&p), 2995);
	for (uint64_t seq = 3001; seq <= 4000; seq++)
		pipeline_progress_push(&p, seq, 1000 + seq * 10);
	CHECK_INT(pipeline_progress_advance(&p, 3999), 1000 + 3999 * 10);
	CHECK_INT(progress_pending(&p), 1);
	/* Transactions skipped by seq (none of the sinks saw them) do not block the queue. */
	pipeline_progress_push(&p, 4100, 99999);
	CHECK_INT(pipeline_progress_advance(&p, 4050), 1000 + 4000 * 10);
	CHECK_INT(pipeline_progress_advance(&p, 4100), 99999);
	CHECK_INT(progress_pending(&p), 0);
	pipeline_progress_free(&p);
}

static void test_state(void)
{
	char dir[] = "/tmp/cdc-test-state-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char err[512];
	int lock = source_state_lock(dir, err, sizeof(err));
	CHECK(lock >= 0);
	CHECK(source_state_lock(dir, err, sizeof(err)) < 0);
	CHECK(strstr(err, "is in use by another cdc process") != NULL);

	state st;
	bool found = true;
	CHECK(source_state_read(dir, &st, &found, err, sizeof(err)));
	CHECK(!found);
	state w = {.system_id = "7312345678901234567",
		   .slot = "cdc_slot",
		   .flushed_lsn = 0x1A2B3C4DULL | (3ULL << 32)};
	CHECK(source_state_write(dir, &w, err, sizeof(err)));
	CHECK(source_state_read(dir, &st, &found, err, sizeof(err)));
	CHECK(found);
	CHECK_STR(st.system_id, "7312345678901234567");
	CHECK_STR(st.slot, "cdc_slot");
	CHECK_INT(st.flushed_lsn, w.flushed_lsn);

	/* The writer's thread: posts coalesce, what is durable is what it wrote last. */
	state_writer *sw = source_state_writer_new(dir, err, sizeof(err));
	CHECK(sw != NULL);
	CHECK(source_state_writer_durable(sw, &st, &found, err, sizeof(err)));
	CHECK(!found); /* nothing written by it yet */
	char path[600], other[600];
	snprintf(other, sizeof(other), "%s/backfills.json", dir);
	for (uint64_t i = 1; i <= 100; i++) {
		w.flushed_lsn = 0x5000 + i;
		/* a file to write before the position: a later post without one keeps it */
		char text[32];
		int n = snprintf(text, sizeof(text), "file %d", (int)i);
		source_state_writer_post(sw, &w, i % 10 == 1 ? other : NULL, text, (size_t)n);
	}
	source_state_writer_wait(sw);
	CHECK(source_state_writer_durable(sw, &st, &found, err, sizeof(err)));
	CHECK(found);
	CHECK_INT(st.flushed_lsn, 0x5064);
	CHECK(source_state_read(dir, &st, &found, err, sizeof(err)));
	CHECK_INT(st.flushed_lsn, 0x5064);
	FILE *of = fopen(other, "r");
	char got[32] = "";
	CHECK(of && fgets(got, sizeof(got), of));
	CHECK_STR(got, "file 91");
	if (of)
		fclose(of);
	unlink(other);
	snprintf(path, sizeof(path), "%s/position.tmp", dir);
	CHECK(mkdir(path, 0700) == 0); /* the temp file cannot be made: the write fails, and stays failed */
	w.flushed_lsn = 0x6000;
	source_state_writer_post(sw, &w, NULL, NULL, 0);
	source_state_writer_wait(sw);
	CHECK(!source_state_writer_durable(sw, &st, &found, err, sizeof(err)));
	CHECK(strstr(err, "position.tmp") != NULL);
	CHECK(rmdir(path) == 0);
	source_state_writer_post(sw, &w, NULL, NULL, 0);
	source_state_writer_wait(sw);
	CHECK(!source_state_writer_durable(sw, &st, &found, err, sizeof(err)));
	source_state_writer_free(sw);

	snprintf(path, sizeof(path), "%s/position", dir);
	FILE *f = fopen(path, "w");
	fputs("system_identifier 1\nslot s\nflushed_lsn nonsense\n", f);
	fclose(f);
	CHECK(!source_state_read(dir, &st, &found, err, sizeof(err)));
	CHECK(strstr(err, "is incomplete or corrupt") != NULL);
	f = fopen(path, "w");
	fputs("garbage here\n", f);
	fclose(f);
	CHECK(!source_state_read(dir, &st, &found, err, sizeof(err)));
	CHECK(strstr(err, "unexpected line \"garbage here\"") != NULL);

	close(lock);
	unlink(path);
	snprintf(path, sizeof(path), "%s/lock", dir);
	unlink(path);
	rmdir(dir);
}

static void test_lsn(void)
{
	char s[LSN_STRLEN];
	util_lsn_format(0x16B3748, s);
	CHECK_STR(s, "0/16B3748");
	util_lsn_format(0xFFFFFFFFFFFFFFFFULL, s);
	CHECK_STR(s, "FFFFFFFF/FFFFFFFF");
	util_lsn_format(0, s);
	CHECK_STR(s, "0/0");
	util_lsn_format(0x100000000ULL, s);
	CHECK_STR(s, "1/0");
	uint64_t v;
	CHECK(util_lsn_parse("1A/2B3C", &v));
	CHECK_INT(v, 0x1A00002B3CLL);
	CHECK(!util_lsn_parse("1A/", &v));
	CHECK(!util_lsn_parse("1A/2B3C ", &v));
	CHECK(!util_lsn_parse("x/1", &v));
	CHECK(!util_lsn_parse("", &v));
	CHECK(util_lsn_parse("ffffffff/0a", &v));
	CHECK_INT(v, (long long)0xFFFFFFFF0000000AULL);
	/* what sscanf's %X took: a sign, spaces, 0x, a ninth digit left for the next field */
	CHECK(!util_lsn_parse("-1/0", &v));
	CHECK(!util_lsn_parse(" 1/0", &v));
	CHECK(!util_lsn_parse("1/ 0", &v));
	CHECK(!util_lsn_parse("0x1/0", &v));
	CHECK(!util_lsn_parse("1/+2", &v));
	CHECK(!util_lsn_parse("123456789/0", &v));
	CHECK(!util_lsn_parse("0/123456789", &v));
	CHECK(!util_lsn_parse("/1", &v));
	CHECK(!util_lsn_parse("1/2/3", &v));
}

static void test_hist(void)
{
	static hist h;
	CHECK_INT(hist_quantile(&h, 0.5), 0);
	for (uint64_t v = 0; v < 16; v++)
		hist_add(&h, v);
	CHECK_INT(hist_quantile(&h, 0.5), 7); /* small values are exact */
	CHECK_INT(hist_quantile(&h, 1.0), 15);
	static hist u;
	for (uint64_t v = 1; v <= 100000; v++)
		hist_add(&u, v);
	/* Within the bucket width (1/16 of the power of two) of the true quantile. */
	uint64_t p50 = hist_quantile(&u, 0.5), p99 = hist_quantile(&u, 0.99);
	CHECK(p50 >= 50000 && p50 <= 50000 + 50000 / 16 + 1);
	CHECK(p99 >= 99000 && p99 <= 99000 + 99000 / 16 + 1);
	CHECK_INT(hist_quantile(&u, 1.0), 100000);
	CHECK_INT(u.count, 100000);
	CHECK_INT(u.max, 100000);
	static hist big;
	hist_add(&big, UINT64_MAX);
	CHECK_INT(hist_quantile(&big, 0.5), UINT64_MAX);
}

int main(void)
{
	test_hist();
	test_table_match();
	test_suggest();
	test_matching();
	test_where_shared();
	test_progress();
	test_state();
	test_lsn();
	return TEST_SUMMARY("test_rules");
}
