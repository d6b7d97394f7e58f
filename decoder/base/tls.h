/* A TLS client on a connected socket (OpenSSL, as libpq uses). It serves what cdc checks itself, and
 * cdc's clients of status.listen over HTTPS. A check says why a server's certificate does not pass,
 * in OpenSSL's words, with its names and dates. */
#ifndef CDC_TLS_H
#define CDC_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "decoder/base/util.h"

typedef struct tls_conn tls_conn;

/* A TLS session on fd. The caller closes fd after tls_close. cafile holds the CAs to trust (NULL for
 * the system's). host is the server's name, sent as SNI when it is a name. The handshake completes
 * whatever the certificate, and tls_verdict says what a check finds. NULL with err. */
tls_conn *tls_open(int fd, const char *host, const char *cafile, char *err, size_t errlen);
/* Checks the server's certificate against cafile, and its names against host when check_host. False
 * when it passes. Else true, with why in out, as in "certificate has expired: the certificate CN=db,
 * issued by CN=ca, valid from ... to ...". */
bool tls_verdict(tls_conn *conn, bool check_host, char *out, size_t outlen);
/* Writes all count bytes of data. False on an error. */
bool tls_write_all(tls_conn *conn, const void *data, size_t count) CDC_MUST_CHECK;
/* Reads up to count bytes into data. Returns how many, 0 once the peer closed, or -1 on an error. The
 * close may be clean or not, so an answer's length tells whether it is whole. */
long tls_read(tls_conn *conn, void *data, size_t count);
void tls_close(tls_conn *conn);

#endif
