/* pdb_v4_config: DeepSeek-V4's config.json fields (validated, defaults and legacy forms as
 * transformers 5.17's DeepseekV4Config folds them) and the JSON save_pretrained writes back, for
 * the registry; the per-layer attention kinds and rates. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_config_json.h"

/* ---- deepseek_v4 ---------------------------------------------------------------------------
 * Forms accepted (as transformers 5.17's DeepseekV4Config.__post_init__ folds them):
 *  layer_types [str] (>= num_hidden_layers entries, truncated) | legacy compress_ratios [0|4|128]
 *    | default: 2 x HCA, then CSA at odd / HCA at even indices;
 *  compress_rates {type: rate} | legacy compress_rate_csa / compress_rate_hca | {CSA: 4, HCA: 128};
 *  mlp_layer_types ["hash_moe"|"moe"] | legacy num_hash_layers (default 3);
 *  partial_rotary_factor | legacy qk_rope_head_dim / head_dim | 64/512;
 *  rope_parameters {main: {...}, compress: {...}} (taken as written) | flat rope_parameters or
 *    rope_scaling (legacy): main = default rope at rope_theta, compress = the flat dict at
 *    compress_rope_theta, with attention_factor 1.0 when it is yarn and none is given. */

const char *pdb_config_v4_attn_name(pdb_v4_attn a) {
    switch (a) {
    case PDB_V4_ATTN_SLIDING: return "sliding_attention";
    case PDB_V4_ATTN_CSA: return "compressed_sparse_attention";
    case PDB_V4_ATTN_HCA: return "heavily_compressed_attention";
    }
    return "?";
}

int64_t pdb_config_v4_rate(const pdb_config *c, int64_t l) {
    switch ((pdb_v4_attn)c->v4_attn[l]) {
    case PDB_V4_ATTN_CSA: return c->compress_rate_csa;
    case PDB_V4_ATTN_HCA: return c->compress_rate_hca;
    default: return 0;
    }
}

static pdb_status v4_layer_types(json_t *root, const char *o, pdb_config *c) {
    int64_t n = c->num_layers;
    json_t *lt = json_object_get(root, "layer_types");
    json_t *cr = json_object_get(root, "compress_ratios");
    if (json_is_array(lt)) {
        if ((int64_t)json_array_size(lt) < n)
            return pdb_err_set(PDB_INVALID, "%s: field 'layer_types' has %zu entries, num_hidden_layers is %lld", o,
                               json_array_size(lt), (long long)n);
        for (int64_t l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            if (t && !strcmp(t, "sliding_attention")) c->v4_attn[l] = PDB_V4_ATTN_SLIDING;
            else if (t && !strcmp(t, "compressed_sparse_attention")) c->v4_attn[l] = PDB_V4_ATTN_CSA;
            else if (t && !strcmp(t, "heavily_compressed_attention")) c->v4_attn[l] = PDB_V4_ATTN_HCA;
            else return pdb_err_set(PDB_INVALID, "%s: field 'layer_types[%lld]' = '%s' is not one of sliding_attention, "
                                    "compressed_sparse_attention, heavily_compressed_attention", o, (long long)l, t ? t : "(not a string)");
        }
    } else if (lt && !json_is_null(lt)) {
        return pdb_err_set(PDB_INVALID, "%s: field 'layer_types' must be a list of strings", o);
    } else if (json_is_array(cr)) {
        if ((int64_t)json_array_size(cr) < n)
            return pdb_err_set(PDB_INVALID, "%s: field 'compress_ratios' has %zu entries, num_hidden_layers is %lld", o,
                               json_array_size(cr), (long long)n);
        for (int64_t l = 0; l < n; l++) {
            json_t *v = json_array_get(cr, (size_t)l);
            int64_t r = json_is_integer(v) ? json_integer_value(v) : -1;
            if (r == 0) c->v4_attn[l] = PDB_V4_ATTN_SLIDING;
            else if (r == 4) c->v4_attn[l] = PDB_V4_ATTN_CSA;
            else if (r == 128) c->v4_attn[l] = PDB_V4_ATTN_HCA;
            else return pdb_err_set(PDB_INVALID, "%s: field 'compress_ratios[%lld]' must be 0, 4 or 128", o, (long long)l);
        }
    } else {
        for (int64_t l = 0; l < n; l++)
            c->v4_attn[l] = l < 2 ? PDB_V4_ATTN_HCA : ((l - 2) % 2 ? PDB_V4_ATTN_CSA : PDB_V4_ATTN_HCA);
    }
    /* compress rates */
    c->compress_rate_csa = 4;
    c->compress_rate_hca = 128;
    json_t *rates = json_object_get(root, "compress_rates");
    if (json_is_object(rates)) {
        char o2[600];
        snprintf(o2, sizeof o2, "%s: compress_rates", o);
        PDB_TRY(pdb_cfgj_int(rates, o2, "compressed_sparse_attention", 4, 0, &c->compress_rate_csa));
        PDB_TRY(pdb_cfgj_int(rates, o2, "heavily_compressed_attention", 128, 0, &c->compress_rate_hca));
    } else if (rates && !json_is_null(rates)) {
        return pdb_err_set(PDB_INVALID, "%s: field 'compress_rates' must be an object", o);
    }
    PDB_TRY(pdb_cfgj_int(root, o, "compress_rate_csa", c->compress_rate_csa, 0, &c->compress_rate_csa));
    PDB_TRY(pdb_cfgj_int(root, o, "compress_rate_hca", c->compress_rate_hca, 0, &c->compress_rate_hca));
    if (c->compress_rate_csa < 1 || c->compress_rate_csa > 4096 || c->compress_rate_hca < 1 || c->compress_rate_hca > 4096)
        return pdb_err_set(PDB_INVALID, "%s: field 'compress_rates' must hold rates in 1..4096", o);
    /* mlp layer types */
    json_t *mt = json_object_get(root, "mlp_layer_types");
    if (json_is_array(mt)) {
        if ((int64_t)json_array_size(mt) < n)
            return pdb_err_set(PDB_INVALID, "%s: field 'mlp_layer_types' has %zu entries, num_hidden_layers is %lld", o,
                               json_array_size(mt), (long long)n);
        for (int64_t l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(mt, (size_t)l));
            if (t && !strcmp(t, "hash_moe")) c->v4_hash_moe[l] = 1;
            else if (t && !strcmp(t, "moe")) c->v4_hash_moe[l] = 0;
            else return pdb_err_set(PDB_INVALID, "%s: field 'mlp_layer_types[%lld]' = '%s' is not one of hash_moe, moe", o,
                                    (long long)l, t ? t : "(not a string)");
        }
    } else if (mt && !json_is_null(mt)) {
        return pdb_err_set(PDB_INVALID, "%s: field 'mlp_layer_types' must be a list of strings", o);
    } else {
        int64_t nh;
        PDB_TRY(pdb_cfgj_int(root, o, "num_hash_layers", 3, 0, &nh));
        if (nh < 0) return pdb_err_set(PDB_INVALID, "%s: field 'num_hash_layers' must be >= 0", o);
        for (int64_t l = 0; l < n; l++) c->v4_hash_moe[l] = l < nh;
    }
    return PDB_OK;
}

static pdb_status v4_rope(json_t *root, const char *o, pdb_config *c) {
    double theta, ctheta;
    PDB_TRY(pdb_cfgj_num(root, o, "rope_theta", 10000.0, &theta));
    PDB_TRY(pdb_cfgj_num(root, o, "compress_rope_theta", 160000.0, &ctheta));
    json_t *rp = json_object_get(root, "rope_parameters");
    const char *where = "rope_parameters";
    if (!json_is_object(rp)) { rp = json_object_get(root, "rope_scaling"); where = "rope_scaling"; }
    char o2[600];
    json_t *mn = json_is_object(rp) ? json_object_get(rp, "main") : NULL;
    json_t *cp = json_is_object(rp) ? json_object_get(rp, "compress") : NULL;
    if (json_is_object(mn) && json_is_object(cp)) {
        json_t *subs[2] = {mn, cp};
        pdb_rope_params *dst[2] = {&c->rope, &c->rope_compress};
        const char *names[2] = {"main", "compress"};
        for (int i = 0; i < 2; i++) {
            snprintf(o2, sizeof o2, "%s: %s.%s", o, where, names[i]);
            PDB_TRY(pdb_cfgj_rope_dict(subs[i], o2, i ? ctheta : theta, c->max_position_embeddings, dst[i]));
            double prf;
            PDB_TRY(pdb_cfgj_num(subs[i], o2, "partial_rotary_factor", c->partial_rotary_factor, &prf));
            if ((int64_t)((double)c->head_dim * prf) != c->qk_rope_head_dim)
                return pdb_err_set(PDB_UNSUPPORTED, "%s: field 'partial_rotary_factor' = %g gives %lld rotary dims, the model "
                                   "uses %lld (one rotary width for every layer type is supported)", o2, prf,
                                   (long long)((double)c->head_dim * prf), (long long)c->qk_rope_head_dim);
        }
        return PDB_OK;
    }
    memset(&c->rope, 0, sizeof c->rope);
    c->rope.type = PDB_ROPE_DEFAULT;
    c->rope.theta = theta;
    c->rope.attention_factor = -1;
    c->rope.truncate = 1;
    if (!(theta > 1)) return pdb_err_set(PDB_INVALID, "%s: field 'rope_theta' must be > 1 (got %g)", o, theta);
    if (json_is_object(rp)) {
        snprintf(o2, sizeof o2, "%s: %s", o, where);
        json_t *copy = json_deep_copy(rp);
        if (!copy) return pdb_err_set(PDB_NOMEM, "%s: out of memory", o);
        json_object_set_new(copy, "rope_theta", json_real(ctheta)); /* transformers overrides it */
        pdb_status st = pdb_cfgj_rope_dict(copy, o2, ctheta, c->max_position_embeddings, &c->rope_compress);
        int has_af = json_object_get(copy, "attention_factor") != NULL;
        json_decref(copy);
        PDB_TRY(st);
        if (c->rope_compress.type == PDB_ROPE_YARN && !has_af) c->rope_compress.attention_factor = 1.0;
    } else {
        c->rope_compress = c->rope;
        c->rope_compress.theta = ctheta;
        if (!(ctheta > 1)) return pdb_err_set(PDB_INVALID, "%s: field 'compress_rope_theta' must be > 1 (got %g)", o, ctheta);
    }
    return PDB_OK;
}

pdb_status pdb_v4_config_parse(json_t *root, const char *o, pdb_config *c) {
    PDB_TRY(pdb_cfgj_int(root, o, "vocab_size", 129280, 0, &c->vocab_size));
    PDB_TRY(pdb_cfgj_int(root, o, "hidden_size", 4096, 0, &c->hidden_size));
    PDB_TRY(pdb_cfgj_int(root, o, "moe_intermediate_size", 2048, 0, &c->moe_intermediate_size));
    c->intermediate_size = c->moe_intermediate_size; /* transformers' attribute_map */
    PDB_TRY(pdb_cfgj_int(root, o, "num_hidden_layers", 43, 0, &c->num_layers));
    PDB_TRY(pdb_cfgj_int(root, o, "num_attention_heads", 64, 0, &c->num_heads));
    PDB_TRY(pdb_cfgj_int(root, o, "num_key_value_heads", 1, 0, &c->num_kv_heads));
    PDB_TRY(pdb_cfgj_int(root, o, "head_dim", 512, 0, &c->head_dim));
    PDB_TRY(pdb_cfgj_int(root, o, "q_lora_rank", 1024, 0, &c->q_lora_rank));
    PDB_TRY(pdb_cfgj_int(root, o, "num_experts_per_tok", 6, 0, &c->num_experts_per_tok));
    PDB_TRY(pdb_cfgj_int(root, o, "n_routed_experts", 256, 0, &c->n_routed_experts));
    PDB_TRY(pdb_cfgj_int(root, o, "n_shared_experts", 1, 0, &c->n_shared_experts));
    PDB_TRY(pdb_cfgj_bool(root, o, "norm_topk_prob", 1, &c->norm_topk_prob));
    PDB_TRY(pdb_cfgj_num(root, o, "routed_scaling_factor", 1.5, &c->routed_scaling_factor));
    PDB_TRY(pdb_cfgj_int(root, o, "max_position_embeddings", 1048576, 0, &c->max_position_embeddings));
    PDB_TRY(pdb_cfgj_int(root, o, "hc_mult", 4, 0, &c->hc_mult));
    PDB_TRY(pdb_cfgj_int(root, o, "hc_sinkhorn_iters", 20, 0, &c->hc_sinkhorn_iters));
    PDB_TRY(pdb_cfgj_num(root, o, "hc_eps", 1e-6, &c->hc_eps));
    PDB_TRY(pdb_cfgj_num(root, o, "swiglu_limit", 10.0, &c->swiglu_limit));
    PDB_TRY(pdb_cfgj_int(root, o, "sliding_window", 128, 0, &c->sliding_window));
    PDB_TRY(pdb_cfgj_int(root, o, "o_groups", 8, 0, &c->o_groups));
    PDB_TRY(pdb_cfgj_int(root, o, "o_lora_rank", 1024, 0, &c->o_lora_rank));
    PDB_TRY(pdb_cfgj_int(root, o, "index_n_heads", 64, 0, &c->index_n_heads));
    PDB_TRY(pdb_cfgj_int(root, o, "index_head_dim", 128, 0, &c->index_head_dim));
    PDB_TRY(pdb_cfgj_int(root, o, "index_topk", 512, 0, &c->index_topk));
    PDB_TRY(pdb_cfgj_int(root, o, "num_nextn_predict_layers", 1, 0, &c->num_nextn_predict_layers));
    PDB_TRY(pdb_cfgj_num(root, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    PDB_TRY(pdb_cfgj_bool(root, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    PDB_TRY(pdb_cfgj_int(root, o, "bos_token_id", 0, 0, &c->bos_token_id));
    PDB_TRY(pdb_cfgj_int(root, o, "eos_token_id", 1, 0, &c->eos_token_id));
    c->first_k_dense_replace = 0;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->topk_method = PDB_TOPK_GREEDY;
    const char *sf = pdb_cfgj_str(root, "scoring_func");
    if (!sf || !strcmp(sf, "sqrtsoftplus")) c->scoring_func = PDB_V4_SCORE_SQRTSOFTPLUS;
    else if (!strcmp(sf, "softmax")) c->scoring_func = PDB_V4_SCORE_SOFTMAX;
    else if (!strcmp(sf, "sigmoid")) c->scoring_func = PDB_V4_SCORE_SIGMOID;
    else return pdb_err_set(PDB_UNSUPPORTED, "%s: field 'scoring_func' = '%s' is not supported (sqrtsoftplus, softmax, sigmoid)", o, sf);
    const char *act = pdb_cfgj_str(root, "hidden_act");
    if (act && strcmp(act, "silu"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: field 'hidden_act' = '%s' is not supported (silu)", o, act);

    struct { const char *name; int64_t v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_layers}, {"num_attention_heads", c->num_heads},
        {"head_dim", c->head_dim}, {"q_lora_rank", c->q_lora_rank}, {"moe_intermediate_size", c->moe_intermediate_size},
        {"max_position_embeddings", c->max_position_embeddings}, {"hc_mult", c->hc_mult},
        {"hc_sinkhorn_iters", c->hc_sinkhorn_iters}, {"sliding_window", c->sliding_window}, {"o_groups", c->o_groups},
        {"o_lora_rank", c->o_lora_rank}, {"index_n_heads", c->index_n_heads}, {"index_head_dim", c->index_head_dim},
        {"index_topk", c->index_topk}, {"n_routed_experts", c->n_routed_experts},
        {"num_experts_per_tok", c->num_experts_per_tok},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0 || pos[i].v > (1LL << 31))
            return pdb_err_set(PDB_INVALID, "%s: field '%s' = %lld is impossible (must be in 1..2^31)", o, pos[i].name,
                               (long long)pos[i].v);
    if (c->num_layers > PDB_CONFIG_MAX_LAYERS)
        return pdb_err_set(PDB_TOO_LARGE, "%s: field 'num_hidden_layers' = %lld exceeds %d", o, (long long)c->num_layers,
                           PDB_CONFIG_MAX_LAYERS);
    if (c->num_kv_heads != 1)
        return pdb_err_set(PDB_INVALID, "%s: field 'num_key_value_heads' must be 1 (one shared K=V head), got %lld", o,
                           (long long)c->num_kv_heads);
    if (c->hc_mult > 64) return pdb_err_set(PDB_INVALID, "%s: field 'hc_mult' = %lld exceeds 64", o, (long long)c->hc_mult);
    if (c->num_experts_per_tok > c->n_routed_experts || c->n_routed_experts > 65536)
        return pdb_err_set(PDB_INVALID, "%s: fields 'num_experts_per_tok' (%lld) / 'n_routed_experts' (%lld) are impossible", o,
                           (long long)c->num_experts_per_tok, (long long)c->n_routed_experts);
    if (c->n_shared_experts < 0 || c->n_shared_experts > 1)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: field 'n_shared_experts' = %lld (0 or 1 supported)", o, (long long)c->n_shared_experts);
    if (c->num_heads * c->head_dim % c->o_groups)
        return pdb_err_set(PDB_INVALID, "%s: field 'o_groups' = %lld must divide num_attention_heads * head_dim = %lld", o,
                           (long long)c->o_groups, (long long)(c->num_heads * c->head_dim));
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1) || !(c->hc_eps >= 0 && c->hc_eps < 1))
        return pdb_err_set(PDB_INVALID, "%s: fields 'rms_norm_eps' / 'hc_eps' are impossible", o);
    /* rotary width */
    json_t *prfv = json_object_get(root, "partial_rotary_factor");
    json_t *qkr = json_object_get(root, "qk_rope_head_dim");
    if (json_is_number(prfv)) c->partial_rotary_factor = json_number_value(prfv);
    else if (json_is_integer(qkr)) c->partial_rotary_factor = (double)json_integer_value(qkr) / (double)c->head_dim;
    else c->partial_rotary_factor = 64.0 / 512.0;
    if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor < 1)) /* also keeps the cast below defined */
        return pdb_err_set(PDB_INVALID, "%s: field 'partial_rotary_factor' = %g must be in (0, 1)", o, c->partial_rotary_factor);
    c->qk_rope_head_dim = (int64_t)((double)c->head_dim * c->partial_rotary_factor);
    if (c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2 || c->qk_rope_head_dim >= c->head_dim ||
        c->qk_rope_head_dim > c->index_head_dim)
        return pdb_err_set(PDB_INVALID, "%s: field 'partial_rotary_factor' gives %lld rotary dims: must be even, > 0, "
                           "< head_dim (%lld) and <= index_head_dim (%lld)", o, (long long)c->qk_rope_head_dim,
                           (long long)c->head_dim, (long long)c->index_head_dim);
    PDB_TRY(v4_layer_types(root, o, c));
    PDB_TRY(v4_rope(root, o, c));
    if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
        return pdb_err_set(PDB_INVALID, "%s: bos/eos token id outside the vocabulary (%lld)", o, (long long)c->vocab_size);
    return PDB_OK;
}

static json_t *v4_rope_json(const pdb_rope_params *r, double prf) {
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_theta", json_real(r->theta));
    json_object_set_new(rp, "partial_rotary_factor", json_real(prf));
    if (r->type == PDB_ROPE_YARN) {
        json_object_set_new(rp, "rope_type", json_string("yarn"));
        json_object_set_new(rp, "factor", json_real(r->factor));
        json_object_set_new(rp, "original_max_position_embeddings", json_integer(r->original_max_pos));
        json_object_set_new(rp, "beta_fast", json_real(r->beta_fast));
        json_object_set_new(rp, "beta_slow", json_real(r->beta_slow));
        if (r->mscale) json_object_set_new(rp, "mscale", json_real(r->mscale));
        if (r->mscale_all_dim) json_object_set_new(rp, "mscale_all_dim", json_real(r->mscale_all_dim));
        if (r->attention_factor >= 0) json_object_set_new(rp, "attention_factor", json_real(r->attention_factor));
    } else {
        json_object_set_new(rp, "rope_type", json_string("default"));
    }
    return rp;
}

/* The layout transformers 5.17 save_pretrained writes. */
pdb_status pdb_v4_config_to_json(const pdb_config *c, char **out) {
    json_t *o = pdb_cfgj_root("DeepseekV4ForCausalLM", "deepseek_v4");
    if (!o) return pdb_err_set(PDB_NOMEM, "config: out of memory");
#define SETI(k, v) json_object_set_new(o, k, json_integer(v))
#define SETR(k, v) json_object_set_new(o, k, json_real(v))
    SETI("vocab_size", c->vocab_size);
    SETI("hidden_size", c->hidden_size);
    SETI("moe_intermediate_size", c->moe_intermediate_size);
    SETI("num_hidden_layers", c->num_layers);
    SETI("num_attention_heads", c->num_heads);
    SETI("num_key_value_heads", 1);
    SETI("head_dim", c->head_dim);
    SETI("q_lora_rank", c->q_lora_rank);
    SETI("num_experts_per_tok", c->num_experts_per_tok);
    SETI("n_routed_experts", c->n_routed_experts);
    SETI("n_shared_experts", c->n_shared_experts);
    SETI("max_position_embeddings", c->max_position_embeddings);
    SETI("hc_mult", c->hc_mult);
    SETI("hc_sinkhorn_iters", c->hc_sinkhorn_iters);
    SETI("sliding_window", c->sliding_window);
    SETI("o_groups", c->o_groups);
    SETI("o_lora_rank", c->o_lora_rank);
    SETI("index_n_heads", c->index_n_heads);
    SETI("index_head_dim", c->index_head_dim);
    SETI("index_topk", c->index_topk);
    SETI("num_nextn_predict_layers", c->num_nextn_predict_layers);
    SETI("bos_token_id", c->bos_token_id);
    SETI("eos_token_id", c->eos_token_id);
    SETR("routed_scaling_factor", c->routed_scaling_factor);
    SETR("hc_eps", c->hc_eps);
    SETR("swiglu_limit", c->swiglu_limit);
    SETR("rms_norm_eps", c->rms_norm_eps);
    SETR("rope_theta", c->rope.theta);
    SETR("compress_rope_theta", c->rope_compress.theta);
    SETR("partial_rotary_factor", c->partial_rotary_factor);
    SETI("qk_rope_head_dim", c->qk_rope_head_dim);
#undef SETI
#undef SETR
    static const char *sfn[] = {"sqrtsoftplus", "softmax", "sigmoid"};
    json_object_set_new(o, "scoring_func", json_string(sfn[c->scoring_func]));
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "dtype", json_string("bfloat16"));
    json_t *lt = json_array(), *mt = json_array(), *cr = json_object();
    for (int64_t l = 0; l < c->num_layers; l++) {
        json_array_append_new(lt, json_string(pdb_config_v4_attn_name((pdb_v4_attn)c->v4_attn[l])));
        json_array_append_new(mt, json_string(c->v4_hash_moe[l] ? "hash_moe" : "moe"));
    }
    json_object_set_new(cr, "compressed_sparse_attention", json_integer(c->compress_rate_csa));
    json_object_set_new(cr, "heavily_compressed_attention", json_integer(c->compress_rate_hca));
    json_object_set_new(o, "layer_types", lt);
    json_object_set_new(o, "mlp_layer_types", mt);
    json_object_set_new(o, "compress_rates", cr);
    json_t *rp = json_object();
    json_object_set_new(rp, "main", v4_rope_json(&c->rope, c->partial_rotary_factor));
    json_object_set_new(rp, "compress", v4_rope_json(&c->rope_compress, c->partial_rotary_factor));
    json_object_set_new(o, "rope_parameters", rp);
    *out = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return *out ? PDB_OK : pdb_err_set(PDB_NOMEM, "config: out of memory");
}
