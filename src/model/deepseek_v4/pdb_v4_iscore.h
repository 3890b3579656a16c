/* pdb_v4_iscore: the lightning indexer's per-step key scores read straight from the cache's indexer
 * key rows (pdb_v4_rows: f32 under exact, packed e2m1 + e8m0 per 32 under official), with every
 * score bit-identical to pdb_v4_index_scores on the same keys as f32.
 * Why FP4 x FP4 can be exact and fast: under official a query head and a key are both e2m1 x 2^k
 * per block of 32, so 2q and 2k are integers in [-12, 12] and each product of the sequential double
 * dot is an integer times 2^(Eq_b + Ek_b - 2). A block's sum is an exact integer (|N_b| <= 4608);
 * while the block exponents of a (head, key) pair span at most 38 (spread(q) + spread(k) <= 38),
 * every partial sum of the reference's double chain is a multiple of 2^(e_min - 2) below 2^53 of
 * them, so that chain is exact and equals sum_b N_b * 2^(e_b - 2) in any order. The integer sums
 * run on int8 dot-product instructions (AVX-512 VNNI, 16 keys per register), or a portable scalar
 * loop; a tile of keys outside that bound (or with a NaN scale byte) is decoded to f32 and scored
 * by pdb_v4_index_scores itself. What follows the dot (float rounding, relu times the scale, times
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

/* Which integer kernel runs (0: the portable scalar loop, 1: AVX-512 VNNI where the CPU has it, the
 * default); returns the previous setting (tests and the benchmark compare them). */
int pdb_v4_iscore_use_vnni(int on);
/* Keys scored so far by the integer kernels and by the f32 path (FP4 keys outside the exponent
 * bound, or a query that is not FP4); process-wide counters (tests and the benchmark). */
void pdb_v4_iscore_counts(int64_t *int_keys, int64_t *f32_keys);

#endif
