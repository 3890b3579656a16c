/* pdb_dtype: exact narrow-float <-> f32 conversions and block-scaled (DeepSeek FP8, OCP MX)
 * quantization. Invariants: decoding is exact; encoding rounds to nearest, ties to even, on
 * the f32 bit pattern (no double rounding through other types); e4m3 ("fn": no inf,
 * NaN = 0x7F/0xFF) saturates to +-448 and e2m1 to +-6, also for +-inf; bf16/f16 overflow to
 * inf; NaN maps to NaN where the target has one (e2m1 has none: NaN -> +0). Element data
 * read from files may be unaligned, so multi-byte loads go through memcpy. */
#include "pdb_dtype.h"

#include <math.h>
#include <string.h>

static const char *const dtype_names[PDB_DT_COUNT] = {
    "F32", "BF16", "F16", "F8_E4M3", "F8_E8M0", "U8", "I8", "I32", "I64", "F64",
};
static const size_t dtype_sizes[PDB_DT_COUNT] = {4, 2, 2, 1, 1, 1, 1, 4, 8, 8};

const char *pdb_dtype_name(pdb_dtype dt) {
    if ((int)dt < 0 || dt >= PDB_DT_COUNT) return "?";
    return dtype_names[dt];
}

pdb_status pdb_dtype_parse(const char *name, pdb_dtype *out) {
    if (name) {
        for (int i = 0; i < PDB_DT_COUNT; i++) {
            if (strcmp(name, dtype_names[i]) == 0) {
                *out = (pdb_dtype)i;
                return PDB_OK;
            }
        }
    }
    return pdb_err_set(PDB_UNSUPPORTED, "unknown dtype '%s'", name ? name : "(null)");
}

size_t pdb_dtype_size(pdb_dtype dt) {
    if ((int)dt < 0 || dt >= PDB_DT_COUNT) return 0;
    return dtype_sizes[dt];
}

/* ---- bit helpers ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round |x| (given as f32 bits without sign, finite, not NaN) to a binary format with
 * `mbits` mantissa bits, exponent bias `bias`, IEEE-style subnormals; returns the unsigned
 * code (biased exponent << mbits | mantissa), possibly beyond the format's largest finite
 * code: callers clamp. Ties go to the even code. */
static uint32_t round_mag(uint32_t mag, int mbits, int bias) {
    uint32_t exp32 = mag >> 23, man32 = mag & 0x7FFFFFu;
    if (exp32 == 0) return 0; /* f32 zero/subnormal: below half the smallest subnormal of any target */
    int te = (int)exp32 - 127 + bias;
    uint64_t v;
    int shift;
    if (te >= 1) {
        v = ((uint64_t)(uint32_t)te << 23) | man32; /* rounding may carry into the exponent */
        shift = 23 - mbits;
    } else {
        v = man32 | 0x800000u;
        shift = 24 - mbits - te;
        if (shift > 40) return 0;
    }
    if (shift == 0) return (uint32_t)v;
    uint64_t q = v >> shift, rem = v & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint32_t)q;
}

/* ---- bf16 ------------------------------------------------------------------------------- */

float pdb_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t pdb_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u); /* RNE; overflow carries into inf correctly */
    return (uint16_t)(u >> 16);
}

/* ---- f16 -------------------------------------------------------------------------------- */

float pdb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return bits_f32(sign | 0x7F800000u | (m << 13)); /* inf / NaN (payload kept) */
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* subnormal: exact */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t pdb_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((mag >> 13) & 0x3FFu));
    uint32_t c = round_mag(mag, 10, 15);
    if (c > 0x7C00u) c = 0x7C00u; /* inf */
    return (uint16_t)(sign | c);
}

/* ---- e4m3 (fn) -------------------------------------------------------------------------- */

float pdb_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
    if (e == 15 && m == 7) return bits_f32(sign | 0x7FC00000u);
    if (e == 0) {
        float v = (float)m * 0x1p-9f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

uint8_t pdb_f32_to_e4m3(float f) {
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
    uint32_t c = mag == 0x7F800000u ? 0x7Eu : round_mag(mag, 3, 7);
    if (c > 0x7Eu) c = 0x7Eu; /* saturate to 448 */
    return (uint8_t)(sign | c);
}

/* ---- e2m1 ------------------------------------------------------------------------------- */

static const float e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float pdb_e2m1_to_f32(uint8_t nibble) { return e2m1_values[nibble & 0xFu]; }

uint8_t pdb_f32_to_e2m1(float f) {
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 28) & 0x8u);
    uint32_t mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return 0; /* no NaN in e2m1 */
    uint32_t c = mag == 0x7F800000u ? 7u : round_mag(mag, 1, 1);
    if (c > 7u) c = 7u; /* saturate to 6 */
    return (uint8_t)(sign | c);
}

/* ---- e8m0 ------------------------------------------------------------------------------- */

float pdb_e8m0_to_f32(uint8_t e) {
    if (e == 0xFF) return bits_f32(0x7FC00000u);
    if (e == 0) return bits_f32(0x00400000u); /* 2^-127, an f32 subnormal */
    return bits_f32((uint32_t)e << 23);
}

uint8_t pdb_f32_to_e8m0(float f) {
    uint32_t mag = f32_bits(f) & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return 0xFF;
    if (mag == 0x7F800000u) return 0xFE;
    uint32_t exp32 = mag >> 23, man32 = mag & 0x7FFFFFu;
    if (exp32 == 0) /* below 2^-126: nearest of 2^-127 (code 0) and 2^-126 (code 1) */
        return man32 > 0x600000u ? 1 : 0;
    uint32_t c = exp32;
    if (man32 > 0x400000u || (man32 == 0x400000u && (c & 1))) c++; /* 1.5 * 2^k is the tie */
    if (c > 0xFEu) c = 0xFEu;
    return (uint8_t)c;
}

/* ---- bulk conversions ------------------------------------------------------------------- */

static void e4m3_table(float lut[256]) {
    for (int i = 0; i < 256; i++) lut[i] = pdb_e4m3_to_f32((uint8_t)i);
}

pdb_status pdb_dtype_to_f32(pdb_dtype dt, const void *src, int64_t n, float *dst) {
    if (n < 0) return pdb_err_set(PDB_INVALID, "pdb_dtype_to_f32: negative count %lld", (long long)n);
    if (n == 0) return PDB_OK;
    if (!src || !dst) return pdb_err_set(PDB_INVALID, "pdb_dtype_to_f32: NULL buffer");
    const uint8_t *p = src;
    switch (dt) {
    case PDB_DT_F32:
        memmove(dst, src, (size_t)n * 4);
        break;
    case PDB_DT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bits_f32((uint32_t)h << 16);
        }
        break;
    case PDB_DT_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = pdb_f16_to_f32(h);
        }
        break;
    case PDB_DT_F8_E4M3: {
        float lut[256];
        e4m3_table(lut);
        for (int64_t i = 0; i < n; i++) dst[i] = lut[p[i]];
        break;
    }
    case PDB_DT_F8_E8M0:
        for (int64_t i = 0; i < n; i++) dst[i] = pdb_e8m0_to_f32(p[i]);
        break;
    case PDB_DT_U8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i];
        break;
    case PDB_DT_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i];
        break;
    case PDB_DT_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            dst[i] = (float)v;
        }
        break;
    case PDB_DT_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    case PDB_DT_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, p + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    default:
        return pdb_err_set(PDB_UNSUPPORTED, "pdb_dtype_to_f32: unknown dtype %d", (int)dt);
    }
    return PDB_OK;
}

pdb_status pdb_dtype_from_f32(pdb_dtype dt, const float *src, int64_t n, void *dst) {
    if (n < 0) return pdb_err_set(PDB_INVALID, "pdb_dtype_from_f32: negative count %lld", (long long)n);
    if (n == 0) return PDB_OK;
    if (!src || !dst) return pdb_err_set(PDB_INVALID, "pdb_dtype_from_f32: NULL buffer");
    uint8_t *p = dst;
    switch (dt) {
    case PDB_DT_F32:
        memmove(dst, src, (size_t)n * 4);
        break;
    case PDB_DT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = pdb_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        break;
    case PDB_DT_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = pdb_f32_to_f16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        break;
    case PDB_DT_F8_E4M3:
        for (int64_t i = 0; i < n; i++) p[i] = pdb_f32_to_e4m3(src[i]);
        break;
    case PDB_DT_F8_E8M0:
        for (int64_t i = 0; i < n; i++) p[i] = pdb_f32_to_e8m0(src[i]);
        break;
    default:
        return pdb_err_set(PDB_UNSUPPORTED, "pdb_dtype_from_f32: cannot convert f32 to %s",
                           pdb_dtype_name(dt));
    }
    return PDB_OK;
}

/* ---- DeepSeek FP8 block dequant ---------------------------------------------------------- */

void pdb_dequant_fp8_block(const uint8_t *w, const float *scale_inv, int64_t rows, int64_t cols,
                           float *out) {
    PDB_ASSERT(rows >= 0 && cols >= 0, "negative FP8 weight shape");
    float lut[256];
    e4m3_table(lut);
    int64_t sc = (cols + 127) / 128; /* scale_inv: [ceil(rows/128), sc] */
    for (int64_t r = 0; r < rows; r++) {
        const float *srow = scale_inv + (r / 128) * sc;
        const uint8_t *wr = w + r * cols;
        float *o = out + r * cols;
        for (int64_t cb = 0; cb < sc; cb++) {
            float s = srow[cb];
            int64_t c0 = cb * 128, c1 = c0 + 128 < cols ? c0 + 128 : cols;
            for (int64_t c = c0; c < c1; c++) o[c] = lut[wr[c]] * s;
        }
    }
}

/* ---- OCP MX ----------------------------------------------------------------------------- */

void pdb_dequant_mxfp4_row(const uint8_t *packed, const uint8_t *scales, int64_t n, float *out) {
    PDB_ASSERT(n >= 0 && n % 32 == 0, "MXFP4 row length must be a multiple of 32");
    for (int64_t b = 0; b < n / 32; b++) {
        float s = pdb_e8m0_to_f32(scales[b]);
        const uint8_t *q = packed + b * 16;
        float *o = out + b * 32;
        for (int i = 0; i < 16; i++) {
            o[2 * i] = e2m1_values[q[i] & 0xFu] * s;
            o[2 * i + 1] = e2m1_values[q[i] >> 4] * s;
        }
    }
}

void pdb_dequant_mxfp8_row(const uint8_t *q, const uint8_t *scales, int64_t n, float *out) {
    PDB_ASSERT(n >= 0 && n % 32 == 0, "MXFP8 row length must be a multiple of 32");
    float lut[256];
    e4m3_table(lut);
    for (int64_t b = 0; b < n / 32; b++) {
        float s = pdb_e8m0_to_f32(scales[b]);
        for (int i = 0; i < 32; i++) out[b * 32 + i] = lut[q[b * 32 + i]] * s;
    }
}

/* Shared scale code for one 32-element block: floor(log2(amax)) - emax, clamped to the e8m0
 * range [-127, 127], biased by 127. amax == 0 gives the lowest code (every element is 0);
 * a NaN or inf in the block gives 0xFF (NaN scale). *inv receives 2^-exponent. */
static uint8_t mx_block_scale(const float *x, int emax, float *inv) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        if (!(a <= 3.4028235e38f)) { /* NaN or inf */
            *inv = 0.0f;
            return 0xFF;
        }
        if (a > amax) amax = a;
    }
    int e = -127;
    if (amax > 0.0f) {
        int k;
        (void)frexpf(amax, &k); /* amax = m * 2^k, m in [0.5, 1): floor(log2) = k - 1 */
        e = k - 1 - emax;
        if (e < -127) e = -127;
        if (e > 127) e = 127;
    }
    *inv = ldexpf(1.0f, -e); /* exact: -e in [-127, 127] */
    return (uint8_t)(e + 127);
}

void pdb_quant_mxfp4_row(const float *x, int64_t n, uint8_t *packed, uint8_t *scales) {
    PDB_ASSERT(n >= 0 && n % 32 == 0, "MXFP4 row length must be a multiple of 32");
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float inv;
        scales[b] = mx_block_scale(xb, 2, &inv);
        for (int i = 0; i < 16; i++) {
            uint8_t lo = scales[b] == 0xFF ? 0 : pdb_f32_to_e2m1(xb[2 * i] * inv);
            uint8_t hi = scales[b] == 0xFF ? 0 : pdb_f32_to_e2m1(xb[2 * i + 1] * inv);
            packed[b * 16 + i] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void pdb_quant_mxfp8_row(const float *x, int64_t n, uint8_t *q, uint8_t *scales) {
    PDB_ASSERT(n >= 0 && n % 32 == 0, "MXFP8 row length must be a multiple of 32");
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float inv;
        scales[b] = mx_block_scale(xb, 8, &inv);
        for (int i = 0; i < 32; i++)
            q[b * 32 + i] = scales[b] == 0xFF ? 0 : pdb_f32_to_e4m3(xb[i] * inv);
    }
}

/* ---- DeepSeek's fitting scales ------------------------------------------------------------ */

/* The e8m0 code of the smallest 2^e (e in [-127, 127]) with amax <= fmax * 2^e; amax finite and
 * >= 0. fmax * 2^e is exact in f32 for every e here (or inf past the top, which compares above
 * any finite amax). *inv receives 2^-e. */
static uint8_t fit_scale(float amax, float fmax, float *inv) {
    int e = -127;
    if (amax > 0.0f) {
        int k;
        (void)frexpf(amax, &k);      /* amax in [2^(k-1), 2^k) */
        e = k - 1 - (int)floorf(log2f(fmax)); /* within one of the answer */
        if (e < -127) e = -127;
        while (e < 127 && ldexpf(fmax, e) < amax) e++;
        while (e > -127 && ldexpf(fmax, e - 1) >= amax) e--;
    }
    *inv = ldexpf(1.0f, -e);
    return (uint8_t)(e + 127);
}

void pdb_quant_fp8_block128(const float *x, int64_t rows, int64_t cols, uint8_t *q, uint8_t *scales) {
    PDB_ASSERT(rows >= 0 && cols >= 0, "negative FP8 weight shape");
    int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128;
    for (int64_t bi = 0; bi < rb; bi++)
        for (int64_t bj = 0; bj < cb; bj++) {
            int64_t r0 = bi * 128, r1 = r0 + 128 < rows ? r0 + 128 : rows, c0 = bj * 128, c1 = c0 + 128 < cols ? c0 + 128 : cols;
            float amax = 0.0f;
            int bad = 0;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float a = fabsf(x[r * cols + c]);
                    if (!(a <= 3.4028235e38f)) bad = 1;
                    else if (a > amax) amax = a;
                }
            float inv = 0.0f;
            uint8_t code = bad ? 0xFF : fit_scale(amax, 448.0f, &inv);
            scales[bi * cb + bj] = code;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) q[r * cols + c] = bad ? 0 : pdb_f32_to_e4m3(x[r * cols + c] * inv);
        }
}

void pdb_quant_fp4_row32(const float *x, int64_t n, uint8_t *packed, uint8_t *scales) {
    PDB_ASSERT(n >= 0 && n % 32 == 0, "FP4 row length must be a multiple of 32");
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(xb[i]);
            if (!(a <= 3.4028235e38f)) bad = 1;
            else if (a > amax) amax = a;
        }
        float inv = 0.0f;
        scales[b] = bad ? 0xFF : fit_scale(amax, 6.0f, &inv);
        for (int i = 0; i < 16; i++) {
            uint8_t lo = bad ? 0 : pdb_f32_to_e2m1(xb[2 * i] * inv), hi = bad ? 0 : pdb_f32_to_e2m1(xb[2 * i + 1] * inv);
            packed[b * 16 + i] = (uint8_t)(lo | (hi << 4));
        }
    }
}
