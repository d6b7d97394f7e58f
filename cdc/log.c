/* log.c: see log.h. Lines are written with one write(2) so concurrent writers never interleave. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

static cfg_log_level min_level = CFG_LOG_INFO;
static cfg_log_format out_format = CFG_LOG_TEXT;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(cfg_log_level level, cfg_log_format format)
{
	min_level = level;
	out_format = format;
}

bool log_enabled(cfg_log_level level)
{
	return level >= min_level;
}

void log_at(cfg_log_level level, const char *msg, const char *ctx_fmt, ...)
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
	if (out_format == CFG_LOG_JSON) {
		buf_printf(&line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", ts, level_names[level]);
		json_string(&line, msg, strlen(msg));
		if (*ctx) {
			buf_puts(&line, ",\"context\":");
			json_string(&line, ctx, strlen(ctx));
		}
		buf_puts(&line, "}\n");
	} else {
		buf_printf(&line, "%s %-5s %s%s%s\n", ts, level_names[level], msg, *ctx ? " " : "", ctx);
	}
	ssize_t w = write(STDERR_FILENO, line.data, line.len);
	(void)w; /* nowhere left to report a failing stderr */
	buf_free(&line);
}
