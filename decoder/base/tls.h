/* tls.h: a TLS client on a connected socket (OpenSSL, as libpq uses), for what cdc checks itself
 * (why a server's certificate does not pass, in OpenSSL's words, with its names and dates) and for
 * cdc's clients of status.listen over HTTPS. */
#ifndef CDC_TLS_H
#define CDC_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "decoder/base/util.h"

typedef struct tls_conn tls_conn;

/* A TLS session on fd (the caller closes fd after tls_close). cafile: the CAs to trust (NULL: the
 * system's); host: the server's name, sent as SNI when it is a name. The handshake completes
 * whatever the certificate: tls_verdict says what a check finds. NULL with err. */
tls_conn *tls_open(int fd, const char *host, const char *cafile, char *err, size_t errlen);
/* The check of the server's certificate against cafile, and of its names against host when
 * check_host: false when it passes; else true with why in out ("certificate has expired: the
 * certificate CN=db, issued by CN=ca, valid from ... to ..."). */
bool tls_verdict(tls_conn *conn, bool check_host, char *out, size_t outlen);
/* Writes all count bytes of data: false on an error. */
bool tls_write_all(tls_conn *conn, const void *data, size_t count) CDC_MUST_CHECK;
/* Reads up to count bytes into data: how many, 0 once the peer closed (cleanly or not: an answer's
 * length tells whether it is whole), -1 on an error. */
long tls_read(tls_conn *conn, void *data, size_t count);
void tls_close(tls_conn *conn);

#endif
