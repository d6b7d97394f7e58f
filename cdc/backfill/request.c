/* The backfill request body (see request.h). json-c parses, with its own depth limit. The parts are then
 * checked one by one. */
#include "cdc/backfill/request.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/sql.h"
#include "cdc/match/predicate.h"
#include "decoder/base/json.h"

/* "schema.table" is two parts of at most 63 bytes, a '.' between. A part may be "quoted", with dots inside.
 * match_table reads the globs. */
static bool pattern_ok(const char *s, size_t len)
{
	bool quoted = false;
	size_t dots = 0, part = 0;
	if (len == 0 || len > 2 * (2 * 63 + 2) + 1 || memchr(s, '\0', len))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '"')
			quoted = !quoted;
		else if (s[i] == '.' && !quoted) {
			if (part == 0)
				return false;
			dots++;
			part = 0;
			continue;
		}
		part++;
	}
	return !quoted && dots == 1 && part > 0;
}

static bool take_tables(json_object *v, bf_request_body *out, char *err, size_t errlen)
{
	if (!json_object_is_type(v, json_type_array))
		return util_errf(err, errlen, "tables: expected an array of \"schema.table\" strings");
	size_t n = json_object_array_length(v);
	if (n > BF_REQUEST_MAX_TABLES)
		return util_errf(err, errlen, "tables: more than %d", BF_REQUEST_MAX_TABLES);
	out->tables = util_xcalloc(n ? n : 1, sizeof(*out->tables));
	for (size_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(v, i);
		if (!json_object_is_type(t, json_type_string))
			return util_errf(err, errlen, "tables[%zu]: expected a string", i);
		const char *s = json_object_get_string(t);
		size_t len = (size_t)json_object_get_string_len(t);
		if (!util_utf8_valid(s, len) || !pattern_ok(s, len))
			return util_errf(err, errlen, "tables[%zu]: not of the form schema.table", i);
		out->tables[out->ntables++] = util_xstrdup(s);
	}
	return true;
}

static bool take_where(json_object *v, bf_request_body *out, char *err, size_t errlen)
{
	if (json_object_is_type(v, json_type_null))
		return true;
	if (!json_object_is_type(v, json_type_string))
		return util_errf(err, errlen, "where: expected a string");
	const char *s = json_object_get_string(v);
	size_t len = (size_t)json_object_get_string_len(v);
	if (!util_utf8_valid(s, len))
		return util_errf(err, errlen, "where: not valid UTF-8 text");
	char perr[256];
	pred *p = match_predicate_parse(s, perr, sizeof(perr));
	if (!p)
		return util_errf(err, errlen, "where: %s", perr);
	match_predicate_free(p);
	out->where = util_xstrdup(s);
	return true;
}

bool backfill_request_parse(const char *body, size_t len, bf_request_body *out, char *err, size_t errlen)
{
	*out = (bf_request_body){0};
	size_t i = 0;
	while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
		i++;
	if (i == len)
		return true; /* no body means every table, no further where */
	char why[128];
	json_object *root = json_parse(body, len, JSON_TOKENER_DEFAULT_DEPTH, why, sizeof(why));
	bool ok = false;
	if (!root) {
		util_errf(err, errlen, "body: %s", why);
		goto out;
	}
	if (!json_object_is_type(root, json_type_object)) {
		util_errf(err, errlen, "body: expected an object with \"tables\" and \"where\"");
		goto out;
	}
	ok = true;
	json_object_object_foreach(root, key, val)
	{
		if (!ok)
			break;
		if (strcmp(key, "tables") == 0)
			ok = take_tables(val, out, err, errlen);
		else if (strcmp(key, "where") == 0)
			ok = take_where(val, out, err, errlen);
		else
			ok =
			    util_errf(err, errlen,
				      "unknown key '%.64s' (a backfill takes \"tables\" and \"where\")", key);
	}
out:
	json_object_put(root);
	if (!ok)
		backfill_request_free(out);
	return ok;
}

void backfill_request_free(bf_request_body *r)
{
	for (size_t i = 0; i < r->ntables; i++)
		free(r->tables[i]);
	free(r->tables);
	free(r->where);
	*r = (bf_request_body){0};
}

void backfill_request_json(const bf_request_body *r, buf *out)
{
	bool first = true, tf = true;
	buf_putc(out, '{');
	json_key(out, &first, "tables");
	buf_putc(out, '[');
	for (size_t i = 0; i < r->ntables; i++) {
		json_sep(out, &tf);
		json_str(out, r->tables[i]);
	}
	buf_putc(out, ']');
	json_key_str(out, &first, "where", r->where);
	buf_putc(out, '}');
}
