/* `cdc doctor -c FILE [--json]` checks the database, Kafka and the local setup against FILE
 * (cdc/doctor/). It changes nothing, and prints the checklist. */
#ifndef CDC_CLI_DOCTOR_H
#define CDC_CLI_DOCTOR_H

/* argv[0] is "doctor". Returns the exit code, 0 if all passed, 1 for warnings, 2 for failures (or a
 * usage or configuration error). */
int cli_doctor_main(int argc, char **argv);

#endif
