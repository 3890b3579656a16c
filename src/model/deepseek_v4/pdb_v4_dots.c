/* pdb_v4_dots: many sequential double chains side by side (pdb_v4_dots.h). Each kernel's body is
 * written once (an always-inline function over GCC vector extensions of eight doubles) and built
 * twice on x86-64: for AVX-512 and for the baseline; the operations per element (convert, multiply,
 * add, in element order) are the same in both, so the choice changes the speed only. */
#include "pdb_v4_dots.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define V4D_INLINE static inline __attribute__((always_inline))

typedef double v8d __attribute__((vector_size(64)));

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define V4D_X86 1
#define V4D_WIDE __attribute__((target("avx512f")))
static int v4d_on = -1; /* the AVX-512 builds in use; -1: not checked yet */
static int v4d_cpu(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
}
static int v4d_wide(void) {
    int r = __atomic_load_n(&v4d_on, __ATOMIC_RELAXED);
    if (r < 0) {
        r = v4d_cpu();
        __atomic_store_n(&v4d_on, r, __ATOMIC_RELAXED);
    }
    return r;
}
#else
#define V4D_X86 0
#endif

int pdb_v4_dots_use_wide(int on) {
#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
    int old = v4d_wide();
    __atomic_store_n(&v4d_on, on && v4d_cpu() ? 1 : 0, __ATOMIC_RELAXED);
    return old;
#else
    (void)on;
    return 0;
#endif
}

/* eight floats at p (any alignment) -> doubles (exact) */
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define V8_LOAD_F(p) __builtin_convertvector(*(const v8f_u *)(p), v8d)

/* ---- dotd_rows: eight rows' chains at once (scalar: the rows are not contiguous in i) ---- */

V4D_INLINE void dotd_rows_body(const float *w, int64_t ldw, const int32_t *idx, int64_t m, const float *x, int64_t n,
                               float *out) {
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
        const float *r[8];
        for (int k = 0; k < 8; k++) r[k] = w + (idx ? idx[j + k] : j + k) * ldw;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i];
            a0 += xi * r[0][i]; a1 += xi * r[1][i]; a2 += xi * r[2][i]; a3 += xi * r[3][i];
            a4 += xi * r[4][i]; a5 += xi * r[5][i]; a6 += xi * r[6][i]; a7 += xi * r[7][i];
        }
        out[j] = (float)a0; out[j + 1] = (float)a1; out[j + 2] = (float)a2; out[j + 3] = (float)a3;
        out[j + 4] = (float)a4; out[j + 5] = (float)a5; out[j + 6] = (float)a6; out[j + 7] = (float)a7;
    }
    for (; j + 2 <= m; j += 2) {
        const float *r0 = w + (idx ? idx[j] : j) * ldw, *r1 = w + (idx ? idx[j + 1] : j + 1) * ldw;
        double a0 = 0, a1 = 0;
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i];
            a0 += xi * r0[i];
            a1 += xi * r1[i];
        }
        out[j] = (float)a0;
        out[j + 1] = (float)a1;
    }
    for (; j < m; j++) {
        const float *r0 = w + (idx ? idx[j] : j) * ldw;
        double a0 = 0;
        for (int64_t i = 0; i < n; i++) a0 += (double)x[i] * r0[i];
        out[j] = (float)a0;
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
V4D_WIDE static void dotd_rows_wide(const float *w, int64_t ldw, const int32_t *idx, int64_t m, const float *x, int64_t n,
                                    float *out) {
    dotd_rows_body(w, ldw, idx, m, x, n, out);
}
#endif

void pdb_v4_dotd_rows(const float *w, int64_t ldw, const int32_t *idx, int64_t m, const float *x, int64_t n, float *out) {
#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
    if (v4d_wide()) { dotd_rows_wide(w, ldw, idx, m, x, n, out); return; }
#endif
    dotd_rows_body(w, ldw, idx, m, x, n, out);
}

/* ---- the attention's scores and sums over keys: blocks of eight keys, four / eight heads ---- */

V4D_INLINE void dotd_keys_body(const float *q, int64_t ldq, int64_t nq, const float *w, int64_t ldw, const int32_t *idx,
                               int64_t m, int64_t n, float *out, int64_t ldo, double *kt) {
    for (int64_t b = 0; b < m; b += 8) {
        int64_t nb = m - b < 8 ? m - b : 8;
        for (int64_t k = 0; k < 8; k++) { /* the block transposed: kt[d * 8 + k] (a short block repeats its first key) */
            const float *kr = w + (idx ? idx[b + (k < nb ? k : 0)] : b + (k < nb ? k : 0)) * ldw;
            for (int64_t d = 0; d < n; d++) kt[d * 8 + k] = kr[d];
        }
        for (int64_t h0 = 0; h0 < nq; h0 += 4) {
            int64_t nh = nq - h0 < 4 ? nq - h0 : 4;
            const float *q0 = q + h0 * ldq, *q1 = q0 + (nh > 1) * ldq, *q2 = q0 + (nh > 2) * 2 * ldq, *q3 = q0 + (nh > 3) * 3 * ldq;
            v8d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t d = 0; d < n; d++) {
                v8d kd;
                memcpy(&kd, kt + d * 8, sizeof kd);
                a0 += (double)q0[d] * kd;
                a1 += (double)q1[d] * kd;
                a2 += (double)q2[d] * kd;
                a3 += (double)q3[d] * kd;
            }
            v8d a[4] = {a0, a1, a2, a3};
            for (int64_t i = 0; i < nh; i++)
                for (int64_t k = 0; k < nb; k++) out[(h0 + i) * ldo + b + k] = (float)a[i][k];
        }
    }
}

V4D_INLINE void mixd_keys_body(double *acc, const float *p, int64_t ldp, int64_t nq, const float *w, int64_t ldw,
                               const int32_t *idx, int64_t m, int64_t n) {
    int64_t e = 0;
    for (; e + 8 <= n; e += 8)
        for (int64_t h0 = 0; h0 < nq; h0 += 8) {
            int64_t nh = nq - h0 < 8 ? nq - h0 : 8;
            v8d a[8];
#pragma GCC unroll 8
            for (int64_t i = 0; i < 8; i++)
                if (i < nh) memcpy(&a[i], acc + (h0 + i) * n + e, sizeof a[i]);
                else a[i] = (v8d){0};
            const float *p0 = p + h0 * ldp;
            for (int64_t j = 0; j < m; j++) {
                v8d kv = V8_LOAD_F(w + (idx ? idx[j] : j) * ldw + e);
#pragma GCC unroll 8
                for (int64_t i = 0; i < 8; i++) a[i] += (double)p0[(i < nh ? i : 0) * ldp + j] * kv;
            }
            for (int64_t i = 0; i < nh; i++) memcpy(acc + (h0 + i) * n + e, &a[i], sizeof a[i]);
        }
    for (; e < n; e++)
        for (int64_t h = 0; h < nq; h++)
            for (int64_t j = 0; j < m; j++) acc[h * n + e] += (double)p[h * ldp + j] * w[(idx ? idx[j] : j) * ldw + e];
}

#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
/* The bodies above in AVX-512 intrinsics: eight heads per pass, their queries / probabilities in
 * doubles (a stack copy), a fused multiply-add per step (a product of two floats is exact in
 * double, so the sum rounds as a + q * k does: the same bits). Beyond the stack copy's size, the
 * generic bodies. */
enum { V4D_KQ_MAX = 8 * 512, V4D_PJ = 256 };
V4D_WIDE static void dotd_keys_wide(const float *q, int64_t ldq, int64_t nq, const float *w, int64_t ldw, const int32_t *idx,
                                    int64_t m, int64_t n, float *out, int64_t ldo, double *kt) {
    if (n > V4D_KQ_MAX / 8) {
        dotd_keys_body(q, ldq, nq, w, ldw, idx, m, n, out, ldo, kt);
        return;
    }
    _Alignas(64) double qd[V4D_KQ_MAX], av[8][8];
    for (int64_t b = 0; b < m; b += 8) {
        int64_t nb = m - b < 8 ? m - b : 8;
        for (int64_t k = 0; k < 8; k++) {
            const float *kr = w + (idx ? idx[b + (k < nb ? k : 0)] : b + (k < nb ? k : 0)) * ldw;
            for (int64_t d = 0; d < n; d++) kt[d * 8 + k] = kr[d];
        }
        for (int64_t h0 = 0; h0 < nq; h0 += 8) {
            int64_t nh = nq - h0 < 8 ? nq - h0 : 8;
            for (int64_t i = 0; i < 8; i++) /* a short group repeats head h0 (results dropped) */
                for (int64_t d = 0; d < n; d++) qd[i * n + d] = q[(h0 + (i < nh ? i : 0)) * ldq + d];
            __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
            for (int64_t d = 0; d < n; d++) {
                __m512d kd = _mm512_loadu_pd(kt + d * 8);
                a0 = _mm512_fmadd_pd(_mm512_set1_pd(qd[d]), kd, a0);
                a1 = _mm512_fmadd_pd(_mm512_set1_pd(qd[n + d]), kd, a1);
                a2 = _mm512_fmadd_pd(_mm512_set1_pd(qd[2 * n + d]), kd, a2);
                a3 = _mm512_fmadd_pd(_mm512_set1_pd(qd[3 * n + d]), kd, a3);
                a4 = _mm512_fmadd_pd(_mm512_set1_pd(qd[4 * n + d]), kd, a4);
                a5 = _mm512_fmadd_pd(_mm512_set1_pd(qd[5 * n + d]), kd, a5);
                a6 = _mm512_fmadd_pd(_mm512_set1_pd(qd[6 * n + d]), kd, a6);
                a7 = _mm512_fmadd_pd(_mm512_set1_pd(qd[7 * n + d]), kd, a7);
            }
            _mm512_store_pd(av[0], a0), _mm512_store_pd(av[1], a1), _mm512_store_pd(av[2], a2), _mm512_store_pd(av[3], a3);
            _mm512_store_pd(av[4], a4), _mm512_store_pd(av[5], a5), _mm512_store_pd(av[6], a6), _mm512_store_pd(av[7], a7);
            for (int64_t i = 0; i < nh; i++)
                for (int64_t k = 0; k < nb; k++) out[(h0 + i) * ldo + b + k] = (float)av[i][k];
        }
    }
}

V4D_WIDE static void mixd_keys_wide(double *acc, const float *p, int64_t ldp, int64_t nq, const float *w, int64_t ldw,
                                    const int32_t *idx, int64_t m, int64_t n) {
    _Alignas(64) double pd[8][V4D_PJ];
    int64_t e8 = n & ~(int64_t)7;
    for (int64_t h0 = 0; h0 < nq; h0 += 8) {
        int64_t nh = nq - h0 < 8 ? nq - h0 : 8;
        for (int64_t j0 = 0; j0 < m; j0 += V4D_PJ) { /* rows in chunks, in order: each column's chain continues */
            int64_t nj = m - j0 < V4D_PJ ? m - j0 : V4D_PJ;
            for (int64_t i = 0; i < 8; i++)
                for (int64_t j = 0; j < nj; j++) pd[i][j] = p[(h0 + (i < nh ? i : 0)) * ldp + j0 + j];
            for (int64_t e = 0; e < e8; e += 8) {
                __m512d a[8];
                for (int64_t i = 0; i < 8; i++) a[i] = i < nh ? _mm512_loadu_pd(acc + (h0 + i) * n + e) : _mm512_setzero_pd();
                __m512d a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
                for (int64_t j = 0; j < nj; j++) {
                    __m512d kv = _mm512_cvtps_pd(_mm256_loadu_ps(w + (idx ? idx[j0 + j] : j0 + j) * ldw + e));
                    a0 = _mm512_fmadd_pd(_mm512_set1_pd(pd[0][j]), kv, a0);
                    a1 = _mm512_fmadd_pd(_mm512_set1_pd(pd[1][j]), kv, a1);
                    a2 = _mm512_fmadd_pd(_mm512_set1_pd(pd[2][j]), kv, a2);
                    a3 = _mm512_fmadd_pd(_mm512_set1_pd(pd[3][j]), kv, a3);
                    a4 = _mm512_fmadd_pd(_mm512_set1_pd(pd[4][j]), kv, a4);
                    a5 = _mm512_fmadd_pd(_mm512_set1_pd(pd[5][j]), kv, a5);
                    a6 = _mm512_fmadd_pd(_mm512_set1_pd(pd[6][j]), kv, a6);
                    a7 = _mm512_fmadd_pd(_mm512_set1_pd(pd[7][j]), kv, a7);
                }
                a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
                for (int64_t i = 0; i < nh; i++) _mm512_storeu_pd(acc + (h0 + i) * n + e, a[i]);
            }
            for (int64_t e = e8; e < n; e++) /* the last columns one chain at a time */
                for (int64_t i = 0; i < nh; i++)
                    for (int64_t j = 0; j < nj; j++) acc[(h0 + i) * n + e] += pd[i][j] * w[(idx ? idx[j0 + j] : j0 + j) * ldw + e];
        }
    }
}
#endif

void pdb_v4_dotd_keys(const float *q, int64_t ldq, int64_t nq, const float *w, int64_t ldw, const int32_t *idx, int64_t m,
                      int64_t n, float *out, int64_t ldo, double *kt) {
#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
    if (v4d_wide()) { dotd_keys_wide(q, ldq, nq, w, ldw, idx, m, n, out, ldo, kt); return; }
#endif
    dotd_keys_body(q, ldq, nq, w, ldw, idx, m, n, out, ldo, kt);
}

void pdb_v4_mixd_keys(double *acc, const float *p, int64_t ldp, int64_t nq, const float *w, int64_t ldw, const int32_t *idx,
                      int64_t m, int64_t n) {
#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
    if (v4d_wide()) { mixd_keys_wide(acc, p, ldp, nq, w, ldw, idx, m, n); return; }
#endif
    mixd_keys_body(acc, p, ldp, nq, w, ldw, idx, m, n);
}

/* ---- the indexer's scores: eight keys per register (a block of keys transposed once, in
 * doubles, then every head's chains over it) ---- */

enum { V4D_IHD_MAX = 1024 };

V4D_INLINE void index_scores_body(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *keys, int64_t w0,
                                  int64_t w1, float sscale, float *out) {
    _Alignas(64) double kt[V4D_IHD_MAX * 8];
    for (int64_t b = w0; b < w1; b += 8) {
        int64_t nb = w1 - b < 8 ? w1 - b : 8;
        for (int64_t k = 0; k < 8; k++) {
            const float *kr = keys + (b + (k < nb ? k : 0)) * ihd; /* a short block repeats key b (results dropped) */
            for (int64_t d = 0; d < ihd; d++) kt[d * 8 + k] = kr[d];
        }
        double s[8] = {0};
        for (int64_t h0 = 0; h0 < nih; h0 += 8) { /* eight heads' chains side by side (the add latency) */
            int64_t nh = nih - h0 < 8 ? nih - h0 : 8;
            const float *qh[8];
            for (int64_t i = 0; i < 8; i++) qh[i] = q + (h0 + (i < nh ? i : 0)) * ihd; /* a short group repeats head h0 */
            v8d a[8];
#pragma GCC unroll 8
            for (int64_t i = 0; i < 8; i++) a[i] = (v8d){0};
            for (int64_t d = 0; d < ihd; d++) {
                v8d kd;
                memcpy(&kd, kt + d * 8, sizeof kd);
#pragma GCC unroll 8
                for (int64_t i = 0; i < 8; i++) a[i] += (double)qh[i][d] * kd;
            }
            for (int64_t i = 0; i < nh; i++) /* heads in order into each key's sum */
                for (int k = 0; k < 8; k++) {
                    float dp = (float)a[i][k];
                    float rl = dp > 0 ? dp * sscale : 0.0f;
                    s[k] += (double)(rl * hw[h0 + i]);
                }
        }
        for (int64_t k = 0; k < nb; k++) out[b - w0 + k] = (float)s[k];
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
/* The body above in AVX-512 intrinsics, with the queries in doubles once per call and a fused
 * multiply-add per step: q * k of two floats is exact in double, so fma(q, k, a) rounds the same
 * sum as a + q * k (the same bits, fewer instructions). Queries wider than the stack copy take
 * the generic body. */
enum { V4D_QD_MAX = 8192 };
V4D_WIDE static void index_scores_wide(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *keys,
                                       int64_t w0, int64_t w1, float sscale, float *out) {
    if (nih * ihd > V4D_QD_MAX) {
        index_scores_body(q, hw, nih, ihd, keys, w0, w1, sscale, out);
        return;
    }
    _Alignas(64) double kt[V4D_IHD_MAX * 8], qd[V4D_QD_MAX], av[8][8];
    for (int64_t i = 0; i < nih * ihd; i++) qd[i] = q[i];
    for (int64_t b = w0; b < w1; b += 8) {
        int64_t nb = w1 - b < 8 ? w1 - b : 8;
        for (int64_t k = 0; k < 8; k++) {
            const float *kr = keys + (b + (k < nb ? k : 0)) * ihd;
            for (int64_t d = 0; d < ihd; d++) kt[d * 8 + k] = kr[d];
        }
        double s[8] = {0};
        for (int64_t h0 = 0; h0 < nih; h0 += 8) {
            int64_t nh = nih - h0 < 8 ? nih - h0 : 8;
            const double *qh[8];
            for (int64_t i = 0; i < 8; i++) qh[i] = qd + (h0 + (i < nh ? i : 0)) * ihd;
            __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
            for (int64_t d = 0; d < ihd; d++) {
                __m512d kd = _mm512_load_pd(kt + d * 8);
                a0 = _mm512_fmadd_pd(_mm512_set1_pd(qh[0][d]), kd, a0);
                a1 = _mm512_fmadd_pd(_mm512_set1_pd(qh[1][d]), kd, a1);
                a2 = _mm512_fmadd_pd(_mm512_set1_pd(qh[2][d]), kd, a2);
                a3 = _mm512_fmadd_pd(_mm512_set1_pd(qh[3][d]), kd, a3);
                a4 = _mm512_fmadd_pd(_mm512_set1_pd(qh[4][d]), kd, a4);
                a5 = _mm512_fmadd_pd(_mm512_set1_pd(qh[5][d]), kd, a5);
                a6 = _mm512_fmadd_pd(_mm512_set1_pd(qh[6][d]), kd, a6);
                a7 = _mm512_fmadd_pd(_mm512_set1_pd(qh[7][d]), kd, a7);
            }
            _mm512_store_pd(av[0], a0), _mm512_store_pd(av[1], a1), _mm512_store_pd(av[2], a2), _mm512_store_pd(av[3], a3);
            _mm512_store_pd(av[4], a4), _mm512_store_pd(av[5], a5), _mm512_store_pd(av[6], a6), _mm512_store_pd(av[7], a7);
            for (int64_t i = 0; i < nh; i++)
                for (int k = 0; k < 8; k++) {
                    float dp = (float)av[i][k];
                    float rl = dp > 0 ? dp * sscale : 0.0f;
                    s[k] += (double)(rl * hw[h0 + i]);
                }
        }
        for (int64_t k = 0; k < nb; k++) out[b - w0 + k] = (float)s[k];
    }
}
#endif

static void index_scores_one(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *k, float sscale,
                             float *out) { /* the one-chain form (ihd too wide for the block) */
    double s = 0;
    for (int64_t h = 0; h < nih; h++) {
        double a = 0;
        for (int64_t d = 0; d < ihd; d++) a += (double)q[h * ihd + d] * k[d];
        float dp = (float)a, rl = dp > 0 ? dp * sscale : 0.0f;
        s += (double)(rl * hw[h]);
    }
    *out = (float)s;
}

void pdb_v4_index_scores(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *keys, int64_t w0,
                         int64_t w1, float sscale, float *out) {
    if (ihd > V4D_IHD_MAX) {
        for (int64_t w = w0; w < w1; w++) index_scores_one(q, hw, nih, ihd, keys + w * ihd, sscale, out + (w - w0));
        return;
    }
#if (defined(__x86_64__) || defined(__i386__)) && V4D_X86
    if (v4d_wide()) { index_scores_wide(q, hw, nih, ihd, keys, w0, w1, sscale, out); return; }
#endif
    index_scores_body(q, hw, nih, ihd, keys, w0, w1, sscale, out);
}

/* ---- top-k ---- */

typedef struct { float s; int32_t i; } v4d_scored;

static inline int better(const v4d_scored *a, const v4d_scored *b) { /* a before b in the pick order */
    return a->s > b->s || (a->s == b->s && a->i < b->i);
}

static int cmp_scored(const void *a, const void *b) {
    const v4d_scored *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

int64_t pdb_v4_topk_scratch_bytes(int64_t n) { return (int64_t)sizeof(v4d_scored) * (n > 0 ? n : 1); }

void pdb_v4_topk(const float *sc, int64_t n, int64_t k, int32_t *sel, void *tmp) {
    v4d_scored *a = tmp;
    for (int64_t i = 0; i < n; i++) a[i] = (v4d_scored){sc[i], (int32_t)i};
    /* quickselect (median-of-three pivot): afterwards a[0 .. k) are the k best, in some order */
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        v4d_scored t;
        if (better(&a[mid], &a[lo])) t = a[mid], a[mid] = a[lo], a[lo] = t;
        if (better(&a[hi], &a[lo])) t = a[hi], a[hi] = a[lo], a[lo] = t;
        if (better(&a[hi], &a[mid])) t = a[hi], a[hi] = a[mid], a[mid] = t;
        v4d_scored piv = a[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (better(&a[i], &piv)) i++;
            while (better(&piv, &a[j])) j--;
            if (i <= j) {
                t = a[i], a[i] = a[j], a[j] = t;
                i++, j--;
            }
        }
        /* [lo, j] all before-or-equal piv, [i, hi] after-or-equal; (j, i) is piv */
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(a, (size_t)k, sizeof *a, cmp_scored);
    for (int64_t i = 0; i < k; i++) sel[i] = a[i].i;
}
