/* test_log.c: log lines, text and JSON: one event is one line whatever its text holds (newlines in
 * a server's error or a reload's error list are escaped, so no input can forge a log line). */
#include "decoder/base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

/* What log_at writes to stderr, without the timestamp (the first field). */
static char *capture(log_format format, log_level level, const char *msg, const char *ctx)
{
	fflush(stderr);
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	dup2(fileno(tmp), STDERR_FILENO);
	log_setup(LOG_LEVEL_DEBUG, format);
	if (ctx)
		log_at(level, msg, "%s", ctx);
	else
		log_at(level, msg, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	long n = ftell(tmp);
	char *out = calloc(1, (size_t)n + 1);
	rewind(tmp);
	if (fread(out, 1, (size_t)n, tmp) != (size_t)n)
		out[0] = '\0';
	fclose(tmp);
	char *rest = format == LOG_FORMAT_JSON ? strstr(out, "\"level\"") : strchr(out, ' ');
	char *r = strdup(rest ? rest + (format == LOG_FORMAT_JSON ? 0 : 1) : out);
	free(out);
	return r;
}

int main(void)
{
	static const struct {
		log_format format;
		log_level level;
		const char *msg, *ctx, *want;
	} t[] = {
	    {LOG_FORMAT_TEXT, LOG_LEVEL_INFO, "streaming", "slot=s lsn=0/1",
	     "info  streaming slot=s lsn=0/1\n"},
	    {LOG_FORMAT_TEXT, LOG_LEVEL_WARN, "no context", NULL, "warn  no context\n"},
	    /* a reload's error list ends with a newline; a server error may hold several lines */
	    {LOG_FORMAT_TEXT, LOG_LEVEL_ERROR, "reload refused", "errors=\"c.yaml:1:1: a\nc.yaml:2:1: b\n\"",
	     "error reload refused errors=\"c.yaml:1:1: a\\nc.yaml:2:1: b\\n\"\n"},
	    /* a name that tries to forge a line of its own */
	    {LOG_FORMAT_TEXT, LOG_LEVEL_INFO, "created publication",
	     "publication=p\n2026-01-01T00:00:00.000Z error forged\r\t\x1b[31m\x7f",
	     "info  created publication publication=p\\n2026-01-01T00:00:00.000Z error "
	     "forged\\r\\t\\x1B[31m\\x7F\n"},
	    {LOG_FORMAT_TEXT, LOG_LEVEL_INFO, "multi\nline msg", "k=\xc3\xbc",
	     "info  multi\\nline msg k=\xc3\xbc\n"},
	    {LOG_FORMAT_JSON, LOG_LEVEL_ERROR, "reload refused", "errors=\"a\nb\"",
	     "\"level\":\"error\",\"msg\":\"reload refused\",\"errors\":\"a\\nb\"}\n"},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		char *got = capture(t[i].format, t[i].level, t[i].msg, t[i].ctx);
		CHECK_STR(got, t[i].want);
		CHECK(strchr(got, '\n') == got + strlen(got) - 1); /* exactly one line */
		free(got);
	}
	/* below the level: nothing at all */
	fflush(stderr);
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	dup2(fileno(tmp), STDERR_FILENO);
	log_setup(LOG_LEVEL_WARN, LOG_FORMAT_TEXT);
	log_info("quiet", "k=v");
	log_debug("quiet", "k=v");
	dup2(saved, STDERR_FILENO);
	close(saved);
	CHECK_INT(ftell(tmp), 0);
	fclose(tmp);
	return TEST_SUMMARY("test_log");
}
