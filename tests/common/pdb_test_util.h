/* pdb_test_util: helpers shared by the C tests (temp dirs, tiny models). Header-only. */
#ifndef PDB_TEST_UTIL_H
#define PDB_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_status.h"

/* mkdtemp under /tmp; aborts the test binary on failure (tests only). */
static inline char *pdb_test_tmpdir(const char *tag) {
    char *p = malloc(256);
    snprintf(p, 256, "/tmp/pdbtest-%s-XXXXXX", tag);
    if (!mkdtemp(p)) { perror("mkdtemp"); exit(1); }
    return p;
}

static inline void pdb_test_rmrf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* n pseudo-random token ids in [0, V): a 32-bit LCG from seed (one sequence for every test). */
static inline void pdb_test_ids(int32_t *ids, int64_t n, int64_t V, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
}

#define PDB_TEST_OK(expr)                                                                        \
    do {                                                                                         \
        pdb_status s_ = (expr);                                                                  \
        if (s_ != PDB_OK) fail_msg("%s -> %s: %s", #expr, pdb_status_str(s_), pdb_err_msg());    \
    } while (0)

#endif
