/* See prom.h. */
#include "decoder/base/prom.h"

#include <inttypes.h>
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
