/* See ddl.h. json-c parses, with a small depth limit. Every member is then checked for its type, range and
 * length before it is copied into the arena. */
#include "decoder/ddl.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/pgoutput.h"

#define NAME_MAX_BYTES 63 /* NAMEDATALEN - 1 */
#define TEXT_MAX_BYTES 4096
#define STATEMENT_MAX_BYTES (4 * DDL_MAX_STATEMENT_CHARS)

typedef struct reader {
	arena *a;
	char *err;
	size_t errlen;
	const char *where; /* "" or "columns[3]." */
} reader;

static bool bad(reader *r, const char *key, const char *what)
{
	return util_errf(r->err, r->errlen, "%s%s: %s", r->where, key, what);
}

/* A string member of at most max bytes of UTF-8 (no NUL), copied into the arena. When absent (or null) it is
 * "", unless required. */
static bool get_str(reader *r, json_object *o, const char *key, size_t max, bool required, const char **out)
{
	json_object *v;
	*out = "";
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return !required || bad(r, key, "missing");
	if (!json_object_is_type(v, json_type_string))
		return bad(r, key, "expected a string");
	const char *s = json_object_get_string(v);
	size_t len = (size_t)json_object_get_string_len(v);
	if (len > max) {
		char why[64];
		snprintf(why, sizeof(why), "longer than %zu bytes", max);
		return bad(r, key, why);
	}
	if (!util_utf8_valid(s, len))
		return bad(r, key, "not valid UTF-8 text");
	*out = arena_strndup(r->a, s, len);
	return true;
}

/* An integer member from min to max. When absent (or null) it is dflt, unless required. */
static bool get_int(reader *r, json_object *o, const char *key, int64_t min, int64_t max, bool required,
		    int64_t dflt, int64_t *out)
{
	json_object *v;
	*out = dflt;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return !required || bad(r, key, "missing");
	int64_t n = json_object_get_int64(v);
	if (!json_object_is_type(v, json_type_int) || n < min || n > max) {
		char why[96];
		snprintf(why, sizeof(why), "expected an integer from %lld to %lld", (long long)min,
			 (long long)max);
		return bad(r, key, why);
	}
	*out = n;
	return true;
}

static bool get_bool(reader *r, json_object *o, const char *key, bool *out)
{
	json_object *v;
	*out = false;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return true;
	if (!json_object_is_type(v, json_type_boolean))
		return bad(r, key, "expected true or false");
	*out = json_object_get_boolean(v);
	return true;
}

static bool get_column(reader *r, json_object *o, ddl_column *c)
{
	int64_t attnum, oid, typmod;
	if (!json_object_is_type(o, json_type_object))
		return bad(r, "", "expected an object");
	bool ok = get_int(r, o, "attnum", 1, 32767, true, 0, &attnum) &&
		  get_str(r, o, "name", NAME_MAX_BYTES, true, &c->name) &&
		  get_str(r, o, "type", TEXT_MAX_BYTES, false, &c->type) &&
		  get_int(r, o, "type_oid", 0, UINT32_MAX, false, 0, &oid) &&
		  get_int(r, o, "typmod", INT32_MIN, INT32_MAX, false, -1, &typmod) &&
		  get_bool(r, o, "not_null", &c->not_null);
	if (!ok)
		return false;
	if (!c->name[0])
		return bad(r, "name", "empty");
	c->attnum = (int32_t)attnum;
	c->type_oid = (uint32_t)oid;
	c->typmod = (int32_t)typmod;
	return true;
}

static bool get_columns(reader *r, json_object *o, ddl_msg *m)
{
	json_object *v;
	if (!json_object_object_get_ex(o, "columns", &v) || json_object_is_type(v, json_type_null))
		return true;
	if (!json_object_is_type(v, json_type_array))
		return bad(r, "columns", "expected an array");
	size_t n = json_object_array_length(v);
	if (n > PGO_MAX_COLUMNS)
		return bad(r, "columns", "more than 1664 columns");
	m->has_columns = true;
	m->ncols = n;
	m->cols = arena_alloc(r->a, (n ? n : 1) * sizeof(*m->cols));
	char where[32];
	for (size_t i = 0; i < n; i++) {
		snprintf(where, sizeof(where), "columns[%zu].", i);
		r->where = where;
		if (!get_column(r, json_object_array_get_idx(v, i), &m->cols[i]))
			return false;
		if (i > 0 && m->cols[i].attnum <= m->cols[i - 1].attnum)
			return bad(r, "attnum", "not after the previous column's");
	}
	r->where = "";
	return true;
}

bool pgo_ddl_parse(arena *a, const char *content, size_t len, ddl_msg *out, char *err, size_t errlen)
{
	*out = (ddl_msg){0};
	char why[128];
	json_object *root = json_parse(content, len, 8, why, sizeof(why));
	reader r = {a, err, errlen, ""};
	int64_t version = 0, relid = 0, subid = 0;
	bool ok = false;
	if (!root) {
		util_errf(err, errlen, "DDL message: %s", why);
		goto out;
	}
	if (!json_object_is_type(root, json_type_object)) {
		util_errf(err, errlen, "DDL message: expected a JSON object");
		goto out;
	}
	ok = get_int(&r, root, "v", 1, INT32_MAX, true, 0, &version) &&
	     get_str(&r, root, "event", NAME_MAX_BYTES, true, &out->event) &&
	     get_str(&r, root, "tag", NAME_MAX_BYTES, true, &out->tag) &&
	     get_str(&r, root, "object_type", NAME_MAX_BYTES, false, &out->object_type) &&
	     get_str(&r, root, "identity", TEXT_MAX_BYTES, false, &out->identity) &&
	     get_str(&r, root, "schema", NAME_MAX_BYTES, true, &out->schema) &&
	     get_str(&r, root, "table", NAME_MAX_BYTES, true, &out->table) &&
	     get_int(&r, root, "relid", 1, UINT32_MAX, true, 0, &relid) &&
	     get_int(&r, root, "subid", 0, 32767, false, 0, &subid) &&
	     get_str(&r, root, "statement", STATEMENT_MAX_BYTES, false, &out->statement) &&
	     get_columns(&r, root, out);
	if (ok && (!out->schema[0] || !out->table[0]))
		ok = util_errf(err, errlen, "%s: empty", out->schema[0] ? "table" : "schema");
	out->relid = (uint32_t)relid;
	out->subid = (int32_t)subid;
	if (!ok) {
		size_t n = strlen(err);
		snprintf(err + n, errlen - n, " (in the %s message)", DDL_PREFIX);
	}
out:
	json_object_put(root);
	return ok;
}

Cdc__V1__Event *pgo_ddl_event(arena *a, const ddl_msg *m)
{
	Cdc__V1__Event *e = arena_alloc(a, sizeof(*e));
	*e = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
	e->op = CDC__V1__OP__OP_DDL;
	e->schema = (char *)m->schema;
	e->table = (char *)m->table;
	e->relation_id = m->relid;
	Cdc__V1__Ddl *d = arena_alloc(a, sizeof(*d));
	*d = (Cdc__V1__Ddl)CDC__V1__DDL__INIT;
	d->command_tag = (char *)m->tag;
	d->object_type = (char *)m->object_type;
	d->object_identity = (char *)m->identity;
	d->statement = (char *)m->statement;
	d->event = (char *)m->event;
	d->n_columns = m->ncols;
	d->columns = arena_alloc(a, (m->ncols ? m->ncols : 1) * sizeof(*d->columns));
	Cdc__V1__Ddl__Column *c = arena_alloc(a, (m->ncols ? m->ncols : 1) * sizeof(*c));
	for (size_t i = 0; i < m->ncols; i++) {
		c[i] = (Cdc__V1__Ddl__Column)CDC__V1__DDL__COLUMN__INIT;
		c[i].attnum = m->cols[i].attnum;
		c[i].name = (char *)m->cols[i].name;
		c[i].type = (char *)m->cols[i].type;
		c[i].type_oid = m->cols[i].type_oid;
		c[i].typmod = m->cols[i].typmod;
		c[i].not_null = m->cols[i].not_null;
		d->columns[i] = &c[i];
	}
	e->ddl = d;
	return e;
}
