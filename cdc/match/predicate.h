/* predicate.h: the `where` predicate of a subscription, a small SQL-like condition over an event's
 * rows (new.status = 'paid' and new.amount >= 100): parsed once from the config, evaluated per
 * event with SQL's three-valued logic. */
#ifndef CDC_PREDICATE_H
#define CDC_PREDICATE_H

#include <stdbool.h>
#include <stddef.h>

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/base/util.h"

#define PRED_MAX_TEXT 4096 /* bytes of predicate text */
#define PRED_MAX_DEPTH 64  /* nested parentheses and `not`s */
#define PRED_MAX_TERMS 256 /* operands: column references and literals, list items included */

typedef struct pred pred;

/* Parses text:
 *   or: and {"or" and}   and: not {"and" not}   not: "not" not | cmp
 *   cmp: "(" or ")" | operand (= | != | <> | < | <= | > | >=) operand
 *      | operand ["not"] "in" "(" operand {"," operand} ")" | operand "is" ["not"] "null"
 *   operand: ("new" | "old") "." name | number | 'string' | true | false | null
 * Names are identifiers folded to lower case or "quoted" exactly; keywords are case-insensitive;
 * numbers are -?digits[.digits][e[+-]digits]; '' is a quote inside a string.
 * On error returns NULL and writes "position N: what is wrong" to err, N the 1-based character
 * (UTF-8 code point) where the problem starts: the offending token, or for "... after 'X'"
 * messages the X that lacks what should follow it. */
pred *pred_parse(const char *text, char *err, size_t errlen) CDC_MUST_CHECK;
void pred_free(pred *predicate);

/* True only if the predicate is true for event; false when it is false or unknown (a comparison with
 * NULL, an absent column or row, unchanged TOAST, a type mismatch or a literal that does not
 * convert to the column's type). new.X reads e->new_row, old.X e->old_row. Scratch memory (literals
 * converted to a column's type) comes from a; nothing else is allocated. */
bool pred_eval(const pred *predicate, const Cdc__V1__Event *event, arena *ar);

/* A column of the table a predicate is checked against. */
typedef struct pred_column {
	const char *name;
	uint32_t type_oid;
	const char *type_name; /* for messages: pg_type.typname ("int4", "text") */
} pred_column;

/* Whether every comparison of predicate could be true for some row of a table of these columns. False, with
 * the first that never can in err ("new.val = 5 is never true: column val is of type text and 5 is
 * a number; write '5'"): a column the table lacks, a literal of a kind the column's type never
 * compares with (pred_eval has no coercion) or that is not a value of the type, a comparison with
 * null, and with reads (a backfill's rows, which have no old row) any old.column. Column-to-column
 * comparisons are checked only for the columns' existence. Scratch memory from a. */
bool pred_check_columns(const pred *predicate, const pred_column *cols, size_t ncols, bool reads, arena *ar,
			char *err, size_t errlen) CDC_MUST_CHECK;

/* A read-only view of the parsed tree, for translators (a backfill pushes `where` into its SQL).
 * Nodes are numbered from 0; pred_root() is the top one. The enums follow the grammar above. */
typedef enum pred_kind {
	PRED_OR,
	PRED_AND,
	PRED_NOT,
	PRED_CMP,
	PRED_IN,
	PRED_ISNULL,
	PRED_COL,
	PRED_NUM,
	PRED_STR,
	PRED_BOOL,
	PRED_NULL,
} pred_kind;
typedef enum pred_op { PRED_EQ, PRED_NE, PRED_LT, PRED_LE, PRED_GT, PRED_GE } pred_op;
typedef struct pred_node {
	pred_kind kind;
	pred_op op;    /* PRED_CMP */
	bool flag;     /* PRED_IN: not in; PRED_ISNULL: is not null; PRED_COL: old.; PRED_BOOL: the value */
	int32_t a, b;  /* PRED_OR, PRED_AND, PRED_NOT: first child; PRED_CMP: operands; PRED_IN: operand,
			* first item; PRED_ISNULL: operand */
	int32_t next;  /* the next child of the same parent, or -1 */
	const char *s; /* PRED_COL: name; PRED_STR: text; PRED_NUM: as written */
	size_t len;
} pred_node;
int32_t pred_root(const pred *predicate);
/* How many nodes there are: 0 .. pred_count() - 1 are all the tree's. */
size_t pred_count(const pred *predicate);
/* Whether the predicate reads an old.column anywhere (it then needs the old row of updates and
 * deletes: REPLICA IDENTITY FULL, unless it reads key columns only). */
bool pred_reads_old(const pred *predicate);
pred_node pred_node_at(const pred *predicate, int32_t value);

#endif
