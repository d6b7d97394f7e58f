/* fuzz_redact.c: libFuzzer harness for source_redact: "DSN\nMESSAGE" as bytes. Whatever the DSN
 * (key=value or URI, quoted or not, parsable or not) and the message, no password that libpq reads
 * from the DSN (4 bytes or longer) may remain in the redacted message, which stays within its
 * buffer. */
#include <libpq-fe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/source/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl || memchr(data, '\0', size))
		return 0;
	char *dsn = strndup((const char *)data, (size_t)(nl - data));
	source *s = source_new(&(source_settings){.dsn = dsn, .slot = "s", .publication = "p"});

	/* The message in a buffer of a size taken from the input, so that full buffers come up. */
	size_t msglen = size - (size_t)(nl + 1 - data);
	size_t errlen = msglen + 1 + (msglen ? data[size - 1] % 16 : 0);
	char *err = malloc(errlen);
	memcpy(err, nl + 1, msglen);
	err[msglen] = '\0';
	source_redact(s, err, errlen);
	if (strlen(err) >= errlen)
		abort();

	PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (o->val && strlen(o->val) >= 4 && strstr(err, o->val) &&
		    (strcmp(o->keyword, "password") == 0 || strcmp(o->keyword, "sslpassword") == 0) &&
		    !strchr(o->val, '*'))
			abort(); /* a password survived (one with the mask's '*' can seem to, next to a mask)
				  */
	PQconninfoFree(opts);
	free(err);
	source_free(s);
	free(dsn);
	return 0;
}
