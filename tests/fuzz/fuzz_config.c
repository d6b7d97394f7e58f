/* fuzz_config.c: libFuzzer harness for the configuration loader: arbitrary bytes through cfg_parse;
 * whatever is accepted is printed, and the printed form must parse again and print the same. The
 * bytes also go through cfg_mask_dsn, which must be idempotent. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *print(const cfg *c)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		abort();
	cfg_print(c, f);
	fclose(f);
	return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	buf errors = {0};

	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	/* The bytes as a DSN: masking is idempotent, or cfg_print's output would not print the same. */
	char *dsn = xmalloc(size + 1);
	memcpy(dsn, data, size);
	dsn[size] = '\0';
	char *m1 = cfg_mask_dsn(dsn), *m2 = cfg_mask_dsn(m1);
	if (strcmp(m1, m2) != 0) {
		fprintf(stderr, "masking is not idempotent:\n%s\n%s\n", m1, m2);
		abort();
	}
	free(dsn);
	free(m1);
	free(m2);

	cfg *c = cfg_parse("fuzz.yaml", (const char *)data, size, &errors);
	if (!c && !errors.len)
		abort(); /* a rejection always says why */
	/* The validator and cfg_table_match disagree on a pattern. (User text in messages is quoted, so it
	 * cannot end a line with this.) */
	if (errors.len && strstr(errors.data, ": not of the form schema.table\n"))
		abort();
	if (c) {
		cfg_print(c, devnull);
		/* Accepted patterns go to the matcher; it must cope with whatever the validator lets by. */
		for (size_t i = 0; i < c->nsubs; i++)
			for (size_t j = 0; j < c->subs[i].tables.n; j++)
				(void)cfg_table_match(c->subs[i].tables.v[j], "public", "t");
		char *text = print(c);
		buf e2 = {0};
		cfg *again = cfg_parse("printed.yaml", text, strlen(text), &e2);
		if (!again) {
			fprintf(stderr, "printed config rejected:\n%s---\n%s", text, e2.data);
			abort();
		}
		char *text2 = print(again);
		if (strcmp(text, text2) != 0) {
			fprintf(stderr, "print, parse, print differs:\n%s---\n%s", text, text2);
			abort();
		}
		free(text2);
		cfg_free(again);
		buf_free(&e2);
		free(text);
	}
	cfg_free(c);
	buf_free(&errors);
	return 0;
}
