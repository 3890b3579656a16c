/* pdb_qmat: row dequantization (exact) and the fixed-order dot product in scalar, AVX2+FMA and
 * AVX-512 forms (NEON: pdb_qmat_neon.c; the AVX2 decode kernels and row dequantization:
 * pdb_qmat_avx2.c), plus the threaded matmul that splits work over output rows (one pool run for
 * one matrix or, in pdb_qmat_matmul_multi, for several), with the decode kernels for T <= 2
 * tokens and the multi-row form for T >= 3 (AVX-512). The x86 kernels
 * are compiled only for x86-64 (PDB_QMAT_X86); on other CPUs the dispatch below never names them. */
#include "pdb_qmat.h"

#if defined(__x86_64__)
#define PDB_QMAT_X86 1
#include <immintrin.h>
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dtype.h"
#include "pdb_qmat_avx2.h"
#include "pdb_qmat_neon.h"

/* ---- dequantization ------------------------------------------------------------------------ */

static float lut_e4m3[256];
static float lut_e2m1[16];
static int lut_ready;

static inline float e8m0_f32(uint8_t e) { /* == pdb_e8m0_to_f32, inlined for the kernels */
    uint32_t u = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void lut_init(void) {
    if (__atomic_load_n(&lut_ready, __ATOMIC_ACQUIRE)) return;
    for (int i = 0; i < 256; i++) lut_e4m3[i] = pdb_e4m3_to_f32((uint8_t)i);
    for (int i = 0; i < 16; i++) lut_e2m1[i] = pdb_e2m1_to_f32((uint8_t)i);
    __atomic_store_n(&lut_ready, 1, __ATOMIC_RELEASE);
}

#if PDB_QMAT_X86
/* 16 e4m3 codes -> f32 bits holding value * 2^-120: the code s eeee mmm sign-extended to 32 bits
 * and shifted left by 20 leaves eeee mmm at bits 26..20 and copies of s at 31..27; the mask keeps
 * bit 31 and 26..20. As an f32 that is 2^(e-127) * 1.m (or the subnormal m * 2^-149 * 2^20 when
 * e == 0), i.e. exactly the e4m3 value times 2^-120, subnormals included. NaN codes are not
 * special here. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 e4m3x16_raw(const uint8_t *q) {
    __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 20), _mm512_set1_epi32((int)0x87F00000u)));
}

/* 16 e4m3 codes -> their exact values (the raw bits times 2^120, exact); nan: fix up the NaN
 * codes 0x7F / 0xFF (e4m3fn: sign | 0x7FC00000, as the scalar table). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 e4m3x16(const uint8_t *q, int nan) {
    __m512 raw = e4m3x16_raw(q), val = _mm512_mul_ps(raw, _mm512_set1_ps(0x1p120f));
    if (!nan) return val;
    const __m512i k7f = _mm512_set1_epi32(0x07F00000), sgn = _mm512_set1_epi32((int)0x80000000u);
    __m512i r = _mm512_castps_si512(raw);
    __mmask16 isnan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, k7f), k7f);
    return _mm512_mask_mov_ps(val, isnan, _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(r, sgn), _mm512_set1_epi32(0x7FC00000))));
}

/* 32 e2m1 values of 16 packed bytes (element 2i = low nibble of byte i) -> *w0 (elements 0-15)
 * and *w1 (16-31), looked up in lut (the 16 e2m1 values). */
__attribute__((target("avx512f"), always_inline)) static inline void e2m1x32(const uint8_t *q, __m512 lut, __m512 *w0,
                                                                            __m512 *w1) {
    const __m512i k15 = _mm512_set1_epi32(15);
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512 l = _mm512_permutexvar_ps(_mm512_and_si512(v, k15), lut), h = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
    *w0 = _mm512_permutex2var_ps(l, il0, h);
    *w1 = _mm512_permutex2var_ps(l, il1, h);
}

/* AVX-512 row dequantization: the same exact values as the scalar LUT path (every MX/bf16 value
 * is an f32, and the per-block scale is a power of two applied by one IEEE multiply). */
__attribute__((target("avx512f"))) static int row_avx512(const pdb_qmat *w, int64_t r, float *out) {
    int64_t C = w->cols;
    if (w->fmt == PDB_QF_BF16) {
        const uint8_t *p = (const uint8_t *)w->data + r * C * 2;
        int64_t c = 0;
        for (; c + 16 <= C; c += 16) {
            __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * c)));
            _mm512_storeu_ps(out + c, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        }
        for (; c < C; c++) out[c] = pdb_bf16_to_f32((uint16_t)(p[2 * c] | (p[2 * c + 1] << 8)));
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP8) {
        const uint8_t *q = (const uint8_t *)w->data + r * C, *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            __m512 sc = _mm512_set1_ps(e8m0_f32(s[b]));
            _mm512_storeu_ps(out + b * 32, _mm512_mul_ps(e4m3x16(q + b * 32, 1), sc));
            _mm512_storeu_ps(out + b * 32 + 16, _mm512_mul_ps(e4m3x16(q + b * 32 + 16, 1), sc));
        }
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP4) {
        const uint8_t *q = (const uint8_t *)w->data + r * (C / 2), *s = w->scales + r * (C / 32);
        const __m512 lut = _mm512_loadu_ps(lut_e2m1);
        for (int64_t b = 0; b < C / 32; b++) {
            __m512 sc = _mm512_set1_ps(e8m0_f32(s[b])), w0, w1;
            e2m1x32(q + b * 16, lut, &w0, &w1);
            _mm512_storeu_ps(out + b * 32, _mm512_mul_ps(w0, sc));
            _mm512_storeu_ps(out + b * 32 + 16, _mm512_mul_ps(w1, sc));
        }
        return 1;
    }
    return 0;
}
#endif /* PDB_QMAT_X86 */

static pdb_qmat_isa isa_get(void);

pdb_qmat pdb_qmat_view_rows(const pdb_qmat *q, int64_t r0, int64_t n) {
    pdb_qmat v = *q;
    int64_t C = q->cols, bytes = q->fmt == PDB_QF_F32 ? 4 * C : q->fmt == PDB_QF_BF16 ? 2 * C : q->fmt == PDB_QF_MXFP8 ? C : C / 2;
    v.rows = n;
    v.data = (const uint8_t *)q->data + r0 * bytes;
    if (q->scales) v.scales = q->scales + r0 * (C / 32);
    return v;
}

void pdb_qmat_scan_nan(pdb_qmat *w) {
    w->nan_free = 0;
    if (w->fmt != PDB_QF_MXFP8) return;
    const uint8_t *p = w->data;
    uint64_t n = (uint64_t)(w->rows * w->cols), i = 0, hit = 0;
    const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full, ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    for (; i + 8 <= n; i += 8) { /* a byte with (b & 0x7F) == 0x7F <=> a zero byte in (word & lo7) ^ lo7 */
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t y = (x & lo7) ^ lo7;
        hit |= (y - ones) & ~y & high;
    }
    for (; i < n; i++) hit |= (p[i] & 0x7F) == 0x7F;
    w->nan_free = hit == 0;
}

void pdb_qmat_row_f32(const pdb_qmat *w, int64_t r, float *out) {
    int64_t C = w->cols;
#if PDB_QMAT_X86
    if (w->fmt != PDB_QF_F32 && isa_get() == PDB_ISA_AVX512) {
        lut_init();
        if (row_avx512(w, r, out)) return;
    }
#endif
#if PDB_QMAT_HAVE_NEON
    if (w->fmt != PDB_QF_F32 && isa_get() == PDB_ISA_NEON && pdb_qmat_neon_row(w, r, out)) return;
#endif
#if PDB_QMAT_HAVE_AVX2
    if (w->fmt != PDB_QF_F32 && isa_get() == PDB_ISA_AVX2 && pdb_qmat_avx2_row(w, r, out)) return;
#endif
    switch (w->fmt) {
    case PDB_QF_F32:
        memcpy(out, (const float *)w->data + r * C, sizeof(float) * (size_t)C);
        break;
    case PDB_QF_BF16: {
        const uint8_t *p = (const uint8_t *)w->data + r * C * 2;
        for (int64_t c = 0; c < C; c++) {
            uint32_t u = (uint32_t)(p[2 * c] | (p[2 * c + 1] << 8)) << 16;
            memcpy(&out[c], &u, 4);
        }
        break;
    }
    case PDB_QF_MXFP8: {
        lut_init();
        const uint8_t *q = (const uint8_t *)w->data + r * C, *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            float sc = pdb_e8m0_to_f32(s[b]);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = lut_e4m3[q[b * 32 + j]] * sc;
        }
        break;
    }
    case PDB_QF_MXFP4: {
        lut_init();
        const uint8_t *q = (const uint8_t *)w->data + r * (C / 2), *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            float sc = pdb_e8m0_to_f32(s[b]);
            for (int j = 0; j < 16; j++) {
                uint8_t v = q[b * 16 + j];
                out[b * 32 + 2 * j] = lut_e2m1[v & 15] * sc;
                out[b * 32 + 2 * j + 1] = lut_e2m1[v >> 4] * sc;
            }
        }
        break;
    }
    }
}

/* ---- the fixed-order dot product ------------------------------------------------------------ */

static float fold32(float *l) { /* 32 lanes -> 1, lane i with lane i + half */
    for (int half = 16; half >= 1; half /= 2)
        for (int i = 0; i < half; i++) l[i] = l[i] + l[i + half];
    return l[0];
}

static float dot_scalar(const float *a, const float *b, int64_t n) {
    float l[32] = {0};
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
        for (int j = 0; j < 32; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

#if PDB_QMAT_X86
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 v0 = _mm256_setzero_ps(), v1 = v0, v2 = v0, v3 = v0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        v0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), v0);
        v1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), v1);
        v2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(b + k + 16), v2);
        v3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(b + k + 24), v3);
    }
    float l[32];
    _mm256_storeu_ps(l, v0);
    _mm256_storeu_ps(l + 8, v1);
    _mm256_storeu_ps(l + 16, v2);
    _mm256_storeu_ps(l + 24, v3);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

__attribute__((target("avx512f"))) static float fold32_avx512(__m512 lo, __m512 hi);
__attribute__((target("avx512f"))) static void fold4_avx512(const __m512 *lo, const __m512 *hi, float *out);

__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        z0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), z0);
        z1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), z1);
    }
    if (k == n) return fold32_avx512(z0, z1); /* the same fold in registers */
    float l[32];
    _mm512_storeu_ps(l, z0);
    _mm512_storeu_ps(l + 16, z1);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

/* Four rows at once against one x: four independent FMA chains hide the FMA latency; each row
 * keeps exactly dot_avx512's lane order, so out[i] == dot_avx512(x, w[i], n) bit for bit. */
__attribute__((target("avx512f"))) static void dot4_avx512(const float *x, const float *const *w, int64_t n, float *out) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
        a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w[0] + k), a0);
        b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w[1] + k), b0);
        c0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w[2] + k), c0);
        d0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w[3] + k), d0);
        a1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w[0] + k + 16), a1);
        b1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w[1] + k + 16), b1);
        c1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w[2] + k + 16), c1);
        d1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w[3] + k + 16), d1);
    }
    __m512 lo[4] = {a0, b0, c0, d0}, hi[4] = {a1, b1, c1, d1};
    if (k == n) { /* the same fold in registers */
        fold4_avx512(lo, hi, out);
        return;
    }
    for (int r = 0; r < 4; r++) {
        float l[32];
        _mm512_storeu_ps(l, lo[r]);
        _mm512_storeu_ps(l + 16, hi[r]);
        for (int j = 0; k + j < n; j++) l[j] = fmaf(x[k + j], w[r][k + j], l[j]);
        out[r] = fold32(l);
    }
}

/* The end of every four-row kernel: each row's 32 lanes (low accumulator = lanes 0-15, high =
 * 16-31) folded in fold32's order. */
__attribute__((target("avx512f"))) static float fold32_avx512(__m512 lo, __m512 hi) {
    /* fold32 in registers, the same additions in the same order: lane i + lane i+16, then i + i+8,
     * i + i+4, i + i+2, i + i+1 */
    __m512 v = _mm512_add_ps(lo, hi);
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
}

__attribute__((target("avx512f"))) static void fold4_avx512(const __m512 *lo, const __m512 *hi, float *out) {
    for (int i = 0; i < 4; i++) out[i] = fold32_avx512(lo[i], hi[i]);
}

#define PDB_QM_UNROLL_T _Pragma("GCC unroll 8")

/* ---- the multi-row kernel (T >= 3 tokens): four dequantized rows x up to five tokens ----------
 * A dot's 32 lanes are two independent halves until the fold: lanes 0-15 take k mod 32 < 16, lanes
 * 16-31 the rest (dot_avx512's low and high accumulators). So the kernel runs one half over every
 * full 32-block (20 accumulators in registers: four rows x five tokens, each weight load feeding
 * five tokens and each x load four rows), then the other half, then folds each (token, row) pair's
 * halves exactly as dot4_avx512 (= dot_avx512) does, 32-tail included: every result equals
 * dot_avx512(x_t, w[i], n) bit for bit. (dot4_avx512: one token, ten loads per eight multiply-adds.) */
__attribute__((target("avx512f"), always_inline)) static inline void half4_avx512(const float *const *w, const float *x, int64_t ldx,
                                                                                 int nt, int64_t nb, int64_t off, __m512 *acc) {
    __m512 a[5][4];
    PDB_QM_UNROLL_T
    for (int t = 0; t < 5; t++)
        PDB_QM_UNROLL_T
        for (int i = 0; i < 4; i++) a[t][i] = _mm512_setzero_ps();
    const float *w0 = w[0] + off, *w1 = w[1] + off, *w2 = w[2] + off, *w3 = w[3] + off, *xp = x + off;
    for (int64_t k = 0; k < nb * 32; k += 32) {
        __m512 wv[4] = {_mm512_loadu_ps(w0 + k), _mm512_loadu_ps(w1 + k), _mm512_loadu_ps(w2 + k), _mm512_loadu_ps(w3 + k)}, xv[5];
        PDB_QM_UNROLL_T
        for (int t = 0; t < 5; t++)
            if (t < nt) xv[t] = _mm512_loadu_ps(xp + t * ldx + k);
        PDB_QM_UNROLL_T
        for (int t = 0; t < 5; t++)
            PDB_QM_UNROLL_T
            for (int i = 0; i < 4; i++)
                if (t < nt) a[t][i] = _mm512_fmadd_ps(xv[t], wv[i], a[t][i]);
    }
    PDB_QM_UNROLL_T
    for (int t = 0; t < 5; t++)
        PDB_QM_UNROLL_T
        for (int i = 0; i < 4; i++)
            if (t < nt) acc[t * 4 + i] = a[t][i];
}

__attribute__((target("avx512f"), always_inline)) static inline void tile4_avx512(const float *const *w, const float *x, int64_t ldx,
                                                                                 int nt, int64_t n, float *out, int64_t ldo) {
    __m512 lo[20], hi[20];
    int64_t nb = n / 32, k = nb * 32;
    half4_avx512(w, x, ldx, nt, nb, 0, lo);
    half4_avx512(w, x, ldx, nt, nb, 16, hi);
    for (int t = 0; t < nt; t++) {
        if (k == n) { /* the same fold in registers */
            fold4_avx512(lo + t * 4, hi + t * 4, out + t * ldo);
            continue;
        }
        const float *xt = x + t * ldx;
        for (int i = 0; i < 4; i++) { /* the tail as dot_avx512: into the lanes, then fold32 */
            float l[32];
            _mm512_storeu_ps(l, lo[t * 4 + i]);
            _mm512_storeu_ps(l + 16, hi[t * 4 + i]);
            for (int j = 0; k + j < n; j++) l[j] = fmaf(xt[k + j], w[i][k + j], l[j]);
            out[t * ldo + i] = fold32(l);
        }
    }
}

#define PDB_QM_TILE(nt)                                                                                                \
    __attribute__((target("avx512f"))) static void tile4x##nt##_avx512(const float *const *w, const float *x, int64_t ldx, \
                                                                      int64_t n, float *out, int64_t ldo) {             \
        tile4_avx512(w, x, ldx, nt, n, out, ldo);                                                                      \
    }
PDB_QM_TILE(5)
PDB_QM_TILE(4)
PDB_QM_TILE(3)
PDB_QM_TILE(2)
PDB_QM_TILE(1)
#undef PDB_QM_TILE

/* Rows of a block (nr rows, a multiple of four, at wr[0 .. nr)) x all T tokens into y (rows r0 ..):
 * token tiles of five (the last one shorter) outer, the block's four-row groups inner, so a
 * tile's x stays near while the block's rows pass by. */
__attribute__((target("avx512f"))) static void rows_tokens_avx512(const float *const *wr, int64_t nr, int64_t r0, const float *x,
                                                                  int64_t ldx, int64_t T, int64_t n, float *y, int64_t ldy) {
    for (int64_t t = 0; t < T; t += 5) {
        int64_t nt = T - t < 5 ? T - t : 5;
        for (int64_t g = 0; g < nr; g += 4) {
            const float *const *w = wr + g, *xt = x + t * ldx;
            float *o = y + t * ldy + r0 + g;
            switch (nt) { /* nt a constant in each: the accumulators stay in registers */
            case 5: tile4x5_avx512(w, xt, ldx, n, o, ldy); break;
            case 4: tile4x4_avx512(w, xt, ldx, n, o, ldy); break;
            case 3: tile4x3_avx512(w, xt, ldx, n, o, ldy); break;
            case 2: tile4x2_avx512(w, xt, ldx, n, o, ldy); break;
            default: tile4x1_avx512(w, xt, ldx, n, o, ldy); break;
            }
        }
    }
}

/* ---- decode kernels (T <= 2 tokens): four MX rows dequantized in registers and dotted with x ---
 * Each row keeps dot_avx512's lane order (elements j < 16 of a 32-block into the low accumulator,
 * j >= 16 into the high one, k ascending), so the result equals dequantize-then-dot bit for bit.
 * The kernels run over a range of blocks [b0, b1) and carry their accumulators in acc
 * ([token][row][low, high]), so long rows go in chunks with the same additions in the same order.
 *
 * The fast kernels take each block's scale from a small table built per chunk, sct[i *
 * QM_CHUNK_BLOCKS + (b - b0)] for row i, and read it with a broadcast load.
 *
 * MXFP8: the scale is a power of two 2^(e-127) (e8m0 exponent e), and e4m3x16_raw gives each value
 * times 2^-120. raw * 2^(e-7) is one IEEE rounding of the real number value * 2^(e-127), which is
 * what the general form computes as (raw * 2^120) * 2^(e-127) (its first product is exact): the
 * same bits in every case, subnormal and overflowing results included, as long as 2^(e-7) is
 * itself a finite f32, i.e. e <= 134 (e == 0, the subnormal scale 2^-127, gives the normal 2^-7).
 * A chunk with a larger (or the NaN, 0xFF) scale, or a matrix with NaN codes, takes the general
 * form.
 *
 * MXFP4: the 16 e2m1 values times the block scale are looked up directly (a permute of the scaled
 * table, one multiply of the 16 values by the block's scale per row and block, the scale read from
 * a per-chunk f32 table, scale_table_e8m0): an elementwise product commutes with a permutation, so
 * each weight is the same rounding of the same product as dequantize-then-scale, for every scale. The
 * index vectors come from the block's 16 bytes broadcast to the four 128-bit lanes: lane j (dword
 * d = j % 4 of the block, copy c = j / 4) shifted right by 4c holds nibble c of dword d, element
 * 8d + c, in bits 3..0 (the permute ignores the bits above), and 16 bits further right nibble
 * c + 4, element 8d + c + 4: two shifts and two permutes per 32 weights, no widening. x is
 * rearranged the same way once per block (nib_x); each lane still takes one fixed k mod 32 in k
 * order, and fold4_nib folds the lanes where they lie, in fold32's pairs.
 *
 * The fast kernels also prefetch the same bytes of the next four rows (pf bytes ahead) into L1: a
 * group reads four short streams (one row each, 2 KB for a 2048-wide MXFP8 row) that the hardware
 * prefetchers pick up too late, so without it the products stream at a fraction of the memory's
 * bandwidth. L1 (T0) rather than L2 (T1), because T1 did not speed the decode on the bandwidth-
 * bound host and slowed it on a compute-bound machine (the measurements: decisions D18).
 * Prefetches change no value. */
enum { QM_FAST_MAX_E = 134, QM_CHUNK_BLOCKS = 256 };

typedef struct { __m512 v[2][4][2]; } qm_acc;

/* The kernels' row and token loops are unrolled by request: left as loops, GCC keeps the
 * accumulator arrays on the stack and every FMA goes through a store and a reload (decisions D15). */
#define PDB_QM_UNROLL _Pragma("GCC unroll 8")

/* A kernel's accumulators in and out of the carried qm_acc ([t][i][0] -> a, [t][i][1] -> b): the
 * kernels work on local arrays, which (unrolled) stay in registers across the block loop. */
__attribute__((target("avx512f"), always_inline)) static inline void acc_get(const qm_acc *acc, int nt, __m512 a[2][4], __m512 b[2][4]) {
    PDB_QM_UNROLL
    for (int t = 0; t < nt; t++)
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) a[t][i] = acc->v[t][i][0], b[t][i] = acc->v[t][i][1];
}

__attribute__((target("avx512f"), always_inline)) static inline void acc_put(qm_acc *acc, int nt, __m512 a[2][4], __m512 b[2][4]) {
    PDB_QM_UNROLL
    for (int t = 0; t < nt; t++)
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) acc->v[t][i][0] = a[t][i], acc->v[t][i][1] = b[t][i];
}

__attribute__((target("avx512f"), always_inline)) static inline void fused4_mxfp8_general(const uint8_t *const *q,
        const uint8_t *const *s, int64_t b0, int64_t b1, const float *x, int64_t ldx, int nt, int nan, qm_acc *acc) {
    __m512 lo[2][4], hi[2][4];
    acc_get(acc, nt, lo, hi);
    for (int64_t b = b0; b < b1; b++) {
        __m512 x0[2], x1[2];
        PDB_QM_UNROLL
        for (int t = 0; t < nt; t++) x0[t] = _mm512_loadu_ps(x + t * ldx + b * 32), x1[t] = _mm512_loadu_ps(x + t * ldx + b * 32 + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            __m512 sc = _mm512_set1_ps(e8m0_f32(s[i][b]));
            __m512 w0 = _mm512_mul_ps(e4m3x16(q[i] + b * 32, nan), sc), w1 = _mm512_mul_ps(e4m3x16(q[i] + b * 32 + 16, nan), sc);
            PDB_QM_UNROLL
            for (int t = 0; t < nt; t++) {
                lo[t][i] = _mm512_fmadd_ps(x0[t], w0, lo[t][i]);
                hi[t][i] = _mm512_fmadd_ps(x1[t], w1, hi[t][i]);
            }
        }
    }
    acc_put(acc, nt, lo, hi);
}

__attribute__((target("avx512f"), always_inline)) static inline void fused4_mxfp8_fast(const uint8_t *const *q, const float *sct,
        int64_t b0, int64_t b1, const float *x, int64_t ldx, int nt, int64_t pf, qm_acc *acc) {
    __m512 lo[2][4], hi[2][4];
    acc_get(acc, nt, lo, hi);
    for (int64_t b = b0; b < b1; b++, sct++) {
        __m512 x0[2], x1[2];
        PDB_QM_UNROLL
        for (int t = 0; t < nt; t++) x0[t] = _mm512_loadu_ps(x + t * ldx + b * 32), x1[t] = _mm512_loadu_ps(x + t * ldx + b * 32 + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            if (pf) _mm_prefetch((const char *)q[i] + b * 32 + pf, _MM_HINT_T0);
            __m512 sc = _mm512_set1_ps(sct[i * QM_CHUNK_BLOCKS]);
            __m512 w0 = _mm512_mul_ps(e4m3x16_raw(q[i] + b * 32), sc), w1 = _mm512_mul_ps(e4m3x16_raw(q[i] + b * 32 + 16), sc);
            PDB_QM_UNROLL
            for (int t = 0; t < nt; t++) {
                lo[t][i] = _mm512_fmadd_ps(x0[t], w0, lo[t][i]);
                hi[t][i] = _mm512_fmadd_ps(x1[t], w1, hi[t][i]);
            }
        }
    }
    acc_put(acc, nt, lo, hi);
}

/* sct: the four rows' block scales as f32 (scale_table_e8m0); each block's scaled table is the 16
 * e2m1 values times the broadcast scale, one vector multiply (until D37 the kernel loaded a
 * precomputed 256 x 16 table indexed by the scale byte instead: a load that waited on the byte's
 * load, 6-13% slower on this Zen 5 VM; the products are the same IEEE multiplies) */
__attribute__((target("avx512f"), always_inline)) static inline void fused4_mxfp4_fast(const uint8_t *const *q, const float *sct,
        int64_t b0, int64_t b1, const float *xd, int64_t ldx, int nt, int64_t pf, qm_acc *acc) {
    const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m512 lut = _mm512_loadu_ps(lut_e2m1);
    __m512 ev[2][4], od[2][4];
    acc_get(acc, nt, ev, od);
    for (int64_t b = b0; b < b1; b++, sct++) {
        __m512 xe[2], xo[2];
        PDB_QM_UNROLL
        for (int t = 0; t < nt; t++) xe[t] = _mm512_loadu_ps(xd + t * ldx + b * 32), xo[t] = _mm512_loadu_ps(xd + t * ldx + b * 32 + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            if (pf && !(b & 1)) _mm_prefetch((const char *)q[i] + b * 16 + pf, _MM_HINT_T0);
            __m512 ls = _mm512_mul_ps(lut, _mm512_set1_ps(sct[i * QM_CHUNK_BLOCKS]));
            __m512i v = _mm512_srlv_epi32(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(q[i] + b * 16))), sh);
            __m512 we = _mm512_permutexvar_ps(v, ls), wo = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 16), ls); /* index bits 3..0 */
            PDB_QM_UNROLL
            for (int t = 0; t < nt; t++) {
                ev[t][i] = _mm512_fmadd_ps(xe[t], we, ev[t][i]);
                od[t][i] = _mm512_fmadd_ps(xo[t], wo, od[t][i]);
            }
        }
    }
    acc_put(acc, nt, ev, od);
}

/* MXFP8 with AVX512BW, against x rearranged per block (QM_X_EVOD: even elements, then odd): one block's 32 codes sign-extended
 * to 16 bits in one instruction; a 32-bit lane then holds element 2d in its low half and 2d + 1 in
 * its high half, and shifting the lane left by 20 (even) or 4 (odd) leaves eeee mmm at bits 26..20
 * and copies of s at 31..27: under e4m3x16_raw's mask these are its raw bits, for one conversion
 * instruction per 32 codes instead of two. Same products, same lanes, same order. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void fused4_mxfp8_evod(const uint8_t *const *q, const float *sct,
        int64_t b0, int64_t b1, const float *xd, int64_t ldx, int nt, int64_t pf, qm_acc *acc) {
    const __m512i m = _mm512_set1_epi32((int)0x87F00000u);
    __m512 ev[2][4], od[2][4];
    acc_get(acc, nt, ev, od);
    for (int64_t b = b0; b < b1; b++, sct++) {
        __m512 xe[2], xo[2];
        PDB_QM_UNROLL
        for (int t = 0; t < nt; t++) xe[t] = _mm512_loadu_ps(xd + t * ldx + b * 32), xo[t] = _mm512_loadu_ps(xd + t * ldx + b * 32 + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            if (pf) _mm_prefetch((const char *)q[i] + b * 32 + pf, _MM_HINT_T0);
            __m512 sc = _mm512_set1_ps(sct[i * QM_CHUNK_BLOCKS]);
            __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(q[i] + b * 32)));
            __m512 we = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 20), m)), sc);
            __m512 wo = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 4), m)), sc);
            PDB_QM_UNROLL
            for (int t = 0; t < nt; t++) {
                ev[t][i] = _mm512_fmadd_ps(xe[t], we, ev[t][i]);
                od[t][i] = _mm512_fmadd_ps(xo[t], wo, od[t][i]);
            }
        }
    }
    acc_put(acc, nt, ev, od);
}

__attribute__((target("avx512f,avx512bw"))) static void k_mx8_evod_t1(const uint8_t *const *q, const float *sc, int64_t b0, int64_t b1,
                                                                     const float *xd, int64_t ldx, int64_t pf, qm_acc *acc) {
    fused4_mxfp8_evod(q, sc, b0, b1, xd, ldx, 1, pf, acc);
}
__attribute__((target("avx512f,avx512bw"))) static void k_mx8_evod_t2(const uint8_t *const *q, const float *sc, int64_t b0, int64_t b1,
                                                                     const float *xd, int64_t ldx, int64_t pf, qm_acc *acc) {
    fused4_mxfp8_evod(q, sc, b0, b1, xd, ldx, 2, pf, acc);
}

/* The two layouts' folds in place (D37): the lanes need not be put back in dot_avx512's positions
 * first, because fold32's pairs (lane i with lane i + half, the lower the first operand) can be
 * added where they lie: the same additions of the same values, so the same bits as fold32.
 * Even/odd (MXFP8 with BW; element 2p in lane p of a, 2p + 1 in lane p of b): fold32's first four
 * steps pair element 2p with 2p + 16, 2p + 8, 2p + 4, 2p + 2, i.e. lane p of a with lane p + 8,
 * + 4, + 2, + 1 of a (and the same for b), and the last step adds a's result and b's. */
__attribute__((target("avx512f"), always_inline)) static inline __m128 fold16_avx512(__m512 v) { /* lane p + lane p + 8, + 4, + 2, + 1 */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
}

__attribute__((target("avx512f"))) static void fold4_evod(const __m512 *ev_od, float *out) {
    for (int i = 0; i < 4; i++) out[i] = _mm_cvtss_f32(_mm_add_ss(fold16_avx512(ev_od[2 * i]), fold16_avx512(ev_od[2 * i + 1])));
}

/* Nibble layout (MXFP4; element 8d + c in lane 4c + d of a, 8d + c + 4 in that lane of b): fold32's
 * first step pairs element 8d + c with 8(d + 2) + c (lane 4c + d with 4c + d + 2, d < 2), the
 * second 8 * 0 + c with 8 + c (lane 4c with 4c + 1): within each 128-bit lane; the third element
 * c with c + 4 (lane 4c of a with lane 4c of b), the fourth 0 with 2 and 1 with 3 (lane 0 with 8,
 * 4 with 12), the last 0 with 1 (lane 0 with 4). */
__attribute__((target("avx512f"))) static void fold4_nib(const __m512 *ab, float *out) {
    for (int i = 0; i < 4; i++) {
        __m512 a = ab[2 * i], b = ab[2 * i + 1];
        a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(3, 2, 3, 2))); /* lane 4c + d += lane 4c + d + 2 */
        b = _mm512_add_ps(b, _mm512_permute_ps(b, _MM_SHUFFLE(3, 2, 3, 2)));
        a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(1, 1, 1, 1))); /* lane 4c += lane 4c + 1 */
        b = _mm512_add_ps(b, _mm512_permute_ps(b, _MM_SHUFFLE(1, 1, 1, 1)));
        __m512 d = _mm512_add_ps(a, b);                                      /* element c + element c + 4 */
        __m256 h = _mm256_add_ps(_mm512_castps512_ps256(d), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
        out[i] = _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    }
}

/* the same lanes moved, in the accumulators (a chunk of a long MXFP8 row that needs the general form) */
__attribute__((target("avx512f"))) static void evod_to_lohi(qm_acc *acc) {
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 4; i++) {
            __m512 e = acc->v[t][i][0], o = acc->v[t][i][1];
            acc->v[t][i][0] = _mm512_permutex2var_ps(e, il0, o);
            acc->v[t][i][1] = _mm512_permutex2var_ps(e, il1, o);
        }
}

/* The kernels specialised per token count and form (nt and nan are constants in each). */
#define PDB_QM_KERNEL(name, scty, call)                                                                                \
    __attribute__((target("avx512f"))) static void name(const uint8_t *const *q, const scty *sc, int64_t b0, int64_t b1, \
                                                        const float *x, int64_t ldx, int64_t pf, qm_acc *acc) {         \
        call;                                                                                                          \
    }
PDB_QM_KERNEL(k_mx8_fast_t1, float, fused4_mxfp8_fast(q, sc, b0, b1, x, ldx, 1, pf, acc))
PDB_QM_KERNEL(k_mx8_fast_t2, float, fused4_mxfp8_fast(q, sc, b0, b1, x, ldx, 2, pf, acc))
PDB_QM_KERNEL(k_mx4_fast_t1, float, fused4_mxfp4_fast(q, sc, b0, b1, x, ldx, 1, pf, acc))
PDB_QM_KERNEL(k_mx4_fast_t2, float, fused4_mxfp4_fast(q, sc, b0, b1, x, ldx, 2, pf, acc))
PDB_QM_KERNEL(k_mx8_gen_t1, uint8_t *const, fused4_mxfp8_general(q, sc, b0, b1, x, ldx, 1, 0, acc))
PDB_QM_KERNEL(k_mx8_gen_t2, uint8_t *const, fused4_mxfp8_general(q, sc, b0, b1, x, ldx, 2, 0, acc))
PDB_QM_KERNEL(k_mx8_gen_nan_t1, uint8_t *const, fused4_mxfp8_general(q, sc, b0, b1, x, ldx, 1, 1, acc))
PDB_QM_KERNEL(k_mx8_gen_nan_t2, uint8_t *const, fused4_mxfp8_general(q, sc, b0, b1, x, ldx, 2, 1, acc))
#undef PDB_QM_KERNEL

/* x rearranged per 32-block for a lane layout, for n = 32 * nb:
 * QM_X_EVOD (MXFP8 with BW): xd[b*32 + p] = x[b*32 + 2p], xd[b*32 + 16 + p] = x[b*32 + 2p + 1];
 * QM_X_NIB (MXFP4): xd[b*32 + j] = x[b*32 + 8(j % 4) + j / 4], xd[b*32 + 16 + j] = that + 4. */
enum { QM_X_EVOD = 1, QM_X_NIB = 2 };

__attribute__((target("avx512f"))) static void rearrange_x(const float *x, int64_t n, int layout, float *xd) {
    const __m512i ev = layout == QM_X_NIB ? _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27)
                                          : _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = layout == QM_X_NIB ? _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31)
                                          : _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t k = 0; k + 32 <= n; k += 32) {
        __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
        _mm512_storeu_ps(xd + k, _mm512_permutex2var_ps(a, ev, b));
        _mm512_storeu_ps(xd + k + 16, _mm512_permutex2var_ps(a, od, b));
    }
}

/* The MXFP8 scale table of blocks [b0, b1) of four rows, row by row: sct[i * QM_CHUNK_BLOCKS + (b -
 * b0)] = 2^(e-7) (the rebias fold), so a kernel reads row i's scale at a constant offset from one
 * pointer; it returns 0 when some e exceeds QM_FAST_MAX_E (the table is then unusable). 16 blocks
 * at a time (a last partial 16 overlaps the one before: the same values), a scalar loop only for
 * chunks under 16 blocks (rows under 512 wide). (MXFP4: scale_table_e8m0 below.) */
__attribute__((target("avx512f"))) static int scale_table(const uint8_t *const *s, int64_t b0, int64_t b1, float *sct) {
    const __m512i big = _mm512_set1_epi32(QM_FAST_MAX_E), bias = _mm512_set1_epi32(120);
    int64_t n = b1 - b0;
    __mmask16 over = 0;
    int tail_over = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *si = s[i] + b0;
        float *o = sct + i * QM_CHUNK_BLOCKS;
        if (n >= 16)
            for (int64_t k = 0; k < n; k += 16) {
                if (k + 16 > n) k = n - 16;
                __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(si + k)));
                over |= _mm512_cmpgt_epi32_mask(e, big);
                _mm512_storeu_si512(o + k, _mm512_slli_epi32(_mm512_add_epi32(e, bias), 23));
            }
        else
            for (int64_t k = 0; k < n; k++) {
                uint32_t e = si[k], u = (e + 120u) << 23;
                tail_over |= e > QM_FAST_MAX_E;
                memcpy(&o[k], &u, 4);
            }
    }
    return !over && !tail_over;
}

/* The MXFP4 kernels' scale table, laid out as scale_table's: sct[i * QM_CHUNK_BLOCKS + (b - b0)] =
 * the e8m0 scale of row i, block b, as an f32 (e8m0_f32: 2^-127 for 0, NaN for 0xFF), exact. */
__attribute__((target("avx512f"))) static void scale_table_e8m0(const uint8_t *const *s, int64_t b0, int64_t b1, float *sct) {
    const __m512i zero = _mm512_setzero_si512(), ff = _mm512_set1_epi32(0xFF);
    int64_t n = b1 - b0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *si = s[i] + b0;
        float *o = sct + i * QM_CHUNK_BLOCKS;
        if (n >= 16)
            for (int64_t k = 0; k < n; k += 16) {
                if (k + 16 > n) k = n - 16;
                __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(si + k))), u = _mm512_slli_epi32(e, 23);
                u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(e, zero), _mm512_set1_epi32(0x00400000));
                u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(e, ff), _mm512_set1_epi32(0x7FC00000));
                _mm512_storeu_si512(o + k, u);
            }
        else
            for (int64_t k = 0; k < n; k++) o[k] = e8m0_f32(si[k]);
    }
}

/* Four MXFP8 / MXFP4 rows r0.. against T <= 2 tokens: y[t * ldy + r0 + i]. x is the matmul's x
 * and xd its rearranged copy (ldx = cols; MXFP4: QM_X_NIB, MXFP8 when the CPU has AVX512BW:
 * QM_X_EVOD, else NULL). */
/* BF16: dot_avx512's loop with each weight widened in the register (bf16 -> f32 is exact). */
__attribute__((target("avx512f"), always_inline)) static inline void fused4_bf16(const uint8_t *const *q, int64_t nb, const float *x,
        int64_t ldx, int nt, int64_t pf, qm_acc *acc) {
    __m512 lo[2][4], hi[2][4];
    PDB_QM_UNROLL
    for (int t = 0; t < nt; t++)
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) lo[t][i] = hi[t][i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 x0[2], x1[2];
        PDB_QM_UNROLL
        for (int t = 0; t < nt; t++) x0[t] = _mm512_loadu_ps(x + t * ldx + b * 32), x1[t] = _mm512_loadu_ps(x + t * ldx + b * 32 + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint8_t *p = q[i] + b * 64;
            _mm_prefetch((const char *)p + pf, _MM_HINT_T0);
            __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
            __m512 w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 32))), 16));
            PDB_QM_UNROLL
            for (int t = 0; t < nt; t++) {
                lo[t][i] = _mm512_fmadd_ps(x0[t], w0, lo[t][i]);
                hi[t][i] = _mm512_fmadd_ps(x1[t], w1, hi[t][i]);
            }
        }
    }
    acc_put(acc, nt, lo, hi);
}

__attribute__((target("avx512f"))) static void k_bf16_t1(const uint8_t *const *q, int64_t nb, const float *x, int64_t ldx, int64_t pf, qm_acc *acc) {
    fused4_bf16(q, nb, x, ldx, 1, pf, acc);
}
__attribute__((target("avx512f"))) static void k_bf16_t2(const uint8_t *const *q, int64_t nb, const float *x, int64_t ldx, int64_t pf, qm_acc *acc) {
    fused4_bf16(q, nb, x, ldx, 2, pf, acc);
}

__attribute__((target("avx512f"))) static void fused4_rows(const pdb_qmat *w, int64_t r0, const float *x, int64_t ldx, const float *xd,
                                                           int64_t T, float *y, int64_t ldy) {
    int64_t C = w->cols, nb = C / 32;
    if (w->fmt == PDB_QF_BF16) {
        const uint8_t *q[4];
        for (int i = 0; i < 4; i++) q[i] = (const uint8_t *)w->data + (r0 + i) * C * 2;
        qm_acc acc;
        (T == 2 ? k_bf16_t2 : k_bf16_t1)(q, nb, x, ldx, 8 * C, &acc);
        for (int64_t t = 0; t < T; t++) {
            float o[4];
            __m512 lo[4], hi[4];
            for (int i = 0; i < 4; i++) lo[i] = acc.v[t][i][0], hi[i] = acc.v[t][i][1];
            fold4_avx512(lo, hi, o);
            for (int i = 0; i < 4; i++) y[t * ldy + r0 + i] = o[i];
        }
        return;
    }
    int mx8 = w->fmt == PDB_QF_MXFP8;
    const uint8_t *q[4], *s[4];
    for (int i = 0; i < 4; i++) {
        q[i] = (const uint8_t *)w->data + (r0 + i) * (mx8 ? C : C / 2);
        s[i] = w->scales + (r0 + i) * nb;
    }
    int64_t pf = 4 * (mx8 ? C : C / 2); /* prefetch distance: the same place in the next four rows */
    for (int64_t off = 0; off < 4 * nb; off += 64) _mm_prefetch((const char *)s[0] + 4 * nb + off, _MM_HINT_T0); /* their scales */
    qm_acc acc;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 4; i++) acc.v[t][i][0] = acc.v[t][i][1] = _mm512_setzero_ps();
    float sct[4 * QM_CHUNK_BLOCKS];
    int evod = !mx8, mx8_evod = mx8 && xd && w->nan_free; /* accumulators in MXFP4's nibble or MXFP8's even/odd lanes */
    for (int64_t b0 = 0; b0 < nb; b0 += QM_CHUNK_BLOCKS) {
        int64_t b1 = b0 + QM_CHUNK_BLOCKS < nb ? b0 + QM_CHUNK_BLOCKS : nb;
        if (!mx8) {
            scale_table_e8m0(s, b0, b1, sct);
            (T == 2 ? k_mx4_fast_t2 : k_mx4_fast_t1)(q, sct, b0, b1, xd, C, pf, &acc);
        } else if (w->nan_free && scale_table(s, b0, b1, sct)) {
            if (mx8_evod) (T == 2 ? k_mx8_evod_t2 : k_mx8_evod_t1)(q, sct, b0, b1, xd, C, pf, &acc), evod = 1;
            else (T == 2 ? k_mx8_fast_t2 : k_mx8_fast_t1)(q, sct, b0, b1, x, ldx, pf, &acc);
        } else {
            if (evod) evod_to_lohi(&acc), evod = 0; /* the general kernels use dot_avx512's lanes */
            mx8_evod = 0;
            if (w->nan_free) (T == 2 ? k_mx8_gen_t2 : k_mx8_gen_t1)(q, s, b0, b1, x, ldx, 0, &acc);
            else (T == 2 ? k_mx8_gen_nan_t2 : k_mx8_gen_nan_t1)(q, s, b0, b1, x, ldx, 0, &acc);
        }
    }
    for (int64_t t = 0; t < T; t++) {
        float o[4];
        if (!evod) {
            __m512 lo[4], hi[4];
            for (int i = 0; i < 4; i++) lo[i] = acc.v[t][i][0], hi[i] = acc.v[t][i][1];
            fold4_avx512(lo, hi, o);
        } else if (mx8) fold4_evod(&acc.v[t][0][0], o);
        else fold4_nib(&acc.v[t][0][0], o);
        for (int i = 0; i < 4; i++) y[t * ldy + r0 + i] = o[i];
    }
}
#endif /* PDB_QMAT_X86 */

static pdb_qmat_isa isa_cur = (pdb_qmat_isa)-1;

pdb_qmat_isa pdb_qmat_isa_detect(void) {
#if PDB_QMAT_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return PDB_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PDB_ISA_AVX2;
#elif PDB_QMAT_HAVE_NEON
    return PDB_ISA_NEON; /* part of the aarch64 base ISA: every aarch64 CPU has it */
#endif
    return PDB_ISA_SCALAR;
}

int pdb_qmat_isa_supported(pdb_qmat_isa isa) {
    if (isa == PDB_ISA_SCALAR) return 1;
#if PDB_QMAT_X86
    __builtin_cpu_init();
    if (isa == PDB_ISA_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == PDB_ISA_AVX512) return __builtin_cpu_supports("avx512f");
#elif PDB_QMAT_HAVE_NEON
    if (isa == PDB_ISA_NEON) return 1;
#endif
    return 0;
}

const char *pdb_qmat_isa_name(pdb_qmat_isa isa) {
    switch (isa) {
    case PDB_ISA_AVX512: return "avx512";
    case PDB_ISA_AVX2: return "avx2+fma";
    case PDB_ISA_NEON: return "neon";
    default: return "scalar";
    }
}

static pdb_qmat_isa isa_get(void) {
    pdb_qmat_isa i = __atomic_load_n(&isa_cur, __ATOMIC_RELAXED);
    if ((int)i < 0) {
        i = pdb_qmat_isa_detect();
        __atomic_store_n(&isa_cur, i, __ATOMIC_RELAXED);
    }
    return i;
}

pdb_qmat_isa pdb_qmat_isa_set(pdb_qmat_isa isa) {
    pdb_qmat_isa old = isa_get();
    if (!pdb_qmat_isa_supported(isa)) /* AVX-512 falls back to AVX2 where that exists, the rest to scalar */
        isa = isa == PDB_ISA_AVX512 && pdb_qmat_isa_supported(PDB_ISA_AVX2) ? PDB_ISA_AVX2 : PDB_ISA_SCALAR;
    __atomic_store_n(&isa_cur, isa, __ATOMIC_RELAXED);
    return old;
}

float pdb_qmat_dot(const float *a, const float *b, int64_t n) {
    switch (isa_get()) {
#if PDB_QMAT_X86
    case PDB_ISA_AVX512: return dot_avx512(a, b, n);
    case PDB_ISA_AVX2: return dot_avx2(a, b, n);
#endif
#if PDB_QMAT_HAVE_NEON
    case PDB_ISA_NEON: return pdb_qmat_neon_dot(a, b, n);
#endif
    default: return dot_scalar(a, b, n);
    }
}

void pdb_qmat_dots(const float *x, const float *w, int64_t n, int64_t ldw, int64_t m, float *out) {
    int64_t k = 0;
#if PDB_QMAT_X86
    if (isa_get() == PDB_ISA_AVX512)
        for (; k + 4 <= m; k += 4) {
            const float *wr[4] = {w + k * ldw, w + (k + 1) * ldw, w + (k + 2) * ldw, w + (k + 3) * ldw};
            dot4_avx512(x, wr, n, out + k);
        }
#endif
    for (; k < m; k++) out[k] = pdb_qmat_dot(x, w + k * ldw, n);
}

#if PDB_QMAT_X86
/* Two rows against four x per 32-element step (12 loads for 16 FMAs; dot4_avx512 needs 10 for 8):
 * each (x, row) pair keeps dot_avx512's lanes and fold. */
__attribute__((target("avx512f"))) static void dots2x4_avx512(const float *const *x, const float *w0, const float *w1, int64_t n,
                                                              float *o0, float *o1) {
    __m512 lo[2][4], hi[2][4];
    PDB_QM_UNROLL
    for (int i = 0; i < 4; i++) lo[0][i] = hi[0][i] = lo[1][i] = hi[1][i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 32) {
        __m512 a0 = _mm512_loadu_ps(w0 + k), a1 = _mm512_loadu_ps(w0 + k + 16), b0 = _mm512_loadu_ps(w1 + k),
               b1 = _mm512_loadu_ps(w1 + k + 16);
        PDB_QM_UNROLL
        for (int i = 0; i < 4; i++) {
            __m512 x0 = _mm512_loadu_ps(x[i] + k), x1 = _mm512_loadu_ps(x[i] + k + 16);
            lo[0][i] = _mm512_fmadd_ps(x0, a0, lo[0][i]);
            hi[0][i] = _mm512_fmadd_ps(x1, a1, hi[0][i]);
            lo[1][i] = _mm512_fmadd_ps(x0, b0, lo[1][i]);
            hi[1][i] = _mm512_fmadd_ps(x1, b1, hi[1][i]);
        }
    }
    fold4_avx512(lo[0], hi[0], o0);
    fold4_avx512(lo[1], hi[1], o1);
}
#endif

void pdb_qmat_dots_xs(const float *x, int64_t ldx, int64_t nx, const float *w, int64_t ldw, int64_t m, int64_t n, float *out,
                      int64_t ldo) {
    int64_t r = 0, i0 = 0;
#if PDB_QMAT_X86
    if (isa_get() == PDB_ISA_AVX512 && n % 32 == 0) {
        for (; i0 + 4 <= nx; i0 += 4) { /* row pairs of this group of four x, then its odd last row below */
            const float *xs[4] = {x + i0 * ldx, x + (i0 + 1) * ldx, x + (i0 + 2) * ldx, x + (i0 + 3) * ldx};
            for (r = 0; r + 2 <= m; r += 2) {
                float o0[4], o1[4];
                dots2x4_avx512(xs, w + r * ldw, w + (r + 1) * ldw, n, o0, o1);
                for (int i = 0; i < 4; i++) out[(i0 + i) * ldo + r] = o0[i], out[(i0 + i) * ldo + r + 1] = o1[i];
            }
            for (int i = 0; r < m && i < 4; i++) out[(i0 + i) * ldo + r] = pdb_qmat_dot(xs[i], w + r * ldw, n);
        }
    }
#else
    (void)r;
#endif
    for (; i0 < nx; i0++) pdb_qmat_dots(x + i0 * ldx, w, n, ldw, m, out + i0 * ldo);
}

#if PDB_QMAT_X86
__attribute__((target("avx512f"))) static void axpy_avx512(float *y, float a, const float *x, int64_t n) {
    __m512 va = _mm512_set1_ps(a);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) _mm512_storeu_ps(y + c, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + c), _mm512_loadu_ps(y + c)));
    for (; c < n; c++) y[c] = fmaf(a, x[c], y[c]);
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float a, const float *x, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(y + c, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c)));
    for (; c < n; c++) y[c] = fmaf(a, x[c], y[c]);
}
#endif

static pdb_qmat_isa isa_get(void);

void pdb_qmat_axpy(float *y, float a, const float *x, int64_t n) {
    switch (isa_get()) { /* every path: one fused multiply-add per element, so identical results */
#if PDB_QMAT_X86
    case PDB_ISA_AVX512: axpy_avx512(y, a, x, n); return;
    case PDB_ISA_AVX2: axpy_avx2(y, a, x, n); return;
#endif
#if PDB_QMAT_HAVE_NEON
    case PDB_ISA_NEON: pdb_qmat_neon_axpy(y, a, x, n); return;
#endif
    default:
        for (int64_t c = 0; c < n; c++) y[c] = fmaf(a, x[c], y[c]);
    }
}

#if PDB_QMAT_X86
/* Columns [c, c + 16 nv) of every output, eight outputs at a time: each broadcast p feeds nv FMAs
 * (with nv = 2, loads rather than FMAs bound the loop); nv is a constant in each use. */
__attribute__((target("avx512f"), always_inline)) static inline void mix_cols(float *out, int64_t ldo, const float *p, int64_t ldp,
        int64_t m, const float *x, int64_t ldx, int64_t n, int64_t c, int nv) {
    for (int64_t i0 = 0; i0 < m; i0 += 8) {
        int64_t g = m - i0 < 8 ? m - i0 : 8;
        __m512 acc[8][2];
        PDB_QM_UNROLL
        for (int i = 0; i < 8; i++)
            PDB_QM_UNROLL
            for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            __m512 xv[2];
            PDB_QM_UNROLL
            for (int v = 0; v < nv; v++) xv[v] = _mm512_loadu_ps(x + j * ldx + c + 16 * v);
            PDB_QM_UNROLL
            for (int i = 0; i < 8; i++)
                if (i < g) {
                    __m512 pv = _mm512_set1_ps(p[(i0 + i) * ldp + j]);
                    PDB_QM_UNROLL
                    for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(pv, xv[v], acc[i][v]);
                }
        }
        for (int i = 0; i < g; i++)
            for (int v = 0; v < nv; v++) _mm512_storeu_ps(out + (i0 + i) * ldo + c + 16 * v, acc[i][v]);
    }
}

__attribute__((target("avx512f"))) static void mix_avx512(float *out, int64_t ldo, const float *p, int64_t ldp, int64_t m,
                                                          const float *x, int64_t ldx, int64_t n, int64_t k) {
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) mix_cols(out, ldo, p, ldp, m, x, ldx, n, c, 2);
    for (; c + 16 <= k; c += 16) mix_cols(out, ldo, p, ldp, m, x, ldx, n, c, 1);
    for (; c < k; c++) /* columns past the last 16 */
        for (int64_t i = 0; i < m; i++) {
            float a = 0;
            for (int64_t j = 0; j < n; j++) a = fmaf(p[i * ldp + j], x[j * ldx + c], a);
            out[i * ldo + c] = a;
        }
}
#endif

void pdb_qmat_mix(float *out, int64_t ldo, const float *p, int64_t ldp, int64_t m, const float *x, int64_t ldx, int64_t n,
                  int64_t k) {
#if PDB_QMAT_X86
    if (isa_get() == PDB_ISA_AVX512) {
        mix_avx512(out, ldo, p, ldp, m, x, ldx, n, k);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++) { /* the definition (NEON: its axpy, one FMA chain per element) */
        memset(out + i * ldo, 0, sizeof(float) * (size_t)k);
        for (int64_t j = 0; j < n; j++) pdb_qmat_axpy(out + i * ldo, p[i * ldp + j], x + j * ldx, k);
    }
}

/* ---- matmul: threads claim blocks of output rows ----------------------------------------------
 * One pool run covers the output rows of every job of a pdb_qmat_matmul_multi call (a plain matmul
 * is one job): the rows of jobs 0, 1, ... are numbered one after the other and threads claim
 * ranges of that numbering, never across a job's end. Guided self-scheduling: each claim takes
 * 1/(2 * threads) of the rows still left (a multiple of four, at least four), so threads start on
 * long contiguous ranges (the kernels' prefetch runs ahead within a range, and there are few
 * claims) and finish on short ones (balance). Which thread computes a row, and which other jobs
 * share the run, never changes its value: every row goes through qm_rows with its own job's
 * weights, x and T, exactly as a lone matmul would. The last claims are one four-row group (the
 * kernels' row group), the smallest unit, so that threads wait least for the run's last claim
 * (the waits measured with 16- and 4-row final claims: decisions D18). */

typedef struct {
    const pdb_qmat_job *jobs;
    int n_jobs;
    int64_t total;   /* rows of all jobs */
    float *rowbuf;   /* [threads, stride] */
    int64_t stride;  /* 4 * the widest job's cols */
    int nth;
    int gang;             /* jobs per unit (a gang; 1: each job alone) */
    pdb_qmat_post_fn post;
    _Alignas(64) _Atomic int64_t next; /* first row not yet claimed (its own cache line: claims do not evict the fields above) */
    char pad[56];
} qm_ctx;

/* A thread's rearranged x (the head of its rowbuf slice), the job input and layout it was made from:
 * jobs that share an x (gate and up of one token) rearrange it once per thread. */
typedef struct {
    const float *x;
    int64_t ldx, n, cols;
    int layout;
    float *blk;      /* the multi-row path's dequantized rows (QM_BLOCK_ROWS x blk_cols), made on first use, freed by the task */
    int64_t blk_cols;
} qm_xd;

enum { QM_BLOCK_ROWS = 16 }; /* rows dequantized together for T >= 3 tokens (16 x 4096 floats: 256 KB, in L2) */

static int64_t job_rows(const pdb_qmat_job *j) { return j->n > 0 && j->w->rows > 0 ? j->w->rows : 0; }

static int job_fused(const pdb_qmat_job *j) { /* the decode kernels (AVX-512: four rows at a time; AVX2: two; NEON: one) */
    pdb_qfmt f = j->w->fmt;
    pdb_qmat_isa i = isa_get();
    return (i == PDB_ISA_AVX512 || i == PDB_ISA_AVX2 || i == PDB_ISA_NEON) && f != PDB_QF_F32 && j->n <= 2 && j->w->cols % 32 == 0;
}

static int has_bw(void);

/* The multi-row scratch of a task for rows of `cols` (0: out of memory; the caller then takes the
 * four-row path, the same values). */
static int qm_block(qm_xd *xs, int64_t cols) {
    if (xs->blk && xs->blk_cols >= cols) return 1;
    free(xs->blk);
    xs->blk = aligned_alloc(64, (sizeof(float) * (size_t)(QM_BLOCK_ROWS * cols) + 63) / 64 * 64); /* rows on cache lines: no split loads */
    xs->blk_cols = xs->blk ? cols : 0;
    return xs->blk != NULL;
}

/* Rows [r0, r1) of job j on `thread` (its scratch: rowbuf + thread * stride). */
static void qm_rows(const qm_ctx *c, const pdb_qmat_job *j, int64_t r0, int64_t r1, int thread, qm_xd *xs) {
    const pdb_qmat *w = j->w;
    const float *x = j->x;
    int64_t C = w->cols, T = j->n, ldx = j->ldx, ldy = j->ldy;
    float *y = j->y, *row = c->rowbuf + (int64_t)thread * c->stride;
#if PDB_QMAT_HAVE_NEON
    if (job_fused(j)) {
        pdb_qmat_neon_rows(w, r0, r1, x, ldx, T, y, ldy);
        return;
    }
#endif
#if PDB_QMAT_HAVE_AVX2
    if (job_fused(j) && isa_get() == PDB_ISA_AVX2) {
        pdb_qmat_avx2_rows(w, r0, r1, x, ldx, T, y, ldy);
        return;
    }
#endif
#if PDB_QMAT_X86
    if (job_fused(j)) { /* AVX-512 */
        const float *xd = NULL; /* the tokens rearranged per 32-block (MXFP4, and MXFP8 with AVX512BW) */
        int layout = w->fmt == PDB_QF_MXFP4 ? QM_X_NIB : QM_X_EVOD;
        if (w->fmt == PDB_QF_MXFP4 || (w->fmt == PDB_QF_MXFP8 && has_bw())) {
            if (xs->x != x || xs->ldx != ldx || xs->n != T || xs->cols != C || xs->layout != layout) {
                for (int64_t t = 0; t < T; t++) rearrange_x(x + t * ldx, C, layout, row + t * C);
                xs->x = x, xs->ldx = ldx, xs->n = T, xs->cols = C, xs->layout = layout;
            }
            xd = row;
        }
        for (; r0 + 4 <= r1; r0 += 4) fused4_rows(w, r0, x, ldx, xd, T, y, ldy);
        if (r0 == r1) return;
        if (xd) row += C * 2; /* the tail rows below: keep clear of the x copy */
    }
    if (row == c->rowbuf + (int64_t)thread * c->stride) xs->x = NULL; /* the rows below overwrite any x copy */
    if (isa_get() == PDB_ISA_AVX512 && T >= 3 && r0 + 4 <= r1 && qm_block(xs, C)) { /* blocks of rows x tiles of tokens */
        for (; r0 + 4 <= r1;) {
            int64_t nr = (r1 - r0) / 4 * 4 < QM_BLOCK_ROWS ? (r1 - r0) / 4 * 4 : QM_BLOCK_ROWS;
            const float *wr[QM_BLOCK_ROWS];
            for (int64_t i = 0; i < nr; i++) {
                if (w->fmt == PDB_QF_F32) wr[i] = (const float *)w->data + (r0 + i) * C;
                else {
                    pdb_qmat_row_f32(w, r0 + i, xs->blk + i * C);
                    wr[i] = xs->blk + i * C;
                }
            }
            rows_tokens_avx512(wr, nr, r0, x, ldx, T, C, y, ldy);
            r0 += nr;
        }
    }
    if (isa_get() == PDB_ISA_AVX512) /* groups of four rows */
        for (; r0 + 4 <= r1; r0 += 4) {
            const float *wr[4];
            for (int i = 0; i < 4; i++) {
                if (w->fmt == PDB_QF_F32) wr[i] = (const float *)w->data + (r0 + i) * C;
                else {
                    pdb_qmat_row_f32(w, r0 + i, row + i * C);
                    wr[i] = row + i * C;
                }
            }
            for (int64_t t = 0; t < T; t++) {
                float o[4];
                dot4_avx512(x + t * ldx, wr, C, o);
                for (int i = 0; i < 4; i++) y[t * ldy + r0 + i] = o[i];
            }
        }
#endif
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = row;
        if (w->fmt == PDB_QF_F32) wr = (const float *)w->data + r * C;
        else pdb_qmat_row_f32(w, r, row);
        for (int64_t t = 0; t < T; t++) y[t * ldy + r] = pdb_qmat_dot(x + t * ldx, wr, C);
    }
}

static int64_t unit_rows(const qm_ctx *c, const pdb_qmat_job *j) { /* a gang's rows: 0 when every member is skipped */
    for (int m = 0; m < c->gang; m++)
        if (job_rows(&j[m])) return j->w->rows;
    return 0;
}

/* Rows [r0, r1) of the gang whose first job is j: every member's, then the post. */
static void qm_unit(const qm_ctx *c, const pdb_qmat_job *j, int64_t r0, int64_t r1, int thread, qm_xd *xs) {
    for (int m = 0; m < c->gang; m++)
        if (job_rows(&j[m])) qm_rows(c, &j[m], r0, r1, thread, xs);
    if (c->post) c->post(j, r0, r1);
}

static void qm_task(void *vc, int64_t task, int thread) {
    qm_ctx *c = vc;
    qm_xd xs = {0};
    int64_t r0 = atomic_load_explicit(&c->next, memory_order_relaxed), r1, base;
    int j;
    for (;;) {
        do {
            if (r0 >= c->total) {
                free(xs.blk);
                return;
            }
            for (j = 0, base = 0; r0 >= base + unit_rows(c, &c->jobs[j]); j += c->gang) base += unit_rows(c, &c->jobs[j]);
            int64_t len = (c->total - r0) / (2 * c->nth) & ~(int64_t)3, end = base + unit_rows(c, &c->jobs[j]);
            r1 = r0 + (len > 4 ? len : 4);
            if (r1 > end) r1 = end;
        } while (!atomic_compare_exchange_weak_explicit(&c->next, &r0, r1, memory_order_relaxed, memory_order_relaxed));
        qm_unit(c, &c->jobs[j], r0 - base, r1 - base, thread, &xs);
        r0 = atomic_load_explicit(&c->next, memory_order_relaxed);
    }
}

static int qm_bw = -1; /* AVX512BW in use (the MXFP8 even/odd kernel); -1 = not checked yet */

static int cpu_has_bw(void) {
#if PDB_QMAT_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") ? 1 : 0;
#else
    return 0;
#endif
}

static int has_bw(void) {
    int v = __atomic_load_n(&qm_bw, __ATOMIC_RELAXED);
    if (v < 0) {
        v = cpu_has_bw();
        __atomic_store_n(&qm_bw, v, __ATOMIC_RELAXED);
    }
    return v;
}

int pdb_qmat_use_bw(int on) {
    int old = has_bw();
    __atomic_store_n(&qm_bw, on && cpu_has_bw() ? 1 : 0, __ATOMIC_RELAXED);
    return old;
}

void pdb_qmat_matmul_gangs(pdb_pool *pool, const pdb_qmat_job *jobs, int n_jobs, int gang, pdb_qmat_post_fn post,
                           float *rowbuf) {
    PDB_ASSERT(gang >= 1 && n_jobs % gang == 0, "matmul_gangs: jobs not a whole number of gangs");
    qm_ctx c = {jobs, n_jobs, 0, rowbuf, 0, pdb_pool_threads(pool), gang, post, 0, {0}};
    int64_t widest = 0;
    for (int i = 0; i < n_jobs; i++) {
        PDB_ASSERT(jobs[i].w->rows == jobs[i - i % gang].w->rows, "matmul_gangs: a gang's members differ in rows");
        if (jobs[i].w->cols > widest) widest = jobs[i].w->cols;
    }
    for (int i = 0; i < n_jobs; i += gang) c.total += unit_rows(&c, &jobs[i]);
    if (c.total <= 0) return;
    c.stride = 4 * widest;
    lut_init();
    if (!pool || c.nth == 1 || c.total <= 4) {
        qm_xd xs = {0};
        for (int i = 0; i < n_jobs; i += gang)
            if (unit_rows(&c, &jobs[i])) qm_unit(&c, &jobs[i], 0, unit_rows(&c, &jobs[i]), 0, &xs);
        free(xs.blk);
        return;
    }
    /* one task per thread; each claims ranges until none are left (a late thread finds none) */
    int64_t tasks = (c.total + 3) / 4;
    pdb_pool_run(pool, tasks < c.nth ? tasks : c.nth, qm_task, &c);
}

void pdb_qmat_matmul_multi(pdb_pool *pool, const pdb_qmat_job *jobs, int n_jobs, float *rowbuf) {
    pdb_qmat_matmul_gangs(pool, jobs, n_jobs, 1, NULL, rowbuf);
}

void pdb_qmat_matmul(pdb_pool *pool, const pdb_qmat *w, const float *x, int64_t ldx, int64_t T, float *y,
                     int64_t ldy, float *rowbuf) {
    pdb_qmat_job j = {w, x, ldx, T, y, ldy};
    pdb_qmat_matmul_multi(pool, &j, 1, rowbuf);
}
