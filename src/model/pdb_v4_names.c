/* pdb_v4_names: the DeepSeek-V4 tensor-name table (see pdb_v4_names.h). Suffixes are in the
 * loader's lookup order (DeepSeek's first); `saved` counts spellings in lookup order, suffix-major
 * over the two prefixes ("model." then none): 0 = DeepSeek's suffix under "model.", 1 = it without
 * the prefix, 2 = the second suffix under "model.". */
#include "pdb_v4_names.h"

#define G PDB_NAMES_GLOBAL
#define L PDB_NAMES_LAYER
#define X PDB_NAMES_EXPERT
#define OPT PDB_NAMES_OPTIONAL

static const pdb_names_row rows[PDB_V4_T_COUNT] = {
    {PDB_V4_T_EMBED, "embed", G, 0, {"embed.weight", "embed_tokens.weight"}, 2},
    {PDB_V4_T_NORM, "final norm", G, 0, {"norm.weight"}, 0},
    {PDB_V4_T_HEAD, "head", G, OPT, {"head.weight", "lm_head.weight"}, 1},
    {PDB_V4_T_HC_HEAD_FN, "hc_head fn", G, 0, {"hc_head_fn", "hc_head.hc_fn"}, 2},
    {PDB_V4_T_HC_HEAD_BASE, "hc_head base", G, 0, {"hc_head_base", "hc_head.hc_base"}, 2},
    {PDB_V4_T_HC_HEAD_SCALE, "hc_head scale", G, 0, {"hc_head_scale", "hc_head.hc_scale"}, 2},
    {PDB_V4_T_ATTN_NORM, "attention norm", L, 0, {"attn_norm.weight", "input_layernorm.weight"}, 0},
    {PDB_V4_T_FFN_NORM, "ffn norm", L, 0, {"ffn_norm.weight", "post_attention_layernorm.weight"}, 0},
    {PDB_V4_T_HC_ATTN_FN, "hc_attn fn", L, 0, {"hc_attn_fn", "attn_hc.fn"}, 0},
    {PDB_V4_T_HC_ATTN_BASE, "hc_attn base", L, 0, {"hc_attn_base", "attn_hc.base"}, 0},
    {PDB_V4_T_HC_ATTN_SCALE, "hc_attn scale", L, 0, {"hc_attn_scale", "attn_hc.scale"}, 0},
    {PDB_V4_T_HC_FFN_FN, "hc_ffn fn", L, 0, {"hc_ffn_fn", "ffn_hc.fn"}, 0},
    {PDB_V4_T_HC_FFN_BASE, "hc_ffn base", L, 0, {"hc_ffn_base", "ffn_hc.base"}, 0},
    {PDB_V4_T_HC_FFN_SCALE, "hc_ffn scale", L, 0, {"hc_ffn_scale", "ffn_hc.scale"}, 0},
    {PDB_V4_T_WQ_A, "wq_a", L, 0, {"attn.wq_a.weight", "self_attn.q_a_proj.weight"}, 0},
    {PDB_V4_T_Q_NORM, "q_norm", L, 0, {"attn.q_norm.weight", "self_attn.q_a_norm.weight"}, 0},
    {PDB_V4_T_WQ_B, "wq_b", L, 0, {"attn.wq_b.weight", "self_attn.q_b_proj.weight"}, 0},
    {PDB_V4_T_WKV, "wkv", L, 0, {"attn.wkv.weight", "self_attn.kv_proj.weight"}, 0},
    {PDB_V4_T_KV_NORM, "kv_norm", L, 0, {"attn.kv_norm.weight", "attn.norm.weight", "self_attn.kv_norm.weight"}, 2},
    {PDB_V4_T_WO_A, "wo_a", L, 0, {"attn.wo_a.weight", "self_attn.o_a_proj.weight"}, 0},
    {PDB_V4_T_WO_B, "wo_b", L, 0, {"attn.wo_b.weight", "self_attn.o_b_proj.weight"}, 0},
    {PDB_V4_T_ATTN_SINK, "attention sink", L, 0, {"attn.attn_sink", "self_attn.sinks"}, 0},
    {PDB_V4_T_COMP_WKV, "compressor wkv", L, 0, {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"}, 0},
    {PDB_V4_T_COMP_WGATE, "compressor wgate", L, 0,
     {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"}, 0},
    {PDB_V4_T_COMP_APE, "compressor ape", L, 0, {"attn.compressor.ape", "self_attn.compressor.position_bias"}, 0},
    {PDB_V4_T_COMP_NORM, "compressor norm", L, 0, {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"}, 0},
    {PDB_V4_T_IDX_COMP_WKV, "indexer compressor wkv", L, 0,
     {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"}, 0},
    {PDB_V4_T_IDX_COMP_WGATE, "indexer compressor wgate", L, 0,
     {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"}, 0},
    {PDB_V4_T_IDX_COMP_APE, "indexer compressor ape", L, 0,
     {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"}, 0},
    {PDB_V4_T_IDX_COMP_NORM, "indexer compressor norm", L, 0,
     {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"}, 0},
    {PDB_V4_T_IDX_WQ_B, "indexer wq_b", L, 0, {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"}, 0},
    {PDB_V4_T_IDX_WPROJ, "indexer weights_proj", L, 0,
     {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight",
      "self_attn.compressor.indexer.weights_proj.weight"}, 0},
    {PDB_V4_T_GATE, "router", L, 0, {"ffn.gate.weight", "mlp.gate.weight"}, 0},
    {PDB_V4_T_GATE_TID2EID, "router tid2eid", L, 0, {"ffn.gate.tid2eid", "mlp.gate.tid2eid"}, 0},
    {PDB_V4_T_GATE_BIAS, "router bias", L, 0, {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"}, 0},
    {PDB_V4_T_EXPERTS_GATE_UP, "fused experts gate_up_proj", L, OPT, {"mlp.experts.gate_up_proj", "ffn.experts.gate_up_proj"}, 0},
    {PDB_V4_T_EXPERTS_DOWN, "fused experts down_proj", L, OPT, {"mlp.experts.down_proj", "ffn.experts.down_proj"}, 0},
    {PDB_V4_T_EXPERT_W1, "expert w1", X, 0, {"ffn.experts.%lld.w1.weight", "mlp.experts.%lld.gate_proj.weight"}, 0},
    {PDB_V4_T_EXPERT_W2, "expert w2", X, 0, {"ffn.experts.%lld.w2.weight", "mlp.experts.%lld.down_proj.weight"}, 0},
    {PDB_V4_T_EXPERT_W3, "expert w3", X, 0, {"ffn.experts.%lld.w3.weight", "mlp.experts.%lld.up_proj.weight"}, 0},
    {PDB_V4_T_SHARED_W1, "shared w1", L, 0, {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"}, 0},
    {PDB_V4_T_SHARED_W2, "shared w2", L, 0, {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"}, 0},
    {PDB_V4_T_SHARED_W3, "shared w3", L, 0, {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"}, 0},
};

const pdb_names_table pdb_v4_names_table = {
    "deepseek_v4", PDB_V4_T_COUNT, rows, {"model.", ""}, {"model.layers.%lld.", "layers.%lld."},
};

const pdb_names_table *pdb_v4_names(void) { return &pdb_v4_names_table; }

int pdb_v4_names_required(const pdb_config *c, int role, int64_t layer) {
    if (role < 0 || role >= PDB_V4_T_COUNT) return 0;
    if (role == PDB_V4_T_HEAD) return !c->tie_word_embeddings;
    if (role < PDB_V4_T_ATTN_NORM) return 1;
    int64_t rate = pdb_config_v4_rate(c, layer);
    int csa = c->v4_attn[layer] == PDB_V4_ATTN_CSA, hash = c->v4_hash_moe[layer];
    if (role >= PDB_V4_T_COMP_WKV && role <= PDB_V4_T_COMP_NORM) return rate != 0;
    if (role >= PDB_V4_T_IDX_COMP_WKV && role <= PDB_V4_T_IDX_WPROJ) return csa;
    if (role == PDB_V4_T_GATE_TID2EID) return hash;
    if (role == PDB_V4_T_GATE_BIAS) return !hash;
    if (role == PDB_V4_T_EXPERTS_GATE_UP || role == PDB_V4_T_EXPERTS_DOWN) return 0;
    if (role >= PDB_V4_T_SHARED_W1) return c->n_shared_experts > 0;
    return 1;
}
