/* pgtypes.c: the names of PostgreSQL's built-in types by OID, for Other.type_name and the JSON of
 * types cdc has no typed form for, and a column's type as format_type() prints it (schema events).
 * Built-in OIDs (< 10000) are fixed across server versions. */
#include "decoder/pgtypes.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Generated once from a fresh PostgreSQL 15.18 cluster (initdb, default template):
 *   SELECT oid, typname, CASE WHEN typelem <> 0 AND typstorage <> 'p'
 *     AND typsubscript = 'array_subscript_handler'::regproc THEN typelem ELSE 0 END
 *   FROM pg_type WHERE oid < 10000 AND typtype IN ('b','r','m') ORDER BY oid
 * (base, range and multirange types and their array types; pseudo types are left out; the third
 * column is the element of what format_type() treats as an array).
 * Sorted by OID for the binary search below: keep it sorted if you add rows. */
/* clang-format off */
static const struct {
	uint32_t oid;
	const char *name;
	uint32_t elem; /* an array's element type (format_type prints it with "[]"); else 0 */
} builtin_types[] = {
	{16, "bool", 0},
	{17, "bytea", 0},
	{18, "char", 0},
	{19, "name", 0},
	{20, "int8", 0},
	{21, "int2", 0},
	{22, "int2vector", 0},
	{23, "int4", 0},
	{24, "regproc", 0},
	{25, "text", 0},
	{26, "oid", 0},
	{27, "tid", 0},
	{28, "xid", 0},
	{29, "cid", 0},
	{30, "oidvector", 0},
	{114, "json", 0},
	{142, "xml", 0},
	{143, "_xml", 142},
	{194, "pg_node_tree", 0},
	{199, "_json", 114},
	{210, "_pg_type", 71},
	{270, "_pg_attribute", 75},
	{271, "_xid8", 5069},
	{272, "_pg_proc", 81},
	{273, "_pg_class", 83},
	{600, "point", 0},
	{601, "lseg", 0},
	{602, "path", 0},
	{603, "box", 0},
	{604, "polygon", 0},
	{628, "line", 0},
	{629, "_line", 628},
	{650, "cidr", 0},
	{651, "_cidr", 650},
	{700, "float4", 0},
	{701, "float8", 0},
	{718, "circle", 0},
	{719, "_circle", 718},
	{774, "macaddr8", 0},
	{775, "_macaddr8", 774},
	{790, "money", 0},
	{791, "_money", 790},
	{829, "macaddr", 0},
	{869, "inet", 0},
	{1000, "_bool", 16},
	{1001, "_bytea", 17},
	{1002, "_char", 18},
	{1003, "_name", 19},
	{1005, "_int2", 21},
	{1006, "_int2vector", 22},
	{1007, "_int4", 23},
	{1008, "_regproc", 24},
	{1009, "_text", 25},
	{1010, "_tid", 27},
	{1011, "_xid", 28},
	{1012, "_cid", 29},
	{1013, "_oidvector", 30},
	{1014, "_bpchar", 1042},
	{1015, "_varchar", 1043},
	{1016, "_int8", 20},
	{1017, "_point", 600},
	{1018, "_lseg", 601},
	{1019, "_path", 602},
	{1020, "_box", 603},
	{1021, "_float4", 700},
	{1022, "_float8", 701},
	{1027, "_polygon", 604},
	{1028, "_oid", 26},
	{1033, "aclitem", 0},
	{1034, "_aclitem", 1033},
	{1040, "_macaddr", 829},
	{1041, "_inet", 869},
	{1042, "bpchar", 0},
	{1043, "varchar", 0},
	{1082, "date", 0},
	{1083, "time", 0},
	{1114, "timestamp", 0},
	{1115, "_timestamp", 1114},
	{1182, "_date", 1082},
	{1183, "_time", 1083},
	{1184, "timestamptz", 0},
	{1185, "_timestamptz", 1184},
	{1186, "interval", 0},
	{1187, "_interval", 1186},
	{1231, "_numeric", 1700},
	{1263, "_cstring", 2275},
	{1266, "timetz", 0},
	{1270, "_timetz", 1266},
	{1560, "bit", 0},
	{1561, "_bit", 1560},
	{1562, "varbit", 0},
	{1563, "_varbit", 1562},
	{1700, "numeric", 0},
	{1790, "refcursor", 0},
	{2201, "_refcursor", 1790},
	{2202, "regprocedure", 0},
	{2203, "regoper", 0},
	{2204, "regoperator", 0},
	{2205, "regclass", 0},
	{2206, "regtype", 0},
	{2207, "_regprocedure", 2202},
	{2208, "_regoper", 2203},
	{2209, "_regoperator", 2204},
	{2210, "_regclass", 2205},
	{2211, "_regtype", 2206},
	{2949, "_txid_snapshot", 2970},
	{2950, "uuid", 0},
	{2951, "_uuid", 2950},
	{2970, "txid_snapshot", 0},
	{3220, "pg_lsn", 0},
	{3221, "_pg_lsn", 3220},
	{3361, "pg_ndistinct", 0},
	{3402, "pg_dependencies", 0},
	{3614, "tsvector", 0},
	{3615, "tsquery", 0},
	{3642, "gtsvector", 0},
	{3643, "_tsvector", 3614},
	{3644, "_gtsvector", 3642},
	{3645, "_tsquery", 3615},
	{3734, "regconfig", 0},
	{3735, "_regconfig", 3734},
	{3769, "regdictionary", 0},
	{3770, "_regdictionary", 3769},
	{3802, "jsonb", 0},
	{3807, "_jsonb", 3802},
	{3904, "int4range", 0},
	{3905, "_int4range", 3904},
	{3906, "numrange", 0},
	{3907, "_numrange", 3906},
	{3908, "tsrange", 0},
	{3909, "_tsrange", 3908},
	{3910, "tstzrange", 0},
	{3911, "_tstzrange", 3910},
	{3912, "daterange", 0},
	{3913, "_daterange", 3912},
	{3926, "int8range", 0},
	{3927, "_int8range", 3926},
	{4072, "jsonpath", 0},
	{4073, "_jsonpath", 4072},
	{4089, "regnamespace", 0},
	{4090, "_regnamespace", 4089},
	{4096, "regrole", 0},
	{4097, "_regrole", 4096},
	{4191, "regcollation", 0},
	{4192, "_regcollation", 4191},
	{4451, "int4multirange", 0},
	{4532, "nummultirange", 0},
	{4533, "tsmultirange", 0},
	{4534, "tstzmultirange", 0},
	{4535, "datemultirange", 0},
	{4536, "int8multirange", 0},
	{4600, "pg_brin_bloom_summary", 0},
	{4601, "pg_brin_minmax_multi_summary", 0},
	{5017, "pg_mcv_list", 0},
	{5038, "pg_snapshot", 0},
	{5039, "_pg_snapshot", 5038},
	{5069, "xid8", 0},
	{6150, "_int4multirange", 4451},
	{6151, "_nummultirange", 4532},
	{6152, "_tsmultirange", 4533},
	{6153, "_tstzmultirange", 4534},
	{6155, "_datemultirange", 4535},
	{6157, "_int8multirange", 4536},
};
/* clang-format on */

static int builtin_index(uint32_t oid)
{
	size_t lo = 0, hi = sizeof(builtin_types) / sizeof(builtin_types[0]);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (builtin_types[mid].oid == oid)
			return (int)mid;
		if (builtin_types[mid].oid < oid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

const char *pgtypes_builtin_name(uint32_t oid)
{
	int i = builtin_index(oid);
	return i < 0 ? NULL : builtin_types[i].name;
}

#define VARHDRSZ 4

bool pgtypes_numeric_typmod(int32_t typmod, int *precision, int *scale)
{
	if (typmod < VARHDRSZ)
		return false;
	*precision = ((typmod - VARHDRSZ) >> 16) & 0xffff;
	/* 11 bits of scale, sign-extended: PostgreSQL 15 allows a negative scale and one above the
	 * precision (numeric(3,-2), numeric(4,6)) */
	*scale = (((typmod - VARHDRSZ) & 0x7ff) ^ 1024) - 1024;
	return true;
}

/* interval's typmod: the fields (the bits of datetime.h's YEAR, MONTH, DAY, HOUR, MINUTE and
 * SECOND) in the high half, the precision of the seconds in the low one. */
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
	default: /* 0x7fff: all of them */
		return "";
	}
}

/* A built-in type that is not an array, as format_type() prints it for a column of typmod typmod
 * (the server's typmodout functions; -1: none). */
static void format_scalar(buf *out, int i, int32_t typmod)
{
	uint32_t oid = builtin_types[i].oid;
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
		buf_puts(out, "\"char\""); /* a keyword: quoted, as quote_identifier() does */
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
		if (typmod > VARHDRSZ)
			snprintf(tmp, sizeof(tmp), "(%d)", (int)(typmod - VARHDRSZ));
		else if (mod)
			tmp[0] = '\0';
		else { /* bpchar without a length is not character(1): format_type keeps its name */
			buf_puts(out, oid == PGT_BPCHAR ? "bpchar" : "character varying");
			return;
		}
		buf_puts(out, oid == PGT_BPCHAR ? "character" : "character varying");
		buf_puts(out, tmp);
		return;
	case PGT_NUMERIC:
		buf_puts(out, "numeric");
		if (pgtypes_numeric_typmod(typmod, &p, &s)) {
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
		buf_puts(out, builtin_types[i].name);
	}
}

bool pgtypes_format(buf *out, uint32_t oid, int32_t typmod)
{
	int i = builtin_index(oid);
	if (i < 0)
		return false;
	uint32_t elem = builtin_types[i].elem;
	int e = elem ? builtin_index(elem) : -1;
	if (elem && e < 0) /* an array of a catalog's row type (pg_class[]): its name without the _ */
		buf_puts(out, builtin_types[i].name + 1);
	else
		format_scalar(out, elem ? e : i, typmod);
	if (elem)
		buf_puts(out, "[]");
	return true;
}

/* quote_identifier() without its keyword list: a name of lower-case letters, digits and
 * underscores not starting with a digit stays bare, anything else is quoted. */
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

void pgtypes_format_named(buf *out, const char *nspname, const char *typname)
{
	/* pgoutput names a domain by its base type: a built-in one as format_type() prints it */
	for (size_t i = 0;
	     strcmp(nspname, "pg_catalog") == 0 && i < sizeof(builtin_types) / sizeof(builtin_types[0]); i++)
		if (strcmp(builtin_types[i].name, typname) == 0 &&
		    pgtypes_format(out, builtin_types[i].oid, -1))
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
