/* pdb_dec_v4: the decode engine's DeepSeek-V4 ops: the V4 forward (pdb_v4: weights as stored,
 * pdb_qmat's fixed-order products, chunk-exact) on the decoder checkpoint (its views stay valid
 * while pdb_dec_model holds the reader open), one pdb_v4_cache per sequence running on the
 * service's threads, a batch of segments as one multi-sequence step, and block copies through pdb_v4_pools (the layout the registry names, the
 * same functions the prefill engine's capture hook uses). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_arch.h"
#include "pdb_v4.h"

typedef struct v4_impl {
    pdb_v4_model *m;
    pdb_v4_semantics sem;
    pdb_pool *pool; /* the service's threads run every sequence's forward (not owned) */
} v4_impl;

static pdb_status v4_open(const pdb_config *cfg, const pdb_st *st, pdb_pool *pool, int sem, void **impl) {
    PDB_TRY(pdb_v4_check_semantics(cfg, (pdb_v4_semantics)sem));
    v4_impl *v = calloc(1, sizeof *v);
    if (!v) return pdb_err_set(PDB_NOMEM, "decoder model");
    v->sem = (pdb_v4_semantics)sem;
    pdb_status s = pdb_v4_load_from(cfg, st, &v->m);
    if (s) { free(v); return s; }
    PDB_INFO("decoder: deepseek_v4 weights held as stored: %.3f GB (%lld bytes)", (double)pdb_v4_model_bytes(v->m) / 1e9,
             (long long)pdb_v4_model_bytes(v->m));
    v->pool = pool;
    *impl = v;
    return PDB_OK;
}

static void v4_close(void *impl) {
    v4_impl *v = impl;
    if (!v) return;
    pdb_v4_free(v->m);
    free(v);
}

static pdb_status v4_seq_init(void *impl, pdb_dec_seq *s, int64_t cap) {
    v4_impl *v = impl;
    pdb_v4_cache *c = calloc(1, sizeof *c);
    if (!c) return pdb_err_set(PDB_NOMEM, "sequence cache");
    pdb_status st = pdb_v4_cache_init(c, v->m, cap, v->sem);
    if (st) { free(c); return st; }
    c->exec = (pdb_v4_exec){.pool = v->pool};
    s->n_layers = v->m->cfg.num_layers;
    s->state = c;
    return PDB_OK;
}

static void v4_seq_free(pdb_dec_seq *s) {
    if (!s->state) return;
    pdb_v4_cache_free(s->state);
    free(s->state);
    s->state = NULL;
}

/* All segments in one step (pdb_v4_forward_multi: each weight read once for every sequence's
 * tokens, the attention per sequence); each segment's results are what it gets alone, so this
 * equals any batching or chunking. */
static pdb_status v4_forward(void *impl, pdb_dec_seg *segs, int n_segs) {
    v4_impl *v = impl;
    if (n_segs <= 0) return PDB_OK;
    pdb_v4_step *st = malloc(sizeof(pdb_v4_step) * (size_t)n_segs);
    if (!st) return pdb_err_set(PDB_NOMEM, "v4 decoder: out of memory for %d segments", n_segs);
    for (int i = 0; i < n_segs; i++) {
        pdb_v4_cache *c = segs[i].seq->state;
        c->len = segs[i].seq->len;
        st[i] = (pdb_v4_step){c, segs[i].ids, segs[i].n, segs[i].logits};
    }
    pdb_status s = pdb_v4_forward_multi(v->m, st, n_segs);
    free(st);
    return s;
}

/* d (cap >= s's len) gets s's cache. The arrays are the ones pdb_v4_cache_init allocates, with
 * its sizes (the window, per compressed layer its entries and buffers, per CSA layer the overlap
 * halves and the indexer's): test_dec_v4 checks that a copy continues bit-identically, which
 * fails if the two drift apart. */
static void v4_seq_copy(void *impl, pdb_dec_seq *d, const pdb_dec_seq *s) {
    const pdb_v4_model *m = ((v4_impl *)impl)->m;
    const pdb_v4_cache *a = s->state;
    pdb_v4_cache *b = d->state;
    int64_t hd = m->cfg.head_dim, ihd = m->cfg.index_head_dim, W = a->window, kvb = a->kv_row.bytes, ikb = a->ik_row.bytes;
#define V4_CP(f, n) memcpy(b->layers[l].f, a->layers[l].f, sizeof(float) * (size_t)(n))
#define V4_CPB(f, n) memcpy(b->layers[l].f, a->layers[l].f, (size_t)(n))
    for (int64_t l = 0; l < a->n_layers; l++) {
        const pdb_v4_layer *L = &m->layers[l];
        V4_CPB(win, W * kvb);
        if (!L->rate) continue;
        int64_t n = s->len / L->rate + 1, r = L->rate, coff = L->comp.coff;
        V4_CPB(comp, n * kvb);
        V4_CP(buf_kv, r * coff * hd);
        V4_CP(buf_gate, r * coff * hd);
        if (L->attn != PDB_V4_ATTN_CSA) continue;
        V4_CP(ov_kv, r * hd);
        V4_CP(ov_gate, r * hd);
        V4_CPB(ikeys, n * ikb);
        V4_CP(ibuf_kv, r * 2 * ihd);
        V4_CP(ibuf_gate, r * 2 * ihd);
        V4_CP(iov_kv, r * ihd);
        V4_CP(iov_gate, r * ihd);
    }
#undef V4_CP
#undef V4_CPB
    b->len = a->len;
}

static void v4_get_block(void *impl, const pdb_dec_seq *s, int64_t b, int64_t bs, void *buf) {
    pdb_v4_pools_get_block(&((v4_impl *)impl)->m->cfg, s->state, b, bs, buf);
}

static void v4_put_block(void *impl, pdb_dec_seq *s, int64_t b, int64_t bs, const void *buf) {
    pdb_v4_pools_put_block(&((v4_impl *)impl)->m->cfg, s->state, b, bs, buf);
}

static const void *v4_weights(void *impl) { return ((v4_impl *)impl)->m; }

const pdb_dec_arch pdb_dec_arch_v4 = {
    .name = "deepseek_v4", .open = v4_open, .close = v4_close, .weights = v4_weights,
    .seq_init = v4_seq_init, .seq_free = v4_seq_free,
    .forward = v4_forward, .get_block = v4_get_block, .put_block = v4_put_block, .seq_copy = v4_seq_copy,
};
