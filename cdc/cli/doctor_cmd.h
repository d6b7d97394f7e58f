/* doctor_cmd.h: `cdc doctor -c FILE [--json]`: checks the database, Kafka and the local setup against
 * FILE (cdc/doctor/), changing nothing, and prints the checklist. */
#ifndef CDC_CLI_DOCTOR_H
#define CDC_CLI_DOCTOR_H

/* argv[0] is "doctor". Returns the exit code: 0 all passed, 1 warnings, 2 failures (or a usage or
 * configuration error). */
int doctor_main(int argc, char **argv);

#endif
