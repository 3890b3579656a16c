/* fuzz_util.h: helpers shared by the libFuzzer targets (fuzz/fuzz_*.c). Invariants: every
 * helper is deterministic and process-local; FUZZ_CHECK aborts (a finding) when a property
 * that must hold for every input does not. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                   \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "fuzz property failed: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            abort();                                                            \
        }                                                                       \
    } while (0)

/* The repository root: $PDB_SRC, else the compile-time source dir. */
static inline const char *fuzz_src_dir(void) {
    const char *s = getenv("PDB_SRC");
    return s && *s ? s : PDB_FUZZ_SRC_DIR;
}

#endif
