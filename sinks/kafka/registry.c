/* See registry.h. One libcurl easy handle per request. Registrations are rare (once per table shape and
 * subject, then cached), so nothing is kept between them. Bodies and answers are JSON (json-c). The
 * registry's errors are {"error_code":N,"message":"..."}. */
#include "sinks/kafka/registry.h"

#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/base/util.h"

/* An answer larger than this is not the registry's, and the request fails. */
#define ANSWER_MAX (4 << 20)
#define CONTENT_TYPE "Content-Type: application/vnd.schemaregistry.v1+json"

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void kafka_registry_init(void)
{
	pthread_once(&once, global_init);
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	buf *b = userdata;
	size_t n = size * nmemb;
	if (b->len + n > ANSWER_MAX)
		return 0; /* libcurl fails the transfer */
	buf_append(b, ptr, n);
	return n;
}

/* The URL without what may hold a secret (user:password@), for messages. */
static void safe_url(buf *out, const char *url)
{
	const char *scheme = strstr(url, "://"), *host = scheme ? scheme + 3 : url;
	const char *at = strchr(host, '@'), *slash = strchr(host, '/');
	if (at && (!slash || at < slash)) {
		buf_append(out, url, (size_t)(host - url));
		buf_puts(out, at + 1);
	} else {
		buf_puts(out, url);
	}
}

/* The registry's error message in an answer, or the answer's start. */
static void error_text(buf *out, const buf *answer)
{
	char why[256];
	json_object *o = answer->len ? json_parse(answer->data, answer->len, 8, why, sizeof(why)) : NULL;
	json_object *code, *msg;
	if (o && json_object_object_get_ex(o, "message", &msg)) {
		if (json_object_object_get_ex(o, "error_code", &code))
			buf_printf(out, " (error %d)", json_object_get_int(code));
		buf_printf(out, ": %s", json_object_get_string(msg));
	} else if (answer->len) {
		buf_printf(out, ": %.*s", (int)(answer->len < 200 ? answer->len : 200), answer->data);
	}
	json_object_put(o);
}

/* One request, method to path (already escaped) with body (NULL if none). The answer's JSON goes into *root
 * when it is a 2xx, and the caller json_object_put()s it. */
static kafka_registry_status request(const kafka_registry_conf *conf, const char *method, const char *path,
				     const char *body, json_object **root, char *err, size_t errlen)
{
	kafka_registry_init();
	*root = NULL;
	buf url = {0}, answer = {0}, msg = {0};
	const char *base = conf->url ? conf->url : "";
	size_t blen = strlen(base);
	while (blen && base[blen - 1] == '/')
		blen--;
	buf_append(&url, base, blen);
	buf_puts(&url, path);
	char curl_err[CURL_ERROR_SIZE] = "";
	CURL *h = curl_easy_init();
	struct curl_slist *headers = curl_slist_append(NULL, CONTENT_TYPE);
	headers =
	    curl_slist_append(headers, "Accept: application/vnd.schemaregistry.v1+json, application/json");
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &answer);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)conf->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)conf->timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* on a worker thread, so no SIGALRM for timeouts */
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	if (conf->username) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, conf->username);
		curl_easy_setopt(h, CURLOPT_PASSWORD, conf->password ? conf->password : "");
	}
	if (conf->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, conf->ca_file);
	if (conf->cert_file)
		curl_easy_setopt(h, CURLOPT_SSLCERT, conf->cert_file);
	if (conf->key_file)
		curl_easy_setopt(h, CURLOPT_SSLKEY, conf->key_file);
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	kafka_registry_status out = REGISTRY_OK;
	safe_url(&msg, base);
	buf_printf(&msg, ": %s %s", method, path);
	if (rc != CURLE_OK) {
		buf_printf(&msg, ": %s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
		out = REGISTRY_UNREACHABLE;
	} else if (status < 200 || status > 299) {
		buf_printf(&msg, ": HTTP %ld", status);
		error_text(&msg, &answer);
		out = status == 404   ? REGISTRY_NOT_FOUND
		      : status >= 500 ? REGISTRY_UNREACHABLE
				      : REGISTRY_REFUSED;
	} else {
		char why[256];
		if (!(*root = json_parse(answer.data ? answer.data : "", answer.len, 16, why, sizeof(why)))) {
			buf_printf(&msg, ": the answer is %s", why);
			out = REGISTRY_UNREACHABLE;
		}
	}
	if (out != REGISTRY_OK)
		util_errf(err, errlen, "schema registry %s", msg.data);
	curl_slist_free_all(headers);
	curl_easy_cleanup(h);
	buf_free(&url);
	buf_free(&answer);
	buf_free(&msg);
	return out;
}

/* A path part (a subject) escaped for a URL. */
static void put_escaped(buf *b, const char *part)
{
	for (const unsigned char *p = (const unsigned char *)part; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p))
			buf_putc(b, (char)*p);
		else
			buf_printf(b, "%%%02X", *p);
	}
}

static void path_of(buf *b, const char *before, const char *subject, const char *after)
{
	buf_puts(b, before);
	put_escaped(b, subject);
	buf_puts(b, after);
}

/* {"schema":"<schema as a string>"} */
static void schema_body(buf *b, const char *schema)
{
	buf_puts(b, "{\"schema\":");
	json_string(b, schema, strlen(schema));
	buf_putc(b, '}');
}

/* An integer member of the answer. False (err) without it. */
static bool member_int(json_object *root, const char *name, int64_t *v, char *err, size_t errlen)
{
	json_object *m;
	if (!json_object_object_get_ex(root, name, &m) || !json_object_is_type(m, json_type_int))
		return util_errf(err, errlen, "schema registry: the answer has no %s", name);
	*v = json_object_get_int64(m);
	return true;
}

kafka_registry_status kafka_registry_register(const kafka_registry_conf *conf, const char *subject,
					      const char *schema, uint32_t *id, char *err, size_t errlen)
{
	buf path = {0}, body = {0};
	path_of(&path, "/subjects/", subject, "/versions");
	schema_body(&body, schema);
	json_object *root;
	kafka_registry_status st = request(conf, "POST", path.data, body.data, &root, err, errlen);
	int64_t v;
	if (st == REGISTRY_OK && member_int(root, "id", &v, err, errlen) && v > 0 && v <= UINT32_MAX)
		*id = (uint32_t)v;
	else if (st == REGISTRY_OK)
		st = REGISTRY_UNREACHABLE;
	json_object_put(root);
	buf_free(&path);
	buf_free(&body);
	return st;
}

kafka_registry_status kafka_registry_latest(const kafka_registry_conf *conf, const char *subject,
					    uint32_t *id, int *version, char *err, size_t errlen)
{
	buf path = {0};
	path_of(&path, "/subjects/", subject, "/versions/latest");
	json_object *root;
	kafka_registry_status st = request(conf, "GET", path.data, NULL, &root, err, errlen);
	int64_t i, v;
	if (st == REGISTRY_OK && member_int(root, "id", &i, err, errlen) &&
	    member_int(root, "version", &v, err, errlen)) {
		*id = (uint32_t)i;
		*version = (int)v;
	} else if (st == REGISTRY_OK) {
		st = REGISTRY_UNREACHABLE;
	}
	json_object_put(root);
	buf_free(&path);
	return st;
}

kafka_registry_status kafka_registry_level(const kafka_registry_conf *conf, const char *subject, char *level,
					   size_t levellen, char *err, size_t errlen)
{
	buf path = {0};
	if (subject)
		path_of(&path, "/config/", subject, "?defaultToGlobal=true");
	else
		buf_puts(&path, "/config");
	json_object *root;
	kafka_registry_status st = request(conf, "GET", path.data, NULL, &root, err, errlen);
	json_object *m;
	if (st == REGISTRY_OK && json_object_object_get_ex(root, "compatibilityLevel", &m))
		snprintf(level, levellen, "%s", json_object_get_string(m));
	else if (st == REGISTRY_OK) {
		util_errf(err, errlen, "schema registry: the answer has no compatibilityLevel");
		st = REGISTRY_UNREACHABLE;
	}
	json_object_put(root);
	buf_free(&path);
	return st;
}

kafka_registry_status kafka_registry_set_level(const kafka_registry_conf *conf, const char *subject,
					       const char *level, char *err, size_t errlen)
{
	buf path = {0}, body = {0};
	path_of(&path, "/config/", subject, "");
	buf_puts(&body, "{\"compatibility\":");
	json_str(&body, level);
	buf_putc(&body, '}');
	json_object *root;
	kafka_registry_status st = request(conf, "PUT", path.data, body.data, &root, err, errlen);
	json_object_put(root);
	buf_free(&path);
	buf_free(&body);
	return st;
}

kafka_registry_status kafka_registry_compatible(const kafka_registry_conf *conf, const char *subject,
						const char *schema, bool *compatible, char *why,
						size_t whylen, char *err, size_t errlen)
{
	buf path = {0}, body = {0};
	path_of(&path, "/compatibility/subjects/", subject, "/versions/latest?verbose=true");
	schema_body(&body, schema);
	json_object *root, *m;
	kafka_registry_status st = request(conf, "POST", path.data, body.data, &root, err, errlen);
	*compatible = true;
	if (why && whylen)
		why[0] = '\0';
	if (st == REGISTRY_NOT_FOUND) { /* no version yet, so anything may be the first */
		st = REGISTRY_OK;
	} else if (st == REGISTRY_OK && json_object_object_get_ex(root, "is_compatible", &m)) {
		*compatible = json_object_get_boolean(m);
		if (!*compatible && why && json_object_object_get_ex(root, "messages", &m))
			snprintf(why, whylen, "%s",
				 json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN));
	} else if (st == REGISTRY_OK) {
		util_errf(err, errlen, "schema registry: the answer has no is_compatible");
		st = REGISTRY_UNREACHABLE;
	}
	json_object_put(root);
	buf_free(&path);
	buf_free(&body);
	return st;
}
