/* pdb_v4_names: DeepSeek-V4's tensor names, the one table the V4 loader and make-model use.
 * Accepted spellings, in lookup order per role: DeepSeek's own name (layers.N.attn.wkv.weight,
 * ffn.experts.E.w1.weight, hc_attn_fn, attn.attn_sink, ...) first, then transformers' where it
 * differs (self_attn.kv_proj, mlp.experts.E.gate_proj, attn_hc.fn, ...), each with the "model."
 * prefix transformers 5.17 save_pretrained writes and without it. save_pretrained also writes the
 * main kv_norm as attn.norm.weight, model.embed_tokens.weight, model.hc_head.hc_fn and a top-level
 * head.weight: each row's `saved` spelling, the one make-model writes.
 * Invariant: the enum order is the table's row order. */
#ifndef PDB_V4_NAMES_H
#define PDB_V4_NAMES_H

#include "pdb_config.h"
#include "pdb_names.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pdb_v4_tensor_role {
    PDB_V4_T_EMBED = 0,
    PDB_V4_T_NORM,
    PDB_V4_T_HEAD,            /* optional under tie_word_embeddings */
    PDB_V4_T_HC_HEAD_FN,
    PDB_V4_T_HC_HEAD_BASE,
    PDB_V4_T_HC_HEAD_SCALE,
    PDB_V4_T_ATTN_NORM,       /* per layer */
    PDB_V4_T_FFN_NORM,
    PDB_V4_T_HC_ATTN_FN,      /* hyper-connection mixing before attention ... */
    PDB_V4_T_HC_ATTN_BASE,
    PDB_V4_T_HC_ATTN_SCALE,
    PDB_V4_T_HC_FFN_FN,       /* ... and before the FFN */
    PDB_V4_T_HC_FFN_BASE,
    PDB_V4_T_HC_FFN_SCALE,
    PDB_V4_T_WQ_A,
    PDB_V4_T_Q_NORM,
    PDB_V4_T_WQ_B,
    PDB_V4_T_WKV,
    PDB_V4_T_KV_NORM,
    PDB_V4_T_WO_A,
    PDB_V4_T_WO_B,
    PDB_V4_T_ATTN_SINK,
    PDB_V4_T_COMP_WKV,        /* compressing layers (CSA, HCA): the compressor */
    PDB_V4_T_COMP_WGATE,
    PDB_V4_T_COMP_APE,
    PDB_V4_T_COMP_NORM,
    PDB_V4_T_IDX_COMP_WKV,    /* CSA layers: the indexer's compressor, wq_b and weights_proj */
    PDB_V4_T_IDX_COMP_WGATE,
    PDB_V4_T_IDX_COMP_APE,
    PDB_V4_T_IDX_COMP_NORM,
    PDB_V4_T_IDX_WQ_B,
    PDB_V4_T_IDX_WPROJ,
    PDB_V4_T_GATE,            /* the router */
    PDB_V4_T_GATE_TID2EID,    /* hash-routed layers */
    PDB_V4_T_GATE_BIAS,       /* the others */
    PDB_V4_T_EXPERTS_GATE_UP, /* transformers' fused layout (optional) */
    PDB_V4_T_EXPERTS_DOWN,
    PDB_V4_T_EXPERT_W1,       /* per (layer, expert): w1 gate, w2 down, w3 up */
    PDB_V4_T_EXPERT_W2,
    PDB_V4_T_EXPERT_W3,
    PDB_V4_T_SHARED_W1,       /* n_shared_experts > 0 */
    PDB_V4_T_SHARED_W2,
    PDB_V4_T_SHARED_W3,
    PDB_V4_T_COUNT
} pdb_v4_tensor_role;

extern const pdb_names_table pdb_v4_names_table;
const pdb_names_table *pdb_v4_names(void); /* &pdb_v4_names_table */

/* Whether a per-expert checkpoint for config c (what make-model writes) holds `role` at layer
 * (ignored for globals): the compressor on compressing layers, the indexer on CSA layers,
 * tid2eid or the gate bias by the layer's routing, head unless tied; the fused roles never. */
int pdb_v4_names_required(const pdb_config *c, int role, int64_t layer);

#ifdef __cplusplus
}
#endif

#endif
