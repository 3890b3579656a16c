/* pdb_v4: the DeepSeek-V4 forward (hyper-connections -> attention with sliding window, CSA or
 * HCA -> hyper-connections -> MoE), readable top to bottom: products -> cache -> hyper-connections
 * -> compressor -> indexer -> attention -> MoE -> layer -> forward. Activations are f32 with
 * reductions in double; every product with a weight is pdb_qmat's fixed-order dot on the stored
 * format, the independent products of one step in one dispatch (pdb_qmat_matmul_multi, the
 * experts' gate/up as gangs with the SwiGLU as their post), bit-identical to one product at a
 * time; so the per-token cache updates do not depend on how a prompt is chunked or batched. The
 * sums that are not weight products run many chains at once (pdb_v4_dots; the same sums in the
 * same order, docs/v4.md §9). See
 * pdb_v4.h for the pools and docs/v4.md. */
#include "pdb_v4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_math.h"
#include "pdb_v4_dots.h"
#include "pdb_v4_iscore.h"
#include "pdb_v4_qsim.h"

/* ======================================== products ======================================== */

/* jobs[0 .. n) (gangs of `gang` members, post after each gang's rows: pdb_qmat_matmul_gangs)
 * where the execution context puts them: its provider, one product per job (then every gang's
 * post over all its rows), else pdb_qmat on the pool's threads in one dispatch. Each element is
 * the same either way (the provider contract). */
static pdb_status v4_run(const pdb_v4_exec *ex, const pdb_qmat_job *jobs, int n, int gang, pdb_qmat_post_fn post) {
    if (ex->mm) {
        for (int i = 0; i < n; i++)
            if (jobs[i].n > 0 && jobs[i].w->rows > 0)
                PDB_TRY(ex->mm->mm(ex->mm->ctx, jobs[i].n, jobs[i].x, jobs[i].ldx, jobs[i].w, jobs[i].y, jobs[i].ldy));
        if (post)
            for (int g = 0; g < n; g += gang) {
                int any = 0;
                for (int k = 0; k < gang; k++) any |= jobs[g + k].n > 0 && jobs[g + k].w->rows > 0;
                if (any) post(&jobs[g], 0, jobs[g].w->rows);
            }
        return PDB_OK;
    }
    int64_t widest = 1;
    for (int i = 0; i < n; i++)
        if (jobs[i].w->cols > widest) widest = jobs[i].w->cols;
    float *rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(pdb_pool_threads(ex->pool), widest));
    if (!rowbuf) return pdb_err_set(PDB_NOMEM, "v4 products: out of memory for the row scratch");
    pdb_qmat_matmul_gangs(ex->pool, jobs, n, gang, post, rowbuf);
    free(rowbuf);
    return PDB_OK;
}

/* One product y [n, ldy] = x [n, ldx] @ w^T. */
static pdb_status v4_mm(const pdb_v4_exec *ex, const pdb_qmat *w, const float *x, int64_t ldx, int64_t n, float *y,
                        int64_t ldy) {
    pdb_qmat_job j = {w, x, ldx, n, y, ldy};
    return v4_run(ex, &j, 1, 1, NULL);
}

pdb_status pdb_v4_mm_ref(int64_t M, const float *A, int64_t lda, const pdb_qmat *W, float *C, int64_t ldc) {
    pdb_v4_exec ex = {0};
    return v4_mm(&ex, W, A, lda, M, C, ldc);
}

/* ======================================== semantics / cache ======================================== */

pdb_status pdb_v4_semantics_parse(const char *s, pdb_v4_semantics *out) {
    if (s && !strcmp(s, "official")) { *out = PDB_V4_SEM_OFFICIAL; return PDB_OK; }
    if (s && !strcmp(s, "exact")) { *out = PDB_V4_SEM_EXACT; return PDB_OK; }
    return pdb_err_set(PDB_INVALID, "v4 semantics '%s' is not one of official, exact", s ? s : "(null)");
}

const char *pdb_v4_semantics_name(pdb_v4_semantics s) { return s == PDB_V4_SEM_EXACT ? "exact" : "official"; }

pdb_status pdb_v4_check_semantics(const pdb_config *c, pdb_v4_semantics sem) {
    if (sem != PDB_V4_SEM_OFFICIAL) return PDB_OK;
    int64_t nope = c->head_dim - c->qk_rope_head_dim, ihd = c->index_head_dim;
    if (nope % 64)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 official semantics: head_dim - rotary dims = %lld is not a multiple of 64 "
                           "(FP8 blocks); use --v4-semantics exact", (long long)nope);
    int any_csa = 0;
    for (int64_t l = 0; l < c->num_layers; l++) any_csa |= c->v4_attn[l] == PDB_V4_ATTN_CSA;
    if (any_csa && (ihd % 32 || (ihd & (ihd - 1)) || ihd > 2048))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 official semantics: index_head_dim = %lld must be a power of two, a "
                           "multiple of 32 (Hadamard + FP4 blocks) and at most 2048 (the FP4 key scores, pdb_v4_iscore); "
                           "use --v4-semantics exact", (long long)ihd);
    return PDB_OK;
}

static float *falloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static uint8_t *balloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), 1); }

void pdb_v4_cache_free(pdb_v4_cache *c) {
    if (c->layers)
        for (int64_t l = 0; l < c->n_layers; l++) {
            pdb_v4_layer_cache *lc = &c->layers[l];
            void *f[] = {lc->win, lc->comp, lc->ikeys, lc->buf_kv, lc->buf_gate, lc->ov_kv, lc->ov_gate,
                         lc->ibuf_kv, lc->ibuf_gate, lc->iov_kv, lc->iov_gate};
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
        }
    free(c->layers);
    memset(c, 0, sizeof *c);
}

pdb_status pdb_v4_cache_init(pdb_v4_cache *c, const pdb_v4_model *m, int64_t cap, pdb_v4_semantics sem) {
    memset(c, 0, sizeof *c);
    const pdb_config *cf = &m->cfg;
    PDB_TRY(pdb_v4_check_semantics(cf, sem));
    if (cap <= 0 || cap > (1LL << 31)) return pdb_err_set(PDB_INVALID, "v4 cache: capacity %lld is impossible", (long long)cap);
    int64_t hd = cf->head_dim, ihd = cf->index_head_dim, W = cf->sliding_window;
    c->cap = cap;
    c->sem = sem;
    c->kv_row = pdb_v4_row_kv(cf, (int)sem);
    c->ik_row = pdb_v4_row_ikey(cf, (int)sem);
    int64_t kvb = c->kv_row.bytes, ikb = c->ik_row.bytes;
    c->window = W;
    c->n_layers = cf->num_layers;
    c->layers = calloc((size_t)cf->num_layers, sizeof *c->layers);
    if (!c->layers) return pdb_err_set(PDB_NOMEM, "v4 cache: out of memory");
    for (int64_t l = 0; l < cf->num_layers; l++) {
        const pdb_v4_layer *L = &m->layers[l];
        pdb_v4_layer_cache *lc = &c->layers[l];
        int ok = (lc->win = balloc(W * kvb)) != NULL;
        if (L->rate) {
            int64_t n = cap / L->rate + 1, r = L->rate, coff = L->comp.coff;
            ok = ok && (lc->comp = balloc(n * kvb)) && (lc->buf_kv = falloc(r * coff * hd)) &&
                 (lc->buf_gate = falloc(r * coff * hd));
            if (L->attn == PDB_V4_ATTN_CSA)
                ok = ok && (lc->ov_kv = falloc(r * hd)) && (lc->ov_gate = falloc(r * hd)) && (lc->ikeys = balloc(n * ikb)) &&
                     (lc->ibuf_kv = falloc(r * 2 * ihd)) && (lc->ibuf_gate = falloc(r * 2 * ihd)) &&
                     (lc->iov_kv = falloc(r * ihd)) && (lc->iov_gate = falloc(r * ihd));
        }
        if (!ok) {
            pdb_v4_cache_free(c);
            return pdb_err_set(PDB_NOMEM, "v4 cache: out of memory for %lld positions", (long long)cap);
        }
    }
    return PDB_OK;
}

/* ======================================== hyper-connections ======================================== */

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* RMS-normalised copy of the flattened streams hs[n] into tmp[n] (no weight). */
static void unweighted_norm(float *tmp, const float *hs, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)hs[i] * hs[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) tmp[i] = hs[i] * r;
}

/* One token's mHC mapping: hs [hc, H] -> collapsed x [H], post [hc], comb [hc, hc] (comb[j][k] is
 * the weight of old stream j in new stream k), in three parts so that a lone token's mixing
 * products can run on the pool: hc_norm (tmp [hc*H] = the RMS-normalised streams), hc_mixes
 * (mixes[j] = fn row j . tmp for rows [j0, j1), each a sequential double sum), hc_finish.
 * Sinkhorn: softmax rows + eps, normalise columns, then iters-1 x (rows, columns), each with
 * + eps in the denominator. */
static void hc_norm(const pdb_config *c, const float *hs, float *tmp) {
    unweighted_norm(tmp, hs, c->hc_mult * c->hidden_size, c->rms_norm_eps);
}

static void hc_mixes(const pdb_config *c, const float *fn, const float *tmp, int64_t j0, int64_t j1, float *mixes) {
    int64_t n = c->hc_mult * c->hidden_size;
    pdb_v4_dotd_rows(fn + j0 * n, n, NULL, j1 - j0, tmp, n, mixes + j0);
}

static void hc_finish(const pdb_config *c, const float *base, const float *scale, const float *mixes, const float *hs,
                      float *x, float *post, float *comb) {
    int64_t hc = c->hc_mult, H = c->hidden_size;
    float eps = (float)c->hc_eps, pre[64];
    for (int64_t k = 0; k < hc; k++) {
        pre[k] = sigmoidf(mixes[k] * scale[0] + base[k]) + eps;
        post[k] = 2.0f * sigmoidf(mixes[hc + k] * scale[1] + base[hc + k]);
    }
    for (int64_t i = 0; i < hc; i++) {
        float *row = comb + i * hc;
        for (int64_t j = 0; j < hc; j++) row[j] = mixes[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
        pdb_math_softmax(row, hc);
        for (int64_t j = 0; j < hc; j++) row[j] += eps;
    }
    for (int64_t it = 0; it < c->hc_sinkhorn_iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < hc; i++) {
                double s = 0;
                for (int64_t j = 0; j < hc; j++) s += comb[i * hc + j];
                float d = (float)s + eps;
                for (int64_t j = 0; j < hc; j++) comb[i * hc + j] /= d;
            }
        for (int64_t j = 0; j < hc; j++) {
            double s = 0;
            for (int64_t i = 0; i < hc; i++) s += comb[i * hc + j];
            float d = (float)s + eps;
            for (int64_t i = 0; i < hc; i++) comb[i * hc + j] /= d;
        }
    }
    for (int64_t d = 0; d < H; d++) {
        double s = 0;
        for (int64_t k = 0; k < hc; k++) s += (double)pre[k] * hs[k * H + d];
        x[d] = (float)s;
    }
}

/* hs [hc, H] <- post[k] * out + sum_j comb[j][k] * hs[j], columns [d0, d1) (each column reads
 * only its own old values, so column ranges are independent). */
static void hc_post(const pdb_config *c, float *hs, const float *out, const float *post, const float *comb, int64_t d0,
                    int64_t d1) {
    int64_t hc = c->hc_mult, H = c->hidden_size;
    float old[64];
    for (int64_t d = d0; d < d1; d++) {
        for (int64_t j = 0; j < hc; j++) old[j] = hs[j * H + d];
        for (int64_t k = 0; k < hc; k++) {
            double s = (double)post[k] * out[d];
            for (int64_t j = 0; j < hc; j++) s += (double)comb[j * hc + k] * old[j];
            hs[k * H + d] = (float)s;
        }
    }
}

/* Final collapse of the streams (weights from sigmoid only) into y [H]. tmp: [hc*H]. */
static void hc_head(const pdb_v4_model *m, const float *hs, float *y, float *tmp) {
    const pdb_config *c = &m->cfg;
    int64_t hc = c->hc_mult, H = c->hidden_size, n = hc * H;
    float pre[64], mix[64];
    unweighted_norm(tmp, hs, n, c->rms_norm_eps);
    pdb_v4_dotd_rows(m->hc_head_fn, n, NULL, hc, tmp, n, mix);
    for (int64_t k = 0; k < hc; k++) pre[k] = sigmoidf(mix[k] * m->hc_head_scale[0] + m->hc_head_base[k]) + (float)c->hc_eps;
    for (int64_t d = 0; d < H; d++) {
        double s = 0;
        for (int64_t k = 0; k < hc; k++) s += (double)pre[k] * hs[k * H + d];
        y[d] = (float)s;
    }
}

/* ======================================== compressor ======================================== */

typedef enum { QSIM_NONE, QSIM_FP8_NOPE, QSIM_FP4_ROT } qsim_kind;

/* Rope (trailing rd dims) at pos, then the semantics' rounding, on one row of width dim. */
static void finish_row(float *row, int64_t dim, const pdb_rope *rope, int64_t pos, qsim_kind q) {
    pdb_rope_apply(rope, row + dim - rope->dim, pos);
    if (q == QSIM_FP8_NOPE) pdb_v4_qsim_fp8(row, dim - rope->dim);
    else if (q == QSIM_FP4_ROT) {
        pdb_v4_qsim_hadamard(row, dim);
        pdb_v4_qsim_fp4(row, dim);
    }
}

/* Feed T tokens (projections kvp/gp [T, coff*dim]) at positions p0.. into one compressor's
 * buffer; each time a window of `rate` tokens is full, emit entry w = p / rate into entries (rows
 * of format row): softmax over the window's slots (CSA: the previous window's overlap half first,
 * weight 0 for w == 0, then the current window's second half) of gate + ape, per dim, weighting
 * kv; then RMSNorm, RoPE at position w * rate, and the semantics' rounding, computed in f32 and
 * stored as the row. The definition is sequential (the buffers hold the unfinished window, the
 * overlap halves the last finished one); the entries are computed on the pool's threads, one
 * window per task, each reading its rows where the sequential form would find them (this chunk's
 * projections, the buffer, or the overlap halves) with the same arithmetic, so the bits are the
 * sequential ones whatever the thread count. */
typedef struct comp_job {
    const pdb_config *c;
    const pdb_v4_compressor *cp;
    const pdb_rope *rope;
    qsim_kind q;
    const float *kvp, *gp;              /* this chunk's projections [T, D] */
    const float *buf_kv, *buf_gate;     /* the unfinished window before the chunk (slots < p0 % rate) */
    const float *ov_kv, *ov_gate;       /* the overlap halves of window p0 / rate - 1 */
    int64_t p0, w_lo;
    const pdb_v4_row *row;
    uint8_t *entries;
    float *e;                           /* [threads, dim] */
    int64_t *bad;                       /* [threads] */
} comp_job;

/* Position q's kv and gate (+ ape) values at column i, for q in the chunk or in the unfinished
 * window before it. */
static float comp_kv(const comp_job *j, int64_t q, int64_t i) {
    int64_t D = j->cp->coff * j->cp->dim;
    return q >= j->p0 ? j->kvp[(q - j->p0) * D + i] : j->buf_kv[(q % j->cp->rate) * D + i];
}

static float comp_gate(const comp_job *j, int64_t q, int64_t i) {
    int64_t D = j->cp->coff * j->cp->dim, s = q % j->cp->rate;
    return q >= j->p0 ? j->gp[(q - j->p0) * D + i] + j->cp->ape[s * D + i] : j->buf_gate[s * D + i];
}

static void comp_task(void *ctx, int64_t task, int thread) {
    const comp_job *j = ctx;
    const pdb_v4_compressor *cp = j->cp;
    int64_t r = cp->rate, dim = cp->dim, w = j->w_lo + task, off = cp->coff == 2 ? dim : 0;
    int prev = cp->coff == 2 && w > 0;
    int prev_ov = prev && w - 1 < j->p0 / r; /* the previous window finished before the chunk */
    float *e = j->e + thread * dim;
    for (int64_t d = 0; d < dim; d++) {
        float mx = -INFINITY;
        for (int64_t k = 0; k < r; k++) {
            if (prev) mx = fmaxf(mx, prev_ov ? j->ov_gate[k * dim + d] : comp_gate(j, (w - 1) * r + k, d));
            mx = fmaxf(mx, comp_gate(j, w * r + k, off + d));
        }
        double den = 0, num = 0;
        for (int64_t k = 0; k < r; k++) {
            if (prev) {
                float pg = prev_ov ? j->ov_gate[k * dim + d] : comp_gate(j, (w - 1) * r + k, d);
                float pk = prev_ov ? j->ov_kv[k * dim + d] : comp_kv(j, (w - 1) * r + k, d);
                double ex = exp((double)pg - mx);
                den += ex;
                num += ex * pk;
            }
            double ex = exp((double)comp_gate(j, w * r + k, off + d) - mx);
            den += ex;
            num += ex * comp_kv(j, w * r + k, off + d);
        }
        e[d] = (float)(num / den);
    }
    pdb_math_rmsnorm(e, e, cp->norm, dim, j->c->rms_norm_eps);
    finish_row(e, dim, j->rope, w * r, j->q);
    j->bad[thread] += pdb_v4_row_encode(j->row, e, j->entries + w * j->row->bytes);
}

static int64_t compress_tokens(const pdb_v4_exec *ex, const pdb_config *c, const pdb_v4_compressor *cp, const pdb_rope *rope,
                               qsim_kind q, const float *kvp, const float *gp, int64_t T, int64_t p0, float *buf_kv,
                               float *buf_gate, float *ov_kv, float *ov_gate, const pdb_v4_row *row, uint8_t *entries,
                               pdb_status *err) {
    int64_t r = cp->rate, dim = cp->dim, D = cp->coff * dim, w_lo = p0 / r, w_hi = (p0 + T) / r;
    int nth = pdb_pool_threads(ex->pool);
    comp_job j = {c, cp, rope, q, kvp, gp, buf_kv, buf_gate, ov_kv, ov_gate, p0, w_lo, row, entries,
                  falloc((int64_t)nth * dim), calloc((size_t)nth, sizeof(int64_t))};
    if (!j.e || !j.bad) {
        free(j.e);
        free(j.bad);
        *err = pdb_err_set(PDB_NOMEM, "v4 compressor: out of memory");
        return 0;
    }
    if (w_hi > w_lo) pdb_pool_run(ex->pool, w_hi - w_lo, comp_task, &j);
    int64_t bad = 0;
    for (int t = 0; t < nth; t++) bad += j.bad[t];
    /* the state the sequential form leaves: the overlap halves of the last finished window (read
     * before the buffer changes), then the buffer slots of the chunk's last positions */
    if (cp->coff == 2 && w_hi > w_lo) {
        int64_t wl = w_hi - 1;
        for (int64_t k = 0; k < r; k++)
            for (int64_t d = 0; d < dim; d++) {
                float kv = comp_kv(&j, wl * r + k, d), g = comp_gate(&j, wl * r + k, d);
                ov_kv[k * dim + d] = kv;
                ov_gate[k * dim + d] = g;
            }
    }
    for (int64_t p = (T > r ? p0 + T - r : p0); p < p0 + T; p++) {
        int64_t s = p % r, t = p - p0;
        memcpy(buf_kv + s * D, kvp + t * D, sizeof(float) * (size_t)D);
        for (int64_t i = 0; i < D; i++) buf_gate[s * D + i] = gp[t * D + i] + cp->ape[s * D + i];
    }
    free(j.e);
    free(j.bad);
    return bad;
}

/* ======================================== indexer ======================================== */

/* One layer's indexer over T queries (see run_indexer). */
typedef struct v4_idx_job {
    const pdb_v4_layer *L;
    const pdb_v4_layer_cache *lc;
    float *iq;
    const float *hw;      /* [T, nih] the head weights' projection times 1/sqrt(nih) */
    int32_t *sel;
    int64_t *nsel;
    float *sc;            /* scores: [threads, sc_stride] (a token per task) or [nv] (one token's keys per task) */
    char *tk;             /* top-k scratch: [threads, tk_stride] bytes */
    const pdb_v4_row *ikr; /* the keys' row format */
    char *iqb;            /* prepared queries (pdb_v4_iscore): [threads or 1, iq_bytes] */
    int64_t iq_bytes;
    int64_t sc_stride, tk_stride, p0, r, K, nih, ihd, t, nv, chunk;
    float sscale;
    qsim_kind q;
} v4_idx_job;

/* Token t's query heads rotated and rounded in place; its visible entries' count. */
static int64_t idx_query(const v4_idx_job *j, int64_t t) {
    int64_t p = j->p0 + t, nv = (p + 1) / j->r;
    if (nv > j->K)
        for (int64_t h = 0; h < j->nih; h++) finish_row(j->iq + (t * j->nih + h) * j->ihd, j->ihd, j->L->rope, p, j->q);
    return nv;
}

static void idx_pick_all(const v4_idx_job *j, int64_t t, int64_t nv) {
    for (int64_t w = 0; w < nv; w++) j->sel[t * j->K + w] = (int32_t)w;
    j->nsel[t] = nv;
}

static void idx_task(void *ctx, int64_t t, int thread) { /* token t on one thread */
    const v4_idx_job *j = ctx;
    int64_t nv = idx_query(j, t);
    if (nv <= j->K) { idx_pick_all(j, t, nv); return; }
    float *sc = j->sc + (int64_t)thread * j->sc_stride;
    char *iq = j->iqb + (int64_t)thread * j->iq_bytes;
    pdb_v4_iscore_prepare(j->ikr, j->iq + t * j->nih * j->ihd, j->hw + t * j->nih, j->nih, j->sscale, iq);
    pdb_v4_iscore(iq, j->lc->ikeys, 0, nv, sc);
    pdb_v4_topk(sc, nv, j->K, j->sel + t * j->K, j->tk + (int64_t)thread * j->tk_stride);
    j->nsel[t] = j->K;
}

static void idx_keys_task(void *ctx, int64_t c, int thread) { /* keys [c * chunk, ..) of token j->t */
    (void)thread;
    const v4_idx_job *j = ctx;
    int64_t w0 = c * j->chunk, w1 = w0 + j->chunk < j->nv ? w0 + j->chunk : j->nv;
    pdb_v4_iscore(j->iqb, j->lc->ikeys, w0, w1, j->sc + w0);
}

/* For each of the T queries pick its compressed entries: all nv = (p+1)/rate when nv <= topk, else
 * the topk highest scores sum_h w_h * relu(q_h . k_w) / sqrt(ihd), equal scores by lower index.
 * sel [T, topk] (entry ids, best first), nsel [T]. iq [T, nih*ihd] (the queries' projection,
 * rotated and rounded here in place), wt [T, nih] (the head weights' projection). Fewer queries
 * than threads (decode): each query's keys in chunks on the pool's threads; else the queries on
 * the threads. Every score is pdb_v4_index_scores' (a sequential double sum per head) either way. */
static pdb_status run_indexer(const pdb_v4_model *m, const pdb_v4_exec *ex, const pdb_v4_layer *L, const pdb_v4_layer_cache *lc,
                              const pdb_v4_row *ikr, qsim_kind q,
                              float *iq, const float *wt, int64_t T, int64_t p0, int32_t *sel, int64_t *nsel) {
    const pdb_config *c = &m->cfg;
    int64_t nih = c->index_n_heads, ihd = c->index_head_dim;
    int64_t K = c->index_topk, r = L->rate;
    int64_t nmax = (p0 + T) / r, nth = pdb_pool_threads(ex->pool), stride = nmax > 0 ? nmax : 1;
    int keys = T < nth; /* the keys of one query at a time on the pool */
    int64_t nsc = keys ? 1 : nth, tks = pdb_v4_topk_scratch_bytes(stride);
    int64_t iqs = pdb_v4_iscore_query_bytes(nih, ihd);
    float *sc = malloc(sizeof(float) * (size_t)(stride * nsc)), *hw = falloc(T * nih);
    char *tk = malloc((size_t)(tks * nsc)), *iqb = malloc((size_t)(iqs * nsc));
    if (!sc || !hw || !tk || !iqb) {
        free(sc), free(hw), free(tk), free(iqb);
        return pdb_err_set(PDB_NOMEM, "v4 indexer: out of memory");
    }
    float wscale = (float)(1.0 / sqrt((double)nih));
    for (int64_t i = 0; i < T * nih; i++) hw[i] = wt[i] * wscale;
    v4_idx_job j = {.L = L, .lc = lc, .iq = iq, .hw = hw, .sel = sel, .nsel = nsel, .sc = sc, .tk = tk, .ikr = ikr, .iqb = iqb,
                    .iq_bytes = iqs, .sc_stride = stride,
                    .tk_stride = tks, .p0 = p0, .r = r, .K = K, .nih = nih, .ihd = ihd, .q = q, .chunk = 256,
                    .sscale = (float)(1.0 / sqrt((double)ihd))};
    if (!keys) pdb_pool_run(ex->pool, T, idx_task, &j);
    else
        for (int64_t t = 0; t < T; t++) {
            j.t = t;
            j.nv = idx_query(&j, t);
            if (j.nv <= K) { idx_pick_all(&j, t, j.nv); continue; }
            pdb_v4_iscore_prepare(ikr, iq + t * nih * ihd, hw + t * nih, nih, j.sscale, iqb);
            pdb_pool_run(ex->pool, (j.nv + j.chunk - 1) / j.chunk, idx_keys_task, &j);
            pdb_v4_topk(sc, j.nv, K, sel + t * K, tk);
            nsel[t] = K;
        }
    free(sc);
    free(hw);
    free(tk);
    free(iqb);
    return PDB_OK;
}

/* ======================================== cache feed (the decoder's pools) ======================================== */

/* The feed's products of R rows x [R, H]: kv [R, hd] (wkv), kvp / gp [R, coff*hd] (the compressor's
 * wkv / wgate, compressed layers), ikvp / igp [R, 2*ihd] (the indexer's compressor, CSA), with
 * `extra` products (the attention's q_a) in the same dispatch. */
static pdb_status feed_products(const pdb_v4_exec *ex, const pdb_v4_layer *L, int64_t H, const float *x, int64_t R, float *kv,
                                float *kvp, float *gp, float *ikvp, float *igp, const pdb_qmat_job *extra, int n_extra) {
    pdb_qmat_job jobs[5 + 1];
    PDB_ASSERT(n_extra <= 1, "v4 feed: one extra product at most");
    int nj = 0;
    int64_t D = L->rate ? L->comp.coff * L->comp.dim : 0, ID = L->attn == PDB_V4_ATTN_CSA ? L->icomp.coff * L->icomp.dim : 0;
    jobs[nj++] = (pdb_qmat_job){&L->wkv, x, H, R, kv, L->wkv.rows};
    if (D) {
        jobs[nj++] = (pdb_qmat_job){&L->comp.wkv, x, H, R, kvp, D};
        jobs[nj++] = (pdb_qmat_job){&L->comp.wgate, x, H, R, gp, D};
    }
    if (ID) {
        jobs[nj++] = (pdb_qmat_job){&L->icomp.wkv, x, H, R, ikvp, ID};
        jobs[nj++] = (pdb_qmat_job){&L->icomp.wgate, x, H, R, igp, ID};
    }
    for (int i = 0; i < n_extra; i++) jobs[nj++] = extra[i];
    return v4_run(ex, jobs, nj, 1, NULL);
}

/* K=V rows of feed_steps, a row per task: RMSNorm, RoPE and the semantics' rounding in place. */
typedef struct kvrow_job {
    const pdb_config *c;
    const pdb_v4_layer *L;
    float *kv;
    int64_t p0, t0;
    qsim_kind q;
} kvrow_job;

static void kvrow_task(void *ctx, int64_t task, int thread) {
    const kvrow_job *j = ctx;
    (void)thread;
    int64_t hd = j->c->head_dim, t = j->t0 + task;
    pdb_math_rmsnorm(j->kv + t * hd, j->kv + t * hd, j->L->kv_norm, hd, j->c->rms_norm_eps);
    finish_row(j->kv + t * hd, hd, j->L->rope, j->p0 + t, j->q);
}

/* The feed's per-token steps for one sequence's T tokens at positions cc->len..: kv rows [T, hd]
 * normed, RoPE'd and rounded in place (all of them with `all`, else only the last W, the ones the
 * window keeps), then into the window (as the cache's kv rows); the compressors fed from kvp / gp
 * and ikvp / igp (feed_products' outputs for these tokens). On the cache's pool threads; every
 * value is the sequential definition's. A row the cache's format cannot hold exactly (never, by
 * pdb_v4_rows' invariant) fails the feed. */
static pdb_status feed_steps(const pdb_v4_model *m, pdb_v4_cache *cc, int64_t l, float *kv, const float *kvp, const float *gp,
                             const float *ikvp, const float *igp, int64_t T, int all) {
    const pdb_config *c = &m->cfg;
    const pdb_v4_layer *L = &m->layers[l];
    pdb_v4_layer_cache *lc = &cc->layers[l];
    int64_t hd = c->head_dim, W = c->sliding_window, p0 = cc->len, t0 = all || T <= W ? 0 : T - W;
    int official = cc->sem == PDB_V4_SEM_OFFICIAL;
    kvrow_job kj = {c, L, kv, p0, t0, official ? QSIM_FP8_NOPE : QSIM_NONE};
    pdb_pool_run(cc->exec.pool, T - t0, kvrow_task, &kj);
    /* compressed entries (and the indexer's keys) of every window completed by this chunk */
    int64_t bad = 0;
    pdb_status s = PDB_OK;
    if (L->rate)
        bad += compress_tokens(&cc->exec, c, &L->comp, L->rope, official ? QSIM_FP8_NOPE : QSIM_NONE, kvp, gp, T, p0, lc->buf_kv,
                               lc->buf_gate, lc->ov_kv, lc->ov_gate, &cc->kv_row, lc->comp, &s);
    if (!s && L->attn == PDB_V4_ATTN_CSA)
        bad += compress_tokens(&cc->exec, c, &L->icomp, L->rope, official ? QSIM_FP4_ROT : QSIM_NONE, ikvp, igp, T, p0,
                               lc->ibuf_kv, lc->ibuf_gate, lc->iov_kv, lc->iov_gate, &cc->ik_row, lc->ikeys, &s);
    PDB_TRY(s);
    for (int64_t p = (p0 + T - W > p0 ? p0 + T - W : p0); p < p0 + T; p++)
        bad += pdb_v4_row_encode(&cc->kv_row, kv + (p - p0) * hd, lc->win + (p % W) * cc->kv_row.bytes);
    if (bad)
        return pdb_err_set(PDB_CORRUPT, "v4 cache feed: layer %lld: %lld values are not exact in the cache's %s rows",
                           (long long)l, (long long)bad, pdb_v4_semantics_name(cc->sem));
    return PDB_OK;
}

/* Scratch of the feed's products for R rows (feed_alloc / feed_free). */
typedef struct v4_feedbuf { float *kv, *kvp, *gp, *ikvp, *igp; } v4_feedbuf;

static void feed_free(v4_feedbuf *f) {
    free(f->kv); free(f->kvp); free(f->gp); free(f->ikvp); free(f->igp);
    memset(f, 0, sizeof *f);
}

static pdb_status feed_alloc(const pdb_v4_layer *L, int64_t hd, int64_t R, v4_feedbuf *f) {
    int64_t D = L->rate ? L->comp.coff * L->comp.dim : 0, ID = L->attn == PDB_V4_ATTN_CSA ? L->icomp.coff * L->icomp.dim : 0;
    *f = (v4_feedbuf){falloc(R * hd), falloc(R * D), falloc(R * D), falloc(R * ID), falloc(R * ID)};
    if (f->kv && f->kvp && f->gp && f->ikvp && f->igp) return PDB_OK;
    feed_free(f);
    return pdb_err_set(PDB_NOMEM, "v4 cache feed: out of memory for %lld rows", (long long)R);
}

pdb_status pdb_v4_cache_feed(const pdb_v4_model *m, pdb_v4_cache *cc, int64_t l, const float *x, int64_t T, float *kv_out) {
    const pdb_v4_layer *L = &m->layers[l];
    int64_t hd = m->cfg.head_dim;
    v4_feedbuf f;
    PDB_TRY(feed_alloc(L, hd, T, &f));
    pdb_status s = feed_products(&cc->exec, L, m->cfg.hidden_size, x, T, f.kv, f.kvp, f.gp, f.ikvp, f.igp, NULL, 0);
    if (!s) s = feed_steps(m, cc, l, f.kv, f.kvp, f.gp, f.ikvp, f.igp, T, kv_out != NULL);
    if (!s) {
        if (kv_out) memcpy(kv_out, f.kv, sizeof(float) * (size_t)(T * hd));
    }
    feed_free(&f);
    return s;
}

pdb_status pdb_v4_cache_feed_rows(const pdb_v4_model *m, pdb_v4_cache *cc, int64_t l, const pdb_v4_feed_rows *r, int64_t T) {
    if (l < 0 || l >= m->cfg.num_layers || T < 0 || cc->len + T > cc->cap)
        return pdb_err_set(PDB_INVALID, "v4 cache feed: layer %lld, %lld rows at %lld (capacity %lld)", (long long)l, (long long)T,
                           (long long)cc->len, (long long)cc->cap);
    return T ? feed_steps(m, cc, l, r->kv, r->kvp, r->gp, r->ikvp, r->igp, T, 0) : PDB_OK;
}

/* ======================================== attention ======================================== */

/* softmax with a sink over scores s[n] (in place): s becomes the probabilities. The exponential
 * is pdb_math_exp of the f32 difference (the double exp rounded to float at once), so a GPU's
 * double exp (1 ulp) gives the same floats as glibc's (docs/v4.md §7); den sums in double. */
static void softmax_sink(float *s, int64_t n, float sink) {
    float mx = sink;
    for (int64_t i = 0; i < n; i++) mx = fmaxf(mx, s[i]);
    double den = (double)pdb_math_exp(sink - mx);
    for (int64_t i = 0; i < n; i++) {
        s[i] = pdb_math_exp(s[i] - mx);
        den += (double)s[i];
    }
    for (int64_t i = 0; i < n; i++) s[i] = (float)((double)s[i] / den);
}

/* One token and a group of heads of pdb_v4_attn_ref: scores over [window rows | picked compressed
 * entries], the sink softmax, the weighted sum in double (the contract in pdb_v4.h), every sum
 * many chains at once (pdb_v4_dots: each the same sequential double sum as the contract's loop);
 * the group's heads share each pass over the keys. */
typedef struct v4_attn_job {
    const pdb_v4_attn_desc *d;
    int64_t hpg, ngrp;   /* heads per task, tasks per token */
    float *sc;           /* [threads, hpg, sc_stride] */
    int64_t sc_stride;
    double *acc;         /* [threads, hpg * hd + 8 * hd] (the sums, then the key block's scratch) */
} v4_attn_job;

static void attn_task(void *ctx, int64_t task, int thread) {
    const v4_attn_job *j = ctx;
    const pdb_v4_attn_desc *d = j->d;
    int64_t t = task / j->ngrp, h0 = task % j->ngrp * j->hpg, hd = d->hd, W = d->W, lo = d->lo;
    int64_t nq = d->nh - h0 < j->hpg ? d->nh - h0 : j->hpg, ss = j->sc_stride;
    int64_t p = d->p0 + t, wlo = p - W + 1 > lo ? p - W + 1 : lo, nw = p - wlo + 1;
    const float *wk = d->keys + (wlo - lo) * hd, *comp = d->comp;
    int64_t nc = 0;
    const int32_t *ids = NULL;
    if (d->sel) { nc = d->nsel[t]; ids = d->sel + t * d->K; }
    else if (d->rate > 0) nc = (p + 1) / d->rate;
    float *sc = j->sc + (int64_t)thread * j->hpg * ss;
    double *acc = j->acc + (int64_t)thread * (j->hpg + 8) * hd, *kt = acc + j->hpg * hd;
    const float *q = d->q + (t * d->nh + h0) * hd;
    pdb_v4_dotd_keys(q, hd, nq, wk, hd, NULL, nw, hd, sc, ss, kt);
    pdb_v4_dotd_keys(q, hd, nq, comp, hd, ids, nc, hd, sc + nw, ss, kt);
    for (int64_t h = 0; h < nq; h++) {
        for (int64_t i = 0; i < nw + nc; i++) sc[h * ss + i] *= d->scale;
        softmax_sink(sc + h * ss, nw + nc, d->sinks[h0 + h]);
    }
    memset(acc, 0, sizeof(double) * (size_t)(nq * hd));
    pdb_v4_mixd_keys(acc, sc, ss, nq, wk, hd, NULL, nw, hd);
    pdb_v4_mixd_keys(acc, sc + nw, ss, nq, comp, hd, ids, nc, hd);
    float *o = d->o + (t * d->nh + h0) * hd;
    for (int64_t e = 0; e < nq * hd; e++) o[e] = (float)acc[e];
}

pdb_status pdb_v4_attn_ref(const pdb_v4_attn_desc *d, pdb_pool *pool) {
    if (d->T <= 0 || d->nh <= 0) return PDB_OK;
    int64_t nmax = d->W + (d->sel ? d->K : d->rate > 0 ? (d->p0 + d->T) / d->rate : 0);
    int64_t nth = pdb_pool_threads(pool), stride = nmax + 1;
    /* heads per task: up to 8, and at least two tasks per thread where the heads allow */
    int64_t hpg = d->T * d->nh / (2 * nth);
    hpg = hpg < 1 ? 1 : hpg > 8 ? 8 : hpg;
    float *sc = falloc(nth * hpg * stride);
    double *acc = malloc(sizeof(double) * (size_t)(nth * (hpg + 8) * d->hd));
    if (!sc || !acc) {
        free(sc);
        free(acc);
        return pdb_err_set(PDB_NOMEM, "v4 attention: out of memory");
    }
    v4_attn_job aj = {.d = d, .hpg = hpg, .ngrp = (d->nh + hpg - 1) / hpg, .sc = sc, .sc_stride = stride, .acc = acc};
    pdb_pool_run(pool, d->T * aj.ngrp, attn_task, &aj);
    free(sc);
    free(acc);
    return PDB_OK;
}

/* The compressed entries of one sequence's attention as f32 rows for pdb_v4_attn_desc (whose
 * contract is f32): f32 rows are used in place; compact rows (official) are decoded exactly, for
 * HCA every visible entry (the attention reads them by index), for CSA only the union of the
 * chunk's picks (at most T * K rows, so a decode step decodes K rows), the picks renumbered in
 * place to rows of that set. *out_comp / *out_n: the rows and their count; *own: what to free. */
static pdb_status comp_rows(const pdb_v4_cache *cc, const pdb_v4_layer_cache *lc, int csa, int64_t n_comp, int64_t T, int64_t K,
                            int32_t *sel, const int64_t *nsel, const float **out_comp, int64_t *out_n, float **own) {
    const pdb_v4_row *r = &cc->kv_row;
    *out_comp = NULL;
    *out_n = n_comp;
    *own = NULL;
    if (!n_comp) return PDB_OK;
    if (r->fmt == PDB_V4_ROW_F32) {
        *out_comp = (const float *)lc->comp;
        return PDB_OK;
    }
    if (!csa) {
        if (!(*own = falloc(n_comp * r->dim))) return pdb_err_set(PDB_NOMEM, "v4 attention: out of memory for %lld entries", (long long)n_comp);
        pdb_v4_row_decode_rows(r, lc->comp, NULL, n_comp, *own);
        *out_comp = *own;
        return PDB_OK;
    }
    int32_t *map = malloc(sizeof(int32_t) * (size_t)n_comp), *ids = malloc(sizeof(int32_t) * (size_t)(T * K > n_comp ? n_comp : T * K));
    if (!map || !ids) {
        free(map), free(ids);
        return pdb_err_set(PDB_NOMEM, "v4 attention: out of memory for %lld entries", (long long)n_comp);
    }
    memset(map, 0xFF, sizeof(int32_t) * (size_t)n_comp);
    int64_t nu = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < nsel[t]; i++) {
            int32_t *e = &sel[t * K + i];
            if (map[*e] < 0) { ids[nu] = *e; map[*e] = (int32_t)nu++; }
            *e = map[*e];
        }
    pdb_status s = PDB_OK;
    if (!(*own = falloc(nu * r->dim))) s = pdb_err_set(PDB_NOMEM, "v4 attention: out of memory for %lld entries", (long long)nu);
    else pdb_v4_row_decode_rows(r, lc->comp, ids, nu, *own);
    free(map);
    free(ids);
    *out_comp = *own;
    *out_n = nu;
    return s;
}

/* Inverse rotation of each output head's rotary dims (V carried RoPE), per token on the pool. */
typedef struct v4_unrope_job { const pdb_rope *rope; float *o; int64_t p0, nh, hd, rd; } v4_unrope_job;

static void unrope_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const v4_unrope_job *j = ctx;
    for (int64_t h = 0; h < j->nh; h++) pdb_rope_apply(j->rope, j->o + (t * j->nh + h) * j->hd + j->hd - j->rd, -(j->p0 + t));
}

/* One sequence's share of a step: its cache and its tokens' rows r0 .. r0 + T - 1 of the step's
 * activations (positions cache->len ..). */
typedef struct v4_seg {
    pdb_v4_cache *c;
    int64_t r0, T;
} v4_seg;

/* The attention block of layer l for the rows of n sequences: x [R, H] (after attn_norm) -> out
 * [R, H]. The products with weights run once over all R rows (the first sequence's execution
 * context); the cache feed's steps, the indexer and the attention itself per sequence on its
 * own cache. A row's results are what it gets alone (pdb_qmat's products do not depend on the
 * rows beside them). */
static pdb_status attention(const pdb_v4_model *m, const v4_seg *sg, int n, int64_t l, const float *x, int64_t R, float *out) {
    const pdb_config *c = &m->cfg;
    const pdb_v4_layer *L = &m->layers[l];
    const pdb_v4_exec *ex = &sg[0].c->exec;
    int64_t H = c->hidden_size, nh = c->num_heads, hd = c->head_dim, rd = c->qk_rope_head_dim, qlr = c->q_lora_rank;
    int64_t W = c->sliding_window, G = c->o_groups, olr = c->o_lora_rank, gin = nh * hd / G, K = c->index_topk;
    pdb_status s = PDB_OK;
    int csa = L->attn == PDB_V4_ATTN_CSA;
    int64_t nih = csa ? c->index_n_heads : 0, ihd = c->index_head_dim;
    v4_feedbuf f = {0};
    float *compf = NULL;
    float *qr = falloc(R * qlr), *q = falloc(R * nh * hd), *o = falloc(R * nh * hd), *keys = falloc((W + R) * hd);
    float *a = falloc(R * G * olr), *iq = falloc(R * nih * ihd), *iw = falloc(R * nih);
    int32_t *sel = csa ? malloc(sizeof(int32_t) * (size_t)(R * K)) : NULL;
    int64_t *nsel = csa ? malloc(sizeof(int64_t) * (size_t)R) : NULL, *pos = malloc(sizeof(int64_t) * (size_t)R);
    pdb_qmat *views = malloc(sizeof(pdb_qmat) * (size_t)G);
    pdb_qmat_job *jobs = malloc(sizeof(pdb_qmat_job) * (size_t)(G > 3 ? G : 3));
    if (!qr || !q || !keys || !o || !a || !iq || !iw || !pos || !views || !jobs || (csa && (!sel || !nsel))) {
        s = pdb_err_set(PDB_NOMEM, "v4 attention: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int64_t t = 0; t < sg[i].T; t++) pos[sg[i].r0 + t] = sg[i].c->len + t;
    /* the feed's products (K=V rows, compressor projections) with the query's q_a, one dispatch */
    if ((s = feed_alloc(L, hd, R, &f))) goto done;
    pdb_qmat_job qa = {&L->wq_a, x, H, R, qr, qlr};
    if ((s = feed_products(ex, L, H, x, R, f.kv, f.kvp, f.gp, f.ikvp, f.igp, &qa, 1))) goto done;
    /* queries: q_norm -> q_b (with the indexer's query and weight products) -> per-head
     * unweighted RMSNorm -> RoPE on the trailing dims */
    for (int64_t r = 0; r < R; r++) pdb_math_rmsnorm(qr + r * qlr, qr + r * qlr, L->q_norm, qlr, c->rms_norm_eps);
    int nj = 0;
    jobs[nj++] = (pdb_qmat_job){&L->wq_b, qr, qlr, R, q, nh * hd};
    if (csa) {
        jobs[nj++] = (pdb_qmat_job){&L->idx_wq_b, qr, qlr, R, iq, nih * ihd};
        jobs[nj++] = (pdb_qmat_job){&L->idx_wproj, x, H, R, iw, nih};
    }
    if ((s = v4_run(ex, jobs, nj, 1, NULL))) goto done;
    for (int64_t r = 0; r < R; r++)
        for (int64_t h = 0; h < nh; h++) {
            float *qh = q + (r * nh + h) * hd;
            double ss = 0;
            for (int64_t i = 0; i < hd; i++) ss += (double)qh[i] * qh[i];
            float rr = (float)(1.0 / sqrt(ss / (double)hd + c->rms_norm_eps));
            for (int64_t i = 0; i < hd; i++) qh[i] *= rr;
            pdb_rope_apply(L->rope, qh + hd - rd, pos[r]);
        }
    for (int i = 0; i < n && !s; i++) {
        pdb_v4_cache *cc = sg[i].c;
        pdb_v4_layer_cache *lc = &cc->layers[l];
        const pdb_v4_exec *sx = &cc->exec;
        int64_t r0 = sg[i].r0, T = sg[i].T, p0 = cc->len, lo = p0 - W + 1 > 0 ? p0 - W + 1 : 0, nold = p0 - lo;
        /* K=V rows: the cached window rows of positions lo..p0-1 (copied before the feed writes the
         * window), then this chunk's, fed into the cache token by token */
        for (int64_t p = lo; p < p0; p++) pdb_v4_row_decode(&cc->kv_row, lc->win + (p % W) * cc->kv_row.bytes, keys + (p - lo) * hd);
        int64_t D = L->rate ? L->comp.coff * L->comp.dim : 0, ID = csa ? L->icomp.coff * L->icomp.dim : 0;
        if ((s = feed_steps(m, cc, l, f.kv + r0 * hd, f.kvp + r0 * D, f.gp + r0 * D, f.ikvp + r0 * ID, f.igp + r0 * ID, T, 1)))
            break;
        memcpy(keys + nold * hd, f.kv + r0 * hd, sizeof(float) * (size_t)(T * hd));
        if (csa && (s = run_indexer(m, sx, L, lc, &cc->ik_row, cc->sem == PDB_V4_SEM_OFFICIAL ? QSIM_FP4_ROT : QSIM_NONE, iq + r0 * nih * ihd,
                                    iw + r0 * nih, T, p0, sel + r0 * K, nsel + r0)))
            break;
        /* the compressed entries the chunk reads, as f32 rows (compact rows decoded exactly) */
        const float *comp = NULL;
        int64_t n_comp = L->rate ? (p0 + T) / L->rate : 0;
        free(compf);
        compf = NULL;
        if ((s = comp_rows(cc, lc, csa, n_comp, T, K, csa ? sel + r0 * K : NULL, csa ? nsel + r0 : NULL, &comp, &n_comp, &compf)))
            break;
        /* attention per token and head over [window rows | picked compressed entries], with a sink
         * (pdb_v4_attn_ref's contract: on the provider when it has one, else on the pool's
         * threads), then the inverse RoPE of every output head on the host */
        pdb_v4_attn_desc ad = {.T = T, .nh = nh, .hd = hd, .p0 = p0, .lo = lo, .W = W, .q = q + r0 * nh * hd, .keys = keys,
                               .comp = comp, .n_comp = n_comp,
                               .rate = L->attn == PDB_V4_ATTN_HCA ? L->rate : 0, .sel = csa ? sel + r0 * K : NULL,
                               .nsel = csa ? nsel + r0 : NULL, .K = K, .sinks = L->sink,
                               .scale = (float)(1.0 / sqrt((double)hd)), .o = o + r0 * nh * hd};
        if ((s = sx->mm && sx->mm->attn ? sx->mm->attn(sx->mm->ctx, &ad) : pdb_v4_attn_ref(&ad, sx->pool))) break;
        v4_unrope_job uj = {.rope = L->rope, .o = o + r0 * nh * hd, .p0 = p0, .nh = nh, .hd = hd, .rd = rd};
        pdb_pool_run(sx->pool, T, unrope_task, &uj);
    }
    if (s) goto done;
    /* grouped low-rank output projection: group g of heads -> olr (rows g*olr.. of wo_a, all groups
     * in one dispatch), then all groups -> H */
    for (int64_t g = 0; g < G; g++) {
        views[g] = pdb_qmat_view_rows(&L->wo_a, g * olr, olr);
        jobs[g] = (pdb_qmat_job){&views[g], o + g * gin, nh * hd, R, a + g * olr, G * olr};
    }
    if (!(s = v4_run(ex, jobs, (int)G, 1, NULL))) s = v4_mm(ex, &L->wo_b, a, G * olr, R, out, H);
done:
    feed_free(&f);
    free(compf);
    free(qr);
    free(q);
    free(keys);
    free(o);
    free(a);
    free(iq);
    free(iw);
    free(sel);
    free(nsel);
    free(pos);
    free(views);
    free(jobs);
    return s;
}

/* ======================================== MoE ======================================== */

static int cmp_desc_idx(float a, int64_t ia, float b, int64_t ib) { return a > b || (a == b && ia < ib); }

void pdb_v4_route(const pdb_config *cf, const pdb_v4_layer *ly, int32_t token, float *scores, int64_t *idx, float *wt) {
    int64_t E = cf->n_routed_experts, K = cf->num_experts_per_tok;
    if (cf->scoring_func == PDB_V4_SCORE_SOFTMAX) pdb_math_softmax(scores, E);
    else
        for (int64_t e = 0; e < E; e++) {
            float l = scores[e];
            scores[e] = cf->scoring_func == PDB_V4_SCORE_SIGMOID ? sigmoidf(l) : sqrtf(l > 20.0f ? l : pdb_math_log1pf(expf(l)));
        }
    if (ly->hash) {
        for (int64_t k = 0; k < K; k++) idx[k] = ly->tid2eid[(int64_t)token * K + k];
    } else {
        static _Thread_local unsigned char taken[65536];
        memset(taken, 0, (size_t)E);
        for (int64_t k = 0; k < K; k++) {
            int64_t best = -1;
            float bv = 0;
            for (int64_t e = 0; e < E; e++) {
                if (taken[e]) continue;
                float v = scores[e] + (ly->gate_bias ? ly->gate_bias[e] : 0.0f);
                if (best < 0 || cmp_desc_idx(v, e, bv, best)) { best = e; bv = v; }
            }
            taken[best] = 1;
            idx[k] = best;
        }
    }
    double sum = 0;
    for (int64_t k = 0; k < K; k++) sum += scores[idx[k]];
    float den = (float)sum + 1e-20f;
    for (int64_t k = 0; k < K; k++) wt[k] = scores[idx[k]] / den * (float)cf->routed_scaling_factor;
}

/* The post of a gate/up gang (pdb_qmat_matmul_gangs): gang[0] gate -> g, gang[1] up -> u, gang[2]
 * a job skipped by the dispatch (n = 0) whose x points at the SwiGLU limit (<= 0: no clipping).
 * Output rows [r0, r1) of every token: g = silu(clip(g)) * clip(u), in place. */
static void swiglu_post(const pdb_qmat_job *gang, int64_t r0, int64_t r1) {
    float limit = gang[2].x[0], *g = gang[0].y;
    const float *u = gang[1].y;
    int64_t ldg = gang[0].ldy, ldu = gang[1].ldy;
    for (int64_t t = 0; t < gang[0].n; t++)
        for (int64_t i = r0; i < r1; i++) {
            float a = g[t * ldg + i], b = u[t * ldu + i];
            if (limit > 0) {
                a = fminf(a, limit);
                b = fminf(fmaxf(b, -limit), limit);
            }
            g[t * ldg + i] = a / (1.0f + expf(-a)) * b;
        }
}

/* Routed experts (grouped by expert, ascending) + the shared expert: x [T, H] -> out [T, H]. Every
 * picked expert's and the shared expert's gate/up products run as gangs in one dispatch (SwiGLU
 * as their post), then every down product in one more; out = the routed outputs weighted and
 * summed in expert order, then + the shared expert's. */
static pdb_status moe(const pdb_v4_model *m, const pdb_v4_exec *ex, const pdb_v4_layer *L, const int32_t *ids, const float *x, int64_t T,
                      float *out) {
    const pdb_config *c = &m->cfg;
    int64_t H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok, I = c->moe_intermediate_size;
    float limit = (float)c->swiglu_limit;
    pdb_status s = PDB_OK;
    int64_t TK = T * K, NR = TK + (c->n_shared_experts ? T : 0); /* a token may pick one expert twice (hash tables): rows for every pick */
    float *lg = falloc(T * E), *wt = falloc(TK), *xg = falloc(TK * H), *g = falloc(NR * I), *u = falloc(NR * I);
    float *y = falloc(NR * H);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)TK), *rows = malloc(sizeof(int64_t) * (size_t)TK);
    float *rw = falloc(TK);
    pdb_qmat_job *gu = malloc(sizeof(pdb_qmat_job) * (size_t)(3 * (E + 1))), *dn = malloc(sizeof(pdb_qmat_job) * (size_t)(E + 1));
    if (!lg || !wt || !xg || !g || !u || !y || !idx || !rows || !rw || !gu || !dn) { s = pdb_err_set(PDB_NOMEM, "v4 moe: out of memory"); goto done; }
    if ((s = v4_mm(ex, &L->gate, x, H, T, lg, E))) goto done;
    for (int64_t t = 0; t < T; t++) pdb_v4_route(c, L, ids[t], lg + t * E, idx + t * K, wt + t * K);
    /* the picks grouped by expert (ascending), tokens in order within one: rows n0 .. n0 + n - 1 */
    int ng = 0, nd = 0;
    int64_t n0 = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < K; k++)
                if (idx[t * K + k] == e) { /* a duplicate pick (possible in hash tables) counts twice, as in transformers */
                    rows[n0 + n] = t;
                    rw[n0 + n] = wt[t * K + k];
                    memcpy(xg + (n0 + n) * H, x + t * H, sizeof(float) * (size_t)H);
                    n++;
                }
        if (!n) continue;
        gu[ng++] = (pdb_qmat_job){&L->w1[e], xg + n0 * H, H, n, g + n0 * I, I};
        gu[ng++] = (pdb_qmat_job){&L->w3[e], xg + n0 * H, H, n, u + n0 * I, I};
        gu[ng++] = (pdb_qmat_job){&L->w1[e], &limit, 0, 0, NULL, 0};
        dn[nd++] = (pdb_qmat_job){&L->w2[e], g + n0 * I, I, n, y + n0 * H, H};
        n0 += n;
    }
    if (c->n_shared_experts) {
        gu[ng++] = (pdb_qmat_job){&L->sh_w1, x, H, T, g + TK * I, I};
        gu[ng++] = (pdb_qmat_job){&L->sh_w3, x, H, T, u + TK * I, I};
        gu[ng++] = (pdb_qmat_job){&L->sh_w1, &limit, 0, 0, NULL, 0};
        dn[nd++] = (pdb_qmat_job){&L->sh_w2, g + TK * I, I, T, y + TK * H, H};
    }
    if ((s = v4_run(ex, gu, ng, 3, swiglu_post))) goto done;
    if ((s = v4_run(ex, dn, nd, 1, NULL))) goto done;
    memset(out, 0, sizeof(float) * (size_t)(T * H));
    for (int64_t j = 0; j < TK; j++)
        for (int64_t d = 0; d < H; d++) out[rows[j] * H + d] += rw[j] * y[j * H + d];
    if (c->n_shared_experts)
        for (int64_t i = 0; i < T * H; i++) out[i] = out[i] + y[TK * H + i];
done:
    free(lg); free(wt); free(xg); free(g); free(u); free(y); free(idx); free(rows); free(rw); free(gu); free(dn);
    return s;
}

/* ======================================== layer / forward ======================================== */

/* The hyper-connection sites of a sub-block on the pool: hc_job's tasks (pre: the whole mapping of
 * one token, or with one token its mixing rows in `split` parts; post: column ranges of a token). */
typedef struct v4_hc_job {
    const pdb_config *c;
    const float *fn, *base, *scale, *norm;
    float *hs, *x, *post, *comb, *mixes, *tmp, *out; /* tmp: [threads, hc*H] (per token) or [hc*H] (lone token) */
    int64_t split, cols;
} v4_hc_job;

static void hc_pre_task(void *ctx, int64_t t, int thread) { /* token t: norm, mixes, finish, the sub-block's norm */
    const v4_hc_job *j = ctx;
    const pdb_config *c = j->c;
    int64_t hc = c->hc_mult, H = c->hidden_size, nm = (2 + hc) * hc;
    float *tmp = j->tmp + (int64_t)thread * hc * H, *mx = j->mixes + t * nm, *hs = j->hs + t * hc * H;
    hc_norm(c, hs, tmp);
    hc_mixes(c, j->fn, tmp, 0, nm, mx);
    hc_finish(c, j->base, j->scale, mx, hs, j->x + t * H, j->post + t * hc, j->comb + t * hc * hc);
    pdb_math_rmsnorm(j->x + t * H, j->x + t * H, j->norm, H, c->rms_norm_eps);
}

static void hc_mix_task(void *ctx, int64_t part, int thread) { /* a lone token's mixing rows, part `part` of split */
    (void)thread;
    const v4_hc_job *j = ctx;
    int64_t nm = (2 + j->c->hc_mult) * j->c->hc_mult, per = (nm + j->split - 1) / j->split, j0 = part * per;
    int64_t j1 = j0 + per < nm ? j0 + per : nm;
    if (j0 < j1) hc_mixes(j->c, j->fn, j->tmp, j0, j1, j->mixes);
}

static void hc_post_task(void *ctx, int64_t task, int thread) { /* token task / split, columns part task % split */
    (void)thread;
    const v4_hc_job *j = ctx;
    const pdb_config *c = j->c;
    int64_t hc = c->hc_mult, H = c->hidden_size, t = task / j->split, d0 = task % j->split * j->cols;
    int64_t d1 = d0 + j->cols < H ? d0 + j->cols : H;
    if (d0 < d1) hc_post(c, j->hs + t * hc * H, j->out + t * H, j->post + t * hc, j->comb + t * hc * hc, d0, d1);
}

/* One hyper-connected sub-block over the rows of n sequences: collapse the streams, norm, run
 * `which` (0 attention, 1 MoE), expand. The hook (one sequence only) sees the attention input.
 * The sites run on the pool: tokens in parallel, or one token's mixing rows and columns (every
 * value computed as the token-at-a-time form computes it). */
static pdb_status sub_block(const pdb_v4_model *m, const v4_seg *sg, int n, int64_t l, int which, const int32_t *ids,
                            float *hs, int64_t R, const pdb_v4_hook *hook) {
    const pdb_config *c = &m->cfg;
    const pdb_v4_layer *L = &m->layers[l];
    pdb_pool *pool = sg[0].c->exec.pool;
    int64_t H = c->hidden_size, hc = c->hc_mult, nm = (2 + hc) * hc, nth = pdb_pool_threads(pool);
    int lone = R == 1 && nth > 1;
    float *x = falloc(R * H), *out = falloc(R * H), *post = falloc(R * hc), *comb = falloc(R * hc * hc);
    float *tmp = falloc((lone ? 1 : nth) * hc * H), *mixes = falloc(R * nm);
    pdb_status s = PDB_OK;
    if (!x || !out || !post || !comb || !tmp || !mixes) { s = pdb_err_set(PDB_NOMEM, "v4 layer: out of memory"); goto done; }
    v4_hc_job hj = {.c = c, .fn = which ? L->hc_ffn_fn : L->hc_attn_fn, .base = which ? L->hc_ffn_base : L->hc_attn_base,
                    .scale = which ? L->hc_ffn_scale : L->hc_attn_scale, .norm = which ? L->ffn_norm : L->attn_norm,
                    .hs = hs, .x = x, .post = post, .comb = comb, .mixes = mixes, .tmp = tmp, .out = out,
                    .split = nth < nm ? nth : nm, .cols = H};
    if (lone) {
        hc_norm(c, hs, tmp);
        pdb_pool_run(pool, hj.split, hc_mix_task, &hj);
        hc_finish(c, hj.base, hj.scale, mixes, hs, x, post, comb);
        pdb_math_rmsnorm(x, x, hj.norm, H, c->rms_norm_eps);
    } else
        pdb_pool_run(pool, R, hc_pre_task, &hj);
    if (!which && hook) s = hook->attn_input(hook->user, l, x, R, sg[0].c->len);
    if (!s) s = which ? moe(m, &sg[0].c->exec, L, ids, x, R, out) : attention(m, sg, n, l, x, R, out);
    if (s) goto done;
    hj.split = lone ? nth : 1;
    hj.cols = (H + hj.split - 1) / hj.split;
    pdb_pool_run(pool, R * hj.split, hc_post_task, &hj);
done:
    free(x); free(out); free(post); free(comb); free(tmp); free(mixes);
    return s;
}

/* n sequences' tokens (ids [R], rows of sequence i from sg[i].r0) through every layer, then the
 * logits of rows lrows[0 .. nl) into logits [nl, V]; every cache's len advanced by its T. */
static pdb_status forward_rows(const pdb_v4_model *m, const v4_seg *sg, int n, const int32_t *ids, int64_t R,
                               const int64_t *lrows, int64_t nl, float *logits, const pdb_v4_hook *hook) {
    const pdb_config *c = &m->cfg;
    int64_t H = c->hidden_size, hc = c->hc_mult, V = c->vocab_size;
    float *hs = falloc(R * hc * H), *tmp = falloc(hc * H), *y = falloc(nl * H);
    pdb_status s = PDB_OK;
    if (!hs || !tmp || !y) { s = pdb_err_set(PDB_NOMEM, "v4 forward: out of memory for %lld tokens", (long long)R); goto done; }
    for (int64_t t = 0; t < R; t++) {
        pdb_qmat_row_f32(&m->embed, ids[t], hs + t * hc * H);
        for (int64_t k = 1; k < hc; k++) memcpy(hs + (t * hc + k) * H, hs + t * hc * H, sizeof(float) * (size_t)H);
    }
    for (int64_t l = 0; l < c->num_layers; l++) {
        if ((s = sub_block(m, sg, n, l, 0, ids, hs, R, hook))) goto done;
        if ((s = sub_block(m, sg, n, l, 1, ids, hs, R, hook))) goto done;
    }
    for (int i = 0; i < n; i++) sg[i].c->len += sg[i].T;
    if (nl > 0) {
        for (int64_t r = 0; r < nl; r++) {
            hc_head(m, hs + lrows[r] * hc * H, y + r * H, tmp);
            pdb_math_rmsnorm(y + r * H, y + r * H, m->norm, H, c->rms_norm_eps);
        }
        s = v4_mm(&sg[0].c->exec, &m->head, y, H, nl, logits, V);
    }
done:
    free(hs);
    free(tmp);
    free(y);
    return s;
}

/* The checks every forward makes on one sequence's call. */
static pdb_status check_call(const pdb_v4_model *m, const pdb_v4_cache *cc, const int32_t *ids, int64_t T) {
    int64_t V = m->cfg.vocab_size;
    if (m->part != PDB_V4_PART_ALL)
        return pdb_err_set(PDB_INVALID, "v4 forward: this model holds only the capture hook's weights (per layer wkv, kv_norm "
                                        "and the compressors); the embedding, head, hyper-connections, query, output and "
                                        "indexer projections, router and experts were not loaded (pdb_v4_load_part)");
    if (T <= 0) return pdb_err_set(PDB_INVALID, "v4 forward: no tokens");
    if (cc->len + T > cc->cap)
        return pdb_err_set(PDB_TOO_LARGE, "v4 forward: %lld cached + %lld new positions exceed the cache capacity %lld",
                           (long long)cc->len, (long long)T, (long long)cc->cap);
    for (int64_t t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= V)
            return pdb_err_set(PDB_INVALID, "v4 forward: token id %d at %lld is outside the vocabulary (%lld)", ids[t],
                               (long long)t, (long long)V);
    return PDB_OK;
}

pdb_status pdb_v4_forward(const pdb_v4_model *m, pdb_v4_cache *cc, const int32_t *ids, int64_t T, int all_logits,
                          float *logits) {
    return pdb_v4_forward_hooked(m, cc, ids, T, all_logits, logits, NULL);
}

pdb_status pdb_v4_forward_hooked(const pdb_v4_model *m, pdb_v4_cache *cc, const int32_t *ids, int64_t T, int all_logits,
                                 float *logits, const pdb_v4_hook *hook) {
    PDB_TRY(check_call(m, cc, ids, T));
    int64_t nl = !logits ? 0 : all_logits ? T : 1;
    int64_t *lrows = malloc(sizeof(int64_t) * (size_t)(nl > 0 ? nl : 1));
    if (!lrows) return pdb_err_set(PDB_NOMEM, "v4 forward: out of memory");
    for (int64_t r = 0; r < nl; r++) lrows[r] = T - nl + r;
    v4_seg sg = {cc, 0, T};
    pdb_status s = forward_rows(m, &sg, 1, ids, T, lrows, nl, logits, hook);
    free(lrows);
    return s;
}

pdb_status pdb_v4_forward_multi(const pdb_v4_model *m, const pdb_v4_step *steps, int n) {
    if (n <= 0) return pdb_err_set(PDB_INVALID, "v4 forward: no sequences");
    int64_t R = 0, nl = 0, V = m->cfg.vocab_size;
    for (int i = 0; i < n; i++) {
        pdb_status s = check_call(m, steps[i].c, steps[i].ids, steps[i].T);
        if (s) return pdb_err_wrap(s, "sequence %d of %d", i, n);
        for (int j = 0; j < i; j++)
            if (steps[j].c == steps[i].c)
                return pdb_err_set(PDB_INVALID, "v4 forward: sequences %d and %d share one cache", j, i);
        R += steps[i].T;
        nl += steps[i].logits != NULL;
    }
    v4_seg *sg = malloc(sizeof(v4_seg) * (size_t)n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)R);
    int64_t *lrows = malloc(sizeof(int64_t) * (size_t)(nl > 0 ? nl : 1));
    float *lg = falloc(nl * V);
    pdb_status s = PDB_OK;
    if (!sg || !ids || !lrows || !lg) s = pdb_err_set(PDB_NOMEM, "v4 forward: out of memory for %d sequences", n);
    for (int64_t i = 0, r0 = 0, k = 0; !s && i < n; r0 += steps[i].T, i++) {
        sg[i] = (v4_seg){steps[i].c, r0, steps[i].T};
        memcpy(ids + r0, steps[i].ids, sizeof(int32_t) * (size_t)steps[i].T);
        if (steps[i].logits) lrows[k++] = r0 + steps[i].T - 1;
    }
    if (!s) s = forward_rows(m, sg, n, ids, R, lrows, nl, lg, NULL);
    for (int64_t i = 0, k = 0; !s && i < n; i++)
        if (steps[i].logits) memcpy(steps[i].logits, lg + (k++) * V, sizeof(float) * (size_t)V);
    free(sg);
    free(ids);
    free(lrows);
    free(lg);
    return s;
}
