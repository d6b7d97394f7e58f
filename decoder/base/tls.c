/* See tls.h. The handshake trusts cafile as libpq does (SSL_CTX_load_verify_locations). It accepts any
 * certificate (SSL_VERIFY_NONE), so that the certificate can be looked at afterwards. */
#include "decoder/base/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tls_conn {
	SSL_CTX *ctx;
	SSL *ssl;
	const char *host;
};

/* OpenSSL's first queued error, else what. */
static void ssl_err(const char *what, char *err, size_t errlen)
{
	unsigned long e = ERR_get_error();
	char text[256];
	if (e)
		ERR_error_string_n(e, text, sizeof text);
	util_errf(err, errlen, "%s%s%s", what, e ? ": " : "", e ? text : "");
	ERR_clear_error();
}

static bool is_address(const char *host)
{
	unsigned char a[16];
	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

tls_conn *tls_open(int fd, const char *host, const char *cafile, char *err, size_t errlen)
{
	tls_conn *t = util_xcalloc(1, sizeof *t);
	t->host = host;
	if (!(t->ctx = SSL_CTX_new(TLS_client_method()))) {
		ssl_err("cannot start TLS", err, errlen);
		goto fail;
	}
	if (cafile ? SSL_CTX_load_verify_locations(t->ctx, cafile, NULL) != 1
		   : SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		char what[4200];
		snprintf(what, sizeof what, "cannot read the CA certificates %s",
			 cafile ? cafile : "of the system");
		ssl_err(what, err, errlen);
		goto fail;
	}
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
	SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	if (!(t->ssl = SSL_new(t->ctx)) || SSL_set_fd(t->ssl, fd) != 1) {
		ssl_err("cannot start TLS", err, errlen);
		goto fail;
	}
	if (host && *host && !is_address(host))
		SSL_set_tlsext_host_name(t->ssl, host);
	if (SSL_connect(t->ssl) != 1) {
		ssl_err("TLS handshake failed", err, errlen);
		goto fail;
	}
	return t;
fail:
	tls_close(t);
	return NULL;
}

/* An ASN1 time as "2026-11-27 05:40:46 UTC". */
static void time_text(const ASN1_TIME *at, char *out, size_t outlen)
{
	struct tm tm;
	if (!at || ASN1_TIME_to_tm(at, &tm) != 1) {
		snprintf(out, outlen, "?");
		return;
	}
	strftime(out, outlen, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

bool tls_verdict(tls_conn *t, bool check_host, char *out, size_t outlen)
{
	X509 *peer = SSL_get1_peer_certificate(t->ssl);
	if (!peer)
		return util_errf(out, outlen, "the server sent no certificate"), true;
	long v = SSL_get_verify_result(t->ssl);
	bool host_ok = !check_host || !t->host || !*t->host ||
		       (is_address(t->host) ? X509_check_ip_asc(peer, t->host, 0) == 1
					    : X509_check_host(peer, t->host, 0, 0, NULL) == 1);
	if (v == X509_V_OK && host_ok) {
		X509_free(peer);
		return false;
	}
	char subject[256], issuer[256], from[32], to[32];
	X509_NAME_oneline(X509_get_subject_name(peer), subject, sizeof subject);
	X509_NAME_oneline(X509_get_issuer_name(peer), issuer, sizeof issuer);
	time_text(X509_get0_notBefore(peer), from, sizeof from);
	time_text(X509_get0_notAfter(peer), to, sizeof to);
	char why[512];
	if (v != X509_V_OK)
		snprintf(why, sizeof why, "%s%s", X509_verify_cert_error_string(v),
			 v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
				 v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
				 v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
			     ? " (the CA certificates trusted do not include the one that signed it)"
			     : "");
	else
		snprintf(why, sizeof why, "it does not name %s", t->host);
	util_errf(out, outlen, "%s: the certificate %s, issued by %s, valid from %s to %s", why, subject,
		  issuer, from, to);
	X509_free(peer);
	return true;
}

bool tls_write_all(tls_conn *t, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		int w = SSL_write(t->ssl, c, n > INT32_MAX ? INT32_MAX : (int)n);
		if (w <= 0)
			return false;
		c += w;
		n -= (size_t)w;
	}
	return true;
}

long tls_read(tls_conn *t, void *p, size_t n)
{
	int r = SSL_read(t->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
	if (r > 0)
		return r;
	int e = SSL_get_error(t->ssl, r);
	return e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ? 0 : -1;
}

void tls_close(tls_conn *t)
{
	if (!t)
		return;
	if (t->ssl) {
		SSL_shutdown(t->ssl);
		SSL_free(t->ssl);
	}
	SSL_CTX_free(t->ctx);
	ERR_clear_error();
	free(t);
}
