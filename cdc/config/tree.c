/* libyaml's events become a small node tree that keeps every node's line and column. Every problem is
 * reported as "FILE:LINE:COL: key.path: message" (at most CFG_MAX_ERRORS). */
#include "cdc/config/config_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define CFG_MAX_DEPTH 32	 /* our schema needs 5, deeper input is hostile or a mistake */
#define CFG_MAX_FILE (16u << 20) /* a config file, not a data set */
#define CFG_MAX_ERRORS 100	 /* a wrong file (a binary, a log) would otherwise give megabytes */

void cfg_node_free(node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n; i++)
		cfg_node_free(n->kids[i]);
	free(n->kids);
	if (n->secret)
		explicit_bzero(n->text, n->len);
	free(n->text);
	free(n);
}

bool cfg_is_null(const node *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	if (n->kind != N_SCALAR || !n->plain)
		return false;
	for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
		if (strcmp(n->text, nulls[i]) == 0)
			return true;
	return false;
}

/* ---- error reporting ---- */

void cfg_ctx_free(ctx *x)
{
	buf_free(&x->path);
	buf_free(&x->quote);
}

static void CDC_PRINTF(4, 0) verr(ctx *x, int line, int col, const char *fmt, va_list ap)
{
	if (x->nerr++ >= CFG_MAX_ERRORS) {
		if (x->nerr == CFG_MAX_ERRORS + 1)
			buf_printf(x->errors, "%s:%d:%d: too many errors, stopped reporting\n", x->file, line,
				   col);
		return;
	}
	buf_printf(x->errors, "%s:%d:%d: ", x->file, line, col);
	if (x->path.len)
		buf_printf(x->errors, "%s: ", x->path.data);
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	if (n > 0) {
		buf_reserve(x->errors, (size_t)n + 1);
		vsnprintf(x->errors->data + x->errors->len, (size_t)n + 1, fmt, ap2);
		x->errors->len += (size_t)n;
	}
	va_end(ap2);
	buf_putc(x->errors, '\n');
}

void cfg_err_pos(ctx *x, int line, int col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(x, line, col, fmt, ap);
	va_end(ap);
}

void cfg_err_at(ctx *x, const node *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(x, n->line, n->col, fmt, ap);
	va_end(ap);
}

size_t cfg_path_push(ctx *x, const char *name)
{
	size_t old = x->path.len;
	if (old)
		buf_putc(&x->path, '.');
	buf_puts(&x->path, name);
	return old;
}

size_t cfg_path_index(ctx *x, size_t i)
{
	size_t old = x->path.len;
	buf_printf(&x->path, "[%zu]", i);
	return old;
}

void cfg_path_pop(ctx *x, size_t old)
{
	x->path.len = old;
	x->path.data[old] = '\0';
}

void cfg_err_key(ctx *x, const node *n, const char *name, const char *fmt, ...)
{
	size_t old = cfg_path_push(x, name);
	va_list ap;
	va_start(ap, fmt);
	verr(x, n->line, n->col, fmt, ap);
	va_end(ap);
	cfg_path_pop(x, old);
}

const char *cfg_quoted(ctx *x, const char *s, size_t len)
{
	buf *q = &x->quote;
	buf_reset(q);
	buf_putc(q, '"');
	size_t max = len > 64 ? 60 : len;
	while (max < len && max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--; /* don't cut a UTF-8 sequence */
	for (size_t i = 0; i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			buf_printf(q, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			buf_printf(q, "\\x%02X", c);
		else
			buf_putc(q, (char)c);
	}
	buf_puts(q, max < len ? "...\"" : "\"");
	return q->data;
}

const char *cfg_qnode(ctx *x, const node *n)
{
	if (n->secret)
		return cfg_quoted(x, CFG_MASK, strlen(CFG_MASK));
	return cfg_quoted(x, n->text, n->len);
}

void cfg_wrong_kind(ctx *x, const node *n, const char *want)
{
	if (n->kind == N_MAP)
		cfg_err_at(x, n, "expected %s, got a mapping", want);
	else if (n->kind == N_SEQ)
		cfg_err_at(x, n, "expected %s, got a list", want);
	else if (cfg_is_null(n))
		cfg_err_at(x, n, "expected %s, got %s", want, n->len ? "null" : "an empty value");
	else
		cfg_err_at(x, n, "expected %s, got %s", want, cfg_qnode(x, n));
}

const char *cfg_scalar(ctx *x, const node *v, const char *want)
{
	if (v->kind != N_SCALAR || cfg_is_null(v)) {
		cfg_wrong_kind(x, v, want);
		return NULL;
	}
	if (strlen(v->text) != v->len) {
		cfg_err_at(x, v, "must not contain a NUL character");
		return NULL;
	}
	return v->text;
}

/* ---- YAML events -> node tree ---- */

static void yaml_error(ctx *x, yaml_parser_t *p, const char *text, size_t len)
{
	const char *problem = p->problem ? p->problem : "invalid YAML";
	if (p->error == YAML_MEMORY_ERROR) {
		cfg_err_pos(x, 1, 1, "out of memory while parsing");
	} else if (p->error == YAML_READER_ERROR) {
		/* The reader reports a byte offset, not a mark. So count lines and characters up to it. */
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		int line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			if (text[i] == '\n')
				line++, col = 1;
			else if (((unsigned char)text[i] & 0xC0) != 0x80)
				col++;
		}
		if (p->problem_value != -1)
			cfg_err_pos(x, line, col, "syntax error: %s (#%X)", problem,
				    (unsigned)p->problem_value);
		else
			cfg_err_pos(x, line, col, "syntax error: %s", problem);
	} else if (p->context) {
		cfg_err_pos(x, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
			    "syntax error: %s (%s at %zu:%zu)", problem, p->context, p->context_mark.line + 1,
			    p->context_mark.column + 1);
	} else {
		cfg_err_pos(x, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
			    "syntax error: %s", problem);
	}
}

void cfg_node_add(node *parent, node *kid)
{
	if (parent->n == parent->cap) {
		parent->cap = parent->cap ? parent->cap * 2 : 8;
		parent->kids = util_xrealloc(parent->kids, parent->cap * sizeof *parent->kids);
	}
	parent->kids[parent->n++] = kid;
}

/* Parses one YAML document into *root (NULL for an empty stream). Rejects aliases (their expansion
 * is the "billion laughs" attack), explicit tags, several documents and absurd nesting. */
bool cfg_build_tree(ctx *x, const char *text, size_t len, node **root)
{
	yaml_parser_t p;
	yaml_event_t ev;
	node *stack[CFG_MAX_DEPTH];
	size_t depth = 0;
	int docs = 0;
	bool ok = false, done = false;

	*root = NULL;
	if (!yaml_parser_initialize(&p)) {
		cfg_err_pos(x, 1, 1, "out of memory while parsing");
		return false;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done) {
		if (!yaml_parser_parse(&p, &ev)) {
			yaml_error(x, &p, text, len);
			goto out;
		}
		int line = (int)ev.start_mark.line + 1, col = (int)ev.start_mark.column + 1;
		const yaml_char_t *tag = NULL;
		node *n = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (docs++) {
				cfg_err_pos(x, line, col, "only one YAML document is allowed");
				yaml_event_delete(&ev);
				goto out;
			}
			break;
		case YAML_ALIAS_EVENT:
			cfg_err_pos(x, line, col, "aliases (*%s) are not allowed",
				    (const char *)ev.data.alias.anchor);
			yaml_event_delete(&ev);
			goto out;
		case YAML_SCALAR_EVENT:
			tag = ev.data.scalar.tag;
			n = util_xcalloc(1, sizeof *n);
			n->kind = N_SCALAR;
			n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
			n->len = ev.data.scalar.length;
			n->text = util_xmalloc(n->len + 1);
			memcpy(n->text, ev.data.scalar.value, n->len);
			n->text[n->len] = '\0';
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			tag = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.tag
								   : ev.data.mapping_start.tag;
			n = util_xcalloc(1, sizeof *n);
			n->kind = ev.type == YAML_SEQUENCE_START_EVENT ? N_SEQ : N_MAP;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		default:
			break;
		}
		if (tag) {
			cfg_err_pos(x, line, col, "explicit tags (%s) are not allowed",
				    cfg_quoted(x, (const char *)tag, strlen((const char *)tag)));
			cfg_node_free(n);
			yaml_event_delete(&ev);
			goto out;
		}
		yaml_event_delete(&ev);
		if (!n)
			continue;
		n->line = line;
		n->col = col;
		if (depth)
			cfg_node_add(stack[depth - 1], n);
		else
			*root = n;
		if (n->kind != N_SCALAR) {
			if (depth == CFG_MAX_DEPTH) {
				cfg_err_pos(x, line, col, "nested deeper than %d levels", CFG_MAX_DEPTH);
				goto out;
			}
			stack[depth++] = n;
		}
	}
	ok = true;
out:
	yaml_parser_delete(&p);
	if (!ok) {
		cfg_node_free(*root);
		*root = NULL;
	}
	return ok;
}

node *cfg_scalar_node(const char *text, int line, int col)
{
	node *n = util_xcalloc(1, sizeof *n);
	n->kind = N_SCALAR;
	n->text = util_xstrdup(text);
	n->len = strlen(text);
	n->line = line;
	n->col = col;
	return n;
}

bool cfg_read_text(const char *path, buf *text, buf *errors)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		buf_printf(errors, "%s:1:1: cannot open: %s\n", path, strerror(errno));
		return false;
	}
	char chunk[65536];
	size_t n;
	bool ok = false;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && text->len <= CFG_MAX_FILE)
		buf_append(text, chunk, n);
	if (ferror(f))
		buf_printf(errors, "%s:1:1: cannot read: %s\n", path, strerror(errno));
	else if (text->len > CFG_MAX_FILE)
		buf_printf(errors, "%s:1:1: larger than %u MiB: not a configuration file\n", path,
			   CFG_MAX_FILE >> 20);
	else
		ok = true;
	fclose(f);
	return ok;
}
