/* test_schema.c: schema events from Relation messages (types as format_type prints them, keys,
 * replica identity, NOT NULL from a DDL event that lists the same columns), their ids, the DDL
 * messages' parser (what it accepts and each refusal's message) and renames told by column
 * number, or by name at a table's first DDL event. */
#include "decoder/ddl.h"
#include "decoder/pgtypes.h"
#include "decoder/schema.h"

#include <stdlib.h>

#include "test.h"

/* orders (id int4 key, amount numeric(10,2), note varchar(20), mood public.mood) */
static pgo_relcol order_cols[] = {
    {1, "id", PGT_INT4, -1},
    {0, "amount", PGT_NUMERIC, 655366},
    {0, "note", PGT_VARCHAR, 24},
    {0, "mood", 16400, -1},
};

static pgo_relcache *cache(void)
{
	pgo_relcache *rc = pgo_relcache_new();
	pgo_msg t = {.type = PGO_TYPE, .typ = {.oid = 16400, .nspname = "public", .typname = "mood"}};
	pgo_relcache_put_type(rc, &t);
	pgo_msg r = {.type = PGO_RELATION};
	r.relation.relid = 16385;
	r.relation.nspname = "public";
	r.relation.relname = "orders";
	r.relation.replident = 'd';
	r.relation.ncols = 4;
	memcpy(r.relation.cols, order_cols, sizeof(order_cols));
	pgo_relcache_put(rc, &r);
	return rc;
}

static void test_event(void)
{
	arena *a = arena_new(4096);
	pgo_relcache *rc = cache();
	const pgo_rel *rel = pgo_relcache_get(rc, 16385);
	Cdc__V1__Event *e = pgo_schema_event(a, rc, rel, NULL);
	CHECK_INT(e->op, CDC__V1__OP__OP_SCHEMA);
	CHECK_STR(e->schema, "public");
	CHECK_STR(e->table, "orders");
	CHECK_INT(e->relation_id, 16385);
	Cdc__V1__Schema *s = e->table_schema;
	CHECK_STR(s->replica_identity, "default");
	CHECK_INT(s->n_columns, 4);
	const char *types[] = {"integer", "numeric(10,2)", "character varying(20)", "mood"};
	for (size_t i = 0; i < 4 && i < s->n_columns; i++) {
		CHECK_STR(s->columns[i]->name, order_cols[i].name);
		CHECK_STR(s->columns[i]->type, types[i]);
		CHECK_INT(s->columns[i]->type_oid, order_cols[i].type_oid);
		CHECK_INT(s->columns[i]->typmod, order_cols[i].typmod);
		CHECK_INT(s->columns[i]->key, i == 0);
		CHECK_INT(s->columns[i]->nullable_present_case, 0); /* no DDL event: not known */
		CHECK_STR(s->columns[i]->renamed_from, "");
	}
	/* The id: stable across runs and machines (consumers keep it), and it changes with the shape. */
	uint64_t id = pgo_schema_id(e);
	CHECK(id == UINT64_C(0xc45f990b11c2f9fb) ||
	      (fprintf(stderr, "id %016llx\n", (unsigned long long)id), 0));
	s->columns[1]->typmod = 655370; /* numeric(10,6) */
	CHECK(pgo_schema_id(e) != id);
	s->columns[1]->typmod = 655366;
	s->columns[0]->key = false;
	CHECK(pgo_schema_id(e) != id);
	s->columns[0]->key = true;
	s->columns[2]->renamed_from = "memo"; /* not part of the shape */
	CHECK(pgo_schema_id(e) == id);
	s->replica_identity = "full";
	CHECK(pgo_schema_id(e) != id);
	pgo_relcache_free(rc);
	arena_free(a);
}

static bool parse(arena *a, const char *json, ddl_msg *m, char *err, size_t errlen)
{
	return pgo_ddl_parse(a, json, strlen(json), m, err, errlen);
}

static void test_parse(void)
{
	arena *a = arena_new(4096);
	ddl_msg m;
	char err[256] = "";
	CHECK(parse(
	    a,
	    "{\"v\":1,\"event\":\"ddl_command_end\",\"tag\":\"ALTER TABLE\",\"object_type\":\"table "
	    "column\",\"identity\":\"public.orders.note\",\"schema\":\"public\",\"table\":\"orders\","
	    "\"relid\":16385,\"subid\":3,\"statement\":\"ALTER TABLE orders RENAME memo TO note\","
	    "\"columns\":[{\"attnum\":1,\"name\":\"id\",\"type\":\"integer\",\"type_oid\":23,\"typmod\":"
	    "-1,\"not_null\":true},{\"attnum\":3,\"name\":\"note\",\"type\":\"text\",\"type_oid\":25}],"
	    "\"newer\":{\"ignored\":[1]}}",
	    &m, err, sizeof(err)));
	CHECK_STR(err, "");
	CHECK_STR(m.event, "ddl_command_end");
	CHECK_STR(m.tag, "ALTER TABLE");
	CHECK_STR(m.object_type, "table column");
	CHECK_STR(m.identity, "public.orders.note");
	CHECK_STR(m.schema, "public");
	CHECK_STR(m.table, "orders");
	CHECK_INT(m.relid, 16385);
	CHECK_INT(m.subid, 3);
	CHECK(m.has_columns);
	CHECK_INT(m.ncols, 2);
	CHECK_INT(m.cols[1].attnum, 3);
	CHECK_STR(m.cols[1].name, "note");
	CHECK_INT(m.cols[1].typmod, -1); /* absent: none */
	CHECK(m.cols[0].not_null && !m.cols[1].not_null);
	Cdc__V1__Event *e = pgo_ddl_event(a, &m);
	CHECK_INT(e->op, CDC__V1__OP__OP_DDL);
	CHECK_STR(e->ddl->command_tag, "ALTER TABLE");
	CHECK_STR(e->ddl->statement, "ALTER TABLE orders RENAME memo TO note");
	CHECK_INT(e->ddl->n_columns, 2);
	CHECK_INT(e->relation_id, 16385);

	/* a DROP TABLE: no columns */
	CHECK(parse(a,
		    "{\"v\":1,\"event\":\"sql_drop\",\"tag\":\"DROP TABLE\",\"schema\":\"s\",\"table\":\"t\","
		    "\"relid\":7}",
		    &m, err, sizeof(err)));
	CHECK(!m.has_columns && m.ncols == 0);

	static const struct {
		const char *json, *err;
	} bad[] = {
	    {"", "DDL message: not JSON (unexpected end of data)"},
	    {"[1]", "DDL message: expected a JSON object"},
	    {"{\"v\":1} x", "DDL message: not JSON (bytes after the object)"},
	    {"{\"event\":\"e\"}", "v: missing (in the cdc.ddl message)"},
	    {"{\"v\":\"1\"}", "v: expected an integer from 1 to 2147483647 (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":0}",
	     "relid: expected an integer from 1 to 4294967295 (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":\"5\"}",
	     "relid: expected an integer from 1 to 4294967295 (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"\",\"table\":\"t\",\"relid\":5}",
	     "schema: empty (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":"
	     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"relid\":5}",
	     "table: longer than 63 bytes (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\\u0000\",\"table\":\"t\",\"relid\":5}",
	     "schema: not valid UTF-8 text (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":5,"
	     "\"columns\":{}}",
	     "columns: expected an array (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":5,"
	     "\"columns\":[{\"attnum\":2,\"name\":\"a\"},{\"attnum\":2,\"name\":\"b\"}]}",
	     "columns[1].attnum: not after the previous column's (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":5,"
	     "\"columns\":[{\"attnum\":0,\"name\":\"a\"}]}",
	     "columns[0].attnum: expected an integer from 1 to 32767 (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":5,"
	     "\"columns\":[{\"attnum\":1,\"name\":\"a\",\"not_null\":1}]}",
	     "columns[0].not_null: expected true or false (in the cdc.ddl message)"},
	    {"{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"s\",\"table\":\"t\",\"relid\":5,"
	     "\"columns\":[7]}",
	     "columns[0].: expected an object (in the cdc.ddl message)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(!parse(a, bad[i].json, &m, err, sizeof(err)));
		CHECK_STR(err, bad[i].err);
	}
	/* bytes that are not UTF-8 */
	const char latin1[] =
	    "{\"v\":1,\"event\":\"e\",\"tag\":\"t\",\"schema\":\"\xe9\",\"table\":\"t\",\"relid\":5}";
	CHECK(!parse(a, latin1, &m, err, sizeof(err)));
	CHECK_STR(err, "schema: not valid UTF-8 text (in the cdc.ddl message)");
	arena_free(a);
}

/* A DDL event of orders (relid 16385) listing "attnum:name[!]" columns (! NOT NULL). */
static void ddl(sch_tables *t, arena *a, const pgo_rel *before, int subid, const char *cols)
{
	ddl_msg m = {.event = "ddl_command_end",
		     .tag = "ALTER TABLE",
		     .object_type = "table",
		     .schema = "public",
		     .table = "orders",
		     .relid = 16385,
		     .subid = subid,
		     .has_columns = true};
	m.cols = arena_alloc(a, 16 * sizeof(*m.cols));
	char copy[256];
	snprintf(copy, sizeof(copy), "%s", cols);
	for (char *save, *c = strtok_r(copy, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
		ddl_column *d = &m.cols[m.ncols++];
		d->attnum = atoi(c);
		char *name = strchr(c, ':') + 1;
		d->not_null = name[strlen(name) - 1] == '!';
		if (d->not_null)
			name[strlen(name) - 1] = '\0';
		d->name = arena_strndup(a, name, strlen(name));
		for (size_t i = 0; i < sizeof(order_cols) / sizeof(order_cols[0]); i++)
			if (strcmp(order_cols[i].name, name) == 0)
				d->type_oid = order_cols[i].type_oid;
	}
	pgo_schema_tables_ddl(t, &m, before);
}

static const char *from(const sch_tables *t, uint64_t since, const char *name)
{
	const char *f = pgo_schema_renamed_from(t, 16385, since, name);
	return f ? f : "(none)";
}

static void test_renames(void)
{
	arena *a = arena_new(4096);
	pgo_relcache *rc = cache();
	const pgo_rel *rel = pgo_relcache_get(rc, 16385);
	sch_tables *t = pgo_schema_tables_new();
	CHECK_INT(pgo_schema_tables_generation(t), 0);
	CHECK_STR(from(t, 0, "note"), "(none)");

	/* The table's first DDL event: the columns before it by name (the Relation message's); the one
	 * that went is the one the RENAME COLUMN named by number (3). */
	ddl(t, a, rel, 3, "1:id!,2:amount,3:memo,4:mood");
	CHECK_INT(pgo_schema_tables_generation(t), 1);
	CHECK_STR(from(t, 0, "memo"), "note");
	CHECK_STR(from(t, 0, "id"), "(none)");
	CHECK_STR(from(t, 1, "memo"), "(none)"); /* not since generation 1 */
	/* by number from now on: memo -> text, then note added again: a new column of an old name */
	ddl(t, a, NULL, 3, "1:id!,2:amount,3:text,4:mood");
	ddl(t, a, NULL, 0, "1:id!,2:amount,3:text,4:mood,6:note");
	CHECK_STR(from(t, 0, "text"), "note");
	CHECK_STR(from(t, 1, "text"), "memo");
	CHECK_STR(from(t, 0, "note"), "(none)"); /* added since */
	/* drop amount, add amount: a new column too */
	ddl(t, a, NULL, 0, "1:id!,3:text,4:mood,6:note,7:amount");
	CHECK_STR(from(t, 3, "amount"), "(none)");
	/* a swap through a third name */
	ddl(t, a, NULL, 3, "1:id!,3:tmp,4:mood,6:note,7:amount");
	ddl(t, a, NULL, 4, "1:id!,3:tmp,4:text,6:note,7:amount");
	ddl(t, a, NULL, 3, "1:id!,3:mood,4:text,6:note,7:amount");
	CHECK_STR(from(t, 4, "mood"), "text");
	CHECK_STR(from(t, 4, "text"), "mood");

	/* a schema event takes NOT NULL from a DDL event that lists its columns, names and types */
	Cdc__V1__Event *e = pgo_schema_event(a, rc, rel, t);
	CHECK_INT(e->table_schema->columns[0]->nullable_present_case, 0); /* other names now */
	sch_tables *t2 = pgo_schema_tables_new();
	ddl(t2, a, rel, 0, "1:id!,2:amount,3:note,4:mood");
	e = pgo_schema_event(a, rc, rel, t2);
	CHECK_INT(e->table_schema->columns[0]->nullable_present_case,
		  CDC__V1__SCHEMA__COLUMN__NULLABLE_PRESENT_NULLABLE);
	CHECK(!e->table_schema->columns[0]->nullable && e->table_schema->columns[1]->nullable);
	/* the table dropped: what was known of it goes */
	ddl_msg drop = {
	    .event = "sql_drop", .tag = "DROP TABLE", .schema = "public", .table = "orders", .relid = 16385};
	pgo_schema_tables_ddl(t2, &drop, rel);
	e = pgo_schema_event(a, rc, rel, t2);
	CHECK_INT(e->table_schema->columns[0]->nullable_present_case, 0);

	/* a first DDL event with no Relation message before it tells nothing of renames */
	sch_tables *t3 = pgo_schema_tables_new();
	ddl(t3, a, NULL, 3, "1:id,3:note");
	CHECK_STR(pgo_schema_renamed_from(t3, 16385, 0, "note") ? "?" : "(none)", "(none)");
	/* a subscription whose schema event is older than the log keeps gets no renamed_from */
	for (int i = 0; i < 300; i++)
		ddl(t3, a, NULL, 3, i % 2 ? "1:id,3:note" : "1:id,3:memo");
	CHECK_STR(pgo_schema_renamed_from(t3, 16385, 1, "note") ? "?" : "(none)", "(none)");
	CHECK_STR(from(t3, pgo_schema_tables_generation(t3) - 1, "note"), "memo");

	pgo_schema_tables_free(t);
	pgo_schema_tables_free(t2);
	pgo_schema_tables_free(t3);
	pgo_relcache_free(rc);
	arena_free(a);
}

int main(void)
{
	test_event();
	test_parse();
	test_renames();
	return TEST_SUMMARY("test_schema");
}
