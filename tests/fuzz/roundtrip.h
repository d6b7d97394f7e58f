/* roundtrip.h: the fuzz harnesses' check that an accepted configuration prints as YAML that parses
 * again and prints the same (shared by fuzz_config.c and fuzz_put.c). */
#ifndef CDC_FUZZ_ROUNDTRIP_H
#define CDC_FUZZ_ROUNDTRIP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/config/config.h"

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

/* Aborts, saying how, unless c prints, parses and prints the same again. */
static void check_roundtrip(const cfg *c)
{
	char *text = print(c);
	buf errors = {0};
	cfg *again = cfg_parse("printed.yaml", text, strlen(text), &errors);
	if (!again) {
		fprintf(stderr, "printed config rejected:\n%s---\n%s", text, errors.data);
		abort();
	}
	char *text2 = print(again);
	if (strcmp(text, text2) != 0) {
		fprintf(stderr, "print, parse, print differs:\n%s---\n%s", text, text2);
		abort();
	}
	free(text2);
	free(text);
	cfg_free(again);
	buf_free(&errors);
}

#endif
