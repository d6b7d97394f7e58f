/* OIDs and names of PostgreSQL's built-in types, which are fixed across versions. What a column's type
 * modifier says about it, and a column's type as format_type() prints it. */
#ifndef CDC_PGTYPES_H
#define CDC_PGTYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "decoder/base/util.h"

/* A type modifier (pg_attribute.atttypmod) is read as format_type reads it. It gives numeric's
 * precision and scale, a length, or the fractional digits of a time. */

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
const char *pgo_types_builtin_name(uint32_t oid);

/* The element type of a built-in array type (int4 for _int4, text for _text), or 0. */
uint32_t pgo_types_element(uint32_t oid);

/* numeric's typmod, read as its precision and scale. Since PostgreSQL 15 the scale may be negative, or above
 * the precision. False for a typmod without them (-1 is numeric of any precision). */
bool pgo_types_numeric_typmod(int32_t typmod, int *precision, int *scale);
/* The fractional-second digits of time, timetz, timestamp, timestamptz and interval (0 to 6). They are the
 * modifier's, else 6, what PostgreSQL keeps. */
int pgo_types_time_precision(uint32_t oid, int32_t typmod);
/* The length a modifier gives, or -1 without a modifier (or for another type).
 * - char(n) and varchar(n) have n characters.
 * - bit(n) and varbit(n) have n bits. */
int pgo_types_length(uint32_t oid, int32_t typmod);

/* Appends a column's type as format_type(oid, typmod) prints it for a built-in type. Examples are "integer",
 * "numeric(10,2)", "character varying(20)", "timestamp(3) with time zone", "interval day to second(2)" and
 * "integer[]". A typmod of an array column is its element's. For any other OID it returns false with nothing
 * appended (see pgo_types_format_named). */
bool pgo_types_format(buf *out, uint32_t oid, int32_t typmod);
/* Appends a type of the database's own, from a Type message's schema and name, as format_type() prints it
 * under the default search_path.
 * - It is unqualified in public (and pg_catalog), else "schema.name".
 * - Names that need it are quoted ("My Type").
 * - "_name" (an array type) comes out as "name[]".
 * Names that are SQL keywords are not quoted, though format_type() would quote them. pgoutput names a domain
 * by its base type, as the domain's name is not sent. A built-in one comes out as pgo_types_format's. */
void pgo_types_format_named(buf *out, const char *nspname, const char *typname);

#endif
