/* pdb_dtype: element types and exact conversions between them and f32.
 * Invariants: every *_to_f32 is exact (each format is a subset of f32); f32 -> narrower
 * rounds to nearest, ties to even, saturating where the format has no infinity (e4m3 to
 * +-448, e2m1 to +-6); NaN stays NaN where the format has one. Block-scaled formats:
 *  - DeepSeek FP8 weights: e4m3 [R,C] with an f32 (or bf16) scale_inv [ceil(R/128), ceil(C/128)];
 *    value = e4m3 * scale_inv[r/128][c/128].
 *  - MXFP4: e2m1 values packed two per byte (element 2i in the low nibble, 2i+1 in the high
 *    nibble), one e8m0 scale per 32 consecutive elements of a row; value = e2m1 * 2^(e-127).
 *  - MXFP8: e4m3 values, one e8m0 scale per 32 consecutive elements of a row. */
#ifndef PDB_DTYPE_H
#define PDB_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only. Names are the safetensors dtype strings. */
typedef enum pdb_dtype {
    PDB_DT_F32 = 0, /* "F32" */
    PDB_DT_BF16,    /* "BF16" */
    PDB_DT_F16,     /* "F16" */
    PDB_DT_F8_E4M3, /* "F8_E4M3" */
    PDB_DT_F8_E8M0, /* "F8_E8M0" (scale bytes: 2^(e-127), 0xFF = NaN) */
    PDB_DT_U8,      /* "U8" (also packed e2m1 pairs) */
    PDB_DT_I8,      /* "I8" */
    PDB_DT_I32,     /* "I32" */
    PDB_DT_I64,     /* "I64" */
    PDB_DT_F64,     /* "F64" */
    PDB_DT_COUNT
} pdb_dtype;

const char *pdb_dtype_name(pdb_dtype dt);             /* "F32", ... */
pdb_status pdb_dtype_parse(const char *name, pdb_dtype *out); /* PDB_UNSUPPORTED if unknown */
size_t pdb_dtype_size(pdb_dtype dt);                 /* bytes per element */

float pdb_bf16_to_f32(uint16_t h);
uint16_t pdb_f32_to_bf16(float f);
float pdb_f16_to_f32(uint16_t h);
uint16_t pdb_f32_to_f16(float f);
float pdb_e4m3_to_f32(uint8_t b);
uint8_t pdb_f32_to_e4m3(float f);
float pdb_e2m1_to_f32(uint8_t nibble); /* low 4 bits */
uint8_t pdb_f32_to_e2m1(float f);
float pdb_e8m0_to_f32(uint8_t e);      /* 2^(e-127); NaN for 0xFF */
/* Nearest power of two of |f| (ties, at 1.5 * 2^k, to the even code), clamped to
 * [2^-127, 2^127]; NaN -> 0xFF, +-inf -> 0xFE, 0 -> 0x00. */
uint8_t pdb_f32_to_e8m0(float f);

/* Convert n elements of a plain dtype (F32, BF16, F16, F8_E4M3, F8_E8M0, F64, I32, I64, I8,
 * U8) to f32. src may be unaligned. */
pdb_status pdb_dtype_to_f32(pdb_dtype dt, const void *src, int64_t n, float *dst);
/* Convert n f32 values to BF16, F16, F8_E4M3, F8_E8M0 or F32 (others: PDB_UNSUPPORTED). */
pdb_status pdb_dtype_from_f32(pdb_dtype dt, const float *src, int64_t n, void *dst);

/* DeepSeek FP8 weight [rows, cols] e4m3 with scale_inv [ceil(rows/128), ceil(cols/128)] f32. */
void pdb_dequant_fp8_block(const uint8_t *w, const float *scale_inv, int64_t rows, int64_t cols,
                           float *out /* [rows, cols] */);

/* MXFP4 row: n elements (n % 32 == 0), packed [n/2] bytes, scales [n/32] e8m0. */
void pdb_dequant_mxfp4_row(const uint8_t *packed, const uint8_t *scales, int64_t n, float *out);
/* MXFP8 row: n elements (n % 32 == 0), e4m3 [n], scales [n/32] e8m0. */
void pdb_dequant_mxfp8_row(const uint8_t *q, const uint8_t *scales, int64_t n, float *out);
/* Quantize one row to MXFP4 / MXFP8 (shared exponent = floor(log2(amax)) - emax_of_format,
 * as the OCP MX spec), clamped to the e8m0 range; elements round to nearest even and saturate.
 * An all-zero block gets scale code 0; a block holding NaN or inf gets scale 0xFF (NaN) and
 * zero elements. Deterministic; used by `pdbridge quantize`. */
void pdb_quant_mxfp4_row(const float *x, int64_t n, uint8_t *packed, uint8_t *scales);
void pdb_quant_mxfp8_row(const float *x, int64_t n, uint8_t *q, uint8_t *scales);

/* DeepSeek's rounding (make-model --format deepseek): a block's scale is the smallest power of two
 * 2^e, e in [-127, 127], with max|x| <= fmax * 2^e (fmax 448 for e4m3, 6 for e2m1), so nothing
 * saturates (OCP's floor rule above may clip the block's largest element); an all-zero block
 * gets e = -127 (code 0); elements are x * 2^-e rounded to nearest even. A block holding NaN or
 * inf gets scale 0xFF and zero elements.
 * pdb_quant_fp8_block128: [rows, cols] into e4m3 q [rows, cols] and e8m0 scales
 * [ceil(rows/128), ceil(cols/128)], one per 128x128 block (edge blocks partial).
 * pdb_quant_fp4_row32: one row of n (n % 32 == 0) into packed e2m1 [n/2] (element 2i in the low
 * nibble, as MXFP4) and e8m0 scales [n/32]: an MXFP4 row. */
void pdb_quant_fp8_block128(const float *x, int64_t rows, int64_t cols, uint8_t *q, uint8_t *scales);
void pdb_quant_fp4_row32(const float *x, int64_t n, uint8_t *packed, uint8_t *scales);

/* Little-endian integers in byte buffers (every on-disk and on-wire format of pdbridge). */
static inline void pdb_put_le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void pdb_put_le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint32_t pdb_get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint64_t pdb_get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#ifdef __cplusplus
}
#endif

#endif
