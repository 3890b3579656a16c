/* pdb_cuda_kernels: the CUDA backend's own kernels (norms, RoPE + latent-row write into the
 * paged cache, flash-style absorbed MLA attention, MoE routing/gather/combine, the capture
 * hook's fixed-order dot). Internal header for .cu files.
 * Invariants: each launcher checks its launch; every kernel computes a row's result from that
 * row (and, for attention, the cache rows before it) in a fixed order independent of the
 * launch's row count, so a position's values do not depend on chunking; pdb_cuda_dot32 (the hook
 * and the exact engine's products) reproduces pdb_qmat_dot bit for bit, and the elementwise math
 * (RMSNorm's sum, SiLU, softmax, routing, the MoE combine) uses the CPU's formulas and roundings. */
#ifndef PDB_CUDA_KERNELS_H
#define PDB_CUDA_KERNELS_H

#include "pdb_cuda_util.h"

/* Paged latent cache of one layer: row (pos p) lives at
 * base + ((int64_t)ptab[p / page] * page + p % page) * rowpad, elements of type dt. */
typedef struct pdb_cuda_pages {
    void *base;          /* this layer's pages */
    const int32_t *ptab; /* [logical pages] -> physical page (device) */
    int64_t page, rowpad;
    pdb_cuda_dt dt;
} pdb_cuda_pages;

/* Hard limits of the attention kernel (checked at create). */
enum { PDB_CUDA_MAX_KVL = 512, PDB_CUDA_MAX_ROW = 640, PDB_CUDA_MAX_EXPERTS = 1024 };

/* h [n, H] f32 = embedding rows ids[n] of emb [V, H] (dt). */
pdb_status pdb_cuda_embed(cudaStream_t s, const int32_t *ids, const void *emb, pdb_cuda_dt dt, int64_t n, int64_t H,
                          float *h);
/* y [n, ldy] = RMSNorm(x [n, ldx]) * w over C columns (pdb_math_rmsnorm's formula, double sum). */
pdb_status pdb_cuda_rmsnorm(cudaStream_t s, const float *x, int64_t ldx, const float *w, float *y, int64_t ldy,
                            int64_t n, int64_t C, double eps);
/* The same formula with the sum in another fixed order, a warp per row (lane j adds columns j, j +
 * 32, ... in double, then a shuffle butterfly): coalesced, for the engines that need not match the
 * CPU's order bit for bit (bf16, f32); still a function of the row alone. In place is safe. */
pdb_status pdb_cuda_rmsnorm_warp(cudaStream_t s, const float *x, int64_t ldx, const float *w, float *y, int64_t ldy,
                                 int64_t n, int64_t C, double eps);
/* dst [count] of dt from src f32 (bf16: round to nearest even); returns dst (or src for f32). */
pdb_status pdb_cuda_convert(cudaStream_t s, const float *src, int64_t count, pdb_cuda_dt dt, void *dst);
/* A two-term bf16 split of f32 src: hi [count] = bf16(src) (NULL: not written), lo = bf16(src - hi), both
 * nearest even, so that src = hi + lo to about 2^-16 of |src| (a product over hi and lo terms on bf16 tensor
 * cores reads src nearly at f32 precision). lo_nonzero (device int, NULL: not kept) is or-ed with 1 if any lo
 * is not zero (src already bf16 values: all lo are zero). */
pdb_status pdb_cuda_split_bf16(cudaStream_t s, const float *src, int64_t count, void *hi, void *lo, int *lo_nonzero);
/* Engine latent rows for n tokens at positions pos0..: cache row = [RMSNorm(kva[:kvl]) * norm |
 * RoPE(kva[kvl:])], and qlat[t, h, kvl:] = RoPE(q[t, h, nope:]). cs: [n, rope] (cos[rope/2] then
 * sin[rope/2] per token, attention factor included). */
pdb_status pdb_cuda_latent_write(cudaStream_t s, const float *kva, const float *norm, const float *cs,
                                 const pdb_cuda_pages *pg, int64_t pos0, int64_t n, int64_t kvl, int64_t rope,
                                 const float *q, int64_t nh, int64_t nope, float *qlat, double eps);
/* Causal absorbed attention over the latent cache: olat [n*nh, kvl] = softmax(scale * qlat
 * [n*nh, row] . rows[0..pos]) @ rows[:, :kvl], row index = token * nh + head. Online softmax over
 * tiles of 32 cache rows; never materialises scores. */
pdb_status pdb_cuda_attention(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0, int64_t n,
                              int64_t nh, int64_t kvl, int64_t row, float scale, float *olat);
/* The same attention on the tensor cores (pdb_cuda_mla_tc.cu: bf16 Q, K, V and P, f32
 * accumulation and softmax state), for a bf16 cache; chunk-invariant like pdb_cuda_attention.
 * PDB_UNSUPPORTED unless pdb_cuda_mla_tc_fits(kvl, row) (kvl a multiple of 16, at most 512; the
 * tile's shared memory within the device's limit). */
pdb_status pdb_cuda_attention_tc(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0, int64_t n,
                                 int64_t nh, int64_t kvl, int64_t row, float scale, float *olat);
int pdb_cuda_mla_tc_fits(int64_t kvl, int64_t row);
/* The MHA form (pdb_cuda_mha_tc.cu): Qb [nh, qstride, dqp] from q [n, nh, nope+rope] (q_nope) and
 * qlat's roped q_rope; Kb [nh, kstride, dqp] / Vb [nh, kstride, dv] for keys s0..s0+m-1 from kvx
 * [m, nh*(nope+dv)] (= cached latent rows . kv_b^T) and the cache rows' k_rope (one sequence:
 * identity page table); then out [n, nh, dv] = causal softmax(scale Q K^T) V per head. dqp =
 * nope + rope rounded up to 16; bf16 operands, f32 accumulation. Fits: the shapes the kernel is
 * built for (V2's 128 + 64 / 128 and make-model's test presets). */
int pdb_cuda_mha_tc_fits(int64_t nope, int64_t rope, int64_t dv);
pdb_status pdb_cuda_mha_pack_q(cudaStream_t s, const float *q, const float *qlat, int64_t n, int64_t nh, int64_t nope,
                               int64_t rope, int64_t kvl, int64_t row, int64_t qstride, void *Qb);
pdb_status pdb_cuda_mha_pack_kv(cudaStream_t s, const float *kvx, const pdb_cuda_pages *pg, int64_t s0, int64_t m,
                                int64_t nh, int64_t nope, int64_t dv, int64_t kvl, int64_t rope, int64_t kstride,
                                void *Kb, void *Vb);
pdb_status pdb_cuda_attention_mha(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                  int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int64_t nope, int64_t rope,
                                  int64_t dv, float scale, float *out);
/* The same kernel with `warps` warps of 16 query tokens per block (4 or 8; every choice gives the
 * same output bits); pdb_cuda_attention_mha runs the warpgroup form where pdb_cuda_mha_wg_fits, else
 * this one with PDB_CUDA_MHA_WARPS. */
enum { PDB_CUDA_MHA_WARPS = 8 };
pdb_status pdb_cuda_attention_mha_tiles(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb,
                                        int64_t qstride, int64_t kstride, int64_t pos0, int64_t n, int64_t nh,
                                        int64_t nope, int64_t rope, int64_t dv, float scale, float *out, int warps);
/* The same contract on Hopper's warpgroup MMA (k_mha_wg: 128 query rows a block, keys in tiles of key_tile,
 * 64 or 128: m64n64k16 or m64n128k16 scores and m64n128k16 values, k_mha_tc's softmax; chunked = one shot bit
 * for bit; tile 64 gives k_mha_tc's bits, 128 others; PDB_CUDA_MHA_WG_PINGPONG or'd in changes the schedule,
 * not the bits). Fits: V2's shape (q/k 128 + 64, v 128), an sm_90a build on a compute capability 9.0 device;
 * else PDB_UNSUPPORTED. pdb_cuda_attention_mha runs it with PDB_CUDA_MHA_WG_KEYS. */
enum { PDB_CUDA_MHA_WG_PINGPONG = 0x1000, /* or'd into key_tile: the warpgroups take turns on the tensor cores */
       PDB_CUDA_MHA_WG_KEYS = 128 | PDB_CUDA_MHA_WG_PINGPONG };
int pdb_cuda_mha_wg_fits(int64_t nope, int64_t rope, int64_t dv);
pdb_status pdb_cuda_attention_mha_wg(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                     int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int64_t nope, int64_t rope,
                                     int64_t dv, float scale, float *out, int key_tile);
/* out [n] = silu(g) * u elementwise (pdb_math_silu_mul's formula). */
pdb_status pdb_cuda_silu_mul(cudaStream_t s, const float *g, const float *u, float *out, int64_t count);
/* Routing of n tokens (pdb_v2_route semantics): probs [n, E] router logits, softmaxed in place;
 * scratch [n, E]; idx [n, K] int32, wt [n, K]. */
typedef struct pdb_cuda_route_cfg {
    int E, K, n_group, topk_group, group_limited, norm_topk_prob;
    float routed_scaling_factor;
} pdb_cuda_route_cfg;
pdb_status pdb_cuda_route(cudaStream_t s, float *probs, float *scratch, int32_t *idx, float *wt, int64_t n,
                          const pdb_cuda_route_cfg *rc);
/* dst [M, H] = src rows src_row[M]. */
pdb_status pdb_cuda_gather(cudaStream_t s, const float *src, const int32_t *src_row, int64_t M, int64_t H, float *dst);
/* h [n, H] += sum_k ye[slot_row[t*K+k]] * wt[t*K+k] (k order) + shared [n, H] (may be NULL). */
pdb_status pdb_cuda_moe_combine(cudaStream_t s, const float *ye, const int32_t *slot_row, const float *wt,
                                const float *shared, int64_t n, int64_t K, int64_t H, float *h);
/* The bf16 engine's routed experts (pdb_cuda_moe_tc.cu): rows gathered so that each expert's
 * start at a multiple of PDB_CUDA_MOE_TILE; C [ntiles * TILE, N] f32 = A [.., K] bf16 . W[e]^T with
 * W [E, N, K] bf16 and e = tile_e[tile] (device); one launch per product, each element a fixed-order
 * sum independent of the row count (chunk-invariant). K % 8 == 0 (pdb_cuda_moe_tc_fits). */
enum { PDB_CUDA_MOE_TILE = 128 };
int pdb_cuda_moe_tc_fits(int64_t H, int64_t Im);
pdb_status pdb_cuda_moe_gemm(cudaStream_t s, const void *A, const void *W, float *C, const int32_t *tile_e,
                             int64_t ntiles, int64_t N, int64_t K);
/* The row layout of n tokens' top-K experts topk [n*K] on the device: row_src [max_tiles * TILE]
 * (the token of each row, -1 for padding), slot_row [n*K], tile_e [max_tiles] (-1 past the last
 * tile); experts in index order, an expert's slots in slot order. scratch: n*K + 2E int32.
 * max_tiles = pdb_cuda_moe_max_tiles(n*K, E), the most tiles any routing can need. */
int64_t pdb_cuda_moe_max_tiles(int64_t slots, int64_t E);
pdb_status pdb_cuda_moe_layout(cudaStream_t s, const int32_t *topk, int64_t n, int64_t K, int64_t E, int32_t *scratch,
                               int32_t *row_src, int32_t *slot_row, int32_t *tile_e);
/* dst [R, H] bf16 = src rows src_row[R] (f32), zero rows where src_row < 0. */
pdb_status pdb_cuda_moe_gather_bf16(cudaStream_t s, const float *src, const int32_t *src_row, int64_t R, int64_t H,
                                    void *dst);
/* The same rows from a bf16 src [., H] (the engine's bf16 copy of x, whose values are src's f32 rounded:
 * the bits pdb_cuda_moe_gather_bf16 gives from the f32 rows), copied as they are. */
pdb_status pdb_cuda_moe_gather_rows16(cudaStream_t s, const void *src, const int32_t *src_row, int64_t R, int64_t H, void *dst);
/* out [count] bf16 = silu(g) * u (pdb_cuda_silu_mul's f32 result, rounded to bf16). */
pdb_status pdb_cuda_silu_mul_bf16(cudaStream_t s, const float *g, const float *u, void *out, int64_t count);
/* The same of bf16 g, u (widened exactly: the f32 rows of the same values give the same bits); out must
 * not overlap g or u. */
pdb_status pdb_cuda_silu_mul_bf16in(cudaStream_t s, const void *g, const void *u, void *out, int64_t count);

/* The routed experts as cuBLAS row-tile products (pdb_cuda_moe_tiles.cu): over pdb_cuda_moe_layout's
 * layout, g, u [tile rows, I] (gdt) = xe . w1[e]^T, xe . w3[e]^T, then (after the caller's activation
 * into xe's first tile-rows x I values) ye [tile rows, H] (ydt) = xe . w2[e]^T; w1, w3 [E, I, H], w2
 * [E, H, I] of dt (bf16). Buffers of ntpad tiles (pdb_cuda_moe_tiles_pad of the pass's most tiles):
 * xe [ntpad * TILE, max(H, I)], g, u [ntpad * TILE, I], ye [ntpad * TILE, H]; ptrs device [8, ntpad],
 * h_tiles pinned host [ntpad]. Every call is PDB_CUDA_MOE_GROUP tiles (the last group's spare tiles
 * run on expert 0, rows nobody reads): a row's result depends on its own tile alone. */
enum { PDB_CUDA_MOE_GROUP = 64 };
typedef struct pdb_cuda_moe_tiles {
    pdb_cuda_blas *blas; /* its stream runs everything */
    pdb_cuda_dt dt, gdt, ydt;
    int64_t E, H, I, ntpad;
    void *xe, *g, *u, *ye;
    const void **ptrs;
    int32_t *h_tiles;
} pdb_cuda_moe_tiles;
int64_t pdb_cuda_moe_tiles_pad(int64_t ntmax);
/* The gate and up products of this pass's nt tiles (tile_e, device): *used = the tiles the layout
 * filled (read back: one synchronisation). */
pdb_status pdb_cuda_moe_tiles_up(const pdb_cuda_moe_tiles *m, const int32_t *tile_e, int64_t nt, const void *w1,
                                 const void *w3, const void *w2, int64_t *used);
/* The down products of the used tiles (the w2 pointers made by tiles_up). */
pdb_status pdb_cuda_moe_tiles_down(const pdb_cuda_moe_tiles *m, int64_t used);
/* C [M, N] (ldc) = (or, accumulate: C +) A [M, K] (lda) . W [N, K]^T (ldw), f32, each element
 * pdb_qmat_dot's order exactly (32 lanes, fma in k order, fold 16/8/4/2/1); batch <= 65535 with
 * element strides sa, sw, sc. The exact engine's products and the capture hook. Runs the
 * shared-memory tiled kernel where K % 32 == 0 and the rows are 16-byte aligned (see
 * pdb_cuda_dot32_form), else the general one: the same bits either way. */
pdb_status pdb_cuda_dot32(cudaStream_t s, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int64_t sa,
                          const float *W, int64_t ldw, int64_t sw, float *C, int64_t ldc, int64_t sc, int64_t batch,
                          int accumulate);
/* pdb_cuda_dot32 with its kernel chosen: AUTO (pdb_cuda_dot32's choice: the shared-memory tiled
 * kernel where K % 32 == 0 and A, W, lda, ldw (and, batch > 1, sa, sw) are on 16-byte boundaries,
 * else the general one), GENERAL (always the general kernel), TILED (the tiled kernel, or
 * PDB_UNSUPPORTED where it may not run). Both give the same bits; *tiled (optional) = 1 when the
 * tiled kernel ran. For the probe (pdb_cuda_dot_probe.h) and its test. */
enum { PDB_DOT32_AUTO = 0, PDB_DOT32_GENERAL = 1, PDB_DOT32_TILED = 2 };
pdb_status pdb_cuda_dot32_form(cudaStream_t s, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               int64_t sa, const float *W, int64_t ldw, int64_t sw, float *C, int64_t ldc, int64_t sc,
                               int64_t batch, int accumulate, int form, int *tiled);
/* pdb_v2_ops' attention task exactly (scores by dot32, softmax with pdb_math_exp and a double sum
 * in position order, fma accumulation in position order), one warp per (token, head); f32 cache. */
pdb_status pdb_cuda_attention_exact(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0,
                                    int64_t n, int64_t nh, int64_t kvl, int64_t row, float scale, float *olat);
/* The capture rows' row math in place on rows [n, row] (kva from pdb_cuda_hook_dot): RMSNorm of
 * the first kvl with the decoder's norm, then the RoPE rotation of the last rope by cs [n, rope]
 * (pdb_rope_angles' pairs for the decoder's rope), bit for bit as the host's hook_rows. */
pdb_status pdb_cuda_hook_finish(cudaStream_t s, float *rows, int64_t n, int64_t row, int64_t kvl, int64_t rope,
                                const float *norm, const float *cs, double eps);
/* The capture hook's projection: out [n, R] = x [n, H] . W [R, H] (pdb_cuda_dot32). */
pdb_status pdb_cuda_hook_dot(cudaStream_t s, const float *x, const float *W, int64_t n, int64_t R, int64_t H,
                             float *out);

#endif
