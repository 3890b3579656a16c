/* pdb_v2_ops: the DeepSeek-V2 layer math every CPU engine shares (the decode engine and the
 * prefill engine's CPU backend): weights as pdb_qmat (f32/bf16/MXFP8/MXFP4) and the layer
 * steps over a batch of rows, each row a (sequence cache, position).
 * Invariants: (1) every reduction is pdb_qmat's fixed-order dot or a per-row sequential loop,
 * so a row's results depend only on its token, its position and the cache rows before it;
 * (2) pdb_v2_ops_latent_rows is THE definition of the decoder's cache row
 * [RMSNorm(c_kv) | RoPE(k_pe)] f32 — the capture hook computes bridged rows with it, and the
 * decoder's attention computes the same rows by the same steps (its kv_a product batched with the
 * q projection by pdb_qmat_matmul_multi, bit-identical to the lone matmul by pdb_qmat's contract). */
#ifndef PDB_V2_OPS_H
#define PDB_V2_OPS_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_pool.h"
#include "pdb_ptrs.h"
#include "pdb_qmat.h"
#include "pdb_rope.h"
#include "pdb_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_v2_qlayer {
    float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* f32 [H], [H], [qlr], [kvl] */
    pdb_qmat q_proj, q_a, q_b, kv_a, o_proj;
    pdb_qmat uk_t;               /* [nh * kvl, nope]: W_UK transposed per head; bf16 when every value is one, else f32 */
    pdb_qmat kv_b;               /* [nh * (nope + vd), kvl] as stored: head h's W_UV is rows h * (nope + vd) + nope .. + vd */
    int is_moe;
    pdb_qmat gate, up, down;     /* dense MLP */
    pdb_qmat router;             /* [E, H] */
    pdb_qmat *eg, *eu, *ed;      /* [E] each: routed experts */
    pdb_qmat sg, su, sd;         /* shared experts */
} pdb_v2_qlayer;

typedef struct pdb_v2_qweights {
    pdb_config cfg;
    pdb_rope rope;
    float softmax_scale;
    pdb_qmat embed, lm_head;
    float *final_norm;
    pdb_v2_qlayer *layers;
    int64_t max_cols;            /* widest matrix input: matmul scratch is PDB_QMAT_ROWBUF_FLOATS(threads, max_cols) */
    pdb_ptrs owned;              /* buffers allocated at load */
    struct pdb_v2_ops_opts *opts; /* [1], zeroed at load: how the layer steps run (see pdb_v2_ops_opts) */
} pdb_v2_qweights;

/* Views over st (which must outlive w). attn_kv_only: load only what the cache rows need
 * (kv_a_proj_with_mqa, kv_a_layernorm) — the capture hook's view of the decoder. */
pdb_status pdb_v2_qweights_load(pdb_v2_qweights *w, const pdb_config *cfg, const pdb_st *st, int attn_kv_only);
void pdb_v2_qweights_free(pdb_v2_qweights *w);

/* Where a row's cache lives: row (layer l, position p) is
 * base + l*layer_stride + (p - pos_offset)*pos_stride (pos_offset: first position held). */
typedef struct pdb_v2_rowcache {
    float *base;
    int64_t layer_stride, pos_stride, pos_offset;
} pdb_v2_rowcache;

/* Compute the decoder cache rows for R rows at positions pos[r] of layer l from the attention
 * input xn [R, H]: writes cache[r].base + l*layer_stride + pos[r]*pos_stride. kva: scratch
 * [R, kvl + rope]; rowbuf: PDB_QMAT_ROWBUF_FLOATS(threads, max_cols) floats. */
void pdb_v2_ops_latent_rows(const pdb_v2_qweights *w, int64_t l, pdb_pool *pool, float *rowbuf, const float *xn,
                            int64_t R, const int64_t *pos, const pdb_v2_rowcache *cache, float *kva);

/* A batch of R rows through the layers. */
typedef struct pdb_v2_batch {
    const pdb_v2_qweights *w;
    pdb_pool *pool;
    int64_t R;
    pdb_v2_rowcache *cache;      /* [R] */
    int64_t *pos;                /* [R] */
    float *h;                    /* [R, H] residual stream */
    float *xn;                   /* [R, H] the last normed input (attention input after attn_norm) */
    /* scratch */
    float *q, *qa, *kva, *attn, *tmp, *mlp, *g, *u, *probs, *xe, *topk_w, *att_scratch, *rowbuf;
    float *cs;                   /* [R, rope]: each row's rope factors (pdb_rope_angles) */
    int64_t *topk_idx, *erows, *slot_row, att_stride, layer; /* slot_row[t * K + k]: the row of xe holding that expert's output */
    pdb_qmat_job *jobs;          /* [3 * (E + 1)]: the MoE's batched matmuls */
    /* attention of few rows (decode; see pdb_v2_batch_init) past PDB_V2_TASK_MAX_POS positions goes
     * head-parallel stage by stage: */
    float *wq, *wo, *wsc;        /* [R * nh] x q_lat (kvl + rope), o_lat (kvl), scores (max_len) */
    pdb_qmat *views;             /* [2 * nh]: each head's W_UK^T rows, then its W_UV rows */
    pdb_qmat_job *ajobs;         /* [R * nh] */
    struct pdb_v2_head_sync *hsync; /* [R * nh]: the split tasks' claims (pdb_v2_ops.c) */
    int64_t max_len;
} pdb_v2_batch;

enum { PDB_V2_WIDE_JOBS = 256, PDB_V2_WIDE_SCORES = 16 << 20, PDB_V2_TASK_MAX_POS = 768 };

/* Which attention form runs (all give the same bits; tests and bench_decode --attn choose):
 * PDB_V2_ATTN_AUTO (the default) takes the head-parallel stages when the batch has their buffers
 * and some row attends to more than PDB_V2_TASK_MAX_POS positions; otherwise the split tasks when
 * the batch has those buffers and the pool has at least twice as many threads as (row, head)
 * pairs (PDB_V2_SPLIT_MAX threads per pair at most), else the per-(row, head) tasks. Forced, the
 * split tasks use at least two parts per step. */
enum { PDB_V2_ATTN_AUTO = 0, PDB_V2_ATTN_TASKS, PDB_V2_ATTN_STAGES, PDB_V2_ATTN_SPLIT };
enum { PDB_V2_SPLIT_MAX = 4 };

/* The stages of attention and FFN that pdb_v2_ops_opts.stage_s times (bench_decode --phases). */
enum { PDB_V2_ST_PROJ, PDB_V2_ST_LATENT, PDB_V2_ST_UK, PDB_V2_ST_SCORES, PDB_V2_ST_SOFTMAX, PDB_V2_ST_MIX, PDB_V2_ST_UV,
       PDB_V2_ST_OPROJ, PDB_V2_ST_NORM, PDB_V2_ST_ROUTER, PDB_V2_ST_GU, PDB_V2_ST_DOWN, PDB_V2_ST_COMBINE,
       PDB_V2_ST_N };
extern const char *const pdb_v2_ops_stage_names[PDB_V2_ST_N];

/* How the layer steps over one set of weights run. All zero (as pdb_v2_qweights_load leaves it)
 * is the automatic attention form and no diagnostics, so an engine sets nothing; a test or a
 * benchmark holding only a const pointer to the weights (pdb_dec_model_weights) writes
 * w->opts->... directly: the options are not weights, so they stay writable. Change them only
 * while no forward over these weights runs; while stage_s is set, run one forward at a time over
 * them (the sums are plain adds). */
typedef struct pdb_v2_ops_opts {
    int attn_path;               /* PDB_V2_ATTN_*: the attention form */
    double *stage_s;             /* [PDB_V2_ST_N] or NULL: when set, attention and FFN add each stage's wall
                                    seconds to stage_s[PDB_V2_ST_*] (NULL costs a branch per stage) */
} pdb_v2_ops_opts;

/* max_len: the longest position+1 of any row (attention scratch). With R * nh <= PDB_V2_WIDE_JOBS
 * and R * nh * max_len <= PDB_V2_WIDE_SCORES the batch also holds the head-parallel attention's
 * buffers (R * nh * max_len scores: 64 MB at most) and uses it. */
pdb_status pdb_v2_batch_init(pdb_v2_batch *b, const pdb_v2_qweights *w, pdb_pool *pool, int64_t R, int64_t max_len);
void pdb_v2_batch_free(pdb_v2_batch *b);
void pdb_v2_ops_embed(pdb_v2_batch *b, int64_t r, int32_t id);
/* xn = RMSNorm(h) with the layer's attention norm (the attention input). */
void pdb_v2_ops_attn_norm(pdb_v2_batch *b, int64_t l);
/* Attention of layer l for all rows (writes their cache rows first), residual added to h. */
void pdb_v2_ops_attention(pdb_v2_batch *b, int64_t l);
/* FFN of layer l (dense or MoE), residual added to h. */
void pdb_v2_ops_ffn(pdb_v2_batch *b, int64_t l);
/* logits [V] of row r. */
void pdb_v2_ops_logits(pdb_v2_batch *b, int64_t r, float *logits);

#ifdef __cplusplus
}
#endif

#endif
