/* A log-linear histogram of durations in microseconds, for commit-to-delivery latency. It has 16
 * buckets per power of two, so any percentile is within about 6%. Fixed size, no allocation. */
#ifndef CDC_HIST_H
#define CDC_HIST_H

#include <stdint.h>

#define HIST_BUCKETS 640

/* Fixed decimal bounds (µs) at which samples are also counted exactly, for Prometheus histograms.
 * The log-linear buckets' edges never fall on 1 ms or 1 s. So deriving `le` counts from them would
 * misplace samples near a bound. */
#define HIST_LE_N 16
extern const uint64_t hist_le_us[HIST_LE_N];

typedef struct hist {
	uint64_t count, sum, max;
	uint64_t buckets[HIST_BUCKETS];
	uint64_t le[HIST_LE_N]; /* le[i] counts samples in (hist_le_us[i-1], hist_le_us[i]], not cumulative */
} hist;

void hist_add(hist *histogram, uint64_t us);
/* Adds count samples of the same duration. */
void hist_add_n(hist *histogram, uint64_t us, uint64_t count);
/* The value at or below which the fraction quantile (0..1) of samples lie (a bucket's upper bound). */
uint64_t hist_quantile(const hist *histogram, double quantile);
/* Samples at or below hist_le_us[i]. */
uint64_t hist_count_le(const hist *histogram, unsigned value);

#endif
