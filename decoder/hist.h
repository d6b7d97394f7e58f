/* hist.h: a log-linear histogram of durations in microseconds (16 buckets per power of two, so
 * any percentile is within about 6%), for commit-to-delivery latency. Fixed size, no allocation. */
#ifndef CDC_HIST_H
#define CDC_HIST_H

#include <stdint.h>

#define HIST_BUCKETS 640

typedef struct hist {
	uint64_t count, sum, max;
	uint64_t buckets[HIST_BUCKETS];
} hist;

void hist_add(hist *h, uint64_t us);
/* The value at or below which the fraction q (0..1) of samples lie (a bucket's upper bound). */
uint64_t hist_quantile(const hist *h, double q);

#endif
