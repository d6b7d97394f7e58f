/* cdc's event trigger for source.ddl. For every DDL command on a table it writes a transactional
 * logical message (decoder/ddl.h). The slot delivers it in order with the rows of the same transaction. */
#ifndef CDC_DDL_TRIGGER_H
#define CDC_DDL_TRIGGER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* There is one function (cdc.capture_ddl) and two event triggers (cdc_ddl_command_end, cdc_sql_drop)
 * per database, shared by every cdc streaming from it. They are created idempotently. cdc never drops
 * them (README "DDL events" says how to remove them). */

/* The statements that create (or update) the function and the triggers, in one transaction. */
extern const char ddl_trigger_sql[];

typedef enum ddl_trigger_state {
	DDL_TRIGGER_OK,	     /* both triggers are there, enabled, calling this cdc's function */
	DDL_TRIGGER_MISSING, /* something is missing or older, and ddl_trigger_sql makes it right */
	DDL_TRIGGER_WRONG,   /* a trigger is disabled or calls another function (err says what to do) */
	DDL_TRIGGER_FAILED,  /* the query failed (err says why) */
} ddl_trigger_state;

/* Looks at the database conn is connected to (reads only). */
ddl_trigger_state source_ddl_trigger_check(PGconn *conn, char *err, size_t errlen);

#endif
