/* pdb_dacc: double-accumulated products, one sequential sum per output (pdb_dacc.h); the AVX-512
 * kernels put independent outputs in the lanes (dots: 16 m x up to 6 n, mix: up to 6 m x 16 e)
 * and keep each lane's sum in k (i) order with fused multiply-adds, which equal the scalar
 * multiply-then-add because every product of two floats is exact in double. */
#include "pdb_dacc.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int dacc_simd = -1; /* -1: not checked yet */

static int cpu_simd(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}

static int simd_on(void) {
    int v = __atomic_load_n(&dacc_simd, __ATOMIC_RELAXED);
    if (v < 0) {
        v = cpu_simd();
        __atomic_store_n(&dacc_simd, v, __ATOMIC_RELAXED);
    }
    return v;
}

int pdb_dacc_use_simd(int on) {
    int old = simd_on();
    __atomic_store_n(&dacc_simd, on && cpu_simd() ? 1 : 0, __ATOMIC_RELAXED);
    return old;
}

static void dots_scalar(const double *at, int64_t ldat, int64_t M, const double *const *b, int64_t N, int64_t K, float *out,
                        int64_t ldm, int64_t ldn) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += at[k * ldat + m] * b[n][k];
            out[n * ldn + m * ldm] = (float)s;
        }
}

static void mix_scalar(const double *p, int64_t ldp, int64_t M, const double *const *x, int64_t N, int64_t E, float *out,
                       int64_t ldo) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++) {
            double s = 0;
            for (int64_t i = 0; i < N; i++) s += p[m * ldp + i] * x[i][e];
            out[m * ldo + e] = (float)s;
        }
}

#if defined(__x86_64__)
#define PDB_DACC_UNROLL _Pragma("GCC unroll 8")

/* m lanes [m0, m0 + 16) (masks lm0 / lm1 for a short last tile) x b rows n0 .. n0 + nr - 1 */
__attribute__((target("avx512f"), always_inline)) static inline void dots_tile(const double *at, int64_t ldat, int64_t m0, int64_t mc,
        const double *const *b, int64_t n0, int nr, int64_t K, float *out, int64_t ldm, int64_t ldn) {
    __mmask8 lm0 = (__mmask8)(mc >= 8 ? 0xFF : (1u << mc) - 1), lm1 = (__mmask8)(mc >= 16 ? 0xFF : mc > 8 ? (1u << (mc - 8)) - 1 : 0);
    __m512d acc[6][2];
    const double *br[6];
    PDB_DACC_UNROLL
    for (int j = 0; j < 6; j++) {
        acc[j][0] = acc[j][1] = _mm512_setzero_pd();
        br[j] = b[n0 + (j < nr ? j : 0)];
    }
    const double *a = at + m0;
    for (int64_t k = 0; k < K; k++, a += ldat) {
        __m512d a0 = _mm512_maskz_loadu_pd(lm0, a), a1 = _mm512_maskz_loadu_pd(lm1, a + 8);
        PDB_DACC_UNROLL
        for (int j = 0; j < 6; j++)
            if (j < nr) {
                __m512d bv = _mm512_set1_pd(br[j][k]);
                acc[j][0] = _mm512_fmadd_pd(a0, bv, acc[j][0]);
                acc[j][1] = _mm512_fmadd_pd(a1, bv, acc[j][1]);
            }
    }
    for (int j = 0; j < nr; j++) {
        float o[16];
        _mm256_storeu_ps(o, _mm512_cvtpd_ps(acc[j][0]));
        _mm256_storeu_ps(o + 8, _mm512_cvtpd_ps(acc[j][1]));
        for (int64_t l = 0; l < mc; l++) out[(n0 + j) * ldn + (m0 + l) * ldm] = o[l];
    }
}

__attribute__((target("avx512f"))) static void dots_avx512(const double *at, int64_t ldat, int64_t M, const double *const *b, int64_t N,
                                                           int64_t K, float *out, int64_t ldm, int64_t ldn) {
    for (int64_t n0 = 0; n0 < N; n0 += 6) {
        int nr = N - n0 < 6 ? (int)(N - n0) : 6;
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            int64_t mc = M - m0 < 16 ? M - m0 : 16;
            switch (nr) { /* nr a constant in each: the accumulators stay in registers */
            case 6: dots_tile(at, ldat, m0, mc, b, n0, 6, K, out, ldm, ldn); break;
            case 5: dots_tile(at, ldat, m0, mc, b, n0, 5, K, out, ldm, ldn); break;
            case 4: dots_tile(at, ldat, m0, mc, b, n0, 4, K, out, ldm, ldn); break;
            case 3: dots_tile(at, ldat, m0, mc, b, n0, 3, K, out, ldm, ldn); break;
            case 2: dots_tile(at, ldat, m0, mc, b, n0, 2, K, out, ldm, ldn); break;
            default: dots_tile(at, ldat, m0, mc, b, n0, 1, K, out, ldm, ldn); break;
            }
        }
    }
}

/* rows m0 .. m0 + mr - 1 x columns [e0, e0 + ec), ec <= 16 */
__attribute__((target("avx512f"), always_inline)) static inline void mix_tile(const double *p, int64_t ldp, int64_t m0, int mr,
        const double *const *x, int64_t N, int64_t e0, int64_t ec, float *out, int64_t ldo) {
    __mmask8 lm0 = (__mmask8)(ec >= 8 ? 0xFF : (1u << ec) - 1), lm1 = (__mmask8)(ec >= 16 ? 0xFF : ec > 8 ? (1u << (ec - 8)) - 1 : 0);
    __m512d acc[6][2];
    const double *pr[6];
    PDB_DACC_UNROLL
    for (int r = 0; r < 6; r++) {
        acc[r][0] = acc[r][1] = _mm512_setzero_pd();
        pr[r] = p + (m0 + (r < mr ? r : 0)) * ldp;
    }
    for (int64_t i = 0; i < N; i++) {
        const double *xi = x[i] + e0;
        __m512d x0 = _mm512_maskz_loadu_pd(lm0, xi), x1 = _mm512_maskz_loadu_pd(lm1, xi + 8);
        PDB_DACC_UNROLL
        for (int r = 0; r < 6; r++)
            if (r < mr) {
                __m512d pv = _mm512_set1_pd(pr[r][i]);
                acc[r][0] = _mm512_fmadd_pd(pv, x0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_pd(pv, x1, acc[r][1]);
            }
    }
    for (int r = 0; r < mr; r++) {
        float o[16];
        _mm256_storeu_ps(o, _mm512_cvtpd_ps(acc[r][0]));
        _mm256_storeu_ps(o + 8, _mm512_cvtpd_ps(acc[r][1]));
        for (int64_t l = 0; l < ec; l++) out[(m0 + r) * ldo + e0 + l] = o[l];
    }
}

__attribute__((target("avx512f"))) static void mix_avx512(const double *p, int64_t ldp, int64_t M, const double *const *x, int64_t N,
                                                          int64_t E, float *out, int64_t ldo) {
    for (int64_t e0 = 0; e0 < E; e0 += 16) {
        int64_t ec = E - e0 < 16 ? E - e0 : 16;
        for (int64_t m0 = 0; m0 < M; m0 += 6) {
            int mr = M - m0 < 6 ? (int)(M - m0) : 6;
            switch (mr) {
            case 6: mix_tile(p, ldp, m0, 6, x, N, e0, ec, out, ldo); break;
            case 5: mix_tile(p, ldp, m0, 5, x, N, e0, ec, out, ldo); break;
            case 4: mix_tile(p, ldp, m0, 4, x, N, e0, ec, out, ldo); break;
            case 3: mix_tile(p, ldp, m0, 3, x, N, e0, ec, out, ldo); break;
            case 2: mix_tile(p, ldp, m0, 2, x, N, e0, ec, out, ldo); break;
            default: mix_tile(p, ldp, m0, 1, x, N, e0, ec, out, ldo); break;
            }
        }
    }
}
#endif

void pdb_dacc_dots(const double *at, int64_t ldat, int64_t M, const double *const *b, int64_t N, int64_t K, float *out,
                   int64_t ldm, int64_t ldn) {
    if (M <= 0 || N <= 0) return;
#if defined(__x86_64__)
    if (simd_on()) {
        dots_avx512(at, ldat, M, b, N, K, out, ldm, ldn);
        return;
    }
#endif
    dots_scalar(at, ldat, M, b, N, K, out, ldm, ldn);
}

void pdb_dacc_mix(const double *p, int64_t ldp, int64_t M, const double *const *x, int64_t N, int64_t E, float *out,
                  int64_t ldo) {
    if (M <= 0 || E <= 0) return;
#if defined(__x86_64__)
    if (simd_on()) {
        mix_avx512(p, ldp, M, x, N, E, out, ldo);
        return;
    }
#endif
    mix_scalar(p, ldp, M, x, N, E, out, ldo);
}
