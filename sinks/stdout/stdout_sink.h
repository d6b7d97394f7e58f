/* `sink: stdout` writes the contract's event JSON to a file descriptor, one line per event. An event counts
 * as delivered once its line has been written out with write(2). */
#ifndef CDC_STDOUT_SINK_H
#define CDC_STDOUT_SINK_H

#include "sinks/sink.h"

sink *stdout_sink_new(int fd);

#endif
