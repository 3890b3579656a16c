/* pdb_cuda_gemm_probe: how fast, and with which bits, cuBLAS runs the engines' products in the forms
 * an M-invariant engine can issue them (issue 21): one call per product, tiles of fixed rows in
 * sequence, the same tiles spread over several streams, the tiles as one strided-batched call, and
 * the routed experts' row tiles as pointer-array batches or per-expert products. Invariants: runs
 * on device 0 with operands it fills itself; frees everything on every path; never exits; without
 * a GPU (pdb_cuda_stub.c) it returns PDB_UNSUPPORTED / PDB_CUDA and writes no row. */
#ifndef PDB_CUDA_GEMM_PROBE_H
#define PDB_CUDA_GEMM_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "pdb_status.h"

typedef struct pdb_gemm_form_row {
    char name[48];   /* "<group> <form>", e.g. "dense_2048x4096 tiles512_4streams" */
    int64_t M, N, K; /* the product's rows (all tiles together), columns, depth */
    int64_t calls;   /* cuBLAS calls per product */
    double ms;       /* mean time of one product (CUDA events, after a warm-up) */
    double tflops;   /* 2 M N K / ms */
    int same;        /* 1: C has the reference form's bits (the group's first row), 0: differs, -1: not compared */
} pdb_gemm_form_row;

/* Runs every form (reps timed repetitions each) and fills rows[0 .. *n) (cap rows at most). */
pdb_status pdb_cuda_probe_gemm_forms(int reps, pdb_gemm_form_row *rows, int cap, int *n);

#ifdef __cplusplus
}
#endif

#endif
