/* pdb_test_cuda: what the CUDA tests share: whether a GPU is usable (asked once, its name printed
 * once) and the skip of a GPU check without one, printed as "skipped: no GPU (check)" so that a
 * skipped check is never reported as a passing one. */
#ifndef PDB_TEST_CUDA_H
#define PDB_TEST_CUDA_H

#include <stdio.h>

#include "pdb_cuda.h"

static inline int pdb_test_have_gpu(void) {
    static int gpu = -1;
    if (gpu < 0) {
        char name[256];
        gpu = pdb_cuda_device_count(name, sizeof name) > 0;
        if (gpu) printf("cuda device: %s\n", name);
    }
    return gpu;
}

#define PDB_TEST_NEED_GPU()                                                                                     \
    do {                                                                                                        \
        if (!pdb_test_have_gpu()) {                                                                             \
            printf("skipped: no GPU (%s)\n", __func__);                                                         \
            return;                                                                                             \
        }                                                                                                       \
    } while (0)

#endif
