/* See pgtypes.h. Built-in OIDs (< 10000) are fixed across server versions. */
#include "decoder/pgtypes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This file holds the names of PostgreSQL's built-in types by OID, for Other.type_name and the JSON of types
 * cdc has no typed form for. It reads type modifiers as PostgreSQL's numeric_typmod_precision,
 * anybit_typmodout and timestamp's typmodout read them. It prints a column's type as format_type() prints it
 * (schema events). */

/* Generated once from a fresh PostgreSQL 15.18 cluster (initdb, default template) with this query.
 *   SELECT oid, typname FROM pg_type WHERE oid < 10000 AND typtype IN ('b','r','m') ORDER BY oid
 * These are base, range and multirange types and their array types. Pseudo types are left out. The
 * rows are sorted by OID for the binary search below, so keep them sorted if you add rows. */
/* clang-format off */
static const struct builtin_type {
	uint32_t oid;
	const char *name;
} builtin_types[] = {
	{16, "bool"},
	{17, "bytea"},
	{18, "char"},
	{19, "name"},
	{20, "int8"},
	{21, "int2"},
	{22, "int2vector"},
	{23, "int4"},
	{24, "regproc"},
	{25, "text"},
	{26, "oid"},
	{27, "tid"},
	{28, "xid"},
	{29, "cid"},
	{30, "oidvector"},
	{114, "json"},
	{142, "xml"},
	{143, "_xml"},
	{194, "pg_node_tree"},
	{199, "_json"},
	{210, "_pg_type"},
	{270, "_pg_attribute"},
	{271, "_xid8"},
	{272, "_pg_proc"},
	{273, "_pg_class"},
	{600, "point"},
	{601, "lseg"},
	{602, "path"},
	{603, "box"},
	{604, "polygon"},
	{628, "line"},
	{629, "_line"},
	{650, "cidr"},
	{651, "_cidr"},
	{700, "float4"},
	{701, "float8"},
	{718, "circle"},
	{719, "_circle"},
	{774, "macaddr8"},
	{775, "_macaddr8"},
	{790, "money"},
	{791, "_money"},
	{829, "macaddr"},
	{869, "inet"},
	{1000, "_bool"},
	{1001, "_bytea"},
	{1002, "_char"},
	{1003, "_name"},
	{1005, "_int2"},
	{1006, "_int2vector"},
	{1007, "_int4"},
	{1008, "_regproc"},
	{1009, "_text"},
	{1010, "_tid"},
	{1011, "_xid"},
	{1012, "_cid"},
	{1013, "_oidvector"},
	{1014, "_bpchar"},
	{1015, "_varchar"},
	{1016, "_int8"},
	{1017, "_point"},
	{1018, "_lseg"},
	{1019, "_path"},
	{1020, "_box"},
	{1021, "_float4"},
	{1022, "_float8"},
	{1027, "_polygon"},
	{1028, "_oid"},
	{1033, "aclitem"},
	{1034, "_aclitem"},
	{1040, "_macaddr"},
	{1041, "_inet"},
	{1042, "bpchar"},
	{1043, "varchar"},
	{1082, "date"},
	{1083, "time"},
	{1114, "timestamp"},
	{1115, "_timestamp"},
	{1182, "_date"},
	{1183, "_time"},
	{1184, "timestamptz"},
	{1185, "_timestamptz"},
	{1186, "interval"},
	{1187, "_interval"},
	{1231, "_numeric"},
	{1263, "_cstring"},
	{1266, "timetz"},
	{1270, "_timetz"},
	{1560, "bit"},
	{1561, "_bit"},
	{1562, "varbit"},
	{1563, "_varbit"},
	{1700, "numeric"},
	{1790, "refcursor"},
	{2201, "_refcursor"},
	{2202, "regprocedure"},
	{2203, "regoper"},
	{2204, "regoperator"},
	{2205, "regclass"},
	{2206, "regtype"},
	{2207, "_regprocedure"},
	{2208, "_regoper"},
	{2209, "_regoperator"},
	{2210, "_regclass"},
	{2211, "_regtype"},
	{2949, "_txid_snapshot"},
	{2950, "uuid"},
	{2951, "_uuid"},
	{2970, "txid_snapshot"},
	{3220, "pg_lsn"},
	{3221, "_pg_lsn"},
	{3361, "pg_ndistinct"},
	{3402, "pg_dependencies"},
	{3614, "tsvector"},
	{3615, "tsquery"},
	{3642, "gtsvector"},
	{3643, "_tsvector"},
	{3644, "_gtsvector"},
	{3645, "_tsquery"},
	{3734, "regconfig"},
	{3735, "_regconfig"},
	{3769, "regdictionary"},
	{3770, "_regdictionary"},
	{3802, "jsonb"},
	{3807, "_jsonb"},
	{3904, "int4range"},
	{3905, "_int4range"},
	{3906, "numrange"},
	{3907, "_numrange"},
	{3908, "tsrange"},
	{3909, "_tsrange"},
	{3910, "tstzrange"},
	{3911, "_tstzrange"},
	{3912, "daterange"},
	{3913, "_daterange"},
	{3926, "int8range"},
	{3927, "_int8range"},
	{4072, "jsonpath"},
	{4073, "_jsonpath"},
	{4089, "regnamespace"},
	{4090, "_regnamespace"},
	{4096, "regrole"},
	{4097, "_regrole"},
	{4191, "regcollation"},
	{4192, "_regcollation"},
	{4451, "int4multirange"},
	{4532, "nummultirange"},
	{4533, "tsmultirange"},
	{4534, "tstzmultirange"},
	{4535, "datemultirange"},
	{4536, "int8multirange"},
	{4600, "pg_brin_bloom_summary"},
	{4601, "pg_brin_minmax_multi_summary"},
	{5017, "pg_mcv_list"},
	{5038, "pg_snapshot"},
	{5039, "_pg_snapshot"},
	{5069, "xid8"},
	{6150, "_int4multirange"},
	{6151, "_nummultirange"},
	{6152, "_tsmultirange"},
	{6153, "_tstzmultirange"},
	{6155, "_datemultirange"},
	{6157, "_int8multirange"},
};
/* clang-format on */

/* Both tables are sorted by their first member, an OID. */
static int by_oid(const void *key, const void *row)
{
	uint32_t a = *(const uint32_t *)key, b = *(const uint32_t *)row;
	return a < b ? -1 : a > b;
}

const char *pgo_types_builtin_name(uint32_t oid)
{
	const struct builtin_type *t =
	    bsearch(&oid, builtin_types, sizeof(builtin_types) / sizeof(*builtin_types),
		    sizeof(*builtin_types), by_oid);
	return t ? t->name : NULL;
}

/* Array types and their element types, from the same cluster, with this query.
 *   SELECT oid, typelem FROM pg_type WHERE oid < 10000 AND typcategory = 'A' AND typname LIKE '\_%'
 *   ORDER BY oid
 * int2vector and oidvector, printed without braces, are not arrays here. */
/* clang-format off */
static const struct array_type {
	uint32_t array, element;
} array_types[] = {
	{143, 142}, {199, 114}, {210, 71}, {270, 75}, {271, 5069}, {272, 81}, {273, 83}, {629, 628},
	{651, 650}, {719, 718}, {775, 774}, {791, 790}, {1000, 16}, {1001, 17}, {1002, 18},
	{1003, 19}, {1005, 21}, {1006, 22}, {1007, 23}, {1008, 24}, {1009, 25}, {1010, 27},
	{1011, 28}, {1012, 29}, {1013, 30}, {1014, 1042}, {1015, 1043}, {1016, 20}, {1017, 600},
	{1018, 601}, {1019, 602}, {1020, 603}, {1021, 700}, {1022, 701}, {1027, 604}, {1028, 26},
	{1034, 1033}, {1040, 829}, {1041, 869}, {1115, 1114}, {1182, 1082}, {1183, 1083},
	{1185, 1184}, {1187, 1186}, {1231, 1700}, {1263, 2275}, {1270, 1266}, {1561, 1560},
	{1563, 1562}, {2201, 1790}, {2207, 2202}, {2208, 2203}, {2209, 2204}, {2210, 2205},
	{2211, 2206}, {2949, 2970}, {2951, 2950}, {3221, 3220}, {3643, 3614}, {3644, 3642},
	{3645, 3615}, {3735, 3734}, {3770, 3769}, {3807, 3802}, {3905, 3904}, {3907, 3906},
	{3909, 3908}, {3911, 3910}, {3913, 3912}, {3927, 3926}, {4073, 4072}, {4090, 4089},
	{4097, 4096}, {4192, 4191}, {5039, 5038}, {6150, 4451}, {6151, 4532}, {6152, 4533},
	{6153, 4534}, {6155, 4535}, {6157, 4536}
};
/* clang-format on */

uint32_t pgo_types_element(uint32_t oid)
{
	const struct array_type *t = bsearch(&oid, array_types, sizeof(array_types) / sizeof(*array_types),
					     sizeof(*array_types), by_oid);
	return t ? t->element : 0;
}

/* A varlena type's modifier counts its 4-byte length header (VARHDRSZ). */
#define TYPMOD_HEADER 4
#define MAX_TIME_PRECISION 6

bool pgo_types_numeric_typmod(int32_t typmod, int *precision, int *scale)
{
	if (typmod < TYPMOD_HEADER)
		return false;
	uint32_t m = (uint32_t)(typmod - TYPMOD_HEADER);
	*precision = (int)(m >> 16 & 0xffff);
	*scale = (int)((m & 0x7ff) ^ 0x400) - 0x400; /* 11 bits, signed */
	return true;
}

int pgo_types_time_precision(uint32_t oid, int32_t typmod)
{
	if (typmod < 0)
		return MAX_TIME_PRECISION;
	if (oid == PGT_INTERVAL)
		typmod &= 0xffff; /* the high half says which fields */
	return typmod <= MAX_TIME_PRECISION ? (int)typmod : MAX_TIME_PRECISION;
}

int pgo_types_length(uint32_t oid, int32_t typmod)
{
	switch (oid) {
	case PGT_BPCHAR:
	case PGT_VARCHAR:
		return typmod >= TYPMOD_HEADER ? (int)(typmod - TYPMOD_HEADER) : -1;
	case PGT_BIT:
	case PGT_VARBIT:
		return typmod >= 0 ? (int)typmod : -1;
	}
	return -1;
}

/* interval's typmod. The fields (the bits of datetime.h's YEAR, MONTH, DAY, HOUR, MINUTE and SECOND) are in
 * the high half, the precision of the seconds in the low one. */
static const char *interval_fields(int fields)
{
	enum {
		MONTH = 1 << 1,
		YEAR = 1 << 2,
		DAY = 1 << 3,
		HOUR = 1 << 10,
		MINUTE = 1 << 11,
		SECOND = 1 << 12
	};
	switch (fields) {
	case YEAR:
		return " year";
	case MONTH:
		return " month";
	case DAY:
		return " day";
	case HOUR:
		return " hour";
	case MINUTE:
		return " minute";
	case SECOND:
		return " second";
	case YEAR | MONTH:
		return " year to month";
	case DAY | HOUR:
		return " day to hour";
	case DAY | HOUR | MINUTE:
		return " day to minute";
	case DAY | HOUR | MINUTE | SECOND:
		return " day to second";
	case HOUR | MINUTE:
		return " hour to minute";
	case HOUR | MINUTE | SECOND:
		return " hour to second";
	case MINUTE | SECOND:
		return " minute to second";
	default: /* 0x7fff, all of them */
		return "";
	}
}

/* A built-in type that is not an array, as format_type() prints it for a column of typmod typmod. It follows
 * the server's typmodout functions. typmod -1 means none. */
static void format_scalar(buf *out, uint32_t oid, const char *name, int32_t typmod)
{
	bool mod = typmod >= 0;
	int p, s;
	char tmp[64];
	const char *zone =
	    oid == PGT_TIMETZ || oid == PGT_TIMESTAMPTZ ? " with time zone" : " without time zone";
	switch (oid) {
	case PGT_BOOL:
		buf_puts(out, "boolean");
		return;
	case PGT_CHAR:
		buf_puts(out, "\"char\""); /* a keyword, quoted as quote_identifier() does */
		return;
	case PGT_INT2:
		buf_puts(out, "smallint");
		return;
	case PGT_INT4:
		buf_puts(out, "integer");
		return;
	case PGT_INT8:
		buf_puts(out, "bigint");
		return;
	case PGT_FLOAT4:
		buf_puts(out, "real");
		return;
	case PGT_FLOAT8:
		buf_puts(out, "double precision");
		return;
	case PGT_BPCHAR:
	case PGT_VARCHAR:
		if (typmod > TYPMOD_HEADER)
			snprintf(tmp, sizeof(tmp), "(%d)", pgo_types_length(oid, typmod));
		else if (mod)
			tmp[0] = '\0';
		else { /* bpchar without a length is not character(1), format_type keeps its name */
			buf_puts(out, oid == PGT_BPCHAR ? "bpchar" : "character varying");
			return;
		}
		buf_puts(out, oid == PGT_BPCHAR ? "character" : "character varying");
		buf_puts(out, tmp);
		return;
	case PGT_NUMERIC:
		buf_puts(out, "numeric");
		if (pgo_types_numeric_typmod(typmod, &p, &s)) {
			snprintf(tmp, sizeof(tmp), "(%d,%d)", p, s);
			buf_puts(out, tmp);
		}
		return;
	case PGT_TIME:
	case PGT_TIMETZ:
	case PGT_TIMESTAMP:
	case PGT_TIMESTAMPTZ:
		buf_puts(out, oid == PGT_TIME || oid == PGT_TIMETZ ? "time" : "timestamp");
		if (mod) {
			snprintf(tmp, sizeof(tmp), "(%d)", (int)typmod);
			buf_puts(out, tmp);
		}
		buf_puts(out, zone);
		return;
	case PGT_INTERVAL:
		buf_puts(out, "interval");
		if (mod) {
			buf_puts(out, interval_fields((typmod >> 16) & 0x7fff));
			if ((typmod & 0xffff) != 0xffff) {
				snprintf(tmp, sizeof(tmp), "(%d)", (int)(typmod & 0xffff));
				buf_puts(out, tmp);
			}
		}
		return;
	case PGT_BIT:
	case PGT_VARBIT:
		if (!mod && oid == PGT_BIT) { /* bit without a length is not bit(1) */
			buf_puts(out, "\"bit\"");
			return;
		}
		buf_puts(out, oid == PGT_BIT ? "bit" : "bit varying");
		if (mod) {
			snprintf(tmp, sizeof(tmp), "(%d)", (int)typmod);
			buf_puts(out, tmp);
		}
		return;
	default:
		buf_puts(out, name);
	}
}

bool pgo_types_format(buf *out, uint32_t oid, int32_t typmod)
{
	const char *name = pgo_types_builtin_name(oid);
	if (!name)
		return false;
	uint32_t elem = pgo_types_element(oid);
	const char *elem_name = elem ? pgo_types_builtin_name(elem) : NULL;
	if (elem && !elem_name) /* an array of a catalog's row type (pg_class[]), its name without the _ */
		buf_puts(out, name + 1);
	else
		format_scalar(out, elem ? elem : oid, elem ? elem_name : name, typmod);
	if (elem)
		buf_puts(out, "[]");
	return true;
}

/* quote_identifier() without its keyword list. A name of lower-case letters, digits and underscores not
 * starting with a digit stays bare. Anything else is quoted. */
static void put_ident(buf *out, const char *s, size_t n)
{
	bool bare = n > 0 && !(s[0] >= '0' && s[0] <= '9');
	for (size_t i = 0; i < n && bare; i++)
		bare = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_';
	if (bare) {
		buf_append(out, s, n);
		return;
	}
	buf_putc(out, '"');
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"')
			buf_putc(out, '"');
		buf_putc(out, s[i]);
	}
	buf_putc(out, '"');
}

void pgo_types_format_named(buf *out, const char *nspname, const char *typname)
{
	/* pgoutput names a domain by its base type. A built-in one comes out as format_type() prints it. */
	for (size_t i = 0;
	     strcmp(nspname, "pg_catalog") == 0 && i < sizeof(builtin_types) / sizeof(builtin_types[0]); i++)
		if (strcmp(builtin_types[i].name, typname) == 0 &&
		    pgo_types_format(out, builtin_types[i].oid, -1))
			return;
	/* PostgreSQL names an array type "_" and its element's name */
	bool array = typname[0] == '_' && typname[1];
	const char *name = typname + array;
	if (strcmp(nspname, "public") != 0 && strcmp(nspname, "pg_catalog") != 0) {
		put_ident(out, nspname, strlen(nspname));
		buf_putc(out, '.');
	}
	put_ident(out, name, strlen(name));
	if (array)
		buf_puts(out, "[]");
}
