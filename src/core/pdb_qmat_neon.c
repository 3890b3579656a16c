/* pdb_qmat_neon: NEON row dequantization, the 32-lane dot, the one-row decode kernel and axpy
 * (see pdb_qmat_neon.h for the contract). Built on aarch64 only; elsewhere this file is empty.
 * Dequantization is exact by construction, as in pdb_qmat.c: bf16 widened by a shift, e4m3 by
 * the shift-and-mask trick that gives value * 2^-120 (then an exact multiply by 2^120), e2m1 by a
 * table lookup of its f32 bits; each value is then multiplied by the e8m0 block scale once (one
 * IEEE rounding, what lut[code] * scale is in the scalar reference). */
#include "pdb_qmat_neon.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "pdb_dtype.h"

static inline float e8m0_f32(uint8_t e) { /* == pdb_e8m0_to_f32, inlined for the kernels */
    uint32_t u = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The 16 e2m1 values' f32 bits, bytes 2 and 3 (bits 16..31) as two 16-entry tables: every e2m1
 * value has at most 2 significant bits, so bits 0..15 are zero and a value is (b3 << 24) | (b2
 * << 16). Built from pdb_e2m1_to_f32 at first use (a race only writes the same bytes twice). */
static uint8_t e2m1_b2[16], e2m1_b3[16];
static int e2m1_ready;

static void e2m1_init(void) {
    if (__atomic_load_n(&e2m1_ready, __ATOMIC_ACQUIRE)) return;
    for (int i = 0; i < 16; i++) {
        float f = pdb_e2m1_to_f32((uint8_t)i);
        uint32_t u;
        memcpy(&u, &f, 4);
        e2m1_b2[i] = (uint8_t)(u >> 16);
        e2m1_b3[i] = (uint8_t)(u >> 24);
    }
    __atomic_store_n(&e2m1_ready, 1, __ATOMIC_RELEASE);
}

/* 32 weights of a block, in natural order: w[r] = elements 4r..4r+3. */
typedef struct { float32x4_t v[8]; } blk32;

/* 8 bf16 (16 bytes) -> two f32 vectors (bf16 is the top half of an f32: exact). */
static inline void bf16x8(const uint8_t *p, float32x4_t *a, float32x4_t *b) {
    uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(p));
    *a = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *b = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

/* 4 e4m3 codes sign-extended to 32 bits -> their exact values: shifted left by 20 the code s eeee
 * mmm sits at bits 27..20 with copies of s above; the mask keeps bit 31 and 26..20, an f32 equal
 * to the e4m3 value times 2^-120 (subnormals included), and the multiply by 2^120 is exact. NaN
 * codes (0x7F / 0xFF, eeee mmm all ones) become sign | 0x7FC00000 when nan is set, as the scalar
 * table has them. */
static inline float32x4_t e4m3x4(int32x4_t v, int nan) {
    uint32x4_t r = vandq_u32(vreinterpretq_u32_s32(vshlq_n_s32(v, 20)), vdupq_n_u32(0x87F00000u));
    float32x4_t val = vmulq_f32(vreinterpretq_f32_u32(r), vdupq_n_f32(0x1p120f));
    if (!nan) return val;
    const uint32x4_t k7f = vdupq_n_u32(0x07F00000u);
    uint32x4_t isnan = vceqq_u32(vandq_u32(r, k7f), k7f);
    uint32x4_t qnan = vorrq_u32(vandq_u32(r, vdupq_n_u32(0x80000000u)), vdupq_n_u32(0x7FC00000u));
    return vbslq_f32(isnan, vreinterpretq_f32_u32(qnan), val);
}

/* One 32-block of row data -> 32 exact weights (MX: times the block's scale e). */
static inline void blk_mxfp8(const uint8_t *q, uint8_t e, int nan, blk32 *w) {
    float32x4_t sc = vdupq_n_f32(e8m0_f32(e));
    for (int h = 0; h < 2; h++) {
        int8x16_t c = vreinterpretq_s8_u8(vld1q_u8(q + 16 * h));
        int16x8_t lo = vmovl_s8(vget_low_s8(c)), hi = vmovl_high_s8(c);
        w->v[4 * h + 0] = vmulq_f32(e4m3x4(vmovl_s16(vget_low_s16(lo)), nan), sc);
        w->v[4 * h + 1] = vmulq_f32(e4m3x4(vmovl_high_s16(lo), nan), sc);
        w->v[4 * h + 2] = vmulq_f32(e4m3x4(vmovl_s16(vget_low_s16(hi)), nan), sc);
        w->v[4 * h + 3] = vmulq_f32(e4m3x4(vmovl_high_s16(hi), nan), sc);
    }
}

/* 16 packed bytes (element 2i = low nibble of byte i, 2i + 1 = high nibble): the nibbles put in
 * element order by two zips, each looked up in the two byte tables, the byte pairs zipped into
 * the top halves of 32-bit lanes. */
static inline void blk_mxfp4(const uint8_t *q, uint8_t e, uint8x16_t tb2, uint8x16_t tb3, blk32 *w) {
    float32x4_t sc = vdupq_n_f32(e8m0_f32(e));
    uint8x16_t b = vld1q_u8(q), lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
    uint8x16_t idx[2] = {vzip1q_u8(lo, hi), vzip2q_u8(lo, hi)}; /* elements 0..15, 16..31 */
    for (int h = 0; h < 2; h++) {
        uint8x16_t b2 = vqtbl1q_u8(tb2, idx[h]), b3 = vqtbl1q_u8(tb3, idx[h]);
        uint16x8_t p0 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3)), p1 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
        w->v[4 * h + 0] = vmulq_f32(vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(p0), 16)), sc);
        w->v[4 * h + 1] = vmulq_f32(vreinterpretq_f32_u32(vshll_high_n_u16(p0, 16)), sc);
        w->v[4 * h + 2] = vmulq_f32(vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(p1), 16)), sc);
        w->v[4 * h + 3] = vmulq_f32(vreinterpretq_f32_u32(vshll_high_n_u16(p1, 16)), sc);
    }
}

static inline void blk_bf16(const uint8_t *p, blk32 *w) {
    for (int i = 0; i < 4; i++) bf16x8(p + 16 * i, &w->v[2 * i], &w->v[2 * i + 1]);
}

int pdb_qmat_neon_row(const pdb_qmat *w, int64_t r, float *out) {
    int64_t C = w->cols;
    blk32 b;
    if (w->fmt == PDB_QF_BF16) {
        const uint8_t *p = (const uint8_t *)w->data + r * C * 2;
        int64_t c = 0;
        for (; c + 8 <= C; c += 8) {
            float32x4_t a0, a1;
            bf16x8(p + 2 * c, &a0, &a1);
            vst1q_f32(out + c, a0);
            vst1q_f32(out + c + 4, a1);
        }
        for (; c < C; c++) out[c] = pdb_bf16_to_f32((uint16_t)(p[2 * c] | (p[2 * c + 1] << 8)));
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP8) {
        const uint8_t *q = (const uint8_t *)w->data + r * C, *s = w->scales + r * (C / 32);
        for (int64_t k = 0; k < C / 32; k++) {
            blk_mxfp8(q + k * 32, s[k], 1, &b);
            for (int i = 0; i < 8; i++) vst1q_f32(out + k * 32 + 4 * i, b.v[i]);
        }
        return 1;
    }
    if (w->fmt == PDB_QF_MXFP4) {
        e2m1_init();
        const uint8x16_t tb2 = vld1q_u8(e2m1_b2), tb3 = vld1q_u8(e2m1_b3);
        const uint8_t *q = (const uint8_t *)w->data + r * (C / 2), *s = w->scales + r * (C / 32);
        for (int64_t k = 0; k < C / 32; k++) {
            blk_mxfp4(q + k * 16, s[k], tb2, tb3, &b);
            for (int i = 0; i < 8; i++) vst1q_f32(out + k * 32 + 4 * i, b.v[i]);
        }
        return 1;
    }
    return 0;
}

/* ---- the fixed-order dot ---------------------------------------------------------------------- */

static float fold32_lanes(float *l) { /* 32 lanes -> 1, lane i with lane i + half (pdb_qmat.c's fold32) */
    for (int half = 16; half >= 1; half /= 2)
        for (int i = 0; i < half; i++) l[i] = l[i] + l[i + half];
    return l[0];
}

/* The same fold in registers: lanes i + 16 are registers v[4..7], i + 8 v[2..3], i + 4 v[1]; then
 * lanes (0, 1) + (2, 3), then lane 0 + lane 1. */
static inline float fold32_neon(const float32x4_t *v) {
    float32x4_t a0 = vaddq_f32(v[0], v[4]), a1 = vaddq_f32(v[1], v[5]), a2 = vaddq_f32(v[2], v[6]), a3 = vaddq_f32(v[3], v[7]);
    a0 = vaddq_f32(a0, a2);
    a1 = vaddq_f32(a1, a3);
    a0 = vaddq_f32(a0, a1);
    float32x2_t d = vadd_f32(vget_low_f32(a0), vget_high_f32(a0));
    return vget_lane_f32(d, 0) + vget_lane_f32(d, 1);
}

float pdb_qmat_neon_dot(const float *a, const float *b, int64_t n) {
    float32x4_t v[8];
    for (int i = 0; i < 8; i++) v[i] = vdupq_n_f32(0);
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
        for (int i = 0; i < 8; i++) v[i] = vfmaq_f32(v[i], vld1q_f32(a + k + 4 * i), vld1q_f32(b + k + 4 * i));
    if (k == n) return fold32_neon(v);
    float l[32];
    for (int i = 0; i < 8; i++) vst1q_f32(l + 4 * i, v[i]);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32_lanes(l);
}

/* ---- the decode kernel: one row at a time, T <= 2 tokens -------------------------------------- */

/* nt and fmt are constants in each call (inlined), so the token and format branches fold away. */
static inline __attribute__((always_inline)) void row_tokens(const pdb_qmat *w, int64_t r, const float *x, int64_t ldx, int nt,
                                                             float *y, int64_t ldy, uint8x16_t tb2, uint8x16_t tb3) {
    int64_t C = w->cols, nb = C / 32;
    float32x4_t acc[2][8];
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < 8; i++) acc[t][i] = vdupq_n_f32(0);
    const uint8_t *base = w->data;
    const uint8_t *s = w->scales ? w->scales + r * nb : NULL;
    int nan = !w->nan_free;
    blk32 b;
    for (int64_t k = 0; k < nb; k++) {
        if (w->fmt == PDB_QF_MXFP8) blk_mxfp8(base + r * C + k * 32, s[k], nan, &b);
        else if (w->fmt == PDB_QF_MXFP4) blk_mxfp4(base + r * (C / 2) + k * 16, s[k], tb2, tb3, &b);
        else blk_bf16(base + r * C * 2 + k * 64, &b);
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < 8; i++) acc[t][i] = vfmaq_f32(acc[t][i], vld1q_f32(x + t * ldx + k * 32 + 4 * i), b.v[i]);
    }
    for (int t = 0; t < nt; t++) y[t * ldy + r] = fold32_neon(acc[t]);
}

static void rows_t1(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, float *y, int64_t ldy,
                    uint8x16_t tb2, uint8x16_t tb3) {
    for (int64_t r = r0; r < r1; r++) row_tokens(w, r, x, ldx, 1, y, ldy, tb2, tb3);
}

static void rows_t2(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, float *y, int64_t ldy,
                    uint8x16_t tb2, uint8x16_t tb3) {
    for (int64_t r = r0; r < r1; r++) row_tokens(w, r, x, ldx, 2, y, ldy, tb2, tb3);
}

void pdb_qmat_neon_rows(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, int64_t T, float *y,
                        int64_t ldy) {
    e2m1_init();
    const uint8x16_t tb2 = vld1q_u8(e2m1_b2), tb3 = vld1q_u8(e2m1_b3);
    if (T == 2) rows_t2(w, r0, r1, x, ldx, y, ldy, tb2, tb3);
    else if (T == 1) rows_t1(w, r0, r1, x, ldx, y, ldy, tb2, tb3);
}

void pdb_qmat_neon_axpy(float *y, float a, const float *x, int64_t n) {
    float32x4_t va = vdupq_n_f32(a);
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) vst1q_f32(y + c, vfmaq_f32(vld1q_f32(y + c), va, vld1q_f32(x + c)));
    for (; c < n; c++) y[c] = fmaf(a, x[c], y[c]);
}

#endif
