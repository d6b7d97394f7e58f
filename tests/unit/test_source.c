/* test_source.c: what the source does without a server: source_redact, which takes the passwords
 * of source.dsn (key=value, URI, a dbname that is a connection string), of source.primary_dsn and
 * of PGPASSWORD out of every message, whatever libpq or the server quotes back. */
#include "cdc/source/source.h"

#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/setup.h"
#include "test.h"

static source *source_for(const char *dsn)
{
	buf y = {0}, e = {0};
	buf_puts(&y, "source:\n  dsn: \"");
	for (const char *c = dsn; *c; c++) {
		if (*c == '"' || *c == '\\')
			buf_putc(&y, '\\');
		buf_putc(&y, *c);
	}
	buf_puts(&y, "\"\n");
	cfg *c = cfg_parse("t.yaml", y.data, y.len, &e);
	if (!c) {
		fprintf(stderr, "%s", e.data);
		abort();
	}
	source_settings set = daemon_setup_source(c);
	source *s = source_new(&set);
	cfg_free(c);
	buf_free(&y);
	buf_free(&e);
	return s;
}

/* redact(msg) in a buffer of errlen bytes must give want. */
static void check(int line, const char *dsn, const char *msg, size_t errlen, const char *want)
{
	source *s = source_for(dsn);
	char *err = malloc(errlen); /* exact size: ASan and valgrind see a write past it */
	snprintf(err, errlen, "%s", msg);
	source_redact(s, err, errlen);
	if (strcmp(err, want) != 0) {
		test_failed++;
		fprintf(stderr, "%s:%d: dsn %s\n  got:  %s\n  want: %s\n", __FILE__, line, dsn, err, want);
	} else {
		test_passed++;
	}
	free(err);
	source_free(s);
}

int main(void)
{
	unsetenv("PGPASSWORD");
	check(__LINE__, "host=h password=Sekr3t-1 user=u", "FATAL: Sekr3t-1 and Sekr3t-1!", 256,
	      "FATAL: ******** and ********!");
	check(__LINE__, "password='with space\\'s' host=h", "got with space's here", 256,
	      "got ******** here");
	check(__LINE__, "postgresql://u:Uri-pw-2@h/db?sslpassword=Ssl-pw-3", "Uri-pw-2 Ssl-pw-3 u@h", 256,
	      "******** ******** u@h");
	check(__LINE__, "postgresql://u:p%40ss-word@h/db", "libpq decodes it: p@ss-word", 256,
	      "libpq decodes it: ********");
	check(__LINE__, "dbname='postgresql://u:Inner-pw-4@h/db' user=x",
	      "database \"postgresql://u:Inner-pw-4@h/db\"", 256,
	      "database \"postgresql://u:********@h/db\"");
	check(__LINE__, "dbname='host=h password=Inner-pw-5'", "x Inner-pw-5", 256, "x ********");
	/* shorter than 4 bytes: left alone, or every "abc" in a message would go */
	check(__LINE__, "password=abc", "abc def", 256, "abc def");
	/* a secret the mask contains: one pass, no endless loop */
	check(__LINE__, "password=****", "a **** b ***", 256, "a ******** b ***");
	check(__LINE__, "password=********", "x ******** y", 256, "x ******** y");
	/* the mask is longer than the secret and the buffer is full: cut short, never overrun */
	check(__LINE__, "password=Sek4", "xxxxxxxxxxxxxxxxxxxxxxxxxxxSek4", 32,
	      "xxxxxxxxxxxxxxxxxxxxxxxxxxx****");
	check(__LINE__, "password=Sek4", "Sek4Sek4Sek4Sek4", 17, "****************");
	check(__LINE__, "password=Sek4", "", 1, "");
	/* nothing to hide */
	check(__LINE__, "host=h user=u", "password authentication failed", 256,
	      "password authentication failed");
	check(__LINE__, "host=h password=", "empty", 256, "empty");
	/* a DSN libpq cannot parse yields no secrets (its message is made from the masked DSN instead) */
	check(__LINE__, "host=h password='unterminated", "unterminated", 256, "unterminated");
	/* source.primary_dsn's passwords too (a standby's primary, where cdc writes) */
	{
		buf y = {0}, e = {0};
		buf_puts(
		    &y,
		    "source:\n  dsn: \"host=standby\"\n  primary_dsn: \"host=p password=Primary-pw-7\"\n");
		cfg *c = cfg_parse("t.yaml", y.data, y.len, &e);
		source_settings set = daemon_setup_source(c);
		source *ps = source_new(&set);
		char err[64] = "FATAL: Primary-pw-7 at p";
		source_redact(ps, err, sizeof(err));
		CHECK_STR(err, "FATAL: ******** at p");
		source_free(ps);
		cfg_free(c);
		buf_free(&y);
		buf_free(&e);
	}
	/* PGPASSWORD */
	setenv("PGPASSWORD", "Env-pw-6", 1);
	check(__LINE__, "host=h", "FATAL: Env-pw-6", 256, "FATAL: ********");
	unsetenv("PGPASSWORD");
	return TEST_SUMMARY("test_source");
}
