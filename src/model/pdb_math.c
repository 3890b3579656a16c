/* pdb_math: RMSNorm, SiLU, softmax, argmax and GEMM wrappers over OpenBLAS (row-major). */
#include "pdb_math.h"

#include <cblas.h>
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

void pdb_math_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

float pdb_math_exp(float x) { return (float)exp((double)x); }

float pdb_math_log1pf(float x) { return (float)log1p((double)x); }

void pdb_math_silu_mul(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + pdb_math_exp(-g[i])) * u[i];
}

void pdb_math_softmax(float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) { x[i] = pdb_math_exp(x[i] - m); s += x[i]; }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void pdb_math_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

void pdb_math_gemm_nn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* The first index of the largest non-NaN value (0 when all are NaN): the running maximum of one
 * scan that moves on a larger value or off a NaN. In two passes with AVX-512 or NEON (the
 * maximum, then its first position: the same index, -0 and +0 included, since a later equal
 * value never moves the scan). */
__attribute__((unused)) static int64_t argmax_scalar(const float *x, int64_t n) { /* the reference; unused on aarch64 */
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static int64_t argmax_avx512(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    __mmask16 seen = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        seen |= _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), v);
    }
    float best = _mm512_reduce_max_ps(m);
    int any = seen != 0;
    for (; i < n; i++)
        if (!isnan(x[i])) {
            if (!any || x[i] > best) best = x[i];
            any = 1;
        }
    if (!any) return 0;
    __m512 b = _mm512_set1_ps(best);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), b, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    for (; i < n; i++)
        if (x[i] == best) return i;
    return 0; /* not reached */
}
#endif

#if defined(__aarch64__)
/* vmaxnmq_f32 is IEEE maxNum: a NaN lane keeps the other operand, so NaNs never win (as the
 * scan's "off a NaN"); "any" records whether some lane held a number at all. */
static int64_t argmax_neon(const float *x, int64_t n) {
    float32x4_t m = vdupq_n_f32(-INFINITY);
    uint32x4_t seen = vdupq_n_u32(0);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        seen = vorrq_u32(seen, vceqq_f32(v, v));
        m = vmaxnmq_f32(m, v);
    }
    float best = vmaxnmvq_f32(m);
    int any = vmaxvq_u32(seen) != 0;
    for (; i < n; i++)
        if (!isnan(x[i])) {
            if (!any || x[i] > best) best = x[i];
            any = 1;
        }
    if (!any) return 0;
    float32x4_t b = vdupq_n_f32(best);
    for (i = 0; i + 4 <= n; i += 4)
        if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + i), b)))
            for (int j = 0;; j++)
                if (x[i + j] == best) return i + j;
    for (; i < n; i++)
        if (x[i] == best) return i;
    return 0; /* not reached */
}
#endif

int64_t pdb_math_argmax(const float *x, int64_t n) {
#if defined(__x86_64__)
    __builtin_cpu_init(); /* idempotent, and no cached flag shared between threads */
    return __builtin_cpu_supports("avx512f") ? argmax_avx512(x, n) : argmax_scalar(x, n);
#elif defined(__aarch64__)
    return argmax_neon(x, n); /* NEON is part of the aarch64 base ISA */
#else
    return argmax_scalar(x, n);
#endif
}
