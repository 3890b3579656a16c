/* pdb_v4: the DeepSeek-V4 (V4-Flash architecture) CPU forward (activations f32, weights as stored), readable top to
 * bottom, with a cache whose per-layer state is exactly the decoder's pools (docs/v4.md):
 *   append pools  comp  [n_comp, head_dim]        one compressed entry per `rate` tokens (CSA 4, HCA 128)
 *                 ikeys [n_comp, index_head_dim]  CSA only: the indexer's compressed keys
 *   state pool    win   [W, head_dim]             the last W K=V rows, row of position p at p % W
 *                 buf_kv/buf_gate [rate, coff*head_dim]   the compressor's not-yet-full window
 *                                                  (slot p % rate; gate already holds + ape)
 *                 ov_kv/ov_gate   [rate, head_dim]        CSA: previous full window's overlap half
 *                 ibuf_* / iov_*  the same for the indexer's compressor (index_head_dim)
 * Invariants: every weight matrix is a pdb_qmat over the checkpoint's stored bytes (f32, bf16,
 * MXFP8, MXFP4; DeepSeek's block FP8 as MXFP8, lossless) and every product with a weight is
 * pdb_qmat's fixed-order dot (32 lanes, fused multiply-adds, folded 32->1: bit-identical across
 * ISAs, threads and batch sizes); norms, biases, sinks, ape, the hyper-connection mixing and
 * tid2eid are f32 / i32 arrays; a forward call processes T tokens at positions cache->len ..
 * len+T-1 and every per-token step that feeds the cache (K=V row, compressor slots, emitted
 * entries) is a pure function of that token's inputs and the cache state, applied token by token,
 * so any
 * chunking of the prefill produces the same pools as one shot; compressed entries are emitted
 * in order the moment their window is full; the semantics (official | exact) is fixed per cache
 * and decides whether the FP8/FP4 simulations of pdb_v4_qsim are applied to cached rows, entries
 * and indexer queries/keys. Tie rule of the indexer's top-k: higher score first, equal scores
 * by lower entry index (transformers / DeepSeek leave ties to torch.topk). */
#ifndef PDB_V4_H
#define PDB_V4_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_arch.h"
#include "pdb_pool.h"
#include "pdb_ptrs.h"
#include "pdb_qmat.h"
#include "pdb_rope.h"
#include "pdb_safetensors.h"
#include "pdb_v4_rows.h"

typedef enum pdb_v4_semantics {
    PDB_V4_SEM_OFFICIAL = 0, /* DeepSeek's inference math: FP8 on cached K=V nope dims, FP4+Hadamard in the indexer */
    PDB_V4_SEM_EXACT = 1     /* transformers 5.17: no quantization simulation */
} pdb_v4_semantics;

/* "official" / "exact" -> enum (PDB_INVALID otherwise); and back. */
pdb_status pdb_v4_semantics_parse(const char *s, pdb_v4_semantics *out);
const char *pdb_v4_semantics_name(pdb_v4_semantics s);

typedef struct pdb_v4_compressor {
    int64_t rate, dim, coff;  /* coff = 2 for the overlapping (CSA) form, else 1 */
    pdb_qmat wkv, wgate;      /* [coff*dim, H] each */
    float *ape;               /* [rate, coff*dim] position bias added to the gate */
    float *norm;              /* [dim] */
} pdb_v4_compressor;

/* A weight matrix that was not loaded (PDB_V4_PART_HOOK) has data NULL. */
typedef struct pdb_v4_layer {
    pdb_v4_attn attn;
    int64_t rate;                    /* 0 sliding-only, else the compression rate */
    int hash;                        /* hash-routed MoE */
    const pdb_rope *rope;            /* main (sliding-only) or compress */
    float *attn_norm, *ffn_norm;     /* [H] */
    float *hc_attn_fn, *hc_ffn_fn;   /* [(2+hc)*hc, hc*H] */
    float *hc_attn_base, *hc_ffn_base; /* [(2+hc)*hc] */
    float *hc_attn_scale, *hc_ffn_scale; /* [3] */
    pdb_qmat wq_a;                   /* [qlr, H] */
    float *q_norm;                   /* [qlr] */
    pdb_qmat wq_b;                   /* [nh*hd, qlr] */
    pdb_qmat wkv;                    /* [hd, H] */
    float *kv_norm;                  /* [hd] */
    pdb_qmat wo_a;                   /* [G*olr, nh*hd/G] (group g: rows g*olr ..) */
    pdb_qmat wo_b;                   /* [H, G*olr] */
    float *sink;                     /* [nh] */
    pdb_v4_compressor comp;          /* CSA/HCA */
    pdb_v4_compressor icomp;         /* CSA: the indexer's compressor */
    pdb_qmat idx_wq_b;               /* [nih*ihd, qlr] */
    pdb_qmat idx_wproj;              /* [nih, H] */
    pdb_qmat gate;                   /* [E, H] the router */
    float *gate_bias;                /* [E] (score-routed layers) */
    int32_t *tid2eid;                /* [V, K] (hash-routed layers) */
    pdb_qmat *w1, *w3;               /* [E] each [I, H] (NULL when not loaded) */
    pdb_qmat *w2;                    /* [E] each [H, I] */
    pdb_qmat sh_w1, sh_w3;           /* [I, H] (n_shared_experts == 1) */
    pdb_qmat sh_w2;                  /* [H, I] */
} pdb_v4_layer;

/* Which tensors a load holds (pdb_v4_load_part). */
typedef enum pdb_v4_part {
    PDB_V4_PART_ALL = 0,  /* every tensor: pdb_v4_forward runs on it */
    PDB_V4_PART_HOOK = 1  /* the capture hook's: per layer wkv, kv_norm, comp, icomp (and the layer kinds and
                             ropes), all the rest NULL; pdb_v4_cache_init / pdb_v4_cache_feed run on it, the
                             forward refuses it (PDB_INVALID) */
} pdb_v4_part;

typedef struct pdb_v4_model {
    pdb_config cfg;
    pdb_v4_part part;                /* what was loaded */
    int64_t bytes;                   /* bytes of weights held: every qmat's data + scales (viewed in the
                                        checkpoint or owned), the f32 vectors, tid2eid (rope tables not counted) */
    pdb_rope rope_main, rope_compress;
    pdb_qmat embed;                  /* [V, H] */
    pdb_qmat head;                   /* [V, H] (== embed when tied) */
    float *norm;                     /* [H] */
    float *hc_head_fn;               /* [hc, hc*H] */
    float *hc_head_base;             /* [hc] */
    float *hc_head_scale;            /* [1] */
    pdb_v4_layer *layers;            /* [L] */
    int64_t max_cols;                /* widest weight input: matmul scratch is PDB_QMAT_ROWBUF_FLOATS(threads, max_cols) */
    pdb_ptrs owned;                  /* buffers made at load (f32 vectors, converted weights, expert tables) */
    pdb_st *own_st;                  /* the checkpoint the views point into when pdb_v4_load opened it (closed by pdb_v4_free) */
} pdb_v4_model;

/* Where a V4 model's matrix products run. Every product is C[M, N] (ldc) = A[M, K] (lda) @ W^T
 * with W a weight of the model ([N = W->rows, K = W->cols], any pdb_qmat format; the qmat and its
 * bytes stay valid and constant for the model's life: a provider may key a device copy on
 * W->data), each element exactly as pdb_qmat_matmul computes it: the weight row dequantized
 * exactly, then 32 lane accumulators (lane j takes k = j mod 32) with fused multiply-adds in k
 * order starting from 0, folded 32->16->8->4->2->1 (lane i + lane i + half). A provider that keeps
 * this order makes every engine bit-identical to the CPU (docs/v4.md). */
struct pdb_v4_attn_desc;
typedef struct pdb_v4_mm_provider {
    const char *name; /* "cuda" */
    pdb_status (*mm)(void *ctx, int64_t M, const float *A, int64_t lda, const pdb_qmat *W, float *C, int64_t ldc);
    /* Optional (NULL: on the host): one layer's window/compressed attention for T tokens, each
     * output element exactly as pdb_v4_attn_ref computes it (the contract below). */
    pdb_status (*attn)(void *ctx, const struct pdb_v4_attn_desc *d);
    void *ctx;
    void (*destroy)(void *ctx);
} pdb_v4_mm_provider;

/* Where a sequence's forward runs: the execution context, kept apart from the weights (one model
 * may run on several contexts) and held by each pdb_v4_cache. Neither pointer is owned. */
typedef struct pdb_v4_exec {
    pdb_pool *pool;                 /* CPU threads (NULL: the calling thread) */
    const pdb_v4_mm_provider *mm;   /* NULL: products and attention on the CPU (pool) */
} pdb_v4_exec;

/* The reference product on the calling thread (the provider contract's definition):
 * pdb_qmat_matmul without a pool. */
pdb_status pdb_v4_mm_ref(int64_t M, const float *A, int64_t lda, const pdb_qmat *W, float *C, int64_t ldc);

/* One layer's attention for T tokens at positions p0..p0+T-1, as plain data (all host memory,
 * read-only but o). Token t (position p = p0 + t), head h sees n = nw + nc keys, in this order:
 *   window rows  i < nw:  keys[(wlo - lo + i) * hd], wlo = max(p - W + 1, lo), nw = p - wlo + 1
 *                (keys row r holds the K=V row of position lo + r; rows up to p0 - lo + T - 1);
 *   compressed   i >= nw: comp[e * hd], e = sel[t * K + (i - nw)], i - nw < nc = nsel[t] when
 *                sel (CSA); else e = i - nw, nc = (p + 1) / rate when rate > 0 (HCA); else nc = 0.
 *                Every e < n_comp.
 * Per (t, h), with q = q[(t * nh + h) * hd], k_i the key row above, all sums sequential in i or d:
 *   (1) s_i = (float)(sum_{d=0..hd-1} (double)q[d] * k_i[d]) * scale       (double sum, f32 product)
 *   (2) mx = fmaxf(... fmaxf(sinks[h], s_0) ..., s_{n-1});
 *       e_i = (float)exp((double)(s_i - mx)) (pdb_math_exp of the f32 difference), e_s likewise
 *       of sinks[h] - mx; den = (double)e_s + e_0 + ... + e_{n-1} (double, in this order);
 *       P_i = (float)((double)e_i / den)
 *   (3) o[(t * nh + h) * hd + d] = (float)(sum_{i=0..n-1} (double)P_i * k_i[d])     (double sum)
 * Every double product above is of two floats, hence exact: a fused multiply-add gives the same
 * sum. The output is BEFORE the inverse RoPE of the rotary dims (the caller applies it).
 * pdb_v4_attn_ref runs a (token, group of up to 8 heads) per task, the group's heads sharing each
 * pass over the keys (pdb_v4_dots): the same sums, the same bits, whatever T. */
typedef struct pdb_v4_attn_desc {
    int64_t T, nh, hd;
    int64_t p0, lo, W;        /* first position of the chunk / of keys row 0 / sliding window */
    const float *q;           /* [T, nh, hd] after the per-head norm and RoPE */
    const float *keys;        /* [(p0 - lo) + T, hd] */
    const float *comp;        /* [n_comp, hd] */
    int64_t n_comp;
    int64_t rate;             /* HCA: compression rate; 0 otherwise */
    const int32_t *sel;       /* CSA: [T, K] picked entries (NULL otherwise) */
    const int64_t *nsel;      /* CSA: [T] */
    int64_t K;
    const float *sinks;       /* [nh] */
    float scale;
    float *o;                 /* [T, nh, hd] out */
} pdb_v4_attn_desc;

/* The attention contract's definition, on pool's threads (NULL: the calling thread). */
pdb_status pdb_v4_attn_ref(const pdb_v4_attn_desc *d, pdb_pool *pool);

/* One layer's decoder cache state; NULL pools are absent for that layer type. */
/* The K=V rows (win, comp) and the indexer keys (ikeys) are rows of the cache's pdb_v4_row formats
 * (pdb_v4_rows.h: official FP8 / FP4 + e8m0, exact f32), back to back: row i at i * row.bytes. */
typedef struct pdb_v4_layer_cache {
    uint8_t *win;                    /* [W] kv rows */
    uint8_t *comp;                   /* [cap/rate + 1] kv rows */
    uint8_t *ikeys;                  /* [cap/rate + 1] ikey rows */
    float *buf_kv, *buf_gate;        /* [rate, coff*hd] */
    float *ov_kv, *ov_gate;          /* [rate, hd] */
    float *ibuf_kv, *ibuf_gate;      /* [rate, 2*ihd] */
    float *iov_kv, *iov_gate;        /* [rate, ihd] */
} pdb_v4_layer_cache;

typedef struct pdb_v4_cache {
    int64_t cap, len;                /* positions allocated / filled; entries n_comp = len / rate */
    int64_t n_layers, window;        /* window = sliding_window rows per layer */
    pdb_v4_semantics sem;
    pdb_v4_row kv_row, ik_row;       /* the row formats of win / comp and of ikeys (pdb_v4_row_kv / _ikey of sem) */
    pdb_v4_exec exec;                /* where this sequence's forward runs (set by the owner; zero: the calling thread) */
    pdb_v4_layer_cache *layers;      /* [L] */
} pdb_v4_cache;

/* dir: HF model directory (config.json + safetensors). */
pdb_status pdb_v4_load(const char *dir, pdb_v4_model **out);
/* Load from an open reader with a parsed config (every tensor: pdb_v4_load_part's PDB_V4_PART_ALL);
 * the weights are views into st, which must stay open while the model lives. */
pdb_status pdb_v4_load_from(const pdb_config *cfg, const pdb_st *st, pdb_v4_model **out);
/* Load part of the tensors (pdb_v4_part); each loaded tensor is the same qmat in any part. */
pdb_status pdb_v4_load_part(const pdb_config *cfg, const pdb_st *st, pdb_v4_part part, pdb_v4_model **out);
/* The bytes of weights m holds (pdb_v4_model.bytes). */
int64_t pdb_v4_model_bytes(const pdb_v4_model *m);
void pdb_v4_free(pdb_v4_model *m);

/* PDB_UNSUPPORTED (naming the field) when `official` cannot run on this config: the non-rotary
 * dims must be a multiple of 64, index_head_dim a power of two, a multiple of 32 and <= 2048. */
pdb_status pdb_v4_check_semantics(const pdb_config *cfg, pdb_v4_semantics sem);
pdb_status pdb_v4_cache_init(pdb_v4_cache *c, const pdb_v4_model *m, int64_t cap, pdb_v4_semantics sem);
void pdb_v4_cache_free(pdb_v4_cache *c);

/* Run T tokens at positions c->len..; logits [T, V] for every position when all_logits, else
 * [1, V] for the last one (NULL skips the head). */
pdb_status pdb_v4_forward(const pdb_v4_model *m, pdb_v4_cache *c, const int32_t *ids, int64_t T, int all_logits,
                          float *logits);

/* One sequence of a multi-sequence step: T tokens ids at positions c->len .., the logits of its
 * last token into logits [V] (NULL: none). */
typedef struct pdb_v4_step {
    pdb_v4_cache *c;
    const int32_t *ids;
    int64_t T;
    float *logits;
} pdb_v4_step;
/* n sequences (distinct caches) in one forward: every product with a weight runs once over all
 * their tokens (each weight read once per step, on steps[0].c's execution context: the caches
 * should share one), the cache feed, indexer and attention per sequence on its own cache. Every
 * sequence's logits and cache are bit for bit what pdb_v4_forward gives it alone (pdb_qmat's
 * products do not depend on the rows beside them). Each cache's len advances by its T; on an
 * error the caches' state is unspecified. */
pdb_status pdb_v4_forward_multi(const pdb_v4_model *m, const pdb_v4_step *steps, int n);

/* The cache feed's products of one layer's T attention inputs (pdb_v4_cache_feed_rows). */
typedef struct pdb_v4_feed_rows {
    float *kv;                          /* [T, hd] wkv (the feed normalises it in place) */
    const float *kvp, *gp, *ikvp, *igp; /* [T, coff*hd] compressor wkv / wgate; [T, 2*ihd] the indexer compressor's */
} pdb_v4_feed_rows;
/* The capture hook's view of a forward: called at every layer with that layer's attention input
 * x [T, H] (after the hyper-connection collapse and attn_norm) for positions p0..p0+T-1, before
 * the layer's attention runs. A non-OK status stops the forward. */
typedef struct pdb_v4_hook {
    pdb_status (*attn_input)(void *user, int64_t layer, const float *x, int64_t T, int64_t p0);
    void *user;
    /* Optional: an engine that computes the feed's products itself (the device engine with the
     * decoder's hook weights, pdb_cuda_v4_engine_set_hook) calls this instead of attn_input. */
    pdb_status (*feed_rows)(void *user, int64_t layer, const pdb_v4_feed_rows *r, int64_t T, int64_t p0);
} pdb_v4_hook;
pdb_status pdb_v4_forward_hooked(const pdb_v4_model *m, pdb_v4_cache *c, const int32_t *ids, int64_t T, int all_logits,
                                 float *logits, const pdb_v4_hook *hook);

/* THE definition of the decoder's V4 pools: feed layer l's attention inputs x [T, H] of positions
 * c->len.. into its cache: K=V rows (wkv, kv_norm, RoPE, FP8 in official) into kv_out [T, hd]
 * when non-NULL and into the window, the compressor (and the indexer's compressor) buffers, and
 * every compressed entry / indexer key whose window completes. Does not advance c->len (the
 * caller does after the last layer). The forward runs it inside attention; the capture hook
 * runs it on the decoder's weights with the prefill engine's attention inputs. */
pdb_status pdb_v4_cache_feed(const pdb_v4_model *m, pdb_v4_cache *c, int64_t l, const float *x, int64_t T, float *kv_out);

/* The same feed from its products computed elsewhere (the capture hook's, on the device): layer
 * l's rows as pdb_v4_cache_feed would make them from x (kv normed, RoPE'd and rounded in place;
 * only its last W rows are read); the steps and the pools are pdb_v4_cache_feed's. Does not
 * advance len. */
pdb_status pdb_v4_cache_feed_rows(const pdb_v4_model *m, pdb_v4_cache *c, int64_t l, const pdb_v4_feed_rows *r, int64_t T);

/* ---- the pools as a store layout (pdb_v4_pools.c): shared by the decoder and the capture hook,
 * so that a bridged block and a native block are the same bytes by construction. */
pdb_status pdb_v4_pools_layout(const pdb_config *cfg, int sem, pdb_arch_layout *out);
/* n_rows rows of a compact pool (win, comp_*, ikeys under official) as f32 into out [n_rows, *dim]
 * (the registry's pool_decode). */
pdb_status pdb_v4_pools_decode(const pdb_config *cfg, int sem, const pdb_store_pool *pool, const void *rows, int64_t n_rows,
                               float *out, int64_t *dim);
/* Block b of cache c into buf (layout order): APPEND rows of the block's span, STATE as now
 * (c->len must be (b+1)*bs for a meaningful snapshot); put is the inverse. */
void pdb_v4_pools_get_block(const pdb_config *cfg, const pdb_v4_cache *c, int64_t b, int64_t bs, void *buf);
void pdb_v4_pools_put_block(const pdb_config *cfg, pdb_v4_cache *c, int64_t b, int64_t bs, const void *buf);

/* Routing of one token (shared by every engine): scores [E] holds router logits and is turned
 * into scores in place (sqrt(softplus), softmax or sigmoid); hash layers take tid2eid[token],
 * others the top-k of scores + bias (ties to the lower index); weights = the picked scores
 * normalised to sum 1 (+1e-20), times routed_scaling_factor. E <= 65536. */
void pdb_v4_route(const pdb_config *cf, const pdb_v4_layer *ly, int32_t token, float *scores, int64_t *idx /* [K] */,
                  float *wt /* [K] */);

#endif
