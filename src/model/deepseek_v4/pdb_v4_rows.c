/* pdb_v4_rows: encode / decode of the cached V4 rows (the layouts are in pdb_v4_rows.h). Invariant:
 * a scale is recomputed from the row's rounded values with pdb_v4_qsim's formula, which never
 * exceeds the scale the rounding used (the rounded block's max is at most qmax times that scale),
 * and every rounded value divided by a smaller power of two is still a code (e4m3 / e2m1 keep
 * their mantissa bits, only the exponent grows), so the encoding is lossless; encode checks each
 * value anyway and counts the ones it would change. */
#include "pdb_v4_rows.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "pdb_dtype.h"
#include "pdb_v4_qsim.h"

static int64_t up4(int64_t n) { return (n + 3) & ~(int64_t)3; }

pdb_v4_row pdb_v4_row_kv(const pdb_config *c, int sem) {
    pdb_v4_row r = {.fmt = PDB_V4_ROW_F32, .dim = c->head_dim, .bytes = 4 * c->head_dim};
    if (sem != 0) return r; /* exact */
    int64_t rope = c->qk_rope_head_dim, n = c->head_dim - rope;
    r.fmt = PDB_V4_ROW_FP8;
    r.rope = rope;
    r.off_codes = 4 * rope;
    r.off_scales = r.off_codes + n;
    r.bytes = up4(r.off_scales + n / 64);
    return r;
}

pdb_v4_row pdb_v4_row_ikey(const pdb_config *c, int sem) {
    int64_t d = c->index_head_dim;
    pdb_v4_row r = {.fmt = PDB_V4_ROW_F32, .dim = d, .bytes = 4 * d};
    if (sem != 0) return r;
    r.fmt = PDB_V4_ROW_FP4;
    r.off_codes = 0;
    r.off_scales = d / 2;
    r.bytes = up4(d / 2 + d / 32);
    return r;
}

float pdb_v4_row_scale(uint8_t e) {
    uint32_t u = e ? (uint32_t)e << 23 : 0x00400000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The e8m0 byte of a power of two s in [2^-127, 2^127]; 0xFF (NaN) otherwise. */
static uint8_t e8m0_of(float s) {
    if (!(s > 0) || isinf(s)) return 0xFF;
    int e;
    float m = frexpf(s, &e); /* s = 0.5 * 2^e */
    if (m != 0.5f || e - 1 < -127 || e - 1 > 127) return 0xFF;
    return (uint8_t)(e - 1 + 127);
}

static int same(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

/* One block of n values at x -> codes (fp8: a byte each; fp4: nibbles into packed, element i of
 * the block at nibble i), its scale byte; returns the values not reproduced. */
static int64_t encode_block(const float *x, int64_t n, int fp8, uint8_t *codes, uint8_t *scale) {
    float qmax = fp8 ? 448.0f : 6.0f, amin = fp8 ? 1e-4f : 6.0f * 0x1p-126f, amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (amax < amin) amax = amin;
    uint8_t e = e8m0_of(pdb_v4_qsim_pow2_ceil(amax / qmax));
    float s = e == 0xFF ? NAN : pdb_v4_row_scale(e);
    int64_t bad = 0;
    *scale = e;
    for (int64_t i = 0; i < n; i++) {
        float q = x[i] / s;
        if (q > qmax) q = qmax;
        if (q < -qmax) q = -qmax;
        if (fp8) {
            codes[i] = pdb_f32_to_e4m3(q);
            bad += !same(pdb_e4m3_to_f32(codes[i]) * s, x[i]);
        } else {
            uint8_t c = pdb_f32_to_e2m1(q);
            if (i & 1) codes[i / 2] = (uint8_t)(codes[i / 2] | (c << 4));
            else codes[i / 2] = c;
            bad += !same(pdb_e2m1_to_f32(c) * s, x[i]);
        }
    }
    return bad;
}

int64_t pdb_v4_row_encode(const pdb_v4_row *r, const float *x, uint8_t *row) {
    int64_t bad = 0;
    switch (r->fmt) {
    case PDB_V4_ROW_F32:
        memcpy(row, x, sizeof(float) * (size_t)r->dim);
        return 0;
    case PDB_V4_ROW_FP8: {
        int64_t n = r->dim - r->rope;
        memset(row, 0, (size_t)r->bytes);
        memcpy(row, x + n, sizeof(float) * (size_t)r->rope);
        for (int64_t b = 0; b < n / 64; b++) bad += encode_block(x + b * 64, 64, 1, row + r->off_codes + b * 64, row + r->off_scales + b);
        return bad;
    }
    case PDB_V4_ROW_FP4:
        memset(row, 0, (size_t)r->bytes);
        for (int64_t b = 0; b < r->dim / 32; b++) bad += encode_block(x + b * 32, 32, 0, row + b * 16, row + r->off_scales + b);
        return bad;
    }
    return r->dim;
}

/* e4m3 byte -> f32, every byte (filled once; the table is what pdb_e4m3_to_f32 returns) */
static float e4m3_lut[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_fill(void) {
    for (int i = 0; i < 256; i++) e4m3_lut[i] = pdb_e4m3_to_f32((uint8_t)i);
}

static const float *e4m3_table(void) {
    pthread_once(&e4m3_once, e4m3_fill);
    return e4m3_lut;
}

/* pdb_e2m1_to_f32 of each nibble (signed zero included) */
static const float E2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void pdb_v4_row_decode(const pdb_v4_row *r, const uint8_t *row, float *x) {
    switch (r->fmt) {
    case PDB_V4_ROW_F32:
        memcpy(x, row, sizeof(float) * (size_t)r->dim);
        return;
    case PDB_V4_ROW_FP8: {
        const float *lut = e4m3_table();
        int64_t n = r->dim - r->rope;
        const uint8_t *c = row + r->off_codes;
        for (int64_t b = 0; b < n / 64; b++) {
            uint8_t e = row[r->off_scales + b];
            float s = e == 0xFF ? NAN : pdb_v4_row_scale(e);
            for (int64_t i = b * 64; i < b * 64 + 64; i++) x[i] = lut[c[i]] * s;
        }
        memcpy(x + n, row, sizeof(float) * (size_t)r->rope);
        return;
    }
    case PDB_V4_ROW_FP4:
        for (int64_t b = 0; b < r->dim / 32; b++) {
            uint8_t e = row[r->off_scales + b];
            float s = e == 0xFF ? NAN : pdb_v4_row_scale(e);
            const uint8_t *p = row + b * 16;
            float *xb = x + b * 32;
            for (int m = 0; m < 16; m++) {
                xb[2 * m] = E2M1[p[m] & 15] * s;
                xb[2 * m + 1] = E2M1[p[m] >> 4] * s;
            }
        }
        return;
    }
}

void pdb_v4_row_decode_rows(const pdb_v4_row *r, const uint8_t *base, const int32_t *idx, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) pdb_v4_row_decode(r, base + (idx ? idx[i] : i) * r->bytes, out + i * r->dim);
}
