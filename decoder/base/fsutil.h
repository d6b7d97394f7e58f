/* Files written so that a crash leaves either the old or the new content, never a mix. The position
 * file and the overlay of live subscriptions are written so. */
#ifndef CDC_FSUTIL_H
#define CDC_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "decoder/base/util.h"

/* Writes all len bytes of data to fd, through short writes and signals. False with errno set. */
bool fsutil_write_all(int fd, const void *data, size_t len) CDC_MUST_CHECK;
/* Appends the whole file at path to out, at most max bytes. False with a message naming the file in
 * err and errno set. errno is ENOENT when there is none, EFBIG when it is larger than max. */
bool fsutil_read(const char *path, size_t max, buf *out, char *err, size_t errlen) CDC_MUST_CHECK;
/* Replaces path with len bytes of data, atomically and durably. It writes path.tmp in the same
 * directory (mode), fsyncs it, renames it over path and fsyncs the directory. False with a message
 * naming the file in err. The temporary file does not stay behind. */
bool fsutil_replace(const char *path, const void *data, size_t len, mode_t mode, char *err,
		    size_t errlen) CDC_MUST_CHECK;

#endif
