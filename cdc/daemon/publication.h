/* publication.h: the publication cdc creates and keeps current (source.create): which form the role
 * may create (FOR TABLES IN SCHEMA and FOR ALL TABLES need a superuser and, for schemas,
 * PostgreSQL 15; FOR TABLE needs the tables' ownership), the statements that add the tables
 * source.publish matches as they are created, and the ways out when the role may publish none of
 * them. Pure: the rows come from pub_tables_sql, the caller runs the statements (source.c). */
#ifndef CDC_PUBLICATION_H
#define CDC_PUBLICATION_H

#include <stdbool.h>

#include "cdc/config/config.h"

/* Parameter $1 the publication; one row per table (plain or partitioned, outside the system
 * schemas): schema, table, whether the role may add it to a publication (it owns it: is a member
 * of its owner), whether the publication has it ('t' or 'f'). */
extern const char pub_tables_sql[];

typedef struct pub_row {
	const char *schema, *name;
	bool owned, published;
} pub_row;

/* CREATE PUBLICATION pub for the tables publish matches among rows. A superuser gets what follows
 * new tables by itself where it can ("schema.*" as TABLES IN SCHEMA on PostgreSQL 15+, "*.*" as
 * ALL TABLES), else FOR TABLE of the matching tables; another role FOR TABLE of those it owns (none
 * matching: a publication of no table, filled as they come), the others appended to warnings, one
 * line each with what an owner or superuser runs. False, with the ways out in err, when tables
 * match but the role owns none of them. */
bool pub_create_sql(buf *sql, const char *pub, const cfg_strlist *publish, const pub_row *rows, size_t n,
		    bool superuser, int server_version, buf *warnings, char *err, size_t errlen) CDC_MUST_CHECK;

/* ALTER PUBLICATION pub ADD TABLE ... for the tables publish matches that it lacks and the role owns
 * (sql left empty when there are none); each appended to added as two entries, schema then table.
 * Those the role does not own and that are not in warned yet go to warned ("schema"."table") and,
 * one line each with the statement an owner runs, to warnings. */
void pub_add_sql(buf *sql, const char *pub, const cfg_strlist *publish, const pub_row *rows, size_t n,
		 cfg_strlist *added, cfg_strlist *warned, buf *warnings);

#endif
