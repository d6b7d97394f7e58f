/* `cdc tail`, a subscriber socket client that prints one JSON event per line and acks each
 * event once it is written (see CONTRACT "Commands" and proto/cdc/v1/subscriber.proto). */
#ifndef CDC_TAIL_H
#define CDC_TAIL_H

/* argv[0] is "tail". Returns the exit status, 0 for ok, 1 for a runtime failure, 2 for a usage error. */
int cli_tail_main(int argc, char **argv);

#endif
