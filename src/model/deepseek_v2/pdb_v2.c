/* pdb_v2: DeepSeek-V2 reference forward (MLA in the absorbed form over the latent cache, dense
 * and MoE MLPs). Reading order: load -> forward -> attention -> moe. All math is f32 with the
 * shared kernels of pdb_math / pdb_rope. */
#include "pdb_v2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_math.h"
#include "pdb_v2_names.h"

/* ======================================= loading ============================================ */

/* Role `role` (pdb_v2_names) of layer l / expert e as f32 [d0] or [d0, d1]. */
static pdb_status load2(const pdb_st *st, float **dst, int64_t d0, int64_t d1, int role, int64_t l, int64_t e) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(role, l, e, name);
    int64_t shape[2] = {d0, d1};
    return pdb_st_load_f32(st, name, d1 ? 2 : 1, shape, dst);
}

static pdb_status load_experts(const pdb_config *c, const pdb_st *st, int l, pdb_v2_layer *L) {
    int64_t E = c->n_routed_experts, H = c->hidden_size, Im = c->moe_intermediate_size;
    size_t n = (size_t)(E * Im * H);
    L->exp_gate = malloc(n * sizeof(float));
    L->exp_up = malloc(n * sizeof(float));
    L->exp_down = malloc(n * sizeof(float));
    if (!L->exp_gate || !L->exp_up || !L->exp_down) return pdb_err_set(PDB_NOMEM, "layer %d experts", l);
    char name[PDB_NAMES_MAX_LEN];
    /* fused layout: [E, 2*Im, H] and [E, H, Im] */
    if (pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_EXPERTS_GATE_UP, l, 0, name))) {
        float *gu = NULL, *dn = NULL;
        int64_t s1[3] = {E, 2 * Im, H}, s2[3] = {E, H, Im};
        PDB_TRY(pdb_st_load_f32(st, name, 3, s1, &gu));
        pdb_v2_names_format(PDB_V2_T_EXPERTS_DOWN, l, 0, name);
        pdb_status s = pdb_st_load_f32(st, name, 3, s2, &dn);
        if (s) { free(gu); return s; }
        for (int64_t e = 0; e < E; e++) {
            memcpy(L->exp_gate + e * Im * H, gu + e * 2 * Im * H, sizeof(float) * Im * H);
            memcpy(L->exp_up + e * Im * H, gu + e * 2 * Im * H + Im * H, sizeof(float) * Im * H);
        }
        memcpy(L->exp_down, dn, n * sizeof(float));
        free(gu);
        free(dn);
        return PDB_OK;
    }
    for (int64_t e = 0; e < E; e++) { /* DeepSeek's per-expert naming */
        float *g = NULL, *u = NULL, *d = NULL;
        pdb_status s = load2(st, &g, Im, H, PDB_V2_T_EXPERT_GATE, l, e);
        if (!s) s = load2(st, &u, Im, H, PDB_V2_T_EXPERT_UP, l, e);
        if (!s) s = load2(st, &d, H, Im, PDB_V2_T_EXPERT_DOWN, l, e);
        if (!s) {
            memcpy(L->exp_gate + e * Im * H, g, sizeof(float) * Im * H);
            memcpy(L->exp_up + e * Im * H, u, sizeof(float) * Im * H);
            memcpy(L->exp_down + e * Im * H, d, sizeof(float) * Im * H);
        }
        free(g);
        free(u);
        free(d);
        if (s) return s;
    }
    return PDB_OK;
}

pdb_status pdb_v2_load_from(const pdb_config *cfg, const pdb_st *st, pdb_v2_model **out) {
    const pdb_config *c = cfg;
    pdb_v2_model *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "model");
    m->cfg = *cfg;
    pdb_status s = PDB_OK;
    int64_t H = c->hidden_size, V = c->vocab_size, nh = c->num_heads;
    int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim, kvl = c->kv_lora_rank, rope = c->qk_rope_head_dim;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) { s = pdb_err_set(PDB_NOMEM, "layers"); goto fail; }
    if ((s = pdb_rope_init(&m->rope, &c->rope, rope))) goto fail;
    m->softmax_scale = (float)pdb_config_softmax_scale(c);
    if ((s = load2(st, &m->embed, V, H, PDB_V2_T_EMBED, -1, 0))) goto fail;
    if ((s = load2(st, &m->final_norm, H, 0, PDB_V2_T_FINAL_NORM, -1, 0))) goto fail;
    char head[PDB_NAMES_MAX_LEN];
    if (c->tie_word_embeddings && !pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_LM_HEAD, -1, 0, head)))
        m->lm_head = m->embed;
    else if ((s = load2(st, &m->lm_head, V, H, PDB_V2_T_LM_HEAD, -1, 0))) goto fail;
    for (int l = 0; l < c->num_layers; l++) {
        pdb_v2_layer *L = &m->layers[l];
        if ((s = load2(st, &L->attn_norm, H, 0, PDB_V2_T_ATTN_NORM, l, 0))) goto fail;
        if ((s = load2(st, &L->ffn_norm, H, 0, PDB_V2_T_FFN_NORM, l, 0))) goto fail;
        if (c->q_lora_rank == 0) {
            if ((s = load2(st, &L->q_proj, nh * qk, H, PDB_V2_T_Q_PROJ, l, 0))) goto fail;
        } else {
            if ((s = load2(st, &L->q_a_proj, c->q_lora_rank, H, PDB_V2_T_Q_A_PROJ, l, 0))) goto fail;
            if ((s = load2(st, &L->q_a_norm, c->q_lora_rank, 0, PDB_V2_T_Q_A_NORM, l, 0))) goto fail;
            if ((s = load2(st, &L->q_b_proj, nh * qk, c->q_lora_rank, PDB_V2_T_Q_B_PROJ, l, 0))) goto fail;
        }
        if ((s = load2(st, &L->kv_a_proj, kvl + rope, H, PDB_V2_T_KV_A_PROJ, l, 0))) goto fail;
        if ((s = load2(st, &L->kv_a_norm, kvl, 0, PDB_V2_T_KV_A_NORM, l, 0))) goto fail;
        if ((s = load2(st, &L->kv_b_proj, nh * (c->qk_nope_head_dim + c->v_head_dim), kvl,
                       PDB_V2_T_KV_B_PROJ, l, 0))) goto fail;
        if ((s = load2(st, &L->o_proj, H, nh * c->v_head_dim, PDB_V2_T_O_PROJ, l, 0))) goto fail;
        L->is_moe = pdb_config_layer_is_moe(c, l);
        if (!L->is_moe) {
            int64_t I = c->intermediate_size;
            if ((s = load2(st, &L->gate, I, H, PDB_V2_T_MLP_GATE, l, 0))) goto fail;
            if ((s = load2(st, &L->up, I, H, PDB_V2_T_MLP_UP, l, 0))) goto fail;
            if ((s = load2(st, &L->down, H, I, PDB_V2_T_MLP_DOWN, l, 0))) goto fail;
            continue;
        }
        if ((s = load2(st, &L->router, c->n_routed_experts, H, PDB_V2_T_ROUTER, l, 0))) goto fail;
        if ((s = load_experts(c, st, l, L))) goto fail;
        if (c->n_shared_experts > 0) {
            int64_t Is = c->moe_intermediate_size * c->n_shared_experts;
            if ((s = load2(st, &L->sh_gate, Is, H, PDB_V2_T_SHARED_GATE, l, 0))) goto fail;
            if ((s = load2(st, &L->sh_up, Is, H, PDB_V2_T_SHARED_UP, l, 0))) goto fail;
            if ((s = load2(st, &L->sh_down, H, Is, PDB_V2_T_SHARED_DOWN, l, 0))) goto fail;
        }
    }
    *out = m;
    return PDB_OK;
fail:
    pdb_v2_free(m);
    return s;
}

static pdb_status load_from_dir(const pdb_config *cfg, const pdb_st *st, void *out) { return pdb_v2_load_from(cfg, st, out); }
pdb_status pdb_v2_load(const char *dir, pdb_v2_model **out) { return pdb_config_load_dir(dir, load_from_dir, out); }

void pdb_v2_free(pdb_v2_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int64_t l = 0; l < m->cfg.num_layers; l++) {
            pdb_v2_layer *L = &m->layers[l];
            float *ps[] = {L->attn_norm, L->q_proj, L->q_a_proj, L->q_a_norm, L->q_b_proj, L->kv_a_proj,
                           L->kv_a_norm, L->kv_b_proj, L->o_proj, L->ffn_norm, L->gate, L->up, L->down,
                           L->router, L->exp_gate, L->exp_up, L->exp_down, L->sh_gate, L->sh_up, L->sh_down};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
        }
        free(m->layers);
    }
    if (m->lm_head != m->embed) free(m->lm_head);
    free(m->embed);
    free(m->final_norm);
    pdb_rope_free(&m->rope);
    free(m);
}

pdb_status pdb_v2_cache_init(pdb_v2_cache *c, const pdb_v2_model *m, int64_t cap) {
    c->cap = cap;
    c->len = 0;
    c->row = m->cfg.kv_lora_rank + m->cfg.qk_rope_head_dim;
    c->latent = malloc(sizeof(float) * (size_t)(m->cfg.num_layers * cap * c->row));
    if (!c->latent) return pdb_err_set(PDB_NOMEM, "latent cache for %lld positions", (long long)cap);
    return PDB_OK;
}

void pdb_v2_cache_free(pdb_v2_cache *c) {
    free(c->latent);
    c->latent = NULL;
}

/* ======================================= forward ============================================ */

/* Scratch for one forward call; sized by T. */
typedef struct {
    float *h, *xn, *q, *qa, *kva, *attn, *tmp, *qlat, *scores, *olat, *mlp, *g, *u;
    int64_t *topk_idx;
    float *topk_w, *probs;
    int32_t *rows;
} v2_scratch;

enum { V2_QTILE = 256 }; /* queries per attention tile: bounds the score matrix to QTILE x S */

static void v2_attention(const pdb_v2_model *m, const pdb_v2_layer *L, pdb_v2_cache *c, int64_t l, int64_t T,
                         v2_scratch *w) {
    const pdb_config *cf = &m->cfg;
    int64_t H = cf->hidden_size, nh = cf->num_heads, nope = cf->qk_nope_head_dim, rope = cf->qk_rope_head_dim;
    int64_t vd = cf->v_head_dim, kvl = cf->kv_lora_rank, qk = nope + rope, row = c->row, p0 = c->len;
    int64_t S = p0 + T;
    float *lat = c->latent + l * c->cap * row; /* [cap, row] of this layer */

    /* q [T, nh*qk] */
    if (cf->q_lora_rank == 0) {
        pdb_math_gemm_nt(T, nh * qk, H, 1, w->xn, H, L->q_proj, H, 0, w->q, nh * qk);
    } else {
        int64_t r = cf->q_lora_rank;
        pdb_math_gemm_nt(T, r, H, 1, w->xn, H, L->q_a_proj, H, 0, w->qa, r);
        for (int64_t t = 0; t < T; t++) pdb_math_rmsnorm(w->qa + t * r, w->qa + t * r, L->q_a_norm, r, cf->rms_norm_eps);
        pdb_math_gemm_nt(T, nh * qk, r, 1, w->qa, r, L->q_b_proj, r, 0, w->q, nh * qk);
    }
    /* latent rows: [RMSNorm(c_kv) | RoPE(k_pe)] appended at p0.. */
    pdb_math_gemm_nt(T, kvl + rope, H, 1, w->xn, H, L->kv_a_proj, H, 0, w->kva, kvl + rope);
    for (int64_t t = 0; t < T; t++) {
        float *dst = lat + (p0 + t) * row;
        pdb_math_rmsnorm(dst, w->kva + t * (kvl + rope), L->kv_a_norm, kvl, cf->rms_norm_eps);
        memcpy(dst + kvl, w->kva + t * (kvl + rope) + kvl, sizeof(float) * rope);
        pdb_rope_apply(&m->rope, dst + kvl, p0 + t);
        for (int64_t h = 0; h < nh; h++) pdb_rope_apply(&m->rope, w->q + t * nh * qk + h * qk + nope, p0 + t);
    }
    for (int64_t h = 0; h < nh; h++) {
        const float *w_uk = L->kv_b_proj + h * (nope + vd) * kvl;          /* [nope, kvl] */
        const float *w_uv = L->kv_b_proj + (h * (nope + vd) + nope) * kvl; /* [vd, kvl] */
        /* qlat [T, row] = [q_nope @ W_UK | q_pe] */
        pdb_math_gemm_nn(T, kvl, nope, 1, w->q + h * qk, nh * qk, w_uk, kvl, 0, w->qlat, row);
        for (int64_t t = 0; t < T; t++) memcpy(w->qlat + t * row + kvl, w->q + t * nh * qk + h * qk + nope, sizeof(float) * rope);
        for (int64_t t0 = 0; t0 < T; t0 += V2_QTILE) {
            int64_t tn = T - t0 < V2_QTILE ? T - t0 : V2_QTILE;
            int64_t sn = p0 + t0 + tn; /* keys visible to the tile's last query */
            pdb_math_gemm_nt(tn, sn, row, m->softmax_scale, w->qlat + t0 * row, row, lat, row, 0, w->scores, sn);
            for (int64_t t = 0; t < tn; t++) {
                float *sc = w->scores + t * sn;
                int64_t vis = p0 + t0 + t + 1;
                pdb_math_softmax(sc, vis);
                for (int64_t j = vis; j < sn; j++) sc[j] = 0;
            }
            pdb_math_gemm_nn(tn, kvl, sn, 1, w->scores, sn, lat, row, 0, w->olat, kvl);
            pdb_math_gemm_nt(tn, vd, kvl, 1, w->olat, kvl, w_uv, kvl, 0, w->attn + t0 * nh * vd + h * vd, nh * vd);
        }
    }
    (void)S;
    pdb_math_gemm_nt(T, H, nh * vd, 1, w->attn, nh * vd, L->o_proj, nh * vd, 0, w->tmp, H);
    for (int64_t i = 0; i < T * H; i++) w->h[i] += w->tmp[i];
}

/* out[T,H] = down(silu(x gate^T) * (x up^T)) for a [I,H] MLP; accumulate when beta == 1. */
static void v2_mlp(const float *x, int64_t T, int64_t H, int64_t I, const float *gate, const float *up,
                   const float *down, float *g, float *u, float beta, float *out) {
    pdb_math_gemm_nt(T, I, H, 1, x, H, gate, H, 0, g, I);
    pdb_math_gemm_nt(T, I, H, 1, x, H, up, H, 0, u, I);
    pdb_math_silu_mul(g, g, u, T * I);
    pdb_math_gemm_nt(T, H, I, 1, g, I, down, I, beta, out, H);
}

/* Routing of one token: softmax over experts, (group-limited) greedy top-k, weights. Ties pick
 * the lower index. */
void pdb_v2_route(const pdb_config *cf, float *probs /* [E], softmaxed in place */, int64_t *idx, float *wt) {
    int64_t E = cf->n_routed_experts, K = cf->num_experts_per_tok;
    pdb_math_softmax(probs, E);
    float sc[1024]; /* E <= 1024: checked by pdb_v2_forward and the decoder at load */
    memcpy(sc, probs, sizeof(float) * E);
    if (cf->topk_method == PDB_TOPK_GROUP_LIMITED) {
        int64_t G = cf->n_group, per = E / G;
        float gs[256];
        int keep[256] = {0};
        for (int64_t g = 0; g < G; g++) {
            gs[g] = -INFINITY;
            for (int64_t j = 0; j < per; j++) gs[g] = fmaxf(gs[g], probs[g * per + j]);
        }
        for (int64_t k = 0; k < cf->topk_group; k++) {
            int64_t b = -1;
            for (int64_t g = 0; g < G; g++)
                if (!keep[g] && (b < 0 || gs[g] > gs[b])) b = g;
            keep[b] = 1;
        }
        for (int64_t g = 0; g < G; g++)
            if (!keep[g])
                for (int64_t j = 0; j < per; j++) sc[g * per + j] = 0.0f;
    }
    for (int64_t k = 0; k < K; k++) {
        int64_t b = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t q = 0; q < k; q++) taken |= idx[q] == e;
            if (!taken && (b < 0 || sc[e] > sc[b])) b = e;
        }
        idx[k] = b;
        wt[k] = sc[b];
    }
    if (K > 1 && cf->norm_topk_prob) { /* DeepSeek-V2: normalise instead of scaling */
        double s = 1e-20;
        for (int64_t k = 0; k < K; k++) s += wt[k];
        for (int64_t k = 0; k < K; k++) wt[k] = (float)(wt[k] / s);
    } else {
        for (int64_t k = 0; k < K; k++) wt[k] *= (float)cf->routed_scaling_factor;
    }
}

static void v2_moe(const pdb_v2_model *m, const pdb_v2_layer *L, int64_t T, v2_scratch *w) {
    const pdb_config *cf = &m->cfg;
    int64_t H = cf->hidden_size, E = cf->n_routed_experts, K = cf->num_experts_per_tok, Im = cf->moe_intermediate_size;
    pdb_math_gemm_nt(T, E, H, 1, w->xn, H, L->router, H, 0, w->probs, E);
    for (int64_t t = 0; t < T; t++) pdb_v2_route(cf, w->probs + t * E, w->topk_idx + t * K, w->topk_w + t * K);
    memset(w->mlp, 0, sizeof(float) * T * H);
    float *xe = w->tmp, *ye = w->tmp + T * H; /* gathered rows and their outputs */
    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < K; k++)
                if (w->topk_idx[t * K + k] == e) {
                    w->rows[n] = (int32_t)(t * K + k);
                    memcpy(xe + n * H, w->xn + t * H, sizeof(float) * H);
                    n++;
                }
        if (!n) continue;
        v2_mlp(xe, n, H, Im, L->exp_gate + e * Im * H, L->exp_up + e * Im * H, L->exp_down + e * H * Im, w->g, w->u,
               0, ye);
        for (int64_t i = 0; i < n; i++) {
            int64_t t = w->rows[i] / K;
            float wt = w->topk_w[w->rows[i]];
            for (int64_t j = 0; j < H; j++) w->mlp[t * H + j] += ye[i * H + j] * wt;
        }
    }
    if (cf->n_shared_experts > 0) {
        int64_t Is = Im * cf->n_shared_experts;
        v2_mlp(w->xn, T, H, Is, L->sh_gate, L->sh_up, L->sh_down, w->g, w->u, 0, w->tmp);
        for (int64_t i = 0; i < T * H; i++) w->mlp[i] += w->tmp[i];
    }
}

static void scratch_free(v2_scratch *w) {
    float *ps[] = {w->h, w->xn, w->q, w->qa, w->kva, w->attn, w->tmp, w->qlat, w->scores, w->olat, w->mlp,
                   w->g, w->u, w->topk_w, w->probs};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    free(w->topk_idx);
    free(w->rows);
}

static pdb_status scratch_init(v2_scratch *w, const pdb_config *cf, int64_t T, int64_t S) {
    memset(w, 0, sizeof *w);
    int64_t H = cf->hidden_size, nh = cf->num_heads, qk = cf->qk_nope_head_dim + cf->qk_rope_head_dim;
    int64_t row = cf->kv_lora_rank + cf->qk_rope_head_dim, E = cf->n_routed_experts, K = cf->num_experts_per_tok;
    int64_t I = cf->intermediate_size, Im = cf->moe_intermediate_size * (cf->n_shared_experts > 1 ? cf->n_shared_experts : 1);
    if (Im * K > I) I = Im * K; /* g/u also hold gathered expert rows (<= T*K rows of Im) */
    if (cf->moe_intermediate_size * (cf->n_shared_experts) > I) I = cf->moe_intermediate_size * cf->n_shared_experts;
    int64_t tile = T < V2_QTILE ? T : V2_QTILE;
#define ALLOC(p, n) if (!((p) = malloc(sizeof(*(p)) * (size_t)((n) > 0 ? (n) : 1)))) goto nomem
    ALLOC(w->h, T * H);
    ALLOC(w->xn, T * H);
    ALLOC(w->q, T * nh * qk);
    ALLOC(w->qa, T * (cf->q_lora_rank ? cf->q_lora_rank : 1));
    ALLOC(w->kva, T * row);
    ALLOC(w->attn, T * nh * cf->v_head_dim);
    ALLOC(w->tmp, T * H * (K > 1 ? K + 1 : 2)); /* gathered expert inputs + outputs */
    ALLOC(w->qlat, T * row);
    ALLOC(w->scores, tile * S);
    ALLOC(w->olat, tile * cf->kv_lora_rank);
    ALLOC(w->mlp, T * H);
    ALLOC(w->g, T * I);
    ALLOC(w->u, T * I);
    ALLOC(w->topk_idx, T * K);
    ALLOC(w->topk_w, T * K);
    ALLOC(w->probs, T * E);
    ALLOC(w->rows, T * K);
#undef ALLOC
    return PDB_OK;
nomem:
    scratch_free(w);
    return pdb_err_set(PDB_NOMEM, "forward scratch for %lld tokens", (long long)T);
}

pdb_status pdb_v2_forward(const pdb_v2_model *m, pdb_v2_cache *c, const int32_t *ids, int64_t T, int all_logits,
                          float *logits) {
    const pdb_config *cf = &m->cfg;
    if (T <= 0) return pdb_err_set(PDB_INVALID, "forward: no tokens");
    if (c->len + T > c->cap)
        return pdb_err_set(PDB_TOO_LARGE, "forward: %lld + %lld positions exceed the cache capacity %lld",
                           (long long)c->len, (long long)T, (long long)c->cap);
    if (cf->n_routed_experts > 1024 || cf->n_group > 256)
        return pdb_err_set(PDB_UNSUPPORTED, "forward: more than 1024 experts or 256 groups");
    for (int64_t t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= cf->vocab_size)
            return pdb_err_set(PDB_INVALID, "forward: token id %d at position %lld is outside the vocabulary (%lld)",
                               ids[t], (long long)t, (long long)cf->vocab_size);
    int64_t H = cf->hidden_size, V = cf->vocab_size;
    v2_scratch w;
    PDB_TRY(scratch_init(&w, cf, T, c->len + T));
    for (int64_t t = 0; t < T; t++) memcpy(w.h + t * H, m->embed + (int64_t)ids[t] * H, sizeof(float) * H);

    for (int64_t l = 0; l < cf->num_layers; l++) {
        const pdb_v2_layer *L = &m->layers[l];
        for (int64_t t = 0; t < T; t++) pdb_math_rmsnorm(w.xn + t * H, w.h + t * H, L->attn_norm, H, cf->rms_norm_eps);
        v2_attention(m, L, c, l, T, &w);
        for (int64_t t = 0; t < T; t++) pdb_math_rmsnorm(w.xn + t * H, w.h + t * H, L->ffn_norm, H, cf->rms_norm_eps);
        if (L->is_moe) {
            v2_moe(m, L, T, &w);
        } else {
            v2_mlp(w.xn, T, H, cf->intermediate_size, L->gate, L->up, L->down, w.g, w.u, 0, w.mlp);
        }
        for (int64_t i = 0; i < T * H; i++) w.h[i] += w.mlp[i];
    }
    c->len += T;
    if (logits) {
        int64_t first = all_logits ? 0 : T - 1, n = T - first;
        for (int64_t t = first; t < T; t++) pdb_math_rmsnorm(w.xn + t * H, w.h + t * H, m->final_norm, H, cf->rms_norm_eps);
        pdb_math_gemm_nt(n, V, H, 1, w.xn + first * H, H, m->lm_head, H, 0, logits, V);
    }
    scratch_free(&w);
    return PDB_OK;
}
