/* The configuration written back from the key tables, as YAML that cfg_parse accepts again
 * (check-config, the overlay file) and as a subscription's JSON (GET /subscriptions). Secrets (the
 * DSN's password, secret-looking kafka properties) are masked. */
#include "cdc/config/config_internal.h"

#include "decoder/base/json.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- masking ---- */

/* Secret values proper, among the properties masked. sasl.username or sasl.mechanism are masked
 * (every sasl.* is), but cdc doctor does not call them secrets written in clear. */
bool cfg_prop_holds_secret(const char *k)
{
	size_t n = strlen(k);
	return strcasestr(k, "password") || strcasestr(k, "secret") ||
	       strcasecmp(k, "sasl.oauthbearer.config") == 0 ||
	       (n >= 4 && strcasecmp(k + n - 4, ".key") == 0) ||
	       (n >= 4 && strcasecmp(k + n - 4, ".pem") == 0 && strcasestr(k, "key")); /* ssl.key.pem */
}

bool cfg_prop_is_secret(const char *k)
{
	return cfg_prop_holds_secret(k) || strncasecmp(k, "sasl.", 5) == 0;
}

/* Whether the URI query parameter at p (n bytes up to its '=') is want, %-escapes decoded as
 * libpq decodes them ("pass%77ord"). */
static bool uri_param_is(const char *p, size_t n, const char *want)
{
	size_t i = 0, j = 0, wn = strlen(want);
	for (; i < n && j < wn; j++) {
		int c = (unsigned char)p[i++];
		if (c == '%' && i + 1 < n && isxdigit((unsigned char)p[i]) &&
		    isxdigit((unsigned char)p[i + 1])) {
			char hex[3] = {p[i], p[i + 1], '\0'};
			c = (int)strtol(hex, NULL, 16);
			i += 2;
		}
		if (c != want[j])
			return false;
	}
	return i == n && j == wn;
}

/* libpq's secrets, the password and the passphrase of the client key (sslpassword). */
static bool uri_param_is_password(const char *p, size_t n)
{
	return uri_param_is(p, n, "password") || uri_param_is(p, n, "sslpassword");
}

/* A URI, postgresql://user:PASSWORD@host/db?password=PASSWORD&... The user info is before an '@' that
 * comes before any '/' or '?'. The password is after its first ':'. The query is after the next '?',
 * its parameters split at '&'. libpq ends the user info at the first '@'. This masks up to the last
 * one, so that a password with a raw '@' (a common mistake) does not leak its end. A raw '/' or '?' in
 * a password (RFC 3986 wants them %-encoded) is not recognised. Stopping there keeps masking
 * idempotent, since masking a query value can remove a '/' or an '@'. */
static void mask_uri(buf *out, const char *s)
{
	const char *p = strstr(s, "://") + 3, *at = NULL;
	for (const char *c = p; *c && *c != '/' && *c != '?'; c++)
		if (*c == '@')
			at = c;
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (colon) {
			buf_append(out, s, (size_t)(colon + 1 - s));
			buf_puts(out, CFG_MASK);
			s = at;
		}
		p = at + 1;
	}
	const char *q = strchr(p, '?');
	buf_append(out, s, q ? (size_t)(q + 1 - s) : strlen(s));
	for (p = q ? q + 1 : ""; *p;) {
		size_t n = strcspn(p, "&"), keylen = strcspn(p, "=&");
		if (keylen < n && uri_param_is_password(p, keylen)) {
			buf_append(out, p, keylen + 1);
			buf_puts(out, CFG_MASK);
		} else {
			buf_append(out, p, n);
		}
		p += n;
		if (*p)
			buf_putc(out, *p++);
	}
}

static bool is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

/* libpq's keyword form, key=value key='quoted \' value' ... */
static void mask_kv(buf *out, const char *s)
{
	const char *p = s;
	while (*p) {
		size_t ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		if (!*p)
			break;
		const char *kw = p;
		p += strcspn(p, "= \t\n\r\f\v");
		size_t keylen = (size_t)(p - kw);
		buf_append(out, kw, keylen);
		ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		if (*p != '=')
			continue; /* not a valid conninfo, and libpq will say so */
		buf_putc(out, *p++);
		ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		const char *val = p;
		buf raw = {0}; /* the value with quotes and escapes removed */
		if (*p == '\'') {
			for (p++; *p && *p != '\''; p++) {
				if (*p == '\\' && p[1])
					p++;
				buf_putc(&raw, *p);
			}
			if (*p)
				p++;
		} else {
			for (; *p && !strchr(" \t\n\r\f\v", *p); p++) {
				if (*p == '\\' && p[1])
					p++;
				buf_putc(&raw, *p);
			}
		}
		if ((keylen == 8 && strncmp(kw, "password", 8) == 0) ||
		    (keylen == 11 && strncmp(kw, "sslpassword", 11) == 0)) {
			/* keep the quotes, since what follows a quoted value must stay apart from the mask */
			buf_puts(out, *val == '\'' ? "'" CFG_MASK "'" : CFG_MASK);
		} else if (keylen == 6 && strncmp(kw, "dbname", 6) == 0 && raw.data &&
			   (is_uri(raw.data) || strchr(raw.data, '='))) {
			/* libpq expands a dbname that is itself a connection string */
			char *inner = cfg_mask_dsn(raw.data);
			buf_putc(out, '\'');
			for (const char *c = inner; *c; c++) {
				if (*c == '\'' || *c == '\\')
					buf_putc(out, '\\');
				buf_putc(out, *c);
			}
			buf_putc(out, '\'');
			free(inner);
		} else {
			buf_append(out, val, (size_t)(p - val));
		}
		buf_free(&raw);
	}
}

char *cfg_mask_dsn(const char *dsn)
{
	buf out = {0};
	if (!dsn)
		dsn = "";
	if (is_uri(dsn))
		mask_uri(&out, dsn);
	else
		mask_kv(&out, dsn);
	return out.data ? out.data : util_xstrdup("");
}

bool cfg_dsn_has_secret(const char *dsn)
{
	char *masked = cfg_mask_dsn(dsn);
	bool secret = strcmp(masked, dsn) != 0;
	free(masked);
	return secret;
}

/* ---- the emitter ---- */

/* Strings that YAML reads back as the same string without quotes. */
static bool plain_ok(const char *s)
{
	static const char *const reserved[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"};
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '/'))
		return false;
	if (strspn(s, LOWER UPPER DIGIT "_./-") != strlen(s))
		return false;
	for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
		if (strcasecmp(s, reserved[i]) == 0)
			return false;
	return true;
}

/* A YAML double-quoted string. Anything that is not printable, or that YAML would fold as a line
 * break, is escaped. */
static void yaml_str(buf *out, const char *s)
{
	if (!s)
		s = "";
	if (plain_ok(s)) {
		buf_puts(out, s);
		return;
	}
	buf_putc(out, '"');
	for (const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s); p < end;) {
		uint32_t cp = *p;
		size_t n = 1, skip;
		if (cp >= 0x80) {
			if (!(n = util_utf8_seq(p, (size_t)(end - p), &skip))) {
				/* not UTF-8, which cannot come from libyaml, but never print it raw */
				buf_printf(out, "\\x%02X", *p++);
				continue;
			}
			cp = util_utf8_codepoint(p, n);
		}
		bool printable = (cp >= 0x20 && cp < 0x7F) ||
				 (cp >= 0xA0 && cp <= 0xD7FF && cp != 0x2028 && cp != 0x2029) ||
				 (cp >= 0xE000 && cp <= 0xFFFD && cp != 0xFEFF) ||
				 (cp >= 0x10000 && cp <= 0x10FFFF);
		if (cp == '"' || cp == '\\')
			buf_printf(out, "\\%c", (char)cp);
		else if (cp == '\n')
			buf_puts(out, "\\n");
		else if (cp == '\t')
			buf_puts(out, "\\t");
		else if (printable)
			buf_append(out, p, n);
		else if (cp < 0x100)
			buf_printf(out, "\\x%02X", (unsigned)cp);
		else if (cp < 0x10000)
			buf_printf(out, "\\u%04X", (unsigned)cp);
		else
			buf_printf(out, "\\U%08X", (unsigned)cp);
		p += n;
	}
	buf_putc(out, '"');
}

/* The space between a YAML key and its value. */
static void lead(emit *e)
{
	if (e->space)
		buf_putc(e->b, ' ');
	e->space = false;
}

void cfg_emit_line(emit *e, int indent)
{
	if (e->b->len && e->b->data[e->b->len - 1] != '\n')
		buf_putc(e->b, '\n');
	buf_printf(e->b, "%*s", indent, "");
}

void cfg_emit_key(emit *e, const char *name)
{
	if (e->json) {
		json_key(e->b, &e->first, name);
	} else if (e->flow) {
		buf_printf(e->b, "%s%s:", e->first ? "" : ", ", name);
		e->space = true;
	} else {
		if (!e->inline_key)
			cfg_emit_line(e, e->indent);
		e->inline_key = false;
		buf_printf(e->b, "%s:", name);
		e->space = true;
	}
	e->first = false;
}

void cfg_emit_str(emit *e, const char *s)
{
	lead(e);
	if (e->json)
		json_str(e->b, s);
	else
		yaml_str(e->b, s);
}

void cfg_emit_word(emit *e, const char *s)
{
	lead(e);
	if (e->json)
		json_str(e->b, s);
	else
		buf_puts(e->b, s);
}

void cfg_emit_raw(emit *e, const char *s)
{
	lead(e);
	buf_puts(e->b, s);
}

void cfg_emit_u64(emit *e, uint64_t v)
{
	lead(e);
	json_u64(e->b, v); /* a number is written the same in YAML */
}

emit cfg_emit_open(emit *e, char c)
{
	lead(e);
	buf_putc(e->b, c);
	emit saved = *e;
	if (c == '{')
		e->flow = e->first = true;
	return saved;
}

void cfg_emit_close(emit *e, char c, const emit *saved)
{
	buf_putc(e->b, c);
	e->flow = saved->flow;
	e->first = saved->first;
}

void cfg_emit_item(emit *e, size_t i)
{
	if (i)
		buf_puts(e->b, e->json ? "," : ", ");
}

/* ---- entry points ---- */

void cfg_print(const cfg *c, FILE *out)
{
	buf b = {0}, path = {0};
	emit e = {.b = &b, .first = true, .path = &path, .secrets_of = c};
	cfg_keys_print(&e, c, &top_keys);
	buf_putc(&b, '\n');
	fwrite(b.data, 1, b.len, out);
	buf_free(&b);
	buf_free(&path);
}

void cfg_subscription_json(const cfg_subscription *s, buf *out)
{
	emit e = {.b = out, .json = true, .first = true};
	buf_putc(out, '{');
	cfg_keys_print(&e, s, &sub_keys);
	buf_putc(out, '}');
}
