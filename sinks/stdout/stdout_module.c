/* `sink: stdout` declared once. It has no keys of its own and no figures beyond what every subscription
 * shows. */
#include <unistd.h>

#include "sinks/module.h"
#include "sinks/stdout/stdout_sink.h"

static sink *create_sink(const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
			 char *err, size_t errlen)
{
	(void)env, (void)section, (void)subs, (void)nsubs, (void)err, (void)errlen;
	return stdout_sink_new(STDOUT_FILENO);
}

const sink_module stdout_module = {
    .name = "stdout",
    .doc = "`stdout` (JSON lines on cdc's standard output, [events.md](events.md))",
    .create = create_sink,
};
