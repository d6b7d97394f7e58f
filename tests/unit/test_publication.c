/* test_publication.c: the publication cdc creates and keeps current (cdc/source/pgconn.c's plan):
 * the form each role may create, on PostgreSQL 14 and 15+, the tables added as they come, and the
 * ways out when the role may publish none of them. */
#include <stdlib.h>
#include <string.h>

#include "cdc/source/pgconn.h"
#include "test.h"

static const pg_table_row ROWS[] = {
    {"app", "orders", true, false},
    {"app", "items", true, true},
    {"app", "theirs", false, false},
    {"other", "t", true, false},
};
#define NROWS (sizeof(ROWS) / sizeof(ROWS[0]))

static void create(const char *pattern, bool superuser, int version, const pg_table_row *rows, size_t n,
		   const char *want_sql, const char *want_not_owned, const char *want_err)
{
	char *pats[] = {(char *)pattern};
	cfg_strlist publish = {pats, 1};
	pg_publication_plan p;
	source_pg_publication_plan_build(&p, "pub", &publish, rows, n, superuser, version, false);
	CHECK_INT(p.refused, want_err != NULL);
	if (!p.refused) {
		CHECK_STR(p.sql.data, want_sql);
	} else {
		char err[1024];
		source_pg_publication_refusal(&p, "pub", err, sizeof(err));
		CHECK_STR(err, want_err);
	}
	buf nw = {0};
	for (size_t i = 0; !p.refused && i + 1 < p.not_owned.n; i += 2) {
		source_pg_publication_not_owned(&nw, "pub", p.not_owned.v[i], p.not_owned.v[i + 1]);
		buf_putc(&nw, '\n');
	}
	CHECK_STR(nw.data ? nw.data : "", want_not_owned);
	buf_free(&nw);
	source_pg_publication_plan_free(&p);
}

#define VIA_ROOT " WITH (publish_via_partition_root = true)"

#define THEIRS_WARNING                                                                                       \
	"table \"app\".\"theirs\" matches source.publish, but cdc's role does not own it, so cdc cannot "    \
	"add "                                                                                               \
	"it to publication \"pub\": its owner or a superuser can run ALTER PUBLICATION \"pub\" ADD TABLE "   \
	"\"app\".\"theirs\"\n"

/* A table named one by one that does not exist is missing, with the closest names; a glob that
 * matches nothing yet waits for its tables (issue 31). */
static void misspelt(void)
{
	char *pats[] = {"app.ordres", "app.new_*", "app.invoices"};
	cfg_strlist publish = {pats, 3};
	pg_publication_plan p;
	source_pg_publication_plan_build(&p, "pub", &publish, ROWS, NROWS, true, 150000, false);
	CHECK_INT(p.no_match.n, 1);
	CHECK_STR(p.no_match.v[0], "app.new_*");
	CHECK_INT(p.missing.n, 2);
	CHECK_STR(p.missing.v[0], "source.publish names table app.ordres, which does not exist: did you mean "
				  "app.orders?");
	CHECK_STR(p.missing.v[1],
		  "source.publish names table app.invoices, which does not exist (nor a table "
		  "of a similar name)");
	source_pg_publication_plan_free(&p);
}

int main(void)
{
	misspelt();
	/* a superuser: the schema follows new tables by itself on 15+; on 14 the tables are listed */
	create("app.*", true, 150000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLES IN SCHEMA \"app\"" VIA_ROOT, "", NULL);
	create("app.*", true, 140000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", \"app\".\"items\", "
	       "\"app\".\"theirs\"" VIA_ROOT,
	       "", NULL);
	create("app.*", false, 140000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", \"app\".\"items\"" VIA_ROOT,
	       THEIRS_WARNING, NULL);
	create("*.*", true, 140000, ROWS, NROWS, "CREATE PUBLICATION \"pub\" FOR ALL TABLES" VIA_ROOT, "",
	       NULL);
	/* source.publish_generated_columns: in what the role creates and in what a superuser would */
	{
		char *pats[] = {"app.*"};
		cfg_strlist publish = {pats, 1};
		pg_publication_plan p;
		source_pg_publication_plan_build(&p, "pub", &publish, ROWS, NROWS, false, 180000, true);
		CHECK_STR(p.sql.data,
			  "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\" "
			  "WITH (publish_via_partition_root = true, publish_generated_columns = stored)");
		CHECK_STR(p.superuser_sql.data,
			  "CREATE PUBLICATION \"pub\" FOR TABLES IN SCHEMA \"app\" WITH "
			  "(publish_via_partition_root = true, publish_generated_columns = stored)");
		source_pg_publication_plan_free(&p);
	}
	/* another role: the tables it owns, the others named with what their owner runs */
	create("app.*", false, 150000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\"" VIA_ROOT,
	       THEIRS_WARNING, NULL);
	create("*.*", false, 170000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\", TABLE "
	       "\"other\".\"t\"" VIA_ROOT,
	       THEIRS_WARNING, NULL);
	/* nothing matches yet: a publication of no table, filled as tables come */
	create("new.*", false, 150000, ROWS, NROWS, "CREATE PUBLICATION \"pub\"" VIA_ROOT, "", NULL);
	/* tables match, the role owns none: the ways out */
	create(
	    "app.the*", false, 150000, ROWS, NROWS, NULL, "",
	    "cdc's role may not create publication pub: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
	    "superuser, and FOR TABLE the tables' ownership, but the role owns none of the 1 tables "
	    "source.publish matches (\"app\".\"theirs\"). Ways out: have a superuser run CREATE PUBLICATION "
	    "\"pub\" FOR TABLE \"app\".\"theirs\"" VIA_ROOT
	    "; or make cdc's role their owner (ALTER TABLE ... OWNER TO "
	    "...); or list in source.publish tables the role owns");
	create(
	    "app.*", false, 150000, &ROWS[2], 1, NULL, "",
	    "cdc's role may not create publication pub: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
	    "superuser, and FOR TABLE the tables' ownership, but the role owns none of the 1 tables "
	    "source.publish matches (\"app\".\"theirs\"). Ways out: have a superuser run CREATE PUBLICATION "
	    "\"pub\" FOR TABLES IN SCHEMA \"app\"" VIA_ROOT
	    "; or make cdc's role their owner (ALTER TABLE ... OWNER TO "
	    "...); or list in source.publish tables the role owns");

	/* keeping it current: the tables it lacks and the role owns are added, the others warned
	 * about once */
	char *pats[] = {"app.*"};
	cfg_strlist publish = {pats, 1}, added = {0}, warned = {0};
	buf sql = {0}, warnings = {0};
	source_pg_publication_additions(&sql, "pub", &publish, ROWS, NROWS, &added, &warned, &warnings);
	CHECK_STR(sql.data, "ALTER PUBLICATION \"pub\" ADD TABLE \"app\".\"orders\"");
	CHECK_INT(added.n, 2);
	CHECK_STR(added.v[0], "app");
	CHECK_STR(added.v[1], "orders");
	CHECK_STR(warnings.data, THEIRS_WARNING);
	buf_reset(&sql);
	buf_reset(&warnings);
	pg_table_row now[] = {{"app", "orders", true, true}, {"app", "theirs", false, false}};
	source_pg_publication_additions(&sql, "pub", &publish, now, 2, &added, &warned, &warnings);
	CHECK_INT(sql.len, 0);
	CHECK_INT(warnings.len, 0);
	CHECK_INT(added.n, 2);
	buf_free(&sql);
	buf_free(&warnings);
	cfg_strlist_free(&added);
	cfg_strlist_free(&warned);

	/* partitioned tables: the root is published, its partitions (of two levels) through it; a
	 * partition whose root no pattern matches is published itself */
	static const pg_table_row TREE[] = {
	    {"app", "ev", true, false, NULL, NULL},	   {"app", "ev_1", true, false, "app", "ev"},
	    {"app", "ev_2", true, false, "app", "ev"},	   {"app", "ev_2a", true, false, "app", "ev_2"},
	    {"app", "lone", true, false, "other", "root"}, {"other", "root", true, false, NULL, NULL},
	};
	size_t ntree = sizeof(TREE) / sizeof(TREE[0]);
	create("app.*", true, 140000, TREE, ntree,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"ev\", \"app\".\"lone\"" VIA_ROOT, "", NULL);
	create("app.ev_2*", false, 170000, TREE, ntree,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"ev_2\"" VIA_ROOT, "", NULL);
	create("*.*", false, 170000, TREE, ntree,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"ev\", TABLE \"other\".\"root\"" VIA_ROOT, "",
	       NULL);
	source_pg_publication_additions(&sql, "pub", &publish, TREE, ntree, &added, &warned, &warnings);
	CHECK_STR(sql.data, "ALTER PUBLICATION \"pub\" ADD TABLE \"app\".\"ev\", \"app\".\"lone\"");
	buf_reset(&sql);
	/* once the root is in the publication, so are its partitions: nothing is added again (cdc
	 * used to add the root at every turn, since the server lists its partitions instead) */
	pg_table_row held[sizeof(TREE) / sizeof(TREE[0])];
	memcpy(held, TREE, sizeof(TREE));
	for (size_t i = 0; i < 5; i++)
		held[i].published = true;
	source_pg_publication_additions(&sql, "pub", &publish, held, ntree, &added, &warned, &warnings);
	CHECK_INT(sql.len, 0);
	buf_free(&sql);
	buf_free(&warnings);
	cfg_strlist_free(&added);
	cfg_strlist_free(&warned);
	return TEST_SUMMARY("test_publication");
}
