/* The logical messages cdc's DDL event trigger writes (prefix DDL_PREFIX, source.ddl). Each is one JSON
 * object per command on a table, parsed and checked here, and turned into an OP_DDL event. */
#ifndef CDC_DDL_H
#define CDC_DDL_H

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/base/util.h"

/* The content is untrusted, as any role allowed to call pg_logical_emit_message can write one. Every
 * field is checked, and a message that does not parse is refused with what is wrong. */

#define DDL_PREFIX "cdc.ddl"
/* The version of the message's shape that this cdc writes and reads ("v"). */
#define DDL_VERSION 1
/* The trigger keeps at most this many characters of a statement (at most 64 KiB of UTF-8). */
#define DDL_MAX_STATEMENT_CHARS 16384

typedef struct ddl_column {
	int32_t attnum;
	const char *name, *type;
	uint32_t type_oid;
	int32_t typmod;
	bool not_null;
} ddl_column;

typedef struct ddl_msg {
	const char *event;	 /* "ddl_command_end" or "sql_drop" */
	const char *tag;	 /* the command tag, e.g. "ALTER TABLE", "DROP TABLE" */
	const char *object_type; /* e.g. "table", "table column" */
	const char *identity;	 /* e.g. "public.orders", "public.orders.note" */
	const char *schema, *table;
	uint32_t relid;
	int32_t subid; /* a column command's column number (attnum), 0 for the table */
	const char *statement;
	bool has_columns; /* a list of the table's columns after the command came (not for a drop) */
	size_t ncols;
	ddl_column *cols; /* in attnum order */
} ddl_msg;

/* Parses one message's content. Strings and columns go into ar. False with err naming the field and what is
 * wrong ("columns[2].attnum: expected an integer from 1 to 32767"). Keys it does not know are ignored, as a
 * newer trigger may add some. A newer "v" is read as far as it goes. */
bool pgo_ddl_parse(arena *ar, const char *content, size_t len, ddl_msg *out, char *err,
		   size_t errlen) CDC_MUST_CHECK;

/* The OP_DDL event of msg (schema, table, relation_id, ddl). The transaction fields are the caller's. */
Cdc__V1__Event *pgo_ddl_event(arena *ar, const ddl_msg *msg);

#endif
