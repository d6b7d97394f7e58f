/* test.h: a minimal harness for table-driven C unit tests. Each test binary ends with
 * TEST_SUMMARY(), which prints "N passed, N failed" and returns the exit status. */
#ifndef CDC_TEST_H
#define CDC_TEST_H

#include <stdio.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                                                          \
	do {                                                                                                 \
		if (cond) {                                                                                  \
			test_passed++;                                                                       \
		} else {                                                                                     \
			test_failed++;                                                                       \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
		}                                                                                            \
	} while (0)

#define CHECK_STR(got, want)                                                                                 \
	do {                                                                                                 \
		const char *g_ = (got), *w_ = (want);                                                        \
		if (g_ && w_ && strcmp(g_, w_) == 0) {                                                       \
			test_passed++;                                                                       \
		} else {                                                                                     \
			test_failed++;                                                                       \
			fprintf(stderr, "%s:%d: %s\n  got:  %s\n  want: %s\n", __FILE__, __LINE__, #got,     \
				g_ ? g_ : "(null)", w_ ? w_ : "(null)");                                     \
		}                                                                                            \
	} while (0)

#define CHECK_INT(got, want)                                                                                 \
	do {                                                                                                 \
		long long g_ = (long long)(got), w_ = (long long)(want);                                     \
		if (g_ == w_) {                                                                              \
			test_passed++;                                                                       \
		} else {                                                                                     \
			test_failed++;                                                                       \
			fprintf(stderr, "%s:%d: %s: got %lld, want %lld\n", __FILE__, __LINE__, #got, g_,    \
				w_);                                                                         \
		}                                                                                            \
	} while (0)

#define TEST_SUMMARY(name)                                                                                   \
	(printf("%s: %d passed, %d failed\n", (name), test_passed, test_failed), test_failed ? 1 : 0)

#endif
