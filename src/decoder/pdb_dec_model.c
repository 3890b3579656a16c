/* pdb_dec_model: the decoder checkpoint's identity (pdbridge_decoder.json, weights digest,
 * fingerprint), and the dispatch to the architecture's ops (pdb_dec_arch.h): open, layout,
 * sequences, block copies, the batched forward (argument checks and `len` bookkeeping here). */
#include "pdb_dec_model.h"

#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_arch.h"

struct pdb_dec_model {
    const pdb_dec_arch *arch;
    const pdb_arch_def *def;
    void *impl;
    pdb_config cfg;
    pdb_st *st;
    pdb_pool *pool;
    char scheme[32];
    const char *semantics;
    int sem; /* the semantics' index in the registry */
    uint8_t fingerprint[32];
    pdb_arch_layout layout;
};

/* The decode engines, one per architecture of the registry (matched by name). */
static const pdb_dec_arch *const ENGINES[] = {&pdb_dec_arch_v2, &pdb_dec_arch_v4};

static pdb_status engine_of(const pdb_config *cfg, const pdb_arch_def **def, const pdb_dec_arch **out) {
    PDB_TRY(pdb_arch_of(cfg, def));
    for (size_t i = 0; i < sizeof ENGINES / sizeof ENGINES[0]; i++)
        if (!strcmp(ENGINES[i]->name, (*def)->name)) { *out = ENGINES[i]; return PDB_OK; }
    return pdb_err_set(PDB_UNSUPPORTED, "decoder: no decode engine for architecture '%s'", (*def)->name);
}

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

pdb_status pdb_dec_fingerprint(const pdb_config *cfg, const char *scheme, const char *semantics, const uint8_t digest[32],
                               uint8_t out[32]) {
    char *json = NULL;
    PDB_TRY(pdb_config_to_json(cfg, &json));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) { free(json); return pdb_err_set(PDB_NOMEM, "fingerprint"); }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    const char *tag = "pdbridge-decoder-v1";
    EVP_DigestUpdate(ctx, tag, strlen(tag) + 1);
    EVP_DigestUpdate(ctx, json, strlen(json) + 1);
    EVP_DigestUpdate(ctx, scheme, strlen(scheme) + 1);
    EVP_DigestUpdate(ctx, semantics, strlen(semantics) + 1);
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
pdb_status pdb_dec_model_semantics_of(const char *dir, const pdb_config *cfg, int *sem) {
    const pdb_arch_def *a;
    *sem = 0;
    PDB_TRY(pdb_arch_of(cfg, &a));
    if (!a->semantics_key) return PDB_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s/pdbridge_decoder.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    if (!j) return PDB_OK;
    json_t *v = json_object_get(j, a->semantics_key);
    pdb_status s = PDB_OK;
    if (v && (!json_is_string(v) || pdb_arch_semantics_parse(a, json_string_value(v), sem))) {
        char names[256];
        size_t k = 0;
        for (int i = 0; i < a->n_semantics && k < sizeof names; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s\"%s\"", i ? " or " : "", a->semantics[i].name);
        s = pdb_err_set(PDB_INVALID, "%s: '%s' must be %s", path, a->semantics_key, names);
    }
    json_decref(j);
    return s;
}

pdb_status pdb_dec_model_identity(const char *dir, const pdb_config *cfg, const pdb_st *st, char scheme_out[32],
                                  uint8_t fingerprint[32]) {
    int sem = 0;
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(cfg, &a));
    PDB_TRY(pdb_dec_model_semantics_of(dir, cfg, &sem));
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
    return pdb_dec_fingerprint(cfg, scheme_out, pdb_arch_semantics_fingerprint(a, sem), digest, fingerprint);
}

pdb_status pdb_dec_model_open(const char *dir, pdb_pool *pool, pdb_dec_model **out) {
    return pdb_dec_model_open_flags(dir, pool, PDB_DEC_WEIGHTS_DEFAULT, out);
}

pdb_status pdb_dec_model_open_flags(const char *dir, pdb_pool *pool, int st_flags, pdb_dec_model **out) {
    pdb_dec_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "decoder model");
    m->pool = pool;
    int sem = 0;
    pdb_status s = pdb_config_load(dir, &m->cfg);
    if (!s) s = engine_of(&m->cfg, &m->def, &m->arch);
    if (!s) s = pdb_dec_model_semantics_of(dir, &m->cfg, &sem);
    if (!s) s = pdb_st_open_flags(dir, st_flags, &m->st);
    if (!s) s = m->arch->open(&m->cfg, m->st, pool, sem, &m->impl);
    if (!s) s = pdb_dec_model_identity(dir, &m->cfg, m->st, m->scheme, m->fingerprint);
    if (!s) s = m->def->layout(&m->cfg, sem, &m->layout);
    m->sem = sem;
    if (s) {
        pdb_dec_model_close(m);
        return pdb_err_wrap(s, "decoder model %s", dir);
    }
    m->semantics = pdb_arch_semantics_fingerprint(m->def, sem);
    *out = m;
    return PDB_OK;
}

void pdb_dec_model_close(pdb_dec_model *m) {
    if (!m) return;
    if (m->impl) m->arch->close(m->impl);
    pdb_st_close(m->st);
    free(m);
}

const pdb_config *pdb_dec_model_config(const pdb_dec_model *m) { return &m->cfg; }
const uint8_t *pdb_dec_model_fingerprint(const pdb_dec_model *m) { return m->fingerprint; }
const char *pdb_dec_model_scheme(const pdb_dec_model *m) { return m->scheme; }
const char *pdb_dec_model_semantics(const pdb_dec_model *m) { return m->semantics; }
int pdb_dec_model_semantics_index(const pdb_dec_model *m) { return m->sem; }
const void *pdb_dec_model_weights(const pdb_dec_model *m, const char *arch) {
    return m->arch->weights && !strcmp(m->arch->name, arch) ? m->arch->weights(m->impl) : NULL;
}
const pdb_store_layout *pdb_dec_model_layout(const pdb_dec_model *m) { return &m->layout.layout; }

pdb_status pdb_dec_seq_init(pdb_dec_seq *s, const pdb_dec_model *m, int64_t cap) {
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->model = m;
    return m->arch->seq_init(m->impl, s, cap);
}

void pdb_dec_seq_free(pdb_dec_seq *s) {
    if (s->model) s->model->arch->seq_free(s);
}

pdb_status pdb_dec_seq_copy(pdb_dec_seq *dst, const pdb_dec_seq *src) {
    const pdb_dec_model *m = src->model;
    if (!m->arch->seq_copy) return pdb_err_set(PDB_UNSUPPORTED, "the %s decode engine cannot copy a sequence", m->arch->name);
    if (dst->model != m || dst->cap < src->len)
        return pdb_err_set(PDB_INVALID, "sequence copy: destination of %lld positions for %lld", (long long)dst->cap, (long long)src->len);
    m->arch->seq_copy(m->impl, dst, src);
    dst->len = src->len;
    return PDB_OK;
}

void pdb_dec_seq_get_block(const pdb_dec_seq *s, int64_t b, int64_t bs, void *buf) {
    s->model->arch->get_block(s->model->impl, s, b, bs, buf);
}

void pdb_dec_seq_put_block(pdb_dec_seq *s, int64_t b, int64_t bs, const void *buf) {
    s->model->arch->put_block(s->model->impl, s, b, bs, buf);
}

pdb_status pdb_dec_model_native_blocks(pdb_dec_model *m, const int32_t *ids, int64_t nb, int64_t bs, void *out) {
    pdb_dec_seq s;
    PDB_TRY(pdb_dec_seq_init(&s, m, nb * bs));
    uint64_t bytes = pdb_store_layout_block_bytes(pdb_dec_model_layout(m), bs);
    pdb_status st = PDB_OK;
    for (int64_t b = 0; b < nb && !st; b++) {
        pdb_dec_seg sg = {&s, ids + b * bs, bs, NULL};
        st = pdb_dec_forward(m, &sg, 1);
        if (!st) pdb_dec_seq_get_block(&s, b, bs, (char *)out + (uint64_t)b * bytes);
    }
    pdb_dec_seq_free(&s);
    return st;
}

/* ======================================= forward ============================================ */

pdb_status pdb_dec_forward(pdb_dec_model *m, pdb_dec_seg *segs, int n_segs) {
    const pdb_config *c = &m->cfg;
    int64_t R = 0;
    for (int i = 0; i < n_segs; i++) {
        pdb_dec_seg *sg = &segs[i];
        if (sg->n <= 0) return pdb_err_set(PDB_INVALID, "decoder forward: segment %d has no tokens", i);
        if (!sg->seq->model || sg->seq->model->arch != m->arch)
            return pdb_err_set(PDB_INVALID, "decoder forward: segment %d's sequence belongs to another architecture", i);
        if (sg->seq->len + sg->n > sg->seq->cap)
            return pdb_err_set(PDB_TOO_LARGE, "decoder forward: segment %d needs %lld positions, cache holds %lld", i,
                               (long long)(sg->seq->len + sg->n), (long long)sg->seq->cap);
        for (int64_t t = 0; t < sg->n; t++)
            if (sg->ids[t] < 0 || sg->ids[t] >= c->vocab_size)
                return pdb_err_set(PDB_INVALID, "decoder forward: token id %d outside the vocabulary (%lld)", sg->ids[t],
                                   (long long)c->vocab_size);
        R += sg->n;
    }
    if (R == 0) return PDB_OK;
    PDB_TRY(m->arch->forward(m->impl, segs, n_segs));
    for (int i = 0; i < n_segs; i++) segs[i].seq->len += segs[i].n;
    return PDB_OK;
}
