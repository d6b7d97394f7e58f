/* The `where` predicate. It has a one-token lexer, a recursive-descent parser into one node array, and an
 * evaluator with SQL's three-valued logic. Literals and names point into the pred's own copy of the text
 * (unescaped and folded in place). Evaluation allocates only in the arena. */
#include "cdc/match/predicate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/event.h"

/* Decimal exponents beyond this are refused in literals (PostgreSQL's numeric stops far sooner). */
#define DEC_MAX_EXP 1000000

/* An exact decimal, 0.d1d2...dn x 10^exp with d1 != 0, and n = 0 for zero. The digits are read from [dig,
 * end), skipping a '.', so neither a literal nor a column's text is copied. Classes are in PostgreSQL's order
 * (-Infinity < numbers < Infinity < NaN), and NaN equals NaN. */
enum { DEC_NEG_INF, DEC_FINITE, DEC_POS_INF, DEC_NAN };
typedef struct dec {
	int cls;
	bool neg;
	const char *dig, *end;
	int64_t exp;
} dec;

enum tok_type { T_END, T_IDENT, T_QIDENT, T_NUM, T_STR, T_LP, T_RP, T_COMMA, T_DOT, T_OP };
enum kw { KW_NONE, KW_AND, KW_OR, KW_NOT, KW_IN, KW_IS, KW_NULL, KW_TRUE, KW_FALSE, KW_NEW, KW_OLD };
enum cmp_op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

typedef struct tok {
	enum tok_type type;
	enum kw kw;	    /* T_IDENT */
	enum cmp_op op;	    /* T_OP */
	size_t off, srclen; /* where it is in the text */
	const char *s;	    /* T_IDENT folded, T_QIDENT and T_STR unescaped, T_NUM as written */
	size_t len;
	dec num;     /* T_NUM */
	double dbl;  /* T_NUM as a double, for float columns */
	bool dbl_ok; /* false when out of double's range */
} tok;

enum node_kind { N_OR, N_AND, N_NOT, N_CMP, N_IN, N_ISNULL, N_COL, N_NUM, N_STR, N_BOOL, N_NULL };

/* What flag, a, b and s hold depends on the kind.
 * - flag is "not in" for N_IN, "is not null" for N_ISNULL, "old." for N_COL and the value for N_BOOL.
 * - a is the first child of N_OR, N_AND and N_NOT, and the operand of N_IN and N_ISNULL.
 * - a and b are the operands of N_CMP. b is the first item of N_IN.
 * - s is the name of N_COL and the text of N_STR. */
typedef struct node {
	enum node_kind kind;
	enum cmp_op op; /* N_CMP */
	bool flag;
	int32_t a, b;
	int32_t next; /* the next child of the same parent, or -1 */
	const char *s;
	size_t len;
	dec num; /* N_NUM */
	double dbl;
	bool dbl_ok;
} node;

struct pred {
	char *text; /* literals and names point into this copy */
	node *nodes;
	size_t n, cap;
	int32_t root;
};

typedef struct parser {
	pred *p;
	const char *src; /* the caller's text, for positions */
	char *s;	 /* p->text */
	size_t len, pos;
	tok t; /* the current token */
	int depth, terms;
	char *err;
	size_t errlen;
} parser;

/* ---- decimals ---- */

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool span_eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* [+-]digits[.digits][e[+-]digits] (either digit run may be empty, not both), NaN, Infinity,
 * -Infinity. Returns 0, -1 if malformed, -2 if the exponent is beyond DEC_MAX_EXP. */
static int dec_parse(const char *s, size_t n, dec *d)
{
	*d = (dec){.cls = DEC_FINITE};
	if (span_eq(s, n, "NaN")) {
		d->cls = DEC_NAN;
		return 0;
	}
	if (span_eq(s, n, "Infinity") || span_eq(s, n, "+Infinity")) {
		d->cls = DEC_POS_INF;
		return 0;
	}
	if (span_eq(s, n, "-Infinity")) {
		d->cls = DEC_NEG_INF;
		return 0;
	}
	const char *p = s, *end = s + n;
	bool neg = false;
	if (p < end && (*p == '-' || *p == '+'))
		neg = *p++ == '-';
	const char *int0 = p;
	while (p < end && is_digit(*p))
		p++;
	const char *int1 = p, *frac0 = p, *frac1 = p;
	if (p < end && *p == '.') {
		frac0 = ++p;
		while (p < end && is_digit(*p))
			p++;
		frac1 = p;
	}
	if (int1 == int0 && frac1 == frac0)
		return -1;
	int64_t e = 0;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		bool eneg = false;
		if (p < end && (*p == '+' || *p == '-'))
			eneg = *p++ == '-';
		const char *e0 = p;
		for (; p < end && is_digit(*p); p++)
			if (e <= DEC_MAX_EXP)
				e = e * 10 + (*p - '0');
		if (p == e0)
			return -1;
		if (e > DEC_MAX_EXP)
			return -2;
		if (eneg)
			e = -e;
	}
	if (p != end)
		return -1;
	/* The first significant digit sets the exponent. Trailing zeros are not significant. */
	const char *q = int0;
	while (q < int1 && *q == '0')
		q++;
	if (q < int1) {
		d->exp = (int64_t)(int1 - q) + e;
	} else {
		for (q = frac0; q < frac1 && *q == '0'; q++)
			;
		if (q == frac1)
			return 0; /* zero, of either sign */
		d->exp = -(int64_t)(q - frac0) + e;
	}
	const char *r = frac1;
	while (r[-1] == '0' || r[-1] == '.')
		r--;
	d->neg = neg;
	d->dig = q;
	d->end = r;
	return 0;
}

/* -1, 0 or 1 as x is below, equal to or above y. */
#define CMP(x, y) (((x) > (y)) - ((x) < (y)))

static int dec_cmp(const dec *x, const dec *y)
{
	if (x->cls != DEC_FINITE || y->cls != DEC_FINITE)
		return CMP(x->cls, y->cls);
	int sx = !x->dig ? 0 : x->neg ? -1 : 1, sy = !y->dig ? 0 : y->neg ? -1 : 1;
	if (sx != sy || sx == 0)
		return CMP(sx, sy);
	int m = 0;
	if (x->exp != y->exp) {
		m = CMP(x->exp, y->exp);
	} else {
		const char *p = x->dig, *q = y->dig;
		for (;;) {
			/* end is just past a digit, so a '.' is never the last thing before it */
			p += p < x->end && *p == '.';
			q += q < y->end && *q == '.';
			bool pe = p >= x->end, qe = q >= y->end;
			if (pe || qe) {
				m = CMP(qe, pe);
				break;
			}
			if (*p != *q) {
				m = CMP(*p, *q);
				break;
			}
			p++;
			q++;
		}
	}
	return sx > 0 ? m : -m;
}

/* PostgreSQL's float order, where NaN equals NaN and is above everything. */
static int dbl_cmp(double x, double y)
{
	if (isnan(x) || isnan(y))
		return CMP(isnan(x) != 0, isnan(y) != 0);
	return CMP(x, y);
}

/* strtod of a NUL-terminated decimal, refusing overflow and underflow to zero as float8in does. */
static bool str_dbl(const char *s, double *out)
{
	char *endp;
	errno = 0;
	double v = strtod(s, &endp);
	if (errno == ERANGE && (v == 0 || isinf(v)))
		return false;
	*out = v;
	return true;
}

/* ---- lexer ---- */

static size_t char_pos(const char *src, size_t off)
{
	size_t n = 1;
	for (size_t i = 0; i < off; i++)
		n += ((unsigned char)src[i] & 0xC0) != 0x80;
	return n;
}

static bool perr(parser *ps, size_t off, const char *fmt, ...) CDC_PRINTF(3, 4);
static bool perr(parser *ps, size_t off, const char *fmt, ...)
{
	if (ps->err && ps->errlen) {
		int n = snprintf(ps->err, ps->errlen, "position %zu: ", char_pos(ps->src, off));
		if (n >= 0 && (size_t)n < ps->errlen) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return false;
}

static bool is_ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(unsigned char c)
{
	return is_ident_start(c) || is_digit((char)c) || c == '$';
}

static enum kw keyword(const char *s, size_t n)
{
	static const struct {
		const char *word;
		enum kw kw;
	} words[] = {
	    {"and", KW_AND},   {"or", KW_OR},	  {"not", KW_NOT},     {"in", KW_IN},	{"is", KW_IS},
	    {"null", KW_NULL}, {"true", KW_TRUE}, {"false", KW_FALSE}, {"new", KW_NEW}, {"old", KW_OLD},
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (span_eq(s, n, words[i].word))
			return words[i].kw;
	return KW_NONE;
}

/* A quoted string or name from s[i] (the quote) on, unescaped in place ('' or ""). */
static bool lex_quoted(parser *ps, size_t i)
{
	char *s = ps->s, q = s[i];
	size_t r = i + 1, w = i + 1;
	for (;;) {
		if (r >= ps->len)
			return perr(ps, i, q == '\'' ? "unterminated string" : "unterminated quoted name");
		if (s[r] == q) {
			if (r + 1 < ps->len && s[r + 1] == q) {
				s[w++] = q;
				r += 2;
				continue;
			}
			break;
		}
		s[w++] = s[r++];
	}
	tok *t = &ps->t;
	t->type = q == '\'' ? T_STR : T_QIDENT;
	t->s = s + i + 1;
	t->len = w - (i + 1);
	t->srclen = r + 1 - i;
	if (t->type == T_QIDENT && t->len == 0)
		return perr(ps, i, "empty quoted name");
	return true;
}

/* A number from s[i] on, as -?digits[.digits][e[+-]digits] or -?.digits... */
static bool lex_number(parser *ps, size_t i)
{
	char *s = ps->s;
	size_t j = i, n = ps->len;
	j += s[j] == '-';
	while (j < n && is_digit(s[j]))
		j++;
	if (j < n && s[j] == '.')
		for (j++; j < n && is_digit(s[j]); j++)
			;
	if (j < n && (s[j] == 'e' || s[j] == 'E')) {
		j++;
		if (j < n && (s[j] == '+' || s[j] == '-'))
			j++;
		if (!(j < n && is_digit(s[j])))
			return perr(ps, i, "malformed number");
		while (j < n && is_digit(s[j]))
			j++;
	}
	if (j < n && (is_ident_char((unsigned char)s[j]) || s[j] == '.'))
		return perr(ps, i, "malformed number");
	tok *t = &ps->t;
	int rc = dec_parse(s + i, j - i, &t->num);
	if (rc == -2)
		return perr(ps, i, "number out of range");
	if (rc < 0)
		return perr(ps, i, "malformed number");
	/* strtod needs a terminator. So borrow the next byte of our copy for a moment. */
	char saved = s[j];
	s[j] = '\0';
	t->dbl_ok = str_dbl(s + i, &t->dbl);
	s[j] = saved;
	t->type = T_NUM;
	t->s = s + i;
	t->len = t->srclen = j - i;
	return true;
}

static bool lex(parser *ps)
{
	char *s = ps->s;
	size_t i = ps->pos, n = ps->len;
	while (i < n &&
	       (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v'))
		i++;
	tok *t = &ps->t;
	*t = (tok){.type = T_END, .off = i, .s = s + i};
	if (i == n) {
		ps->pos = i;
		return true;
	}
	unsigned char c = (unsigned char)s[i];
	char c1 = i + 1 < n ? s[i + 1] : '\0', c2 = i + 2 < n ? s[i + 2] : '\0';
	if (is_ident_start(c)) {
		size_t j = i + 1;
		while (j < n && is_ident_char((unsigned char)s[j]))
			j++;
		for (size_t k = i; k < j; k++)
			if (s[k] >= 'A' && s[k] <= 'Z')
				s[k] = (char)(s[k] - 'A' + 'a');
		t->type = T_IDENT;
		t->len = t->srclen = j - i;
		t->kw = keyword(s + i, j - i);
	} else if (c == '\'' || c == '"') {
		if (!lex_quoted(ps, i))
			return false;
	} else if (is_digit((char)c) || (c == '.' && is_digit(c1)) ||
		   (c == '-' && (is_digit(c1) || (c1 == '.' && is_digit(c2))))) {
		if (!lex_number(ps, i))
			return false;
	} else {
		t->srclen = 1;
		switch (c) {
		case '(':
			t->type = T_LP;
			break;
		case ')':
			t->type = T_RP;
			break;
		case ',':
			t->type = T_COMMA;
			break;
		case '.':
			t->type = T_DOT;
			break;
		case '=':
			if (c1 == '=')
				return perr(ps, i, "'==' is not an operator: write '=' to compare");
			t->type = T_OP;
			t->op = OP_EQ;
			break;
		case '<':
			t->type = T_OP;
			t->op = c1 == '=' ? OP_LE : c1 == '>' ? OP_NE : OP_LT;
			t->srclen += c1 == '=' || c1 == '>';
			break;
		case '>':
			t->type = T_OP;
			t->op = c1 == '=' ? OP_GE : OP_GT;
			t->srclen += c1 == '=';
			break;
		case '!':
			if (c1 == '=') {
				t->type = T_OP;
				t->op = OP_NE;
				t->srclen = 2;
				break;
			}
			/* fall through */
		default:
			if (c >= 0x21 && c < 0x7F)
				return perr(ps, i, "unexpected character '%c'", c);
			return perr(ps, i, "unexpected byte 0x%02X", c);
		}
		t->len = t->srclen;
	}
	ps->pos = i + t->srclen;
	return true;
}

/* ---- parser ---- */

static int32_t node_new(parser *ps, enum node_kind kind)
{
	pred *p = ps->p;
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 16;
		p->nodes = util_xrealloc(p->nodes, p->cap * sizeof(*p->nodes));
	}
	p->nodes[p->n] = (node){.kind = kind, .a = -1, .b = -1, .next = -1};
	return (int32_t)p->n++;
}

static bool is_kw(const parser *ps, enum kw kw)
{
	return ps->t.type == T_IDENT && ps->t.kw == kw;
}

/* The source text of the current token, for messages. */
static int tok_srclen(const parser *ps)
{
	return ps->t.srclen > 64 ? 64 : (int)ps->t.srclen;
}

/* A column reference or a literal. If the current token is neither, the error is msg at off. */
static int32_t parse_operand(parser *ps, size_t off, const char *msg)
{
	tok t = ps->t;
	int32_t n;
	bool operand = t.type == T_NUM || t.type == T_STR ||
		       (t.type == T_IDENT && (t.kw == KW_TRUE || t.kw == KW_FALSE || t.kw == KW_NULL ||
					      t.kw == KW_NEW || t.kw == KW_OLD || t.kw == KW_NONE));
	if (!operand)
		return perr(ps, off, "%s", msg), -1;
	if (t.type == T_IDENT && t.kw == KW_NONE)
		return perr(ps, t.off, "unknown name '%.*s' (columns are new.<name> or old.<name>)",
			    tok_srclen(ps), ps->src + t.off),
		       -1;
	if (++ps->terms > PRED_MAX_TERMS)
		return perr(ps, t.off, "more than %d terms", PRED_MAX_TERMS), -1;
	if (!lex(ps))
		return -1;
	switch (t.type) {
	case T_NUM:
		n = node_new(ps, N_NUM);
		ps->p->nodes[n].num = t.num;
		ps->p->nodes[n].dbl = t.dbl;
		ps->p->nodes[n].dbl_ok = t.dbl_ok;
		ps->p->nodes[n].s = t.s;
		ps->p->nodes[n].len = t.len;
		return n;
	case T_STR:
		n = node_new(ps, N_STR);
		ps->p->nodes[n].s = t.s;
		ps->p->nodes[n].len = t.len;
		return n;
	default:
		break;
	}
	switch (t.kw) {
	case KW_TRUE:
	case KW_FALSE:
		n = node_new(ps, N_BOOL);
		ps->p->nodes[n].flag = t.kw == KW_TRUE;
		return n;
	case KW_NULL:
		return node_new(ps, N_NULL);
	default:
		break;
	}
	const char *side = t.kw == KW_OLD ? "old" : "new";
	if (ps->t.type != T_DOT)
		return perr(ps, t.off, "expected '.' after '%s'", side), -1;
	if (!lex(ps))
		return -1;
	if (ps->t.type != T_IDENT && ps->t.type != T_QIDENT)
		return perr(ps, t.off, "expected a column name after '%s.'", side), -1;
	n = node_new(ps, N_COL);
	ps->p->nodes[n].flag = t.kw == KW_OLD;
	ps->p->nodes[n].s = ps->t.s;
	ps->p->nodes[n].len = ps->t.len;
	return lex(ps) ? n : -1;
}

static int32_t parse_or(parser *ps);

/* operand op operand | operand [not] in (list) | operand is [not] null | ( or ) */
static int32_t parse_cmp(parser *ps)
{
	if (ps->t.type == T_LP) {
		if (++ps->depth > PRED_MAX_DEPTH)
			return perr(ps, ps->t.off, "nesting deeper than %d", PRED_MAX_DEPTH), -1;
		if (!lex(ps))
			return -1;
		int32_t inner = parse_or(ps);
		if (inner < 0)
			return -1;
		if (ps->t.type != T_RP)
			return perr(ps, ps->t.off, "expected ')'"), -1;
		ps->depth--;
		return lex(ps) ? inner : -1;
	}
	int32_t lhs = parse_operand(ps, ps->t.off, "expected an expression"), n;
	if (lhs < 0)
		return -1;
	tok t = ps->t;
	if (t.type == T_OP) {
		char msg[64];
		snprintf(msg, sizeof(msg), "expected a value after '%.*s'", (int)t.srclen, ps->src + t.off);
		if (!lex(ps))
			return -1;
		int32_t rhs = parse_operand(ps, t.off, msg);
		if (rhs < 0)
			return -1;
		n = node_new(ps, N_CMP);
		ps->p->nodes[n].op = t.op;
		ps->p->nodes[n].a = lhs;
		ps->p->nodes[n].b = rhs;
		return n;
	}
	if (is_kw(ps, KW_IS)) {
		if (!lex(ps))
			return -1;
		bool neg = is_kw(ps, KW_NOT);
		if (neg && !lex(ps))
			return -1;
		if (!is_kw(ps, KW_NULL))
			return perr(ps, t.off,
				    neg ? "expected 'null' after 'is not'"
					: "expected 'null' or 'not null' after 'is'"),
			       -1;
		if (!lex(ps))
			return -1;
		n = node_new(ps, N_ISNULL);
		ps->p->nodes[n].flag = neg;
		ps->p->nodes[n].a = lhs;
		return n;
	}
	if (is_kw(ps, KW_NOT) || is_kw(ps, KW_IN)) {
		bool neg = is_kw(ps, KW_NOT);
		if (neg) {
			if (!lex(ps))
				return -1;
			if (!is_kw(ps, KW_IN))
				return perr(ps, t.off, "expected 'in' after 'not'"), -1;
		}
		size_t in_off = ps->t.off;
		if (!lex(ps))
			return -1;
		if (ps->t.type != T_LP)
			return perr(ps, in_off, "expected '(' after 'in'"), -1;
		if (!lex(ps))
			return -1;
		n = node_new(ps, N_IN);
		ps->p->nodes[n].flag = neg;
		ps->p->nodes[n].a = lhs;
		int32_t last = -1;
		for (;;) {
			int32_t item = parse_operand(ps, ps->t.off, "expected a value in the list");
			if (item < 0)
				return -1;
			if (last < 0)
				ps->p->nodes[n].b = item;
			else
				ps->p->nodes[last].next = item;
			last = item;
			if (ps->t.type == T_COMMA) {
				if (!lex(ps))
					return -1;
				continue;
			}
			if (ps->t.type != T_RP)
				return perr(ps, ps->t.off, "expected ',' or ')' in the list"), -1;
			return lex(ps) ? n : -1;
		}
	}
	return perr(ps, t.off, "expected a comparison operator"), -1;
}

static int32_t parse_not(parser *ps)
{
	if (!is_kw(ps, KW_NOT))
		return parse_cmp(ps);
	if (++ps->depth > PRED_MAX_DEPTH)
		return perr(ps, ps->t.off, "nesting deeper than %d", PRED_MAX_DEPTH), -1;
	if (!lex(ps))
		return -1;
	int32_t inner = parse_not(ps);
	if (inner < 0)
		return -1;
	ps->depth--;
	int32_t n = node_new(ps, N_NOT);
	ps->p->nodes[n].a = inner;
	return n;
}

/* sub (kw sub)*, as one n-ary node when there is more than one sub. */
static int32_t parse_list(parser *ps, enum kw kw, enum node_kind kind, int32_t (*sub)(parser *))
{
	int32_t first = sub(ps);
	if (first < 0 || !is_kw(ps, kw))
		return first;
	int32_t n = node_new(ps, kind), last = first;
	ps->p->nodes[n].a = first;
	while (is_kw(ps, kw)) {
		if (!lex(ps))
			return -1;
		int32_t next = sub(ps);
		if (next < 0)
			return -1;
		ps->p->nodes[last].next = next;
		last = next;
	}
	return n;
}

static int32_t parse_and(parser *ps)
{
	return parse_list(ps, KW_AND, N_AND, parse_not);
}

static int32_t parse_or(parser *ps)
{
	return parse_list(ps, KW_OR, N_OR, parse_and);
}

pred *match_predicate_parse(const char *text, char *err, size_t errlen)
{
	size_t len = strnlen(text, PRED_MAX_TEXT + 1);
	if (len > PRED_MAX_TEXT) {
		util_errf(err, errlen, "position %zu: text longer than %d bytes",
			  char_pos(text, PRED_MAX_TEXT), PRED_MAX_TEXT);
		return NULL;
	}
	pred *p = util_xcalloc(1, sizeof(*p));
	p->text = util_xmalloc(len + 1);
	memcpy(p->text, text, len + 1);
	parser ps = {.p = p, .src = text, .s = p->text, .len = len, .err = err, .errlen = errlen};
	if (!lex(&ps) || (p->root = parse_or(&ps)) < 0)
		goto fail;
	if (ps.t.type != T_END) {
		perr(&ps, ps.t.off, ps.t.type == T_RP ? "unmatched ')'" : "expected 'and' or 'or'");
		goto fail;
	}
	return p;
fail:
	match_predicate_free(p);
	return NULL;
}

void match_predicate_free(pred *p)
{
	if (!p)
		return;
	free(p->nodes);
	free(p->text);
	free(p);
}

/* ---- evaluation ---- */

enum { TV_FALSE, TV_TRUE, TV_UNKNOWN };
#define CMP_UNKNOWN 2 /* besides -1, 0, 1 */

typedef struct ev {
	const pred *p;
	const Cdc__V1__Event *e;
	arena *a;
} ev;

/* An operand for one event. It is a column (with a value), a literal, or neither (absent). */
typedef struct opnd {
	const Cdc__V1__Column *col;
	const node *lit;
} opnd;

static opnd resolve(const ev *x, int32_t i)
{
	const node *nd = &x->p->nodes[i];
	if (nd->kind != N_COL)
		return (opnd){.lit = nd};
	const Cdc__V1__Row *r = x->e ? (nd->flag ? x->e->old_row : x->e->new_row) : NULL;
	if (!r)
		return (opnd){0};
	for (size_t k = 0; k < r->n_columns; k++) {
		const Cdc__V1__Column *c = r->columns[k];
		if (c && c->name && c->value && strlen(c->name) == nd->len &&
		    memcmp(c->name, nd->s, nd->len) == 0)
			return (opnd){.col = c};
	}
	return (opnd){0};
}

static int bytes_cmp(const void *x, size_t xn, const void *y, size_t yn)
{
	size_t n = xn < yn ? xn : yn;
	int c = n ? memcmp(x, y, n) : 0;
	if (c)
		return CMP(c, 0);
	return CMP(xn, yn);
}

static int str_cmp(const char *x, const char *y)
{
	if (!x || !y)
		return CMP_UNKNOWN;
	return bytes_cmp(x, strlen(x), y, strlen(y));
}

static bool is_number(const Cdc__V1__Value *v)
{
	return v->kind_case == CDC__V1__VALUE__KIND_INT_VALUE ||
	       v->kind_case == CDC__V1__VALUE__KIND_FLOAT_VALUE ||
	       v->kind_case == CDC__V1__VALUE__KIND_NUMERIC_VALUE;
}

/* An int or numeric value as an exact decimal. digits holds an int's text. */
static bool value_dec(const Cdc__V1__Value *v, char digits[24], dec *d)
{
	if (v->kind_case == CDC__V1__VALUE__KIND_INT_VALUE) {
		int n = snprintf(digits, 24, "%" PRId64, v->int_value);
		return dec_parse(digits, (size_t)n, d) == 0;
	}
	if (v->kind_case == CDC__V1__VALUE__KIND_NUMERIC_VALUE && v->numeric_value)
		return dec_parse(v->numeric_value, strlen(v->numeric_value), d) == 0;
	return false;
}

/* A number as a double, as PostgreSQL casts int8 and numeric to float8 to compare with a float. */
static bool value_dbl(const Cdc__V1__Value *v, double *out)
{
	dec d;
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_INT_VALUE:
		*out = (double)v->int_value;
		return true;
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		*out = v->float_value;
		return true;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		if (!v->numeric_value || dec_parse(v->numeric_value, strlen(v->numeric_value), &d) != 0)
			return false;
		if (d.cls != DEC_FINITE) {
			*out = d.cls == DEC_NAN ? NAN : d.cls == DEC_POS_INF ? INFINITY : -INFINITY;
			return true;
		}
		return str_dbl(v->numeric_value, out);
	default:
		return false;
	}
}

/* Two values of the same kind. */
static int same_cmp(const Cdc__V1__Value *x, const Cdc__V1__Value *y)
{
	char dx[24], dy[24];
	dec a, b;
	switch (x->kind_case) {
	case CDC__V1__VALUE__KIND_INT_VALUE:
		return CMP(x->int_value, y->int_value);
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		return dbl_cmp(x->float_value, y->float_value);
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		if (!value_dec(x, dx, &a) || !value_dec(y, dy, &b))
			return CMP_UNKNOWN;
		return dec_cmp(&a, &b);
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		return CMP(x->bool_value, y->bool_value);
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		return str_cmp(x->text_value, y->text_value);
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		return str_cmp(x->json_value, y->json_value);
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		return bytes_cmp(x->bytes_value.data, x->bytes_value.len, y->bytes_value.data,
				 y->bytes_value.len);
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		return bytes_cmp(x->uuid_value.data, x->uuid_value.len, y->uuid_value.data,
				 y->uuid_value.len);
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		return CMP(x->date_value, y->date_value);
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		return CMP(x->time_value, y->time_value);
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		if (!x->timestamp_value || !y->timestamp_value)
			return CMP_UNKNOWN;
		return CMP(x->timestamp_value->micros, y->timestamp_value->micros);
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		if (!x->other_value || !y->other_value)
			return CMP_UNKNOWN;
		return str_cmp(x->other_value->text, y->other_value->text);
	default:
		return CMP_UNKNOWN; /* null, unchanged TOAST, binary, unset */
	}
}

/* A column's value against a literal. Strings are converted to the column's type. */
static int col_lit_cmp(const ev *x, const Cdc__V1__Column *c, const node *lit)
{
	const Cdc__V1__Value *v = c->value;
	char digits[24];
	dec d;
	switch (lit->kind) {
	case N_NUM:
		if (v->kind_case == CDC__V1__VALUE__KIND_FLOAT_VALUE)
			return lit->dbl_ok ? dbl_cmp(v->float_value, lit->dbl) : CMP_UNKNOWN;
		if (!value_dec(v, digits, &d))
			return CMP_UNKNOWN;
		return dec_cmp(&d, &lit->num);
	case N_BOOL:
		if (v->kind_case != CDC__V1__VALUE__KIND_BOOL_VALUE)
			return CMP_UNKNOWN;
		return CMP(v->bool_value, lit->flag);
	case N_STR:
		switch (v->kind_case) {
		case CDC__V1__VALUE__KIND_TEXT_VALUE:
			if (!v->text_value)
				return CMP_UNKNOWN;
			return bytes_cmp(v->text_value, strlen(v->text_value), lit->s, lit->len);
		case CDC__V1__VALUE__KIND_BYTES_VALUE:
		case CDC__V1__VALUE__KIND_UUID_VALUE:
		case CDC__V1__VALUE__KIND_DATE_VALUE:
		case CDC__V1__VALUE__KIND_TIME_VALUE:
		case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		case CDC__V1__VALUE__KIND_JSON_VALUE:
		case CDC__V1__VALUE__KIND_OTHER_VALUE: {
			/* As if the server had sent the literal for this column, with the same conversion. */
			pgo_datum dm = {.kind = PGO_TEXT, .len = (uint32_t)lit->len, .data = lit->s};
			const Cdc__V1__Value *lv = pgo_event_value(x->a, NULL, c->type_oid, &dm);
			if (lv->kind_case != v->kind_case)
				return CMP_UNKNOWN;
			return same_cmp(v, lv);
		}
		default:
			return CMP_UNKNOWN;
		}
	default:
		return CMP_UNKNOWN; /* null */
	}
}

static int col_col_cmp(const Cdc__V1__Value *v, const Cdc__V1__Value *w)
{
	if (is_number(v) && is_number(w)) {
		if (v->kind_case == CDC__V1__VALUE__KIND_FLOAT_VALUE ||
		    w->kind_case == CDC__V1__VALUE__KIND_FLOAT_VALUE) {
			double dv, dw;
			if (!value_dbl(v, &dv) || !value_dbl(w, &dw))
				return CMP_UNKNOWN;
			return dbl_cmp(dv, dw);
		}
		char sv[24], sw[24];
		dec a, b;
		if (!value_dec(v, sv, &a) || !value_dec(w, sw, &b))
			return CMP_UNKNOWN;
		return dec_cmp(&a, &b);
	}
	if (v->kind_case != w->kind_case)
		return CMP_UNKNOWN;
	return same_cmp(v, w);
}

static int lit_lit_cmp(const node *l, const node *m)
{
	if (l->kind != m->kind)
		return CMP_UNKNOWN;
	switch (l->kind) {
	case N_NUM:
		return dec_cmp(&l->num, &m->num);
	case N_STR:
		return bytes_cmp(l->s, l->len, m->s, m->len);
	case N_BOOL:
		return CMP(l->flag, m->flag);
	default:
		return CMP_UNKNOWN;
	}
}

static int compare(const ev *x, opnd l, opnd r)
{
	if ((!l.col && !l.lit) || (!r.col && !r.lit))
		return CMP_UNKNOWN;
	if (l.lit && r.lit)
		return lit_lit_cmp(l.lit, r.lit);
	if (l.lit) {
		int c = col_lit_cmp(x, r.col, l.lit);
		return c == CMP_UNKNOWN ? c : -c;
	}
	if (r.lit)
		return col_lit_cmp(x, l.col, r.lit);
	return col_col_cmp(l.col->value, r.col->value);
}

static int holds(enum cmp_op op, int c)
{
	if (c == CMP_UNKNOWN)
		return TV_UNKNOWN;
	switch (op) {
	case OP_EQ:
		return c == 0;
	case OP_NE:
		return c != 0;
	case OP_LT:
		return c < 0;
	case OP_LE:
		return c <= 0;
	case OP_GT:
		return c > 0;
	case OP_GE:
		return c >= 0;
	}
	return TV_UNKNOWN;
}

/* is null. Unchanged TOAST is a value the server did not resend, never NULL. */
static int is_null(opnd o)
{
	if (o.lit)
		return o.lit->kind == N_NULL;
	if (!o.col)
		return TV_UNKNOWN;
	switch (o.col->value->kind_case) {
	case CDC__V1__VALUE__KIND_NULL_VALUE:
		return TV_TRUE;
	case CDC__V1__VALUE__KIND__NOT_SET:
		return TV_UNKNOWN;
	default:
		return TV_FALSE;
	}
}

static int negate(int tv)
{
	return tv == TV_UNKNOWN ? tv : !tv;
}

static int eval(const ev *x, int32_t i)
{
	const node *nodes = x->p->nodes, *nd = &nodes[i];
	int r;
	switch (nd->kind) {
	case N_OR:
	case N_AND: {
		/* With or, true wins, else unknown beats false. And is the mirror image. */
		int stop = nd->kind == N_OR ? TV_TRUE : TV_FALSE;
		r = nd->kind == N_OR ? TV_FALSE : TV_TRUE;
		for (int32_t k = nd->a; k >= 0; k = nodes[k].next) {
			int v = eval(x, k);
			if (v == stop)
				return v;
			if (v == TV_UNKNOWN)
				r = v;
		}
		return r;
	}
	case N_NOT:
		return negate(eval(x, nd->a));
	case N_CMP:
		return holds(nd->op, compare(x, resolve(x, nd->a), resolve(x, nd->b)));
	case N_IN: {
		opnd l = resolve(x, nd->a);
		r = TV_FALSE;
		for (int32_t k = nd->b; k >= 0; k = nodes[k].next) {
			int v = holds(OP_EQ, compare(x, l, resolve(x, k)));
			if (v == TV_TRUE) {
				r = v;
				break;
			}
			if (v == TV_UNKNOWN)
				r = v;
		}
		return nd->flag ? negate(r) : r;
	}
	case N_ISNULL:
		r = is_null(resolve(x, nd->a));
		return nd->flag ? negate(r) : r;
	default:
		return TV_UNKNOWN; /* a bare operand is never a root, as the parser wants a comparison */
	}
}

bool match_predicate_eval(const pred *p, const Cdc__V1__Event *e, arena *a)
{
	ev x = {.p = p, .e = e, .a = a};
	return p && eval(&x, p->root) == TV_TRUE;
}

/* ---- checking against a table's columns ---- */

static const char *const op_text[] = {"=", "<>", "<", "<=", ">", ">="};

/* An operand as it could be written, like new.name, 'text', 42, true or null. */
static void put_operand(buf *b, const node *nd)
{
	switch (nd->kind) {
	case N_COL:
		buf_printf(b, "%s.%.*s", nd->flag ? "old" : "new", (int)nd->len, nd->s);
		break;
	case N_STR:
		buf_putc(b, '\'');
		for (size_t i = 0; i < nd->len; i++) {
			if (nd->s[i] == '\'')
				buf_putc(b, '\'');
			buf_putc(b, nd->s[i]);
		}
		buf_putc(b, '\'');
		break;
	case N_NUM:
		buf_append(b, nd->s, nd->len);
		break;
	case N_BOOL:
		buf_puts(b, nd->flag ? "true" : "false");
		break;
	default:
		buf_puts(b, "null");
		break;
	}
}

static const pred_column *find_column(const pred_column *cols, size_t n, const node *c)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(cols[i].name) == c->len && memcmp(cols[i].name, c->s, c->len) == 0)
			return &cols[i];
	return NULL;
}

static bool is_numeric_kind(Cdc__V1__Value__KindCase k)
{
	return k == CDC__V1__VALUE__KIND_INT_VALUE || k == CDC__V1__VALUE__KIND_FLOAT_VALUE ||
	       k == CDC__V1__VALUE__KIND_NUMERIC_VALUE;
}

/* Why lit never compares true with a value of column c, as col_lit_cmp compares (appended to why), or
 * nothing when it can. */
static void literal_problem(const pred_column *c, const node *lit, arena *a, buf *why)
{
	Cdc__V1__Value__KindCase k = pgo_event_type_kind(c->type_oid);
	buf w = {0};
	put_operand(&w, lit);
	switch (lit->kind) {
	case N_NUM:
		if (is_numeric_kind(k))
			break;
		buf_printf(why, "column %s is of type %s and %s is a number", c->name, c->type_name, w.data);
		if (k == CDC__V1__VALUE__KIND_BOOL_VALUE)
			buf_puts(why, "; write true or false");
		else
			buf_printf(why, "; write '%s'", w.data);
		break;
	case N_BOOL:
		if (k != CDC__V1__VALUE__KIND_BOOL_VALUE)
			buf_printf(why, "column %s is of type %s and %s is a boolean", c->name, c->type_name,
				   w.data);
		break;
	case N_STR: {
		dec d;
		if (is_numeric_kind(k) || k == CDC__V1__VALUE__KIND_BOOL_VALUE) {
			buf_printf(why, "column %s is of type %s and %s is a string", c->name, c->type_name,
				   w.data);
			if (k == CDC__V1__VALUE__KIND_BOOL_VALUE)
				buf_puts(why, "; write true or false");
			else if (dec_parse(lit->s, lit->len, &d) == 0)
				buf_printf(why, "; write %.*s, without quotes", (int)lit->len, lit->s);
			break;
		}
		if (k == CDC__V1__VALUE__KIND_TEXT_VALUE || k == CDC__V1__VALUE__KIND_JSON_VALUE ||
		    k == CDC__V1__VALUE__KIND_OTHER_VALUE)
			break;
		/* As the comparison converts it, into the column's type as if the server had sent it. */
		pgo_datum dm = {.kind = PGO_TEXT, .len = (uint32_t)lit->len, .data = lit->s};
		if (pgo_event_value(a, NULL, c->type_oid, &dm)->kind_case != k)
			buf_printf(
			    why,
			    "%s is not a value of column %s's type %s; write one as PostgreSQL prints it",
			    w.data, c->name, c->type_name);
		break;
	}
	default:
		buf_puts(why, "a comparison with null is unknown; write is null or is not null");
		break;
	}
	buf_free(&w);
}

/* The column a column operand names. NULL with the reason in why when it never has a value. */
static const pred_column *operand_column(const node *nd, const pred_column *cols, size_t ncols, bool reads,
					 buf *why)
{
	const pred_column *c = find_column(cols, ncols, nd);
	if (reads && nd->flag)
		buf_puts(why, "a backfill's reads have no old row");
	else if (!c)
		buf_printf(why, "the table has no column %.*s", (int)nd->len, nd->s);
	return why->len ? NULL : c;
}

/* Where comparison nd of p is never true, why (nothing if it can be). what gets it as written. */
static void comparison_problem(const pred *p, const node *nd, const pred_column *cols, size_t ncols,
			       bool reads, arena *a, buf *what, buf *why)
{
	const node *l = &p->nodes[nd->a], *r = nd->kind == N_CMP ? &p->nodes[nd->b] : NULL;
	put_operand(what, l);
	if (nd->kind == N_ISNULL)
		buf_puts(what, nd->flag ? " is not null" : " is null");
	if (nd->kind == N_IN) {
		buf_puts(what, nd->flag ? " not in (" : " in (");
		for (int32_t k = nd->b; k >= 0; k = p->nodes[k].next) {
			buf_puts(what, k == nd->b ? "" : ", ");
			put_operand(what, &p->nodes[k]);
		}
		buf_putc(what, ')');
	}
	if (r) {
		buf_printf(what, " %s ", op_text[nd->op]);
		put_operand(what, r);
	}
	const pred_column *lc = l->kind == N_COL ? operand_column(l, cols, ncols, reads, why) : NULL;
	const pred_column *rc =
	    r && r->kind == N_COL && !why->len ? operand_column(r, cols, ncols, reads, why) : NULL;
	if (why->len || nd->kind == N_ISNULL) {
		buf_puts(what, " is never true");
		return;
	}
	if (nd->kind == N_IN) {
		/* Each item counts as an =. `in` is never true when no item can match. `not in` is never true
		 * when one item never does (it is then unknown or false, as in SQL). The first item's reason
		 * is told. */
		buf first = {0};
		bool any = false, all = true;
		for (int32_t k = nd->b; k >= 0 && lc; k = p->nodes[k].next) {
			const node *item = &p->nodes[k];
			buf one = {0};
			if (item->kind == N_COL)
				operand_column(item, cols, ncols, reads, &one);
			else
				literal_problem(lc, item, a, &one);
			any |= one.len > 0;
			all &= one.len > 0;
			if (one.len && !first.len)
				buf_append(&first, one.data, one.len);
			buf_free(&one);
		}
		if (lc && (nd->flag ? any : all))
			buf_append(why, first.data, first.len);
		buf_free(&first);
		buf_puts(what, " is never true");
		return;
	}
	if (lc && r->kind != N_COL)
		literal_problem(lc, r, a, why);
	else if (rc && l->kind != N_COL)
		literal_problem(rc, l, a, why);
	buf_puts(what, " is never true");
}

bool match_predicate_check_columns(const pred *p, const pred_column *cols, size_t ncols, bool reads, arena *a,
				   char *err, size_t errlen)
{
	buf why = {0}, what = {0};
	for (size_t i = 0; i < p->n && !why.len; i++) {
		const node *nd = &p->nodes[i];
		buf_reset(&what);
		if (nd->kind == N_CMP || nd->kind == N_IN || nd->kind == N_ISNULL)
			comparison_problem(p, nd, cols, ncols, reads, a, &what, &why);
	}
	bool ok = !why.len;
	if (!ok)
		util_errf(err, errlen, "%s: %s", what.data, why.data);
	buf_free(&why);
	buf_free(&what);
	return ok;
}

/* ---- the view ---- */

_Static_assert((int)N_NULL == (int)PRED_NULL && (int)N_COL == (int)PRED_COL,
	       "node kinds and pred_kind differ");
_Static_assert((int)OP_GE == (int)PRED_GE, "cmp_op and pred_op differ");

int32_t match_predicate_root(const pred *p)
{
	return p->root;
}

size_t match_predicate_count(const pred *p)
{
	return p->n;
}

pred_node match_predicate_node_at(const pred *p, int32_t i)
{
	const node *nd = &p->nodes[i];
	return (pred_node){.kind = (pred_kind)nd->kind,
			   .op = (pred_op)nd->op,
			   .flag = nd->flag,
			   .a = nd->a,
			   .b = nd->b,
			   .next = nd->next,
			   .s = nd->s,
			   .len = nd->len};
}

bool match_predicate_reads_old(const pred *p)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->nodes[i].kind == N_COL && p->nodes[i].flag)
			return true;
	return false;
}
