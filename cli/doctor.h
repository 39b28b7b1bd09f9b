/* doctor.h - `tfetch doctor [--json] [--size SIZE] [--no-probe] [BASE]`: what limits tfetch
 * between this host and the server at BASE, and what to change (cli/doctor.c).
 */
#ifndef TFC_DOCTOR_H
#define TFC_DOCTOR_H

/* argv[0] is "doctor". Prints the diagnosis (words, or one JSON object with --json) on
 * stdout. Returns the exit status: 0 the fast path is available (same host: shared memory;
 * another host: UCX), 1 it is not, 2 the server cannot be reached or a usage error. */
int tfc_doctor(int argc, char **argv);

#endif
