/* pdb_config: config.json -> pdb_config for deepseek_v2 (validated, defaults as transformers
 * 5.x applies them) and back. Invariant: a config that loads is internally consistent, so the
 * forward pass never re-checks shapes derived from it. */
#include "pdb_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))) {
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
        st = pdb_err_set(PDB_UNSUPPORTED, "%s: model_type 'deepseek_v4' is not supported by this build yet", origin);
    } else {
        st = pdb_err_set(PDB_UNSUPPORTED, "%s: unknown architecture model_type '%s' (supported: deepseek_v2)", origin, mt);
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
    FILE *f = fopen(file, "rb");
    if (!f) return pdb_err_set(PDB_IO, "%s: cannot open: %m", file);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 16384;
            if (cap > (64u << 20)) { free(buf); fclose(f); return pdb_err_set(PDB_TOO_LARGE, "%s: larger than 64 MiB", file); }
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return pdb_err_set(PDB_NOMEM, "%s: out of memory", file); }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return pdb_err_set(PDB_IO, "%s: read error", file); }
    buf[len] = 0;
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
