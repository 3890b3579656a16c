/* pdb_clock: CLOCK_MONOTONIC as seconds (see pdb_clock.h). */
#include "pdb_clock.h"

#include <time.h>

double pdb_clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
