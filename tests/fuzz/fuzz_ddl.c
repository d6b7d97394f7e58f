/* fuzz_ddl.c: libFuzzer harness for the messages of cdc's DDL event trigger (pgo_ddl_parse): arbitrary
 * bytes as a message's content. A refusal always says why; what is accepted holds only valid UTF-8,
 * columns in attnum order, and makes an event that packs and unpacks to the same bytes; and it
 * goes through what the pipeline does with it (pgo_schema_tables_ddl, renames, a schema event). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/ddl.h"
#include "decoder/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s)
{
	if (!s || !util_utf8_valid(s, strlen(s)))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	arena *a = arena_new(4096);
	ddl_msg m;
	char err[256] = "";
	if (!pgo_ddl_parse(a, (const char *)data, size, &m, err, sizeof(err))) {
		if (!err[0])
			abort(); /* a refusal always says why */
		arena_free(a);
		return 0;
	}
	check_text(m.event), check_text(m.tag), check_text(m.object_type), check_text(m.identity);
	check_text(m.schema), check_text(m.table), check_text(m.statement);
	if (!m.schema[0] || !m.table[0] || m.relid == 0 || m.ncols > 1664)
		abort();
	for (size_t i = 0; i < m.ncols; i++) {
		check_text(m.cols[i].name), check_text(m.cols[i].type);
		if (m.cols[i].attnum < 1 || (i && m.cols[i].attnum <= m.cols[i - 1].attnum))
			abort();
	}
	Cdc__V1__Event *e = pgo_ddl_event(a, &m);
	size_t n = cdc__v1__event__get_packed_size(e);
	uint8_t *packed = malloc(n + 1), *again = malloc(n + 1);
	cdc__v1__event__pack(e, packed);
	Cdc__V1__Event *back = cdc__v1__event__unpack(NULL, n, packed);
	if (!back || cdc__v1__event__get_packed_size(back) != n || cdc__v1__event__pack(back, again) != n ||
	    memcmp(packed, again, n) != 0)
		abort();
	cdc__v1__event__free_unpacked(back, NULL);
	free(packed);
	free(again);

	/* what the table knew before: a Relation message of the same relation */
	pgo_relcache *rc = pgo_relcache_new();
	pgo_msg r = {.type = PGO_RELATION};
	r.relation.relid = m.relid;
	r.relation.nspname = "public";
	r.relation.relname = "t";
	r.relation.replident = 'd';
	r.relation.ncols = 2;
	r.relation.cols[0] = (pgo_relcol){1, "id", 23, -1};
	r.relation.cols[1] = (pgo_relcol){0, "note", 25, -1};
	pgo_relcache_put(rc, &r);
	sch_tables *t = pgo_schema_tables_new();
	pgo_schema_tables_ddl(t, &m, pgo_relcache_get(rc, m.relid));
	pgo_schema_tables_ddl(t, &m, NULL); /* twice: by number the second time */
	for (size_t i = 0; i < m.ncols; i++) {
		const char *from = pgo_schema_renamed_from(t, m.relid, 0, m.cols[i].name);
		if (from && strcmp(from, m.cols[i].name) == 0)
			abort(); /* a column is never renamed from its own name */
	}
	Cdc__V1__Event *s = pgo_schema_event(a, rc, pgo_relcache_get(rc, m.relid), t);
	if (!s || s->table_schema->n_columns != 2 || !pgo_schema_id(s))
		abort();
	pgo_schema_tables_free(t);
	pgo_relcache_free(rc);
	arena_free(a);
	return 0;
}
