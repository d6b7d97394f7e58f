/* `cdc status` asks the daemon's status socket for GET /status and prints a compact human summary, or
 * the JSON as is (--json). It is a tiny HTTP/1.1 client over AF_UNIX, or over TCP (and TLS) to
 * status.listen with a bearer token. */
#ifndef CDC_STATUS_CMD_H
#define CDC_STATUS_CMD_H

#include <stdbool.h>
#include <stddef.h>

#include "cdc/cli/cli.h"
#include "decoder/base/util.h"

/* cdc status [-c FILE | -s SOCKET] [--json] [--help]. argv[0] is "status". Returns the exit code. */
int cli_status_main(int argc, char **argv);

/* Sends "GET path" to the endpoint and reads the whole answer, with a timeout. The endpoint's token,
 * if any, goes as a bearer token. An https endpoint's certificate is checked against its CAs and its
 * host name. False with err set if the daemon cannot be reached or the answer is not HTTP. */
bool cli_status_http_get(const cli_endpoint *ep, const char *path, unsigned *http_status, buf *body,
			 char *err, size_t errlen) CDC_MUST_CHECK;
/* The same for any method, with a JSON request body (NULL if none). */
bool cli_status_http_request(const cli_endpoint *ep, const char *method, const char *path,
			     const char *req_body, unsigned *http_status, buf *body, char *err,
			     size_t errlen) CDC_MUST_CHECK;
/* Splits a complete HTTP/1.x response (read to EOF) into status code and body, de-chunked if needed. */
bool cli_status_http_parse(const char *resp, size_t len, unsigned *http_status, buf *body, char *err,
			   size_t errlen) CDC_MUST_CHECK;
/* The human summary of a GET /status body. Missing fields print as "-". */
bool cli_status_summary(const char *json, size_t len, buf *out, char *err, size_t errlen) CDC_MUST_CHECK;

#endif
