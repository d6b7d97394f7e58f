/* pgtypes.h: OIDs and names of PostgreSQL's built-in types (they are fixed across versions), what
 * a column's type modifier (pg_attribute.atttypmod) says about it, read as format_type reads it:
 * numeric's precision and scale, a length, the fractional digits of a time; and a column's type as
 * format_type() prints it. */
#ifndef CDC_PGTYPES_H
#define CDC_PGTYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "decoder/base/util.h"

#define PGT_BOOL 16
#define PGT_BYTEA 17
#define PGT_CHAR 18
#define PGT_NAME 19
#define PGT_INT8 20
#define PGT_INT2 21
#define PGT_INT4 23
#define PGT_TEXT 25
#define PGT_OID 26
#define PGT_JSON 114
#define PGT_XML 142
#define PGT_POINT 600
#define PGT_FLOAT4 700
#define PGT_FLOAT8 701
#define PGT_MONEY 790
#define PGT_BPCHAR 1042
#define PGT_VARCHAR 1043
#define PGT_DATE 1082
#define PGT_TIME 1083
#define PGT_TIMESTAMP 1114
#define PGT_TIMESTAMPTZ 1184
#define PGT_INTERVAL 1186
#define PGT_TIMETZ 1266
#define PGT_BIT 1560
#define PGT_VARBIT 1562
#define PGT_NUMERIC 1700
#define PGT_UUID 2950
#define PGT_TSVECTOR 3614
#define PGT_JSONB 3802

/* The pg_type.typname of a built-in type ("int4", "_text", ...), or NULL. */
const char *pgtypes_builtin_name(uint32_t oid);

/* The element type of a built-in array type (_int4: int4, _text: text), or 0. */
uint32_t pgtypes_element(uint32_t oid);

/* numeric's typmod: its precision and scale (the scale may be negative, or above the precision,
 * since PostgreSQL 15); false for a typmod without them (-1: numeric of any precision). */
bool pgtypes_numeric_typmod(int32_t typmod, int *precision, int *scale);
/* The fractional-second digits of time, timetz, timestamp, timestamptz and interval (0 to 6): the
 * modifier's, else 6, what PostgreSQL keeps. */
int pgtypes_time_precision(uint32_t oid, int32_t typmod);
/* char(n), varchar(n): n characters; bit(n), varbit(n): n bits; -1 without a modifier (or for
 * another type). */
int pgtypes_length(uint32_t oid, int32_t typmod);

/* Appends a column's type as format_type(oid, typmod) prints it ("integer", "numeric(10,2)",
 * "character varying(20)", "timestamp(3) with time zone", "interval day to second(2)",
 * "integer[]": a typmod of an array column is its element's) for a built-in type; false, with
 * nothing appended, for any other OID (see pgtypes_format_named). */
bool pgtypes_format(buf *out, uint32_t oid, int32_t typmod);
/* Appends a type of the database's own, from a Type message's schema and name, as format_type()
 * prints it under the default search_path: unqualified in public (and pg_catalog), else
 * "schema.name"; names that need it quoted ("My Type"); "_name" (an array type) as "name[]".
 * Names that are SQL keywords are not quoted (format_type() would). pgoutput names a domain by
 * its base type (the domain's name is not sent): a built-in one comes out as pgtypes_format's. */
void pgtypes_format_named(buf *out, const char *nspname, const char *typname);

#endif
