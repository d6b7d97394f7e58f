/* See hist.h. Values below 16 have a bucket each. Above, there are 16 buckets per power of two. */
#include "decoder/base/hist.h"

const uint64_t hist_le_us[HIST_LE_N] = {
    500,    1000,   2500,    5000,    10000,   25000,	 50000,	   100000,
    250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};

static unsigned bucket(uint64_t v)
{
	if (v < 16)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* 4.. */
	unsigned i = 16 + (e - 4) * 16 + (unsigned)((v >> (e - 4)) & 15);
	return i < HIST_BUCKETS ? i : HIST_BUCKETS - 1;
}

static uint64_t upper_bound(unsigned i)
{
	if (i < 16)
		return i;
	unsigned e = (i - 16) / 16 + 4, m = (i - 16) % 16;
	return ((16ull + m + 1) << (e - 4)) - 1;
}

void hist_add(hist *h, uint64_t us)
{
	hist_add_n(h, us, 1);
}

void hist_add_n(hist *h, uint64_t us, uint64_t n)
{
	if (!n)
		return;
	h->buckets[bucket(us)] += n;
	unsigned i = 0;
	while (i < HIST_LE_N && us > hist_le_us[i])
		i++;
	if (i < HIST_LE_N)
		h->le[i] += n;
	h->count += n;
	h->sum += us * n;
	if (us > h->max)
		h->max = us;
}

uint64_t hist_quantile(const hist *h, double q)
{
	if (!h->count)
		return 0;
	uint64_t want = (uint64_t)(q * (double)h->count + 0.5), seen = 0;
	if (want < 1)
		want = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= want) {
			/* The last bucket is open-ended. Its samples are bounded by the maximum only. */
			uint64_t ub = i == HIST_BUCKETS - 1 ? h->max : upper_bound(i);
			return ub < h->max ? ub : h->max;
		}
	}
	return h->max;
}

uint64_t hist_count_le(const hist *h, unsigned i)
{
	uint64_t n = 0;
	for (unsigned k = 0; k <= i && k < HIST_LE_N; k++)
		n += h->le[k];
	return n;
}
