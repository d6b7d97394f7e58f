/* debezium.c: see debezium.h. The shapes follow Debezium 3.6's PostgreSQL connector in its default
 * modes (decimal.handling.mode=precise, time.precision.mode=adaptive, binary.handling.mode=bytes,
 * interval.handling.mode=numeric) as Kafka Connect's JsonConverter writes them: README "Debezium-
 * compatible records" has the mapping and what differs. Values the decoder left as text (timetz,
 * interval, bit, money, point) are read here; anything that does not read becomes null. */
#include "sinks/kafka/debezium.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/arena.h"
#include "decoder/base/json.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "decoder/text.h"
#include "sinks/event_json.h"

#define LIT(b, s) buf_append((b), (s), sizeof(s) - 1)
#define USECS_PER_SEC INT64_C(1000000)
#define USECS_PER_DAY INT64_C(86400000000)

/* A mark in a rendered value: this byte, then which value dbz_complete() writes there. JSON text
 * never holds a raw control character (strings escape them), so a mark cannot be mistaken. */
#define MARK '\x01'
enum {
	M_SOURCE_MS = 'a', /* source.ts_ms: the commit time */
	M_SEQUENCE,	   /* the sequence's first LSN: the commit's */
	M_SOURCE_US,
	M_SOURCE_NS,
	M_TRANSACTION, /* the transaction block, or null */
	M_NOW_MS,      /* the envelope's ts_ms: when the record is produced */
	M_NOW_US,
	M_NOW_NS,
};

static void mark(buf *b, char m)
{
	char x[2] = {MARK, m};
	buf_append(b, x, 2);
}

void dbz_scratch_free(dbz_scratch *s)
{
	free(s->limbs);
	buf_free(&s->digits);
	buf_free(&s->bytes);
	buf_free(&s->elems);
	buf_free(&s->spans);
	if (s->arena)
		arena_free(s->arena);
	*s = (dbz_scratch){0};
}

/* Numbers ---------------------------------------------------------------------------------------- */

/* The shortest digits (no trailing zeros) that read back as v, as a float when single, and the
 * decimal exponent of the first: v = d[0].d[1]... x 10^*exp. */
static size_t shortest(double v, bool single, char *d, int *exp)
{
	char tmp[40];
	float f = (float)v;
	int lo = single ? 6 : 15, hi = single ? 9 : 17;
	for (int p = lo; p <= hi; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, single ? (double)f : v);
		if (p == hi || (single ? strtof(tmp, NULL) == f : strtod(tmp, NULL) == v))
			break;
	}
	/* [-]d.ddde[+-]xx */
	const char *p = tmp + (tmp[0] == '-');
	size_t n = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			d[n++] = *p;
	*exp = *p ? atoi(p + 1) : 0;
	while (n > 1 && d[n - 1] == '0')
		n--;
	return n;
}

/* v as Java's Double.toString (Float.toString when single) writes it, which is what Jackson writes
 * for Kafka Connect's float64 (float32): the shortest digits that read back as the value, plain from
 * 10^-3 up to 10^7 ("100.0", "0.001"), else d.dddE[-]n ("1.0E7", "1.5E-4"); NaN and the
 * infinities as strings, as Jackson quotes them. */
static void put_java_double(buf *b, double v, bool single)
{
	if (single) /* the float a float4 column holds (a text past its range is out of it: infinite) */
		v = (double)(float)v;
	if (json_nonfinite(b, v))
		return;
	if (signbit(v))
		buf_putc(b, '-');
	if (v == 0) {
		LIT(b, "0.0");
		return;
	}
	char d[24];
	int e;
	size_t n = shortest(fabs(v), single, d, &e);
	if (e >= -3 && e < 7) {
		if (e < 0) {
			LIT(b, "0.");
			for (int i = -1; i > e; i--)
				buf_putc(b, '0');
			buf_append(b, d, n);
			return;
		}
		for (int i = 0; i <= e; i++)
			buf_putc(b, (size_t)i < n ? d[i] : '0');
		buf_putc(b, '.');
		if ((size_t)e + 1 < n)
			buf_append(b, d + e + 1, n - (size_t)e - 1);
		else
			buf_putc(b, '0');
		return;
	}
	buf_putc(b, d[0]);
	buf_putc(b, '.');
	if (n > 1)
		buf_append(b, d + 1, n - 1);
	else
		buf_putc(b, '0');
	buf_putc(b, 'E');
	json_i64(b, e);
}

/* The two's-complement big-endian bytes of a decimal digit string's value (negated when neg), as
 * Java's BigInteger.toByteArray() writes them (the fewest bytes, at least one), as a base64 JSON
 * string: Kafka Connect's Decimal and Debezium's VariableScaleDecimal hold this. digits must not
 * be in s->bytes, which holds the bytes. */
static void put_unscaled(buf *b, dbz_scratch *s, bool neg, const char *digits, size_t n)
{
	static const uint32_t pow10[] = {1,	 10,	  100,	    1000,      10000,
					 100000, 1000000, 10000000, 100000000, 1000000000};
	while (n && *digits == '0')
		digits++, n--;
	size_t need = n / 9 + 2;
	if (s->cap < need) {
		s->cap = need * 2;
		s->limbs = xrealloc(s->limbs, s->cap * sizeof(*s->limbs));
	}
	size_t nl = 0; /* little-endian base-2^32 limbs */
	for (size_t i = 0; i < n;) {
		size_t k = n - i < 9 ? n - i : 9;
		uint64_t carry = 0;
		for (size_t j = 0; j < k; j++)
			carry = carry * 10 + (uint64_t)(digits[i + j] - '0');
		for (size_t j = 0; j < nl; j++) {
			uint64_t t = (uint64_t)s->limbs[j] * pow10[k] + carry;
			s->limbs[j] = (uint32_t)t;
			carry = t >> 32;
		}
		if (carry)
			s->limbs[nl++] = (uint32_t)carry;
		i += k;
	}
	buf_reset(&s->bytes);
	buf_reserve(&s->bytes, nl * 4 + 2);
	uint8_t *o = (uint8_t *)s->bytes.data + 1; /* room for a sign byte in front */
	size_t len = 0;
	for (size_t j = nl; j-- > 0;)
		for (int sh = 24; sh >= 0; sh -= 8)
			o[len++] = (uint8_t)(s->limbs[j] >> sh);
	size_t skip = 0;
	while (skip < len && o[skip] == 0)
		skip++;
	o += skip;
	len -= skip;
	if (len == 0) {
		o[0] = 0; /* zero: one byte */
		len = 1;
	} else if (neg) {
		bool carry = true; /* invert and add one */
		for (size_t j = len; j-- > 0;) {
			o[j] = (uint8_t)~o[j];
			if (carry)
				carry = ++o[j] == 0;
		}
		if (!(o[0] & 0x80)) /* the magnitude needs its top bit: a sign byte */
			*--o = 0xff, len++;
	} else if (o[0] & 0x80) {
		*--o = 0, len++;
	}
	json_base64(b, o, len);
}

/* A decimal's text as PostgreSQL prints it ([-]digits[.digits]): false for NaN, the infinities and
 * anything else. */
typedef struct decimal {
	bool neg;
	const char *in, *frac; /* the integer and fractional digits */
	size_t nin, nfrac;
} decimal;

static bool decimal_read(const char *t, size_t n, decimal *d)
{
	const char *p = t, *end = t + n;
	*d = (decimal){.neg = p < end && *p == '-'};
	p += p < end && (*p == '-' || *p == '+');
	d->in = p;
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	d->nin = (size_t)(p - d->in);
	if (p < end && *p == '.') {
		d->frac = ++p;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		d->nfrac = (size_t)(p - d->frac);
	}
	return p == end && d->nin + d->nfrac > 0;
}

/* Kafka Connect's Decimal at scale: false when the value does not have that scale exactly (as
 * BigDecimal.setScale() without rounding refuses it). */
static bool put_decimal(buf *b, dbz_scratch *s, const decimal *d, int scale)
{
	size_t keep = d->nfrac;
	while (keep && d->frac[keep - 1] == '0')
		keep--;
	buf *dig = &s->digits;
	buf_reset(dig);
	if (scale >= 0) {
		if (keep > (size_t)scale)
			return false;
		buf_append(dig, d->in, d->nin);
		buf_append(dig, d->frac, keep);
		for (size_t i = keep; i < (size_t)scale; i++)
			buf_putc(dig, '0');
	} else {
		size_t drop = (size_t)-scale, zeros = 0;
		while (zeros < d->nin && d->in[d->nin - 1 - zeros] == '0')
			zeros++;
		if (keep || (zeros < drop && zeros < d->nin))
			return false;
		buf_append(dig, d->in, d->nin > drop ? d->nin - drop : 0);
	}
	put_unscaled(b, s, d->neg, dig->data, dig->len);
	return true;
}

/* Debezium's VariableScaleDecimal: {"scale":N,"value":...}, the value without trailing zeros. */
static void put_variable_decimal(buf *b, dbz_scratch *s, const decimal *d)
{
	size_t keep = d->nfrac;
	while (keep && d->frac[keep - 1] == '0')
		keep--;
	LIT(b, "{\"scale\":");
	json_u64(b, keep);
	LIT(b, ",\"value\":");
	buf_reset(&s->digits);
	buf_append(&s->digits, d->in, d->nin);
	buf_append(&s->digits, d->frac, keep);
	put_unscaled(b, s, d->neg, s->digits.data, s->digits.len);
	buf_putc(b, '}');
}

/* Text the decoder left for Debezium's types -------------------------------------------------- */

/* timetz ("13:51:30.123+02", "...-05:30:15") as microseconds of the day in UTC. */
static bool read_timetz(const char *t, size_t n, int64_t *us)
{
	cur c = {t, t + n};
	int64_t tod, off;
	if (!cur_hms(&c, 2, &tod) || !cur_offset(&c, &off) || c.p != c.end)
		return false;
	int64_t v = (tod - off) % USECS_PER_DAY;
	*us = v < 0 ? v + USECS_PER_DAY : v;
	return true;
}

/* An interval in the postgres style ("1 year 2 mons -3 days +04:05:06.78") as Debezium's
 * MicroDuration: its parts as pgjdbc's PGInterval reads them, counted with 365.25 / 12 days a
 * month, in double arithmetic as Debezium does. */
static bool read_interval(const char *t, size_t n, int64_t *us)
{
	cur c = {t, t + n};
	int64_t years = 0, months = 0, days = 0, time = 0;
	while (c.p < c.end) {
		bool neg = cur_eat(&c, '-');
		if (!neg)
			cur_eat(&c, '+');
		cur at = c;
		int64_t v;
		if (!cur_digits(&c, 1, 18, &v))
			return false;
		if (c.p < c.end && *c.p == ':') {
			c = at;
			if (!cur_hms(&c, 18, &time))
				return false;
			time = neg ? -time : time;
		} else {
			if (!cur_eat(&c, ' '))
				return false;
			const char *w = c.p;
			while (c.p < c.end && *c.p != ' ')
				c.p++;
			size_t wl = (size_t)(c.p - w);
			int64_t *into = wl >= 4 && memcmp(w, "year", 4) == 0  ? &years
					: wl >= 3 && memcmp(w, "mon", 3) == 0 ? &months
					: wl >= 3 && memcmp(w, "day", 3) == 0 ? &days
									      : NULL;
			if (!into)
				return false;
			*into = neg ? -v : v;
		}
		if (c.p < c.end && !cur_eat(&c, ' '))
			return false;
	}
	int64_t whole = time / USECS_PER_SEC, hours = whole / 3600, minutes = whole / 60 % 60;
	double seconds = (double)(whole % 60) + (double)(time % USECS_PER_SEC) / 1e6;
	double nd = (double)(years * 12 + months) * (365.25 / 12.0) + (double)days;
	double ns = ((nd * 24 + (double)hours) * 60 + (double)minutes) * 60 + seconds;
	double r = ns * 1e6;
	*us = r >= 9.2e18 ? INT64_MAX : r <= -9.2e18 ? INT64_MIN : (int64_t)r;
	return true;
}

/* money as PostgreSQL prints it in the C and English locales ("$1,234.56", "-$1,234.56") as a
 * decimal's text in out (money is an int64 of cents: 32 bytes hold any). */
static bool read_money(const char *t, size_t n, char out[32])
{
	size_t len = 1; /* out[0]: the sign */
	bool point = false;
	out[0] = '+';
	for (size_t i = 0; i < n; i++) {
		char ch = t[i];
		if (len == 31)
			return false;
		if ((ch >= '0' && ch <= '9') || (ch == '.' && !point)) {
			point |= ch == '.';
			out[len++] = ch;
		} else if (ch == '-' || ch == '(') {
			out[0] = '-';
		} else if (ch != '$' && ch != ',' && ch != ')' && ch != ' ') {
			return false;
		}
	}
	out[len] = '\0';
	return len > 1;
}

/* point ("(1.5,2)") */
static bool read_point(const char *t, size_t n, double *x, double *y)
{
	char tmp[128];
	if (n < 5 || n >= sizeof(tmp) || t[0] != '(' || t[n - 1] != ')')
		return false;
	memcpy(tmp, t + 1, n - 2);
	tmp[n - 2] = '\0';
	char *end;
	*x = strtod(tmp, &end);
	if (end == tmp || *end != ',')
		return false;
	char *second = end + 1;
	*y = strtod(second, &end);
	return end != second && *end == '\0';
}

/* A one-dimensional array as PostgreSQL prints it ({1,"a b",NULL}, with "[0:1]=" in front when it
 * does not start at 1): each element's text, unescaped, into s->elems, and where it is into
 * s->spans (NULL: len -1). false for more dimensions and anything else. */
typedef struct span {
	size_t off;
	long len;
} span;

static bool read_array(const char *t, size_t n, dbz_scratch *s, size_t *count)
{
	cur c = {t, t + n};
	buf_reset(&s->elems);
	buf_reset(&s->spans);
	*count = 0;
	if (cur_eat(&c, '[')) {
		while (c.p < c.end && *c.p != '=')
			c.p++;
		if (!cur_eat(&c, '='))
			return false;
	}
	if (!cur_eat(&c, '{'))
		return false;
	if (cur_eat(&c, '}'))
		return c.p == c.end;
	for (;;) {
		span sp = {s->elems.len, 0};
		if (c.p < c.end && *c.p == '{')
			return false; /* another dimension */
		if (cur_eat(&c, '"')) {
			for (;;) {
				if (c.p == c.end)
					return false;
				char ch = *c.p++;
				if (ch == '"')
					break;
				if (ch == '\\') {
					if (c.p == c.end)
						return false;
					ch = *c.p++;
				}
				buf_putc(&s->elems, ch);
			}
		} else {
			const char *start = c.p;
			while (c.p < c.end && *c.p != ',' && *c.p != '}')
				c.p++;
			size_t len = (size_t)(c.p - start);
			if (len == 4 && memcmp(start, "NULL", 4) == 0)
				sp.len = -1;
			else if (len == 0)
				return false;
			else
				buf_append(&s->elems, start, len);
		}
		if (sp.len == 0)
			sp.len = (long)(s->elems.len - sp.off);
		buf_append(&s->spans, &sp, sizeof(sp));
		(*count)++;
		if (cur_eat(&c, '}'))
			return c.p == c.end;
		if (!cur_eat(&c, ','))
			return false;
	}
}

/* Debezium's types ------------------------------------------------------------------------------- */

typedef enum dkind {
	DK_BOOLEAN,
	DK_INT16,
	DK_INT32,
	DK_INT64,
	DK_FLOAT,
	DK_DOUBLE,
	DK_STRING,
	DK_BYTES,
	DK_DECIMAL,
	DK_VARIABLE_DECIMAL,
	DK_MONEY,
	DK_UUID,
	DK_JSON,
	DK_XML,
	DK_DATE,
	DK_TIME,
	DK_MICRO_TIME,
	DK_TIMESTAMP,
	DK_MICRO_TIMESTAMP,
	DK_ZONED_TIMESTAMP,
	DK_ZONED_TIME,
	DK_DURATION,
	DK_BIT,
	DK_BITS,
	DK_POINT,
	DK_TSVECTOR,
	DK_ARRAY,
} dkind;

/* Kafka Connect's schema type and the semantic type's name. */
static const struct {
	const char *type, *name;
} kinds[] = {
    [DK_BOOLEAN] = {"boolean", NULL},
    [DK_INT16] = {"int16", NULL},
    [DK_INT32] = {"int32", NULL},
    [DK_INT64] = {"int64", NULL},
    [DK_FLOAT] = {"float", NULL},
    [DK_DOUBLE] = {"double", NULL},
    [DK_STRING] = {"string", NULL},
    [DK_BYTES] = {"bytes", NULL},
    [DK_DECIMAL] = {"bytes", "org.apache.kafka.connect.data.Decimal"},
    [DK_VARIABLE_DECIMAL] = {"struct", "io.debezium.data.VariableScaleDecimal"},
    [DK_MONEY] = {"bytes", "org.apache.kafka.connect.data.Decimal"},
    [DK_UUID] = {"string", "io.debezium.data.Uuid"},
    [DK_JSON] = {"string", "io.debezium.data.Json"},
    [DK_XML] = {"string", "io.debezium.data.Xml"},
    [DK_DATE] = {"int32", "io.debezium.time.Date"},
    [DK_TIME] = {"int32", "io.debezium.time.Time"},
    [DK_MICRO_TIME] = {"int64", "io.debezium.time.MicroTime"},
    [DK_TIMESTAMP] = {"int64", "io.debezium.time.Timestamp"},
    [DK_MICRO_TIMESTAMP] = {"int64", "io.debezium.time.MicroTimestamp"},
    [DK_ZONED_TIMESTAMP] = {"string", "io.debezium.time.ZonedTimestamp"},
    [DK_ZONED_TIME] = {"string", "io.debezium.time.ZonedTime"},
    [DK_DURATION] = {"int64", "io.debezium.time.MicroDuration"},
    [DK_BIT] = {"boolean", NULL},
    [DK_BITS] = {"bytes", "io.debezium.data.Bits"},
    [DK_POINT] = {"struct", "io.debezium.data.geometry.Point"},
    [DK_TSVECTOR] = {"string", "io.debezium.data.Tsvector"},
    [DK_ARRAY] = {"array", NULL},
};

/* A column's Debezium type: its kind, and for DK_DECIMAL the scale (a) and precision (b), for
 * DK_BITS the length (a), for DK_ZONED_TIMESTAMP the fractional digits (a), for DK_ARRAY the
 * element type and the column's modifier (numeric(10,2)[] holds numeric(10,2)). */
typedef struct dtype {
	dkind k;
	int a, b;
	uint32_t elem;
	int32_t mod;
} dtype;

/* money.fraction.digits, Debezium's default */
#define MONEY_SCALE 2
/* The length Debezium gives bit varying without one (Integer.MAX_VALUE). */
#define VARBIT_LENGTH 2147483647

/* The arrays Debezium has no type for (it leaves such columns out): cdc writes their text. */
static bool array_known(uint32_t elem)
{
	switch (elem) {
	case PGT_MONEY:
	case PGT_NAME:
	case PGT_INTERVAL:
	case PGT_VARBIT:
	case PGT_XML:
	case PGT_POINT:
	case 1790: /* refcursor */
		return false;
	}
	return true;
}

static dtype type_of_oid(uint32_t oid, int32_t mod)
{
	int p, s;
	uint32_t elem;
	switch (oid) {
	case PGT_BOOL:
		return (dtype){DK_BOOLEAN};
	case PGT_INT2:
		return (dtype){DK_INT16};
	case PGT_INT4:
		return (dtype){DK_INT32};
	case PGT_INT8:
	case PGT_OID:
		return (dtype){DK_INT64};
	case PGT_FLOAT4:
		return (dtype){DK_FLOAT};
	case PGT_FLOAT8:
		return (dtype){DK_DOUBLE};
	case PGT_NUMERIC:
		if (pgtypes_numeric_typmod(mod, &p, &s))
			return (dtype){DK_DECIMAL, s, p};
		return (dtype){DK_VARIABLE_DECIMAL};
	case PGT_MONEY:
		return (dtype){DK_MONEY, MONEY_SCALE};
	case PGT_BYTEA:
		return (dtype){DK_BYTES};
	case PGT_UUID:
		return (dtype){DK_UUID};
	case PGT_JSON:
	case PGT_JSONB:
		return (dtype){DK_JSON};
	case PGT_XML:
		return (dtype){DK_XML};
	case PGT_DATE:
		return (dtype){DK_DATE};
	case PGT_TIME: /* adaptive: milliseconds up to time(3) */
		return (dtype){pgtypes_time_precision(oid, mod) <= 3 ? DK_TIME : DK_MICRO_TIME};
	case PGT_TIMESTAMP:
		return (dtype){pgtypes_time_precision(oid, mod) <= 3 ? DK_TIMESTAMP : DK_MICRO_TIMESTAMP};
	case PGT_TIMESTAMPTZ:
		return (dtype){DK_ZONED_TIMESTAMP, pgtypes_time_precision(oid, mod)};
	case PGT_TIMETZ:
		return (dtype){DK_ZONED_TIME};
	case PGT_INTERVAL:
		return (dtype){DK_DURATION};
	case PGT_BIT:
	case PGT_VARBIT:
		p = pgtypes_length(oid, mod);
		if (p < 0)
			p = oid == PGT_BIT ? 1 : VARBIT_LENGTH;
		return p > 1 ? (dtype){DK_BITS, p} : (dtype){DK_BIT};
	case PGT_POINT:
		return (dtype){DK_POINT};
	case PGT_TSVECTOR:
		return (dtype){DK_TSVECTOR};
	}
	if ((elem = pgtypes_element(oid)) && array_known(elem))
		return (dtype){DK_ARRAY, .elem = elem, .mod = mod};
	return (dtype){DK_STRING};
}

static dtype type_of(const Cdc__V1__Column *c)
{
	return type_of_oid(c->type_oid, c->type_modifier_present_case ? c->type_modifier : -1);
}

/* Schemas, as JsonConverter writes a Connect schema: type, fields, optional, name, version, doc,
 * parameters, default; "field" last in a struct's field. */

static void put_kind_schema(buf *b, dtype t, bool optional)
{
	LIT(b, "{\"type\":\"");
	buf_puts(b, kinds[t.k].type);
	buf_putc(b, '"');
	if (t.k == DK_ARRAY) {
		LIT(b, ",\"items\":");
		put_kind_schema(b, type_of_oid(t.elem, t.mod), true);
		buf_putc(b, '}');
	} else if (t.k == DK_VARIABLE_DECIMAL)
		LIT(b, ",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},"
		       "{\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}]");
	else if (t.k == DK_POINT)
		LIT(b, ",\"fields\":[{\"type\":\"double\",\"optional\":false,\"field\":\"x\"},"
		       "{\"type\":\"double\",\"optional\":false,\"field\":\"y\"},"
		       "{\"type\":\"bytes\",\"optional\":true,\"field\":\"wkb\"},"
		       "{\"type\":\"int32\",\"optional\":true,\"field\":\"srid\"}]");
	if (optional)
		LIT(b, ",\"optional\":true");
	else
		LIT(b, ",\"optional\":false");
	if (kinds[t.k].name) {
		LIT(b, ",\"name\":\"");
		buf_puts(b, kinds[t.k].name);
		LIT(b, "\",\"version\":1");
	}
	if (t.k == DK_VARIABLE_DECIMAL)
		LIT(b, ",\"doc\":\"Variable scaled decimal\"");
	else if (t.k == DK_POINT)
		LIT(b, ",\"doc\":\"Geometry (POINT)\"");
	if (t.k == DK_DECIMAL || t.k == DK_MONEY) {
		LIT(b, ",\"parameters\":{\"scale\":\"");
		json_i64(b, t.a);
		buf_putc(b, '"');
		if (t.k == DK_DECIMAL) {
			LIT(b, ",\"connect.decimal.precision\":\"");
			json_i64(b, t.b);
			buf_putc(b, '"');
		}
		buf_putc(b, '}');
	} else if (t.k == DK_BITS) {
		LIT(b, ",\"parameters\":{\"length\":\"");
		json_i64(b, t.a);
		LIT(b, "\"}");
	}
}

/* "a.b" inside a JSON string. */
static void put_name(buf *b, const char *a, const char *c)
{
	json_escape(b, a, strlen(a));
	buf_putc(b, '.');
	json_escape(b, c, strlen(c));
}

static bool in_row(const Cdc__V1__Row *r, const char *name)
{
	for (size_t i = 0; r && i < r->n_columns; i++)
		if (r->columns[i] && strcmp(r->columns[i]->name, name) == 0)
			return true;
	return false;
}

/* A row's struct schema: its columns, those of the key required, the others optional (pgoutput
 * does not say which are NOT NULL). name is "<server>.<schema>.<table>.<suffix>". */
static void put_row_schema(buf *b, const dbz_options *o, const Cdc__V1__Event *e,
			   Cdc__V1__Column *const *cols, size_t n, bool key)
{
	LIT(b, "{\"type\":\"struct\",\"fields\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_putc(b, ',');
		put_kind_schema(b, type_of(cols[i]), !key && !in_row(e->key, cols[i]->name));
		LIT(b, ",\"field\":");
		json_str(b, cols[i]->name);
		buf_putc(b, '}');
	}
	if (key)
		LIT(b, "],\"optional\":false,\"name\":\"");
	else
		LIT(b, "],\"optional\":true,\"name\":\"");
	put_name(b, o->server_name, e->schema);
	buf_putc(b, '.');
	put_name(b, e->table, key ? "Key" : "Value");
	LIT(b, "\"}");
}

static const char source_schema[] =
    "{\"type\":\"struct\",\"fields\":["
    "{\"type\":\"string\",\"optional\":false,\"field\":\"version\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"connector\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"name\"},"
    "{\"type\":\"int64\",\"optional\":false,\"field\":\"ts_ms\"},"
    "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Enum\",\"version\":1,"
    "\"parameters\":{\"allowed\":\"true,first,first_in_data_collection,last_in_data_collection,last,false,"
    "incremental\"},\"default\":\"false\",\"field\":\"snapshot\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"db\"},"
    "{\"type\":\"string\",\"optional\":true,\"field\":\"sequence\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_us\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ns\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"schema\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"table\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"txId\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"lsn\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"xmin\"},"
    "{\"type\":\"string\",\"optional\":true,\"field\":\"origin\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"origin_lsn\"}],"
    "\"optional\":false,\"name\":\"io.debezium.connector.postgresql.Source\",\"version\":1,\"field\":"
    "\"source\"}";

static const char transaction_schema[] =
    "{\"type\":\"struct\",\"fields\":["
    "{\"type\":\"string\",\"optional\":false,\"field\":\"id\"},"
    "{\"type\":\"int64\",\"optional\":false,\"field\":\"total_order\"},"
    "{\"type\":\"int64\",\"optional\":false,\"field\":\"data_collection_order\"}],"
    "\"optional\":true,\"name\":\"event.block\",\"version\":1,\"field\":\"transaction\"}";

static const char message_schema[] =
    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,\"field\":\"op\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ms\"},%s,%s,"
    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":true,\"field\":\"prefix\"},"
    "{\"type\":\"bytes\",\"optional\":true,\"field\":\"content\"}],\"optional\":false,"
    "\"name\":\"io.debezium.connector.postgresql.Message\",\"version\":1,\"field\":\"message\"}],"
    "\"optional\":false,\"name\":\"io.debezium.connector.postgresql.MessageValue\",\"version\":1}";

static const char message_key_schema[] =
    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":true,\"field\":\"prefix\"}],"
    "\"optional\":false,\"name\":\"io.debezium.connector.postgresql.MessageKey\",\"version\":1}";

/* Values ----------------------------------------------------------------------------------------- */

/* What Debezium writes for an unchanged TOASTed value of a type: the placeholder as a string, or
 * its bytes; for arrays (UnchangedToastedPlaceholder) a list of one placeholder string, bytes or
 * uuid (the name-based uuid of the placeholder's bytes), or the bytes as numbers for int4, date
 * and int8 arrays; null for the other types (Debezium fails to convert it and leaves null). */
static void put_placeholder(buf *b, dtype t)
{
	static const uint8_t p[] = DBZ_PLACEHOLDER;
	switch (t.k) {
	case DK_STRING:
	case DK_JSON:
	case DK_XML:
	case DK_TSVECTOR:
		LIT(b, "\"" DBZ_PLACEHOLDER "\"");
		return;
	case DK_BYTES:
		json_base64(b, p, sizeof(p) - 1);
		return;
	case DK_ARRAY:
		switch (t.elem) {
		case PGT_TEXT:
		case PGT_VARCHAR:
		case PGT_BPCHAR:
		case PGT_JSON:
		case PGT_JSONB:
			LIT(b, "[\"" DBZ_PLACEHOLDER "\"]");
			return;
		case PGT_BYTEA:
			buf_putc(b, '[');
			json_base64(b, p, sizeof(p) - 1);
			buf_putc(b, ']');
			return;
		case PGT_UUID:
			LIT(b, "[\"b68a35a7-17ad-35b3-af2a-ae46edb4545a\"]");
			return;
		case PGT_INT4:
		case PGT_DATE:
		case PGT_INT8:
			for (size_t i = 0; i < sizeof(p) - 1; i++) {
				buf_putc(b, i ? ',' : '[');
				json_u64(b, p[i]);
			}
			buf_putc(b, ']');
			return;
		}
		break;
	default:
		break;
	}
	json_null(b);
}

/* The text of a value the decoder kept as text. */
static bool text_of(const Cdc__V1__Value *v, const char **s)
{
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		*s = v->text_value;
		return true;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		*s = v->other_value ? v->other_value->text : "";
		return true;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		*s = v->json_value;
		return true;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		*s = v->numeric_value;
		return true;
	default:
		return false;
	}
}

/* The microseconds of timestamp infinity and -infinity as Debezium writes them (pgjdbc's
 * PGStatement.DATE_POSITIVE_INFINITY and DATE_NEGATIVE_INFINITY, read as microseconds), and the day
 * numbers of date infinity and -infinity (Debezium reads them as -5877611-06-21 and -22). */
#define TS_INFINITY INT64_C(9223372036825200000)
#define TS_MINUS_INFINITY INT64_C(-9223372036832400000)
#define DATE_INFINITY (-2147472693)
#define DATE_MINUS_INFINITY (-2147472692)

static int64_t floor_div(int64_t a, int64_t d)
{
	int64_t q = a / d;
	return (a % d < 0) ? q - 1 : q;
}

/* "HH:MM:SS" of a time of day, and the fraction: exactly width digits, or (width 0) as few as it
 * needs, none for a whole second (as Java's ISO formats print it). */
static void put_time_of_day(buf *b, int64_t us, int width)
{
	int64_t s = us / USECS_PER_SEC, frac = us % USECS_PER_SEC;
	char t[16] = {(char)('0' + s / 36000 % 10), (char)('0' + s / 3600 % 10), ':',
		      (char)('0' + s / 600 % 6),    (char)('0' + s / 60 % 10),	 ':',
		      (char)('0' + s % 60 / 10),    (char)('0' + s % 10),	 '.'};
	for (int i = 14; i >= 9; i--, frac /= 10)
		t[i] = (char)('0' + frac % 10);
	int n = 15;
	if (width == 0)
		while (n > 8 && (t[n - 1] == '0' || t[n - 1] == '.'))
			n--;
	else
		n = 9 + width;
	buf_append(b, t, (size_t)n);
}

/* Kafka Connect's Decimal of a decimal's text at scale; null when it does not read or has another
 * scale (NaN, the infinities: Debezium cannot write them in precise mode either). */
static void put_decimal_text(buf *b, dbz_scratch *s, const char *t, int scale)
{
	decimal d;
	size_t at = b->len;
	if (!decimal_read(t, strlen(t), &d) || !put_decimal(b, s, &d, scale)) {
		b->len = at;
		json_null(b);
	}
}

static void put_value(buf *b, dbz_scratch *s, dtype t, const Cdc__V1__Value *v);

/* An array's elements, each read by the decoder as a column of the element type would be. */
static bool put_array(buf *b, dbz_scratch *s, dtype t, const char *text)
{
	size_t n;
	if (!read_array(text, strlen(text), s, &n))
		return false;
	if (!s->arena)
		s->arena = arena_new(16 * 1024);
	arena_reset(s->arena);
	dtype et = type_of_oid(t.elem, t.mod);
	const span *sp = (const span *)s->spans.data;
	buf_putc(b, '[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_putc(b, ',');
		pgo_datum d = sp[i].len < 0 ? (pgo_datum){.kind = PGO_NULL}
					    : (pgo_datum){.kind = PGO_TEXT,
							  .len = (uint32_t)sp[i].len,
							  .data = s->elems.data + sp[i].off};
		put_value(b, s, et, evt_value(s->arena, NULL, t.elem, &d));
	}
	buf_putc(b, ']');
	return true;
}

static void put_value(buf *b, dbz_scratch *s, dtype t, const Cdc__V1__Value *v)
{
	const char *text;
	decimal d;
	int64_t us;
	double x, y;
	if (!v || v->kind_case == CDC__V1__VALUE__KIND_NULL_VALUE) {
		json_null(b);
		return;
	}
	switch (t.k) {
	case DK_BOOLEAN:
		if (v->kind_case != CDC__V1__VALUE__KIND_BOOL_VALUE)
			break;
		json_boolean(b, v->bool_value);
		return;
	case DK_INT16:
	case DK_INT32:
	case DK_INT64:
		if (v->kind_case != CDC__V1__VALUE__KIND_INT_VALUE)
			break;
		json_i64(b, v->int_value);
		return;
	case DK_FLOAT:
	case DK_DOUBLE:
		if (v->kind_case != CDC__V1__VALUE__KIND_FLOAT_VALUE)
			break;
		put_java_double(b, v->float_value, t.k == DK_FLOAT);
		return;
	case DK_STRING:
	case DK_XML:
	case DK_JSON:
	case DK_TSVECTOR:
		if (!text_of(v, &text))
			break;
		json_str(b, text);
		return;
	case DK_BYTES:
		if (v->kind_case != CDC__V1__VALUE__KIND_BYTES_VALUE)
			break;
		json_base64(b, v->bytes_value.data, v->bytes_value.len);
		return;
	case DK_DECIMAL:
		if (v->kind_case != CDC__V1__VALUE__KIND_NUMERIC_VALUE)
			break;
		put_decimal_text(b, s, v->numeric_value, t.a);
		return;
	case DK_VARIABLE_DECIMAL:
		if (v->kind_case != CDC__V1__VALUE__KIND_NUMERIC_VALUE ||
		    !decimal_read(v->numeric_value, strlen(v->numeric_value), &d))
			break;
		put_variable_decimal(b, s, &d);
		return;
	case DK_MONEY: {
		char money[32];
		if (!text_of(v, &text) || !read_money(text, strlen(text), money))
			break;
		put_decimal_text(b, s, money, t.a);
		return;
	}
	case DK_UUID:
		if (v->kind_case != CDC__V1__VALUE__KIND_UUID_VALUE)
			break;
		json_uuid(b, &v->uuid_value);
		return;
	case DK_DATE:
		if (v->kind_case != CDC__V1__VALUE__KIND_DATE_VALUE)
			break;
		json_i64(b, v->date_value == INT32_MAX	 ? DATE_INFINITY
			    : v->date_value == INT32_MIN ? DATE_MINUS_INFINITY
							 : v->date_value);
		return;
	case DK_TIME:
	case DK_MICRO_TIME:
		if (v->kind_case != CDC__V1__VALUE__KIND_TIME_VALUE)
			break;
		json_i64(b, t.k == DK_TIME ? v->time_value / 1000 : v->time_value);
		return;
	case DK_TIMESTAMP:
	case DK_MICRO_TIMESTAMP:
		if (v->kind_case != CDC__V1__VALUE__KIND_TIMESTAMP_VALUE || !v->timestamp_value)
			break;
		us = v->timestamp_value->micros;
		us = us == INT64_MAX ? TS_INFINITY : us == INT64_MIN ? TS_MINUS_INFINITY : us;
		json_i64(b, t.k == DK_TIMESTAMP ? floor_div(us, 1000) : us);
		return;
	case DK_ZONED_TIMESTAMP:
		if (v->kind_case != CDC__V1__VALUE__KIND_TIMESTAMP_VALUE || !v->timestamp_value)
			break;
		us = v->timestamp_value->micros;
		if (us == INT64_MAX || us == INT64_MIN) {
			if (us == INT64_MAX)
				LIT(b, "\"infinity\"");
			else
				LIT(b, "\"-infinity\"");
			return;
		}
		buf_putc(b, '"');
		json_ymd(b, floor_div(us, USECS_PER_DAY));
		buf_putc(b, 'T');
		put_time_of_day(b, us - floor_div(us, USECS_PER_DAY) * USECS_PER_DAY, t.a);
		LIT(b, "Z\"");
		return;
	case DK_ZONED_TIME:
		if (!text_of(v, &text) || !read_timetz(text, strlen(text), &us))
			break;
		buf_putc(b, '"');
		put_time_of_day(b, us, 0);
		LIT(b, "Z\"");
		return;
	case DK_DURATION:
		if (!text_of(v, &text) || !read_interval(text, strlen(text), &us))
			break;
		json_i64(b, us);
		return;
	case DK_BIT:
		if (!text_of(v, &text) || !*text || strspn(text, "01") != strlen(text))
			break;
		json_boolean(b, strchr(text, '1') != NULL);
		return;
	case DK_BITS: {
		/* little-endian: the last character is bit 0; as many bytes as the highest 1 needs */
		if (!text_of(v, &text) || strspn(text, "01") != strlen(text))
			break;
		size_t n = strlen(text), bits = 0;
		for (size_t i = 0; i < n; i++)
			if (text[i] == '1') {
				bits = n - i;
				break;
			}
		buf_reset(&s->bytes);
		buf_reserve(&s->bytes, bits / 8 + 1);
		uint8_t *o = (uint8_t *)s->bytes.data;
		memset(o, 0, bits / 8 + 1);
		for (size_t i = 0; i < bits; i++)
			if (text[n - 1 - i] == '1')
				o[i / 8] |= (uint8_t)(1u << (i % 8));
		json_base64(b, o, (bits + 7) / 8);
		return;
	}
	case DK_POINT: {
		if (!text_of(v, &text) || !read_point(text, strlen(text), &x, &y))
			break;
		uint8_t wkb[21] = {1, 1, 0, 0, 0}; /* little-endian, type 1 (point), x, y */
		uint64_t bx, by;
		memcpy(&bx, &x, 8);
		memcpy(&by, &y, 8);
		for (int i = 0; i < 8; i++) {
			wkb[5 + i] = (uint8_t)(bx >> (8 * i));
			wkb[13 + i] = (uint8_t)(by >> (8 * i));
		}
		LIT(b, "{\"x\":");
		put_java_double(b, x, false);
		LIT(b, ",\"y\":");
		put_java_double(b, y, false);
		LIT(b, ",\"wkb\":");
		json_base64(b, wkb, sizeof(wkb));
		LIT(b, ",\"srid\":null}");
		return;
	}
	case DK_ARRAY: {
		size_t at = b->len;
		if (text_of(v, &text) && put_array(b, s, t, text))
			return;
		b->len = at;
		break;
	}
	}
	json_null(b); /* a value of another kind than its column's type: cannot come from the server */
}

static bool is_toast(const Cdc__V1__Column *c)
{
	return c->value && c->value->kind_case == CDC__V1__VALUE__KIND_UNCHANGED_TOAST;
}

/* The column of row r named name that is not unchanged TOAST, or NULL. */
static const Cdc__V1__Column *sent(const Cdc__V1__Row *r, const char *name)
{
	for (size_t i = 0; r && i < r->n_columns; i++)
		if (r->columns[i] && !is_toast(r->columns[i]) && strcmp(r->columns[i]->name, name) == 0)
			return r->columns[i];
	return NULL;
}

/* A row's payload. An unchanged TOASTed column takes the value other has (the old row under
 * REPLICA IDENTITY FULL), as Debezium does, else the placeholder, or is left out. */
static void put_row(buf *b, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Row *r,
		    const Cdc__V1__Row *other)
{
	if (!r) {
		json_null(b);
		return;
	}
	buf_putc(b, '{');
	bool first = true;
	for (size_t i = 0; i < r->n_columns; i++) {
		const Cdc__V1__Column *c = r->columns[i];
		if (!c)
			continue;
		const Cdc__V1__Column *from = is_toast(c) ? sent(other, c->name) : c;
		if (!from && !o->placeholder)
			continue;
		if (!first)
			buf_putc(b, ',');
		first = false;
		json_str(b, c->name);
		buf_putc(b, ':');
		if (from)
			put_value(b, s, type_of(c), from->value);
		else
			put_placeholder(b, type_of(c));
	}
	buf_putc(b, '}');
}

/* Keys ------------------------------------------------------------------------------------------- */

void dbz_key(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e,
	     Cdc__V1__Column *const *cols, size_t n)
{
	bool message = e->op == CDC__V1__OP__OP_MESSAGE;
	if (o->schemas) {
		LIT(out, "{\"schema\":");
		if (message)
			LIT(out, message_key_schema);
		else
			put_row_schema(out, o, e, cols, n, true);
		LIT(out, ",\"payload\":");
	}
	if (message) {
		LIT(out, "{\"prefix\":");
		json_str(out, e->message ? e->message->prefix : "");
		buf_putc(out, '}');
	} else {
		buf_putc(out, '{');
		for (size_t i = 0; i < n; i++) {
			if (i)
				buf_putc(out, ',');
			json_str(out, cols[i]->name);
			buf_putc(out, ':');
			put_value(out, s, type_of(cols[i]), cols[i]->value);
		}
		buf_putc(out, '}');
	}
	if (o->schemas)
		buf_putc(out, '}');
}

/* Values ----------------------------------------------------------------------------------------- */

/* The source block: commit-time fields as marks; a read (an incremental snapshot's row, for
 * Debezium) without txId and lsn; a non-transactional message without txId. */
static void put_source(buf *b, const dbz_options *o, const Cdc__V1__Event *e)
{
	bool read = e->op == CDC__V1__OP__OP_READ;
	LIT(b, "{\"version\":\"cdc-" CDC_VERSION "\",\"connector\":\"postgresql\",\"name\":");
	json_str(b, o->server_name);
	LIT(b, ",\"ts_ms\":");
	mark(b, M_SOURCE_MS);
	if (read)
		LIT(b, ",\"snapshot\":\"incremental\",\"db\":");
	else
		LIT(b, ",\"snapshot\":\"false\",\"db\":");
	json_str(b, o->database ? o->database : "");
	LIT(b, ",\"sequence\":\"[\\\"");
	mark(b, M_SEQUENCE);
	LIT(b, "\\\",\\\"");
	json_u64(b, e->lsn);
	LIT(b, "\\\"]\",\"ts_us\":");
	mark(b, M_SOURCE_US);
	LIT(b, ",\"ts_ns\":");
	mark(b, M_SOURCE_NS);
	LIT(b, ",\"schema\":");
	json_str(b, e->schema);
	LIT(b, ",\"table\":");
	json_str(b, e->table);
	LIT(b, ",\"txId\":");
	if (e->xid && !read)
		json_u64(b, e->xid);
	else
		json_null(b);
	LIT(b, ",\"lsn\":");
	if (read)
		json_null(b);
	else
		json_u64(b, e->lsn);
	LIT(b, ",\"xmin\":null,\"origin\":");
	if (e->origin && *e->origin)
		json_str(b, e->origin);
	else
		json_null(b);
	LIT(b, ",\"origin_lsn\":null}");
}

static void put_transaction(buf *b, const dbz_options *o)
{
	if (o->transaction)
		mark(b, M_TRANSACTION);
	else
		json_null(b);
}

static void put_message_value(buf *out, const dbz_options *o, const Cdc__V1__Event *e)
{
	if (o->schemas) {
		LIT(out, "{\"schema\":");
		buf_printf(out, message_schema, source_schema, transaction_schema);
		LIT(out, ",\"payload\":");
	}
	LIT(out, "{\"op\":\"m\",\"ts_ms\":");
	mark(out, M_NOW_MS);
	LIT(out, ",\"source\":");
	put_source(out, o, e);
	LIT(out, ",\"transaction\":");
	put_transaction(out, o);
	LIT(out, ",\"message\":{\"prefix\":");
	json_str(out, e->message ? e->message->prefix : "");
	LIT(out, ",\"content\":");
	if (e->message)
		json_base64(out, e->message->content.data, e->message->content.len);
	else
		LIT(out, "\"\"");
	LIT(out, "}}");
	if (o->schemas)
		buf_putc(out, '}');
}

void dbz_value(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e, char op,
	       const Cdc__V1__Row *before, const Cdc__V1__Row *after)
{
	if (op == DBZ_MESSAGE) {
		put_message_value(out, o, e);
		return;
	}
	if (o->schemas) {
		/* The rows' schema from the row that has every column the event carries. */
		const Cdc__V1__Row *r = after ? after : before;
		LIT(out, "{\"schema\":{\"type\":\"struct\",\"fields\":[");
		for (int i = 0; i < 2; i++) {
			put_row_schema(out, o, e, r ? r->columns : NULL, r ? r->n_columns : 0, false);
			out->len--; /* the closing brace: the field's name goes in first */
			LIT(out, ",\"field\":");
			if (i == 0)
				LIT(out, "\"before\"},");
			else
				LIT(out, "\"after\"},");
		}
		LIT(out, source_schema);
		buf_putc(out, ',');
		LIT(out, transaction_schema);
		LIT(out, ",{\"type\":\"string\",\"optional\":false,\"field\":\"op\"},"
			 "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ms\"},"
			 "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_us\"},"
			 "{\"type\":\"int64\",\"optional\":true,\"field\":\"ts_ns\"}],"
			 "\"optional\":false,\"name\":\"");
		put_name(out, o->topic, "Envelope");
		LIT(out, "\",\"version\":2},\"payload\":");
	}
	LIT(out, "{\"before\":");
	put_row(out, s, o, before, NULL);
	LIT(out, ",\"after\":");
	put_row(out, s, o, after, before);
	LIT(out, ",\"source\":");
	put_source(out, o, e);
	LIT(out, ",\"transaction\":");
	put_transaction(out, o);
	LIT(out, ",\"op\":\"");
	buf_putc(out, op);
	LIT(out, "\",\"ts_ms\":");
	mark(out, M_NOW_MS);
	LIT(out, ",\"ts_us\":");
	mark(out, M_NOW_US);
	LIT(out, ",\"ts_ns\":");
	mark(out, M_NOW_NS);
	buf_putc(out, '}');
	if (o->schemas)
		buf_putc(out, '}');
}

/* Filling the marks ------------------------------------------------------------------------------- */

static void put_txn_id(buf *b, uint32_t xid, uint64_t commit_lsn)
{
	buf_putc(b, '"');
	json_u64(b, xid);
	buf_putc(b, ':');
	json_u64(b, commit_lsn);
	buf_putc(b, '"');
}

void dbz_complete(buf *out, const char *r, size_t len, const dbz_fill *f)
{
	int64_t src = f->commit_time ? f->commit_time : f->now;
	const char *end = r + len;
	while (r < end) {
		const char *m = memchr(r, MARK, (size_t)(end - r));
		if (!m || m + 1 >= end) {
			buf_append(out, r, (size_t)(end - r));
			return;
		}
		buf_append(out, r, (size_t)(m - r));
		switch (m[1]) {
		case M_SOURCE_MS:
			json_i64(out, floor_div(src, 1000));
			break;
		case M_SEQUENCE:
			json_u64(out, f->commit_lsn);
			break;
		case M_SOURCE_US:
			json_i64(out, src);
			break;
		case M_SOURCE_NS:
			json_i64(out, src * 1000);
			break;
		case M_TRANSACTION:
			if (!f->xid) {
				json_null(out);
				break;
			}
			LIT(out, "{\"id\":");
			put_txn_id(out, f->xid, f->commit_lsn);
			LIT(out, ",\"total_order\":");
			json_u64(out, f->total_order);
			LIT(out, ",\"data_collection_order\":");
			json_u64(out, f->collection_order);
			buf_putc(out, '}');
			break;
		case M_NOW_MS:
			json_i64(out, floor_div(f->now, 1000));
			break;
		case M_NOW_US:
			json_i64(out, f->now);
			break;
		case M_NOW_NS:
			json_i64(out, f->now * 1000);
			break;
		}
		r = m + 2;
	}
}

/* Transaction metadata --------------------------------------------------------------------------- */

static const char txn_key_schema[] =
    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,\"field\":\"id\"}],"
    "\"optional\":false,\"name\":\"io.debezium.connector.common.TransactionMetadataKey\",\"version\":1}";

static const char txn_value_schema[] =
    "{\"type\":\"struct\",\"fields\":[{\"type\":\"string\",\"optional\":false,\"field\":\"status\"},"
    "{\"type\":\"string\",\"optional\":false,\"field\":\"id\"},"
    "{\"type\":\"int64\",\"optional\":true,\"field\":\"event_count\"},"
    "{\"type\":\"array\",\"items\":{\"type\":\"struct\",\"fields\":["
    "{\"type\":\"string\",\"optional\":false,\"field\":\"data_collection\"},"
    "{\"type\":\"int64\",\"optional\":false,\"field\":\"event_count\"}],"
    "\"optional\":true,\"name\":\"event.collection\",\"version\":1},\"optional\":true,\"field\":\"data_"
    "collections\"},"
    "{\"type\":\"int64\",\"optional\":false,\"field\":\"ts_ms\"}],"
    "\"optional\":false,\"name\":\"io.debezium.connector.common.TransactionMetadataValue\",\"version\":1}";

void dbz_txn_key(buf *out, bool schemas, uint32_t xid, uint64_t commit_lsn)
{
	if (schemas) {
		LIT(out, "{\"schema\":");
		LIT(out, txn_key_schema);
		LIT(out, ",\"payload\":");
	}
	LIT(out, "{\"id\":");
	put_txn_id(out, xid, commit_lsn);
	buf_putc(out, '}');
	if (schemas)
		buf_putc(out, '}');
}

void dbz_txn_value(buf *out, bool schemas, bool end, uint32_t xid, uint64_t commit_lsn, int64_t time_us,
		   uint64_t events, const dbz_count *tables, size_t ntables)
{
	if (schemas) {
		LIT(out, "{\"schema\":");
		LIT(out, txn_value_schema);
		LIT(out, ",\"payload\":");
	}
	if (end)
		LIT(out, "{\"status\":\"END\",\"id\":");
	else
		LIT(out, "{\"status\":\"BEGIN\",\"id\":");
	put_txn_id(out, xid, commit_lsn);
	LIT(out, ",\"event_count\":");
	if (end)
		json_u64(out, events);
	else
		json_null(out);
	LIT(out, ",\"data_collections\":");
	if (end) {
		buf_putc(out, '[');
		for (size_t i = 0; i < ntables; i++) {
			if (i)
				buf_putc(out, ',');
			LIT(out, "{\"data_collection\":\"");
			put_name(out, tables[i].schema, tables[i].table);
			LIT(out, "\",\"event_count\":");
			json_u64(out, tables[i].events);
			buf_putc(out, '}');
		}
		buf_putc(out, ']');
	} else {
		json_null(out);
	}
	LIT(out, ",\"ts_ms\":");
	json_i64(out, floor_div(time_us, 1000));
	buf_putc(out, '}');
	if (schemas)
		buf_putc(out, '}');
}
