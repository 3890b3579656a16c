/* pdb_dec_v2: the decode engine's DeepSeek-V2 ops: weights through pdb_v2_ops (bf16/f32/MXFP8/
 * MXFP4 views over the checkpoint, resident or mapped), sequences as layer-major f32 latent rows
 * [n_layers, cap, kv_lora_rank + rope] (blocks: the registry's one APPEND pool "latent"), and the batched forward:
 * embed, then per layer attention norm -> attention (writes the cache rows) -> FFN, then logits.
 * Invariant: a block is the rows of its span for every layer, nothing else (no state pool).
 * The forward's scratch (pdb_v2_batch, megabytes at many threads) is kept between calls, not
 * allocated per token, and grown when a call needs more rows or a longer context: one for calls
 * of few rows (decode steps: R * heads <= PDB_V2_WIDE_JOBS, with the head-parallel attention's
 * buffers for contexts past PDB_V2_TASK_MAX_POS) and one for the others (prefill chunks), so that alternating the two never
 * re-allocates (a longer context re-allocates once per 1024 positions); a mutex serialises
 * forwards. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_arch.h"
#include "pdb_v2_ops.h"

typedef struct v2_impl {
    pdb_v2_qweights w;
    pdb_pool *pool;
    pthread_mutex_t mu;    /* one forward at a time: it guards the scratch (and the pool's single dispatch) */
    struct v2_scratch {
        pdb_v2_batch b;    /* valid when cap_rows > 0: sized for cap_rows rows and contexts up to cap_len */
        int64_t cap_rows, cap_len;
    } few, many;           /* R * heads <= PDB_V2_WIDE_JOBS, and the rest */
} v2_impl;

static void v2_close(void *impl) {
    v2_impl *v = impl;
    if (!v) return;
    if (v->few.cap_rows) pdb_v2_batch_free(&v->few.b);
    if (v->many.cap_rows) pdb_v2_batch_free(&v->many.b);
    pthread_mutex_destroy(&v->mu);
    pdb_v2_qweights_free(&v->w);
    free(v);
}

static pdb_status v2_open(const pdb_config *cfg, const pdb_st *st, pdb_pool *pool, int sem, void **impl) {
    v2_impl *v = calloc(1, sizeof *v);
    if (!v) return pdb_err_set(PDB_NOMEM, "decoder model");
    v->pool = pool;
    pdb_status s = pdb_v2_qweights_load(&v->w, cfg, st, 0);
    if (s) { free(v); return s; }
    pthread_mutex_init(&v->mu, NULL);
    *impl = v;
    return PDB_OK;
}

static pdb_status v2_seq_init(void *impl, pdb_dec_seq *s, int64_t cap) {
    v2_impl *v = impl;
    s->row = v->w.cfg.kv_lora_rank + v->w.cfg.qk_rope_head_dim;
    s->n_layers = v->w.cfg.num_layers;
    s->lat = malloc(sizeof(float) * (size_t)(s->n_layers * cap * s->row));
    if (!s->lat) return pdb_err_set(PDB_NOMEM, "sequence cache for %lld positions", (long long)cap);
    return PDB_OK;
}

static void v2_seq_free(pdb_dec_seq *s) {
    free(s->lat);
    s->lat = NULL;
}

static void v2_seq_copy(void *impl, pdb_dec_seq *d, const pdb_dec_seq *s) {
    for (int64_t l = 0; l < s->n_layers; l++)
        memcpy(d->lat + l * d->cap * d->row, s->lat + l * s->cap * s->row, sizeof(float) * (size_t)(s->len * s->row));
}

static void v2_get_block(void *impl, const pdb_dec_seq *s, int64_t b, int64_t bs, void *buf) {
    float *o = buf;
    for (int64_t l = 0; l < s->n_layers; l++)
        memcpy(o + l * bs * s->row, s->lat + (l * s->cap + b * bs) * s->row, sizeof(float) * (size_t)(bs * s->row));
}

static void v2_put_block(void *impl, pdb_dec_seq *s, int64_t b, int64_t bs, const void *buf) {
    const float *in = buf;
    for (int64_t l = 0; l < s->n_layers; l++)
        memcpy(s->lat + (l * s->cap + b * bs) * s->row, in + l * bs * s->row, sizeof(float) * (size_t)(bs * s->row));
}

/* The scratch for R rows up to context maxlen: the kept one of its kind, or a larger one
 * (contexts rounded up to 1024 positions so that a growing decode re-allocates once per 1024
 * tokens). */
static pdb_status v2_scratch(v2_impl *v, int64_t R, int64_t maxlen, pdb_v2_batch **out) {
    struct v2_scratch *sc = R * v->w.cfg.num_heads <= PDB_V2_WIDE_JOBS ? &v->few : &v->many;
    if (R > sc->cap_rows || maxlen > sc->cap_len) {
        int64_t rows = R > sc->cap_rows ? R : sc->cap_rows, len = ((maxlen > sc->cap_len ? maxlen : sc->cap_len) + 1023) / 1024 * 1024;
        if (sc->cap_rows) pdb_v2_batch_free(&sc->b);
        sc->cap_rows = sc->cap_len = 0;
        PDB_TRY(pdb_v2_batch_init(&sc->b, &v->w, v->pool, rows, len));
        sc->cap_rows = rows, sc->cap_len = len;
    }
    *out = &sc->b;
    return PDB_OK;
}

static pdb_status v2_forward(void *impl, pdb_dec_seg *segs, int n_segs) {
    v2_impl *v = impl;
    int64_t R = 0, maxlen = 0;
    for (int i = 0; i < n_segs; i++) {
        R += segs[i].n;
        if (segs[i].seq->len + segs[i].n > maxlen) maxlen = segs[i].seq->len + segs[i].n;
    }
    pthread_mutex_lock(&v->mu);
    pdb_v2_batch *b;
    pdb_status st = v2_scratch(v, R, maxlen, &b);
    if (st) {
        pthread_mutex_unlock(&v->mu);
        return st;
    }
    b->R = R;
    int64_t r = 0;
    for (int i = 0; i < n_segs; i++) {
        pdb_dec_seq *s = segs[i].seq;
        for (int64_t t = 0; t < segs[i].n; t++, r++) {
            b->cache[r] = (pdb_v2_rowcache){s->lat, s->cap * s->row, s->row, 0};
            b->pos[r] = s->len + t;
            pdb_v2_ops_embed(b, r, segs[i].ids[t]);
        }
    }
    for (int64_t l = 0; l < v->w.cfg.num_layers; l++) {
        pdb_v2_ops_attn_norm(b, l);
        pdb_v2_ops_attention(b, l);
        pdb_v2_ops_ffn(b, l);
    }
    r = 0;
    for (int i = 0; i < n_segs; i++) {
        r += segs[i].n;
        if (segs[i].logits) pdb_v2_ops_logits(b, r - 1, segs[i].logits);
    }
    pthread_mutex_unlock(&v->mu);
    return PDB_OK;
}

static const void *v2_weights(void *impl) { return &((v2_impl *)impl)->w; }

const pdb_dec_arch pdb_dec_arch_v2 = {
    .name = "deepseek_v2", .open = v2_open, .close = v2_close, .weights = v2_weights,
    .seq_init = v2_seq_init, .seq_free = v2_seq_free,
    .forward = v2_forward, .get_block = v2_get_block, .put_block = v2_put_block,
    .seq_copy = v2_seq_copy,
};
