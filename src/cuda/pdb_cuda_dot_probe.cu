/* pdb_cuda_dot_probe: pdb_cuda_dot32 alone on host operands (pdb_cuda_dot_probe.h). Invariant:
 * the device copies hold the host arrays' bytes at the same element offsets, so C's elements map
 * one to one; everything allocated is freed on every path. */
#include <stdint.h>

#include "pdb_cuda_dot_probe.h"
#include "pdb_cuda_kernels.h"

typedef struct dot_bufs {
    char *a;
    float *w, *c;
    cudaEvent_t e0, e1;
} dot_bufs;

static pdb_status dot_probe(const pdb_cuda_dot_probe_opts *o, const float *A, const float *W, float *C, int *tiled,
                            double *ms, dot_bufs *b) {
    const int64_t M = o->M, N = o->N, K = o->K, batch = o->batch > 0 ? o->batch : 1;
    const int64_t lda = o->lda ? o->lda : K, ldw = o->ldw ? o->ldw : K, ldc = o->ldc ? o->ldc : N;
    const int64_t sa = o->sa ? o->sa : M * lda, sw = o->sw ? o->sw : N * ldw, sc = o->sc ? o->sc : M * ldc;
    if (M <= 0 || N <= 0 || K < 0 || lda < K || ldw < K || ldc < N || o->a_shift < 0 || o->a_shift >= 64)
        return pdb_err_set(PDB_INVALID, "dot probe: bad shape");
    const size_t na = (size_t)((batch - 1) * sa + (M - 1) * lda + K), nw = (size_t)((batch - 1) * sw + (N - 1) * ldw + K),
                 nc = (size_t)((batch - 1) * sc + (M - 1) * ldc + N);
    PDB_TRY(pdb_cuda_use_device(0, "dot probe"));
    PDB_CU(cudaMalloc((void **)&b->a, sizeof(float) * (na + 64)));
    PDB_CU(cudaMalloc((void **)&b->w, sizeof(float) * (nw ? nw : 1)));
    PDB_CU(cudaMalloc((void **)&b->c, sizeof(float) * nc));
    float *dA = (float *)b->a + o->a_shift; /* cudaMalloc's base is 256-byte aligned */
    PDB_CU(cudaMemcpy(dA, A, sizeof(float) * na, cudaMemcpyHostToDevice));
    PDB_CU(cudaMemcpy(b->w, W, sizeof(float) * nw, cudaMemcpyHostToDevice));
    PDB_CU(cudaMemcpy(b->c, C, sizeof(float) * nc, cudaMemcpyHostToDevice));
    const int form = o->form == PDB_DOT_PROBE_GENERAL ? PDB_DOT32_GENERAL
                     : o->form == PDB_DOT_PROBE_TILED ? PDB_DOT32_TILED
                                                      : PDB_DOT32_AUTO;
    PDB_TRY(pdb_cuda_dot32_form(0, M, N, K, dA, lda, sa, b->w, ldw, sw, b->c, ldc, sc, batch, o->accumulate, form, tiled));
    PDB_CU(cudaDeviceSynchronize());
    PDB_CU(cudaMemcpy(C, b->c, sizeof(float) * nc, cudaMemcpyDeviceToHost));
    if (ms) *ms = 0;
    if (o->reps <= 0) return PDB_OK;
    PDB_CU(cudaEventCreate(&b->e0));
    PDB_CU(cudaEventCreate(&b->e1));
    PDB_CU(cudaEventRecord(b->e0, 0));
    for (int r = 0; r < o->reps; r++)
        PDB_TRY(pdb_cuda_dot32_form(0, M, N, K, dA, lda, sa, b->w, ldw, sw, b->c, ldc, sc, batch, o->accumulate, form,
                                    NULL));
    PDB_CU(cudaEventRecord(b->e1, 0));
    PDB_CU(cudaEventSynchronize(b->e1));
    float t = 0;
    PDB_CU(cudaEventElapsedTime(&t, b->e0, b->e1));
    if (ms) *ms = (double)t / o->reps;
    return PDB_OK;
}

pdb_status pdb_cuda_dot_probe_run(const pdb_cuda_dot_probe_opts *o, const float *A, const float *W, float *C,
                                  int *tiled, double *ms) {
    if (tiled) *tiled = 0;
    if (ms) *ms = 0;
    if (!o || !A || !W || !C) return pdb_err_set(PDB_INVALID, "dot probe: missing operand");
    dot_bufs b = {0};
    pdb_status st = dot_probe(o, A, W, C, tiled, ms, &b);
    cudaFree(b.a);
    cudaFree(b.w);
    cudaFree(b.c);
    if (b.e0) cudaEventDestroy(b.e0);
    if (b.e1) cudaEventDestroy(b.e1);
    return st;
}
