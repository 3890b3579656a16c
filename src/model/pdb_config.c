/* pdb_config: config.json -> pdb_config (validated, defaults as transformers 5.x applies them) and
 * back: the file, the JSON readers every architecture's parser uses (pdb_config_json.h), and the
 * dispatch by model_type to the architecture's parser (pdb_arch.h: pdb_v2_config.c,
 * pdb_v4_config.c). Invariant: a config that loads is internally consistent, so the forward pass
 * never re-checks shapes derived from it. */
#include "pdb_config.h"

#include "pdb_arch.h"
#include "pdb_config_json.h"
#include "pdb_safetensors.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_file.h"

/* ---- field readers: each names origin and key on error ------------------------------------ */

pdb_status pdb_cfgj_int(json_t *o, const char *origin, const char *key, int64_t def, int required,
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

pdb_status pdb_cfgj_num(json_t *o, const char *origin, const char *key, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = def; return PDB_OK; }
    if (!json_is_number(v)) return pdb_err_set(PDB_INVALID, "%s: field '%s' must be a number", origin, key);
    *out = json_number_value(v);
    return PDB_OK;
}

pdb_status pdb_cfgj_bool(json_t *o, const char *origin, const char *key, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = def; return PDB_OK; }
    if (!json_is_boolean(v)) return pdb_err_set(PDB_INVALID, "%s: field '%s' must be true or false", origin, key);
    *out = json_is_true(v);
    return PDB_OK;
}

const char *pdb_cfgj_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- rope: rope_parameters (5.x) or rope_scaling + rope_theta (legacy) -------------------- */

/* One rope dict (rope_parameters, rope_scaling, or a V4 sub-dict); `o2` names it in errors. */
pdb_status pdb_cfgj_rope_dict(json_t *rp, const char *o2, double top_theta, int64_t max_pos, pdb_rope_params *r) {
    r->theta = top_theta;
    r->type = PDB_ROPE_DEFAULT;
    r->attention_factor = -1;
    r->truncate = 1;
    const char *type = pdb_cfgj_str(rp, "rope_type");
    if (!type) type = pdb_cfgj_str(rp, "type");
    if (!type || !strcmp(type, "default")) {
        r->type = PDB_ROPE_DEFAULT;
    } else if (!strcmp(type, "yarn")) {
        r->type = PDB_ROPE_YARN;
    } else {
        return pdb_err_set(PDB_UNSUPPORTED, "%s: rope type '%s' is not supported (default, yarn)", o2, type);
    }
    PDB_TRY(pdb_cfgj_num(rp, o2, "rope_theta", top_theta, &r->theta));
    if (r->type == PDB_ROPE_YARN) {
        PDB_TRY(pdb_cfgj_int(rp, o2, "original_max_position_embeddings", max_pos, 0, &r->original_max_pos));
        double f;
        json_t *fv = json_object_get(rp, "factor");
        PDB_TRY(pdb_cfgj_num(rp, o2, "factor", 0, &f));
        if (!fv || json_is_null(fv)) f = (double)max_pos / (double)r->original_max_pos; /* transformers' rule */
        r->factor = f;
        PDB_TRY(pdb_cfgj_num(rp, o2, "beta_fast", 32, &r->beta_fast));
        PDB_TRY(pdb_cfgj_num(rp, o2, "beta_slow", 1, &r->beta_slow));
        if (r->beta_fast == 0) r->beta_fast = 32; /* transformers: `or 32` */
        if (r->beta_slow == 0) r->beta_slow = 1;
        PDB_TRY(pdb_cfgj_num(rp, o2, "mscale", 0, &r->mscale));
        PDB_TRY(pdb_cfgj_num(rp, o2, "mscale_all_dim", 0, &r->mscale_all_dim));
        PDB_TRY(pdb_cfgj_num(rp, o2, "attention_factor", -1, &r->attention_factor));
        PDB_TRY(pdb_cfgj_bool(rp, o2, "truncate", 1, &r->truncate));
        if (!(r->factor > 0) || r->original_max_pos <= 0)
            return pdb_err_set(PDB_INVALID, "%s: yarn needs factor > 0 and original_max_position_embeddings > 0", o2);
    }
    if (!(r->theta > 1))
        return pdb_err_set(PDB_INVALID, "%s: rope_theta must be > 1 (got %g)", o2, r->theta);
    return PDB_OK;
}

pdb_status pdb_cfgj_rope(json_t *root, const char *origin, int64_t max_pos, pdb_rope_params *r) {
    memset(r, 0, sizeof *r);
    json_t *rp = json_object_get(root, "rope_parameters");
    const char *where = "rope_parameters";
    if (!json_is_object(rp)) { rp = json_object_get(root, "rope_scaling"); where = "rope_scaling"; }
    double top_theta;
    PDB_TRY(pdb_cfgj_num(root, origin, "rope_theta", 10000.0, &top_theta));
    r->theta = top_theta;
    r->type = PDB_ROPE_DEFAULT;
    r->attention_factor = -1;
    r->truncate = 1;
    if (!json_is_object(rp)) return PDB_OK;
    char o2[600];
    snprintf(o2, sizeof o2, "%s: %s", origin, where);
    return pdb_cfgj_rope_dict(rp, o2, top_theta, max_pos, r);
}

pdb_status pdb_cfgj_common(json_t *root, const char *o, int64_t bos_def, int64_t eos_def, pdb_config *c) {
    PDB_TRY(pdb_cfgj_num(root, o, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    PDB_TRY(pdb_cfgj_bool(root, o, "tie_word_embeddings", 0, &c->tie_word_embeddings));
    PDB_TRY(pdb_cfgj_int(root, o, "bos_token_id", bos_def, 0, &c->bos_token_id));
    return pdb_cfgj_int(root, o, "eos_token_id", eos_def, 0, &c->eos_token_id);
}

json_t *pdb_cfgj_root(const char *cls, const char *model_type) {
    json_t *o = json_object(), *arch = json_array();
    if (!o || !arch) {
        json_decref(o);
        json_decref(arch);
        return NULL;
    }
    if (json_object_set_new(o, "architectures", arch) || json_array_append_new(arch, json_string(cls)) ||
        json_object_set_new(o, "model_type", json_string(model_type))) {
        json_decref(o); /* arch with it */
        return NULL;
    }
    return o;
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
    const char *mt = pdb_cfgj_str(root, "model_type");
    if (!mt) {
        st = pdb_err_set(PDB_INVALID, "%s: missing field 'model_type'", origin);
        goto out;
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    const pdb_arch_def *a = pdb_arch_find(mt);
    if (a) {
        c->arch = a->id;
        st = a->config_parse(root, origin, c);
    } else {
        char names[256];
        st = pdb_err_set(PDB_UNSUPPORTED, "%s: unknown architecture model_type '%s' (supported: %s)", origin, mt,
                         pdb_arch_names(names, sizeof names));
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

pdb_status pdb_config_load_dir(const char *dir, pdb_status (*from)(const pdb_config *cfg, const pdb_st *st, void *out),
                               void *out) {
    pdb_config cfg;
    pdb_st *st = NULL;
    PDB_TRY(pdb_config_load(dir, &cfg));
    PDB_TRY(pdb_st_open(dir, &st));
    pdb_status s = from(&cfg, st, out);
    pdb_st_close(st);
    return s;
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
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(c, &a));
    return a->config_to_json(c, out);
}
