/* pdb_dec_model: the decoder checkpoint (weights through pdb_v2_ops, identity from
 * pdbridge_decoder.json), the fingerprint, sequences, and the batched forward loop: embed,
 * then per layer attention norm -> attention (writes the cache rows) -> FFN, then logits. */
#include "pdb_dec_model.h"

#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_v2_ops.h"

struct pdb_dec_model {
    pdb_st *st;
    pdb_pool *pool;
    pdb_v2_qweights w;
    char scheme[32];
    uint8_t fingerprint[32];
    pdb_store_pool pool_desc;
    pdb_store_layout layout;
};

/* ======================================= loading ============================================ */

static int cmp_names(const void *a, const void *b) {
    return strcmp((*(const pdb_tensor_view *const *)a)->name, (*(const pdb_tensor_view *const *)b)->name);
}

pdb_status pdb_dec_weights_digest(const pdb_st *st, uint8_t out[32]) {
    int64_t n = pdb_st_count(st);
    const pdb_tensor_view **v = malloc(sizeof(*v) * (size_t)(n ? n : 1));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!v || !ctx) { free(v); EVP_MD_CTX_free(ctx); return pdb_err_set(PDB_NOMEM, "weights digest"); }
    for (int64_t i = 0; i < n; i++) v[i] = pdb_st_at(st, i);
    qsort(v, (size_t)n, sizeof(*v), cmp_names);
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int64_t i = 0; i < n; i++) {
        char hdr[512];
        int k = snprintf(hdr, sizeof hdr, "%s|%s|%d", v[i]->name, pdb_dtype_name(v[i]->dtype), v[i]->ndim);
        for (int d = 0; d < v[i]->ndim && k < 400; d++) k += snprintf(hdr + k, sizeof hdr - (size_t)k, ",%lld", (long long)v[i]->shape[d]);
        EVP_DigestUpdate(ctx, hdr, (size_t)k + 1);
        EVP_DigestUpdate(ctx, v[i]->data, v[i]->nbytes);
    }
    EVP_DigestFinal_ex(ctx, out, NULL);
    EVP_MD_CTX_free(ctx);
    free(v);
    return PDB_OK;
}

pdb_status pdb_dec_fingerprint(const pdb_config *cfg, const char *scheme, const uint8_t digest[32], uint8_t out[32]) {
    char *json = NULL;
    PDB_TRY(pdb_config_to_json(cfg, &json));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) { free(json); return pdb_err_set(PDB_NOMEM, "fingerprint"); }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    const char *tag = "pdbridge-decoder-v1";
    EVP_DigestUpdate(ctx, tag, strlen(tag) + 1);
    EVP_DigestUpdate(ctx, json, strlen(json) + 1);
    EVP_DigestUpdate(ctx, scheme, strlen(scheme) + 1);
    EVP_DigestUpdate(ctx, PDB_DEC_CACHE_SEMANTICS, strlen(PDB_DEC_CACHE_SEMANTICS) + 1);
    EVP_DigestUpdate(ctx, digest, 32);
    EVP_DigestFinal_ex(ctx, out, NULL);
    EVP_MD_CTX_free(ctx);
    free(json);
    return PDB_OK;
}

static pdb_status hex32(const char *hex, uint8_t out[32]) {
    if (!hex || strlen(hex) != 64) return PDB_CORRUPT;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return PDB_CORRUPT;
        out[i] = (uint8_t)v;
    }
    return PDB_OK;
}

/* Scheme and weights digest: from pdbridge_decoder.json (written by quantize) or, for a plain
 * HF directory, scheme "none" and a digest computed now. */
pdb_status pdb_dec_model_identity(const char *dir, const pdb_config *cfg, const pdb_st *st, char scheme_out[32],
                                  uint8_t fingerprint[32]) {
    char path[4096];
    snprintf(path, sizeof path, "%s/pdbridge_decoder.json", dir);
    uint8_t digest[32];
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (j) {
        const char *scheme = json_string_value(json_object_get(j, "scheme"));
        const char *dg = json_string_value(json_object_get(j, "weights_sha256"));
        pdb_status s = PDB_OK;
        if (!scheme || hex32(dg, digest)) s = pdb_err_set(PDB_CORRUPT, "%s: needs 'scheme' and a 64-hex 'weights_sha256'", path);
        else snprintf(scheme_out, 32, "%s", scheme);
        json_decref(j);
        PDB_TRY(s);
    } else {
        snprintf(scheme_out, 32, "none");
        PDB_TRY(pdb_dec_weights_digest(st, digest));
    }
    return pdb_dec_fingerprint(cfg, scheme_out, digest, fingerprint);
}

pdb_status pdb_dec_model_open(const char *dir, pdb_pool *pool, pdb_dec_model **out) {
    pdb_dec_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "decoder model");
    m->pool = pool;
    pdb_config cfg;
    pdb_status s = pdb_config_load(dir, &cfg);
    if (!s && cfg.arch != PDB_ARCH_DEEPSEEK_V2) s = pdb_err_set(PDB_UNSUPPORTED, "%s: decoder supports deepseek_v2", dir);
    if (!s) s = pdb_st_open(dir, &m->st);
    if (!s) s = pdb_v2_qweights_load(&m->w, &cfg, m->st, 0);
    if (!s) s = pdb_dec_model_identity(dir, &cfg, m->st, m->scheme, m->fingerprint);
    if (s) {
        pdb_dec_model_close(m);
        return pdb_err_wrap(s, "decoder model %s", dir);
    }
    m->pool_desc = (pdb_store_pool){.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = cfg.num_layers,
                                    .stride = 1, .width = cfg.kv_lora_rank + cfg.qk_rope_head_dim, .dtype = PDB_DT_F32};
    m->layout = (pdb_store_layout){.n_pools = 1, .pools = &m->pool_desc};
    *out = m;
    return PDB_OK;
}

void pdb_dec_model_close(pdb_dec_model *m) {
    if (!m) return;
    pdb_v2_qweights_free(&m->w);
    pdb_st_close(m->st);
    free(m);
}

const pdb_config *pdb_dec_model_config(const pdb_dec_model *m) { return &m->w.cfg; }
const uint8_t *pdb_dec_model_fingerprint(const pdb_dec_model *m) { return m->fingerprint; }
const char *pdb_dec_model_scheme(const pdb_dec_model *m) { return m->scheme; }
const struct pdb_v2_qweights *pdb_dec_model_weights(const pdb_dec_model *m) { return &m->w; }
const pdb_store_layout *pdb_dec_model_layout(const pdb_dec_model *m) { return &m->layout; }

pdb_status pdb_dec_seq_init(pdb_dec_seq *s, const pdb_dec_model *m, int64_t cap) {
    s->cap = cap;
    s->len = 0;
    s->row = m->w.cfg.kv_lora_rank + m->w.cfg.qk_rope_head_dim;
    s->n_layers = m->w.cfg.num_layers;
    s->lat = malloc(sizeof(float) * (size_t)(s->n_layers * cap * s->row));
    if (!s->lat) return pdb_err_set(PDB_NOMEM, "sequence cache for %lld positions", (long long)cap);
    return PDB_OK;
}

void pdb_dec_seq_free(pdb_dec_seq *s) {
    free(s->lat);
    s->lat = NULL;
}

void pdb_dec_seq_get_block(const pdb_dec_seq *s, int64_t b, int64_t bs, float *buf) {
    for (int64_t l = 0; l < s->n_layers; l++)
        memcpy(buf + l * bs * s->row, s->lat + (l * s->cap + b * bs) * s->row, sizeof(float) * (size_t)(bs * s->row));
}

void pdb_dec_seq_put_block(pdb_dec_seq *s, int64_t b, int64_t bs, const float *buf) {
    for (int64_t l = 0; l < s->n_layers; l++)
        memcpy(s->lat + (l * s->cap + b * bs) * s->row, buf + l * bs * s->row, sizeof(float) * (size_t)(bs * s->row));
}

/* ======================================= forward ============================================ */

pdb_status pdb_dec_forward(pdb_dec_model *m, pdb_dec_seg *segs, int n_segs) {
    const pdb_config *c = &m->w.cfg;
    int64_t R = 0, maxlen = 0;
    for (int i = 0; i < n_segs; i++) {
        pdb_dec_seg *sg = &segs[i];
        if (sg->n <= 0) return pdb_err_set(PDB_INVALID, "decoder forward: segment %d has no tokens", i);
        if (sg->seq->len + sg->n > sg->seq->cap)
            return pdb_err_set(PDB_TOO_LARGE, "decoder forward: segment %d needs %lld positions, cache holds %lld", i,
                               (long long)(sg->seq->len + sg->n), (long long)sg->seq->cap);
        for (int64_t t = 0; t < sg->n; t++)
            if (sg->ids[t] < 0 || sg->ids[t] >= c->vocab_size)
                return pdb_err_set(PDB_INVALID, "decoder forward: token id %d outside the vocabulary (%lld)", sg->ids[t],
                                   (long long)c->vocab_size);
        R += sg->n;
        if (sg->seq->len + sg->n > maxlen) maxlen = sg->seq->len + sg->n;
    }
    if (R == 0) return PDB_OK;
    pdb_v2_batch b;
    PDB_TRY(pdb_v2_batch_init(&b, &m->w, m->pool, R, maxlen));
    int64_t r = 0;
    for (int i = 0; i < n_segs; i++) {
        pdb_dec_seq *s = segs[i].seq;
        for (int64_t t = 0; t < segs[i].n; t++, r++) {
            b.cache[r] = (pdb_v2_rowcache){s->lat, s->cap * s->row, s->row, 0};
            b.pos[r] = s->len + t;
            pdb_v2_ops_embed(&b, r, segs[i].ids[t]);
        }
    }
    for (int64_t l = 0; l < c->num_layers; l++) {
        pdb_v2_ops_attn_norm(&b, l);
        pdb_v2_ops_attention(&b, l);
        pdb_v2_ops_ffn(&b, l);
    }
    r = 0;
    for (int i = 0; i < n_segs; i++) {
        r += segs[i].n;
        segs[i].seq->len += segs[i].n;
        if (segs[i].logits) pdb_v2_ops_logits(&b, r - 1, segs[i].logits);
    }
    pdb_v2_batch_free(&b);
    return PDB_OK;
}
