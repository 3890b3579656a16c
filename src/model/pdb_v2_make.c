/* pdb_v2_make: DeepSeek-V2's make-model presets (tiny, small, v2-lite) and its tensor list, named
 * by the V2 tensor-name table's saved spellings, for the registry. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_make_model.h"
#include "pdb_v2_names.h"

pdb_status pdb_v2_make_preset(const char *preset, pdb_config *c) {
    c->arch = PDB_ARCH_DEEPSEEK_V2;
    snprintf(c->model_type, sizeof c->model_type, "deepseek_v2");
    c->rms_norm_eps = 1e-6;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->topk_method = PDB_TOPK_GREEDY;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
    c->rope.type = PDB_ROPE_YARN;
    c->rope.theta = 10000;
    c->rope.beta_fast = 32;
    c->rope.beta_slow = 1;
    c->rope.attention_factor = -1;
    c->rope.truncate = 1;
    if (!strcmp(preset, "tiny")) { /* unit tests: tiny, no tokenizer */
        c->vocab_size = 1000; c->hidden_size = 64; c->num_layers = 3; c->num_heads = 4;
        c->q_lora_rank = 0; c->kv_lora_rank = 32; c->qk_nope_head_dim = 16; c->qk_rope_head_dim = 8;
        c->v_head_dim = 16; c->intermediate_size = 128; c->moe_intermediate_size = 32;
        c->n_routed_experts = 8; c->num_experts_per_tok = 2; c->n_shared_experts = 1; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 16384;
        c->rope.factor = 4; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else if (!strcmp(preset, "small")) { /* demo and end-to-end tests: real tokenizer vocabulary */
        c->vocab_size = 129280; c->hidden_size = 256; c->num_layers = 4; c->num_heads = 4;
        c->q_lora_rank = 96; c->kv_lora_rank = 64; c->qk_nope_head_dim = 32; c->qk_rope_head_dim = 16;
        c->v_head_dim = 32; c->intermediate_size = 512; c->moe_intermediate_size = 128;
        c->n_routed_experts = 16; c->num_experts_per_tok = 4; c->n_shared_experts = 2; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 163840;
        c->rope.factor = 40; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else if (!strcmp(preset, "v2-lite")) { /* DeepSeek-V2-Lite's shapes (15.7B; use overrides) */
        c->vocab_size = 102400; c->hidden_size = 2048; c->num_layers = 27; c->num_heads = 16;
        c->q_lora_rank = 0; c->kv_lora_rank = 512; c->qk_nope_head_dim = 128; c->qk_rope_head_dim = 64;
        c->v_head_dim = 128; c->intermediate_size = 10944; c->moe_intermediate_size = 1408;
        c->n_routed_experts = 64; c->num_experts_per_tok = 6; c->n_shared_experts = 2; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 163840; c->bos_token_id = 100000;
        c->eos_token_id = 100001;
        c->rope.factor = 40; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else {
        return pdb_err_set(PDB_NOT_FOUND, "make-model: unknown preset '%s' (tiny, small, v2-lite)", preset);
    }
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
