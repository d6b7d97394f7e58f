/* The list of sink modules. A new sink is a folder under sinks/ and one line here. */
#include "sinks/modules.h"

#include <string.h>

/* The list. Each name declares NAME_module in sinks/NAME/. */
#define SINK_MODULE_LIST(M) M(socket) M(kafka) M(stdout) M(nats)

#define SINK_MODULE_DECLARE(name) extern const sink_module name##_module;
#define SINK_MODULE_ENTRY(name) &name##_module,
SINK_MODULE_LIST(SINK_MODULE_DECLARE)
const sink_module *const sink_modules[] = {SINK_MODULE_LIST(SINK_MODULE_ENTRY) NULL};

_Static_assert(sizeof sink_modules / sizeof *sink_modules <= SINK_MODULES_MAX + 1, "SINK_MODULES_MAX");

size_t sink_modules_count(void)
{
	return sizeof sink_modules / sizeof *sink_modules - 1;
}

const sink_module *sink_module_find(const char *name)
{
	for (const sink_module *const *m = sink_modules; *m; m++)
		if (strcmp((*m)->name, name) == 0)
			return *m;
	return NULL;
}
