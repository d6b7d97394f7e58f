/* The backfills kept in state_dir/backfills.json. A file of version 1 (before ranges) resumes its running
 * tables from the start. */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/backfill_internal.h"
#include "decoder/base/fsutil.h"
#include "decoder/base/json.h"

/* The file is rendered whenever a backfill changes in a way a restart must know, such as a chunk made
 * durable, a key to read again, or a state change. The daemon's writer thread writes it before the position
 * it records next. It is read at start. A restart resumes from a table's relations with the ranges durably
 * read, the keys still to read again, the key's columns and the counters. */

/* ---- persistence ---- */

static void json_strv(buf *out, bool *first, const char *key, char **v, size_t n)
{
	json_key(out, first, key);
	buf_putc(out, '[');
	bool f = true;
	for (size_t i = 0; i < n; i++) {
		json_sep(out, &f);
		json_str(out, v[i]);
	}
	buf_putc(out, ']');
}

static void save_leaf(buf *out, const leaf *l)
{
	bool first = true;
	buf_putc(out, '{');
	json_key_u64(out, &first, "oid", l->oid);
	json_key_str(out, &first, "schema", l->schema);
	json_key_str(out, &first, "table", l->name);
	json_key_u64(out, &first, "blocks", l->blocks);
	json_key_i64(out, &first, "rows_per_block_milli",
		     l->rows_per_block < 0 ? -1 : (int64_t)(l->rows_per_block * 1000));
	json_key_boolean(out, &first, "gone", l->gone);
	json_key(out, &first, "done");
	buf_putc(out, '[');
	for (size_t i = 0; i < l->done.n; i++)
		buf_printf(out, "%s%u", i ? "," : "", l->done.v[i]);
	buf_puts(out, "]}");
}

static void save_table(buf *out, const table *t)
{
	bool first = true;
	buf_putc(out, '{');
	json_key_str(out, &first, "schema", t->schema);
	json_key_str(out, &first, "table", t->name);
	json_key_str(out, &first, "state", backfill_state_name(t->state));
	json_key_str(out, &first, "error", t->error);
	json_key_u64(out, &first, "oid", t->oid);
	json_strv(out, &first, "key", t->key_names, t->nkey_names);
	json_key_u64(out, &first, "read", t->done_d.read);
	json_key_u64(out, &first, "delivered", t->done_d.delivered);
	json_key_u64(out, &first, "dropped", t->done_d.dropped);
	json_key_u64(out, &first, "filtered", t->done_d.filtered);
	json_key_u64(out, &first, "blocks_read", t->done_d.blocks);
	json_key_i64(out, &first, "estimate", t->estimate);
	json_key_boolean(out, &first, "listed_again", t->listed_again);
	json_key(out, &first, "leaves");
	buf_putc(out, '[');
	for (size_t i = 0; i < t->nleaves; i++) {
		if (i)
			buf_putc(out, ',');
		save_leaf(out, &t->leaves[i]);
	}
	buf_putc(out, ']');
	/* Every key to read again, taken by a chunk or not. None is durable yet. */
	json_key(out, &first, "read_again");
	buf_putc(out, '[');
	size_t pos = 0;
	bool kf = true;
	for (const keyent *e = backfill_keys_next(&t->again, &pos, NULL); e;
	     e = backfill_keys_next(&t->again, &pos, e)) {
		json_sep(out, &kf);
		buf_putc(out, '"');
		for (size_t i = 0; i < e->len; i++)
			buf_printf(out, "%02x", e->key[i]);
		buf_putc(out, '"');
	}
	buf_puts(out, "]}");
}

static void save_backfill(buf *out, const backfill *f)
{
	bool first = true;
	buf_putc(out, '{');
	json_key_str(out, &first, "id", f->id);
	json_key_str(out, &first, "subscription", f->sub);
	json_strv(out, &first, "subscription_tables", f->sub_pat, f->nsub_pat);
	json_strv(out, &first, "tables_asked", f->req_pat, f->nreq_pat);
	json_key_str(out, &first, "subscription_where", f->sub_where);
	json_key_str(out, &first, "where", f->where);
	json_key_boolean(out, &first, "snapshot", f->snapshot);
	json_key_str(out, &first, "state", backfill_state_name(f->state));
	json_key_str(out, &first, "error", f->error);
	json_key_i64(out, &first, "created", f->created_ms);
	json_key_i64(out, &first, "finished", f->finished_ms);
	json_key_boolean(out, &first, "resolved", f->resolved);
	json_key(out, &first, "tables");
	buf_putc(out, '[');
	bool tf = true;
	for (size_t i = 0; i < f->ntables; i++) {
		json_sep(out, &tf);
		save_table(out, &f->tables[i]);
	}
	buf_puts(out, "]}");
}

bool backfill_state(bf_set *b, buf *out)
{
	if (!b->dirty)
		return false;
	backfill_trim_history(b);
	bool first = true;
	buf_putc(out, '{');
	json_key_u64(out, &first, "version", BF_FILE_VERSION);
	json_key(out, &first, "backfills");
	buf_putc(out, '[');
	bool bf = true;
	for (size_t i = 0; i < b->n; i++) {
		json_sep(out, &bf);
		save_backfill(out, b->list[i]);
	}
	buf_puts(out, "]}\n");
	b->dirty = false;
	return true;
}

/* Members of the state file, by type. NULL when absent or of another type. */
static json_object *member(json_object *o, const char *key, json_type type)
{
	json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

static char *member_str(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_string);
	return v ? util_xstrdup(json_object_get_string(v)) : NULL;
}

static int64_t member_i64(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_int);
	return v ? json_object_get_int64(v) : 0;
}

static char **member_strv(json_object *o, const char *key, size_t *n)
{
	json_object *a = member(o, key, json_type_array);
	*n = a ? json_object_array_length(a) : 0;
	char **v = util_xcalloc(*n ? *n : 1, sizeof(*v));
	for (size_t i = 0; i < *n; i++) {
		json_object *s = json_object_array_get_idx(a, i);
		v[i] =
		    util_xstrdup(json_object_is_type(s, json_type_string) ? json_object_get_string(s) : "");
	}
	return v;
}

static bool hex_bytes(const char *s, buf *out)
{
	size_t n = strlen(s);
	if (n % 2)
		return false;
	for (size_t i = 0; i < n; i += 2) {
		unsigned v;
		if (sscanf(s + i, "%2x", &v) != 1)
			return false;
		buf_putc(out, (char)v);
	}
	return true;
}

static bool load_leaf(json_object *o, leaf *l)
{
	l->schema = member_str(o, "schema");
	l->name = member_str(o, "table");
	json_object *done = member(o, "done", json_type_array), *gone = member(o, "gone", json_type_boolean);
	int64_t rpb = member_i64(o, "rows_per_block_milli");
	l->oid = (uint32_t)member_i64(o, "oid");
	l->blocks = (uint32_t)member_i64(o, "blocks");
	l->rows_per_block = rpb < 0 ? -1 : (double)rpb / 1000;
	l->gone = gone && json_object_get_boolean(gone);
	if (!l->schema || !l->name || !done || json_object_array_length(done) % 2)
		return false;
	for (size_t i = 0; i + 1 < json_object_array_length(done); i += 2) {
		int64_t lo = json_object_get_int64(json_object_array_get_idx(done, i));
		int64_t hi = json_object_get_int64(json_object_array_get_idx(done, i + 1));
		if (lo < 0 || hi < lo || hi > l->blocks)
			return false;
		backfill_ranges_add(&l->done, (uint32_t)lo, (uint32_t)hi);
	}
	return true;
}

static bool load_table(json_object *o, table *t, int64_t version)
{
	t->schema = member_str(o, "schema");
	t->name = member_str(o, "table");
	t->error = member_str(o, "error");
	json_object *st = member(o, "state", json_type_string),
		    *listed = member(o, "listed_again", json_type_boolean);
	if (!t->schema || !t->name || !st || !backfill_state_parse(json_object_get_string(st), &t->state))
		return false;
	/* "emitted" (before "delivered" and "filtered" were told apart) counts the rows that were not
	 * dropped, the where's own included. */
	t->done_d = (counters){
	    (uint64_t)member_i64(o, "read"),
	    (uint64_t)member_i64(o, member(o, "delivered", json_type_int) ? "delivered" : "emitted"),
	    (uint64_t)member_i64(o, "dropped"), (uint64_t)member_i64(o, "filtered"),
	    (uint64_t)member_i64(o, "blocks_read")};
	t->estimate = member(o, "estimate", json_type_int) ? member_i64(o, "estimate") : -1;
	if (version == 1 && t->state == BF_RUNNING) {
		/* Read by key order then. So read again, by ranges, from the start. */
		t->done_d = (counters){0};
	} else if (version > 1) {
		size_t nkeys;
		char **names = member_strv(o, "key", &nkeys);
		backfill_table_set_keys(t, names, nkeys);
		t->oid = (uint32_t)member_i64(o, "oid");
		t->listed_again = listed && json_object_get_boolean(listed);
		json_object *leaves = member(o, "leaves", json_type_array),
			    *again = member(o, "read_again", json_type_array);
		if (!leaves || !again)
			return false;
		t->nleaves = json_object_array_length(leaves);
		t->leaves = util_xcalloc(t->nleaves ? t->nleaves : 1, sizeof(*t->leaves));
		for (size_t i = 0; i < t->nleaves; i++)
			if (!load_leaf(json_object_array_get_idx(leaves, i), &t->leaves[i]))
				return false;
		buf key = {0};
		bool ok = true;
		for (size_t i = 0; ok && i < json_object_array_length(again); i++) {
			json_object *k = json_object_array_get_idx(again, i);
			buf_reset(&key);
			ok = json_object_is_type(k, json_type_string) &&
			     hex_bytes(json_object_get_string(k), &key);
			if (ok)
				backfill_keys_add(&t->again, key.data, key.len);
		}
		buf_free(&key);
		if (!ok)
			return false;
	}
	backfill_rewind_table(t);
	return true;
}

static backfill *load_backfill(json_object *o, int64_t version)
{
	backfill *f = util_xcalloc(1, sizeof(*f));
	json_object *id = member(o, "id", json_type_string), *st = member(o, "state", json_type_string);
	json_object *tables = member(o, "tables", json_type_array);
	f->sub = member_str(o, "subscription");
	f->sub_where = member_str(o, "subscription_where");
	f->where = member_str(o, "where");
	f->error = member_str(o, "error");
	f->sub_pat = member_strv(o, "subscription_tables", &f->nsub_pat);
	f->req_pat = member_strv(o, "tables_asked", &f->nreq_pat);
	json_object *snap = member(o, "snapshot", json_type_boolean),
		    *res = member(o, "resolved", json_type_boolean);
	f->snapshot = snap && json_object_get_boolean(snap);
	f->resolved = res && json_object_get_boolean(res);
	f->vetted = f->resolved; /* its `where` was checked before it was kept */
	f->created_ms = member_i64(o, "created");
	f->finished_ms = member_i64(o, "finished");
	if (!id || strlen(json_object_get_string(id)) != BF_ID_SIZE - 1 || !f->sub || !st ||
	    !backfill_state_parse(json_object_get_string(st), &f->state) || !tables)
		goto bad;
	snprintf(f->id, sizeof(f->id), "%s", json_object_get_string(id));
	f->ntables = json_object_array_length(tables);
	f->tables = util_xcalloc(f->ntables ? f->ntables : 1, sizeof(*f->tables));
	for (size_t i = 0; i < f->ntables; i++) {
		f->tables[i].bf = f;
		if (!load_table(json_object_array_get_idx(tables, i), &f->tables[i], version))
			goto bad;
	}
	return f;
bad:
	backfill_free(f);
	return NULL;
}

bool backfill_set_load(bf_set *b, char *err, size_t errlen)
{
	if (!b->path)
		return true;
	FILE *fp = fopen(b->path, "r");
	if (!fp)
		return errno == ENOENT
			   ? true
			   : util_errf(err, errlen, "cannot read %s: %s", b->path, strerror(errno));
	buf text = {0};
	char part[8192];
	size_t n;
	while ((n = fread(part, 1, sizeof(part), fp)) > 0)
		buf_append(&text, part, n);
	bool ok = !ferror(fp);
	fclose(fp);
	json_object *root = ok && text.data ? json_tokener_parse(text.data) : NULL;
	json_object *ver = root ? member(root, "version", json_type_int) : NULL;
	json_object *list = root ? member(root, "backfills", json_type_array) : NULL;
	int64_t version = ver ? json_object_get_int64(ver) : 0;
	ok = version >= 1 && version <= BF_FILE_VERSION && list;
	for (size_t i = 0; ok && i < json_object_array_length(list); i++) {
		backfill *f = load_backfill(json_object_array_get_idx(list, i), version);
		if (f)
			backfill_append(b, f);
		ok = f != NULL;
	}
	json_object_put(root);
	buf_free(&text);
	if (!ok)
		return util_errf(err, errlen, "%s: not a backfill state file of version 1 to %d", b->path,
				 BF_FILE_VERSION);
	/* Running tables go on from what is durable once described again. */
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (t->state == BF_RUNNING)
				t->step = T_DESCRIBE;
		}
	return true;
}
