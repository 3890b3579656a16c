/* pdb_cuda_v4_probe: C-callable runs of single pdb_cuda_v4_kernels.h kernels on HOST arrays, for
 * the kernels' test (tests/cuda/test_cuda_v4_ops.c) and for validating them on a GPU: each function
 * copies its inputs to the device 0, runs one launch on the default stream, waits, copies the
 * outputs back and frees everything. Arguments mean what the kernel's do (pdb_cuda_v4_kernels.h);
 * the sizes of the host arrays are stated per function. Invariants: nothing here exits; without a
 * GPU (or a build without nvcc: pdb_cuda_stub.c) each returns an error status with a message
 * (PDB_CUDA / PDB_UNSUPPORTED) and writes no output. Arrays marked in/out are read, then
 * overwritten with the kernel's result. */
#ifndef PDB_CUDA_V4_PROBE_H
#define PDB_CUDA_V4_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "pdb_status.h"

/* emb [V, H]: bf16 bits (uint16) when bf16, else f32; hs [n, hc, H] out. */
pdb_status pdb_cuda_v4_probe_embed_hc(const int32_t *ids, const void *emb, int bf16, int64_t V, int64_t n, int64_t hc,
                                      int64_t H, float *hs);
/* hs [n, hc*H], fn [(2+hc)*hc, hc*H], base [(2+hc)*hc], scale [3], norm [H]; x [n, H], post [n, hc],
 * comb [n, hc, hc] out. */
pdb_status pdb_cuda_v4_probe_hc_pre(int64_t hc, int64_t H, int iters, float hc_eps, double eps, const float *hs,
                                    int64_t n, const float *fn, const float *base, const float *scale, const float *norm,
                                    float *x, float *post, float *comb);
/* The engine's form of the same site: the mixes by pdb_cuda_v4_hc_mix (hc 2 or 4, hc*H a multiple of 64), then
 * pdb_cuda_v4_hc_pre_mixed, which also writes x16 [n, H] (x's bf16 bits) and x16lo [n, H] (bf16(x - x16)); x NULL:
 * f32 x not stored (pdb_cuda_v4_hc_pre_x_optional's shapes; elsewhere PDB_INVALID). */
pdb_status pdb_cuda_v4_probe_hc_pre_mixed(int64_t hc, int64_t H, int iters, float hc_eps, double eps, const float *hs,
                                          int64_t n, const float *fn, const float *base, const float *scale,
                                          const float *norm, float *x, uint16_t *x16, uint16_t *x16lo, float *post,
                                          float *comb);
/* hs [n, hc, H] in/out, out [n, H], post [n, hc], comb [n, hc, hc]. */
pdb_status pdb_cuda_v4_probe_hc_post(int64_t hc, int64_t H, float *hs, const float *out, const float *post,
                                     const float *comb, int64_t n);
/* The MoE post-site: hs [n, hc, H] in/out, ye [slots, H] (f32, or with ye_bf16 bf16 bits), slot_row and wt
 * [n, K], shared [n, H] or NULL, post [n, hc], comb [n, hc, hc]. */
pdb_status pdb_cuda_v4_probe_hc_post_moe(int64_t hc, int64_t H, float *hs, const void *ye, int ye_bf16, int64_t slots,
                                         const int32_t *slot_row, const float *wt, const float *shared, int64_t K,
                                         const float *post, const float *comb, int64_t n);
/* hs [nrows_hs, hc, H], rows [n] (< nrows_hs), fn [hc, hc*H], base [hc], scale [1], norm [H]; y [n, H] out. */
pdb_status pdb_cuda_v4_probe_hc_head(int64_t hc, int64_t H, float hc_eps, double eps, const float *hs,
                                     int64_t nrows_hs, const int64_t *rows, int64_t n, const float *fn,
                                     const float *base, const float *scale, const float *norm, float *y);
/* In place on x [n, ld] (ld >= nh * hd); w [hd] (mode 2, else may be NULL); cs [pos0 + n, rd]. */
pdb_status pdb_cuda_v4_probe_heads_norm_rope(float *x, int64_t ld, int64_t n, int64_t nh, int64_t hd, int64_t rd,
                                             int mode, const float *w, const float *cs, int64_t pos0, int sign,
                                             double eps);
/* The bf16-row form (the bf16 engine's q_b products): x [n, ld] bf16 bits (uint16), read only; y [n, nh * hd]
 * out (the heads packed: ldd = nh * hd), f32 (pdb_cuda_v4_heads_norm_rope) or, bf16_out, bf16 bits
 * (pdb_cuda_v4_heads_norm_rope_bf16). */
pdb_status pdb_cuda_v4_probe_heads_norm_rope_in16(const uint16_t *x, int64_t ld, int64_t n, int64_t nh, int64_t hd,
                                                  int64_t rd, int mode, const float *w, const float *cs, int64_t pos0,
                                                  int sign, double eps, int bf16_out, void *y);
/* kv, gate [nrows, ld] (rows of positions e0 ..), ape [r, coff*dim], norm [dim], cs [w1 * r, rd];
 * out [w1, dim] in/out (rows w0 .. w1-1 written). */
pdb_status pdb_cuda_v4_probe_compress(const float *kv, const float *gate, int64_t nrows, int64_t ld, int64_t e0,
                                      const float *ape, const float *norm, int64_t r, int64_t dim, int coff, int64_t w0,
                                      int64_t w1, const float *cs, int64_t rd, double eps, float *out);
/* dots [n, nih, ld], wt [n, nih]; score [n, lds] in/out. */
pdb_status pdb_cuda_v4_probe_index_reduce(const float *dots, int64_t ld, const float *wt, int64_t n, int64_t nih,
                                          int64_t pos0, int64_t r, int64_t K, float sscale, float *score, int64_t lds);
/* The fused bf16 indexer scores (pdb_cuda_v4_index_scores_tc): q [n, nih, ihd] f32, wt [n, nih],
 * keys [(pos0 + n) / r, ihd] bf16 bits (uint16); score [n, lds] in/out; mma_sync: the mma.sync form where
 * the warpgroup one would run. reps >= 1 launches (the same result each time); gpu_ms (may be NULL) gets
 * the mean time of one launch by CUDA events. */
pdb_status pdb_cuda_v4_probe_index_scores_tc(const float *q, const float *wt, const uint16_t *keys, int64_t n,
                                             int64_t nih, int64_t ihd, int64_t pos0, int64_t r, int64_t K,
                                             float sscale, float *score, int64_t lds, int mma_sync, int reps,
                                             double *gpu_ms);
/* score [n, lds]; sel [n, K], nsel [n] out (sel entries past nsel[t] are left as given). */
pdb_status pdb_cuda_v4_probe_topk(const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r, int64_t K,
                                  int32_t *sel, int32_t *nsel);
/* logits [n, E] in/out (-> scores); ids [n] and tid2eid [V, K] (hash; else NULL, V ignored); bias [E]
 * or NULL; idx, wt [n, K] out. */
pdb_status pdb_cuda_v4_probe_route(float *logits, const int32_t *ids, const int32_t *tid2eid, int64_t V,
                                   const float *bias, int64_t n, int E, int K, int scoring, float rsf, int32_t *idx,
                                   float *wt);
/* g, u [count]; out [count]: bf16 bits (uint16) when bf16, else f32. */
pdb_status pdb_cuda_v4_probe_swiglu(const float *g, const float *u, int64_t count, float limit, int bf16, void *out);

/* g, u [count] bf16 bits (uint16: the bf16 engine's expert products); out [count]: bf16 bits when bf16, else f32. */
pdb_status pdb_cuda_v4_probe_swiglu_in16(const uint16_t *g, const uint16_t *u, int64_t count, float limit, int bf16,
                                         void *out);

/* The exact-order product (pdb_cuda_v4_mm_exact = pdb_cuda_dot32) on random operands A [M, K] . W [N, K]^T:
 * ms[0] the mean of reps launches of dot32's general kernel, ms[1] of its tiled kernel (K % 32 != 0:
 * PDB_UNSUPPORTED), ms[2] cuBLAS's f32 SGEMM (no TF32, its own order) of the same shape; same[1] = 1
 * when the tiled kernel's C has the general one's bits (same[0] = same[2] = 1). */
pdb_status pdb_cuda_v4_probe_mm_rate(int64_t M, int64_t N, int64_t K, int reps, double ms[3], int same[3]);

#ifdef __cplusplus
}
#endif

#endif
