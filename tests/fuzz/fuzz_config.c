/* fuzz_config.c: libFuzzer harness for the configuration loader: arbitrary bytes through cfg_parse;
 * whatever is accepted is printed, and the printed form must parse again and print the same. The
 * bytes also go through cfg_mask_dsn, which must be idempotent. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/config/config.h"
#include "roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	buf errors = {0};

	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	/* The bytes as a DSN: masking is idempotent, or cfg_print's output would not print the same. */
	char *dsn = util_xmalloc(size + 1);
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
	/* The validator and match_table disagree on a pattern. (User text in messages is quoted, so it
	 * cannot end a line with this.) */
	if (errors.len && strstr(errors.data, ": not of the form schema.table\n"))
		abort();
	if (c) {
		cfg_print(c, devnull);
		/* Accepted patterns go to the matcher; it must cope with whatever the validator lets by. */
		for (size_t i = 0; i < c->nsubs; i++)
			for (size_t j = 0; j < c->subs[i].tables.n; j++)
				(void)match_table(c->subs[i].tables.v[j], "public", "t");
		check_roundtrip(c);
	}
	cfg_free(c);
	buf_free(&errors);
	return 0;
}
