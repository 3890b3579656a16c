/* pdb_v2_names: DeepSeek-V2's tensor names, the one table every V2 loader (reference forward,
 * quantized weights, CUDA engine) and make-model use. DeepSeek's checkpoints and transformers 5.x
 * save_pretrained spell V2's per-expert layout the same: "model.layers.L." + module path, the
 * globals model.embed_tokens / model.norm / lm_head; transformers' fused expert tensors
 * (mlp.experts.gate_up_proj [E, 2*I, H], mlp.experts.down_proj [E, H, I]) are their own roles.
 * Invariant: the enum order is the table's row order. */
#ifndef PDB_V2_NAMES_H
#define PDB_V2_NAMES_H

#include "pdb_config.h"
#include "pdb_names.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pdb_v2_tensor_role {
    PDB_V2_T_EMBED = 0,          /* model.embed_tokens.weight [V, H] */
    PDB_V2_T_FINAL_NORM,         /* model.norm.weight [H] */
    PDB_V2_T_LM_HEAD,            /* lm_head.weight [V, H]; optional under tie_word_embeddings */
    PDB_V2_T_ATTN_NORM,          /* per layer: input_layernorm */
    PDB_V2_T_FFN_NORM,           /* post_attention_layernorm */
    PDB_V2_T_Q_PROJ,             /* q_lora_rank == 0 */
    PDB_V2_T_Q_A_PROJ,           /* q_lora_rank > 0: q_a_proj, q_a_layernorm, q_b_proj */
    PDB_V2_T_Q_A_NORM,
    PDB_V2_T_Q_B_PROJ,
    PDB_V2_T_KV_A_PROJ,          /* kv_a_proj_with_mqa */
    PDB_V2_T_KV_A_NORM,
    PDB_V2_T_KV_B_PROJ,
    PDB_V2_T_O_PROJ,
    PDB_V2_T_MLP_GATE,           /* dense layers: gate/up/down_proj */
    PDB_V2_T_MLP_UP,
    PDB_V2_T_MLP_DOWN,
    PDB_V2_T_ROUTER,             /* MoE layers: mlp.gate */
    PDB_V2_T_EXPERTS_GATE_UP,    /* transformers' fused layout (optional) */
    PDB_V2_T_EXPERTS_DOWN,
    PDB_V2_T_EXPERT_GATE,        /* per (layer, expert): mlp.experts.E.gate/up/down_proj */
    PDB_V2_T_EXPERT_UP,
    PDB_V2_T_EXPERT_DOWN,
    PDB_V2_T_SHARED_GATE,        /* n_shared_experts > 0: mlp.shared_experts.gate/up/down_proj */
    PDB_V2_T_SHARED_UP,
    PDB_V2_T_SHARED_DOWN,
    PDB_V2_T_COUNT
} pdb_v2_tensor_role;

extern const pdb_names_table pdb_v2_names_table;
const pdb_names_table *pdb_v2_names(void); /* &pdb_v2_names_table */

/* Whether a per-expert checkpoint for config c (what DeepSeek ships and make-model writes) holds
 * `role` at layer (ignored for globals): q_proj or q_a_*, dense MLP or router + experts (+ shared),
 * lm_head unless tied; the fused roles never. */
int pdb_v2_names_required(const pdb_config *c, int role, int64_t layer);

/* Spelling 0 of role for (layer, expert) into buf[PDB_NAMES_MAX_LEN] (V2 has one spelling). */
static inline const char *pdb_v2_names_format(int role, int64_t layer, int64_t expert, char *buf) {
    return pdb_names_format(&pdb_v2_names_table, role, 0, layer, expert, buf);
}

#ifdef __cplusplus
}
#endif

#endif
