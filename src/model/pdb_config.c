/* pdb_config: config.json -> pdb_config for deepseek_v2 and deepseek_v4 (validated, defaults as transformers
 * 5.x applies them) and back. Invariant: a config that loads is internally consistent, so the
 * forward pass never re-checks shapes derived from it. */
#include "pdb_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_file.h"

/* ---- field readers: each names origin and key on error ------------------------------------ */

static pdb_status get_int(json_t *o, const char *origin, const char *key, int64_t def, int required,
                          int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return pdb_err_set(PDB_INVALID, "%s: missing required field '%s'", origin, key);
        *out = def;
        return PDB_OK;
    }
    if (json_is_integer(v)) { *out = json_integer_value(v); return PDB_OK; }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9.2e18) {
        *out = (int64_t)json_real_value(v);
        return PDB_OK;
    }
    if (json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0))) {
        *out = json_integer_value(json_array_get(v, 0)); /* eos_token_id: [a, b] */
        return PDB_OK;
    }
    return pdb_err_set(PDB_INVALID, "%s: field '%s' must be an integer", origin, key);
}

static pdb_status get_num(json_t *o, const char *origin, const char *key, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = def; return PDB_OK; }
    if (!json_is_number(v)) return pdb_err_set(PDB_INVALID, "%s: field '%s' must be a number", origin, key);
    *out = json_number_value(v);
    return PDB_OK;
}

static pdb_status get_bool(json_t *o, const char *origin, const char *key, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = def; return PDB_OK; }
    if (!json_is_boolean(v)) return pdb_err_set(PDB_INVALID, "%s: field '%s' must be true or false", origin, key);
    *out = json_is_true(v);
    return PDB_OK;
}

static const char *get_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- rope: rope_parameters (5.x) or rope_scaling + rope_theta (legacy) -------------------- */

/* One rope dict (rope_parameters, rope_scaling, or a V4 sub-dict); `o2` names it in errors. */
static pdb_status parse_rope_dict(json_t *rp, const char *o2, double top_theta, int64_t max_pos, pdb_rope_params *r) {
    r->theta = top_theta;
    r->type = PDB_ROPE_DEFAULT;
    r->attention_factor = -1;
    r->truncate = 1;
    const char *type = get_str(rp, "rope_type");
    if (!type) type = get_str(rp, "type");
    if (!type || !strcmp(type, "default")) {
        r->type = PDB_ROPE_DEFAULT;
    } else if (!strcmp(type, "yarn")) {
        r->type = PDB_ROPE_YARN;
    } else {
        return pdb_err_set(PDB_UNSUPPORTED, "%s: rope type '%s' is not supported (default, yarn)", o2, type);
    }
    PDB_TRY(get_num(rp, o2, "rope_theta", top_theta, &r->theta));
    if (r->type == PDB_ROPE_YARN) {
        PDB_TRY(get_int(rp, o2, "original_max_position_embeddings", max_pos, 0, &r->original_max_pos));
        double f;
        json_t *fv = json_object_get(rp, "factor");
        PDB_TRY(get_num(rp, o2, "factor", 0, &f));
        if (!fv || json_is_null(fv)) f = (double)max_pos / (double)r->original_max_pos; /* transformers' rule */
        r->factor = f;
        PDB_TRY(get_num(rp, o2, "beta_fast", 32, &r->beta_fast));
        PDB_TRY(get_num(rp, o2, "beta_slow", 1, &r->beta_slow));
        if (r->beta_fast == 0) r->beta_fast = 32; /* transformers: `or 32` */
        if (r->beta_slow == 0) r->beta_slow = 1;
        PDB_TRY(get_num(rp, o2, "mscale", 0, &r->mscale));
        PDB_TRY(get_num(rp, o2, "mscale_all_dim", 0, &r->mscale_all_dim));
        PDB_TRY(get_num(rp, o2, "attention_factor", -1, &r->attention_factor));
        PDB_TRY(get_bool(rp, o2, "truncate", 1, &r->truncate));
        if (!(r->factor > 0) || r->original_max_pos <= 0)
            return pdb_err_set(PDB_INVALID, "%s: yarn needs factor > 0 and original_max_position_embeddings > 0", o2);
    }
    if (!(r->theta > 1))
        return pdb_err_set(PDB_INVALID, "%s: rope_theta must be > 1 (got %g)", o2, r->theta);
    return PDB_OK;
}

static pdb_status parse_rope(json_t *root, const char *origin, int64_t max_pos, pdb_rope_params *r) {
    memset(r, 0, sizeof *r);
    json_t *rp = json_object_get(root, "rope_parameters");
    const char *where = "rope_parameters";
    if (!json_is_object(rp)) { rp = json_object_get(root, "rope_scaling"); where = "rope_scaling"; }
    double top_theta;
    PDB_TRY(get_num(root, origin, "rope_theta", 10000.0, &top_theta));
    r->theta = top_theta;
    r->type = PDB_ROPE_DEFAULT;
    r->attention_factor = -1;
    r->truncate = 1;
    if (!json_is_object(rp)) return PDB_OK;
    char o2[600];
    snprintf(o2, sizeof o2, "%s: %s", origin, where);
    return parse_rope_dict(rp, o2, top_theta, max_pos, r);
}

/* ---- deepseek_v2 --------------------------------------------------------------------------- */

static pdb_status parse_v2(json_t *root, const char *o, pdb_config *c) {
    PDB_TRY(get_int(root, o, "vocab_size", 0, 1, &c->vocab_size));
    PDB_TRY(get_int(root, o, "hidden_size", 0, 1, &c->hidden_size));
    PDB_TRY(get_int(root, o, "intermediate_size", 0, 1, &c->intermediate_size));
    PDB_TRY(get_int(root, o, "moe_intermediate_size", 1407, 0, &c->moe_intermediate_size));
    PDB_TRY(get_int(root, o, "num_hidden_layers", 0, 1, &c->num_layers));
    PDB_TRY(get_int(root, o, "num_attention_heads", 0, 1, &c->num_heads));
    PDB_TRY(get_int(root, o, "max_position_embeddings", 2048, 0, &c->max_position_embeddings));
    PDB_TRY(get_num(root, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    PDB_TRY(get_bool(root, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    PDB_TRY(get_int(root, o, "bos_token_id", -1, 0, &c->bos_token_id));
    PDB_TRY(get_int(root, o, "eos_token_id", -1, 0, &c->eos_token_id));
    PDB_TRY(get_int(root, o, "q_lora_rank", 0, 0, &c->q_lora_rank));
    PDB_TRY(get_int(root, o, "kv_lora_rank", 512, 0, &c->kv_lora_rank));
    PDB_TRY(get_int(root, o, "qk_nope_head_dim", 128, 0, &c->qk_nope_head_dim));
    PDB_TRY(get_int(root, o, "qk_rope_head_dim", 64, 0, &c->qk_rope_head_dim));
    PDB_TRY(get_int(root, o, "v_head_dim", 128, 0, &c->v_head_dim));
    PDB_TRY(get_int(root, o, "n_routed_experts", 0, 0, &c->n_routed_experts));
    PDB_TRY(get_int(root, o, "n_shared_experts", 0, 0, &c->n_shared_experts));
    PDB_TRY(get_int(root, o, "num_experts_per_tok", 0, 0, &c->num_experts_per_tok));
    PDB_TRY(get_int(root, o, "first_k_dense_replace", 0, 0, &c->first_k_dense_replace));
    PDB_TRY(get_int(root, o, "moe_layer_freq", 1, 0, &c->moe_layer_freq));
    PDB_TRY(get_int(root, o, "n_group", 1, 0, &c->n_group));
    PDB_TRY(get_int(root, o, "topk_group", 1, 0, &c->topk_group));
    PDB_TRY(get_num(root, o, "routed_scaling_factor", 1.0, &c->routed_scaling_factor));
    PDB_TRY(get_bool(root, o, "norm_topk_prob", 0, &c->norm_topk_prob));
    const char *tm = get_str(root, "topk_method");
    if (!tm || !strcmp(tm, "greedy")) c->topk_method = PDB_TOPK_GREEDY;
    else if (!strcmp(tm, "group_limited_greedy")) c->topk_method = PDB_TOPK_GROUP_LIMITED;
    else return pdb_err_set(PDB_UNSUPPORTED, "%s: topk_method '%s' is not supported (greedy, group_limited_greedy)", o, tm);
    const char *act = get_str(root, "hidden_act");
    if (act && strcmp(act, "silu"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu)", o, act);
    json_t *kvh = json_object_get(root, "num_key_value_heads");
    if (json_is_integer(kvh) && json_integer_value(kvh) != c->num_heads)
        PDB_DEBUG("%s: num_key_value_heads is ignored by MLA", o);
    PDB_TRY(parse_rope(root, o, c->max_position_embeddings, &c->rope));

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
        PDB_TRY(get_int(rates, o2, "compressed_sparse_attention", 4, 0, &c->compress_rate_csa));
        PDB_TRY(get_int(rates, o2, "heavily_compressed_attention", 128, 0, &c->compress_rate_hca));
    } else if (rates && !json_is_null(rates)) {
        return pdb_err_set(PDB_INVALID, "%s: field 'compress_rates' must be an object", o);
    }
    PDB_TRY(get_int(root, o, "compress_rate_csa", c->compress_rate_csa, 0, &c->compress_rate_csa));
    PDB_TRY(get_int(root, o, "compress_rate_hca", c->compress_rate_hca, 0, &c->compress_rate_hca));
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
        PDB_TRY(get_int(root, o, "num_hash_layers", 3, 0, &nh));
        if (nh < 0) return pdb_err_set(PDB_INVALID, "%s: field 'num_hash_layers' must be >= 0", o);
        for (int64_t l = 0; l < n; l++) c->v4_hash_moe[l] = l < nh;
    }
    return PDB_OK;
}

static pdb_status v4_rope(json_t *root, const char *o, pdb_config *c) {
    double theta, ctheta;
    PDB_TRY(get_num(root, o, "rope_theta", 10000.0, &theta));
    PDB_TRY(get_num(root, o, "compress_rope_theta", 160000.0, &ctheta));
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
            PDB_TRY(parse_rope_dict(subs[i], o2, i ? ctheta : theta, c->max_position_embeddings, dst[i]));
            double prf;
            PDB_TRY(get_num(subs[i], o2, "partial_rotary_factor", c->partial_rotary_factor, &prf));
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
        pdb_status st = parse_rope_dict(copy, o2, ctheta, c->max_position_embeddings, &c->rope_compress);
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

static pdb_status parse_v4(json_t *root, const char *o, pdb_config *c) {
    PDB_TRY(get_int(root, o, "vocab_size", 129280, 0, &c->vocab_size));
    PDB_TRY(get_int(root, o, "hidden_size", 4096, 0, &c->hidden_size));
    PDB_TRY(get_int(root, o, "moe_intermediate_size", 2048, 0, &c->moe_intermediate_size));
    c->intermediate_size = c->moe_intermediate_size; /* transformers' attribute_map */
    PDB_TRY(get_int(root, o, "num_hidden_layers", 43, 0, &c->num_layers));
    PDB_TRY(get_int(root, o, "num_attention_heads", 64, 0, &c->num_heads));
    PDB_TRY(get_int(root, o, "num_key_value_heads", 1, 0, &c->num_kv_heads));
    PDB_TRY(get_int(root, o, "head_dim", 512, 0, &c->head_dim));
    PDB_TRY(get_int(root, o, "q_lora_rank", 1024, 0, &c->q_lora_rank));
    PDB_TRY(get_int(root, o, "num_experts_per_tok", 6, 0, &c->num_experts_per_tok));
    PDB_TRY(get_int(root, o, "n_routed_experts", 256, 0, &c->n_routed_experts));
    PDB_TRY(get_int(root, o, "n_shared_experts", 1, 0, &c->n_shared_experts));
    PDB_TRY(get_bool(root, o, "norm_topk_prob", 1, &c->norm_topk_prob));
    PDB_TRY(get_num(root, o, "routed_scaling_factor", 1.5, &c->routed_scaling_factor));
    PDB_TRY(get_int(root, o, "max_position_embeddings", 1048576, 0, &c->max_position_embeddings));
    PDB_TRY(get_int(root, o, "hc_mult", 4, 0, &c->hc_mult));
    PDB_TRY(get_int(root, o, "hc_sinkhorn_iters", 20, 0, &c->hc_sinkhorn_iters));
    PDB_TRY(get_num(root, o, "hc_eps", 1e-6, &c->hc_eps));
    PDB_TRY(get_num(root, o, "swiglu_limit", 10.0, &c->swiglu_limit));
    PDB_TRY(get_int(root, o, "sliding_window", 128, 0, &c->sliding_window));
    PDB_TRY(get_int(root, o, "o_groups", 8, 0, &c->o_groups));
    PDB_TRY(get_int(root, o, "o_lora_rank", 1024, 0, &c->o_lora_rank));
    PDB_TRY(get_int(root, o, "index_n_heads", 64, 0, &c->index_n_heads));
    PDB_TRY(get_int(root, o, "index_head_dim", 128, 0, &c->index_head_dim));
    PDB_TRY(get_int(root, o, "index_topk", 512, 0, &c->index_topk));
    PDB_TRY(get_int(root, o, "num_nextn_predict_layers", 1, 0, &c->num_nextn_predict_layers));
    PDB_TRY(get_num(root, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    PDB_TRY(get_bool(root, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    PDB_TRY(get_int(root, o, "bos_token_id", 0, 0, &c->bos_token_id));
    PDB_TRY(get_int(root, o, "eos_token_id", 1, 0, &c->eos_token_id));
    c->first_k_dense_replace = 0;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->topk_method = PDB_TOPK_GREEDY;
    const char *sf = get_str(root, "scoring_func");
    if (!sf || !strcmp(sf, "sqrtsoftplus")) c->scoring_func = PDB_V4_SCORE_SQRTSOFTPLUS;
    else if (!strcmp(sf, "softmax")) c->scoring_func = PDB_V4_SCORE_SOFTMAX;
    else if (!strcmp(sf, "sigmoid")) c->scoring_func = PDB_V4_SCORE_SIGMOID;
    else return pdb_err_set(PDB_UNSUPPORTED, "%s: field 'scoring_func' = '%s' is not supported (sqrtsoftplus, softmax, sigmoid)", o, sf);
    const char *act = get_str(root, "hidden_act");
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
static pdb_status v4_to_json(const pdb_config *c, char **out) {
    json_t *o = json_object();
    if (!o) return pdb_err_set(PDB_NOMEM, "config: out of memory");
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("DeepseekV4ForCausalLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("deepseek_v4"));
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

pdb_status pdb_config_parse(const char *json, const char *origin, pdb_config *c) {
    memset(c, 0, sizeof *c);
    json_error_t e;
    json_t *root = json_loads(json, 0, &e);
    if (!root) return pdb_err_set(PDB_CORRUPT, "%s: invalid JSON at line %d column %d: %s", origin, e.line, e.column, e.text);
    pdb_status st = PDB_OK;
    if (!json_is_object(root)) {
        st = pdb_err_set(PDB_CORRUPT, "%s: top level must be a JSON object", origin);
        goto out;
    }
    const char *mt = get_str(root, "model_type");
    if (!mt) {
        st = pdb_err_set(PDB_INVALID, "%s: missing field 'model_type'", origin);
        goto out;
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    if (!strcmp(mt, "deepseek_v2")) {
        c->arch = PDB_ARCH_DEEPSEEK_V2;
        st = parse_v2(root, origin, c);
    } else if (!strcmp(mt, "deepseek_v4")) {
        c->arch = PDB_ARCH_DEEPSEEK_V4;
        st = parse_v4(root, origin, c);
    } else {
        st = pdb_err_set(PDB_UNSUPPORTED, "%s: unknown architecture model_type '%s' (supported: deepseek_v2, deepseek_v4)", origin, mt);
    }
out:
    json_decref(root);
    return st;
}

pdb_status pdb_config_load(const char *path, pdb_config *cfg) {
    char file[4096];
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) snprintf(file, sizeof file, "%s", path);
    else snprintf(file, sizeof file, "%s/config.json", path);
    char *buf;
    size_t len;
    PDB_TRY(pdb_file_read_all(file, (size_t)64 << 20, &buf, &len));
    pdb_status st = pdb_config_parse(buf, file, cfg);
    free(buf);
    return st;
}

int pdb_config_layer_is_moe(const pdb_config *c, int64_t l) {
    return c->n_routed_experts > 0 && l >= c->first_k_dense_replace && l % c->moe_layer_freq == 0;
}

static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

double pdb_config_softmax_scale(const pdb_config *c) {
    double s = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope.type == PDB_ROPE_YARN && c->rope.mscale_all_dim != 0) {
        double m = yarn_mscale(c->rope.factor, c->rope.mscale_all_dim);
        s *= m * m;
    }
    return s;
}

pdb_status pdb_config_to_json(const pdb_config *c, char **out) {
    if (c->arch == PDB_ARCH_DEEPSEEK_V4) return v4_to_json(c, out);
    json_t *o = json_object();
    if (!o) return pdb_err_set(PDB_NOMEM, "config: out of memory");
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("DeepseekV2ForCausalLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("deepseek_v2"));
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
