/* pdb_v2: the DeepSeek-V2 (MLA) CPU reference forward in f32, readable top to bottom.
 * Invariants: weights are f32 copies made at load (any checkpoint dtype, dequantized by the
 * shared core code); the cache holds exactly the decoder's latent rows per layer and position,
 * [RMSNorm(c_kv) (kv_lora_rank) | RoPE(k_pe) (qk_rope_head_dim)]; a forward call appends T rows
 * at positions cache->len .. cache->len+T-1, so prefill in any chunking then decode equals one
 * forward over the whole sequence up to f32 GEMM rounding. */
#ifndef PDB_V2_H
#define PDB_V2_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_rope.h"
#include "pdb_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_v2_layer {
    float *attn_norm;            /* [H] */
    float *q_proj;               /* [nh*qk, H]      (q_lora_rank == 0) */
    float *q_a_proj;             /* [qlr, H]        (q_lora_rank > 0) */
    float *q_a_norm;             /* [qlr] */
    float *q_b_proj;             /* [nh*qk, qlr] */
    float *kv_a_proj;            /* [kvl+rope, H] */
    float *kv_a_norm;            /* [kvl] */
    float *kv_b_proj;            /* [nh*(nope+v), kvl] */
    float *o_proj;               /* [H, nh*v] */
    float *ffn_norm;             /* [H] */
    int is_moe;
    float *gate, *up, *down;     /* dense: [I,H], [I,H], [H,I] */
    float *router;               /* [E, H] */
    float *exp_gate, *exp_up;    /* [E, Im, H] each */
    float *exp_down;             /* [E, H, Im] */
    float *sh_gate, *sh_up;      /* [Is, H], Is = Im * n_shared */
    float *sh_down;              /* [H, Is] */
} pdb_v2_layer;

typedef struct pdb_v2_model {
    pdb_config cfg;
    pdb_rope rope;
    float softmax_scale;
    float *embed;                /* [V, H] */
    float *final_norm;           /* [H] */
    float *lm_head;              /* [V, H] (== embed when tied) */
    pdb_v2_layer *layers;        /* [L] */
} pdb_v2_model;

typedef struct pdb_v2_cache {
    int64_t cap, len;            /* positions allocated / filled */
    int64_t row;                 /* kvl + rope */
    float *latent;               /* [L, cap, row] */
} pdb_v2_cache;

/* dir: HF model directory (config.json + safetensors). */
pdb_status pdb_v2_load(const char *dir, pdb_v2_model **out);
/* Load from an open reader with a parsed config (used by tests). */
pdb_status pdb_v2_load_from(const pdb_config *cfg, const pdb_st *st, pdb_v2_model **out);
void pdb_v2_free(pdb_v2_model *m);

pdb_status pdb_v2_cache_init(pdb_v2_cache *c, const pdb_v2_model *m, int64_t cap);
void pdb_v2_cache_free(pdb_v2_cache *c);

/* Run T tokens at positions c->len.. ; logits [T, V] for every position when all_logits, else
 * [1, V] for the last one (may be NULL to skip the head). */
pdb_status pdb_v2_forward(const pdb_v2_model *m, pdb_v2_cache *c, const int32_t *ids, int64_t T,
                          int all_logits, float *logits);

/* Routing of one token (shared by every engine): probs [E] holds router logits and is softmaxed
 * in place; then (group-limited) greedy top-k with ties to the lower index; weights scaled by
 * routed_scaling_factor, or renormalised when norm_topk_prob (DeepSeek's V2 rule). E <= 1024. */
void pdb_v2_route(const pdb_config *cf, float *probs, int64_t *idx /* [K] */, float *wt /* [K] */);

#ifdef __cplusplus
}
#endif

#endif
