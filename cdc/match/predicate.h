/* The `where` predicate of a subscription, a small SQL-like condition over an event's rows, such as
 * new.status = 'paid' and new.amount >= 100. It is parsed once from the config and evaluated per
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
#define PRED_MAX_TERMS 256 /* operands (column references and literals, list items included) */

typedef struct pred pred;

/* Parses text in this grammar:
 *   or: and {"or" and}   and: not {"and" not}   not: "not" not | cmp
 *   cmp: "(" or ")" | operand (= | != | <> | < | <= | > | >=) operand
 *      | operand ["not"] "in" "(" operand {"," operand} ")" | operand "is" ["not"] "null"
 *   operand: ("new" | "old") "." name | number | 'string' | true | false | null
 * Names are identifiers folded to lower case, or "quoted" and taken exactly. Keywords are
 * case-insensitive. Numbers are -?digits[.digits][e[+-]digits]. '' is a quote inside a string.
 * On error it returns NULL and writes "position N: what is wrong" to err. N is the 1-based character
 * (UTF-8 code point) where the problem starts. That is the offending token, or for "... after 'X'"
 * messages the X that lacks what should follow it. */
pred *match_predicate_parse(const char *text, char *err, size_t errlen) CDC_MUST_CHECK;
void match_predicate_free(pred *predicate);

/* True only if the predicate is true for event. False when it is false or unknown. Unknown comes from
 * a comparison with NULL, an absent column or row, unchanged TOAST, a type mismatch or a literal that
 * does not convert to the column's type. new.X reads event->new_row, old.X event->old_row. Scratch
 * memory (literals converted to a column's type) comes from ar. Nothing else is allocated. */
bool match_predicate_eval(const pred *predicate, const Cdc__V1__Event *event, arena *ar);

/* A column of the table a predicate is checked against. */
typedef struct pred_column {
	const char *name;
	uint32_t type_oid;
	const char *type_name; /* pg_type.typname ("int4", "text"), for messages */
} pred_column;

/* Whether every comparison of predicate could be true for some row of a table of these columns. On
 * false, err names the first that never can, as in "new.val = 5 is never true: column val is of type
 * text and 5 is a number; write '5'". A comparison never can be true with a column the table lacks.
 * The same holds for a literal of a kind the column's type never compares with (match_predicate_eval has no
 * coercion), or one that is not a value of the type. It holds for a comparison with null too. With
 * reads (a backfill's rows, which have no old row) it holds for any old.column. Column-to-column
 * comparisons are checked only for the columns' existence. Scratch memory comes from ar. */
bool match_predicate_check_columns(const pred *predicate, const pred_column *cols, size_t ncols, bool reads,
				   arena *ar, char *err, size_t errlen) CDC_MUST_CHECK;

/* A read-only view of the parsed tree, for translators (a backfill pushes `where` into its SQL).
 * Nodes are numbered from 0. match_predicate_root() is the top one. The enums follow the grammar above. */
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
/* What the fields mean by kind:
 * - flag is "not in" for PRED_IN, "is not null" for PRED_ISNULL, "old." for PRED_COL, and the value
 *   for PRED_BOOL.
 * - a is the first child of PRED_OR, PRED_AND and PRED_NOT. a and b are the operands of PRED_CMP.
 *   For PRED_IN, a is the operand and b the first item. For PRED_ISNULL, a is the operand.
 * - s is the name for PRED_COL, the text for PRED_STR, and the number as written for PRED_NUM. */
typedef struct pred_node {
	pred_kind kind;
	pred_op op;    /* PRED_CMP */
	bool flag;     /* see above */
	int32_t a, b;  /* see above */
	int32_t next;  /* the next child of the same parent, or -1 */
	const char *s; /* see above */
	size_t len;
} pred_node;
int32_t match_predicate_root(const pred *predicate);
/* How many nodes there are. The nodes 0 .. match_predicate_count() - 1 are all the tree's. */
size_t match_predicate_count(const pred *predicate);
/* Whether the predicate reads an old.column anywhere. It then needs the old row of updates and
 * deletes, so REPLICA IDENTITY FULL, unless it reads key columns only. */
bool match_predicate_reads_old(const pred *predicate);
pred_node match_predicate_node_at(const pred *predicate, int32_t value);

#endif
