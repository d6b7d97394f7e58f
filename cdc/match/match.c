/* match.c: "schema.table" patterns, checked and matched; see match.h. */
#include "cdc/match/match.h"

#include <stdio.h>
#include <string.h>

#include "decoder/base/util.h"

/* One part of a pattern, unquoted into out; false if it is not a well-formed part. */
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
			errf(why, whylen, "character '%c' is only allowed inside double quotes",
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

/* * and ? globs, byte-wise; linear backtracking, so no pattern can make it slow. */
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
