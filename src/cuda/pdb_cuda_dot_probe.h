/* pdb_cuda_dot_probe: runs pdb_cuda_dot32 (the exact engine's and the capture hook's fixed-order
 * f32 product) once on host operands and returns C, optionally timing further launches; for its
 * test, which compares every output with pdb_qmat_dot bit for bit, and for timing the kernel forms.
 * Invariants: operands live on device 0 only for the call and are freed on every path; C's input
 * is used only when accumulating; nothing here exits; without a GPU (pdb_cuda_stub.c) it returns
 * PDB_UNSUPPORTED / PDB_CUDA and writes nothing. */
#ifndef PDB_CUDA_DOT_PROBE_H
#define PDB_CUDA_DOT_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "pdb_status.h"

/* Which kernel: pdb_cuda_dot32's own choice, the general (per-lane global loads) one, or the
 * shared-memory tiled one (PDB_UNSUPPORTED where its alignment rules do not hold). */
enum { PDB_DOT_PROBE_AUTO = 0, PDB_DOT_PROBE_GENERAL = 1, PDB_DOT_PROBE_TILED = 2 };

typedef struct pdb_cuda_dot_probe_opts {
    int64_t M, N, K;
    int64_t batch;         /* 0 = 1 */
    int64_t lda, ldw, ldc; /* row strides in floats (0 = K, K, N) */
    int64_t sa, sw, sc;    /* batch strides in floats (0 = M lda, N ldw, M ldc) */
    int64_t a_shift;       /* A placed this many floats past a 256-byte boundary (alignment checks) */
    int accumulate;        /* 1: C = C + A . W^T (C's input used), 0: C = A . W^T */
    int form;              /* PDB_DOT_PROBE_* */
    int reps;              /* timed launches after the checked one (0: no timing) */
} pdb_cuda_dot_probe_opts;

/* Host A [(batch - 1) sa + (M - 1) lda + K], W [(batch - 1) sw + (N - 1) ldw + K], C (in and out)
 * [(batch - 1) sc + (M - 1) ldc + N]: C gets the first launch's result (elements outside the
 * product keep their input). *tiled (optional) = 1 when the tiled kernel ran; *ms (optional) =
 * the mean time of the timed launches (0 without reps). */
pdb_status pdb_cuda_dot_probe_run(const pdb_cuda_dot_probe_opts *o, const float *A, const float *W, float *C,
                                  int *tiled, double *ms);

#ifdef __cplusplus
}
#endif

#endif
