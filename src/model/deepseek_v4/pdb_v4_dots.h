/* pdb_v4_dots: the V4 step's reductions that are not products with a weight matrix (the
 * hyper-connection mixes, the attention's scores and weighted sums, the lightning indexer's key
 * scores and top-k), in many independent chains at once. Invariant: every output is the same
 * sequential double sum as the one-chain loop it replaces (element i added in order, each product
 * of two floats computed exactly in double), so every result is bit-identical to that loop on
 * every ISA, vector width, thread count and chunking; the chains only run side by side (in
 * registers of eight doubles, GCC vector extensions: the same IEEE operations everywhere). */
#ifndef PDB_V4_DOTS_H
#define PDB_V4_DOTS_H

#include <stdint.h>

/* out[j] = (float)(sum_{i<n} (double)row_j[i] * x[i]), row_j = w + (idx ? idx[j] : j) * ldw, j < m. */
void pdb_v4_dotd_rows(const float *w, int64_t ldw, const int32_t *idx, int64_t m, const float *x, int64_t n, float *out);

/* Scores of nq queries against m keys: out[h * ldo + j] = (float)(sum_{d<n} (double)q_h[d] * key_j[d]),
 * q_h = q + h * ldq, key_j as row_j above (the attention's q . k). kt: scratch of 8 * n doubles. */
void pdb_v4_dotd_keys(const float *q, int64_t ldq, int64_t nq, const float *w, int64_t ldw, const int32_t *idx, int64_t m,
                      int64_t n, float *out, int64_t ldo, double *kt);

/* Weighted sums of m keys for nq heads: acc[h * n + e] += (double)p[h * ldp + j] * key_j[e] for
 * j = 0 .. m-1 in order, e < n, h < nq (the attention's sum of probability times value). */
void pdb_v4_mixd_keys(double *acc, const float *p, int64_t ldp, int64_t nq, const float *w, int64_t ldw, const int32_t *idx,
                      int64_t m, int64_t n);

/* The lightning indexer's scores of keys [w0, w1) (keys [*, ihd]) for one query q [nih, ihd]:
 *   out[w - w0] = (float)(sum_h (double)(relu_s(dotd(q_h, k_w)) * hw[h]))
 * with relu_s(d) = d > 0 ? d * sscale : 0 (f32) and dotd the sequential double dot rounded to
 * float; h in order. hw [nih]: the head weights already scaled (f32). */
void pdb_v4_index_scores(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *keys, int64_t w0,
                         int64_t w1, float sscale, float *out);

/* The indexer's pick: the k best of sc [n] (n > k > 0) in the order (score descending, equal
 * scores by lower index), their indices into sel [k] in that order. A total order, so the result
 * is the prefix of the full sort by it; selection plus a sort of k. tmp: pdb_v4_topk_scratch_bytes(n)
 * bytes of scratch. */
int64_t pdb_v4_topk_scratch_bytes(int64_t n);
void pdb_v4_topk(const float *sc, int64_t n, int64_t k, int32_t *sel, void *tmp);

/* Use the AVX-512 builds of the kernels where the CPU has them (default) or the baseline ones
 * (tests compare the two: same results); returns the previous setting. */
int pdb_v4_dots_use_wide(int on);

#endif
