/* bench_qmat_kernels: the decode kernels of pdb_qmat (T = 1, one thread) against a frozen copy of
 * the previous ones (commit 4c949b1: e4m3 decoded with two masks, two shifts, an or and a 2^120
 * multiply, then the scale multiply; e2m1 looked up, re-interleaved, then scaled), run alternately
 * in one process so that a busy machine slows both alike; outputs are checked bit-identical.
 * Also, as prototypes only (NOT the project's arithmetic): what a changed contract would buy,
 * measured on the same data (bf16 dot products with one scale multiply per block), and a plain
 * read of the same bytes (the memory floor of the working set).
 * Usage: bench_qmat_kernels [reps] (default 7); prints one line per case.
 * The frozen kernels are AVX-512: on other CPUs (aarch64) the program says so and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_dtype.h"
#include "pdb_pool.h"
#include "pdb_qmat.h"

#if defined(__x86_64__)
#include <immintrin.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time of this thread: a busy machine steals less of it */
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the previous kernels (baseline) --------------------------------------------------------- */

static float base_e2m1[16];

static inline float base_e8m0(uint8_t e) {
    uint32_t u = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

__attribute__((target("avx512f"), always_inline)) static inline __m512 base_e4m3x16(const uint8_t *q) {
    const __m512i k80 = _mm512_set1_epi32(0x80), k7f = _mm512_set1_epi32(0x7F);
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i mag = _mm512_and_si512(v, k7f), sign = _mm512_slli_epi32(_mm512_and_si512(v, k80), 24);
    return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_slli_epi32(mag, 20))), _mm512_set1_ps(0x1p120f));
}

__attribute__((target("avx512f"))) static float base_fold(__m512 lo, __m512 hi) {
    __m512 v = _mm512_add_ps(lo, hi);
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
}

/* four NaN-free MXFP8 rows, the previous way (its register layout too: eight named accumulators) */
__attribute__((target("avx512f"))) static void base_mxfp8(const pdb_qmat *w, int64_t r0, const float *x, float *out) {
    int64_t C = w->cols, nb = C / 32;
    const uint8_t *q[4], *s[4];
    for (int i = 0; i < 4; i++) {
        q[i] = (const uint8_t *)w->data + (r0 + i) * C;
        s[i] = w->scales + (r0 + i) * nb;
    }
    __m512 lo0 = _mm512_setzero_ps(), lo1 = lo0, lo2 = lo0, lo3 = lo0, hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0;
    for (int64_t b = 0; b < nb; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
#define BASE_F4(i, lo, hi)                                                                         \
        {                                                                                          \
            __m512 sc = _mm512_set1_ps(base_e8m0(s[i][b]));                                        \
            lo = _mm512_fmadd_ps(x0, _mm512_mul_ps(base_e4m3x16(q[i] + b * 32), sc), lo);          \
            hi = _mm512_fmadd_ps(x1, _mm512_mul_ps(base_e4m3x16(q[i] + b * 32 + 16), sc), hi);     \
        }
        BASE_F4(0, lo0, hi0)
        BASE_F4(1, lo1, hi1)
        BASE_F4(2, lo2, hi2)
        BASE_F4(3, lo3, hi3)
#undef BASE_F4
    }
    out[0] = base_fold(lo0, hi0), out[1] = base_fold(lo1, hi1), out[2] = base_fold(lo2, hi2), out[3] = base_fold(lo3, hi3);
}

/* four MXFP4 rows, the previous way */
__attribute__((target("avx512f"))) static void base_mxfp4(const pdb_qmat *w, int64_t r0, const float *x, float *out) {
    int64_t C = w->cols, nb = C / 32;
    const __m512 lut = _mm512_loadu_ps(base_e2m1);
    const __m512i k15 = _mm512_set1_epi32(15);
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const uint8_t *q[4], *s[4];
    for (int i = 0; i < 4; i++) {
        q[i] = (const uint8_t *)w->data + (r0 + i) * (C / 2);
        s[i] = w->scales + (r0 + i) * nb;
    }
    __m512 lo0 = _mm512_setzero_ps(), lo1 = lo0, lo2 = lo0, lo3 = lo0, hi0 = lo0, hi1 = lo0, hi2 = lo0, hi3 = lo0;
    for (int64_t b = 0; b < nb; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
#define BASE_F4(i, lo, hi)                                                                         \
        {                                                                                          \
            __m512 sc = _mm512_set1_ps(base_e8m0(s[i][b]));                                        \
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q[i] + b * 16)));   \
            __m512 l = _mm512_permutexvar_ps(_mm512_and_si512(v, k15), lut);                       \
            __m512 h = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);                        \
            lo = _mm512_fmadd_ps(x0, _mm512_mul_ps(_mm512_permutex2var_ps(l, il0, h), sc), lo);    \
            hi = _mm512_fmadd_ps(x1, _mm512_mul_ps(_mm512_permutex2var_ps(l, il1, h), sc), hi);    \
        }
        BASE_F4(0, lo0, hi0)
        BASE_F4(1, lo1, hi1)
        BASE_F4(2, lo2, hi2)
        BASE_F4(3, lo3, hi3)
#undef BASE_F4
    }
    out[0] = base_fold(lo0, hi0), out[1] = base_fold(lo1, hi1), out[2] = base_fold(lo2, hi2), out[3] = base_fold(lo3, hi3);
}

/* ---- prototypes of a changed contract (not bit-compatible; speed only) ------------------------ */

/* MXFP8 with bf16 dot products: e4m3 codes become bf16 (value * 2^-120) by a shift and a mask,
 * x is rounded to bf16 once, vdpbf16ps adds 32 products into 16 lanes per block, and the block
 * scale (times 2^120) is applied once per block with one FMA. Half the floating-point instructions
 * of the exact kernel per weight, and x in bf16: a different result. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void proto_bf16_mxfp8(const pdb_qmat *w, int64_t r0, const __m512bh *xb,
                                                                                    float *out) {
    int64_t C = w->cols, nb = C / 32;
    __m512 acc[4];
    for (int i = 0; i < 4; i++) acc[i] = _mm512_setzero_ps();
    const __m512i m = _mm512_set1_epi16((short)0x87F0);
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < 4; i++) {
            const uint8_t *q = (const uint8_t *)w->data + (r0 + i) * C + b * 32;
            _mm_prefetch((const char *)q + 4 * C, _MM_HINT_T0); /* the same prefetch as the exact kernels */
            __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)q));
            __m512bh wb = (__m512bh)_mm512_and_si512(_mm512_slli_epi16(v, 4), m);
            uint32_t u = ((uint32_t)w->scales[(r0 + i) * nb + b] + 120u) << 23;
            float sc;
            memcpy(&sc, &u, 4);
            acc[i] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), wb, xb[b]), _mm512_set1_ps(sc), acc[i]);
        }
    }
    for (int i = 0; i < 4; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

/* the bytes of the matrix read once (sum of 64-byte words): the memory floor */
__attribute__((target("avx512f"))) static uint64_t read_bytes(const uint8_t *p, size_t n) {
    __m512i a = _mm512_setzero_si512(), b = a;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}

/* ---- driver ---------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    pdb_qfmt fmt;
    int64_t rows, cols;
    int passes; /* matmuls per timing (small matrices: enough to stay hot in cache) */
    int subnormals; /* MXFP8: keep the uniform codes' e4m3 subnormals (1 in 16; the quantizer's output has ~0.007%) */
} bcase;

static volatile uint64_t sink;

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (!__builtin_cpu_supports("avx512f")) { fprintf(stderr, "bench_qmat_kernels: needs AVX-512\n"); return 1; }
    int have_bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
    for (int i = 0; i < 16; i++) base_e2m1[i] = pdb_e2m1_to_f32((uint8_t)i);
    bcase cases[] = {
        {"mxfp8 256x2048 (L2-hot)", PDB_QF_MXFP8, 256, 2048, 200, 0},
        {"mxfp8 32768x2048 (streamed, lm_head-like)", PDB_QF_MXFP8, 32768, 2048, 1, 0},
        {"mxfp8 32768x2048 (streamed, 1/16 subnormal)", PDB_QF_MXFP8, 32768, 2048, 1, 1},
        {"mxfp4 1408x2048 (expert gate/up, L2)", PDB_QF_MXFP4, 1408, 2048, 20, 0},
        {"mxfp4 2048x1408 (expert down, L2)", PDB_QF_MXFP4, 2048, 1408, 20, 0},
        {"mxfp4 16384x2048 (streamed)", PDB_QF_MXFP4, 16384, 2048, 1, 0},
    };
    printf("kernels: one thread, T=1, best of %d alternating runs; GB/s = bytes of weights (codes + scales) / time\n", reps);
    printf("%-44s %10s %10s %8s %10s %10s  %s\n", "case", "old GB/s", "new GB/s", "new/old", "bf16 GB/s", "read GB/s", "identical");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        bcase *k = &cases[ci];
        int64_t R = k->rows, C = k->cols, nq = k->fmt == PDB_QF_MXFP8 ? R * C : R * C / 2, ns = R * C / 32;
        uint8_t *q = malloc((size_t)nq), *sc = malloc((size_t)ns);
        float *x = malloc(sizeof(float) * (size_t)C), *y0 = malloc(sizeof(float) * (size_t)R), *y1 = malloc(sizeof(float) * (size_t)R);
        float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(1, C));
        uint32_t r = 12345 + (uint32_t)ci;
        for (int64_t i = 0; i < nq; i++) {
            r = r * 1664525u + 1013904223u;
            q[i] = (uint8_t)(r >> 24);
            if (k->fmt == PDB_QF_MXFP8 && (q[i] & 0x7F) == 0x7F) q[i] ^= 1; /* what the quantizer writes: no NaN */
            if (k->fmt == PDB_QF_MXFP8 && !k->subnormals && (q[i] & 0x78) == 0) q[i] |= 0x08; /* ... and almost no subnormals */
        }
        for (int64_t i = 0; i < ns; i++) {
            r = r * 1664525u + 1013904223u;
            sc[i] = (uint8_t)(112 + (r >> 29)); /* block scales of trained weights: ~2^-15 .. 2^-8 */
        }
        for (int64_t i = 0; i < C; i++) {
            r = r * 1664525u + 1013904223u;
            x[i] = (float)((int)(r >> 16) - 32768) / 8192.0f;
        }
        pdb_qmat w = {k->fmt, R, C, q, sc, 0};
        pdb_qmat_scan_nan(&w);
        __m512bh *xb = NULL;
        if (have_bf16 && k->fmt == PDB_QF_MXFP8) {
            xb = aligned_alloc(64, sizeof(float) * (size_t)C / 2 + 64);
            /* per block, the 32 x values in vdpbf16ps' pair order: pair p of lane j = elements 2j, 2j+1 (any fixed order; speed only) */
            for (int64_t i = 0; i < C; i++) {
                uint32_t u;
                memcpy(&u, &x[i], 4);
                ((uint16_t *)xb)[i] = (uint16_t)((u + 0x8000u) >> 16);
            }
        }
        double best[4] = {1e30, 1e30, 1e30, 1e30};
        for (int rep = 0; rep < reps; rep++) {
            double t0 = now_s();
            for (int p = 0; p < k->passes; p++)
                for (int64_t r0 = 0; r0 + 4 <= R; r0 += 4)
                    (k->fmt == PDB_QF_MXFP8 ? base_mxfp8 : base_mxfp4)(&w, r0, x, y0 + r0);
            double t1 = now_s();
            for (int p = 0; p < k->passes; p++) pdb_qmat_matmul(NULL, &w, x, C, 1, y1, R, buf);
            double t2 = now_s();
            if (xb) {
                float o[4];
                for (int p = 0; p < k->passes; p++)
                    for (int64_t r0 = 0; r0 + 4 <= R; r0 += 4) {
                        proto_bf16_mxfp8(&w, r0, xb, o);
                        sink += (uint64_t)o[0];
                    }
            }
            double t3 = now_s();
            for (int p = 0; p < k->passes; p++) sink += read_bytes(q, (size_t)nq) + read_bytes(sc, (size_t)ns);
            double t4 = now_s();
            double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
            for (int j = 0; j < 4; j++)
                if (d[j] < best[j]) best[j] = d[j];
        }
        double bytes = (double)(nq + ns) * k->passes;
        int same = !memcmp(y0, y1, sizeof(float) * (size_t)R);
        char bf[32] = "-";
        if (xb) snprintf(bf, sizeof bf, "%.2f", bytes / best[2] / 1e9);
        printf("%-44s %10.2f %10.2f %8.2f %10s %10.2f  %s\n", k->name, bytes / best[0] / 1e9, bytes / best[1] / 1e9, best[0] / best[1], bf,
               bytes / best[3] / 1e9, same ? "yes" : "NO");
        free(q), free(sc), free(x), free(y0), free(y1), free(buf), free(xb);
    }
    return 0;
}
#else
int main(void) {
    printf("bench_qmat_kernels: its baseline kernels are AVX-512 (x86-64 only); nothing to compare on this CPU\n");
    return 0;
}
#endif
