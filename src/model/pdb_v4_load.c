/* pdb_v4_load: DeepSeek-V4 checkpoints -> f32 pdb_v4_model. Tensor names: DeepSeek's own
 * (layers.N.attn.wkv.weight, ffn.experts.E.w1.weight, hc_attn_fn, attn_sink, ...) with or without
 * the "model." prefix that transformers 5.17 save_pretrained writes (it also writes the main
 * kv_norm as attn.norm.weight and keeps model.embed_tokens.weight / head.weight), and the
 * transformers module names (self_attn.kv_proj, mlp.experts.gate_up_proj fused, ...). Weights
 * are f32 in memory: bf16/f32/FP8 (block-scaled) and the MX weights `pdbridge quantize --scheme mx`
 * writes ("NAME" + "NAME_mx_scale") all go through pdb_st_load_f32, which dequantizes exactly, so
 * the decoder and the prefill engine's capture hook see the same f32 weights from one checkpoint.
 * Invariant: every tensor is found under one of its names and has exactly the shape the config
 * implies, or the load fails naming the tensor (first candidate) and the file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_v4.h"

#define NAME_MAX_LEN 256

/* Resolve one tensor: layer >= 0 tries "model.layers.L." and "layers.L." prefixes, layer < 0
 * tries "model." and "". cands: NULL-terminated suffixes, DeepSeek's first. */
static const char *resolve(const pdb_st *st, int64_t layer, const char *const *cands, char *buf) {
    static const char *lp[] = {"model.layers.%lld.%s", "layers.%lld.%s"};
    static const char *tp[] = {"model.%s", "%s"};
    for (int i = 0; cands[i]; i++)
        for (int k = 0; k < 2; k++) {
            if (layer >= 0) snprintf(buf, NAME_MAX_LEN, lp[k], (long long)layer, cands[i]);
            else snprintf(buf, NAME_MAX_LEN, tp[k], cands[i]);
            if (pdb_st_find(st, buf)) return buf;
        }
    if (layer >= 0) snprintf(buf, NAME_MAX_LEN, lp[0], (long long)layer, cands[0]);
    else snprintf(buf, NAME_MAX_LEN, tp[0], cands[0]);
    return NULL;
}

static pdb_status missing(const pdb_st *st, const char *name) {
    const pdb_tensor_view *any = pdb_st_count(st) ? pdb_st_at(st, 0) : NULL;
    return pdb_err_set(PDB_NOT_FOUND, "%s: tensor '%s' is missing (DeepSeek or transformers naming)",
                       any ? any->file : "checkpoint", name);
}

static pdb_status load_t(const pdb_st *st, int64_t layer, const char *const *cands, int nd, int64_t d0, int64_t d1,
                         int64_t d2, float **dst) {
    char buf[NAME_MAX_LEN];
    if (!resolve(st, layer, cands, buf)) return missing(st, buf);
    int64_t shape[3] = {d0, d1, d2};
    return pdb_st_load_f32(st, buf, nd, shape, dst);
}

#define C(...) ((const char *const[]){__VA_ARGS__, NULL})

static pdb_status load_experts(const pdb_config *c, const pdb_st *st, int64_t l, pdb_v4_layer *L) {
    int64_t E = c->n_routed_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char buf[NAME_MAX_LEN];
    if (resolve(st, l, C("mlp.experts.gate_up_proj", "ffn.experts.gate_up_proj"), buf)) { /* fused */
        float *gu = NULL;
        int64_t s1[3] = {E, 2 * I, H};
        PDB_TRY(pdb_st_load_f32(st, buf, 3, s1, &gu));
        L->w1 = malloc(sizeof(float) * (size_t)(E * I * H));
        L->w3 = malloc(sizeof(float) * (size_t)(E * I * H));
        if (!L->w1 || !L->w3) { free(gu); return pdb_err_set(PDB_NOMEM, "%s: out of memory", buf); }
        for (int64_t e = 0; e < E; e++) {
            memcpy(L->w1 + e * I * H, gu + e * 2 * I * H, sizeof(float) * (size_t)(I * H));
            memcpy(L->w3 + e * I * H, gu + e * 2 * I * H + I * H, sizeof(float) * (size_t)(I * H));
        }
        free(gu);
        return load_t(st, l, C("mlp.experts.down_proj", "ffn.experts.down_proj"), 3, E, H, I, &L->w2);
    }
    L->w1 = malloc(sizeof(float) * (size_t)(E * I * H));
    L->w3 = malloc(sizeof(float) * (size_t)(E * I * H));
    L->w2 = malloc(sizeof(float) * (size_t)(E * I * H));
    if (!L->w1 || !L->w2 || !L->w3) return pdb_err_set(PDB_NOMEM, "experts of layer %lld: out of memory", (long long)l);
    for (int64_t e = 0; e < E; e++) {
        char n1[64], n2[64], n3[64], h1[64], h2[64], h3[64];
        snprintf(n1, sizeof n1, "ffn.experts.%lld.w1.weight", (long long)e);
        snprintf(n2, sizeof n2, "ffn.experts.%lld.w2.weight", (long long)e);
        snprintf(n3, sizeof n3, "ffn.experts.%lld.w3.weight", (long long)e);
        snprintf(h1, sizeof h1, "mlp.experts.%lld.gate_proj.weight", (long long)e);
        snprintf(h2, sizeof h2, "mlp.experts.%lld.down_proj.weight", (long long)e);
        snprintf(h3, sizeof h3, "mlp.experts.%lld.up_proj.weight", (long long)e);
        float *a = NULL, *b = NULL, *d = NULL;
        pdb_status s = load_t(st, l, C(n1, h1), 2, I, H, 0, &a);
        if (!s) s = load_t(st, l, C(n3, h3), 2, I, H, 0, &b);
        if (!s) s = load_t(st, l, C(n2, h2), 2, H, I, 0, &d);
        if (!s) {
            memcpy(L->w1 + e * I * H, a, sizeof(float) * (size_t)(I * H));
            memcpy(L->w3 + e * I * H, b, sizeof(float) * (size_t)(I * H));
            memcpy(L->w2 + e * I * H, d, sizeof(float) * (size_t)(I * H));
        }
        free(a);
        free(b);
        free(d);
        PDB_TRY(s);
    }
    return PDB_OK;
}

static pdb_status load_tid2eid(const pdb_config *c, const pdb_st *st, int64_t l, pdb_v4_layer *L) {
    char buf[NAME_MAX_LEN];
    if (!resolve(st, l, C("ffn.gate.tid2eid", "mlp.gate.tid2eid"), buf)) return missing(st, buf);
    int64_t V = c->vocab_size, K = c->num_experts_per_tok;
    int64_t shape[2] = {V, K};
    const pdb_tensor_view *v;
    PDB_TRY(pdb_st_get(st, buf, 2, shape, &v));
    if (v->dtype != PDB_DT_I64 && v->dtype != PDB_DT_I32)
        return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s' must be I32 or I64, not %s", v->file, buf, pdb_dtype_name(v->dtype));
    L->tid2eid = malloc(sizeof(int32_t) * (size_t)(V * K));
    if (!L->tid2eid) return pdb_err_set(PDB_NOMEM, "%s: out of memory", buf);
    for (int64_t i = 0; i < V * K; i++) {
        int64_t e;
        if (v->dtype == PDB_DT_I64) memcpy(&e, (const char *)v->data + 8 * i, 8);
        else { int32_t x; memcpy(&x, (const char *)v->data + 4 * i, 4); e = x; }
        if (e < 0 || e >= c->n_routed_experts)
            return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s' [%lld][%lld] = %lld is not an expert (0..%lld)", v->file, buf,
                               (long long)(i / K), (long long)(i % K), (long long)e, (long long)c->n_routed_experts - 1);
        L->tid2eid[i] = (int32_t)e;
    }
    return PDB_OK;
}

static pdb_status load_compressor(const pdb_st *st, int64_t l, int indexer, int64_t rate, int64_t dim, int64_t coff,
                                  int64_t H, pdb_v4_compressor *cp) {
    cp->rate = rate;
    cp->dim = dim;
    cp->coff = coff;
    if (!indexer) {
        PDB_TRY(load_t(st, l, C("attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"), 2, coff * dim, H, 0, &cp->wkv));
        PDB_TRY(load_t(st, l, C("attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"), 2, coff * dim, H, 0, &cp->wgate));
        PDB_TRY(load_t(st, l, C("attn.compressor.ape", "self_attn.compressor.position_bias"), 2, rate, coff * dim, 0, &cp->ape));
        return load_t(st, l, C("attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"), 1, dim, 0, 0, &cp->norm);
    }
    PDB_TRY(load_t(st, l, C("attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"), 2,
                   coff * dim, H, 0, &cp->wkv));
    PDB_TRY(load_t(st, l, C("attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"), 2,
                   coff * dim, H, 0, &cp->wgate));
    PDB_TRY(load_t(st, l, C("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"), 2, rate,
                   coff * dim, 0, &cp->ape));
    return load_t(st, l, C("attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"), 1, dim,
                  0, 0, &cp->norm);
}

static pdb_status load_layer(const pdb_v4_model *m, const pdb_st *st, int64_t l, pdb_v4_layer *L) {
    const pdb_config *c = &m->cfg;
    int64_t H = c->hidden_size, hc = c->hc_mult, mix = (2 + hc) * hc, nh = c->num_heads, hd = c->head_dim;
    int64_t qlr = c->q_lora_rank, G = c->o_groups, olr = c->o_lora_rank, E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size;
    L->attn = (pdb_v4_attn)c->v4_attn[l];
    L->rate = pdb_config_v4_rate(c, l);
    L->hash = c->v4_hash_moe[l];
    L->rope = L->attn == PDB_V4_ATTN_SLIDING ? &m->rope_main : &m->rope_compress;
    PDB_TRY(load_t(st, l, C("attn_norm.weight", "input_layernorm.weight"), 1, H, 0, 0, &L->attn_norm));
    PDB_TRY(load_t(st, l, C("ffn_norm.weight", "post_attention_layernorm.weight"), 1, H, 0, 0, &L->ffn_norm));
    PDB_TRY(load_t(st, l, C("hc_attn_fn", "attn_hc.fn"), 2, mix, hc * H, 0, &L->hc_attn_fn));
    PDB_TRY(load_t(st, l, C("hc_attn_base", "attn_hc.base"), 1, mix, 0, 0, &L->hc_attn_base));
    PDB_TRY(load_t(st, l, C("hc_attn_scale", "attn_hc.scale"), 1, 3, 0, 0, &L->hc_attn_scale));
    PDB_TRY(load_t(st, l, C("hc_ffn_fn", "ffn_hc.fn"), 2, mix, hc * H, 0, &L->hc_ffn_fn));
    PDB_TRY(load_t(st, l, C("hc_ffn_base", "ffn_hc.base"), 1, mix, 0, 0, &L->hc_ffn_base));
    PDB_TRY(load_t(st, l, C("hc_ffn_scale", "ffn_hc.scale"), 1, 3, 0, 0, &L->hc_ffn_scale));
    PDB_TRY(load_t(st, l, C("attn.wq_a.weight", "self_attn.q_a_proj.weight"), 2, qlr, H, 0, &L->wq_a));
    PDB_TRY(load_t(st, l, C("attn.q_norm.weight", "self_attn.q_a_norm.weight"), 1, qlr, 0, 0, &L->q_norm));
    PDB_TRY(load_t(st, l, C("attn.wq_b.weight", "self_attn.q_b_proj.weight"), 2, nh * hd, qlr, 0, &L->wq_b));
    PDB_TRY(load_t(st, l, C("attn.wkv.weight", "self_attn.kv_proj.weight"), 2, hd, H, 0, &L->wkv));
    PDB_TRY(load_t(st, l, C("attn.kv_norm.weight", "attn.norm.weight", "self_attn.kv_norm.weight"), 1, hd, 0, 0, &L->kv_norm));
    PDB_TRY(load_t(st, l, C("attn.wo_a.weight", "self_attn.o_a_proj.weight"), 2, G * olr, nh * hd / G, 0, &L->wo_a));
    PDB_TRY(load_t(st, l, C("attn.wo_b.weight", "self_attn.o_b_proj.weight"), 2, H, G * olr, 0, &L->wo_b));
    PDB_TRY(load_t(st, l, C("attn.attn_sink", "self_attn.sinks"), 1, nh, 0, 0, &L->sink));
    if (L->rate) PDB_TRY(load_compressor(st, l, 0, L->rate, hd, L->attn == PDB_V4_ATTN_CSA ? 2 : 1, H, &L->comp));
    if (L->attn == PDB_V4_ATTN_CSA) {
        int64_t nih = c->index_n_heads, ihd = c->index_head_dim;
        PDB_TRY(load_compressor(st, l, 1, L->rate, ihd, 2, H, &L->icomp));
        PDB_TRY(load_t(st, l, C("attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"), 2, nih * ihd,
                       qlr, 0, &L->idx_wq_b));
        PDB_TRY(load_t(st, l, C("attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight",
                                "self_attn.compressor.indexer.weights_proj.weight"), 2, nih, H, 0, &L->idx_wproj));
    }
    PDB_TRY(load_t(st, l, C("ffn.gate.weight", "mlp.gate.weight"), 2, E, H, 0, &L->gate));
    if (L->hash) PDB_TRY(load_tid2eid(c, st, l, L));
    else PDB_TRY(load_t(st, l, C("ffn.gate.bias", "mlp.gate.e_score_correction_bias"), 1, E, 0, 0, &L->gate_bias));
    PDB_TRY(load_experts(c, st, l, L));
    if (c->n_shared_experts) {
        PDB_TRY(load_t(st, l, C("ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"), 2, I, H, 0, &L->sh_w1));
        PDB_TRY(load_t(st, l, C("ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"), 2, I, H, 0, &L->sh_w3));
        PDB_TRY(load_t(st, l, C("ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"), 2, H, I, 0, &L->sh_w2));
    }
    return PDB_OK;
}

pdb_status pdb_v4_load_from(const pdb_config *cfg, const pdb_st *st, pdb_v4_model **out) {
    *out = NULL;
    if (cfg->arch != PDB_ARCH_DEEPSEEK_V4)
        return pdb_err_set(PDB_MISMATCH, "pdb_v4_load: config is not deepseek_v4 (model_type '%s')", cfg->model_type);
    pdb_v4_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "v4 model: out of memory");
    m->cfg = *cfg;
    const pdb_config *c = &m->cfg;
    int64_t V = c->vocab_size, H = c->hidden_size, hc = c->hc_mult;
    pdb_status s;
    if ((s = pdb_rope_init(&m->rope_main, &c->rope, c->qk_rope_head_dim))) goto fail;
    if ((s = pdb_rope_init(&m->rope_compress, &c->rope_compress, c->qk_rope_head_dim))) goto fail;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) { s = pdb_err_set(PDB_NOMEM, "v4 layers: out of memory"); goto fail; }
    if ((s = load_t(st, -1, C("embed.weight", "embed_tokens.weight"), 2, V, H, 0, &m->embed))) goto fail;
    if ((s = load_t(st, -1, C("norm.weight"), 1, H, 0, 0, &m->norm))) goto fail;
    char buf[NAME_MAX_LEN];
    if (c->tie_word_embeddings && !resolve(st, -1, C("head.weight", "lm_head.weight"), buf)) m->head = m->embed;
    else if ((s = load_t(st, -1, C("head.weight", "lm_head.weight"), 2, V, H, 0, &m->head))) goto fail;
    if ((s = load_t(st, -1, C("hc_head_fn", "hc_head.hc_fn"), 2, hc, hc * H, 0, &m->hc_head_fn))) goto fail;
    if ((s = load_t(st, -1, C("hc_head_base", "hc_head.hc_base"), 1, hc, 0, 0, &m->hc_head_base))) goto fail;
    if ((s = load_t(st, -1, C("hc_head_scale", "hc_head.hc_scale"), 1, 1, 0, 0, &m->hc_head_scale))) goto fail;
    for (int64_t l = 0; l < c->num_layers; l++)
        if ((s = load_layer(m, st, l, &m->layers[l]))) goto fail;
    *out = m;
    return PDB_OK;
fail:
    pdb_v4_free(m);
    return s;
}

pdb_status pdb_v4_load(const char *dir, pdb_v4_model **out) {
    pdb_config cfg;
    PDB_TRY(pdb_config_load(dir, &cfg));
    pdb_st *st = NULL;
    PDB_TRY(pdb_st_open(dir, &st));
    pdb_status s = pdb_v4_load_from(&cfg, st, out);
    pdb_st_close(st);
    return s;
}

static void free_comp(pdb_v4_compressor *cp) {
    free(cp->wkv);
    free(cp->wgate);
    free(cp->ape);
    free(cp->norm);
}

void pdb_v4_free(pdb_v4_model *m) {
    if (!m) return;
    if (m->layers)
        for (int64_t l = 0; l < m->cfg.num_layers; l++) {
            pdb_v4_layer *L = &m->layers[l];
            float *f[] = {L->attn_norm, L->ffn_norm, L->hc_attn_fn, L->hc_ffn_fn, L->hc_attn_base, L->hc_ffn_base,
                          L->hc_attn_scale, L->hc_ffn_scale, L->wq_a, L->q_norm, L->wq_b, L->wkv, L->kv_norm, L->wo_a,
                          L->wo_b, L->sink, L->idx_wq_b, L->idx_wproj, L->gate, L->gate_bias, L->w1, L->w3, L->w2,
                          L->sh_w1, L->sh_w3, L->sh_w2};
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
            free(L->tid2eid);
            free_comp(&L->comp);
            free_comp(&L->icomp);
        }
    free(m->layers);
    if (m->head != m->embed) free(m->head);
    free(m->embed);
    free(m->norm);
    free(m->hc_head_fn);
    free(m->hc_head_base);
    free(m->hc_head_scale);
    pdb_rope_free(&m->rope_main);
    pdb_rope_free(&m->rope_compress);
    free(m);
}
