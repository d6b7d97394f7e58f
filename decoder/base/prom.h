/* The Prometheus text format 0.0.4, as /metrics writes it, with "# HELP" and "# TYPE" before every
 * family. Label values are escaped and always valid UTF-8. cdc/status and the sinks' figures write
 * their families with it. */
#ifndef CDC_PROM_H
#define CDC_PROM_H

#include <stdint.h>

#include "decoder/base/hist.h"
#include "decoder/base/util.h"

/* "# HELP name help" and "# TYPE name type". */
void prom_family(buf *out, const char *name, const char *type, const char *help);
/* name{k1="v1",k2="v2"}, with one label when label2 is NULL and none when label1 is NULL. The caller
 * appends " value\n". */
void prom_sample(buf *out, const char *name, const char *label1, const char *value1, const char *label2,
		 const char *value2);
/* A label value in quotes, with backslash, quote and newline escaped. Bytes that are not UTF-8 are
 * replaced with U+FFFD, as the format requires UTF-8. */
void prom_label_value(buf *out, const char *value);
/* A family of one sample without labels. */
void prom_u64(buf *out, const char *name, const char *type, const char *help, uint64_t value);
/* µs as seconds, exactly, as in 2500 -> "0.0025" and 1000000 -> "1". */
const char *prom_seconds(uint64_t us, char out[32]);
/* The samples of histogram family name (its _bucket at hist_le_us in seconds, _sum and _count), with
 * the label label=value, or none when label is NULL. */
void prom_histogram(buf *out, const char *name, const char *label, const char *value, const hist *histogram);

#endif
