/* test_publication.c: the publication cdc creates and keeps current (cdc/daemon/publication.c):
 * the form each role may create, on PostgreSQL 14 and 15+, the tables added as they come, and the
 * ways out when the role may publish none of them. */
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/publication.h"
#include "test.h"

static const pub_row ROWS[] = {
    {"app", "orders", true, false},
    {"app", "items", true, true},
    {"app", "theirs", false, false},
    {"other", "t", true, false},
};
#define NROWS (sizeof(ROWS) / sizeof(ROWS[0]))

static void create(const char *pattern, bool superuser, int version, const pub_row *rows, size_t n,
		   const char *want_sql, const char *want_warnings, const char *want_err)
{
	char *pats[] = {(char *)pattern};
	cfg_strlist publish = {pats, 1};
	buf sql = {0}, warnings = {0};
	char err[1024] = "";
	bool ok = pub_create_sql(&sql, "pub", &publish, rows, n, superuser, version, &warnings, err, sizeof(err));
	CHECK_INT(ok, want_err == NULL);
	if (ok)
		CHECK_STR(sql.data, want_sql);
	else
		CHECK_STR(err, want_err);
	CHECK_STR(warnings.data ? warnings.data : "", want_warnings);
	buf_free(&sql);
	buf_free(&warnings);
}

#define THEIRS_WARNING                                                                                       \
	"table \"app\".\"theirs\" matches source.publish, but cdc's role does not own it, so cdc cannot add "  \
	"it to publication \"pub\": its owner or a superuser can run ALTER PUBLICATION \"pub\" ADD TABLE "     \
	"\"app\".\"theirs\"\n"

int main(void)
{
	/* a superuser: the schema follows new tables by itself on 15+; on 14 the tables are listed */
	create("app.*", true, 150000, ROWS, NROWS, "CREATE PUBLICATION \"pub\" FOR TABLES IN SCHEMA \"app\"", "",
	       NULL);
	create("app.*", true, 140000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\", TABLE "
	       "\"app\".\"theirs\"",
	       "", NULL);
	create("*.*", true, 140000, ROWS, NROWS, "CREATE PUBLICATION \"pub\" FOR ALL TABLES", "", NULL);
	/* another role: the tables it owns, the others named with what their owner runs */
	create("app.*", false, 150000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\"", THEIRS_WARNING,
	       NULL);
	create("*.*", false, 170000, ROWS, NROWS,
	       "CREATE PUBLICATION \"pub\" FOR TABLE \"app\".\"orders\", TABLE \"app\".\"items\", TABLE "
	       "\"other\".\"t\"",
	       THEIRS_WARNING, NULL);
	/* nothing matches yet: a publication of no table, filled as tables come */
	create("new.*", false, 150000, ROWS, NROWS, "CREATE PUBLICATION \"pub\"",
	       "source.publish pattern new.* matches no table yet: cdc adds the tables it matches to the "
	       "publication as they are created\n",
	       NULL);
	/* tables match, the role owns none: the ways out */
	create("app.the*", false, 150000, ROWS, NROWS, NULL, "",
	       "cdc's role may not create publication pub: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
	       "superuser, and FOR TABLE the tables' ownership, but the role owns none of the 1 tables "
	       "source.publish matches (\"app\".\"theirs\"). Ways out: have a superuser run CREATE PUBLICATION "
	       "\"pub\" FOR TABLE \"app\".\"theirs\"; or make cdc's role their owner (ALTER TABLE ... OWNER TO "
	       "...); or list in source.publish tables the role owns");
	create("app.*", false, 150000, &ROWS[2], 1, NULL, "",
	       "cdc's role may not create publication pub: FOR TABLES IN SCHEMA and FOR ALL TABLES need a "
	       "superuser, and FOR TABLE the tables' ownership, but the role owns none of the 1 tables "
	       "source.publish matches (\"app\".\"theirs\"). Ways out: have a superuser run CREATE PUBLICATION "
	       "\"pub\" FOR TABLES IN SCHEMA \"app\"; or make cdc's role their owner (ALTER TABLE ... OWNER TO "
	       "...); or list in source.publish tables the role owns");

	/* keeping it current: the tables it lacks and the role owns are added, the others warned
	 * about once */
	char *pats[] = {"app.*"};
	cfg_strlist publish = {pats, 1}, added = {0}, warned = {0};
	buf sql = {0}, warnings = {0};
	pub_add_sql(&sql, "pub", &publish, ROWS, NROWS, &added, &warned, &warnings);
	CHECK_STR(sql.data, "ALTER PUBLICATION \"pub\" ADD TABLE \"app\".\"orders\"");
	CHECK_INT(added.n, 2);
	CHECK_STR(added.v[0], "app");
	CHECK_STR(added.v[1], "orders");
	CHECK_STR(warnings.data, THEIRS_WARNING);
	buf_reset(&sql);
	buf_reset(&warnings);
	pub_row now[] = {{"app", "orders", true, true}, {"app", "theirs", false, false}};
	pub_add_sql(&sql, "pub", &publish, now, 2, &added, &warned, &warnings);
	CHECK_INT(sql.len, 0);
	CHECK_INT(warnings.len, 0);
	CHECK_INT(added.n, 2);
	buf_free(&sql);
	buf_free(&warnings);
	cfg_strlist_free(&added);
	cfg_strlist_free(&warned);
	return TEST_SUMMARY("test_publication");
}
