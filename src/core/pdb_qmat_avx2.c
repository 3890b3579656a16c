/* pdb_qmat_avx2: AVX2+FMA row dequantization and the decode kernel (see pdb_qmat_avx2.h for the
 * contract). Built on x86-64 only, with the instruction set chosen per function (target
 * attributes), so a build for any x86-64 runs it where the CPU has AVX2 and FMA (pdb_qmat.c
 * dispatches here only then). Dequantization is exact by construction, as in pdb_qmat.c:
 * bf16 widened by a shift; e4m3 sign-extended, shifted and masked into value * 2^-120, then
 * either one multiply by 2^(e-7) (one rounding of value * 2^(e-127): the same bits as the exact
 * value times the e8m0 scale whenever 2^(e-7) is a finite f32, e <= 134, and the matrix has no NaN
 * codes: pdb_qmat.c's MXFP8 argument) or, otherwise, the exact multiply by 2^120, the NaN fix-up
 * and the multiply by the e8m0 scale; e2m1 looked up in the block's table of the 8 magnitudes
 * times the scale and in the table of the 8 negative values times the scale (each entry one IEEE
 * multiply, what lut[code] * scale is in the scalar reference, NaN scales included), the sign
 * bit of the nibble choosing between them. */
#include "pdb_qmat_avx2.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "pdb_dtype.h"

/* The kernels' small loops unrolled by request (left as loops, GCC keeps the block's weights and
 * the accumulators on the stack: pdb_qmat.c's decisions D15). */
#define QA_UNROLL _Pragma("GCC unroll 4")

static inline float e8m0_f32(uint8_t e) { /* == pdb_e8m0_to_f32, inlined for the kernels */
    uint32_t u = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

enum { QA_FAST_MAX_E = 134 }; /* the largest e8m0 exponent whose 2^(e-7) is a finite f32 */

/* The 16 e2m1 values (pdb_e2m1_to_f32): [0..7] the non-negative ones, [8..15] their negatives.
 * Built at first use (a race only writes the same values twice). */
static float e2m1_lut[16];
static int e2m1_ready;

static void e2m1_init(void) {
    if (__atomic_load_n(&e2m1_ready, __ATOMIC_ACQUIRE)) return;
    for (int i = 0; i < 16; i++) e2m1_lut[i] = pdb_e2m1_to_f32((uint8_t)i);
    __atomic_store_n(&e2m1_ready, 1, __ATOMIC_RELEASE);
}

/* ---- one 32-block -> 32 exact weights in natural order: w[r] = elements 8r..8r+7 ------------- */

__attribute__((target("avx2,fma"), always_inline)) static inline void blk_bf16(const uint8_t *p, __m256 *w) {
    QA_UNROLL
    for (int r = 0; r < 4; r++)
        w[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * r))), 16));
}

/* 32 e4m3 codes -> value * 2^-120 bits (pdb_qmat.c's e4m3x16_raw, eight at a time) */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256i e4m3x8_raw(const uint8_t *q) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q));
    return _mm256_and_si256(_mm256_slli_epi32(v, 20), _mm256_set1_epi32((int)0x87F00000u));
}

/* The general form (a block scale above QA_FAST_MAX_E, or NaN codes possible): the exact value
 * (raw * 2^120), NaN codes made sign | 0x7FC00000 as the scalar table has them, times the e8m0
 * scale. Out of line: rare in trained weights, and it keeps its constants out of the kernels'
 * registers. */
__attribute__((target("avx2,fma"), noinline)) static void blk_mxfp8_general(const uint8_t *q, uint8_t e, int nan_free, __m256 *w) {
    const __m256 sc = _mm256_set1_ps(e8m0_f32(e)), big = _mm256_set1_ps(0x1p120f);
    const __m256i k7f = _mm256_set1_epi32(0x07F00000), sgn = _mm256_set1_epi32((int)0x80000000u), qn = _mm256_set1_epi32(0x7FC00000);
    for (int r = 0; r < 4; r++) {
        __m256i raw = e4m3x8_raw(q + 8 * r);
        __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(raw), big);
        if (!nan_free) {
            __m256i isnan = _mm256_cmpeq_epi32(_mm256_and_si256(raw, k7f), k7f);
            __m256 qv = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(raw, sgn), qn));
            v = _mm256_blendv_ps(v, qv, _mm256_castsi256_ps(isnan));
        }
        w[r] = _mm256_mul_ps(v, sc);
    }
}

/* 32 e4m3 codes and their block's scale e. nan_free (the matrix has no NaN codes) and e <=
 * QA_FAST_MAX_E: one multiply of the raw bits by 2^(e-7); otherwise the general form. */
__attribute__((target("avx2,fma"), always_inline)) static inline void blk_mxfp8(const uint8_t *q, uint8_t e, int nan_free, __m256 *w) {
    if (__builtin_expect(!nan_free || e > QA_FAST_MAX_E, 0)) {
        blk_mxfp8_general(q, e, nan_free, w);
        return;
    }
    uint32_t u = ((uint32_t)e + 120u) << 23; /* 2^(e-7) */
    float f;
    memcpy(&f, &u, 4);
    __m256 sc = _mm256_set1_ps(f);
    QA_UNROLL
    for (int r = 0; r < 4; r++) w[r] = _mm256_mul_ps(_mm256_castsi256_ps(e4m3x8_raw(q + 8 * r)), sc);
}

/* 16 packed bytes (element 2i = low nibble of byte i) and the block's two scaled tables: pos[j] =
 * e2m1_lut[j] * scale, neg[j] = e2m1_lut[8 + j] * scale. Register r takes bytes 4r..4r+3 broadcast,
 * lane j shifted right by 4j: nibble j of that dword (element 8r + j) in bits 3..0; the permute
 * reads bits 2..0 (the magnitude), bit 3 (the sign) moved to bit 31 picks the table. */
__attribute__((target("avx2,fma"), always_inline)) static inline void blk_mxfp4(const uint8_t *q, __m256 pos, __m256 neg, __m256 *w) {
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    QA_UNROLL
    for (int r = 0; r < 4; r++) {
        uint32_t d;
        memcpy(&d, q + 4 * r, 4);
        __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)d), sh);
        __m256 p = _mm256_permutevar8x32_ps(pos, idx), n = _mm256_permutevar8x32_ps(neg, idx);
        w[r] = _mm256_blendv_ps(p, n, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
}

__attribute__((target("avx2,fma"), always_inline)) static inline void mxfp4_tables(uint8_t e, __m256 *pos, __m256 *neg) {
    __m256 sc = _mm256_set1_ps(e8m0_f32(e));
    *pos = _mm256_mul_ps(_mm256_loadu_ps(e2m1_lut), sc);
    *neg = _mm256_mul_ps(_mm256_loadu_ps(e2m1_lut + 8), sc);
}

/* ---- row dequantization ------------------------------------------------------------------------ */

__attribute__((target("avx2,fma"))) int pdb_qmat_avx2_row(const pdb_qmat *w, int64_t r, float *out) {
    int64_t C = w->cols;
    __m256 v[4];
    if (w->fmt == PDB_QF_BF16) {
        const uint8_t *p = (const uint8_t *)w->data + r * C * 2;
        int64_t c = 0;
        for (; c + 32 <= C; c += 32) {
            blk_bf16(p + 2 * c, v);
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + c + 8 * k, v[k]);
        }
        for (; c < C; c++) out[c] = pdb_bf16_to_f32((uint16_t)(p[2 * c] | (p[2 * c + 1] << 8)));
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP8) {
        const uint8_t *q = (const uint8_t *)w->data + r * C, *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            blk_mxfp8(q + 32 * b, s[b], w->nan_free, v);
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + 32 * b + 8 * k, v[k]);
        }
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP4) {
        e2m1_init();
        const uint8_t *q = (const uint8_t *)w->data + r * (C / 2), *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            __m256 pos, neg;
            mxfp4_tables(s[b], &pos, &neg);
            blk_mxfp4(q + 16 * b, pos, neg, v);
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + 32 * b + 8 * k, v[k]);
        }
        return 1;
    }
    return 0;
}

/* ---- the decode kernel ---------------------------------------------------------------------------
 * nr rows x nt tokens (nr * nt <= 2: eight 32-lane accumulators, four __m256 each, plus the
 * block's weights fit the 16 registers), every block of the row: acc[i * nt + t][k] takes lanes
 * 8k..8k+7 of row i against token t, k ascending. pf: the prefetch distance in bytes (the same
 * place nr rows further on, the rows the caller takes next). */
__attribute__((target("avx2,fma"), always_inline)) static inline float fold_avx2(const __m256 *a) {
    /* fold32 in registers: lane i + lane i+16, then i + i+8, i + i+4, i + i+2, i + i+1 */
    __m256 v = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
}

__attribute__((target("avx2,fma"), always_inline)) static inline void rows_avx2(const pdb_qmat *w, int64_t r, int nr, const float *x,
        int64_t ldx, int nt, float *y, int64_t ldy, pdb_qfmt fmt) {
    int64_t C = w->cols, nb = C / 32;
    int64_t rb = fmt == PDB_QF_BF16 ? 2 * C : fmt == PDB_QF_MXFP8 ? C : C / 2; /* bytes of a row */
    int64_t bb = fmt == PDB_QF_BF16 ? 64 : fmt == PDB_QF_MXFP8 ? 32 : 16;       /* bytes of a block */
    const uint8_t *q[2], *s[2];
    for (int i = 0; i < nr; i++) {
        q[i] = (const uint8_t *)w->data + (r + i) * rb;
        s[i] = fmt == PDB_QF_BF16 ? NULL : w->scales + (r + i) * nb;
    }
    int64_t pf = nr * rb;
    int nan_free = w->nan_free;
    __m256 acc[2][4];
    QA_UNROLL
    for (int a = 0; a < 2; a++)
        QA_UNROLL
        for (int k = 0; k < 4; k++) acc[a][k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        QA_UNROLL
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = q[i] + b * bb;
            if (fmt == PDB_QF_BF16 || !(b & (64 / bb - 1))) _mm_prefetch((const char *)p + pf, _MM_HINT_T0);
            __m256 wv[4];
            if (fmt == PDB_QF_BF16) blk_bf16(p, wv);
            else if (fmt == PDB_QF_MXFP8) blk_mxfp8(p, s[i][b], nan_free, wv);
            else {
                __m256 pos, neg;
                mxfp4_tables(s[i][b], &pos, &neg);
                blk_mxfp4(p, pos, neg, wv);
            }
            QA_UNROLL
            for (int t = 0; t < nt; t++)
                QA_UNROLL
                for (int k = 0; k < 4; k++)
                    acc[i * nt + t][k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + t * ldx + b * 32 + 8 * k), wv[k], acc[i * nt + t][k]);
        }
    }
    for (int i = 0; i < nr; i++)
        for (int t = 0; t < nt; t++) y[t * ldy + r + i] = fold_avx2(acc[i * nt + t]);
}

/* The specialised forms (format, rows and tokens constants in each). */
#define QA_KERNEL(name, fmt, nr, nt)                                                                                   \
    __attribute__((target("avx2,fma"))) static void name(const pdb_qmat *w, int64_t r, const float *x, int64_t ldx, float *y, \
                                                         int64_t ldy) {                                                \
        rows_avx2(w, r, nr, x, ldx, nt, y, ldy, fmt);                                                                  \
    }
QA_KERNEL(k_bf16_r2t1, PDB_QF_BF16, 2, 1)
QA_KERNEL(k_bf16_r1t1, PDB_QF_BF16, 1, 1)
QA_KERNEL(k_bf16_r1t2, PDB_QF_BF16, 1, 2)
QA_KERNEL(k_mx8_r2t1, PDB_QF_MXFP8, 2, 1)
QA_KERNEL(k_mx8_r1t1, PDB_QF_MXFP8, 1, 1)
QA_KERNEL(k_mx8_r1t2, PDB_QF_MXFP8, 1, 2)
QA_KERNEL(k_mx4_r2t1, PDB_QF_MXFP4, 2, 1)
QA_KERNEL(k_mx4_r1t1, PDB_QF_MXFP4, 1, 1)
QA_KERNEL(k_mx4_r1t2, PDB_QF_MXFP4, 1, 2)
#undef QA_KERNEL

typedef void (*qa_fn)(const pdb_qmat *, int64_t, const float *, int64_t, float *, int64_t);

void pdb_qmat_avx2_rows(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, int64_t T, float *y,
                        int64_t ldy) {
    int f = w->fmt == PDB_QF_BF16 ? 0 : w->fmt == PDB_QF_MXFP8 ? 1 : w->fmt == PDB_QF_MXFP4 ? 2 : -1;
    if (f < 0 || T < 1 || T > 2 || w->cols % 32) return; /* pdb_qmat.c never calls it so */
    static const qa_fn r2t1[3] = {k_bf16_r2t1, k_mx8_r2t1, k_mx4_r2t1}, r1t1[3] = {k_bf16_r1t1, k_mx8_r1t1, k_mx4_r1t1},
                       r1t2[3] = {k_bf16_r1t2, k_mx8_r1t2, k_mx4_r1t2};
    if (f == 2) e2m1_init();
    int64_t r = r0;
    if (T == 2) {
        for (; r < r1; r++) r1t2[f](w, r, x, ldx, y, ldy);
        return;
    }
    for (; r + 2 <= r1; r += 2) r2t1[f](w, r, x, ldx, y, ldy);
    if (r < r1) r1t1[f](w, r, x, ldx, y, ldy);
}

#endif /* __x86_64__ */
