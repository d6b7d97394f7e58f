/* test_net.c: the Unix socket module: a listener's mode, the stale-socket rule (a stale socket is
 * replaced, a live one and anything that is not a socket are refused and left as they are) and the
 * errors a client gets, which name the path; TCP: listening, connecting, and the errors, which name
 * the address. */
#include "decoder/base/net.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "test.h"

static char dir[] = "/tmp/cdc-test-net-XXXXXX";
static char path[256];

static void test_listen_and_connect(void)
{
	char err[512] = "", want[512];
	int l = net_unix_listen(path, 0640, 8, err, sizeof(err));
	CHECK(l >= 0);
	struct stat st;
	CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode));
	CHECK_INT(st.st_mode & 07777, 0640);
	int c = net_unix_connect(path, err, sizeof(err));
	CHECK(c >= 0);
	close(c);

	/* A second listener on a live socket is refused; the live one keeps serving. */
	CHECK_INT(net_unix_listen(path, 0600, 8, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: another process is listening on it (is cdc already running?)",
		 path);
	CHECK_STR(err, want);
	c = net_unix_connect_timeout(path, 1000, err, sizeof(err));
	CHECK(c >= 0);
	close(c);
	close(l);

	/* Nobody listens now: the client learns so from errno, the next listener replaces the file. */
	CHECK_INT(net_unix_connect(path, err, sizeof(err)), -1);
	CHECK_INT(errno, ECONNREFUSED);
	snprintf(want, sizeof(want), "%s: %s", path, strerror(ECONNREFUSED));
	CHECK_STR(err, want);
	l = net_unix_listen(path, 0600, 8, err, sizeof(err));
	CHECK(l >= 0);
	CHECK(lstat(path, &st) == 0 && (st.st_mode & 07777) == 0600);
	close(l);
	unlink(path);

	CHECK_INT(net_unix_connect(path, err, sizeof(err)), -1);
	CHECK_INT(errno, ENOENT);
}

/* A file that is not a socket is someone's data: refused with its path, never removed. */
static void test_not_a_socket(void)
{
	char err[512] = "", want[512];
	FILE *f = fopen(path, "w");
	fputs("data\n", f);
	fclose(f);
	CHECK_INT(net_unix_listen(path, 0600, 8, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: exists and is not a socket", path);
	CHECK_STR(err, want);
	struct stat st;
	CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5);
	unlink(path);

	CHECK(mkdir(path, 0700) == 0);
	CHECK_INT(net_unix_listen(path, 0600, 8, err, sizeof(err)), -1);
	CHECK_STR(err, want);
	CHECK(lstat(path, &st) == 0 && S_ISDIR(st.st_mode));
	rmdir(path);
}

static void test_bad_paths(void)
{
	char err[512] = "", want[512], long_path[200];
	memset(long_path, 'x', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	snprintf(want, sizeof(want), "%s: path longer than %zu bytes", long_path,
		 sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	CHECK_INT(net_unix_listen(long_path, 0600, 8, err, sizeof(err)), -1);
	CHECK_STR(err, want);
	CHECK_INT(net_unix_connect(long_path, err, sizeof(err)), -1);
	CHECK_STR(err, want);

	char missing[300];
	snprintf(missing, sizeof(missing), "%s/no/such/dir.sock", dir);
	CHECK_INT(net_unix_listen(missing, 0600, 8, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: %s (does its directory exist and is it writable?)", missing,
		 strerror(ENOENT));
	CHECK_STR(err, want);
}

static void test_tcp(void)
{
	char err[256] = "";
	int l = net_tcp_listen("127.0.0.1", "0", 4, err, sizeof err);
	CHECK(l >= 0);
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	CHECK(getsockname(l, (struct sockaddr *)&sa, &len) == 0);
	char port[8];
	snprintf(port, sizeof port, "%u", (unsigned)ntohs(sa.sin_port));
	int c = net_tcp_connect_timeout("127.0.0.1", port, 1000, err, sizeof err);
	CHECK(c >= 0);
	int a = accept(l, NULL, NULL);
	CHECK(a >= 0 && write(c, "x", 1) == 1);
	char got = 0;
	CHECK(read(a, &got, 1) == 1 && got == 'x');
	close(a);
	close(c);
	/* the same port again: taken */
	CHECK(net_tcp_listen("127.0.0.1", port, 4, err, sizeof err) < 0);
	char want[128];
	snprintf(want, sizeof want, "127.0.0.1:%s: Address already in use", port);
	CHECK_STR(err, want);
	close(l);
	/* nothing listens any more */
	CHECK(net_tcp_connect_timeout("127.0.0.1", port, 1000, err, sizeof err) < 0 && errno == ECONNREFUSED);
	snprintf(want, sizeof want, "127.0.0.1:%s: Connection refused", port);
	CHECK_STR(err, want);
	CHECK(net_tcp_connect_timeout("::1", "notaport", 1000, err, sizeof err) < 0);
	CHECK(strncmp(err, "[::1]:notaport: ", 16) == 0);
}

int main(void)
{
	log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT); /* not the stale socket's info line */
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	test_listen_and_connect();
	test_not_a_socket();
	test_bad_paths();
	test_tcp();
	rmdir(dir);
	return TEST_SUMMARY("test_net");
}
