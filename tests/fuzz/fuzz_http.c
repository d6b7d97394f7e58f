/* fuzz_http.c: libFuzzer harness for what the status socket decides from a request's bytes:
 * "METHOD\nPATH\nBODY" through status_route_request and (for PUT) status_check_body, which must
 * agree with each other and never echo the request; the same bytes also go through `cdc status`'s
 * HTTP answer parser and summary, which read what a socket peer sends, and, as an Authorization
 * header, through status_bearer_ok, which accepts exactly "Bearer" (any case), blanks, the token. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cdc/cli/status_cmd.h"
#include "cdc/status/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ASSERT(c) ((c) ? (void)0 : abort())

/* The next '\n'-terminated field of [*p, end) as a NUL-terminated copy. */
static char *field(const char **p, const char *end)
{
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	size_t n = (size_t)((nl ? nl : end) - *p);
	char *s = malloc(n + 1);
	memcpy(s, *p, n);
	s[n] = '\0';
	*p = nl ? nl + 1 : end;
	return s;
}

static void check_route(const char *method, const char *path, const char *body, size_t body_len)
{
	status_match m;
	bool ok = status_route_request(method, path, &m);
	ASSERT(ok == (m.http_status == 0));
	ASSERT(ok == (m.route != STATUS_ROUTE_ERROR));
	ASSERT(ok || m.http_status == 400 || m.http_status == 404 || m.http_status == 405);
	ASSERT(ok || m.message[0]);
	ASSERT((m.http_status == 405) == (m.allow != NULL));
	if (m.route == STATUS_ROUTE_PUT || m.route == STATUS_ROUTE_DELETE) {
		ASSERT(status_name_valid(m.name, strlen(m.name)));
		ASSERT(strcmp(path + strlen("/subscriptions/"), m.name) == 0);
	} else {
		ASSERT(m.name[0] == '\0');
	}
	if (m.route != STATUS_ROUTE_PUT)
		return;
	bool body_ok = status_check_body(body, body_len, &m);
	ASSERT(body_ok == (m.http_status == 0));
	ASSERT(body_ok || m.http_status == 400 || m.http_status == 413);
	ASSERT(body_ok || m.message[0]);
	ASSERT(!body_ok || (body_len >= 2 && !memchr(body, '\0', body_len)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	char *method = field(&p, end), *path = field(&p, end);
	check_route(method, path, p, (size_t)(end - p));
	free(method);
	free(path);

	/* The answer parser reads a NUL-terminated buffer (as it builds it), so copy the bytes. */
	char *resp = malloc(size + 1);
	memcpy(resp, data, size);
	resp[size] = '\0';
	unsigned code = 0;
	buf body = {0}, out = {0};
	char err[256];
	if (cli_status_http_parse(resp, size, &code, &body, err, sizeof(err))) {
		ASSERT(code >= 100 && code <= 599);
		ASSERT(body.len <= size);
		if (cli_status_summary(body.data ? body.data : "", body.len, &out, err, sizeof(err)))
			ASSERT(out.len > 0);
	}
	buf_free(&body);
	buf_free(&out);

	/* An Authorization header (up to the first NUL) against a fixed token. */
	static const char token[] = "fuzz-token-0123456789";
	bool ok = status_bearer_ok(resp, token);
	size_t n = strlen(resp), sp = 6;
	while (sp < n && (resp[sp] == ' ' || resp[sp] == '\t'))
		sp++;
	bool want = n <= STATUS_AUTH_MAX && n > 6 && strncasecmp(resp, "Bearer", 6) == 0 && sp > 6 &&
		    strcmp(resp + sp, token) == 0;
	ASSERT(ok == want);
	free(resp);
	return 0;
}
