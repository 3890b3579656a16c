/* pdb_v4_iscore: the lightning indexer's per-step key scores read straight from the cache's indexer
 * key rows (pdb_v4_rows: f32 under exact, packed e2m1 + e8m0 per 32 under official), with every
 * score bit-identical to pdb_v4_index_scores on the same keys as f32.
 * Why FP4 x FP4 can be exact and fast: under official a query head and a key are both e2m1 x 2^k
 * per block of 32, so 2q and 2k are integers in [-12, 12] and each product of the sequential double
 * dot is an integer times 2^(Eq_b + Ek_b - 2). A block's sum is an exact integer (|N_b| <= 4608);
 * while the block exponents of a (head, key) pair span at most s, with 144 * dim * 2^s <= 2^53
 * (dim 128: s = 38; checked as spread(q) + spread(k) <= s), every partial sum of the reference's
 * double chain is a multiple of 2^(e_min - 2) of at most 2^53 of them, so that chain is exact and
 * equals sum_b N_b * 2^(e_b - 2) in any order. The integer sums
 * run on int8 dot-product instructions (AVX-512 VNNI, 16 keys per register) or a portable scalar
 * loop; without VNNI the default is the f32 path (keys decoded exactly, a tile at a time, scored by
 * pdb_v4_index_scores itself: about the speed of f32 keys, from a seventh of the bytes), which a tile of
 * keys outside that bound (or with a NaN scale byte) takes in every kernel. What follows the dot (float rounding, relu times the scale, times
 * the head weight in f32, the double sum over heads in order) is the reference's, per key. */
#ifndef PDB_V4_ISCORE_H
#define PDB_V4_ISCORE_H

#include <stdint.h>

#include "pdb_v4_rows.h"

/* Scratch bytes of one token's prepared queries (pdb_v4_iscore_prepare). */
int64_t pdb_v4_iscore_query_bytes(int64_t nih, int64_t ihd);
/* Prepare the queries q [nih, kr->dim] (f32, after the semantics' rounding) of one token for keys of
 * format kr into iq (pdb_v4_iscore_query_bytes). q must stay valid while iq is used. */
void pdb_v4_iscore_prepare(const pdb_v4_row *kr, const float *q, const float *hw, int64_t nih, float sscale, void *iq);
/* The scores of keys [w0, w1) (rows of kr at keys + w * kr->bytes) for the prepared query:
 * out[w - w0] = pdb_v4_index_scores(q, hw, nih, dim, keys as f32, w0, w1, sscale)[w - w0], bit for bit. */
void pdb_v4_iscore(const void *iq, const uint8_t *keys, int64_t w0, int64_t w1, float *out);

/* Which kernel scores FP4 rows: PDB_V4_ISCORE_F32 (decoded tiles, pdb_v4_index_scores), _SCALAR (the
 * portable integer loop), _VNNI (AVX-512 VNNI; where the CPU lacks it, F32). Default: VNNI where
 * present, else F32. Returns the previous setting (tests and the benchmark compare them). */
enum { PDB_V4_ISCORE_F32 = 0, PDB_V4_ISCORE_SCALAR = 1, PDB_V4_ISCORE_VNNI = 2 };
int pdb_v4_iscore_kernel(int k);
/* 1 when the CPU (and the build) has the VNNI kernel. */
int pdb_v4_iscore_has_vnni(void);
/* Keys scored so far by the integer kernels, and the FP4 keys the f32 path took instead of them
 * (outside the exponent bound, or a query that is not FP4); process-wide counters (tests and the
 * benchmark; the F32 kernel's own keys are in neither). */
void pdb_v4_iscore_counts(int64_t *int_keys, int64_t *f32_keys);

#endif
