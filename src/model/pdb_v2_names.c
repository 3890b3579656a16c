/* pdb_v2_names: the DeepSeek-V2 tensor-name table (see pdb_v2_names.h). One spelling per role:
 * the loaders accept exactly these names today, and make-model writes them. */
#include "pdb_v2_names.h"

#define G PDB_NAMES_GLOBAL
#define L PDB_NAMES_LAYER
#define X PDB_NAMES_EXPERT
#define OPT PDB_NAMES_OPTIONAL

static const pdb_names_row rows[PDB_V2_T_COUNT] = {
    {PDB_V2_T_EMBED, "embed", G, 0, {"model.embed_tokens.weight"}, 0},
    {PDB_V2_T_FINAL_NORM, "final norm", G, 0, {"model.norm.weight"}, 0},
    {PDB_V2_T_LM_HEAD, "lm_head", G, OPT, {"lm_head.weight"}, 0},
    {PDB_V2_T_ATTN_NORM, "attention norm", L, 0, {"input_layernorm.weight"}, 0},
    {PDB_V2_T_FFN_NORM, "ffn norm", L, 0, {"post_attention_layernorm.weight"}, 0},
    {PDB_V2_T_Q_PROJ, "q_proj", L, 0, {"self_attn.q_proj.weight"}, 0},
    {PDB_V2_T_Q_A_PROJ, "q_a_proj", L, 0, {"self_attn.q_a_proj.weight"}, 0},
    {PDB_V2_T_Q_A_NORM, "q_a_layernorm", L, 0, {"self_attn.q_a_layernorm.weight"}, 0},
    {PDB_V2_T_Q_B_PROJ, "q_b_proj", L, 0, {"self_attn.q_b_proj.weight"}, 0},
    {PDB_V2_T_KV_A_PROJ, "kv_a_proj_with_mqa", L, 0, {"self_attn.kv_a_proj_with_mqa.weight"}, 0},
    {PDB_V2_T_KV_A_NORM, "kv_a_layernorm", L, 0, {"self_attn.kv_a_layernorm.weight"}, 0},
    {PDB_V2_T_KV_B_PROJ, "kv_b_proj", L, 0, {"self_attn.kv_b_proj.weight"}, 0},
    {PDB_V2_T_O_PROJ, "o_proj", L, 0, {"self_attn.o_proj.weight"}, 0},
    {PDB_V2_T_MLP_GATE, "dense gate_proj", L, 0, {"mlp.gate_proj.weight"}, 0},
    {PDB_V2_T_MLP_UP, "dense up_proj", L, 0, {"mlp.up_proj.weight"}, 0},
    {PDB_V2_T_MLP_DOWN, "dense down_proj", L, 0, {"mlp.down_proj.weight"}, 0},
    {PDB_V2_T_ROUTER, "router", L, 0, {"mlp.gate.weight"}, 0},
    {PDB_V2_T_EXPERTS_GATE_UP, "fused experts gate_up_proj", L, OPT, {"mlp.experts.gate_up_proj"}, 0},
    {PDB_V2_T_EXPERTS_DOWN, "fused experts down_proj", L, OPT, {"mlp.experts.down_proj"}, 0},
    {PDB_V2_T_EXPERT_GATE, "expert gate_proj", X, 0, {"mlp.experts.%lld.gate_proj.weight"}, 0},
    {PDB_V2_T_EXPERT_UP, "expert up_proj", X, 0, {"mlp.experts.%lld.up_proj.weight"}, 0},
    {PDB_V2_T_EXPERT_DOWN, "expert down_proj", X, 0, {"mlp.experts.%lld.down_proj.weight"}, 0},
    {PDB_V2_T_SHARED_GATE, "shared gate_proj", L, 0, {"mlp.shared_experts.gate_proj.weight"}, 0},
    {PDB_V2_T_SHARED_UP, "shared up_proj", L, 0, {"mlp.shared_experts.up_proj.weight"}, 0},
    {PDB_V2_T_SHARED_DOWN, "shared down_proj", L, 0, {"mlp.shared_experts.down_proj.weight"}, 0},
};

const pdb_names_table pdb_v2_names_table = {
    "deepseek_v2", PDB_V2_T_COUNT, rows, {""}, {"model.layers.%lld."},
};

const pdb_names_table *pdb_v2_names(void) { return &pdb_v2_names_table; }

int pdb_v2_names_required(const pdb_config *c, int role, int64_t layer) {
    int moe = role >= PDB_V2_T_ATTN_NORM && pdb_config_layer_is_moe(c, layer);
    switch ((pdb_v2_tensor_role)role) {
    case PDB_V2_T_EMBED: case PDB_V2_T_FINAL_NORM: return 1;
    case PDB_V2_T_LM_HEAD: return !c->tie_word_embeddings;
    case PDB_V2_T_Q_PROJ: return c->q_lora_rank == 0;
    case PDB_V2_T_Q_A_PROJ: case PDB_V2_T_Q_A_NORM: case PDB_V2_T_Q_B_PROJ: return c->q_lora_rank > 0;
    case PDB_V2_T_MLP_GATE: case PDB_V2_T_MLP_UP: case PDB_V2_T_MLP_DOWN: return !moe;
    case PDB_V2_T_ROUTER: case PDB_V2_T_EXPERT_GATE: case PDB_V2_T_EXPERT_UP: case PDB_V2_T_EXPERT_DOWN: return moe;
    case PDB_V2_T_SHARED_GATE: case PDB_V2_T_SHARED_UP: case PDB_V2_T_SHARED_DOWN: return moe && c->n_shared_experts > 0;
    case PDB_V2_T_EXPERTS_GATE_UP: case PDB_V2_T_EXPERTS_DOWN: return 0;
    default: return role >= 0 && role < PDB_V2_T_COUNT; /* norms, kv_a, kv_b, o_proj: every layer */
    }
}
