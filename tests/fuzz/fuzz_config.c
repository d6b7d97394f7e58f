/* fuzz_config.c: libFuzzer harness for the configuration loader: arbitrary bytes through cfg_parse,
 * then cfg_print of whatever was accepted, which must parse again, and cfg_free. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	buf errors = {0};

	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	cfg *c = cfg_parse("fuzz.yaml", (const char *)data, size, &errors);
	if (!c && !errors.len)
		abort(); /* a rejection always says why */
	if (c) {
		cfg_print(c, devnull);
		/* The printed form of an accepted config is itself accepted. */
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);
		cfg_print(c, f);
		fclose(f);
		buf e2 = {0};
		cfg *again = cfg_parse("printed.yaml", text, len, &e2);
		if (!again) {
			fprintf(stderr, "printed config rejected:\n%s---\n%s", text, e2.data);
			abort();
		}
		cfg_free(again);
		buf_free(&e2);
		free(text);
	}
	cfg_free(c);
	buf_free(&errors);
	return 0;
}
