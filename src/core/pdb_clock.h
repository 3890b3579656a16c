/* pdb_clock: the one monotonic clock of pdbridge, in seconds as a double (CLOCK_MONOTONIC: never
 * jumps with the wall clock, so differences are durations). Resolution is libc's (nanoseconds);
 * a double keeps sub-microsecond precision for uptimes of years. Used for durations, deadlines
 * and traces; wall-clock time (log stamps, condition-variable deadlines) is not this. */
#ifndef PDB_CLOCK_H
#define PDB_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary fixed point (the same for every thread of the process). */
double pdb_clock_now(void);

#ifdef __cplusplus
}
#endif

#endif
