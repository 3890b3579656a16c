/* pdb_config: a model's config.json parsed into a fixed struct, validated.
 * Invariants: after pdb_config_load returns PDB_OK every field is set (defaults applied the way
 * transformers 5.x applies them), dims are positive and consistent, and the rope parameters are
 * normalised into one form whichever of rope_parameters / rope_scaling + rope_theta the file used.
 * Errors name the file and the field. */
#ifndef PDB_CONFIG_H
#define PDB_CONFIG_H

#include <stdint.h>

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pdb_arch { PDB_ARCH_DEEPSEEK_V2 = 1, PDB_ARCH_DEEPSEEK_V4 = 2 } pdb_arch;
typedef enum pdb_rope_type { PDB_ROPE_DEFAULT = 0, PDB_ROPE_YARN = 1 } pdb_rope_type;
typedef enum pdb_topk_method { PDB_TOPK_GREEDY = 0, PDB_TOPK_GROUP_LIMITED = 1 } pdb_topk_method;

/* DeepSeek-V4 attention kinds per layer (values are stable: stored in fingerprints). */
typedef enum pdb_v4_attn { PDB_V4_ATTN_SLIDING = 0, PDB_V4_ATTN_CSA = 1, PDB_V4_ATTN_HCA = 2 } pdb_v4_attn;
/* DeepSeek-V4 router activation. */
typedef enum pdb_v4_score { PDB_V4_SCORE_SQRTSOFTPLUS = 0, PDB_V4_SCORE_SOFTMAX = 1, PDB_V4_SCORE_SIGMOID = 2 } pdb_v4_score;

#define PDB_CONFIG_MAX_LAYERS 512

typedef struct pdb_rope_params {
    pdb_rope_type type;
    double theta;
    double factor;           /* yarn */
    int64_t original_max_pos; /* yarn */
    double beta_fast, beta_slow;
    double mscale, mscale_all_dim; /* 0 when absent */
    double attention_factor;  /* explicit, or < 0 when absent (derived) */
    int truncate;             /* yarn correction range rounding (default 1) */
} pdb_rope_params;

typedef struct pdb_config {
    pdb_arch arch;
    char model_type[32];
    int64_t vocab_size, hidden_size, intermediate_size, moe_intermediate_size;
    int64_t num_layers, num_heads, max_position_embeddings;
    double rms_norm_eps;
    int tie_word_embeddings;
    int64_t bos_token_id, eos_token_id; /* -1 when absent */
    /* MLA (deepseek_v2) */
    int64_t q_lora_rank;      /* 0 = no q compression (q_proj) */
    int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* MoE */
    int64_t n_routed_experts, n_shared_experts, num_experts_per_tok, first_k_dense_replace;
    int64_t moe_layer_freq, n_group, topk_group;
    double routed_scaling_factor;
    int norm_topk_prob;
    pdb_topk_method topk_method;
    pdb_rope_params rope;        /* V2: the rope; V4: the "main" rope (sliding-only layers) */
    /* DeepSeek-V4 (arch == PDB_ARCH_DEEPSEEK_V4). qk_rope_head_dim holds the rotary dims (the
     * trailing dims of every head, of the indexer heads and of compressed entries); q_lora_rank,
     * moe_intermediate_size (== intermediate_size), the expert counts, routed_scaling_factor and
     * norm_topk_prob are shared with V2. */
    int64_t head_dim;             /* the shared K=V head (512) */
    double partial_rotary_factor; /* qk_rope_head_dim = (int)(head_dim * factor) */
    int64_t num_kv_heads;         /* 1 */
    int64_t o_groups, o_lora_rank;
    int64_t sliding_window;
    int64_t hc_mult, hc_sinkhorn_iters;
    double hc_eps, swiglu_limit;  /* swiglu_limit <= 0: no clipping */
    int64_t index_n_heads, index_head_dim, index_topk;
    int64_t compress_rate_csa, compress_rate_hca;
    int64_t num_nextn_predict_layers; /* MTP layers in the checkpoint (not run) */
    pdb_v4_score scoring_func;
    uint8_t v4_attn[PDB_CONFIG_MAX_LAYERS];     /* pdb_v4_attn per layer */
    uint8_t v4_hash_moe[PDB_CONFIG_MAX_LAYERS]; /* 1: routed by tid2eid[token] */
    pdb_rope_params rope_compress; /* CSA/HCA layers, their compressors and the indexer */
} pdb_config;

/* path: a model directory (reads DIR/config.json) or a config.json file. */
pdb_status pdb_config_load(const char *path, pdb_config *cfg);
/* Parse from a JSON string; `origin` names the source in errors. */
pdb_status pdb_config_parse(const char *json, const char *origin, pdb_config *cfg);
/* Run a loader on a model directory: its config and its opened checkpoint (closed again after
 * from returns); from's status is returned. The one opener of a model directory for loaders. */
struct pdb_st;
pdb_status pdb_config_load_dir(const char *dir, pdb_status (*from)(const pdb_config *cfg, const struct pdb_st *st, void *out),
                               void *out);
/* Serialise (the HF layout transformers 5.x writes: rope_parameters form). malloc'd string. */
pdb_status pdb_config_to_json(const pdb_config *cfg, char **out);

/* Is layer l a MoE layer (else dense MLP)? */
int pdb_config_layer_is_moe(const pdb_config *cfg, int64_t l);
/* Softmax scale of MLA attention: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2
 * under YaRN (DeepSeek's rule; transformers 5.17 applies the same). */
double pdb_config_softmax_scale(const pdb_config *cfg);
/* V4: compression rate of layer l (0 for sliding-only layers). */
int64_t pdb_config_v4_rate(const pdb_config *cfg, int64_t l);
/* V4 layer-type names as config.json spells them. */
const char *pdb_config_v4_attn_name(pdb_v4_attn a);

#ifdef __cplusplus
}
#endif

#endif
