/* fuzz_put.c: libFuzzer harness for the body of PUT /subscriptions/NAME (cfg_parse_subscription):
 * arbitrary bytes as the body. A refusal always says why; an accepted subscription carries the
 * path's name, is laid over a running configuration as the daemon does (cfg_overlay_put, then
 * cfg_overlay_apply), and that configuration prints as YAML that parses again and prints the same. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/config/config.h"
#include "roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char base[] = "source: {dsn: \"host=h\"}\n"
			   "kafka: {brokers: \"k:9092\"}\n"
			   "subscriptions:\n"
			   "  - {name: a, tables: [public.a], sink: stdout}\n"
			   "  - {name: b, tables: [\"public.*\"], sink: socket}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	buf errors = {0};
	cfg *c = cfg_parse("base.yaml", base, strlen(base), &errors);
	if (!c)
		abort();
	cfg_subscription *s = cfg_parse_subscription(c, "a", (const char *)data, size, &errors);
	if (!s && !errors.len)
		abort(); /* a refusal always says why */
	if (s) {
		if (strcmp(s->name, "a") != 0)
			abort();
		cfg_overlay *o = util_xcalloc(1, sizeof *o);
		cfg_overlay_put(o, s); /* takes s */
		if (!cfg_overlay_apply(o, c, NULL, &errors))
			abort(); /* the base has a kafka section: nothing to refuse */
		check_roundtrip(c);
		cfg_overlay_free(o);
	}
	cfg_free(c);
	buf_free(&errors);
	return 0;
}
