/* pdb_dec_model: loading the decoder checkpoint into pdb_qmat views over the mmap'd file, the
 * fingerprint, and the batched forward (absorbed MLA over f32 latent rows, dense/MoE MLP).
 * Reading order: load -> forward -> attention -> moe. Every dot product goes through
 * pdb_qmat_dot / pdb_qmat_matmul so results never depend on batch shape (header invariant 2). */
#include "pdb_dec_model.h"

#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_math.h"
#include "pdb_rope.h"
#include "pdb_v2.h"

typedef struct dec_layer {
    float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* f32 [H], [H], [qlr], [kvl] */
    pdb_qmat q_proj, q_a, q_b, kv_a, o_proj;
    float *w_uk_t;   /* [nh, kvl, nope] f32: W_UK transposed per head */
    float *w_uv;     /* [nh * vd, kvl] f32 */
    int is_moe;
    pdb_qmat gate, up, down;     /* dense */
    pdb_qmat router;             /* [E, H] */
    pdb_qmat *eg, *eu, *ed;      /* [E] each */
    pdb_qmat sg, su, sd;         /* shared experts */
} dec_layer;

struct pdb_dec_model {
    pdb_config cfg;
    pdb_st *st;
    pdb_pool *pool;
    pdb_rope rope;
    float softmax_scale;
    char scheme[32];
    uint8_t fingerprint[32];
    pdb_qmat embed, lm_head;
    float *final_norm;
    dec_layer *layers;
    pdb_store_pool pool_desc;
    pdb_store_layout layout;
    float *rowbuf;       /* matmul scratch [threads, max_cols] */
    float **owned;       /* f32 buffers this model allocated */
    int n_owned, cap_owned;
};

/* ======================================= loading ============================================ */

static pdb_status own(pdb_dec_model *m, float *p) {
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? m->cap_owned * 2 : 64;
        float **n = realloc(m->owned, sizeof(*n) * (size_t)nc);
        if (!n) { free(p); return pdb_err_set(PDB_NOMEM, "decoder model"); }
        m->owned = n;
        m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = p;
    return PDB_OK;
}

/* A linear weight [rows, cols] as a qmat: BF16/F32 views, MX with "<name>_mx_scale", or DeepSeek
 * block-scaled FP8 dequantized to an owned f32 copy. */
static pdb_status load_qmat(pdb_dec_model *m, pdb_qmat *q, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static pdb_status load_qmat(pdb_dec_model *m, pdb_qmat *q, int64_t rows, int64_t cols, const char *fmt, ...) {
    char name[256], sname[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const pdb_tensor_view *v = pdb_st_find(m->st, name);
    if (!v) return pdb_err_set(PDB_NOT_FOUND, "decoder checkpoint: missing tensor '%s'", name);
    snprintf(sname, sizeof sname, "%s_mx_scale", name);
    const pdb_tensor_view *sc = pdb_st_find(m->st, sname);
    q->rows = rows;
    q->cols = cols;
    q->scales = NULL;
    if (sc) {
        int mx4 = v->dtype == PDB_DT_U8;
        if ((v->dtype != PDB_DT_U8 && v->dtype != PDB_DT_F8_E4M3) || v->ndim != 2 || v->shape[0] != rows ||
            v->shape[1] != (mx4 ? cols / 2 : cols) || cols % 32 || sc->ndim != 2 || sc->shape[0] != rows ||
            sc->shape[1] != cols / 32 || (sc->dtype != PDB_DT_F8_E8M0 && sc->dtype != PDB_DT_U8))
            return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s' is not an MX weight of shape [%lld, %lld]", v->file, name,
                               (long long)rows, (long long)cols);
        q->fmt = mx4 ? PDB_QF_MXFP4 : PDB_QF_MXFP8;
        q->data = v->data;
        q->scales = sc->data;
        return PDB_OK;
    }
    int64_t shape[2] = {rows, cols};
    if (v->dtype == PDB_DT_BF16 || v->dtype == PDB_DT_F32) {
        PDB_TRY(pdb_st_get(m->st, name, 2, shape, &v));
        q->fmt = v->dtype == PDB_DT_BF16 ? PDB_QF_BF16 : PDB_QF_F32;
        q->data = v->data;
        if (q->fmt == PDB_QF_F32 && ((uintptr_t)v->data & 3)) { /* unaligned f32: copy */
            float *c = malloc(sizeof(float) * (size_t)(rows * cols));
            if (!c) return pdb_err_set(PDB_NOMEM, "tensor %s", name);
            memcpy(c, v->data, sizeof(float) * (size_t)(rows * cols));
            PDB_TRY(own(m, c));
            q->data = c;
        }
        return PDB_OK;
    }
    float *f = NULL;
    PDB_TRY(pdb_st_load_f32(m->st, name, 2, shape, &f));
    PDB_TRY(own(m, f));
    q->fmt = PDB_QF_F32;
    q->data = f;
    return PDB_OK;
}

static pdb_status load_vec(pdb_dec_model *m, float **out, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pdb_status load_vec(pdb_dec_model *m, float **out, int64_t n, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    PDB_TRY(pdb_st_load_f32(m->st, name, 1, &n, out));
    return own(m, *out);
}

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
static pdb_status load_identity(pdb_dec_model *m, const char *dir) {
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
        else snprintf(m->scheme, sizeof m->scheme, "%s", scheme);
        json_decref(j);
        PDB_TRY(s);
    } else {
        snprintf(m->scheme, sizeof m->scheme, "none");
        PDB_TRY(pdb_dec_weights_digest(m->st, digest));
    }
    return pdb_dec_fingerprint(&m->cfg, m->scheme, digest, m->fingerprint);
}

static pdb_status load_layer(pdb_dec_model *m, int l) {
    const pdb_config *c = &m->cfg;
    dec_layer *L = &m->layers[l];
    int64_t H = c->hidden_size, nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
    int64_t qk = nope + rope, vd = c->v_head_dim, kvl = c->kv_lora_rank;
    const char *p = "model.layers";
    PDB_TRY(load_vec(m, &L->attn_norm, H, "%s.%d.input_layernorm.weight", p, l));
    PDB_TRY(load_vec(m, &L->ffn_norm, H, "%s.%d.post_attention_layernorm.weight", p, l));
    if (c->q_lora_rank == 0) {
        PDB_TRY(load_qmat(m, &L->q_proj, nh * qk, H, "%s.%d.self_attn.q_proj.weight", p, l));
    } else {
        PDB_TRY(load_qmat(m, &L->q_a, c->q_lora_rank, H, "%s.%d.self_attn.q_a_proj.weight", p, l));
        PDB_TRY(load_vec(m, &L->q_a_norm, c->q_lora_rank, "%s.%d.self_attn.q_a_layernorm.weight", p, l));
        PDB_TRY(load_qmat(m, &L->q_b, nh * qk, c->q_lora_rank, "%s.%d.self_attn.q_b_proj.weight", p, l));
    }
    PDB_TRY(load_qmat(m, &L->kv_a, kvl + rope, H, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, l));
    PDB_TRY(load_vec(m, &L->kv_a_norm, kvl, "%s.%d.self_attn.kv_a_layernorm.weight", p, l));
    PDB_TRY(load_qmat(m, &L->o_proj, H, nh * vd, "%s.%d.self_attn.o_proj.weight", p, l));
    pdb_qmat kvb;
    PDB_TRY(load_qmat(m, &kvb, nh * (nope + vd), kvl, "%s.%d.self_attn.kv_b_proj.weight", p, l));
    L->w_uk_t = malloc(sizeof(float) * (size_t)(nh * kvl * nope));
    L->w_uv = malloc(sizeof(float) * (size_t)(nh * vd * kvl));
    float *row = malloc(sizeof(float) * (size_t)kvl);
    pdb_status s = PDB_OK;
    if (!L->w_uk_t || !L->w_uv || !row) s = pdb_err_set(PDB_NOMEM, "layer %d kv_b", l);
    if (!s) s = own(m, L->w_uk_t);
    else free(L->w_uk_t);
    if (!s) s = own(m, L->w_uv);
    else free(L->w_uv);
    for (int64_t h = 0; !s && h < nh; h++) {
        for (int64_t n = 0; n < nope; n++) {
            pdb_qmat_row_f32(&kvb, h * (nope + vd) + n, row);
            for (int64_t k = 0; k < kvl; k++) L->w_uk_t[(h * kvl + k) * nope + n] = row[k];
        }
        for (int64_t v = 0; v < vd; v++) pdb_qmat_row_f32(&kvb, h * (nope + vd) + nope + v, L->w_uv + (h * vd + v) * kvl);
    }
    free(row);
    PDB_TRY(s);
    L->is_moe = pdb_config_layer_is_moe(c, l);
    if (!L->is_moe) {
        int64_t I = c->intermediate_size;
        PDB_TRY(load_qmat(m, &L->gate, I, H, "%s.%d.mlp.gate_proj.weight", p, l));
        PDB_TRY(load_qmat(m, &L->up, I, H, "%s.%d.mlp.up_proj.weight", p, l));
        return load_qmat(m, &L->down, H, I, "%s.%d.mlp.down_proj.weight", p, l);
    }
    int64_t E = c->n_routed_experts, Im = c->moe_intermediate_size;
    char fused[256];
    snprintf(fused, sizeof fused, "%s.%d.mlp.experts.gate_up_proj", p, l);
    if (pdb_st_find(m->st, fused))
        return pdb_err_set(PDB_UNSUPPORTED, "decoder checkpoint: fused expert tensor '%s': run `pdbridge quantize` "
                           "on a checkpoint with per-expert tensors", fused);
    PDB_TRY(load_qmat(m, &L->router, E, H, "%s.%d.mlp.gate.weight", p, l));
    L->eg = calloc((size_t)E * 3, sizeof(pdb_qmat));
    if (!L->eg) return pdb_err_set(PDB_NOMEM, "layer %d experts", l);
    L->eu = L->eg + E;
    L->ed = L->eg + 2 * E;
    for (int64_t e = 0; e < E; e++) {
        PDB_TRY(load_qmat(m, &L->eg[e], Im, H, "%s.%d.mlp.experts.%lld.gate_proj.weight", p, l, (long long)e));
        PDB_TRY(load_qmat(m, &L->eu[e], Im, H, "%s.%d.mlp.experts.%lld.up_proj.weight", p, l, (long long)e));
        PDB_TRY(load_qmat(m, &L->ed[e], H, Im, "%s.%d.mlp.experts.%lld.down_proj.weight", p, l, (long long)e));
    }
    if (c->n_shared_experts > 0) {
        int64_t Is = Im * c->n_shared_experts;
        PDB_TRY(load_qmat(m, &L->sg, Is, H, "%s.%d.mlp.shared_experts.gate_proj.weight", p, l));
        PDB_TRY(load_qmat(m, &L->su, Is, H, "%s.%d.mlp.shared_experts.up_proj.weight", p, l));
        PDB_TRY(load_qmat(m, &L->sd, H, Is, "%s.%d.mlp.shared_experts.down_proj.weight", p, l));
    }
    return PDB_OK;
}

pdb_status pdb_dec_model_open(const char *dir, pdb_pool *pool, pdb_dec_model **out) {
    pdb_dec_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "decoder model");
    m->pool = pool;
    pdb_status s = pdb_config_load(dir, &m->cfg);
    const pdb_config *c = &m->cfg;
    if (!s && c->arch != PDB_ARCH_DEEPSEEK_V2) s = pdb_err_set(PDB_UNSUPPORTED, "%s: decoder supports deepseek_v2", dir);
    if (!s && (c->n_routed_experts > 1024 || c->n_group > 256))
        s = pdb_err_set(PDB_UNSUPPORTED, "%s: more than 1024 experts or 256 groups", dir);
    if (!s) s = pdb_st_open(dir, &m->st);
    if (!s) s = load_identity(m, dir);
    if (!s) s = pdb_rope_init(&m->rope, &c->rope, c->qk_rope_head_dim);
    if (s) goto fail;
    m->softmax_scale = (float)pdb_config_softmax_scale(c);
    int64_t H = c->hidden_size, V = c->vocab_size;
    if ((s = load_qmat(m, &m->embed, V, H, "model.embed_tokens.weight"))) goto fail;
    if ((s = load_vec(m, &m->final_norm, H, "model.norm.weight"))) goto fail;
    if (c->tie_word_embeddings && !pdb_st_find(m->st, "lm_head.weight")) m->lm_head = m->embed;
    else if ((s = load_qmat(m, &m->lm_head, V, H, "lm_head.weight"))) goto fail;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) { s = pdb_err_set(PDB_NOMEM, "layers"); goto fail; }
    for (int l = 0; l < c->num_layers; l++)
        if ((s = load_layer(m, l))) goto fail;
    int64_t maxc = H;
    int64_t cand[] = {c->q_lora_rank, c->num_heads * c->v_head_dim, c->intermediate_size,
                      c->moe_intermediate_size * (c->n_shared_experts > 1 ? c->n_shared_experts : 1)};
    for (size_t i = 0; i < 4; i++) maxc = cand[i] > maxc ? cand[i] : maxc;
    int nth = pool ? pdb_pool_threads(pool) : 1;
    m->rowbuf = malloc(sizeof(float) * (size_t)(nth * maxc));
    if (!m->rowbuf) { s = pdb_err_set(PDB_NOMEM, "matmul scratch"); goto fail; }
    m->pool_desc = (pdb_store_pool){.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = c->num_layers,
                                    .stride = 1, .width = c->kv_lora_rank + c->qk_rope_head_dim, .dtype = PDB_DT_F32};
    m->layout = (pdb_store_layout){.n_pools = 1, .pools = &m->pool_desc};
    *out = m;
    return PDB_OK;
fail:
    pdb_dec_model_close(m);
    return s;
}

void pdb_dec_model_close(pdb_dec_model *m) {
    if (!m) return;
    if (m->layers)
        for (int64_t l = 0; l < m->cfg.num_layers; l++) free(m->layers[l].eg);
    free(m->layers);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->rowbuf);
    pdb_rope_free(&m->rope);
    pdb_st_close(m->st);
    free(m);
}

const pdb_config *pdb_dec_model_config(const pdb_dec_model *m) { return &m->cfg; }
const uint8_t *pdb_dec_model_fingerprint(const pdb_dec_model *m) { return m->fingerprint; }
const char *pdb_dec_model_scheme(const pdb_dec_model *m) { return m->scheme; }
const pdb_store_layout *pdb_dec_model_layout(const pdb_dec_model *m) { return &m->layout; }

pdb_status pdb_dec_seq_init(pdb_dec_seq *s, const pdb_dec_model *m, int64_t cap) {
    s->cap = cap;
    s->len = 0;
    s->row = m->cfg.kv_lora_rank + m->cfg.qk_rope_head_dim;
    s->n_layers = m->cfg.num_layers;
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

typedef struct {
    pdb_dec_model *m;
    int64_t R;                /* rows in the batch */
    pdb_dec_seq **rseq;       /* [R] sequence of each row */
    int64_t *rpos;            /* [R] position of each row */
    float *h, *xn, *q, *qa, *kva, *attn, *tmp, *mlp, *g, *u, *probs, *ybuf, *xe;
    int64_t *topk_idx;
    float *topk_w;
    int64_t *erows;           /* [R] rows routed to the current expert (slot r*K+k) */
    float *att_scratch;       /* [threads, max_len + 2*row] */
    int64_t att_stride;
    int64_t layer;
} dec_fwd;

/* One (row, head) attention task: q_lat = [W_UK^T q_nope | q_pe]; softmax over the rows at
 * positions <= pos; o_lat = sum_j p_j c_j (in j order); out = W_UV o_lat. */
static void dec_attn_task(void *vc, int64_t task, int thread) {
    dec_fwd *f = vc;
    const pdb_config *c = &f->m->cfg;
    const dec_layer *L = &f->m->layers[f->layer];
    int64_t nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, vd = c->v_head_dim;
    int64_t kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope;
    int64_t r = task / nh, h = task % nh, pos = f->rpos[r];
    pdb_dec_seq *s = f->rseq[r];
    const float *lat = s->lat + f->layer * s->cap * row;
    float *sc = f->att_scratch + (int64_t)thread * f->att_stride, *qlat = sc + pos + 1, *olat = qlat + row;
    const float *qh = f->q + r * nh * qk + h * qk;
    for (int64_t k = 0; k < kvl; k++) qlat[k] = pdb_qmat_dot(qh, L->w_uk_t + (h * kvl + k) * nope, nope);
    memcpy(qlat + kvl, qh + nope, sizeof(float) * (size_t)rope);
    for (int64_t j = 0; j <= pos; j++) sc[j] = pdb_qmat_dot(qlat, lat + j * row, row) * f->m->softmax_scale;
    pdb_math_softmax(sc, pos + 1);
    memset(olat, 0, sizeof(float) * (size_t)kvl);
    for (int64_t j = 0; j <= pos; j++) pdb_qmat_axpy(olat, sc[j], lat + j * row, kvl);
    float *out = f->attn + r * nh * vd + h * vd;
    for (int64_t v = 0; v < vd; v++) out[v] = pdb_qmat_dot(olat, L->w_uv + (h * vd + v) * kvl, kvl);
}

static void dec_attention(dec_fwd *f, const dec_layer *L) {
    pdb_dec_model *m = f->m;
    const pdb_config *c = &m->cfg;
    int64_t R = f->R, H = c->hidden_size, nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
    int64_t qk = nope + rope, kvl = c->kv_lora_rank, row = kvl + rope;
    if (c->q_lora_rank == 0) {
        pdb_qmat_matmul(m->pool, &L->q_proj, f->xn, H, R, f->q, nh * qk, m->rowbuf);
    } else {
        int64_t r = c->q_lora_rank;
        pdb_qmat_matmul(m->pool, &L->q_a, f->xn, H, R, f->qa, r, m->rowbuf);
        for (int64_t t = 0; t < R; t++) pdb_math_rmsnorm(f->qa + t * r, f->qa + t * r, L->q_a_norm, r, c->rms_norm_eps);
        pdb_qmat_matmul(m->pool, &L->q_b, f->qa, r, R, f->q, nh * qk, m->rowbuf);
    }
    pdb_qmat_matmul(m->pool, &L->kv_a, f->xn, H, R, f->kva, row, m->rowbuf);
    for (int64_t t = 0; t < R; t++) { /* the decoder's cache row: [RMSNorm(c_kv) | RoPE(k_pe)] */
        pdb_dec_seq *s = f->rseq[t];
        float *dst = s->lat + (f->layer * s->cap + f->rpos[t]) * row;
        pdb_math_rmsnorm(dst, f->kva + t * row, L->kv_a_norm, kvl, c->rms_norm_eps);
        memcpy(dst + kvl, f->kva + t * row + kvl, sizeof(float) * (size_t)rope);
        pdb_rope_apply(&m->rope, dst + kvl, f->rpos[t]);
        for (int64_t h = 0; h < nh; h++) pdb_rope_apply(&m->rope, f->q + t * nh * qk + h * qk + nope, f->rpos[t]);
    }
    if (m->pool) pdb_pool_run(m->pool, R * nh, dec_attn_task, f);
    else
        for (int64_t i = 0; i < R * nh; i++) dec_attn_task(f, i, 0);
    pdb_qmat_matmul(m->pool, &L->o_proj, f->attn, nh * c->v_head_dim, R, f->tmp, H, m->rowbuf);
    for (int64_t i = 0; i < R * H; i++) f->h[i] += f->tmp[i];
}

/* out [n, H] = down(silu(x gate^T) * (x up^T)) */
static void dec_mlp(dec_fwd *f, const pdb_qmat *gate, const pdb_qmat *up, const pdb_qmat *down, const float *x,
                    int64_t n, float *out) {
    pdb_dec_model *m = f->m;
    int64_t H = m->cfg.hidden_size, I = gate->rows;
    pdb_qmat_matmul(m->pool, gate, x, H, n, f->g, I, m->rowbuf);
    pdb_qmat_matmul(m->pool, up, x, H, n, f->u, I, m->rowbuf);
    pdb_math_silu_mul(f->g, f->g, f->u, n * I);
    pdb_qmat_matmul(m->pool, down, f->g, I, n, out, H, m->rowbuf);
}

static void dec_moe(dec_fwd *f, const dec_layer *L) {
    const pdb_config *c = &f->m->cfg;
    int64_t R = f->R, H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    pdb_qmat_matmul(f->m->pool, &L->router, f->xn, H, R, f->probs, E, f->m->rowbuf);
    for (int64_t t = 0; t < R; t++) pdb_v2_route(c, f->probs + t * E, f->topk_idx + t * K, f->topk_w + t * K);
    for (int64_t e = 0; e < E; e++) { /* expert e on the rows routed to it; outputs to slot r*K+k */
        int64_t n = 0;
        for (int64_t s = 0; s < R * K; s++)
            if (f->topk_idx[s] == e) {
                f->erows[n] = s;
                memcpy(f->xe + n * H, f->xn + (s / K) * H, sizeof(float) * (size_t)H);
                n++;
            }
        if (!n) continue;
        dec_mlp(f, &L->eg[e], &L->eu[e], &L->ed[e], f->xe, n, f->tmp);
        for (int64_t i = 0; i < n; i++) memcpy(f->ybuf + f->erows[i] * H, f->tmp + i * H, sizeof(float) * (size_t)H);
    }
    for (int64_t t = 0; t < R; t++) /* combine in top-k order: a fixed order per token */
        for (int64_t j = 0; j < H; j++) {
            float acc = 0;
            for (int64_t k = 0; k < K; k++) acc = acc + f->ybuf[(t * K + k) * H + j] * f->topk_w[t * K + k];
            f->mlp[t * H + j] = acc;
        }
    if (c->n_shared_experts > 0) {
        dec_mlp(f, &L->sg, &L->su, &L->sd, f->xn, R, f->tmp);
        for (int64_t i = 0; i < R * H; i++) f->mlp[i] = f->mlp[i] + f->tmp[i];
    }
}

static void fwd_free(dec_fwd *f) {
    void *ps[] = {f->rseq, f->rpos, f->h, f->xn, f->q, f->qa, f->kva, f->attn, f->tmp, f->mlp, f->g, f->u, f->probs,
                  f->ybuf, f->xe, f->topk_idx, f->topk_w, f->erows, f->att_scratch};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

pdb_status pdb_dec_forward(pdb_dec_model *m, pdb_dec_seg *segs, int n_segs) {
    const pdb_config *c = &m->cfg;
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
    int64_t H = c->hidden_size, nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    int64_t row = c->kv_lora_rank + c->qk_rope_head_dim, E = c->n_routed_experts, K = c->num_experts_per_tok;
    int64_t I = c->intermediate_size, Is = c->moe_intermediate_size * (c->n_shared_experts > 1 ? c->n_shared_experts : 1);
    if (Is > I) I = Is;
    if (c->moe_intermediate_size > I) I = c->moe_intermediate_size;
    int nth = m->pool ? pdb_pool_threads(m->pool) : 1;
    dec_fwd f = {.m = m, .R = R};
    f.att_stride = maxlen + 2 * row;
#define FA(p, n) if (!((p) = malloc(sizeof(*(p)) * (size_t)((n) > 0 ? (n) : 1)))) goto nomem
    FA(f.rseq, R); FA(f.rpos, R); FA(f.h, R * H); FA(f.xn, R * H); FA(f.q, R * nh * qk);
    FA(f.qa, R * (c->q_lora_rank ? c->q_lora_rank : 1)); FA(f.kva, R * row); FA(f.attn, R * nh * c->v_head_dim);
    FA(f.tmp, R * H); FA(f.mlp, R * H); FA(f.g, R * I); FA(f.u, R * I); FA(f.probs, R * E);
    FA(f.ybuf, R * K * H); FA(f.xe, R * H); FA(f.topk_idx, R * K); FA(f.topk_w, R * K); FA(f.erows, R * K);
    FA(f.att_scratch, nth * f.att_stride);
#undef FA
    int64_t r = 0;
    for (int i = 0; i < n_segs; i++)
        for (int64_t t = 0; t < segs[i].n; t++, r++) {
            f.rseq[r] = segs[i].seq;
            f.rpos[r] = segs[i].seq->len + t;
            pdb_qmat_row_f32(&m->embed, segs[i].ids[t], f.h + r * H);
        }
    for (f.layer = 0; f.layer < c->num_layers; f.layer++) {
        const dec_layer *L = &m->layers[f.layer];
        for (int64_t t = 0; t < R; t++) pdb_math_rmsnorm(f.xn + t * H, f.h + t * H, L->attn_norm, H, c->rms_norm_eps);
        dec_attention(&f, L);
        for (int64_t t = 0; t < R; t++) pdb_math_rmsnorm(f.xn + t * H, f.h + t * H, L->ffn_norm, H, c->rms_norm_eps);
        if (L->is_moe) dec_moe(&f, L);
        else dec_mlp(&f, &L->gate, &L->up, &L->down, f.xn, R, f.mlp);
        for (int64_t i = 0; i < R * H; i++) f.h[i] += f.mlp[i];
    }
    r = 0;
    for (int i = 0; i < n_segs; i++) {
        r += segs[i].n;
        segs[i].seq->len += segs[i].n;
        if (!segs[i].logits) continue;
        pdb_math_rmsnorm(f.xn, f.h + (r - 1) * H, m->final_norm, H, c->rms_norm_eps);
        pdb_qmat_matmul(m->pool, &m->lm_head, f.xn, H, 1, segs[i].logits, c->vocab_size, m->rowbuf);
    }
    fwd_free(&f);
    return PDB_OK;
nomem:
    fwd_free(&f);
    return pdb_err_set(PDB_NOMEM, "decoder forward scratch for %lld rows", (long long)R);
}
