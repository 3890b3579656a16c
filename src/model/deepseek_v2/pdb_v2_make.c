/* pdb_v2_make: DeepSeek-V2's make-model presets (tiny, small, v2-lite) and its tensor list, named
 * by the V2 tensor-name table's saved spellings, for the registry. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_make_model.h"
#include "pdb_v2_names.h"

/* The presets' shapes, one row each. Every preset also has YaRN RoPE (theta 10000, beta 32 / 1,
 * original 4096 positions, mscale and mscale_all_dim 0.707), routed_scaling_factor 1 and its
 * first layer dense. tiny: unit tests, no tokenizer; small: the demo and end-to-end tests (the
 * real tokenizer's vocabulary); v2-lite: DeepSeek-V2-Lite's shapes (15.7B; use overrides). */
typedef struct v2_shape {
    const char *name;
    int64_t vocab, hidden, layers, heads, q_lora, kv_lora, nope, rope, v, inter, moe_inter, experts, topk, shared, max_pos;
    int64_t bos, eos;
    double rope_factor;
} v2_shape;

static const v2_shape V2_PRESETS[] = {
    /* name      vocab   hidden L   heads qlora kvlora nope rope v    inter  moe   E   K  sh  max_pos bos     eos     yarn */
    {"tiny",    1000,   64,    3,  4,    0,    32,    16,  8,   16,  128,   32,   8,  2, 1,  16384,  0,      1,      4},
    {"small",   129280, 256,   4,  4,    96,   64,    32,  16,  32,  512,   128,  16, 4, 2,  163840, 0,      1,      40},
    {"v2-lite", 102400, 2048,  27, 16,   0,    512,   128, 64,  128, 10944, 1408, 64, 6, 2,  163840, 100000, 100001, 40},
};

pdb_status pdb_v2_make_preset(const char *preset, pdb_config *c) {
    const v2_shape *p = NULL;
    for (size_t i = 0; i < sizeof V2_PRESETS / sizeof V2_PRESETS[0]; i++)
        if (!strcmp(preset, V2_PRESETS[i].name)) p = &V2_PRESETS[i];
    if (!p) return pdb_err_set(PDB_NOT_FOUND, "make-model: unknown preset '%s' (tiny, small, v2-lite)", preset);
    pdb_make_model_defaults(c, PDB_ARCH_DEEPSEEK_V2, "deepseek_v2");
    c->topk_method = PDB_TOPK_GREEDY;
    c->rope = (pdb_rope_params){.type = PDB_ROPE_YARN, .theta = 10000, .factor = p->rope_factor, .original_max_pos = 4096,
                                .beta_fast = 32, .beta_slow = 1, .mscale = 0.707, .mscale_all_dim = 0.707,
                                .attention_factor = -1, .truncate = 1};
    c->vocab_size = p->vocab, c->hidden_size = p->hidden, c->num_layers = p->layers, c->num_heads = p->heads;
    c->q_lora_rank = p->q_lora, c->kv_lora_rank = p->kv_lora, c->qk_nope_head_dim = p->nope, c->qk_rope_head_dim = p->rope;
    c->v_head_dim = p->v, c->intermediate_size = p->inter, c->moe_intermediate_size = p->moe_inter;
    c->n_routed_experts = p->experts, c->num_experts_per_tok = p->topk, c->n_shared_experts = p->shared;
    c->first_k_dense_replace = 1, c->routed_scaling_factor = 1.0, c->max_position_embeddings = p->max_pos;
    c->bos_token_id = p->bos, c->eos_token_id = p->eos;
    return PDB_OK;
}

pdb_status pdb_v2_make_layers(pdb_config *c, int64_t layers) {
    c->num_layers = layers;
    return PDB_OK;
}

pdb_status pdb_v2_make_tensors(pdb_make_ctx *x, const pdb_config *c) {
    char n[PDB_NAMES_MAX_LEN];
    int64_t H = c->hidden_size, nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
#define N(role) pdb_names_format_saved(&pdb_v2_names_table, PDB_V2_T_##role, l, e, n)
    int64_t l = -1, e = 0;
    PDB_TRY(pdb_make_model_normal(x, N(EMBED), c->vocab_size, H, 0, 1));
    PDB_TRY(pdb_make_model_norm(x, N(FINAL_NORM), H));
    PDB_TRY(pdb_make_model_linear(x, N(LM_HEAD), c->vocab_size, H));
    for (l = 0; l < c->num_layers; l++) {
        PDB_TRY(pdb_make_model_norm(x, N(ATTN_NORM), H));
        PDB_TRY(pdb_make_model_norm(x, N(FFN_NORM), H));
        if (c->q_lora_rank) {
            PDB_TRY(pdb_make_model_linear(x, N(Q_A_PROJ), c->q_lora_rank, H));
            PDB_TRY(pdb_make_model_norm(x, N(Q_A_NORM), c->q_lora_rank));
            PDB_TRY(pdb_make_model_linear(x, N(Q_B_PROJ), nh * qk, c->q_lora_rank));
        } else {
            PDB_TRY(pdb_make_model_linear(x, N(Q_PROJ), nh * qk, H));
        }
        PDB_TRY(pdb_make_model_linear(x, N(KV_A_PROJ), c->kv_lora_rank + c->qk_rope_head_dim, H));
        PDB_TRY(pdb_make_model_norm(x, N(KV_A_NORM), c->kv_lora_rank));
        PDB_TRY(pdb_make_model_linear(x, N(KV_B_PROJ), nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank));
        PDB_TRY(pdb_make_model_linear(x, N(O_PROJ), H, nh * c->v_head_dim));
        if (!pdb_config_layer_is_moe(c, l)) {
            PDB_TRY(pdb_make_model_linear(x, N(MLP_GATE), c->intermediate_size, H));
            PDB_TRY(pdb_make_model_linear(x, N(MLP_UP), c->intermediate_size, H));
            PDB_TRY(pdb_make_model_linear(x, N(MLP_DOWN), H, c->intermediate_size));
            continue;
        }
        int64_t Im = c->moe_intermediate_size;
        PDB_TRY(pdb_make_model_linear(x, N(ROUTER), c->n_routed_experts, H));
        for (e = 0; e < c->n_routed_experts; e++) {
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_GATE), Im, H));
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_UP), Im, H));
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_DOWN), H, Im));
        }
        if (c->n_shared_experts) {
            int64_t Is = Im * c->n_shared_experts;
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_GATE), Is, H));
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_UP), Is, H));
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_DOWN), H, Is));
        }
    }
#undef N
    return PDB_OK;
}
