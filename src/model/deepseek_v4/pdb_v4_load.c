/* pdb_v4_load: DeepSeek-V4 checkpoints -> pdb_v4_model, weights as stored. Tensor names (the table of
 * pdb_v4_names, tried in its order): DeepSeek's own
 * (layers.N.attn.wkv.weight, ffn.experts.E.w1.weight, hc_attn_fn, attn_sink, ...) with or without
 * the "model." prefix that transformers 5.17 save_pretrained writes (it also writes the main
 * kv_norm as attn.norm.weight and keeps model.embed_tokens.weight / head.weight), and the
 * transformers module names (self_attn.kv_proj, mlp.experts.gate_up_proj fused, ...). Every
 * weight matrix is a pdb_qmat over the checkpoint's bytes (pdb_qmat_st_load, the V2 decoder's
 * loader too): bf16 and f32 in place, the MX weights `pdbridge quantize --scheme mx` writes
 * ("NAME" + "NAME_mx_scale") and DeepSeek's FP4 experts in place, DeepSeek's FP8 with 128x128
 * e8m0 block scales as MXFP8 (codes in place, scales repeated per 32: lossless, 1/32 more
 * bytes), other dtypes as an f32 copy. Fused expert tensors ([E, 2I, H] / [E, H, I]) are one
 * qmat each, every expert a row view of it. Norms, biases, sinks, ape and the hyper-connection
 * mixing are f32 copies, tid2eid i32.
 * Invariant: every tensor is found under one of its names and has exactly the shape the config
 * implies, or the load fails naming the tensor (first candidate) and the file.
 * Parts (pdb_v4_load_part): PDB_V4_PART_ALL loads every tensor (the forward's);
 * PDB_V4_PART_HOOK only what pdb_v4_cache_init and pdb_v4_cache_feed read (per layer wkv,
 * kv_norm, the compressor and the indexer's compressor; the layer kinds and the rope tables come
 * from the config), every other weight empty: the prefill engine's capture hook holds the
 * decoder's attention side, not its experts (issue 17 item 4). The same tensors are loaded the
 * same way in both parts, so the hook's pools are bit-identical either way. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_qmat_st.h"
#include "pdb_v4.h"
#include "pdb_v4_names.h"

#define T (&pdb_v4_names_table)

/* One load: the reader and the model (its owned buffers, bytes and widest input). */
typedef struct v4_ld {
    const pdb_st *st;
    pdb_v4_model *m;
} v4_ld;

static pdb_status missing(const pdb_st *st, const char *name) {
    const pdb_tensor_view *any = pdb_st_count(st) ? pdb_st_at(st, 0) : NULL;
    return pdb_err_set(PDB_NOT_FOUND, "%s: tensor '%s' is missing (DeepSeek or transformers naming)",
                       any ? any->file : "checkpoint", name);
}

/* Weight matrix `role` of (layer, expert), in the first spelling the checkpoint has, of exactly
 * the shape given (nd 2, or 3 for a fused expert tensor), as stored. */
static pdb_status load_mat(v4_ld *ld, int64_t layer, int64_t expert, int role, int nd, int64_t d0, int64_t d1, int64_t d2,
                           pdb_qmat *q) {
    char buf[PDB_NAMES_MAX_LEN];
    if (!pdb_names_find(T, ld->st, role, layer, expert, buf)) return missing(ld->st, buf);
    int64_t shape[3] = {d0, d1, d2}, bytes = 0;
    PDB_TRY(pdb_qmat_st_load(ld->st, buf, nd, shape, &ld->m->owned, q, &bytes));
    ld->m->bytes += bytes;
    if (q->cols > ld->m->max_cols) ld->m->max_cols = q->cols;
    return PDB_OK;
}

/* A small f32 tensor (norms, biases, sinks, ape, hc mixing) the model keeps. */
static pdb_status load_vec(v4_ld *ld, int64_t layer, int role, int nd, int64_t d0, int64_t d1, float **dst) {
    char buf[PDB_NAMES_MAX_LEN];
    if (!pdb_names_find(T, ld->st, role, layer, 0, buf)) return missing(ld->st, buf);
    int64_t shape[2] = {d0, d1};
    PDB_TRY(pdb_st_load_f32(ld->st, buf, nd, shape, dst));
    PDB_TRY(pdb_ptrs_push(&ld->m->owned, *dst));
    ld->m->bytes += d0 * (nd > 1 ? d1 : 1) * (int64_t)sizeof(float);
    return PDB_OK;
}

static pdb_status load_experts(const pdb_config *c, v4_ld *ld, int64_t l, pdb_v4_layer *L) {
    int64_t E = c->n_routed_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    pdb_qmat *q = calloc((size_t)(3 * E > 0 ? 3 * E : 1), sizeof *q);
    PDB_TRY(pdb_ptrs_push(&ld->m->owned, q));
    L->w1 = q;
    L->w3 = q + E;
    L->w2 = q + 2 * E;
    char buf[PDB_NAMES_MAX_LEN];
    if (pdb_names_find(T, ld->st, PDB_V4_T_EXPERTS_GATE_UP, l, 0, buf)) { /* fused: row views of one matrix each */
        pdb_qmat gu, dn;
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_EXPERTS_GATE_UP, 3, E, 2 * I, H, &gu));
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_EXPERTS_DOWN, 3, E, H, I, &dn));
        for (int64_t e = 0; e < E; e++) {
            L->w1[e] = pdb_qmat_view_rows(&gu, e * 2 * I, I);
            L->w3[e] = pdb_qmat_view_rows(&gu, e * 2 * I + I, I);
            L->w2[e] = pdb_qmat_view_rows(&dn, e * H, H);
        }
        return PDB_OK;
    }
    for (int64_t e = 0; e < E; e++) {
        PDB_TRY(load_mat(ld, l, e, PDB_V4_T_EXPERT_W1, 2, I, H, 0, &L->w1[e]));
        PDB_TRY(load_mat(ld, l, e, PDB_V4_T_EXPERT_W3, 2, I, H, 0, &L->w3[e]));
        PDB_TRY(load_mat(ld, l, e, PDB_V4_T_EXPERT_W2, 2, H, I, 0, &L->w2[e]));
    }
    return PDB_OK;
}

static pdb_status load_tid2eid(const pdb_config *c, v4_ld *ld, int64_t l, pdb_v4_layer *L) {
    const pdb_st *st = ld->st;
    char buf[PDB_NAMES_MAX_LEN];
    if (!pdb_names_find(T, st, PDB_V4_T_GATE_TID2EID, l, 0, buf)) return missing(st, buf);
    int64_t V = c->vocab_size, K = c->num_experts_per_tok;
    int64_t shape[2] = {V, K};
    const pdb_tensor_view *v;
    PDB_TRY(pdb_st_get(st, buf, 2, shape, &v));
    if (v->dtype != PDB_DT_I64 && v->dtype != PDB_DT_I32)
        return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s' must be I32 or I64, not %s", v->file, buf, pdb_dtype_name(v->dtype));
    L->tid2eid = malloc(sizeof(int32_t) * (size_t)(V * K));
    PDB_TRY(pdb_ptrs_push(&ld->m->owned, L->tid2eid));
    ld->m->bytes += V * K * (int64_t)sizeof(int32_t);
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

static pdb_status load_compressor(v4_ld *ld, int64_t l, int indexer, int64_t rate, int64_t dim, int64_t coff,
                                  int64_t H, pdb_v4_compressor *cp) {
    cp->rate = rate;
    cp->dim = dim;
    cp->coff = coff;
    PDB_TRY(load_mat(ld, l, 0, indexer ? PDB_V4_T_IDX_COMP_WKV : PDB_V4_T_COMP_WKV, 2, coff * dim, H, 0, &cp->wkv));
    PDB_TRY(load_mat(ld, l, 0, indexer ? PDB_V4_T_IDX_COMP_WGATE : PDB_V4_T_COMP_WGATE, 2, coff * dim, H, 0, &cp->wgate));
    PDB_TRY(load_vec(ld, l, indexer ? PDB_V4_T_IDX_COMP_APE : PDB_V4_T_COMP_APE, 2, rate, coff * dim, &cp->ape));
    return load_vec(ld, l, indexer ? PDB_V4_T_IDX_COMP_NORM : PDB_V4_T_COMP_NORM, 1, dim, 0, &cp->norm);
}

/* Layer l's kind and rope, and its tensors: the capture hook's (pdb_v4_cache_feed reads wkv,
 * kv_norm, the compressor and the indexer's compressor) first, then, for PDB_V4_PART_ALL, the
 * rest of the forward's. */
static pdb_status load_layer(const pdb_v4_model *m, v4_ld *ld, int64_t l, pdb_v4_layer *L) {
    const pdb_config *c = &m->cfg;
    int64_t H = c->hidden_size, hc = c->hc_mult, mix = (2 + hc) * hc, nh = c->num_heads, hd = c->head_dim;
    int64_t qlr = c->q_lora_rank, G = c->o_groups, olr = c->o_lora_rank, E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size;
    L->attn = (pdb_v4_attn)c->v4_attn[l];
    L->rate = pdb_config_v4_rate(c, l);
    L->hash = c->v4_hash_moe[l];
    L->rope = L->attn == PDB_V4_ATTN_SLIDING ? &m->rope_main : &m->rope_compress;
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_WKV, 2, hd, H, 0, &L->wkv));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_KV_NORM, 1, hd, 0, &L->kv_norm));
    if (L->rate) PDB_TRY(load_compressor(ld, l, 0, L->rate, hd, L->attn == PDB_V4_ATTN_CSA ? 2 : 1, H, &L->comp));
    if (L->attn == PDB_V4_ATTN_CSA) PDB_TRY(load_compressor(ld, l, 1, L->rate, c->index_head_dim, 2, H, &L->icomp));
    if (m->part == PDB_V4_PART_HOOK) return PDB_OK;
    PDB_TRY(load_vec(ld, l, PDB_V4_T_ATTN_NORM, 1, H, 0, &L->attn_norm));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_FFN_NORM, 1, H, 0, &L->ffn_norm));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_ATTN_FN, 2, mix, hc * H, &L->hc_attn_fn));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_ATTN_BASE, 1, mix, 0, &L->hc_attn_base));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_ATTN_SCALE, 1, 3, 0, &L->hc_attn_scale));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_FFN_FN, 2, mix, hc * H, &L->hc_ffn_fn));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_FFN_BASE, 1, mix, 0, &L->hc_ffn_base));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_HC_FFN_SCALE, 1, 3, 0, &L->hc_ffn_scale));
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_WQ_A, 2, qlr, H, 0, &L->wq_a));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_Q_NORM, 1, qlr, 0, &L->q_norm));
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_WQ_B, 2, nh * hd, qlr, 0, &L->wq_b));
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_WO_A, 2, G * olr, nh * hd / G, 0, &L->wo_a));
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_WO_B, 2, H, G * olr, 0, &L->wo_b));
    PDB_TRY(load_vec(ld, l, PDB_V4_T_ATTN_SINK, 1, nh, 0, &L->sink));
    if (L->attn == PDB_V4_ATTN_CSA) {
        int64_t nih = c->index_n_heads, ihd = c->index_head_dim;
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_IDX_WQ_B, 2, nih * ihd, qlr, 0, &L->idx_wq_b));
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_IDX_WPROJ, 2, nih, H, 0, &L->idx_wproj));
    }
    PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_GATE, 2, E, H, 0, &L->gate));
    if (L->hash) PDB_TRY(load_tid2eid(c, ld, l, L));
    else PDB_TRY(load_vec(ld, l, PDB_V4_T_GATE_BIAS, 1, E, 0, &L->gate_bias));
    PDB_TRY(load_experts(c, ld, l, L));
    if (c->n_shared_experts) {
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_SHARED_W1, 2, I, H, 0, &L->sh_w1));
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_SHARED_W3, 2, I, H, 0, &L->sh_w3));
        PDB_TRY(load_mat(ld, l, 0, PDB_V4_T_SHARED_W2, 2, H, I, 0, &L->sh_w2));
    }
    return PDB_OK;
}

/* The forward's tensors outside the layers: embedding, final norm, head (tied: the embedding's
 * when the checkpoint has none), the head's hyper-connection. */
static pdb_status load_globals(pdb_v4_model *m, v4_ld *ld) {
    const pdb_config *c = &m->cfg;
    int64_t V = c->vocab_size, H = c->hidden_size, hc = c->hc_mult;
    PDB_TRY(load_mat(ld, -1, 0, PDB_V4_T_EMBED, 2, V, H, 0, &m->embed));
    PDB_TRY(load_vec(ld, -1, PDB_V4_T_NORM, 1, H, 0, &m->norm));
    char buf[PDB_NAMES_MAX_LEN];
    if (c->tie_word_embeddings && !pdb_names_find(T, ld->st, PDB_V4_T_HEAD, -1, 0, buf)) m->head = m->embed;
    else PDB_TRY(load_mat(ld, -1, 0, PDB_V4_T_HEAD, 2, V, H, 0, &m->head));
    PDB_TRY(load_vec(ld, -1, PDB_V4_T_HC_HEAD_FN, 2, hc, hc * H, &m->hc_head_fn));
    PDB_TRY(load_vec(ld, -1, PDB_V4_T_HC_HEAD_BASE, 1, hc, 0, &m->hc_head_base));
    return load_vec(ld, -1, PDB_V4_T_HC_HEAD_SCALE, 1, 1, 0, &m->hc_head_scale);
}

pdb_status pdb_v4_load_part(const pdb_config *cfg, const pdb_st *st, pdb_v4_part part, pdb_v4_model **out) {
    *out = NULL;
    if (cfg->arch != PDB_ARCH_DEEPSEEK_V4)
        return pdb_err_set(PDB_MISMATCH, "pdb_v4_load: config is not deepseek_v4 (model_type '%s')", cfg->model_type);
    if (part != PDB_V4_PART_ALL && part != PDB_V4_PART_HOOK) return pdb_err_set(PDB_INVALID, "pdb_v4_load: no part %d", (int)part);
    pdb_v4_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "v4 model: out of memory");
    m->cfg = *cfg;
    m->part = part;
    v4_ld ld_ = {.st = st, .m = m}, *ld = &ld_;
    const pdb_config *c = &m->cfg;
    pdb_status s;
    if ((s = pdb_rope_init(&m->rope_main, &c->rope, c->qk_rope_head_dim))) goto fail;
    if ((s = pdb_rope_init(&m->rope_compress, &c->rope_compress, c->qk_rope_head_dim))) goto fail;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) { s = pdb_err_set(PDB_NOMEM, "v4 layers: out of memory"); goto fail; }
    if (part == PDB_V4_PART_ALL && (s = load_globals(m, ld))) goto fail; /* the hook reads no global tensor */
    for (int64_t l = 0; l < c->num_layers; l++)
        if ((s = load_layer(m, ld, l, &m->layers[l]))) goto fail;
    *out = m;
    return PDB_OK;
fail:
    pdb_v4_free(m);
    return s;
}

pdb_status pdb_v4_load_from(const pdb_config *cfg, const pdb_st *st, pdb_v4_model **out) {
    return pdb_v4_load_part(cfg, st, PDB_V4_PART_ALL, out);
}

int64_t pdb_v4_model_bytes(const pdb_v4_model *m) { return m->bytes; }

/* The directory's checkpoint, mapped and kept open for the model's views (closed by pdb_v4_free). */
pdb_status pdb_v4_load(const char *dir, pdb_v4_model **out) {
    pdb_config cfg;
    pdb_st *st = NULL;
    *out = NULL;
    PDB_TRY(pdb_config_load(dir, &cfg));
    PDB_TRY(pdb_st_open(dir, &st));
    pdb_status s = pdb_v4_load_from(&cfg, st, out);
    if (s) { pdb_st_close(st); return s; }
    (*out)->own_st = st;
    return PDB_OK;
}

void pdb_v4_free(pdb_v4_model *m) {
    if (!m) return;
    free(m->layers);
    pdb_ptrs_free(&m->owned);
    pdb_rope_free(&m->rope_main);
    pdb_rope_free(&m->rope_compress);
    if (m->own_st) pdb_st_close(m->own_st);
    free(m);
}
