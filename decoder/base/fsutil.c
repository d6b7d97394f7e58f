/* See fsutil.h. The directory is synced too, since a rename is durable only once the directory entry is. */
#include "decoder/base/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool fsutil_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

bool fsutil_read(const char *path, size_t max, buf *out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		util_errf(err, errlen, "cannot read %s: %s", path, strerror(e));
		errno = e;
		return false;
	}
	char chunk[8192];
	size_t total = 0;
	ssize_t n;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || total + (size_t)n > max) {
			int e = n < 0 ? errno : EFBIG;
			close(fd);
			util_errf(err, errlen, "cannot read %s: %s", path,
				  n < 0 ? strerror(e) : "larger than expected");
			errno = e;
			return false;
		}
		buf_append(out, chunk, (size_t)n);
		total += (size_t)n;
	}
	close(fd);
	return true;
}

bool fsutil_replace(const char *path, const void *data, size_t len, mode_t mode, char *err, size_t errlen)
{
	size_t plen = strlen(path);
	char *tmp = util_xmalloc(plen + sizeof ".tmp");
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".tmp", sizeof ".tmp");
	/* The directory is what comes before the last '/', "." without one, and "/" for a file in /. */
	const char *slash = strrchr(path, '/');
	char *dir = slash ? util_xmalloc((size_t)(slash - path) + 2) : util_xstrdup(".");
	if (slash) {
		size_t dlen = slash == path ? 1 : (size_t)(slash - path);
		memcpy(dir, path, dlen);
		dir[dlen] = '\0';
	}
	bool ok = false;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0) {
		util_errf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	bool written = fsutil_write_all(fd, data, len) && fsync(fd) == 0;
	int saved = errno;
	if (close(fd) != 0 && written)
		written = false, saved = errno;
	if (!written || rename(tmp, path) != 0) {
		util_errf(err, errlen, "cannot write %s: %s", written ? path : tmp,
			  strerror(written ? errno : saved));
		unlink(tmp);
		goto out;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok = dfd >= 0 && fsync(dfd) == 0;
	if (!ok)
		util_errf(err, errlen, "cannot fsync %s: %s", dir, strerror(errno));
	if (dfd >= 0)
		close(dfd);
out:
	free(tmp);
	free(dir);
	return ok;
}
