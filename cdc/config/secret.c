/* Secret keys (K_SECRET) given as {file: PATH}. The file is read at every load, so that a SIGHUP
 * picks up a rotated secret. Where each secret value came from is kept for check-config and cdc doctor. */
#include "cdc/config/config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char NO_FILE[] = "no such file";

/* check-config prints {file: PATH}, never the value. cdc doctor names the secrets written in clear. */

/* The file's bytes into text, at most CFG_SECRET_MAX. NULL, or why not. */
static const char *read_file(const char *path, buf *text)
{
	/* O_NONBLOCK, because a FIFO at the path must not hang the load. It is refused below. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT	 ? NO_FILE
		       : errno == EACCES ? "permission denied: this user may not read it"
					 : strerror(errno);
	struct stat st;
	const char *why = NULL;
	if (fstat(fd, &st) != 0)
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_size > CFG_SECRET_MAX)
		why = "the file is larger than 64 KiB: not a secret";
	char chunk[4096];
	ssize_t n = 0;
	while (!why && (n = read(fd, chunk, sizeof chunk)) > 0) {
		if (text->len + (size_t)n > CFG_SECRET_MAX)
			why = "the file is larger than 64 KiB: not a secret";
		else
			buf_append(text, chunk, (size_t)n);
	}
	if (!why && n < 0)
		why = strerror(errno);
	explicit_bzero(chunk, sizeof chunk);
	close(fd);
	return why;
}

/* Wipes and frees, so that a secret does not stay behind in freed memory. */
static void buf_wipe(buf *b)
{
	if (b->data)
		explicit_bzero(b->data, b->len);
	buf_free(b);
}

/* A secret's file into text, read by read_file, with one final newline dropped. It must be neither
 * empty nor hold a NUL. NULL, or why not (text wiped). */
static const char *read_secret(const char *path, buf *text)
{
	const char *why = read_file(path, text);
	if (!why && text->len && text->data[text->len - 1] == '\n')
		text->len -= 1 + (text->len > 1 && text->data[text->len - 2] == '\r');
	if (!why && !text->len)
		why = "the file is empty";
	else if (!why && memchr(text->data, '\0', text->len))
		why = "the file holds a NUL byte";
	if (why)
		buf_wipe(text);
	else
		text->data[text->len] = '\0';
	return why;
}

char *cfg_secret_read(const char *path, char *err, size_t errlen)
{
	buf text = {0};
	const char *why = read_secret(path, &text);
	if (why) {
		util_errf(err, errlen, "%s: %s", path, why);
		return NULL;
	}
	return text.data;
}

const node *cfg_secret_value(ctx *x, const node *v, node **made, const char **file)
{
	*made = NULL;
	*file = NULL;
	if (v->kind != N_MAP)
		return v;
	const node *pv = v->n == 2 && v->kids[0]->kind == N_SCALAR && strcmp(v->kids[0]->text, "file") == 0
			     ? v->kids[1]
			     : NULL;
	if (!pv) {
		cfg_err_at(x, v, "expected the value, or {file: PATH} naming a file that holds it");
		return NULL;
	}
	const char *path = cfg_scalar(x, pv, "a file's path");
	if (!path)
		return NULL;
	if (!*path || strlen(path) > 4095) {
		cfg_err_at(x, pv, "a file's path is 1 to 4095 bytes long");
		return NULL;
	}
	if (x->secrets_unread) {
		*file = path;
		return NULL;
	}
	char *full = cfg_resolved(x, path);
	buf text = {0};
	const char *why = read_secret(full, &text);
	if (why) {
		/* for a relative path, say which file was looked for */
		bool where = why == NO_FILE && strcmp(full, path) != 0;
		cfg_err_at(x, pv, "{file: %s}: %s%s%s%s", cfg_qnode(x, pv), why, where ? " (" : "",
			   where ? full : "", where ? ", relative to the configuration's directory)" : "");
		free(full);
		return NULL;
	}
	free(full);
	node *n = util_xcalloc(1, sizeof *n);
	n->kind = N_SCALAR;
	n->secret = true;
	n->line = pv->line;
	n->col = pv->col;
	n->len = text.len;
	n->text = util_xmalloc(text.len + 1);
	memcpy(n->text, text.data, text.len);
	n->text[text.len] = '\0';
	buf_wipe(&text);
	*made = n;
	*file = path;
	return n;
}

void cfg_secret_record(ctx *x, const char *file)
{
	cfg *c = x->secrets_of;
	if (!c)
		return;
	c->secrets = util_xrealloc(c->secrets, (c->nsecrets + 1) * sizeof *c->secrets);
	c->secrets[c->nsecrets++] =
	    (cfg_secret){util_xstrdup(x->path.data ? x->path.data : ""), file ? cfg_resolved(x, file) : NULL};
}

const char *cfg_secret_file(const cfg *c, const char *name)
{
	for (size_t i = 0; c && name && i < c->nsecrets; i++)
		if (strcmp(c->secrets[i].key, name) == 0)
			return c->secrets[i].file;
	return NULL;
}

void cfg_emit_secret_file(emit *e, const char *file)
{
	emit saved = cfg_emit_open(e, '{');
	cfg_emit_key(e, "file");
	cfg_emit_str(e, file);
	cfg_emit_close(e, '}', &saved);
}

void cfg_secrets_free(cfg *c)
{
	for (size_t i = 0; i < c->nsecrets; i++) {
		free(c->secrets[i].key);
		free(c->secrets[i].file);
	}
	free(c->secrets);
	c->secrets = NULL;
	c->nsecrets = 0;
}
