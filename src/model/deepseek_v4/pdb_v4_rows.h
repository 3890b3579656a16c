/* pdb_v4_rows: the byte layout of one cached V4 row (a K=V row / compressed entry, an indexer key)
 * as a function of (config, semantics), the one definition the decoder's memory, its store blocks,
 * the capture hook's segments and the CPU prefill engine share (docs/formats/block.md, D36).
 * Invariants: under `official` every K=V row's non-rotary part is exactly e4m3 x 2^k per 64 values
 * and every indexer key exactly e2m1 x 2^k per 32 (pdb_v4_qsim's roundings), so the compact rows
 * below hold them without loss: pdb_v4_row_decode(pdb_v4_row_encode(x)) == x bit for bit (signed
 * zeros included) for every row the official path produces, and encode reports any value it could
 * not reproduce. `exact` rows are the f32 values themselves. A row's size is a multiple of 4 bytes
 * and its f32 part comes first, so rows packed back to back keep every float 4-byte aligned.
 *
 * Row byte layouts (offsets in bytes; all multi-byte values little-endian):
 *   F32  (exact: K=V rows, entries, indexer keys)   [0, 4*dim)  dim f32 values, dim 0 first
 *   FP8  (official: K=V rows and compressed entries; dim = head_dim, r = rotary dims, n = dim - r)
 *        [0, 4r)              the r rotary values (dims n .. dim-1) as f32, not quantized
 *        [4r, 4r + n)         e4m3 codes of dims 0 .. n-1 (value = e4m3 * 2^(s_b - 127), b = d / 64)
 *        [4r + n, 4r + n + n/64)  e8m0 scale bytes s_b, one per 64 non-rotary dims
 *        then zero bytes up to a multiple of 4 (V4-Flash: 256 + 448 + 7 + 1 = 712 bytes, f32 2048)
 *   FP4  (official: indexer keys; dim = index_head_dim)
 *        [0, dim/2)           e2m1 codes, dim 2i in the low nibble of byte i, 2i+1 in the high one
 *        [dim/2, dim/2 + dim/32)  e8m0 scale bytes, one per 32 dims (value = e2m1 * 2^(s_b - 127))
 *        then zero bytes up to a multiple of 4 (V4-Flash: 64 + 4 = 68 bytes, f32 512) */
#ifndef PDB_V4_ROWS_H
#define PDB_V4_ROWS_H

#include <stdint.h>

#include "pdb_config.h"

typedef enum pdb_v4_row_fmt {
    PDB_V4_ROW_F32 = 0, /* f32 values */
    PDB_V4_ROW_FP8 = 1, /* rotary f32 | e4m3 non-rotary | e8m0 per 64 */
    PDB_V4_ROW_FP4 = 2  /* packed e2m1 | e8m0 per 32 */
} pdb_v4_row_fmt;

typedef struct pdb_v4_row {
    pdb_v4_row_fmt fmt;
    int64_t dim;        /* values per row */
    int64_t rope;       /* FP8: the trailing rotary dims (kept f32); else 0 */
    int64_t off_codes;  /* byte offset of the codes (FP8: 4 * rope; FP4: 0) */
    int64_t off_scales; /* byte offset of the e8m0 scales */
    int64_t bytes;      /* bytes per row (a multiple of 4) */
} pdb_v4_row;

/* The K=V row (sliding window, CSA / HCA compressed entries) and the indexer key of config c
 * under semantics sem (a pdb_v4_semantics value): FP8 / FP4 under official, F32 under exact. */
pdb_v4_row pdb_v4_row_kv(const pdb_config *c, int sem);
pdb_v4_row pdb_v4_row_ikey(const pdb_config *c, int sem);

/* x [dim] -> row [bytes]. x must be a row the semantics' rounding produced (FP8: pdb_v4_qsim_fp8 of
 * its non-rotary dims; FP4: pdb_v4_qsim_fp4); returns the number of values the row does not
 * reproduce bit for bit (0 for every such row; NaN counts as reproduced by a NaN). */
int64_t pdb_v4_row_encode(const pdb_v4_row *r, const float *x, uint8_t *row);
/* row -> x [dim], exactly. */
void pdb_v4_row_decode(const pdb_v4_row *r, const uint8_t *row, float *x);
/* n rows: out[i * dim ..] = decode(base + (idx ? idx[i] : i) * bytes). */
void pdb_v4_row_decode_rows(const pdb_v4_row *r, const uint8_t *base, const int32_t *idx, int64_t n, float *out);

/* 2^(e - 127) as a float for an e8m0 byte e < 255 (e = 0: 2^-127, a subnormal). */
float pdb_v4_row_scale(uint8_t e);

#endif
