/* The values a configuration holds, each read and written by one implementation here: durations,
 * sizes, addresses, topics, names, and the names of enums. cfg_sink_name and the like also answer from
 * the parser's enum tables. "schema.table" patterns are cdc/match's (match.h). */
#include "cdc/config/config_internal.h"

#include <inttypes.h>
#include <string.h>

/* ---- value checks shared by setters and tests ---- */

bool cfg_parse_duration(const char *s, uint64_t *ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {{"h", 3600000}, {"ms", 1}, {"m", 60000}, {"s", 1000}};
	uint64_t total = 0;
	int last = -1; /* units must come in decreasing order, each once ("1h30m", not "30m1h") */

	if (!s || !*s)
		return false;
	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return true;
	}
	while (*s) {
		uint64_t v = 0;
		if (*s < '0' || *s > '9')
			return false;
		for (; *s >= '0' && *s <= '9'; s++) {
			if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
				return false;
			v = v * 10 + (uint64_t)(*s - '0');
		}
		int u;
		for (u = 0; u < 4; u++)
			if (strncmp(s, units[u].unit, strlen(units[u].unit)) == 0)
				break;
		if (u == 4)
			return false;
		int rank = u == 0 ? 0 : u == 2 ? 1 : u == 3 ? 2 : 3; /* h, m, s, ms */
		if (rank <= last)
			return false;
		last = rank;
		s += strlen(units[u].unit);
		if (v > UINT64_MAX / units[u].ms || total > UINT64_MAX - v * units[u].ms)
			return false;
		total += v * units[u].ms;
	}
	*ms = total;
	return true;
}

/* Largest first, since the printer takes the first unit that divides a size exactly. Binary units
 * only. PostgreSQL reads "1GB" as 1024^3 bytes, other tools as 10^9. So cdc takes neither reading of
 * the decimal-looking units (cfg_size_problem explains). */
static const struct {
	const char *unit;
	uint64_t mult;
} size_units[] = {
    {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}, {"B", 1}, {"", 1},
};

/* The digits of s into *v. s then points past them. False if there are none or they overflow. */
static bool size_number(const char **s, uint64_t *v)
{
	const char *p = *s;
	*v = 0;
	if (!p || *p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (*v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return false;
		*v = *v * 10 + (uint64_t)(*p - '0');
	}
	*s = p;
	return true;
}

bool cfg_parse_size(const char *s, uint64_t *bytes)
{
	uint64_t v;
	if (!size_number(&s, &v))
		return false;
	for (size_t i = 0; i < sizeof size_units / sizeof *size_units; i++) {
		if (strcmp(s, size_units[i].unit) != 0)
			continue;
		if (v > UINT64_MAX / size_units[i].mult)
			return false;
		*bytes = v * size_units[i].mult;
		return true;
	}
	return false;
}

const char *cfg_size_problem(const char *s, char *why, size_t whylen)
{
	/* PostgreSQL's spellings first, which it reads as 1024-based */
	static const char *const decimal[] = {"kB", "MB", "GB", "TB", "KB", "kb", "mb", "gb", "tb"};
	static const char binary[] = "KMGTKKMGT"; /* the binary unit's letter for each of decimal[] */
	uint64_t v;
	const char *unit = s;
	if (size_number(&unit, &v))
		for (size_t i = 0; i < sizeof decimal / sizeof *decimal; i++)
			if (strcmp(unit, decimal[i]) == 0) {
				int n = (int)(unit - s),
				    len = snprintf(why, whylen,
						   "write %.*s%ciB, or the number of bytes: "
						   "decimal units are ambiguous",
						   n, s, binary[i]);
				if (i < 4 && len > 0 && (size_t)len < whylen)
					snprintf(why + len, whylen - (size_t)len,
						 ", PostgreSQL reads %s as %.*s%ciB", s, n, s, binary[i]);
				return why;
			}
	return "expected bytes, or e.g. 64KiB, 64MiB, 1GiB; at most 2^64-1";
}

void cfg_fmt_duration(buf *b, uint64_t ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
	if (!ms)
		buf_putc(b, '0');
	for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
		if (ms >= units[i].ms) {
			buf_printf(b, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
			ms %= units[i].ms;
		}
	}
}

void cfg_fmt_size(buf *b, uint64_t n)
{
	for (size_t i = 0; n && size_units[i].mult > 1; i++) {
		if (n % size_units[i].mult == 0) {
			buf_printf(b, "%" PRIu64 "%s", n / size_units[i].mult, size_units[i].unit);
			return;
		}
	}
	buf_printf(b, "%" PRIu64, n);
}

/* "HOST:PORT" or "[IPv6]:PORT", port 1-65535. NULL if ok. */
const char *cfg_listen_problem(const char *s)
{
	const char *port;
	if (*s == '[') {
		const char *end = strchr(s, ']');
		if (!end || end == s + 1 || end[1] != ':')
			return "expected [IPv6]:PORT";
		for (const char *p = s + 1; p < end; p++)
			if (!strchr("0123456789abcdefABCDEF:.%", *p) &&
			    !(*p == '_' || *p == '-' || (*p >= 'g' && *p <= 'z') || (*p >= 'G' && *p <= 'Z')))
				return "invalid character in IPv6 address";
		if (!memchr(s + 1, ':', (size_t)(end - s - 1)))
			return "expected an IPv6 address inside [ ]";
		port = end + 2;
	} else {
		const char *colon = strrchr(s, ':');
		if (!colon || colon == s)
			return "expected HOST:PORT or [IPv6]:PORT";
		for (const char *p = s; p < colon; p++) {
			if (*p == ':')
				return "an IPv6 address needs brackets: [IPv6]:PORT";
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
				return "invalid character in host name";
		}
		port = colon + 1;
	}
	unsigned long v = 0;
	size_t digits = strspn(port, "0123456789");
	if (!digits || port[digits] || digits > 5)
		return "port must be a number from 1 to 65535";
	for (size_t i = 0; i < digits; i++)
		v = v * 10 + (unsigned long)(port[i] - '0');
	if (v < 1 || v > 65535)
		return "port must be a number from 1 to 65535";
	return NULL;
}

/* ---- names ---- */

const ident_rule slot_rule = {LOWER DIGIT "_", LOWER DIGIT "_", 63,
			      "[a-z0-9_]{1,63}, PostgreSQL's rule for slot names"};
/* Any name PostgreSQL can hold (cdc always quotes it), but no control characters, which would
 * forge log lines. */
const ident_rule pub_rule = {NULL, NULL, 63, "1 to 63 bytes without control characters"};
const ident_rule sub_rule = {LOWER UPPER DIGIT "_.-", LOWER UPPER DIGIT "_.-", 64,
			     "1 to 64 characters from [A-Za-z0-9_.-]"};

bool cfg_ident_ok(const char *s, const ident_rule *r)
{
	size_t n = strlen(s);
	if (n < 1 || n > r->max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (r->first ? !strchr(i ? r->rest : r->first, s[i])
			     : (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

const ename *cfg_ename_find(const ename *e, const char *name)
{
	for (; e->name; e++)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

const char *cfg_ename_of(const ename *e, int value)
{
	for (; e->name; e++)
		if (e->value == value)
			return e->name;
	return "?";
}

void cfg_ename_list(buf *b, const ename *e)
{
	for (const ename *p = e; p->name; p++)
		buf_printf(b, "%s%s", p == e ? "" : ", ", p->name);
}

const ename op_names[] = {
    {"insert", MATCH_OP_INSERT},   {"update", MATCH_OP_UPDATE},
    {"delete", MATCH_OP_DELETE},   {"truncate", MATCH_OP_TRUNCATE},
    {"message", MATCH_OP_MESSAGE}, {"schema", MATCH_OP_SCHEMA},
    {"ddl", MATCH_OP_DDL},	   {NULL, 0},
};
const ename gap_names[] = {{"fail", CFG_GAP_FAIL}, {"resync", CFG_GAP_RESYNC}, {NULL, 0}};
const ename tcp_read_names[] = {
    {"open", CFG_TCP_READ_OPEN}, {"probes", CFG_TCP_READ_PROBES}, {"token", CFG_TCP_READ_TOKEN}, {NULL, 0}};
#define LEVEL_ENAME(v, name) {name, v},
const ename level_names[] = {LOG_LEVELS(LEVEL_ENAME){NULL, 0}};
const ename format_names[] = {{"text", LOG_FORMAT_TEXT}, {"json", LOG_FORMAT_JSON}, {NULL, 0}};
const char *cfg_sink_name(int module)
{
	return cfg_ename_of(sink_names, module);
}

sink_sub *cfg_sink_subs(const cfg *c, size_t module)
{
	sink_sub *v = util_xcalloc(c->nsubs ? c->nsubs : 1, sizeof(*v));
	for (size_t i = 0; i < c->nsubs; i++)
		v[i] = (sink_sub){.name = c->subs[i].name,
				  .tag = c->subs[i].tag,
				  .mine = c->subs[i].sink == (int)module,
				  .settings = c->subs[i].sink_settings[module]};
	return v;
}
