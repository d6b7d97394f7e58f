/* The tables a subscription needs, checked against the catalog (see catalog.h). */
#include "cdc/source/catalog.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/match/match.h"
#include "cdc/match/predicate.h"
#include "cdc/source/pgconn.h"

#define CATALOG_SELECT                                                                                       \
	"SELECT n.nspname, c.relname, c.relkind, c.relreplident, pub_c.member, "                             \
	"(SELECT pg_catalog.json_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a "           \
	"WHERE a.attrelid = c.oid AND a.attnum IN (SELECT pg_catalog.unnest(i.indkey::pg_catalog.int2[]) "   \
	"FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND CASE c.relreplident WHEN 'd' THEN "         \
	"i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END)), an.nspname, ac.relname "            \
	"FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace " PG_PUB_JOIN   \
	"LEFT JOIN pg_catalog.pg_class ac ON ac.oid = pub_c.arrives "                                        \
	"LEFT JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace "                                  \
	"WHERE " PG_USER_TABLES "ORDER BY 1, 2"

const char *source_catalog_sql(int server_version)
{
	static const char sql14[] = PG_PUB_WITH_14 CATALOG_SELECT;
	static const char sql15[] = PG_PUB_WITH_15 CATALOG_SELECT;
	return server_version >= 150000 ? sql15 : sql14;
}

/* A JSON array of strings into l. NULL is an empty list. */
static bool take_names(const char *json, cfg_strlist *l)
{
	if (!json)
		return true;
	json_object *a = json_tokener_parse(json);
	bool ok = a && json_object_is_type(a, json_type_array);
	for (size_t i = 0; ok && i < json_object_array_length(a); i++) {
		json_object *v = json_object_array_get_idx(a, i);
		ok = json_object_is_type(v, json_type_string);
		if (ok)
			cfg_strlist_push(l, json_object_get_string(v));
	}
	json_object_put(a);
	return ok;
}

bool source_catalog_add(catalog *c, const char *const cells[CATALOG_COLS])
{
	for (int i = 0; i < 5; i++)
		if (!cells[i] || (i >= 2 && strlen(cells[i]) != 1))
			return false;
	if (!cells[6] != !cells[7])
		return false;
	catalog_table t = {.relkind = cells[2][0], .replident = cells[3][0], .published = cells[4][0] == 't'};
	if (!take_names(cells[5], &t.identity)) {
		cfg_strlist_free(&t.identity);
		return false;
	}
	t.schema = util_xstrdup(cells[0]);
	t.name = util_xstrdup(cells[1]);
	t.as_schema = cells[6] ? util_xstrdup(cells[6]) : NULL;
	t.as_name = cells[7] ? util_xstrdup(cells[7]) : NULL;
	c->t = util_xrealloc(c->t, (c->n + 1) * sizeof(*c->t));
	c->t[c->n++] = t;
	return true;
}

bool source_catalog_add_result(catalog *c, const PGresult *res)
{
	if (PQnfields(res) != CATALOG_COLS)
		return false;
	for (int i = 0; i < PQntuples(res); i++) {
		const char *cells[CATALOG_COLS];
		for (int k = 0; k < CATALOG_COLS; k++)
			cells[k] = PQgetisnull(res, i, k) ? NULL : PQgetvalue(res, i, k);
		if (!source_catalog_add(c, cells))
			return false;
	}
	return true;
}

void source_catalog_free(catalog *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free(c->t[i].schema);
		free(c->t[i].name);
		free(c->t[i].as_schema);
		free(c->t[i].as_name);
		cfg_strlist_free(&c->t[i].identity);
	}
	free(c->t);
	c->t = NULL;
	c->n = 0;
}

static bool matches_name(const cfg_subscription *s, const char *schema, const char *name)
{
	for (size_t i = 0; i < s->tables.n; i++)
		if (match_table(s->tables.v[i], schema, name))
			return true;
	return false;
}

static bool matches(const cfg_subscription *s, const catalog_table *t)
{
	return matches_name(s, t->schema, t->name);
}

/* s gets t's changes, by matching the name they arrive under. That is t's own when the publication
 * does not hold t, so that a check names what s will need once it does. */
static bool receives(const cfg_subscription *s, const catalog_table *t)
{
	return t->as_name ? matches_name(s, t->as_schema, t->as_name) : matches(s, t);
}

/* t's changes arrive under the name of another table. */
static bool arrives_elsewhere(const catalog_table *t)
{
	return t->as_name && (strcmp(t->as_schema, t->schema) != 0 || strcmp(t->as_name, t->name) != 0);
}

static bool listed(const cfg_strlist *l, const char *name, size_t len)
{
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->v[i]) == len && memcmp(l->v[i], name, len) == 0)
			return true;
	return false;
}

/* The old.columns of where that t's old rows never carry, because t is not REPLICA IDENTITY FULL and
 * they are not identity columns. One problem line for the first. */
static void old_columns(const cfg_subscription *s, const pred *where, const catalog_table *t, buf *problems)
{
	for (size_t i = 0; where && i < match_predicate_count(where); i++) {
		pred_node n = match_predicate_node_at(where, (int32_t)i);
		if (n.kind != PRED_COL || !n.flag || listed(&t->identity, n.s, n.len))
			continue;
		buf q = {0};
		source_pg_append_table(&q, t->schema, t->name);
		buf_printf(
		    problems,
		    "subscription %s reads old.%.*s in its where on table %s, whose replica identity does "
		    "not send that column in the old row: ALTER TABLE %s REPLICA IDENTITY FULL\n",
		    s->name, (int)n.len, n.s, q.data, q.data);
		buf_free(&q);
		return;
	}
}

bool source_catalog_check_identity(const catalog *c, const cfg_subscription *s, buf *problems)
{
	size_t before = problems->len;
	pred *where = s->where ? match_predicate_parse(s->where, NULL, 0) : NULL;
	for (size_t i = 0; i < c->n; i++) {
		const catalog_table *t = &c->t[i];
		if (!receives(s, t) || t->replident == 'f')
			continue;
		buf q = {0};
		source_pg_append_table(&q, t->schema, t->name);
		if (s->changed.n)
			buf_printf(
			    problems,
			    "subscription %s uses changed: on table %s, whose replica identity does not "
			    "send the old row of an update: ALTER TABLE %s REPLICA IDENTITY FULL\n",
			    s->name, q.data, q.data);
		old_columns(s, where, t, problems);
		buf_free(&q);
	}
	match_predicate_free(where);
	return problems->len == before;
}

/* Whether some table of c, published or not, matches pattern. */
static bool any_table(const catalog *c, const char *pattern)
{
	for (size_t i = 0; i < c->n; i++)
		if (match_table(pattern, c->t[i].schema, c->t[i].name))
			return true;
	return false;
}

bool source_catalog_check_exists(const catalog *c, const cfg_subscription *s, buf *problems)
{
	size_t before = problems->len;
	for (size_t p = 0; p < s->tables.n; p++) {
		const char *pattern = s->tables.v[p];
		if (!match_table_literal(pattern) || any_table(c, pattern))
			continue;
		match_suggest m;
		match_suggest_start(&m, pattern);
		for (size_t i = 0; i < c->n; i++)
			match_suggest_add(&m, c->t[i].schema, c->t[i].name);
		char closest[MATCH_SUGGEST * MATCH_QUALIFIED_MAX + 32];
		match_suggest_text(&m, closest, sizeof(closest));
		buf_printf(problems, "subscription %s names table %s, which does not exist%s%s\n", s->name,
			   pattern, m.n ? ": " : " (nor a table of a similar name)", closest);
	}
	return problems->len == before;
}

/* The partitions of root that s matches although it does not match root. They go into names (up to
 * three, quoted), and are counted. */
static size_t missed_partitions(const catalog *c, const cfg_subscription *s, const catalog_table *root,
				buf *names)
{
	size_t n = 0;
	for (size_t i = 0; i < c->n; i++) {
		const catalog_table *t = &c->t[i];
		if (!t->published || !arrives_elsewhere(t) || strcmp(t->as_schema, root->schema) != 0 ||
		    strcmp(t->as_name, root->name) != 0 || !matches(s, t))
			continue;
		if (n < 3) {
			buf_puts(names, n ? ", " : "");
			source_pg_append_table(names, t->schema, t->name);
		}
		n++;
	}
	if (n > 3)
		buf_printf(names, " and %zu more", n - 3);
	return n;
}

void source_catalog_check_partitions(const catalog *c, const cfg_subscription *s, const char *publication,
				     buf *warnings, buf *fixes)
{
	buf q = {0}, pub = {0}, names = {0}, fix = {0};
	source_pg_append_quoted(&pub, publication, '"');
	for (size_t i = 0; i < c->n; i++) {
		const catalog_table *t = &c->t[i];
		if (!t->published)
			continue;
		buf_reset(&q);
		buf_reset(&names);
		buf_reset(&fix);
		source_pg_append_table(&q, t->schema, t->name);
		if (t->relkind == 'p' && !t->as_name && matches(s, t)) {
			buf_printf(
			    warnings,
			    "subscription %s: table %s is partitioned, and publication %s sends its changes "
			    "under its partitions' names (it lacks publish_via_partition_root), so none "
			    "arrives under %s",
			    s->name, q.data, publication, q.data);
			buf_printf(&fix, "ALTER PUBLICATION %s SET (publish_via_partition_root = true)",
				   pub.data);
		} else if (t->relkind == 'p' && t->as_name && !arrives_elsewhere(t) && !matches(s, t) &&
			   missed_partitions(c, s, t, &names)) {
			buf_printf(
			    warnings,
			    "subscription %s: %s %s partitions of %s, and publication %s sends their "
			    "changes under that name (publish_via_partition_root), so the subscription "
			    "gets none of them",
			    s->name, names.data,
			    strchr(names.data, ',') || strstr(names.data, " more") ? "are" : "is one of the",
			    q.data, publication);
			buf_printf(
			    &fix,
			    "subscribe to %s (a where on its partition key picks a partition's rows), or "
			    "publish the partitions without %s",
			    q.data, q.data);
		} else
			continue;
		if (fixes) {
			buf_printf(fixes, "%s\n", fix.data);
			buf_putc(warnings, '\n');
		} else
			buf_printf(warnings, ": %s\n", fix.data);
	}
	buf_free(&q);
	buf_free(&pub);
	buf_free(&names);
	buf_free(&fix);
}

bool source_catalog_check(const catalog *c, const cfg_subscription *s, const char *publication, buf *problems,
			  buf *warnings)
{
	size_t before = problems->len;
	source_catalog_check_identity(c, s, problems);
	source_catalog_check_partitions(c, s, publication, warnings, NULL);
	for (size_t p = 0; p < s->tables.n; p++) {
		bool hit = false;
		for (size_t i = 0; i < c->n && !hit; i++)
			hit = c->t[i].published && match_table(s->tables.v[p], c->t[i].schema, c->t[i].name);
		/* a table named that does not exist, which source_catalog_check_exists reports */
		if (!hit && (!match_table_literal(s->tables.v[p]) || any_table(c, s->tables.v[p])))
			buf_printf(warnings,
				   "subscription %s: table pattern %s matches no table of publication %s, so "
				   "nothing of it is streamed until one is added\n",
				   s->name, s->tables.v[p], publication);
	}
	return problems->len == before;
}
