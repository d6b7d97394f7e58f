/* test_catalog.c: the checks of subscriptions against the catalog (cdc/daemon/catalog.c): rows as
 * the query returns them, and each problem with the statement that fixes it. */
#include <stdlib.h>
#include <string.h>

#include "cdc/source/catalog.h"
#include "test.h"

/* schema, table, relkind, replident, published, identity columns, the table its changes
 * arrive under */
static const char *const ROWS[][CATALOG_COLS] = {
    {"public", "orders", "r", "d", "t", "[\"id\"]", "public", "orders"},
    {"public", "full", "r", "f", "t", "[\"id\"]", "public", "full"},
    {"public", "nokey", "r", "d", "t", NULL, "public", "nokey"},
    {"public", "by index", "r", "i", "t", "[\"a\", \"b\"]", "public", "by index"},
    {"public", "quiet", "r", "d", "f", NULL, NULL, NULL},
    {"other", "parted", "p", "d", "t", "[\"id\"]", NULL, NULL},
    {"other", "parted_1", "r", "d", "t", "[\"id\"]", "other", "parted_1"},
    /* published via the root: ev's partitions arrive as ev; ev_2 is FULL, ev and ev_1 are not */
    {"ev", "ev", "p", "d", "t", "[\"id\"]", "ev", "ev"},
    {"ev", "ev_1", "r", "d", "t", "[\"id\"]", "ev", "ev"},
    {"ev", "ev_2", "r", "f", "t", "[\"id\"]", "ev", "ev"},
};
#define NROWS (sizeof(ROWS) / sizeof(ROWS[0]))

/* The end of the warning about partitions whose changes arrive as ev's. */
#define UNDER_ROOT                                                                                           \
	"and publication pub sends their changes under that name (publish_via_partition_root), so the "      \
	"subscription gets none of them: subscribe to \"ev\".\"ev\" (a where on its partition key picks a "  \
	"partition's rows), or publish the partitions without \"ev\".\"ev\"\n"

static cfg_subscription sub(const char *name, const char *table)
{
	static char *tables[1];
	tables[0] = (char *)table;
	return (cfg_subscription){.name = (char *)name, .tables = {tables, 1}};
}

/* The problems and warnings of s, "" for none. */
static void check(const catalog *c, const cfg_subscription *s, const char *problems, const char *warnings)
{
	buf p = {0}, w = {0};
	bool ok = source_catalog_check(c, s, "pub", &p, &w);
	CHECK_INT(ok, problems[0] == '\0');
	CHECK_STR(p.data ? p.data : "", problems);
	CHECK_STR(w.data ? w.data : "", warnings);
	buf_free(&p);
	buf_free(&w);
}

int main(void)
{
	catalog c = {0};
	for (size_t i = 0; i < NROWS; i++)
		CHECK(source_catalog_add(&c, ROWS[i]));
	CHECK_INT(c.n, NROWS);
	CHECK_INT(c.t[3].identity.n, 2);
	CHECK_STR(c.t[3].identity.v[1], "b");
	/* malformed rows are refused */
	CHECK(
	    !source_catalog_add(&c, (const char *const[]){"s", "t", "r", "d", "t", "{\"id\"}", NULL, NULL}));
	CHECK(!source_catalog_add(&c, (const char *const[]){"s", "t", "r", "d", "t", "[1]", NULL, NULL}));
	CHECK(!source_catalog_add(&c, (const char *const[]){"s", NULL, "r", "d", "t", NULL, NULL, NULL}));
	CHECK(!source_catalog_add(&c, (const char *const[]){"s", "t", "rr", "d", "t", NULL, NULL, NULL}));
	CHECK(!source_catalog_add(&c, (const char *const[]){"s", "t", "r", "d", "t", NULL, "s", NULL}));
	CHECK_INT(c.n, NROWS);

	cfg_subscription s = sub("plain", "public.*");
	check(&c, &s, "", "");
	s = sub("plain", "ev.*");
	check(&c, &s, "", "");
	/* changed: needs the old row of every table it matches */
	char *changed[] = {"status"};
	s = sub("chg", "public.orders");
	s.changed = (cfg_strlist){changed, 1};
	check(&c, &s,
	      "subscription chg uses changed: on table \"public\".\"orders\", whose replica identity does "
	      "not send "
	      "the old row of an update: ALTER TABLE \"public\".\"orders\" REPLICA IDENTITY FULL\n",
	      "");
	s = sub("chg", "public.full");
	s.changed = (cfg_strlist){changed, 1};
	check(&c, &s, "", "");
	/* old.column: the identity's columns come without FULL, others never */
	s = sub("old", "public.orders");
	s.where = "old.id = 1 and new.x = 2";
	check(&c, &s, "", "");
	s.where = "old.id = 1 or old.status = 'new'";
	check(&c, &s,
	      "subscription old reads old.status in its where on table \"public\".\"orders\", whose replica "
	      "identity does not send that column in the old row: ALTER TABLE \"public\".\"orders\" REPLICA "
	      "IDENTITY FULL\n",
	      "");
	s = sub("old", "public.by index");
	s.where = "old.b = 1";
	check(&c, &s, "", "");
	s.where = "old.id = 1";
	check(
	    &c, &s,
	    "subscription old reads old.id in its where on table \"public\".\"by index\", whose replica "
	    "identity does not send that column in the old row: ALTER TABLE \"public\".\"by index\" REPLICA "
	    "IDENTITY FULL\n",
	    "");
	/* snapshot: every published table is read, with a key or without, partitioned or not */
	s = sub("snap", "public.*");
	s.snapshot = true;
	check(&c, &s, "", "");
	s = sub("snap", "other.*");
	s.snapshot = true;
	check(&c, &s, "",
	      "subscription snap: table \"other\".\"parted\" is partitioned, and publication pub sends its "
	      "changes under its partitions' names (it lacks publish_via_partition_root), so none arrives "
	      "under \"other\".\"parted\": ALTER PUBLICATION \"pub\" SET (publish_via_partition_root = "
	      "true)\n");
	/* a partitioned table published via its root: changed: needs the old row of it and of each
	 * partition, whose changes arrive under its name */
	s = sub("chg", "ev.ev");
	s.changed = (cfg_strlist){changed, 1};
	check(&c, &s,
	      "subscription chg uses changed: on table \"ev\".\"ev\", whose replica identity does not send "
	      "the old row of an update: ALTER TABLE \"ev\".\"ev\" REPLICA IDENTITY FULL\n"
	      "subscription chg uses changed: on table \"ev\".\"ev_1\", whose replica identity does not "
	      "send the old row of an update: ALTER TABLE \"ev\".\"ev_1\" REPLICA IDENTITY FULL\n",
	      "");
	/* a partition alone gets nothing: its changes arrive as its root's */
	s = sub("leaf", "ev.ev_1");
	check(&c, &s, "",
	      "subscription leaf: \"ev\".\"ev_1\" is one of the partitions of \"ev\".\"ev\", " UNDER_ROOT);
	s = sub("leaf", "ev.ev_?");
	check(&c, &s, "",
	      "subscription leaf: \"ev\".\"ev_1\", \"ev\".\"ev_2\" are partitions of "
	      "\"ev\".\"ev\", " UNDER_ROOT);
	/* a root published without publish_via_partition_root: its changes arrive as its partitions' */
	s = sub("root", "other.parted");
	check(&c, &s, "",
	      "subscription root: table \"other\".\"parted\" is partitioned, and publication pub sends its "
	      "changes under its partitions' names (it lacks publish_via_partition_root), so none arrives "
	      "under \"other\".\"parted\": ALTER PUBLICATION \"pub\" SET (publish_via_partition_root = "
	      "true)\n");
	/* the doctor's form: the way out on a line of its own */
	{
		buf w = {0}, f = {0};
		source_catalog_check_partitions(&c, &s, "pub", &w, &f);
		CHECK_STR(f.data, "ALTER PUBLICATION \"pub\" SET (publish_via_partition_root = true)\n");
		CHECK(w.data && strstr(w.data, "none arrives under \"other\".\"parted\"\n"));
		buf_free(&w);
		buf_free(&f);
	}
	/* a pattern the publication has no table of: a warning */
	s = sub("q", "public.quiet");
	s.snapshot = true;
	check(&c, &s, "",
	      "subscription q: table pattern public.quiet matches no table of publication pub, so nothing of "
	      "it "
	      "is streamed until one is added\n");
	/* a table named one by one that does not exist: a problem with the closest names (issue 31);
	 * source_catalog_check leaves it to source_catalog_check_exists; a glob that matches nothing stays a
	 * warning */
	buf p = {0};
	s = sub("typo", "public.ordres");
	CHECK(!source_catalog_check_exists(&c, &s, &p));
	CHECK_STR(p.data, "subscription typo names table public.ordres, which does not exist: did you mean "
			  "public.orders?\n");
	check(&c, &s, "", "");
	buf_reset(&p);
	s = sub("none", "public.invoices");
	CHECK(!source_catalog_check_exists(&c, &s, &p));
	CHECK_STR(p.data, "subscription none names table public.invoices, which does not exist (nor a table "
			  "of a similar name)\n");
	buf_reset(&p);
	s = sub("glob", "public.invoice*");
	CHECK(source_catalog_check_exists(&c, &s, &p) && p.len == 0);
	s = sub("unpublished", "public.quiet");
	CHECK(source_catalog_check_exists(&c, &s, &p) && p.len == 0);
	buf_free(&p);
	source_catalog_free(&c);
	return TEST_SUMMARY("test_catalog");
}
