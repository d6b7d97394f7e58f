/* Subscriptions changed over the status socket. It reads the body of PUT /subscriptions/NAME. It keeps
 * the overlay of puts and deletes in state_dir and lays it over the file's subscriptions. */
#include "cdc/config/config_internal.h"

#include "decoder/base/fsutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cfg_subscription *cfg_parse_subscription(const cfg *c, const char *name, const char *text, size_t len,
					 buf *errors)
{
	ctx x = {.file = "body", .errors = errors, .sink_hint = -1};
	memcpy(x.have_section, c->sink_present, sizeof x.have_section);
	node *root = NULL;
	cfg_subscription *s = util_xcalloc(1, sizeof *s);
	cfg_keys_default(s, &sub_keys);
	s->line = s->col = 1;
	if (!cfg_build_tree(&x, text ? text : "", text ? len : 0, &root))
		goto out;
	if (!root || root->kind != N_MAP) {
		cfg_err_pos(&x, 1, 1, "must be one JSON object with the keys of a subscription");
		goto out;
	}
	const node *given = NULL;
	for (size_t i = 0; i + 1 < root->n; i += 2)
		if (root->kids[i]->kind == N_SCALAR && strcmp(root->kids[i]->text, "name") == 0)
			given = root->kids[i + 1];
	if (given && (given->kind != N_SCALAR || strcmp(given->text, name) != 0)) {
		cfg_err_key(&x, given, "name", "must be %s (the name in the path) or left out",
			    cfg_quoted(&x, name, strlen(name)));
		goto out;
	}
	if (!given) {
		cfg_node_add(root, cfg_scalar_node("name", root->line, root->col));
		cfg_node_add(root, cfg_scalar_node(name, root->line, root->col));
	}
	pair seen[CFG_MAX_KEYS] = {0};
	x.sink_hint = cfg_sink_named(root);
	cfg_walk_map(&x, root, s, &sub_keys, seen);
	buf why = {0};
	if (!x.nerr && !cfg_subs_together(c, s, NULL, &why))
		cfg_err_pos(&x, 1, 1, "%s", why.data);
	buf_free(&why);
out:
	cfg_node_free(root);
	cfg_ctx_free(&x);
	if (x.nerr) {
		cfg_subscription_free(s);
		return NULL;
	}
	return s;
}

/* The overlay file, as in {subscriptions: [...], deleted: [names]}. */
typedef struct overlay_doc {
	cfg puts; /* only subs and nsubs */
	cfg_strlist deleted;
} overlay_doc;

static const key overlay_k[] = {
    {"subscriptions", &t_subs, offsetof(overlay_doc, puts)},
    {"deleted", &t_names, offsetof(overlay_doc, deleted)},
};
static const keys overlay_keys = KEYS(overlay_k);

static void overlay_path(buf *b, const char *state_dir)
{
	buf_printf(b, "%s/%s", state_dir, CFG_OVERLAY_FILE);
}

cfg_overlay *cfg_overlay_load(const char *state_dir, buf *errors)
{
	buf path = {0};
	overlay_path(&path, state_dir);
	cfg_overlay *o = util_xcalloc(1, sizeof *o);
	if (access(path.data, F_OK) != 0 && errno == ENOENT) {
		buf_free(&path);
		return o;
	}
	overlay_doc doc = {0};
	ctx x = {.file = path.data, .errors = errors, .sink_hint = -1};
	memset(x.have_section, 1, sizeof x.have_section);
	buf text = {0};
	if (!cfg_read_text(path.data, &text, errors))
		x.nerr++;
	node *root = NULL;
	if (!x.nerr && cfg_build_tree(&x, text.data ? text.data : "", text.len, &root) && root) {
		pair seen[CFG_MAX_KEYS] = {0};
		cfg_walk_map(&x, root, &doc, &overlay_keys, seen);
	}
	cfg_node_free(root);
	cfg_ctx_free(&x);
	buf_free(&text);
	buf_free(&path);
	o->put = doc.puts.subs;
	o->nput = doc.puts.nsubs;
	o->deleted = doc.deleted;
	if (x.nerr) {
		cfg_overlay_free(o);
		return NULL;
	}
	return o;
}

bool cfg_overlay_save(const cfg_overlay *o, const char *state_dir, char *err, size_t errlen)
{
	buf path = {0}, text = {0};
	overlay_path(&path, state_dir);
	buf_puts(
	    &text,
	    "# Subscriptions changed over the status socket (PUT and DELETE /subscriptions/NAME), laid over\n"
	    "# the configuration file's at every start and reload. Written by cdc; remove this file (with "
	    "cdc\n"
	    "# stopped) to go back to the file's subscriptions alone.\n");
	overlay_doc doc = {.puts = {.subs = o->put, .nsubs = o->nput}, .deleted = o->deleted};
	emit e = {.b = &text, .first = true};
	cfg_keys_print(&e, &doc, &overlay_keys);
	buf_putc(&text, '\n');
	bool ok = fsutil_replace(path.data, text.data, text.len, 0600, err, errlen);
	buf_free(&path);
	buf_free(&text);
	return ok;
}

/* A copy that owns its strings. */
static void sub_copy(cfg_subscription *dst, const cfg_subscription *src)
{
	*dst = *src;
	cfg_keys_copy(dst, src, &sub_keys);
}

static void strlist_remove(cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0) {
			free(l->v[i]);
			memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof *l->v);
			l->n--;
			return;
		}
}

static void strlist_add(cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return;
	cfg_strlist_push(l, s);
}

/* Removes the subscription of that name from an array. True if there was one. */
static bool subs_remove(cfg_subscription *v, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp(v[i].name, name) == 0) {
			cfg_keys_clear(&v[i], &sub_keys);
			memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof *v);
			(*n)--;
			return true;
		}
	return false;
}

/* Replaces the subscription of s's name in place, or appends s. Takes s's contents. */
static void subs_set(cfg_subscription **v, size_t *n, cfg_subscription *s)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*v)[i].name, s->name) == 0) {
			cfg_keys_clear(&(*v)[i], &sub_keys);
			(*v)[i] = *s;
			return;
		}
	*v = util_xrealloc(*v, (*n + 1) * sizeof **v);
	(*v)[(*n)++] = *s;
}

void cfg_overlay_put(cfg_overlay *o, cfg_subscription *s)
{
	strlist_remove(&o->deleted, s->name);
	subs_set(&o->put, &o->nput, s);
	free(s);
}

void cfg_overlay_delete(cfg_overlay *o, const char *name)
{
	subs_remove(o->put, &o->nput, name);
	strlist_add(&o->deleted, name);
}

bool cfg_overlay_apply(const cfg_overlay *o, cfg *c, cfg_strlist *left_out, buf *errors)
{
	bool all = true;
	for (size_t i = 0; i < o->deleted.n; i++)
		subs_remove(c->subs, &c->nsubs, o->deleted.v[i]);
	for (size_t i = 0; i < o->nput; i++) {
		const cfg_subscription *p = &o->put[i];
		const sink_module *m = sink_modules[p->sink];
		bool no_section = m->section_needed && !c->sink_present[p->sink];
		buf why = {0};
		bool conflict = !no_section && !cfg_subs_together(c, p, NULL, &why);
		if (no_section || conflict) {
			buf_printf(errors, "%s/%s: ", c->state_dir, CFG_OVERLAY_FILE);
			if (no_section)
				buf_printf(errors,
					   "subscription %s has sink %s, but the configuration has no %s "
					   "section (add one, or DELETE the subscription)\n",
					   p->name, m->name, m->section);
			else
				buf_printf(errors, "%s (or DELETE one of them)\n", why.data);
			buf_free(&why);
			if (left_out)
				strlist_add(left_out, p->name);
			/* the file's subscription of that name, if any, is not what the overlay says */
			subs_remove(c->subs, &c->nsubs, p->name);
			all = false;
			continue;
		}
		cfg_subscription s;
		sub_copy(&s, p);
		subs_set(&c->subs, &c->nsubs, &s);
	}
	return all;
}

cfg_subscription *cfg_subscription_copy(const cfg_subscription *s)
{
	cfg_subscription *d = util_xmalloc(sizeof *d);
	sub_copy(d, s);
	return d;
}

cfg_overlay *cfg_overlay_copy(const cfg_overlay *o)
{
	cfg_overlay *d = util_xcalloc(1, sizeof *d);
	d->nput = o->nput;
	d->put = o->nput ? util_xcalloc(o->nput, sizeof *d->put) : NULL;
	for (size_t i = 0; i < o->nput; i++)
		sub_copy(&d->put[i], &o->put[i]);
	cfg_strlist_copy(&d->deleted, &o->deleted);
	return d;
}

void cfg_overlay_free(cfg_overlay *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->nput; i++)
		cfg_keys_clear(&o->put[i], &sub_keys);
	free(o->put);
	cfg_strlist_free(&o->deleted);
	free(o);
}
