/* See prom.h. */
#include "decoder/base/prom.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void prom_family(buf *out, const char *name, const char *type, const char *help)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_label_value(buf *out, const char *v)
{
	const unsigned char *p = (const unsigned char *)(v ? v : ""), *end = p + strlen((const char *)p);
	buf_putc(out, '"');
	while (p < end) {
		size_t n, skip;
		if (*p == '\\' || *p == '"') {
			buf_putc(out, '\\');
			buf_putc(out, (char)*p++);
		} else if (*p == '\n') {
			buf_puts(out, "\\n");
			p++;
		} else if (*p < 0x80) {
			buf_putc(out, (char)*p++);
		} else if ((n = util_utf8_seq(p, (size_t)(end - p), &skip))) {
			buf_append(out, p, n);
			p += n;
		} else {
			buf_puts(out, "\xEF\xBF\xBD");
			p += skip;
		}
	}
	buf_putc(out, '"');
}

void prom_sample(buf *out, const char *name, const char *label1, const char *value1, const char *label2,
		 const char *value2)
{
	buf_puts(out, name);
	if (!label1)
		return;
	buf_printf(out, "{%s=", label1);
	prom_label_value(out, value1);
	if (label2) {
		buf_printf(out, ",%s=", label2);
		prom_label_value(out, value2);
	}
	buf_putc(out, '}');
}

void prom_u64(buf *out, const char *name, const char *type, const char *help, uint64_t value)
{
	prom_family(out, name, type, help);
	buf_printf(out, "%s %" PRIu64 "\n", name, value);
}

const char *prom_seconds(uint64_t us, char out[32])
{
	int n = snprintf(out, 32, "%" PRIu64 ".%06" PRIu64, us / 1000000, us % 1000000);
	while (n > 0 && out[n - 1] == '0')
		out[--n] = '\0';
	if (n > 0 && out[n - 1] == '.')
		out[--n] = '\0';
	return out;
}

void prom_histogram(buf *out, const char *name, const char *label, const char *value, const hist *h)
{
	char metric[128], le[32];
	snprintf(metric, sizeof(metric), "%s_bucket", name);
	for (unsigned i = 0; i <= HIST_LE_N; i++) {
		const char *bound = i < HIST_LE_N ? prom_seconds(hist_le_us[i], le) : "+Inf";
		if (label)
			prom_sample(out, metric, label, value, "le", bound);
		else
			prom_sample(out, metric, "le", bound, NULL, NULL);
		buf_printf(out, " %" PRIu64 "\n", i < HIST_LE_N ? hist_count_le(h, i) : h->count);
	}
	snprintf(metric, sizeof(metric), "%s_sum", name);
	prom_sample(out, metric, label, value, NULL, NULL);
	buf_printf(out, " %s\n", prom_seconds(h->sum, le));
	snprintf(metric, sizeof(metric), "%s_count", name);
	prom_sample(out, metric, label, value, NULL, NULL);
	buf_printf(out, " %" PRIu64 "\n", h->count);
}
