/* pdb_v2_ops: loading V2 weights as pdb_qmat views and the deterministic layer steps (absorbed
 * MLA over f32 latent rows, dense and MoE MLPs). Reading order: load -> latent rows ->
 * attention -> ffn. */
#include "pdb_v2_ops.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_clock.h"
#include "pdb_math.h"
#include "pdb_qmat_st.h"
#include "pdb_v2.h"
#include "pdb_v2_names.h"
#include "pdb_sys.h" /* the spin hint of the head steps' barrier */

/* the steps of one (row, head)'s attention (head_step), and the split tasks' claims per (row, head)
 * and step (see attention_split below) */
enum { HEAD_STEPS = 5 };
struct pdb_v2_head_sync {
    _Alignas(64) atomic_int claim[HEAD_STEPS];
    atomic_int done[HEAD_STEPS];
};

const char *const pdb_v2_ops_stage_names[PDB_V2_ST_N] = {
    "q/kv projections", "latent rows + rope", "W_UK^T q", "scores", "softmax", "o_lat (mix)", "W_UV o_lat",
    "o_proj + residual", "FFN norm", "router + routing", "gate/up products + SiLU", "down products", "combine + residual"};

/* The stage clock: adds the time since *t0 (pdb_clock_now seconds, 0 = not started) to stage k and
 * restarts it (when the weights' options ask for stage times). */
static void stage(const pdb_v2_batch *b, int k, double *t0) {
    double *acc = b->w->opts ? b->w->opts->stage_s : NULL;
    if (!acc) return;
    double t = pdb_clock_now();
    if (*t0 != 0) acc[k] += t - *t0;
    *t0 = t;
}

/* ======================================= loading ============================================ */

static pdb_status own(pdb_v2_qweights *w, void *p) {
    pdb_status s = pdb_ptrs_push(&w->owned, p);
    return s ? pdb_err_wrap(s, "weights") : PDB_OK;
}

/* A linear weight [rows, cols], role `role` (pdb_v2_names) of layer l / expert e, as stored
 * (pdb_qmat_st_load: BF16/F32/MX views, DeepSeek block FP8 as MXFP8, others an owned f32 copy). */
static pdb_status load_qmat(pdb_v2_qweights *w, const pdb_st *st, pdb_qmat *q, int64_t rows, int64_t cols, int role,
                            int64_t l, int64_t e) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(role, l, e, name);
    if (cols > w->max_cols) w->max_cols = cols;
    int64_t shape[2] = {rows, cols};
    pdb_status s = pdb_qmat_st_load(st, name, 2, shape, &w->owned, q, NULL);
    return s ? pdb_err_wrap(s, "weights") : PDB_OK;
}

static pdb_status load_vec(pdb_v2_qweights *w, const pdb_st *st, float **out, int64_t n, int role, int64_t l,
                           int64_t e) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(role, l, e, name);
    PDB_TRY(pdb_st_load_f32(st, name, 1, &n, out));
    return own(w, *out);
}

static pdb_status load_layer(pdb_v2_qweights *w, const pdb_st *st, int l, int kv_only) {
    const pdb_config *c = &w->cfg;
    pdb_v2_qlayer *L = &w->layers[l];
    int64_t H = c->hidden_size, nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim;
    int64_t qk = nope + rope, vd = c->v_head_dim, kvl = c->kv_lora_rank;
    PDB_TRY(load_qmat(w, st, &L->kv_a, kvl + rope, H, PDB_V2_T_KV_A_PROJ, l, 0));
    PDB_TRY(load_vec(w, st, &L->kv_a_norm, kvl, PDB_V2_T_KV_A_NORM, l, 0));
    if (kv_only) return PDB_OK;
    PDB_TRY(load_vec(w, st, &L->attn_norm, H, PDB_V2_T_ATTN_NORM, l, 0));
    PDB_TRY(load_vec(w, st, &L->ffn_norm, H, PDB_V2_T_FFN_NORM, l, 0));
    if (c->q_lora_rank == 0) {
        PDB_TRY(load_qmat(w, st, &L->q_proj, nh * qk, H, PDB_V2_T_Q_PROJ, l, 0));
    } else {
        PDB_TRY(load_qmat(w, st, &L->q_a, c->q_lora_rank, H, PDB_V2_T_Q_A_PROJ, l, 0));
        PDB_TRY(load_vec(w, st, &L->q_a_norm, c->q_lora_rank, PDB_V2_T_Q_A_NORM, l, 0));
        PDB_TRY(load_qmat(w, st, &L->q_b, nh * qk, c->q_lora_rank, PDB_V2_T_Q_B_PROJ, l, 0));
    }
    PDB_TRY(load_qmat(w, st, &L->o_proj, H, nh * vd, PDB_V2_T_O_PROJ, l, 0));
    /* W_UV is read in place from kv_b (a row view per head); W_UK^T is kv_b's nope rows transposed,
     * kept in bf16 when that holds every value exactly (e4m3 and bf16 weights always do): the
     * same values, so the same products, at half the bytes of f32 */
    PDB_TRY(load_qmat(w, st, &L->kv_b, nh * (nope + vd), kvl, PDB_V2_T_KV_B_PROJ, l, 0));
    float *uk = malloc(sizeof(float) * (size_t)(nh * kvl * nope)), *row = malloc(sizeof(float) * (size_t)kvl);
    if (!uk || !row) { free(uk); free(row); return pdb_err_set(PDB_NOMEM, "layer %d kv_b", l); }
    int bf16 = 1;
    for (int64_t h = 0; h < nh; h++)
        for (int64_t n = 0; n < nope; n++) {
            pdb_qmat_row_f32(&L->kv_b, h * (nope + vd) + n, row);
            for (int64_t k = 0; k < kvl; k++) {
                uint32_t u;
                memcpy(&u, &row[k], 4);
                bf16 &= (u & 0xFFFF) == 0;
                uk[(h * kvl + k) * nope + n] = row[k];
            }
        }
    free(row);
    if (bf16) { /* in place: element i's top half moves to u16 slot i (i ascending never overwrites a later float) */
        uint16_t *b = (uint16_t *)uk;
        for (int64_t i = 0; i < nh * kvl * nope; i++) {
            uint32_t u;
            memcpy(&u, &uk[i], 4);
            b[i] = (uint16_t)(u >> 16);
        }
        float *shrunk = realloc(uk, sizeof(uint16_t) * (size_t)(nh * kvl * nope));
        if (shrunk) uk = shrunk;
    }
    PDB_TRY(own(w, uk));
    L->uk_t = (pdb_qmat){bf16 ? PDB_QF_BF16 : PDB_QF_F32, nh * kvl, nope, uk, NULL, 0};
    L->is_moe = pdb_config_layer_is_moe(c, l);
    if (!L->is_moe) {
        int64_t I = c->intermediate_size;
        PDB_TRY(load_qmat(w, st, &L->gate, I, H, PDB_V2_T_MLP_GATE, l, 0));
        PDB_TRY(load_qmat(w, st, &L->up, I, H, PDB_V2_T_MLP_UP, l, 0));
        return load_qmat(w, st, &L->down, H, I, PDB_V2_T_MLP_DOWN, l, 0);
    }
    int64_t E = c->n_routed_experts, Im = c->moe_intermediate_size;
    char fused[PDB_NAMES_MAX_LEN];
    if (pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_EXPERTS_GATE_UP, l, 0, fused)))
        return pdb_err_set(PDB_UNSUPPORTED, "checkpoint: fused expert tensor '%s' (this engine reads per-expert tensors "
                           "as DeepSeek and transformers' save_pretrained write them)", fused);
    PDB_TRY(load_qmat(w, st, &L->router, E, H, PDB_V2_T_ROUTER, l, 0));
    L->eg = calloc((size_t)E * 3, sizeof(pdb_qmat));
    if (!L->eg) return pdb_err_set(PDB_NOMEM, "layer %d experts", l);
    L->eu = L->eg + E;
    L->ed = L->eg + 2 * E;
    for (int64_t e = 0; e < E; e++) {
        PDB_TRY(load_qmat(w, st, &L->eg[e], Im, H, PDB_V2_T_EXPERT_GATE, l, e));
        PDB_TRY(load_qmat(w, st, &L->eu[e], Im, H, PDB_V2_T_EXPERT_UP, l, e));
        PDB_TRY(load_qmat(w, st, &L->ed[e], H, Im, PDB_V2_T_EXPERT_DOWN, l, e));
    }
    if (c->n_shared_experts > 0) {
        int64_t Is = Im * c->n_shared_experts;
        PDB_TRY(load_qmat(w, st, &L->sg, Is, H, PDB_V2_T_SHARED_GATE, l, 0));
        PDB_TRY(load_qmat(w, st, &L->su, Is, H, PDB_V2_T_SHARED_UP, l, 0));
        PDB_TRY(load_qmat(w, st, &L->sd, H, Is, PDB_V2_T_SHARED_DOWN, l, 0));
    }
    return PDB_OK;
}

pdb_status pdb_v2_qweights_load(pdb_v2_qweights *w, const pdb_config *cfg, const pdb_st *st, int kv_only) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    const pdb_config *c = &w->cfg;
    if (c->arch != PDB_ARCH_DEEPSEEK_V2) return pdb_err_set(PDB_UNSUPPORTED, "weights: not a deepseek_v2 config");
    if (c->n_routed_experts > 1024 || c->n_group > 256)
        return pdb_err_set(PDB_UNSUPPORTED, "weights: more than 1024 experts or 256 groups");
    pdb_status s = pdb_rope_init(&w->rope, &c->rope, c->qk_rope_head_dim);
    if (s) return s;
    w->softmax_scale = (float)pdb_config_softmax_scale(c);
    int64_t H = c->hidden_size, V = c->vocab_size;
    w->layers = calloc((size_t)c->num_layers, sizeof *w->layers);
    w->opts = calloc(1, sizeof *w->opts);
    if (!w->layers || !w->opts) { s = pdb_err_set(PDB_NOMEM, "layers"); goto fail; }
    if (!kv_only) {
        if ((s = load_qmat(w, st, &w->embed, V, H, PDB_V2_T_EMBED, -1, 0))) goto fail;
        if ((s = load_vec(w, st, &w->final_norm, H, PDB_V2_T_FINAL_NORM, -1, 0))) goto fail;
        char head[PDB_NAMES_MAX_LEN];
        if (c->tie_word_embeddings && !pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_LM_HEAD, -1, 0, head)))
            w->lm_head = w->embed;
        else if ((s = load_qmat(w, st, &w->lm_head, V, H, PDB_V2_T_LM_HEAD, -1, 0))) goto fail;
    }
    for (int l = 0; l < c->num_layers; l++)
        if ((s = load_layer(w, st, l, kv_only))) goto fail;
    return PDB_OK;
fail:
    pdb_v2_qweights_free(w);
    return s;
}

void pdb_v2_qweights_free(pdb_v2_qweights *w) {
    if (w->layers)
        for (int64_t l = 0; l < w->cfg.num_layers; l++) free(w->layers[l].eg);
    free(w->layers);
    free(w->opts);
    pdb_ptrs_free(&w->owned);
    pdb_rope_free(&w->rope);
    memset(w, 0, sizeof *w);
}

/* ======================================= layer math ========================================= */

/* The cache rows from kva = xn kv_a^T [R, kvl + rope]: RMSNorm of the latent, RoPE of k_pe. */
static void latent_finish(const pdb_v2_qweights *w, int64_t l, int64_t R, const int64_t *pos, const pdb_v2_rowcache *cache,
                          const float *kva, const float *cs) { /* cs: each row's rope factors, or NULL */
    const pdb_config *c = &w->cfg;
    const pdb_v2_qlayer *L = &w->layers[l];
    int64_t kvl = c->kv_lora_rank, rope = c->qk_rope_head_dim, row = kvl + rope;
    for (int64_t t = 0; t < R; t++) {
        float *dst = cache[t].base + l * cache[t].layer_stride + (pos[t] - cache[t].pos_offset) * cache[t].pos_stride;
        pdb_math_rmsnorm(dst, kva + t * row, L->kv_a_norm, kvl, c->rms_norm_eps);
        memcpy(dst + kvl, kva + t * row + kvl, sizeof(float) * (size_t)rope);
        if (cs) pdb_rope_apply_cs(&w->rope, cs + t * rope, dst + kvl);
        else pdb_rope_apply(&w->rope, dst + kvl, pos[t]);
    }
}

void pdb_v2_ops_latent_rows(const pdb_v2_qweights *w, int64_t l, pdb_pool *pool, float *rowbuf, const float *xn,
                            int64_t R, const int64_t *pos, const pdb_v2_rowcache *cache, float *kva) {
    const pdb_config *c = &w->cfg;
    pdb_qmat_matmul(pool, &w->layers[l].kv_a, xn, c->hidden_size, R, kva, c->kv_lora_rank + c->qk_rope_head_dim, rowbuf);
    latent_finish(w, l, R, pos, cache, kva, NULL);
}

static void batch_free_ptrs(pdb_v2_batch *b) {
    void *ps[] = {b->cache, b->pos, b->h, b->xn, b->q, b->qa, b->kva, b->attn, b->tmp, b->mlp, b->g, b->u, b->probs,
                  b->slot_row, b->xe, b->topk_w, b->att_scratch, b->rowbuf, b->topk_idx, b->erows, b->jobs, b->cs,
                  b->wq, b->wo, b->wsc, b->views, b->ajobs, b->hsync};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

pdb_status pdb_v2_batch_init(pdb_v2_batch *b, const pdb_v2_qweights *w, pdb_pool *pool, int64_t R, int64_t max_len) {
    memset(b, 0, sizeof *b);
    b->w = w;
    b->pool = pool;
    b->R = R;
    const pdb_config *c = &w->cfg;
    int64_t H = c->hidden_size, nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    int64_t row = c->kv_lora_rank + c->qk_rope_head_dim, E = c->n_routed_experts, K = c->num_experts_per_tok;
    int64_t I = c->intermediate_size, Is = c->moe_intermediate_size * (c->n_shared_experts > 1 ? c->n_shared_experts : 1);
    if (Is > I) I = Is;
    if (c->moe_intermediate_size > I) I = c->moe_intermediate_size;
    int nth = pdb_pool_threads(pool);
    b->att_stride = max_len + 2 * row + PDB_QMAT_ROWBUF_FLOATS(1, row); /* scores, q_lat, o_lat, the head products' scratch */
#define BA(p, n) if (!((p) = malloc(sizeof(*(p)) * (size_t)((n) > 0 ? (n) : 1)))) goto nomem
    BA(b->cache, R); BA(b->pos, R); BA(b->h, R * H); BA(b->xn, R * H); BA(b->q, R * nh * qk);
    BA(b->qa, R * (c->q_lora_rank ? c->q_lora_rank : 1)); BA(b->kva, R * row); BA(b->attn, R * nh * c->v_head_dim);
    BA(b->tmp, R * H); BA(b->mlp, R * H); BA(b->probs, R * (E ? E : 1));
    BA(b->g, R * (K * c->moe_intermediate_size + I)); BA(b->u, R * (K * c->moe_intermediate_size + I)); /* routed, then shared */
    BA(b->slot_row, R * (K ? K : 1)); BA(b->xe, R * (K ? K : 1) * H); BA(b->jobs, 3 * (E + 1)); BA(b->topk_idx, R * (K ? K : 1)); BA(b->topk_w, R * (K ? K : 1));
    BA(b->erows, R * (K ? K : 1)); BA(b->cs, R * c->qk_rope_head_dim); BA(b->att_scratch, nth * b->att_stride); BA(b->rowbuf, PDB_QMAT_ROWBUF_FLOATS(nth, w->max_cols));
    b->max_len = max_len;
    if (R * nh <= PDB_V2_WIDE_JOBS && R * nh * max_len <= PDB_V2_WIDE_SCORES) {
        BA(b->wq, R * nh * row); BA(b->wo, R * nh * c->kv_lora_rank); BA(b->wsc, R * nh * max_len);
        BA(b->views, 2 * nh); BA(b->ajobs, R * nh);
        if (!(b->hsync = aligned_alloc(64, sizeof(*b->hsync) * (size_t)(R * nh)))) goto nomem;
    }
#undef BA
    return PDB_OK;
nomem:
    batch_free_ptrs(b);
    return pdb_err_set(PDB_NOMEM, "forward scratch for %lld rows", (long long)R);
}

void pdb_v2_batch_free(pdb_v2_batch *b) { batch_free_ptrs(b); memset(b, 0, sizeof *b); }

void pdb_v2_ops_embed(pdb_v2_batch *b, int64_t r, int32_t id) {
    pdb_qmat_row_f32(&b->w->embed, id, b->h + r * b->w->cfg.hidden_size);
}

void pdb_v2_ops_attn_norm(pdb_v2_batch *b, int64_t l) {
    const pdb_config *c = &b->w->cfg;
    int64_t H = c->hidden_size;
    for (int64_t t = 0; t < b->R; t++) pdb_math_rmsnorm(b->xn + t * H, b->h + t * H, b->w->layers[l].attn_norm, H, c->rms_norm_eps);
}

/* A row's attention probabilities from its raw scores: scaled, then softmax (both attention paths). */
static void scores_to_probs(const pdb_v2_batch *b, float *sc, int64_t n) {
    for (int64_t j = 0; j < n; j++) sc[j] = sc[j] * b->w->softmax_scale;
    pdb_math_softmax(sc, n);
}

/* [*a, *e): part p of n items in `parts` parts of a multiple of 16 (rows stay in four-row groups,
 * columns in whole vectors); an empty range when n is used up; one part is [0, n) */
static void split_range(int64_t n, int64_t parts, int64_t p, int64_t *a, int64_t *e) {
    int64_t len = ((n + parts - 1) / parts + 15) / 16 * 16;
    *a = p * len < n ? p * len : n;
    *e = *a + len < n ? *a + len : n;
}

/* Part p of `parts` of step `step` of (row, head) k, into qlat [kvl + rope], sc [pos + 1] and olat
 * [kvl]; mm: a one-thread product's scratch. Steps: 0 q_lat rows, 1 score positions, 2 the
 * softmax (one part), 3 o_lat columns, 4 W_UV rows. Each value is the same for any parts. */
static void head_step(pdb_v2_batch *b, int64_t k, int step, int64_t p, int64_t parts, float *qlat, float *sc, float *olat,
                      float *mm) {
    const pdb_config *c = &b->w->cfg;
    const pdb_v2_qlayer *L = &b->w->layers[b->layer];
    int64_t nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, vd = c->v_head_dim;
    int64_t kvl = c->kv_lora_rank, row = kvl + rope, r = k / nh, h = k % nh, pos = b->pos[r], a, e;
    const pdb_v2_rowcache *rc = &b->cache[r];
    const float *lat = rc->base + b->layer * rc->layer_stride, *qh = b->q + r * nh * (nope + rope) + h * (nope + rope);
    switch (step) {
    case 0: { /* q_lat rows */
        split_range(kvl, parts, p, &a, &e);
        pdb_qmat uk = pdb_qmat_view_rows(&L->uk_t, h * kvl + a, e - a);
        if (e > a) pdb_qmat_matmul(NULL, &uk, qh, nope, 1, qlat + a, kvl, mm);
        if (p == 0) memcpy(qlat + kvl, qh + nope, sizeof(float) * (size_t)rope);
        break;
    }
    case 1: /* scores of positions */
        split_range(pos + 1, parts, p, &a, &e);
        if (e > a) pdb_qmat_dots(qlat, lat + a * rc->pos_stride, row, rc->pos_stride, e - a, sc + a);
        break;
    case 2: scores_to_probs(b, sc, pos + 1); break;
    case 3: /* o_lat columns */
        split_range(kvl, parts, p, &a, &e);
        memset(olat + a, 0, sizeof(float) * (size_t)(e - a));
        for (int64_t j = 0; j <= pos && e > a; j++) pdb_qmat_axpy(olat + a, sc[j], lat + j * rc->pos_stride + a, e - a);
        break;
    default: { /* W_UV rows */
        split_range(vd, parts, p, &a, &e);
        pdb_qmat uv = pdb_qmat_view_rows(&L->kv_b, h * (nope + vd) + nope + a, e - a);
        if (e > a) pdb_qmat_matmul(NULL, &uv, olat, kvl, 1, b->attn + r * nh * vd + h * vd + a, vd, mm);
    }
    }
}

/* One (row, head) task: q_lat = [W_UK^T q_nope | q_pe]; softmax over rows at positions <= pos;
 * o_lat = sum_j p_j c_j in j order; out = W_UV o_lat. The two weight products are one-thread
 * pdb_qmat_matmul calls on the head's rows: the same values in pdb_qmat_dot's order for every
 * format (its contract), so bf16 W_UK^T and MXFP8 W_UV give what f32 copies would. The task runs
 * the five steps of head_step whole; the split tasks below run them in parts. */
static void attn_task(void *vc, int64_t task, int thread) {
    pdb_v2_batch *b = vc;
    const pdb_config *c = &b->w->cfg;
    int64_t pos = b->pos[task / c->num_heads];
    PDB_ASSERT(b->cache[task / c->num_heads].pos_offset == 0, "attention needs every row from position 0");
    float *sc = b->att_scratch + (int64_t)thread * b->att_stride, *qlat = sc + pos + 1, *olat = qlat + c->kv_lora_rank + c->qk_rope_head_dim;
    for (int step = 0; step < HEAD_STEPS; step++) head_step(b, task, step, 0, 1, qlat, sc, olat, olat + c->kv_lora_rank);
}

/* ---- head-parallel attention (few rows: decode) -----------------------------------------------
 * The per-(row, head) task above, split into stages that each spread over the pool, so that the
 * weights stream with the matmul's prefetching row claims and each latent row is read once for
 * all heads: (1) q_lat = W_UK^T q_nope for every (row, head), one matmul_multi; (2) scores of
 * blocks of positions against every head; (3) scale and softmax per (row, head); (4) o_lat of
 * every head per 32-column slice (pdb_qmat_mix); (5) out = W_UV o_lat, one matmul_multi. Every
 * value is computed as the task computes it (the same dot per score, the same axpy chain per
 * o_lat element, the same matmul per product): bit-identical. */
typedef struct {
    pdb_v2_batch *b;
    int64_t blk;           /* positions per score task */
    int64_t first[PDB_V2_WIDE_JOBS + 1]; /* score tasks of rows before r */
} wide_ctx;

static void wide_scores(void *vc, int64_t task, int thread) {
    const wide_ctx *w = vc;
    pdb_v2_batch *b = w->b;
    const pdb_config *c = &b->w->cfg;
    int64_t nh = c->num_heads, row = c->kv_lora_rank + c->qk_rope_head_dim, r = 0;
    while (task >= w->first[r + 1]) r++;
    const pdb_v2_rowcache *rc = &b->cache[r];
    int64_t j0 = (task - w->first[r]) * w->blk, n = b->pos[r] + 1 - j0 < w->blk ? b->pos[r] + 1 - j0 : w->blk;
    const float *lat = rc->base + b->layer * rc->layer_stride + j0 * rc->pos_stride;
    pdb_qmat_dots_xs(b->wq + r * nh * row, row, nh, lat, rc->pos_stride, n, row, b->wsc + r * nh * b->max_len + j0, b->max_len);
}

static void wide_softmax(void *vc, int64_t task, int thread) {
    pdb_v2_batch *b = vc;
    int64_t n = b->pos[task / b->w->cfg.num_heads] + 1;
    scores_to_probs(b, b->wsc + task * b->max_len, n);
}

enum { MIX_COLS = 32 }; /* o_lat columns per mix task: pdb_qmat_mix's widest register tile */

static void wide_mix(void *vc, int64_t task, int thread) {
    pdb_v2_batch *b = vc;
    const pdb_config *c = &b->w->cfg;
    int64_t nh = c->num_heads, kvl = c->kv_lora_rank, slices = (kvl + MIX_COLS - 1) / MIX_COLS, r = task / slices;
    int64_t c0 = task % slices * MIX_COLS;
    const pdb_v2_rowcache *rc = &b->cache[r];
    pdb_qmat_mix(b->wo + r * nh * kvl + c0, kvl, b->wsc + r * nh * b->max_len, b->max_len, nh,
                 rc->base + b->layer * rc->layer_stride + c0, rc->pos_stride, b->pos[r] + 1, kvl - c0 < MIX_COLS ? kvl - c0 : MIX_COLS);
}

static void attention_wide(pdb_v2_batch *b, double *t0) {
    const pdb_config *c = &b->w->cfg;
    const pdb_v2_qlayer *L = &b->w->layers[b->layer];
    int64_t R = b->R, nh = c->num_heads, nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, vd = c->v_head_dim;
    int64_t kvl = c->kv_lora_rank, qk = nope + rope, row = kvl + rope, nth = pdb_pool_threads(b->pool);
    for (int64_t h = 0; h < nh; h++) {
        b->views[h] = pdb_qmat_view_rows(&L->uk_t, h * kvl, kvl);
        b->views[nh + h] = pdb_qmat_view_rows(&L->kv_b, h * (nope + vd) + nope, vd);
    }
    for (int64_t r = 0; r < R; r++) {
        PDB_ASSERT(b->cache[r].pos_offset == 0, "attention needs every row from position 0");
        for (int64_t h = 0; h < nh; h++) {
            b->ajobs[r * nh + h] = (pdb_qmat_job){&b->views[h], b->q + r * nh * qk + h * qk, nope, 1, b->wq + (r * nh + h) * row, kvl};
            memcpy(b->wq + (r * nh + h) * row + kvl, b->q + r * nh * qk + h * qk + nope, sizeof(float) * (size_t)rope);
        }
    }
    pdb_qmat_matmul_multi(b->pool, b->ajobs, (int)(R * nh), b->rowbuf);
    stage(b, PDB_V2_ST_UK, t0);
    wide_ctx w = {b, 16, {0}};
    int64_t total = 0;
    for (int64_t r = 0; r < R; r++) total += b->pos[r] + 1;
    while (w.blk < 256 && total / w.blk > 4 * nth) w.blk *= 2; /* a few tasks per thread */
    for (int64_t r = 0; r < R; r++) w.first[r + 1] = w.first[r] + (b->pos[r] + w.blk) / w.blk;
    pdb_pool_run(b->pool, w.first[R], wide_scores, &w);
    stage(b, PDB_V2_ST_SCORES, t0);
    pdb_pool_run(b->pool, R * nh, wide_softmax, b);
    stage(b, PDB_V2_ST_SOFTMAX, t0);
    pdb_pool_run(b->pool, R * ((kvl + MIX_COLS - 1) / MIX_COLS), wide_mix, b);
    stage(b, PDB_V2_ST_MIX, t0);
    for (int64_t r = 0; r < R; r++)
        for (int64_t h = 0; h < nh; h++)
            b->ajobs[r * nh + h] = (pdb_qmat_job){&b->views[nh + h], b->wo + (r * nh + h) * kvl, kvl, 1, b->attn + r * nh * vd + h * vd, vd};
    pdb_qmat_matmul_multi(b->pool, b->ajobs, (int)(R * nh), b->rowbuf);
    stage(b, PDB_V2_ST_UV, t0);
}

/* ---- split tasks (decode on many cores: threads >= 2 x rows x heads) ---------------------------
 * The per-(row, head) task's five steps (head_step), each cut into parts that whichever of the
 * pair's P tasks is there claims: q_lat rows, score positions, the softmax (one part), o_lat
 * columns, W_UV rows; each step waits until all its parts are done. A task waits only for parts
 * that another task has claimed and is running, so no order of arrival deadlocks, and a pair's
 * lone task does every part itself. head_step computes each value the same for any number of
 * parts: row views of the same single-thread products, the same dot per score, the same fused
 * axpy per o_lat element in position order; the buffers are the stages' (wq, wo, wsc). State: hsync[k] is zeroed by the caller before the run;
 * claim[s] only grows, done[s] counts finished parts of step s (release / acquire). */

typedef struct {
    pdb_v2_batch *b;
    int64_t parts;
} split_ctx;

static void split_task(void *vc, int64_t task, int thread) {
    const split_ctx *s = vc;
    pdb_v2_batch *b = s->b;
    int64_t k = task % (b->R * b->w->cfg.num_heads);
    struct pdb_v2_head_sync *hs = &b->hsync[k];
    PDB_ASSERT(b->cache[k / b->w->cfg.num_heads].pos_offset == 0, "attention needs every row from position 0");
    const pdb_config *c = &b->w->cfg;
    float *mm = b->att_scratch + (int64_t)thread * b->att_stride;
    float *qlat = b->wq + k * (c->kv_lora_rank + c->qk_rope_head_dim), *olat = b->wo + k * c->kv_lora_rank, *sc = b->wsc + k * b->max_len;
    for (int step = 0; step < HEAD_STEPS; step++) {
        int parts = step == 2 ? 1 : (int)s->parts;
        for (int p; (p = atomic_fetch_add_explicit(&hs->claim[step], 1, memory_order_relaxed)) < parts;) {
            head_step(b, k, step, p, parts, qlat, sc, olat, mm);
            atomic_fetch_add_explicit(&hs->done[step], 1, memory_order_release);
        }
        while (atomic_load_explicit(&hs->done[step], memory_order_acquire) < parts) pdb_sys_cpu_relax();
    }
}

static void attention_split(pdb_v2_batch *b, int64_t parts) {
    int64_t jobs = b->R * b->w->cfg.num_heads;
    memset(b->hsync, 0, sizeof(*b->hsync) * (size_t)jobs);
    split_ctx s = {b, parts};
    pdb_pool_run(b->pool, jobs * parts, split_task, &s);
}

/* The attention form: 0 tasks, 1 stages, else the split tasks' parts per step. The stages and the
 * split tasks need their buffers (few rows, pdb_v2_batch_init); the stages win once the context is
 * long (each latent row read once for all heads instead of once per head), the tasks on short
 * contexts (one pool run per layer instead of five), and the split tasks there too when threads
 * would otherwise idle (rows x heads below half the threads). */
static int64_t attn_form(const pdb_v2_batch *b) {
    int path = b->w->opts ? b->w->opts->attn_path : PDB_V2_ATTN_AUTO;
    if (!b->wq || path == PDB_V2_ATTN_TASKS) return 0;
    if (path == PDB_V2_ATTN_STAGES) return 1;
    int64_t jobs = b->R * b->w->cfg.num_heads, parts = pdb_pool_threads(b->pool) / jobs;
    parts = parts < PDB_V2_SPLIT_MAX ? parts : PDB_V2_SPLIT_MAX;
    if (path == PDB_V2_ATTN_SPLIT) return parts > 2 ? parts : 2;
    int64_t longest = 0;
    for (int64_t r = 0; r < b->R; r++) longest = b->pos[r] + 1 > longest ? b->pos[r] + 1 : longest;
    if (longest > PDB_V2_TASK_MAX_POS) return 1;
    return parts >= 2 ? parts : 0;
}

void pdb_v2_ops_attention(pdb_v2_batch *b, int64_t l) {
    const pdb_v2_qweights *w = b->w;
    const pdb_config *c = &w->cfg;
    const pdb_v2_qlayer *L = &w->layers[l];
    int64_t R = b->R, H = c->hidden_size, nh = c->num_heads, nope = c->qk_nope_head_dim, qk = nope + c->qk_rope_head_dim;
    /* q (or q_a) and kv_a read the same input: one dispatch; then q_b after the q_a norm */
    int64_t qr = c->q_lora_rank, row = c->kv_lora_rank + c->qk_rope_head_dim;
    pdb_qmat_job jobs[2] = {{qr ? &L->q_a : &L->q_proj, b->xn, H, R, qr ? b->qa : b->q, qr ? qr : nh * qk},
                            {&L->kv_a, b->xn, H, R, b->kva, row}};
    double t0 = 0;
    stage(b, PDB_V2_ST_PROJ, &t0); /* (start) */
    pdb_qmat_matmul_multi(b->pool, jobs, 2, b->rowbuf);
    if (qr) {
        for (int64_t t = 0; t < R; t++) pdb_math_rmsnorm(b->qa + t * qr, b->qa + t * qr, L->q_a_norm, qr, c->rms_norm_eps);
        pdb_qmat_matmul(b->pool, &L->q_b, b->qa, qr, R, b->q, nh * qk, b->rowbuf);
    }
    stage(b, PDB_V2_ST_PROJ, &t0);
    int64_t rope = c->qk_rope_head_dim;
    for (int64_t t = 0; t < R; t++) pdb_rope_angles(&w->rope, b->pos[t], b->cs + t * rope); /* once per row, not per head */
    latent_finish(w, l, R, b->pos, b->cache, b->kva, b->cs); /* = pdb_v2_ops_latent_rows */
    for (int64_t t = 0; t < R; t++)
        for (int64_t h = 0; h < nh; h++) pdb_rope_apply_cs(&w->rope, b->cs + t * rope, b->q + t * nh * qk + h * qk + nope);
    b->layer = l;
    stage(b, PDB_V2_ST_LATENT, &t0);
    int64_t form = attn_form(b);
    if (form == 1) attention_wide(b, &t0);
    else {
        if (form) attention_split(b, form);
        else pdb_pool_run(b->pool, R * nh, attn_task, b);
        stage(b, PDB_V2_ST_SCORES, &t0); /* the (split) per-(row, head) tasks: all of the attention core */
    }
    pdb_qmat_matmul(b->pool, &L->o_proj, b->attn, nh * c->v_head_dim, R, b->tmp, H, b->rowbuf);
    for (int64_t i = 0; i < R * H; i++) b->h[i] += b->tmp[i];
    stage(b, PDB_V2_ST_OPROJ, &t0);
}

/* The post of a gate/up gang (gang[0] gate, gang[1] up; pdb_qmat_matmul_gangs): g = silu(g) * u
 * on the rows its claim computed; elementwise, so the same values as one pass after the dispatch. */
static void silu_post(const pdb_qmat_job *gang, int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < gang[0].n; t++) {
        float *g = gang[0].y + t * gang[0].ldy + r0;
        pdb_math_silu_mul(g, g, gang[1].y + t * gang[1].ldy + r0, r1 - r0);
    }
}

/* out [n, H] = down(silu(x gate^T) * (x up^T)): gate and up in one dispatch, SiLU in it */
static void mlp(pdb_v2_batch *b, const pdb_qmat *gate, const pdb_qmat *up, const pdb_qmat *down, const float *x,
                int64_t n, float *out, double *t0) {
    int64_t H = b->w->cfg.hidden_size, I = gate->rows;
    pdb_qmat_job gu[2] = {{gate, x, H, n, b->g, I}, {up, x, H, n, b->u, I}};
    pdb_qmat_matmul_gangs(b->pool, gu, 2, 2, silu_post, b->rowbuf);
    stage(b, PDB_V2_ST_GU, t0);
    pdb_qmat_matmul(b->pool, down, b->g, I, n, out, H, b->rowbuf);
    stage(b, PDB_V2_ST_DOWN, t0);
}

/* Routed and shared experts in two dispatches: every gate and up projection (SiLU in its claims),
 * then every down projection (each job is the matmul the expert's own mlp() would run, on the same rows). Routed
 * expert e takes its rows in slot order at row offset o_e of the expert-major lists (erows, xe,
 * g/u at o_e * Im); the shared experts' g/u follow at R * K * Im. */
static void moe(pdb_v2_batch *b, const pdb_v2_qlayer *L, double *t0) {
    const pdb_config *c = &b->w->cfg;
    int64_t R = b->R, H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok, Im = c->moe_intermediate_size;
    pdb_qmat_matmul(b->pool, &L->router, b->xn, H, R, b->probs, E, b->rowbuf);
    for (int64_t t = 0; t < R; t++) pdb_v2_route(c, b->probs + t * E, b->topk_idx + t * K, b->topk_w + t * K);
    pdb_qmat_job *gu = b->jobs, *dn = b->jobs + 2 * (E + 1); /* gate/up jobs in pairs; down jobs */
    int ne = 0;
    int64_t o = 0;
    for (int64_t e = 0; e < E; e++) { /* expert e on the rows routed to it; its outputs go to slots erows[o ..] */
        int64_t n = 0;
        for (int64_t s = 0; s < R * K; s++)
            if (b->topk_idx[s] == e) b->erows[o + n++] = s;
        if (!n) continue;
        const float *x = b->xn + (b->erows[o] / K) * H; /* one row: read it in place */
        if (n > 1) {
            for (int64_t i = 0; i < n; i++) memcpy(b->xe + (o + i) * H, b->xn + (b->erows[o + i] / K) * H, sizeof(float) * (size_t)H);
            x = b->xe + o * H;
        }
        float *g = b->g + o * Im, *u = b->u + o * Im;
        gu[2 * ne] = (pdb_qmat_job){&L->eg[e], x, H, n, g, Im};
        gu[2 * ne + 1] = (pdb_qmat_job){&L->eu[e], x, H, n, u, Im};
        dn[ne++] = (pdb_qmat_job){&L->ed[e], g, Im, n, b->xe + o * H, H}; /* xe is free once gate/up ran */
        o += n;
    }
    int shared = c->n_shared_experts > 0, nj = ne;
    float *sg = b->g + R * K * Im, *su = b->u + R * K * Im;
    if (shared) {
        int64_t Is = L->sg.rows;
        gu[2 * nj] = (pdb_qmat_job){&L->sg, b->xn, H, R, sg, Is};
        gu[2 * nj + 1] = (pdb_qmat_job){&L->su, b->xn, H, R, su, Is};
        dn[nj++] = (pdb_qmat_job){&L->sd, sg, Is, R, b->tmp, H};
    }
    stage(b, PDB_V2_ST_ROUTER, t0);
    pdb_qmat_matmul_gangs(b->pool, gu, 2 * nj, 2, silu_post, b->rowbuf);
    stage(b, PDB_V2_ST_GU, t0);
    pdb_qmat_matmul_multi(b->pool, dn, nj, b->rowbuf);
    stage(b, PDB_V2_ST_DOWN, t0);
    for (int64_t i = 0; i < o; i++) b->slot_row[b->erows[i]] = i;
    for (int64_t t = 0; t < R; t++) { /* combine in top-k order (a fixed order per element), element loops innermost */
        float *out = b->mlp + t * H;
        for (int64_t j = 0; j < H; j++) out[j] = 0;
        for (int64_t k = 0; k < K; k++) {
            const float *y = b->xe + b->slot_row[t * K + k] * H, wk = b->topk_w[t * K + k];
            for (int64_t j = 0; j < H; j++) out[j] = out[j] + y[j] * wk;
        }
    }
    if (shared)
        for (int64_t i = 0; i < R * H; i++) b->mlp[i] = b->mlp[i] + b->tmp[i];
}

void pdb_v2_ops_ffn(pdb_v2_batch *b, int64_t l) {
    const pdb_config *c = &b->w->cfg;
    const pdb_v2_qlayer *L = &b->w->layers[l];
    int64_t H = c->hidden_size;
    double t0 = 0;
    stage(b, PDB_V2_ST_NORM, &t0); /* (start) */
    for (int64_t t = 0; t < b->R; t++) pdb_math_rmsnorm(b->xn + t * H, b->h + t * H, L->ffn_norm, H, c->rms_norm_eps);
    stage(b, PDB_V2_ST_NORM, &t0);
    if (L->is_moe) moe(b, L, &t0);
    else mlp(b, &L->gate, &L->up, &L->down, b->xn, b->R, b->mlp, &t0);
    for (int64_t i = 0; i < b->R * H; i++) b->h[i] += b->mlp[i];
    stage(b, PDB_V2_ST_COMBINE, &t0);
}

void pdb_v2_ops_logits(pdb_v2_batch *b, int64_t r, float *logits) {
    const pdb_config *c = &b->w->cfg;
    int64_t H = c->hidden_size;
    pdb_math_rmsnorm(b->tmp, b->h + r * H, b->w->final_norm, H, c->rms_norm_eps);
    pdb_qmat_matmul(b->pool, &b->w->lm_head, b->tmp, H, 1, logits, c->vocab_size, b->rowbuf);
}
