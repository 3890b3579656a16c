/* pdb_v2_config: DeepSeek-V2's config.json fields (validated, defaults as transformers 5.x
 * applies them) and the JSON transformers' save_pretrained writes back, for the registry. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_config_json.h"

/* ---- deepseek_v2 --------------------------------------------------------------------------- */

pdb_status pdb_v2_config_parse(json_t *root, const char *o, pdb_config *c) {
    PDB_TRY(pdb_cfgj_int(root, o, "vocab_size", 0, 1, &c->vocab_size));
    PDB_TRY(pdb_cfgj_int(root, o, "hidden_size", 0, 1, &c->hidden_size));
    PDB_TRY(pdb_cfgj_int(root, o, "intermediate_size", 0, 1, &c->intermediate_size));
    PDB_TRY(pdb_cfgj_int(root, o, "moe_intermediate_size", 1407, 0, &c->moe_intermediate_size));
    PDB_TRY(pdb_cfgj_int(root, o, "num_hidden_layers", 0, 1, &c->num_layers));
    PDB_TRY(pdb_cfgj_int(root, o, "num_attention_heads", 0, 1, &c->num_heads));
    PDB_TRY(pdb_cfgj_int(root, o, "max_position_embeddings", 2048, 0, &c->max_position_embeddings));
    PDB_TRY(pdb_cfgj_num(root, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    PDB_TRY(pdb_cfgj_bool(root, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    PDB_TRY(pdb_cfgj_int(root, o, "bos_token_id", -1, 0, &c->bos_token_id));
    PDB_TRY(pdb_cfgj_int(root, o, "eos_token_id", -1, 0, &c->eos_token_id));
    PDB_TRY(pdb_cfgj_int(root, o, "q_lora_rank", 0, 0, &c->q_lora_rank));
    PDB_TRY(pdb_cfgj_int(root, o, "kv_lora_rank", 512, 0, &c->kv_lora_rank));
    PDB_TRY(pdb_cfgj_int(root, o, "qk_nope_head_dim", 128, 0, &c->qk_nope_head_dim));
    PDB_TRY(pdb_cfgj_int(root, o, "qk_rope_head_dim", 64, 0, &c->qk_rope_head_dim));
    PDB_TRY(pdb_cfgj_int(root, o, "v_head_dim", 128, 0, &c->v_head_dim));
    PDB_TRY(pdb_cfgj_int(root, o, "n_routed_experts", 0, 0, &c->n_routed_experts));
    PDB_TRY(pdb_cfgj_int(root, o, "n_shared_experts", 0, 0, &c->n_shared_experts));
    PDB_TRY(pdb_cfgj_int(root, o, "num_experts_per_tok", 0, 0, &c->num_experts_per_tok));
    PDB_TRY(pdb_cfgj_int(root, o, "first_k_dense_replace", 0, 0, &c->first_k_dense_replace));
    PDB_TRY(pdb_cfgj_int(root, o, "moe_layer_freq", 1, 0, &c->moe_layer_freq));
    PDB_TRY(pdb_cfgj_int(root, o, "n_group", 1, 0, &c->n_group));
    PDB_TRY(pdb_cfgj_int(root, o, "topk_group", 1, 0, &c->topk_group));
    PDB_TRY(pdb_cfgj_num(root, o, "routed_scaling_factor", 1.0, &c->routed_scaling_factor));
    PDB_TRY(pdb_cfgj_bool(root, o, "norm_topk_prob", 0, &c->norm_topk_prob));
    const char *tm = pdb_cfgj_str(root, "topk_method");
    if (!tm || !strcmp(tm, "greedy")) c->topk_method = PDB_TOPK_GREEDY;
    else if (!strcmp(tm, "group_limited_greedy")) c->topk_method = PDB_TOPK_GROUP_LIMITED;
    else return pdb_err_set(PDB_UNSUPPORTED, "%s: topk_method '%s' is not supported (greedy, group_limited_greedy)", o, tm);
    const char *act = pdb_cfgj_str(root, "hidden_act");
    if (act && strcmp(act, "silu"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)", o, act);
    json_t *kvh = json_object_get(root, "num_key_value_heads");
    if (json_is_integer(kvh) && json_integer_value(kvh) != c->num_heads)
        PDB_DEBUG("%s: num_key_value_heads is ignored by MLA", o);
    PDB_TRY(pdb_cfgj_rope(root, o, c->max_position_embeddings, &c->rope));

    /* consistency */
    struct { const char *name; int64_t v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_layers}, {"num_attention_heads", c->num_heads},
        {"kv_lora_rank", c->kv_lora_rank}, {"qk_nope_head_dim", c->qk_nope_head_dim},
        {"qk_rope_head_dim", c->qk_rope_head_dim}, {"v_head_dim", c->v_head_dim},
        {"intermediate_size", c->intermediate_size}, {"max_position_embeddings", c->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0 || pos[i].v > (1LL << 31))
            return pdb_err_set(PDB_INVALID, "%s: field '%s' = %lld is impossible (must be in 1..2^31)", o,
                               pos[i].name, (long long)pos[i].v);
    if (c->qk_rope_head_dim % 2)
        return pdb_err_set(PDB_INVALID, "%s: qk_rope_head_dim = %lld must be even", o, (long long)c->qk_rope_head_dim);
    if (c->q_lora_rank < 0) return pdb_err_set(PDB_INVALID, "%s: q_lora_rank must be >= 0 or null", o);
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return pdb_err_set(PDB_INVALID, "%s: rms_norm_eps = %g is impossible", o, c->rms_norm_eps);
    if (c->first_k_dense_replace < 0 || c->moe_layer_freq < 1)
        return pdb_err_set(PDB_INVALID, "%s: first_k_dense_replace must be >= 0 and moe_layer_freq >= 1", o);
    int any_moe = 0;
    for (int64_t l = 0; l < c->num_layers; l++) any_moe |= pdb_config_layer_is_moe(c, l);
    if (any_moe) {
        if (c->n_routed_experts <= 0 || c->num_experts_per_tok <= 0 || c->num_experts_per_tok > c->n_routed_experts)
            return pdb_err_set(PDB_INVALID, "%s: MoE layers need 0 < num_experts_per_tok (%lld) <= n_routed_experts (%lld)",
                               o, (long long)c->num_experts_per_tok, (long long)c->n_routed_experts);
        if (c->moe_intermediate_size <= 0 || c->n_shared_experts < 0)
            return pdb_err_set(PDB_INVALID, "%s: moe_intermediate_size must be > 0 and n_shared_experts >= 0", o);
        if (c->topk_method == PDB_TOPK_GROUP_LIMITED &&
            (c->n_group <= 0 || c->n_routed_experts % c->n_group || c->topk_group <= 0 || c->topk_group > c->n_group ||
             c->num_experts_per_tok > c->topk_group * (c->n_routed_experts / c->n_group)))
            return pdb_err_set(PDB_INVALID, "%s: group_limited_greedy needs n_group dividing n_routed_experts and "
                               "0 < topk_group <= n_group with enough experts in the kept groups", o);
    }
    if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
        return pdb_err_set(PDB_INVALID, "%s: bos/eos token id outside the vocabulary (%lld)", o, (long long)c->vocab_size);
    return PDB_OK;
}

/* The layout transformers 5.x save_pretrained writes. */
pdb_status pdb_v2_config_to_json(const pdb_config *c, char **out) {
    json_t *o = pdb_cfgj_root("DeepseekV2ForCausalLM", "deepseek_v2");
    if (!o) return pdb_err_set(PDB_NOMEM, "config: out of memory");
#define SETI(k, v) json_object_set_new(o, k, json_integer(v))
    SETI("vocab_size", c->vocab_size);
    SETI("hidden_size", c->hidden_size);
    SETI("intermediate_size", c->intermediate_size);
    SETI("moe_intermediate_size", c->moe_intermediate_size);
    SETI("num_hidden_layers", c->num_layers);
    SETI("num_attention_heads", c->num_heads);
    SETI("num_key_value_heads", c->num_heads);
    SETI("max_position_embeddings", c->max_position_embeddings);
    SETI("kv_lora_rank", c->kv_lora_rank);
    if (c->q_lora_rank) SETI("q_lora_rank", c->q_lora_rank);
    else json_object_set_new(o, "q_lora_rank", json_null());
    SETI("qk_nope_head_dim", c->qk_nope_head_dim);
    SETI("qk_rope_head_dim", c->qk_rope_head_dim);
    SETI("v_head_dim", c->v_head_dim);
    SETI("n_routed_experts", c->n_routed_experts);
    SETI("n_shared_experts", c->n_shared_experts);
    SETI("num_experts_per_tok", c->num_experts_per_tok);
    SETI("first_k_dense_replace", c->first_k_dense_replace);
    SETI("moe_layer_freq", c->moe_layer_freq);
    SETI("n_group", c->n_group);
    SETI("topk_group", c->topk_group);
    if (c->bos_token_id >= 0) SETI("bos_token_id", c->bos_token_id);
    if (c->eos_token_id >= 0) SETI("eos_token_id", c->eos_token_id);
#undef SETI
    json_object_set_new(o, "topk_method", json_string(c->topk_method == PDB_TOPK_GREEDY ? "greedy" : "group_limited_greedy"));
    json_object_set_new(o, "routed_scaling_factor", json_real(c->routed_scaling_factor));
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_theta", json_real(c->rope.theta));
    if (c->rope.type == PDB_ROPE_YARN) {
        json_object_set_new(rp, "rope_type", json_string("yarn"));
        json_object_set_new(rp, "factor", json_real(c->rope.factor));
        json_object_set_new(rp, "original_max_position_embeddings", json_integer(c->rope.original_max_pos));
        json_object_set_new(rp, "beta_fast", json_real(c->rope.beta_fast));
        json_object_set_new(rp, "beta_slow", json_real(c->rope.beta_slow));
        if (c->rope.mscale) json_object_set_new(rp, "mscale", json_real(c->rope.mscale));
        if (c->rope.mscale_all_dim) json_object_set_new(rp, "mscale_all_dim", json_real(c->rope.mscale_all_dim));
    } else {
        json_object_set_new(rp, "rope_type", json_string("default"));
    }
    json_object_set_new(o, "rope_parameters", rp);
    *out = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return *out ? PDB_OK : pdb_err_set(PDB_NOMEM, "config: out of memory");
}
