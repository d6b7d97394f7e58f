/* A table's schema events (cdc.v1.Schema). */
#ifndef CDC_SCHEMA_H
#define CDC_SCHEMA_H

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/ddl.h"
#include "decoder/pgoutput.h"

/* A schema event has the table's columns as the relation cache has them (names, types as format_type()
 * prints them, key flags, replica identity). It has what cdc's DDL events told of the table (NOT NULL,
 * and renames, followed by column number). Its id is a hash of what it describes, the same for the
 * same columns after a restart. */

/* What the DDL events told of each table, in stream order. */
typedef struct sch_tables sch_tables;

sch_tables *pgo_schema_tables_new(void);
void pgo_schema_tables_free(sch_tables *tables);

/* A DDL event, in stream order. before is the table as the last Relation message described it (the relation
 * cache's entry of msg->relid when the message arrives), or NULL. The columns after the command are compared
 * by column number with those the previous DDL event listed. For a table's first DDL event, they are compared
 * by name with before's. Then the one column a RENAME COLUMN command names (by its number) is the one name
 * that went, as the command renames one column and nothing else. */
void pgo_schema_tables_ddl(sch_tables *tables, const ddl_msg *msg, const pgo_rel *before);
/* Counts the DDL events. A schema built before one may now be built differently. */
uint64_t pgo_schema_tables_generation(const sch_tables *tables);
/* name's name in table relid when the generation was since, if renames since then gave the column its name
 * now. NULL if it had the same name then, was added since, or what happened is not known. */
const char *pgo_schema_renamed_from(const sch_tables *tables, uint32_t relid, uint64_t since,
				    const char *name);

/* The OP_SCHEMA event of rel (schema, table, relation_id, table_schema). tables may be NULL. It has:
 * - every column with its type (pgo_format_type), OID, typmod and key flag
 * - nullable, where tables's latest DDL event of the table listed the same columns (names and types, in
 *   order)
 * - the replica identity (rel->replident 'd', 'n', 'f' or 'i', 0 when not known). */
Cdc__V1__Event *pgo_schema_event(arena *ar, const pgo_relcache *rc, const pgo_rel *rel,
				 const sch_tables *tables);
/* The id of a schema event, never 0. It is a 64-bit FNV-1a hash of its schema, table, replica identity, and
 * each column's name, type, OID, typmod, key flag and nullability (not renamed_from). */
uint64_t pgo_schema_id(const Cdc__V1__Event *event);

#endif
