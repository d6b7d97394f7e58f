/* pgtypes.h: OIDs and names of PostgreSQL's built-in types (they are fixed across versions). */
#ifndef CDC_PGTYPES_H
#define CDC_PGTYPES_H

#include <stdint.h>

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
#define PGT_FLOAT4 700
#define PGT_FLOAT8 701
#define PGT_BPCHAR 1042
#define PGT_VARCHAR 1043
#define PGT_DATE 1082
#define PGT_TIME 1083
#define PGT_TIMESTAMP 1114
#define PGT_TIMESTAMPTZ 1184
#define PGT_INTERVAL 1186
#define PGT_TIMETZ 1266
#define PGT_NUMERIC 1700
#define PGT_UUID 2950
#define PGT_JSONB 3802

/* The pg_type.typname of a built-in type ("int4", "_text", ...), or NULL. */
const char *pgtypes_builtin_name(uint32_t oid);

#endif
