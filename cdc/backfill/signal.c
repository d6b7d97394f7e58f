/* A signal row's id, type and data, parsed and checked (see signal.h). json-c parses the data with a depth
 * limit. Then each part is checked, its length first. */
#include "cdc/backfill/signal.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/match/match.h"
#include "cdc/match/predicate.h"
#include "decoder/base/json.h"

/* Objects in arrays in the data's object. Deeper is never a signal. */
#define DATA_DEPTH 4
/* A quoted schema.table of two 63-byte parts, each quote doubled. */
#define NAME_MAX_BYTES (2 * (2 * MATCH_NAME_MAX + 2) + 1)

static const char *const type_names[] = {
    [BF_SIGNAL_EXECUTE] = "execute-snapshot", [BF_SIGNAL_STOP] = "stop-snapshot"};

const char *backfill_signal_type(bf_signal_kind kind)
{
	return type_names[kind];
}

/* Why s is not text of 1 to max bytes, valid UTF-8, without control characters. It goes into logs and
 * messages as it is. NULL if it is. why is the buffer for the message. */
static const char *text_problem(const char *s, size_t len, size_t max, char *why, size_t whylen)
{
	if (!s)
		return "missing (NULL)";
	if (len == 0 || len > max) {
		util_errf(why, whylen, "expected 1 to %zu bytes of text, got %zu", max, len);
		return why;
	}
	if (!util_utf8_valid(s, len))
		return "not valid UTF-8 text";
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "control characters are not allowed";
	return NULL;
}

/* A JSON string within max bytes, or NULL with a message about what. */
static const char *json_text(json_object *v, size_t max, const char *what, size_t at, char *err,
			     size_t errlen)
{
	char why[64];
	if (!json_object_is_type(v, json_type_string)) {
		util_errf(err, errlen, "data: %s[%zu]: expected a string", what, at);
		return NULL;
	}
	const char *s = json_object_get_string(v), *problem;
	if ((problem = text_problem(s, (size_t)json_object_get_string_len(v), max, why, sizeof(why)))) {
		util_errf(err, errlen, "data: %s[%zu]: %s", what, at, problem);
		return NULL;
	}
	return s;
}

/* The tables. Each is one table's name, none twice. */
static bool take_tables(json_object *v, bf_signal *out, char *err, size_t errlen)
{
	if (!json_object_is_type(v, json_type_array))
		return util_errf(err, errlen,
				 "data: data-collections: expected an array of \"schema.table\" names");
	size_t n = json_object_array_length(v);
	if (n > BF_SIGNAL_MAX_TABLES)
		return util_errf(err, errlen, "data: data-collections: more than %d tables",
				 BF_SIGNAL_MAX_TABLES);
	out->tables = util_xcalloc(n ? n : 1, sizeof(*out->tables));
	for (size_t i = 0; i < n; i++) {
		const char *s = json_text(json_object_array_get_idx(v, i), NAME_MAX_BYTES, "data-collections",
					  i, err, errlen);
		char why[160], schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
		const char *problem = s ? match_table_name_problem(s, why, sizeof(why)) : NULL;
		if (!s)
			return false;
		if (problem)
			return util_errf(
			    err, errlen,
			    "data: data-collections[%zu]: %.200s is not a table's name (%s): cdc takes "
			    "schema.table names, not regular expressions",
			    i, s, problem);
		if (!match_table_split(s, schema, table))
			return util_errf(err, errlen,
					 "data: data-collections[%zu]: not of the form schema.table", i);
		for (size_t k = 0; k < out->ntables; k++)
			if (match_table(out->tables[k].name, schema, table))
				return util_errf(err, errlen,
						 "data: data-collections[%zu]: %s is named twice", i, s);
		out->tables[out->ntables++].name = util_xstrdup(s);
	}
	return true;
}

/* The table of the signal that name names, or NULL. */
static bf_signal_table *find_table(bf_signal *out, const char *name)
{
	char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
	if (!match_table_split(name, schema, table))
		return NULL;
	for (size_t k = 0; k < out->ntables; k++)
		if (match_table(out->tables[k].name, schema, table))
			return &out->tables[k];
	return NULL;
}

/* A condition in cdc's where language, or false with why. */
static bool where_ok(const char *s, const char *what, size_t at, char *err, size_t errlen)
{
	char why[256];
	pred *p = match_predicate_parse(s, why, sizeof(why));
	if (!p)
		return util_errf(err, errlen,
				 "data: %s[%zu]: %s (a filter is cdc's where language: new.color = 'blue')",
				 what, at, why);
	match_predicate_free(p);
	return true;
}

/* The list of [{"data-collection": "s.t", "filter": "..."}]. Each names a table of data-collections, once. */
static bool take_conditions(json_object *v, bf_signal *out, char *err, size_t errlen)
{
	if (!json_object_is_type(v, json_type_array))
		return util_errf(
		    err, errlen,
		    "data: additional-conditions: expected an array of {\"data-collection\", \"filter\"}");
	size_t n = json_object_array_length(v);
	for (size_t i = 0; i < n; i++) {
		json_object *c = json_object_array_get_idx(v, i), *name, *filter;
		if (!json_object_is_type(c, json_type_object) || json_object_object_length(c) != 2 ||
		    !json_object_object_get_ex(c, "data-collection", &name) ||
		    !json_object_object_get_ex(c, "filter", &filter))
			return util_errf(err, errlen,
					 "data: additional-conditions[%zu]: expected {\"data-collection\": "
					 "\"schema.table\", \"filter\": \"...\"}",
					 i);
		const char *t = json_text(name, NAME_MAX_BYTES, "additional-conditions", i, err, errlen);
		const char *f =
		    t ? json_text(filter, PRED_MAX_TEXT, "additional-conditions", i, err, errlen) : NULL;
		if (!f || !where_ok(f, "additional-conditions", i, err, errlen))
			return false;
		bf_signal_table *tb = find_table(out, t);
		if (!tb)
			return util_errf(
			    err, errlen,
			    "data: additional-conditions[%zu]: %.200s is not one of data-collections", i, t);
		if (tb->where)
			return util_errf(err, errlen,
					 "data: additional-conditions[%zu]: a second condition for %s", i,
					 tb->name);
		tb->where = util_xstrdup(f);
	}
	return true;
}

/* "additional-condition" is one condition for every table (Debezium 2.0 and 2.1). */
static bool take_condition(json_object *v, bf_signal *out, char *err, size_t errlen)
{
	const char *f = json_text(v, PRED_MAX_TEXT, "additional-condition", 0, err, errlen);
	if (!f || !where_ok(f, "additional-condition", 0, err, errlen))
		return false;
	for (size_t k = 0; k < out->ntables; k++)
		out->tables[k].where = util_xstrdup(f);
	return true;
}

static bool take_subscriptions(json_object *v, bf_signal *out, char *err, size_t errlen)
{
	if (!json_object_is_type(v, json_type_array))
		return util_errf(err, errlen, "data: subscriptions: expected an array of subscription names");
	size_t n = json_object_array_length(v);
	if (n > BF_SIGNAL_MAX_SUBS)
		return util_errf(err, errlen, "data: subscriptions: more than %d", BF_SIGNAL_MAX_SUBS);
	out->subscriptions = util_xcalloc(n ? n : 1, sizeof(*out->subscriptions));
	for (size_t i = 0; i < n; i++) {
		const char *s = json_text(json_object_array_get_idx(v, i), BF_SIGNAL_MAX_SUB_NAME,
					  "subscriptions", i, err, errlen);
		if (!s)
			return false;
		out->subscriptions[out->nsubscriptions++] = util_xstrdup(s);
	}
	return true;
}

/* The snapshot's type. Only Debezium's default, incremental, is what cdc's backfills are. */
static bool take_type(json_object *v, char *err, size_t errlen)
{
	const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
	if (s && strcmp(s, "incremental") == 0)
		return true;
	if (s && strcmp(s, "blocking") == 0)
		return util_errf(err, errlen,
				 "data: type: blocking is not done: cdc's backfills never pause the stream "
				 "(leave type out, or write incremental)");
	return util_errf(err, errlen, "data: type: expected \"incremental\"");
}

static bool parse_data(json_object *root, bf_signal *out, char *err, size_t errlen)
{
	json_object *tables = NULL, *conditions = NULL, *condition = NULL, *subs = NULL, *type = NULL;
	json_object_object_foreach(root, key, val)
	{
		json_object **slot = strcmp(key, "data-collections") == 0	 ? &tables
				     : strcmp(key, "additional-conditions") == 0 ? &conditions
				     : strcmp(key, "additional-condition") == 0	 ? &condition
				     : strcmp(key, "subscriptions") == 0	 ? &subs
				     : strcmp(key, "type") == 0			 ? &type
										 : NULL;
		if (!slot)
			return util_errf(
			    err, errlen,
			    "data: unknown key '%.64s' (a signal's data takes data-collections, type, "
			    "additional-conditions and subscriptions)",
			    key);
		*slot = val;
	}
	if (out->kind == BF_SIGNAL_EXECUTE && !tables)
		return util_errf(err, errlen, "data: data-collections: missing (the tables to backfill)");
	if (out->kind == BF_SIGNAL_STOP && (conditions || condition))
		return util_errf(err, errlen, "data: stop-snapshot takes no conditions");
	if (conditions && condition)
		return util_errf(err, errlen,
				 "data: additional-condition and additional-conditions: write one");
	if ((type && !take_type(type, err, errlen)) || (tables && !take_tables(tables, out, err, errlen)) ||
	    (conditions && !take_conditions(conditions, out, err, errlen)) ||
	    (condition && !take_condition(condition, out, err, errlen)) ||
	    (subs && !take_subscriptions(subs, out, err, errlen)))
		return false;
	if (out->kind == BF_SIGNAL_EXECUTE && !out->ntables)
		return util_errf(err, errlen, "data: data-collections: empty (the tables to backfill)");
	return true;
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

bool backfill_signal_parse(const char *id, size_t id_len, const char *type, size_t type_len, const char *data,
			   size_t data_len, bf_signal *out, char *err, size_t errlen)
{
	char why[128];
	const char *problem = text_problem(id, id_len, BF_SIGNAL_MAX_ID, why, sizeof(why));
	*out = (bf_signal){0};
	if (problem)
		return util_errf(err, errlen, "id: %s", problem);
	bool known = false;
	for (int k = BF_SIGNAL_EXECUTE; k <= BF_SIGNAL_STOP && !known; k++)
		if (type && type_len == strlen(type_names[k]) && memcmp(type, type_names[k], type_len) == 0) {
			out->kind = (bf_signal_kind)k;
			known = true;
		}
	if (!known)
		return util_errf(
		    err, errlen,
		    "type: %s%.*s%s is not a signal cdc acts on (execute-snapshot, stop-snapshot)",
		    type ? "'" : "NULL",
		    type && !text_problem(type, type_len, 64, why, sizeof(why)) ? (int)type_len : 0,
		    type ? type : "", type ? "'" : "");
	out->id = memcpy(util_xcalloc(id_len + 1, 1), id, id_len);
	if (!data || blank(data, data_len)) {
		if (out->kind == BF_SIGNAL_STOP)
			return true; /* stop every backfill signals started */
		backfill_signal_free(out);
		return util_errf(err, errlen,
				 "data: missing (execute-snapshot needs {\"data-collections\": [...]})");
	}
	json_object *root = NULL;
	bool ok = false;
	if (data_len > BF_SIGNAL_MAX_DATA)
		util_errf(err, errlen, "data: more than %d bytes", BF_SIGNAL_MAX_DATA);
	else if (!util_utf8_valid(data, data_len))
		util_errf(err, errlen, "data: not valid UTF-8 text");
	else if (!(root = json_parse(data, data_len, DATA_DEPTH, why, sizeof(why))))
		util_errf(err, errlen, "data: %s", why);
	else if (!json_object_is_type(root, json_type_object))
		util_errf(err, errlen, "data: expected a JSON object ({\"data-collections\": [...]})");
	else
		ok = parse_data(root, out, err, errlen);
	json_object_put(root);
	if (!ok)
		backfill_signal_free(out);
	return ok;
}

void backfill_signal_free(bf_signal *s)
{
	for (size_t i = 0; i < s->ntables; i++) {
		free(s->tables[i].name);
		free(s->tables[i].where);
	}
	for (size_t i = 0; i < s->nsubscriptions; i++)
		free(s->subscriptions[i]);
	free(s->tables);
	free(s->subscriptions);
	free(s->id);
	*s = (bf_signal){0};
}

void backfill_signal_json(const bf_signal *s, buf *out)
{
	bool first = true, fa = true, fc = true, fs = true;
	buf_putc(out, '{');
	json_key(out, &first, "data-collections");
	buf_putc(out, '[');
	for (size_t i = 0; i < s->ntables; i++) {
		json_sep(out, &fa);
		json_str(out, s->tables[i].name);
	}
	buf_putc(out, ']');
	for (size_t i = 0; i < s->ntables; i++) {
		bool f = true;
		if (!s->tables[i].where)
			continue;
		if (fc) {
			json_key(out, &first, "additional-conditions");
			buf_putc(out, '[');
		}
		json_sep(out, &fc);
		buf_putc(out, '{');
		json_key_str(out, &f, "data-collection", s->tables[i].name);
		json_key_str(out, &f, "filter", s->tables[i].where);
		buf_putc(out, '}');
	}
	if (!fc)
		buf_putc(out, ']');
	json_key(out, &first, "subscriptions");
	buf_putc(out, '[');
	for (size_t i = 0; i < s->nsubscriptions; i++) {
		json_sep(out, &fs);
		json_str(out, s->subscriptions[i]);
	}
	buf_puts(out, "]}");
}
