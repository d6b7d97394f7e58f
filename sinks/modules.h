/* The list of sink modules, in the order the configuration documents them. The first is the sink a
 * subscription gets when it names none. */
#ifndef CDC_SINK_MODULES_H
#define CDC_SINK_MODULES_H

#include "sinks/module.h"

/* The most modules the list may hold (the configuration keeps a slot for each). */
#define SINK_MODULES_MAX 8

/* NULL-terminated. */
extern const sink_module *const sink_modules[];
/* How many modules the list holds. */
size_t sink_modules_count(void);
/* The module named name, or NULL. */
const sink_module *sink_module_find(const char *name);

#endif
