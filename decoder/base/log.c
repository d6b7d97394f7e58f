/* See log.h. Lines are written with one write(2), so concurrent writers never interleave. In text form,
 * control characters (a newline in a server's error, a name or a reload's error list) are escaped. So one
 * event is always one line, and no input can forge another. */
#include "decoder/base/log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "decoder/base/json.h"

static log_level min_level = LOG_LEVEL_INFO;
static log_format out_format = LOG_FORMAT_TEXT;
#define LEVEL_NAME(v, name) name,
static const char *const level_names[] = {LOG_LEVELS(LEVEL_NAME)};

void log_setup(log_level level, log_format format)
{
	min_level = level;
	out_format = format;
}

const char *log_level_name(log_level level)
{
	return (unsigned)level < sizeof(level_names) / sizeof(*level_names) ? level_names[level] : "?";
}

bool log_enabled(log_level level)
{
	return level >= min_level;
}

/* The length of a key= at p (lower-case letters, digits, _ and .), or 0. */
static size_t key_at(const char *p)
{
	size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_.");
	return n && p[n] == '=' ? n : 0;
}

/* Context "k=v k2=\"a b\"" as the JSON members ,"k":"v","k2":"a b". A quoted value ends at the quote that is
 * followed by the end or by " key=". So quotes inside a value (an error message quoting a name) survive. Text
 * that is not key=value goes to "context". */
static void json_fields(buf *line, bool *first, const char *ctx)
{
	const char *p = ctx;
	while (*p) {
		size_t k = key_at(p);
		if (!k) {
			json_key_str(line, first, "context", p);
			return;
		}
		json_sep(line, first);
		json_string(line, p, k);
		buf_putc(line, ':');
		const char *v = p + k + 1, *end;
		if (*v == '"') {
			end = v + 1;
			while (*end && !(end[0] == '"' && (!end[1] || (end[1] == ' ' && key_at(end + 2)))))
				end++;
			json_string(line, v + 1, (size_t)(end - v - 1));
			end += *end == '"';
		} else {
			end = v + strcspn(v, " ");
			json_string(line, v, (size_t)(end - v));
		}
		p = end + (*end == ' ');
	}
}

/* s with control characters as C escapes (\n, \t, \r, \xNN). */
static void put_text(buf *b, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x20 && c != 0x7f)
			buf_putc(b, (char)c);
		else if (c == '\n')
			buf_puts(b, "\\n");
		else if (c == '\t')
			buf_puts(b, "\\t");
		else if (c == '\r')
			buf_puts(b, "\\r");
		else
			buf_printf(b, "\\x%02X", c);
	}
}

void log_at(log_level level, const char *msg, const char *ctx_fmt, ...)
{
	if (!log_enabled(level))
		return;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	char ts[40];
	size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)tv.tv_usec / 1000);

	char ctx[2048] = "";
	if (ctx_fmt && *ctx_fmt) {
		va_list ap;
		va_start(ap, ctx_fmt);
		vsnprintf(ctx, sizeof(ctx), ctx_fmt, ap);
		va_end(ap);
	}

	buf line = {0};
	if (out_format == LOG_FORMAT_JSON) {
		bool first = true;
		buf_putc(&line, '{');
		json_key_str(&line, &first, "time", ts);
		json_key_str(&line, &first, "level", log_level_name(level));
		json_key_str(&line, &first, "msg", msg);
		json_fields(&line, &first, ctx);
		buf_puts(&line, "}\n");
	} else {
		buf_printf(&line, "%s %-5s ", ts, log_level_name(level));
		put_text(&line, msg);
		if (*ctx) {
			buf_putc(&line, ' ');
			put_text(&line, ctx);
		}
		buf_putc(&line, '\n');
	}
	ssize_t w = write(STDERR_FILENO, line.data, line.len);
	(void)w; /* nowhere left to report a failing stderr */
	buf_free(&line);
}
