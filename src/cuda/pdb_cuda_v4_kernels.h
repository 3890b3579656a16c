/* pdb_cuda_v4_kernels: the device-resident DeepSeek-V4 engine's own kernels (pdb_cuda_v4_engine.cu):
 * the hyper-connection sites, the per-head norms and RoPE, the compressors, the lightning
 * indexer, the window + compressed attention with its sink, routing and the clipped SwiGLU.
 * Internal header for .cu files; every pointer is device memory unless said otherwise.
 * Invariants: (1) each launcher checks its launch and returns PDB_CUDA naming it; (2) every
 * kernel computes a row's (token's, entry's) result from that row's inputs (and for attention /
 * the indexer the cache rows it reads) in a fixed order that does not depend on how many rows
 * the launch holds, so a position's values do not depend on the chunking (chunked = one shot);
 * (3) the math is pdb_v4.c's (the CPU forward, src/model/deepseek_v4): its formulas, its
 * semantics "exact" (transformers 5.17: no FP8/FP4 simulation on cached rows), f32 values with
 * sums in f32 or double as noted; an engine built on these kernels is close to the CPU's
 * forward (f32 weights: to f32 rounding), not bit-identical to it.
 * RoPE tables: cs [P, rd] f32, row p = pdb_rope_angles(rope, p) (interleaved pairs (x[2i],
 * x[2i+1]) rotated by (cos, sin) = (cs[2i], cs[2i+1]), attention factor included), made once on
 * the host for positions 0..P-1; sign -1 rotates by the inverse (cos, -sin), which is
 * pdb_rope_apply at position -p. */
#ifndef PDB_CUDA_V4_KERNELS_H
#define PDB_CUDA_V4_KERNELS_H

#include "pdb_cuda_util.h"

/* The rotation of one pair (pdb_rope.c rope_rotate): a' = a c - b s, b' = a s + b c (shared by
 * heads_norm_rope and the attention kernel's fused inverse rotation: the same bits). */
static __device__ __forceinline__ void rot_pair(float *v, float c, float s) {
    float a = v[0], b = v[1];
    v[0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

/* C [M, N] (row stride ldc) = A [M, K] (row stride lda) . W [N, K]^T in f32, every element in
 * pdb_qmat's order (lane j of 32 takes k = j mod 32 by fused multiply-adds in k order from 0, the
 * lanes folded 32->16->...->1 as lane i + lane i + half): bit-identical to pdb_v4_mm_ref and the CPU
 * hook on f32 weights, at any M. It is pdb_cuda_dot32 (pdb_cuda_kernels.h), V2's kernel (D50). */
pdb_status pdb_cuda_v4_mm_exact(cudaStream_t s, const float *A, int64_t lda, const float *W, float *C, int64_t ldc,
                                int64_t M, int64_t N, int64_t K);

/* hs [n, hc, H] = embedding row ids[t] of emb [V, H] (dt) in each of the hc streams. */
pdb_status pdb_cuda_v4_embed_hc(cudaStream_t s, const int32_t *ids, const void *emb, pdb_cuda_dt dt, int64_t n,
                                int64_t hc, int64_t H, float *hs);

/* One hyper-connection site's constants (pdb_v4.c hc_norm / hc_mixes / hc_finish / hc_head). */
typedef struct pdb_cuda_v4_hc {
    int64_t hc, H;     /* streams, hidden size; hc <= 8 */
    int iters;         /* Sinkhorn iterations (cfg.hc_sinkhorn_iters) */
    float hc_eps;      /* cfg.hc_eps */
    double eps;        /* cfg.rms_norm_eps */
} pdb_cuda_v4_hc;

/* The pre-site of a sub-block, per token t (a block per token):
 *   tmp = hs_t / sqrt(mean(hs_t^2) + eps) over all hc*H values (unweighted; double sum);
 *   mixes[j] = fn[j, :] . tmp for j < (2+hc)*hc (fn f32 [(2+hc)*hc, hc*H]; double sums);
 *   pre[k] = sigmoid(mixes[k]*scale[0] + base[k]) + hc_eps; post[t,k] = 2*sigmoid(mixes[hc+k]*scale[1] + base[hc+k]);
 *   comb[t,i,j] = softmax_j(mixes[2hc + i*hc + j]*scale[2] + base[2hc + i*hc + j]) + hc_eps, then
 *   Sinkhorn: iteration 0 normalises columns (sum over i, + hc_eps in the denominator), iterations
 *   1..iters-1 rows then columns (each divides by (float)sum + hc_eps);
 *   x[t, d] = sum_k pre[k] * hs_t[k, d] (double), then x_t = RMSNorm(x_t) * norm (norm [H], eps).
 * comb[t, j, k] is the weight of old stream j in new stream k (pdb_v4.c's layout). */
pdb_status pdb_cuda_v4_hc_pre(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, int64_t n, const float *fn,
                              const float *base, const float *scale, const float *norm, float *x, float *post,
                              float *comb);
/* The same site given rawmix [n, (2+hc)*hc] = hs_t . fn[j] (unnormalised: the engine's f32 GEMM over the
 * pass), mixes[j] = r_t * rawmix[t, j] with r_t the unweighted norm's factor, the rest as hc_pre: its
 * values to f32 rounding, not its bits. x16 (NULL: none): x's bf16 copy (__nv_bfloat16 [n, H], each value
 * rounded to nearest even: pdb_cuda_convert's bits of x), the bf16 engine's operand; x16lo (NULL: none, else
 * x16 too): bf16(x - x16), pdb_cuda_split_bf16's lo (the router's product at near-f32 precision). x may be
 * NULL (not stored: a bf16 engine's site whose f32 x nobody reads) with x16 given where
 * pdb_cuda_v4_hc_pre_x_optional(c), else PDB_INVALID. */
int pdb_cuda_v4_hc_pre_x_optional(const pdb_cuda_v4_hc *c);
pdb_status pdb_cuda_v4_hc_pre_mixed(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, int64_t n,
                                    const float *rawmix, const float *base, const float *scale, const float *norm,
                                    float *x, void *x16, void *x16lo, float *post, float *comb);
/* rawmix [n, (2+hc)*hc] = hs [n, N] . fn [(2+hc)*hc, N]^T (N = hc*H) in f32, for hc 2 or 4 and N a multiple of 64
 * (pdb_cuda_v4_hc_mix_fits; hs and fn 16-byte aligned, else PDB_UNSUPPORTED): each value sums its k in order
 * within chunks of 64 (fused multiply-adds from 0), the chunks' sums in order, so a token's values depend on its
 * row alone (M-invariant), not on cuBLAS's choice of kernel for the pass's shape. */
int pdb_cuda_v4_hc_mix_fits(int64_t hc, int64_t N);
pdb_status pdb_cuda_v4_hc_mix(cudaStream_t s, int64_t hc, const float *hs, int64_t n, int64_t N, const float *fn, float *rawmix);
/* The post-site: hs[t, k, d] = post[t, k] * out[t, d] + sum_j comb[t, j, k] * hs_old[t, j, d] (double, j in
 * order), in place (each column reads only its own old values). */
pdb_status pdb_cuda_v4_hc_post(cudaStream_t s, const pdb_cuda_v4_hc *c, float *hs, const float *out, const float *post,
                               const float *comb, int64_t n);
/* The MoE sub-block's output rows as pdb_cuda_moe_combine reads them: ye [slots, H] (of ydt: f32, or bf16
 * widened to f32 as it is read), slot_row and wt [n, K], shared [n, H] (f32) or NULL. */
typedef struct pdb_cuda_v4_moe_rows {
    const void *ye;
    pdb_cuda_dt ydt;
    const int32_t *slot_row;
    const float *wt;
    const float *shared;
    int64_t K;
} pdb_cuda_v4_moe_rows;
/* The post-site after the MoE: pdb_cuda_v4_hc_post of out = pdb_cuda_moe_combine(m) into a zeroed row, with the
 * same bits; at hc 4 (H % 4 == 0, 16-byte aligned rows) out is made per column inside the post-site and never
 * stored, else it is made in out [n, H] first (f32 ye only: bf16 ye outside the hc-4 form is PDB_UNSUPPORTED). */
pdb_status pdb_cuda_v4_hc_post_moe(cudaStream_t s, const pdb_cuda_v4_hc *c, float *hs, const pdb_cuda_v4_moe_rows *m,
                                   const float *post, const float *comb, int64_t n, float *out);
/* The final collapse of tokens rows[i] (device int64 [n]) of hs: y[i] = RMSNorm(sum_k pre[k] * hs_t[k]) * norm with
 * pre[k] = sigmoid(mix[k] * scale[0] + base[k]) + hc_eps, mix = fn [hc, hc*H] . tmp (tmp as in hc_pre). */
pdb_status pdb_cuda_v4_hc_head(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, const int64_t *rows, int64_t n,
                               const float *fn, const float *base, const float *scale, const float *norm, float *y);

/* Rows of heads, in place or into dst: for token t (position pos0 + t) and head h, the vector v =
 * src[t * ld + h * hd .. + hd) (src of type sdt: f32, or bf16 widened to f32 as it is read, the
 * same f32 math after) is
 *   mode 0: left as is; mode 1: v / sqrt(mean(v^2) + eps) (unweighted, double sum);
 *   mode 2: RMSNorm(v) * w (w [hd]);
 * then its trailing rd dims are rotated by cs row pos0 + t (sign +1) or its inverse (sign -1), and
 * written to dst[t * ldd + h * hd ..]. dst == src is allowed (ldd == ld, sdt f32). */
pdb_status pdb_cuda_v4_heads_norm_rope(cudaStream_t s, const void *src, pdb_cuda_dt sdt, int64_t ld, float *dst, int64_t ldd,
                                       int64_t n, int64_t nh, int64_t hd, int64_t rd, int mode, const float *w,
                                       const float *cs, int64_t pos0, int sign, double eps);
/* The same rows written as bf16 (dst __nv_bfloat16, ldd in elements): each value the f32 result
 * rounded to nearest even, so dst holds pdb_cuda_convert's bits of the f32 form's output. */
pdb_status pdb_cuda_v4_heads_norm_rope_bf16(cudaStream_t s, const void *src, pdb_cuda_dt sdt, int64_t ld, void *dst,
                                            int64_t ldd, int64_t n, int64_t nh, int64_t hd, int64_t rd, int mode,
                                            const float *w, const float *cs, int64_t pos0, int sign, double eps);

/* A compressor's entries w = w0 .. w1-1 (pdb_v4.c compress_tokens): the rows of position p are kv
 * [(p - e0) * ld ..] and gate [(p - e0) * ld ..] (the raw projections, D = coff * dim values;
 * ape [r, D] is added to the gate here: g(p, i) = gate(p, i) + ape[(p % r) * D + i]); window w is
 * positions w*r .. w*r + r - 1, every one >= e0. Per dim d < dim: the slots are, for coff 2
 * (CSA, overlapping) and w > 0, window w-1's first halves (kv/gate dims d) then window w's second
 * halves (dims dim + d), for w == 0 or coff 1 window w's dims (coff - 1) * dim + d alone; entry
 * e[d] = sum softmax(g) * kv over the slots (max-subtracted exp in double, double sums); then
 * e = RMSNorm(e) * norm (norm [dim], eps), its trailing rd dims rotated by cs row w * r, written to
 * out [w * dim ..]. */
pdb_status pdb_cuda_v4_compress(cudaStream_t s, const float *kv, const float *gate, int64_t ld, int64_t e0,
                                const float *ape, const float *norm, int64_t r, int64_t dim, int coff, int64_t w0,
                                int64_t w1, const float *cs, int64_t rd, double eps, float *out);

/* The lightning indexer, in two steps after the engine's GEMM dots [n, nih, ld] = q . keys^T (q
 * [n, nih, ihd] rotated, keys [nv, ihd] the compressed index keys; pdb_v4.c run_indexer, semantics
 * exact). Token t (position pos0 + t) sees nv_t = (pos0 + t + 1) / r keys.
 * index_reduce: score [t * lds + w] = sscale * sum_h wt[t * nih + h] * relu(dots[(t * nih + h) * ld
 * + w]) (f32 sum in h order) for w < nv_t, for tokens with nv_t > K only (others untouched); wt
 * already times 1/sqrt(nih).
 * topk: nv_t <= K: sel[t, i] = i (i < nv_t), nsel[t] = nv_t; else sel[t, 0..K) = the K highest
 * scores of row t (equal scores: the lower w wins), in ascending w order, nsel[t] = K. A block per
 * token, any nv (radix select). */
pdb_status pdb_cuda_v4_index_reduce(cudaStream_t s, const float *dots, int64_t ld, const float *wt, int64_t n,
                                    int64_t nih, int64_t pos0, int64_t r, int64_t K, float sscale, float *score,
                                    int64_t lds);
/* index_scores_tc: the bf16 engine's fused replacement of the GEMM + index_reduce (no dots buffer;
 * pdb_cuda_v4_index_tc.cu): the same score rows from q [n, nih, ihd] f32 (rotated; rounded to
 * bf16, nearest even, for the product) and keys_bf16 [nv, ihd] (__nv_bfloat16, 16-byte aligned,
 * rows 0 .. (pos0 + n) / r - 1 readable): for tokens with nv_t > K only, score [t * lds + w] =
 * sscale * sum_h wt[t * nih + h] * relu(q_th . key_w) for w < nv_t (others untouched); the dot
 * on tensor cores (mma m16n8k16, f32 accumulation in ascending d), the head sum in f32 in a FIXED
 * order that depends only on h (D46: per lane c = 0..3 of a quad, s = fma(wt[h], relu(dot), s) from
 * 0 over h = 8 j + 2 c + b in (j, b) order, then (s_0 + s_1) + (s_2 + s_3)), never on n, pos0 or the
 * token's block: chunked = one shot bit for bit. Any nv (key tiles of 64 over grid.y). On sm_90a
 * with 32 < nih <= 64 and ihd 128 (V4-Flash) the dots come from warpgroup MMA (wgmma m64n256k16) with
 * the same head-sum order, unless mma_sync; elsewhere mma_sync makes no difference.
 * PDB_UNSUPPORTED unless pdb_cuda_v4_index_scores_tc_fits(nih, ihd) (nih <= 64, ihd % 16 == 0,
 * 16 <= ihd <= 256); q and keys_bf16 16-byte aligned. */
int pdb_cuda_v4_index_scores_tc_fits(int64_t nih, int64_t ihd);
pdb_status pdb_cuda_v4_index_scores_tc(cudaStream_t s, const float *q, const float *wt, const void *keys_bf16,
                                       int64_t n, int64_t nih, int64_t ihd, int64_t pos0, int64_t r, int64_t K,
                                       float sscale, float *score, int64_t lds, int mma_sync);
pdb_status pdb_cuda_v4_topk(cudaStream_t s, const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r,
                            int64_t K, int32_t *sel, int32_t *nsel);

/* One layer's attention for n tokens at positions pos0 .. (pdb_v4_attn_desc's contract with
 * device pointers; per (t, h): window keys then compressed entries, scores q.k * scale, a softmax
 * whose denominator also holds exp(sink[h] - max) (the sink takes part in the max), o = sum P k):
 * keys [(pos0 - lo) + n, hd] holds the K=V rows of positions lo ..; window of position p = rows
 * max(p - W + 1, lo) .. p; compressed: CSA (sel != NULL) entries sel[t, 0..nsel[t]) of comp
 * [., hd]; HCA (rate > 0) entries 0 .. (p + 1) / rate - 1; else none. q [n, nh, hd], o [n, nh, hd]
 * (before the inverse RoPE). All f32 in memory.
 * attention: f32 on CUDA cores (scores and sums in f32, fixed order): the validation engine's.
 * attention_tc: the bf16 engine's, on the tensor cores (pdb_cuda_v4_attn.cu: one token's heads per
 * block of 64 query rows, Q, K, V and P rounded to bf16, f32 accumulation, online softmax over
 * key tiles of 64 in the order window then compressed); PDB_UNSUPPORTED unless
 * pdb_cuda_v4_attention_tc_fits(hd). */
pdb_status pdb_cuda_v4_attention(cudaStream_t s, const float *q, const float *keys, int64_t lo, const float *comp,
                                 const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate, int64_t n, int64_t nh,
                                 int64_t hd, int64_t pos0, int64_t W, const float *sinks, float scale, float *o);
int pdb_cuda_v4_attention_tc_fits(int64_t hd);
pdb_status pdb_cuda_v4_attention_tc(cudaStream_t s, const float *q, const float *keys, int64_t lo, const float *comp,
                                    const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate, int64_t n,
                                    int64_t nh, int64_t hd, int64_t pos0, int64_t W, const float *sinks, float scale,
                                    float *o);
/* attention_tc16: attention_tc's math (Q and P rounded to bf16, f32 accumulation, online softmax
 * over key tiles of 64, window then compressed) on bf16 q rows (q_bf16 [n, nh, hd]: attention_tc's
 * q rounded to nearest even, as attention_tc rounds it) and bf16 copies of the key rows: keys_bf16 and
 * comp_bf16 are laid out exactly as keys and comp (__nv_bfloat16 [., hd], row r at r * hd; the
 * engine's mirrors, each value the f32 row's value rounded to nearest even, so the products equal
 * attention_tc's), 16-byte aligned (hd % 16 == 0 keeps every row 16-byte aligned); q 16-byte and o
 * 8-byte aligned. Key tiles stream into shared memory by cp.async, double buffered (tile i + 1's
 * copy overlaps tile i's compute). Not bit-identical to attention_tc (each score is the sum of
 * two hd halves' tensor-core sums, the softmax denominator is summed in another fixed order),
 * equally close to the reference; per (token, head) a fixed order, chunked = one shot bit for bit. PDB_UNSUPPORTED unless pdb_cuda_v4_attention_tc16_fits(hd)
 * (hd % 16 == 0, hd <= 512, shared memory 384 (hd + 8) + 28672 bytes: 228352 at hd 512). */
int pdb_cuda_v4_attention_tc16_fits(int64_t hd);
/* Where attention_tc16 writes O: o [n, nh, hd] f32, or (bf16) __nv_bfloat16 rounded to nearest even;
 * cs != NULL: each head's trailing rd dims rotated back by cs row pos0 + t first (heads_norm_rope's
 * mode 0, sign -1, with the same products), so that the bf16 form holds pdb_cuda_convert's bits of
 * what attention then heads_norm_rope(sign -1) would give (the engine's operand of wo_a). */
typedef struct pdb_cuda_v4_attn_out {
    void *o;
    int bf16;
    const float *cs;
    int64_t rd;
} pdb_cuda_v4_attn_out;
pdb_status pdb_cuda_v4_attention_tc16(cudaStream_t s, const void *q_bf16, const void *keys_bf16, int64_t lo,
                                      const void *comp_bf16, const int32_t *sel, const int32_t *nsel, int64_t K,
                                      int64_t rate, int64_t n, int64_t nh, int64_t hd, int64_t pos0, int64_t W,
                                      const float *sinks, float scale, const pdb_cuda_v4_attn_out *out);
/* attention_wg: attention_tc16's contract and math (the same lazy max, sink state and bf16 P) on
 * Hopper's warpgroup MMA (pdb_cuda_v4_attn.cu's k_v4_attn_wg): not bit-identical to tc16 (other
 * accumulation orders inside the products), equally close to the reference; per (token, head) a
 * fixed order, chunked = one shot bit for bit. PDB_UNSUPPORTED unless pdb_cuda_v4_attention_wg_fits(hd):
 * hd == 512, this build has sm_90a code (PDB_CUDA_WGMMA) and the device is compute capability 9.0. */
int pdb_cuda_v4_attention_wg_fits(int64_t hd);
pdb_status pdb_cuda_v4_attention_wg(cudaStream_t s, const void *q_bf16, const void *keys_bf16, int64_t lo,
                                    const void *comp_bf16, const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate,
                                    int64_t n, int64_t nh, int64_t hd, int64_t pos0, int64_t W, const float *sinks,
                                    float scale, const pdb_cuda_v4_attn_out *out);

/* Routing of n tokens (pdb_v4_route): logits [n, E] (the router product) -> scores in place
 * (scoring: pdb_v4_score: sqrt(softplus) (softplus(l) = l for l > 20, else log1p(exp(l))),
 * softmax, sigmoid); tid2eid != NULL (hash layer): idx[t, k] = tid2eid[ids[t] * K + k], else the
 * top-K of scores + bias (bias NULL: 0; equal values: lower expert first); wt[t, k] = score[idx] /
 * ((float)sum of the K picked scores (double) + 1e-20) * rsf. E <= 1024, K <= 16. */
pdb_status pdb_cuda_v4_route(cudaStream_t s, float *logits, const int32_t *ids, const int32_t *tid2eid,
                             const float *bias, int64_t n, int E, int K, int scoring, float rsf, int32_t *idx,
                             float *wt);

/* out [count] (dt) = silu(g') * u' with g' = min(g, limit), u' = clamp(u, -limit, limit) when
 * limit > 0 (else g, u), silu(a) = a / (1 + exp(-a)) (f32); bf16 rounds to nearest even. g, u
 * [count] of type gdt (bf16: widened to f32 as read, the same f32 math). out == g is allowed
 * when gdt == dt. */
pdb_status pdb_cuda_v4_swiglu(cudaStream_t s, const void *g, const void *u, pdb_cuda_dt gdt, int64_t count, float limit,
                              pdb_cuda_dt dt, void *out);

#endif
