/* pdb_math: the small dense kernels of the CPU reference (RMSNorm, SiLU-gated products, softmax,
 * row-major GEMM through OpenBLAS). Invariant: each is a pure function of its inputs; reductions
 * in RMSNorm and softmax run in a fixed order in double, so a row's result never depends on
 * which other rows share the call (chunked = one-shot). */
#ifndef PDB_MATH_H
#define PDB_MATH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* e^x as (float)exp((double)x): the double exponential is within one double ulp on glibc and on
 * CUDA, so rounding it to float gives the same float on both (the CUDA exact engine evaluates
 * this same expression), where expf's float algorithms differ by an ulp. */
float pdb_math_exp(float x);
/* log(1 + x) as (float)log1p((double)x): the same float on x86-64 and aarch64, where glibc's
 * log1pf is not (1 ulp apart on 2,024 of 11.8M inputs measured; the double form agreed on all
 * 18.6M tried: docs/decisions.md D28). */
float pdb_math_log1pf(float x);
/* y[n] = x[n] / sqrt(mean(x^2) + eps) * w[n]  (in place allowed) */
void pdb_math_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps);
/* out[i] = silu(g[i]) * u[i] */
void pdb_math_silu_mul(float *out, const float *g, const float *u, int64_t n);
/* in-place softmax over n values */
void pdb_math_softmax(float *x, int64_t n);
/* C[M,N] (ldc) = alpha * A[M,K] (lda) @ B[N,K]^T (ldb) + beta*C : PyTorch Linear with W=B. */
void pdb_math_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* C[M,N] = alpha * A[M,K] @ B[K,N] + beta*C. */
void pdb_math_gemm_nn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* index of the largest non-NaN element (lowest index on ties; 0 when all are NaN) */
int64_t pdb_math_argmax(const float *x, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
