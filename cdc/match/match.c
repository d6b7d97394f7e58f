/* "schema.table" patterns, checked and matched (see match.h). */
#include "cdc/match/match.h"

#include <stdio.h>
#include <string.h>

#include "decoder/base/util.h"

/* One part of a pattern, unquoted into out. False if it is not a well-formed part. */
static bool pattern_part(const char **pp, char out[MATCH_NAME_MAX + 1], bool *quoted)
{
	const char *p = *pp;
	size_t n = 0;
	*quoted = *p == '"';
	if (*quoted) {
		for (p++;; p++) {
			if (!*p)
				return false;
			if (*p == '"' && *++p != '"')
				break;
			if (n == MATCH_NAME_MAX)
				return false;
			out[n++] = *p;
		}
	} else {
		for (; *p && *p != '.'; p++) {
			if (*p == '"' || n == MATCH_NAME_MAX)
				return false;
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	*pp = p;
	return n > 0;
}

const char *match_table_problem(const char *s, char *why, size_t whylen)
{
	size_t part_len[2] = {0, 0};
	int part = 0;
	bool inq = false;
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (inq) {
			if (c == '"' && p[1] == '"')
				p++;
			else if (c == '"') {
				inq = false;
				if (p[1] && p[1] != '.')
					return "double quotes must surround a whole schema or table name";
				continue;
			}
		} else if (c == '"') {
			if (p != s && p[-1] != '.')
				return "double quotes must surround a whole schema or table name";
			inq = true;
			continue;
		} else if (c == '.') {
			if (part++)
				return "expected schema.table with exactly one dot outside double quotes";
			continue;
		} else if (!(c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '*' || c == '?')) {
			util_errf(why, whylen, "character '%c' is only allowed inside double quotes",
				  c >= 0x20 && c < 0x7f ? c : '?');
			return why;
		}
		if (c < 0x20 || c == 0x7f)
			return "control characters are not allowed";
		part_len[part]++;
	}
	if (inq)
		return "unterminated double quote";
	if (part == 0)
		return "expected schema.table (no dot)";
	if (!part_len[0])
		return "empty schema name";
	if (!part_len[1])
		return "empty table name";
	if (part_len[0] > MATCH_NAME_MAX || part_len[1] > MATCH_NAME_MAX)
		return "schema and table names are at most 63 bytes";
	/* what passes here, match_table must understand */
	char name[MATCH_NAME_MAX + 1];
	bool quoted;
	const char *p = s;
	if (!pattern_part(&p, name, &quoted) || *p++ != '.' || !pattern_part(&p, name, &quoted) || *p)
		return "not of the form schema.table";
	return NULL;
}

const char *match_table_name_problem(const char *s, char *why, size_t whylen)
{
	const char *problem = match_table_problem(s, why, whylen);
	if (problem)
		return problem;
	bool inq = false;
	for (const char *p = s; *p; p++)
		if (*p == '"')
			inq = !inq; /* a doubled quote flips twice */
		else if (!inq && (*p == '*' || *p == '?'))
			return "a table's name, without * or ? (write the glob's character in double quotes)";
	return NULL;
}

bool match_table_split(const char *name, char schema[MATCH_NAME_MAX + 1], char table[MATCH_NAME_MAX + 1])
{
	bool quoted;
	char why[80];
	const char *p = name;
	return !match_table_name_problem(name, why, sizeof why) && pattern_part(&p, schema, &quoted) &&
	       *p++ == '.' && pattern_part(&p, table, &quoted) && !*p;
}

/* * and ? globs, byte-wise. The backtracking is linear, so no pattern can make it slow. */
static bool glob_match(const char *pat, const char *s)
{
	const char *star = NULL, *resume = NULL;
	while (*s) {
		if (*pat == '*') {
			star = pat++;
			resume = s;
		} else if (*pat && (*pat == '?' || *pat == *s)) {
			pat++;
			s++;
		} else if (star) {
			pat = star + 1;
			s = ++resume;
		} else {
			return false;
		}
	}
	while (*pat == '*')
		pat++;
	return !*pat;
}

bool match_table(const char *pattern, const char *schema, const char *table)
{
	char part[2][MATCH_NAME_MAX + 1];
	bool quoted[2];
	const char *p = pattern;
	if (!pattern_part(&p, part[0], &quoted[0]) || *p != '.')
		return false;
	p++;
	if (!pattern_part(&p, part[1], &quoted[1]) || *p)
		return false;
	return (quoted[0] ? strcmp(part[0], schema) == 0 : glob_match(part[0], schema)) &&
	       (quoted[1] ? strcmp(part[1], table) == 0 : glob_match(part[1], table));
}

bool match_table_literal(const char *pattern)
{
	bool inq = false;
	for (const char *p = pattern; *p; p++) {
		if (*p == '"')
			inq = !inq; /* a doubled quote toggles twice */
		else if (!inq && (*p == '*' || *p == '?'))
			return false;
	}
	return true;
}

/* Edit distance with adjacent swaps (optimal string alignment), of names up to 2 * 64 bytes. */
static unsigned distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	unsigned rows[3][2 * MATCH_NAME_MAX + 3], *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
	for (size_t j = 0; j <= m; j++)
		prev[j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++) {
		cur[0] = (unsigned)i;
		for (size_t j = 1; j <= m; j++) {
			unsigned cost = a[i - 1] != b[j - 1], best = prev[j - 1] + cost;
			if (prev[j] + 1 < best)
				best = prev[j] + 1;
			if (cur[j - 1] + 1 < best)
				best = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    prev2[j - 2] + 1 < best)
				best = prev2[j - 2] + 1;
			cur[j] = best;
		}
		unsigned *spare = prev2;
		prev2 = prev, prev = cur, cur = spare;
	}
	return prev[m];
}

/* A name as a pattern writes it. It is as it is when every character may stand unquoted, else quoted. */
static void pattern_name(char *out, size_t outlen, const char *name)
{
	bool plain = true;
	for (const unsigned char *p = (const unsigned char *)name; *p && plain; p++)
		plain = *p >= 0x80 || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || *p == '_' || *p == '$';
	size_t n = 0;
	if (!plain && n + 1 < outlen)
		out[n++] = '"';
	for (const char *p = name; *p && n + 2 < outlen; p++) {
		if (!plain && *p == '"')
			out[n++] = '"';
		out[n++] = *p;
	}
	if (!plain && n + 1 < outlen)
		out[n++] = '"';
	out[n] = '\0';
}

void match_suggest_start(match_suggest *m, const char *pattern)
{
	*m = (match_suggest){0};
	char part[2][MATCH_NAME_MAX + 1];
	bool quoted;
	const char *p = pattern;
	if (pattern_part(&p, part[0], &quoted) && *p++ == '.' && pattern_part(&p, part[1], &quoted))
		snprintf(m->want, sizeof(m->want), "%s.%s", part[0], part[1]);
}

void match_suggest_add(match_suggest *m, const char *schema, const char *table)
{
	char name[2 * MATCH_NAME_MAX + 2];
	if (!*m->want || strlen(schema) > MATCH_NAME_MAX || strlen(table) > MATCH_NAME_MAX)
		return;
	snprintf(name, sizeof(name), "%s.%s", schema, table);
	unsigned d = distance(m->want, name), limit = (unsigned)strlen(m->want) / 4;
	if (d == 0 || d > (limit ? limit : 1))
		return;
	size_t at = m->n < MATCH_SUGGEST ? m->n : MATCH_SUGGEST; /* the place it takes, from the end */
	while (at > 0 && m->dist[at - 1] > d)
		at--;
	if (at == MATCH_SUGGEST)
		return;
	size_t last = m->n < MATCH_SUGGEST ? m->n : MATCH_SUGGEST - 1;
	memmove(&m->best[at + 1], &m->best[at], (last - at) * sizeof(m->best[0]));
	memmove(&m->dist[at + 1], &m->dist[at], (last - at) * sizeof(m->dist[0]));
	char s[MATCH_QUALIFIED_MAX / 2], t[MATCH_QUALIFIED_MAX / 2];
	pattern_name(s, sizeof(s), schema);
	pattern_name(t, sizeof(t), table);
	snprintf(m->best[at], sizeof(m->best[at]), "%s.%s", s, t);
	m->dist[at] = d;
	if (m->n < MATCH_SUGGEST)
		m->n++;
}

const char *match_suggest_text(const match_suggest *m, char *out, size_t outlen)
{
	size_t len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < m->n && len < outlen; i++)
		len += (size_t)snprintf(out + len, outlen - len, "%s%s",
					i == 0		? "did you mean "
					: i + 1 == m->n ? " or "
							: ", ",
					m->best[i]);
	if (m->n && len + 1 < outlen)
		snprintf(out + len, outlen - len, "?");
	return out;
}
