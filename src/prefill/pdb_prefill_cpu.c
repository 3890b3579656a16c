/* pdb_prefill_cpu: the prefill engine's CPU backend for DeepSeek-V2. Its own cache is
 * position-major f32 ([pos][layer][row], unlike the decoder's layer-major sequences); its
 * arithmetic is the shared deterministic V2 layer math (pdb_v2_ops) on the engine's weights, and
 * its capture hook is pdb_v2_ops_latent_rows with the decoder's kv_a_proj_with_mqa /
 * kv_a_layernorm applied to each layer's attention input, written into the block being
 * assembled (blk: the decoder's "latent" pool of one block, [L, block_size, row]).
 * Invariants: blk holds the rows of positions cur*bs .. hooked-1 of block cur; with the same
 * weights on both sides (--scheme none) every captured row equals the decoder's own row bit for
 * bit, for any chunking. */
#include <stdlib.h>
#include <string.h>

#include "pdb_prefill_backend.h"
#include "pdb_v2_ops.h"

typedef struct cpu_impl {
    pdb_prefill_backend be;   /* the interface (be.impl == this) */
    pdb_pool *pool;
    pdb_v2_qweights ew;       /* engine weights */
    pdb_v2_qweights dw;       /* decoder weights (kv rows only) */
    float *cache;             /* [cap][L][row] */
    int64_t cap, row;
    float *blk;               /* [L, bs, row]: the block being captured */
    int64_t bs, hooked;       /* block size; positions captured so far (all of blk's block up to it) */
    float *rowbuf, *kva;      /* hook scratch */
    int64_t kva_rows;
} cpu_impl;

static void cpu_end(pdb_prefill_backend *be) {
    cpu_impl *c = be->impl;
    free(c->cache);
    free(c->blk);
    c->cache = c->blk = NULL;
    c->cap = c->bs = c->hooked = 0;
}

static pdb_status cpu_begin(pdb_prefill_backend *be, int64_t max_tokens, int64_t bs) {
    cpu_impl *c = be->impl;
    cpu_end(be);
    int64_t L = c->ew.cfg.num_layers;
    c->cache = malloc(sizeof(float) * (size_t)(max_tokens * L * c->row));
    c->blk = malloc(sizeof(float) * (size_t)(L * bs * c->row));
    if (!c->cache || !c->blk) {
        cpu_end(be);
        return pdb_err_set(PDB_NOMEM, "prefill cpu: cache for %lld tokens", (long long)max_tokens);
    }
    c->cap = max_tokens;
    c->bs = bs;
    return PDB_OK;
}

/* Checks a hooked chunk: inside one block, right after the positions captured so far or at a
 * block's start (a block not asked for may be skipped whole). */
static pdb_status check_hook_span(cpu_impl *c, int64_t pos0, int64_t n) {
    if (!c->blk || n <= 0 || pos0 / c->bs != (pos0 + n - 1) / c->bs || (pos0 != c->hooked && pos0 % c->bs))
        return pdb_err_set(PDB_INVALID, "prefill cpu: capture of %lld..%lld (captured to %lld, blocks of %lld)", (long long)pos0,
                           (long long)(pos0 + n), (long long)c->hooked, (long long)c->bs);
    return PDB_OK;
}

static pdb_status ensure_kva(cpu_impl *c, int64_t n) {
    if (n <= c->kva_rows) return PDB_OK;
    float *k = realloc(c->kva, sizeof(float) * (size_t)(n * c->row));
    if (!k) return pdb_err_set(PDB_NOMEM, "prefill cpu: hook scratch");
    c->kva = k;
    c->kva_rows = n;
    return PDB_OK;
}

/* Row slots of positions pos0.. of layer-major blk: row (l, p) at blk + (l * bs + p % bs) * row. */
static void block_slots(const cpu_impl *c, int64_t pos0, int64_t n, pdb_v2_rowcache *rc) {
    for (int64_t i = 0; i < n; i++) rc[i] = (pdb_v2_rowcache){c->blk, c->bs * c->row, c->row, (pos0 / c->bs) * c->bs};
}

static pdb_status cpu_hook_chunk(pdb_prefill_backend *be, const float *xn, int64_t pos0, int64_t n) {
    cpu_impl *c = be->impl;
    PDB_TRY(check_hook_span(c, pos0, n));
    PDB_TRY(ensure_kva(c, n));
    pdb_v2_rowcache *rc = malloc(sizeof(*rc) * (size_t)n);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
    if (!rc || !pos) { free(rc); free(pos); return pdb_err_set(PDB_NOMEM, "prefill cpu: capture"); }
    for (int64_t i = 0; i < n; i++) pos[i] = pos0 + i;
    block_slots(c, pos0, n, rc);
    const int64_t H = c->dw.cfg.hidden_size;
    for (int64_t l = 0; l < c->dw.cfg.num_layers; l++)
        pdb_v2_ops_latent_rows(&c->dw, l, c->pool, c->rowbuf, xn + l * n * H, n, pos, rc, c->kva);
    c->hooked = pos0 + n;
    free(rc);
    free(pos);
    return PDB_OK;
}

static pdb_status cpu_get_block(pdb_prefill_backend *be, int64_t b, void *buf) {
    cpu_impl *c = be->impl;
    if (!c->blk || c->hooked != (b + 1) * c->bs)
        return pdb_err_set(PDB_INVALID, "prefill cpu: block %lld asked with %lld positions captured", (long long)b,
                           (long long)c->hooked);
    memcpy(buf, c->blk, sizeof(float) * (size_t)(c->ew.cfg.num_layers * c->bs * c->row));
    return PDB_OK;
}

static pdb_status cpu_forward_chunk(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                                    float *logits_last) {
    cpu_impl *c = be->impl;
    const pdb_config *cf = &c->ew.cfg;
    int64_t L = cf->num_layers;
    if (!c->cache || pos0 + n > c->cap)
        return pdb_err_set(PDB_TOO_LARGE, "prefill cpu: positions %lld..%lld exceed the sequence (%lld)", (long long)pos0,
                           (long long)(pos0 + n), (long long)c->cap);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cf->vocab_size)
            return pdb_err_set(PDB_INVALID, "prefill: token id %d outside the vocabulary", ids[i]);
    if (capture) PDB_TRY(check_hook_span(c, pos0, n));
    PDB_TRY(ensure_kva(c, n));
    pdb_v2_batch b;
    PDB_TRY(pdb_v2_batch_init(&b, &c->ew, c->pool, n, pos0 + n));
    pdb_v2_rowcache *cap = malloc(sizeof(*cap) * (size_t)n);
    if (!cap) { pdb_v2_batch_free(&b); return pdb_err_set(PDB_NOMEM, "prefill cpu: capture"); }
    for (int64_t i = 0; i < n; i++) {
        b.cache[i] = (pdb_v2_rowcache){c->cache, c->row, L * c->row, 0};
        b.pos[i] = pos0 + i;
        pdb_v2_ops_embed(&b, i, ids[i]);
    }
    block_slots(c, pos0, n, cap);
    for (int64_t l = 0; l < L; l++) {
        pdb_v2_ops_attn_norm(&b, l);
        if (capture) pdb_v2_ops_latent_rows(&c->dw, l, c->pool, c->rowbuf, b.xn, n, b.pos, cap, c->kva);
        pdb_v2_ops_attention(&b, l);
        pdb_v2_ops_ffn(&b, l);
    }
    if (logits_last) pdb_v2_ops_logits(&b, n - 1, logits_last);
    if (capture) c->hooked = pos0 + n;
    free(cap);
    pdb_v2_batch_free(&b);
    return PDB_OK;
}

static void cpu_destroy(pdb_prefill_backend *be) {
    cpu_impl *c = be ? be->impl : NULL;
    if (!c) return;
    cpu_end(be);
    free(c->rowbuf);
    free(c->kva);
    pdb_v2_qweights_free(&c->ew);
    pdb_v2_qweights_free(&c->dw);
    pdb_pool_destroy(c->pool);
    free(c);
}

pdb_status pdb_prefill_backend_cpu_v2_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    cpu_impl *c = calloc(1, sizeof *c);
    if (!c) return pdb_err_set(PDB_NOMEM, "prefill cpu backend");
    c->be = (pdb_prefill_backend){.name = "cpu", .exact = 1, .impl = c, .semantics = o->semantics, .begin = cpu_begin, .forward_chunk = cpu_forward_chunk,
                                  .hook_chunk = cpu_hook_chunk, .get_block = cpu_get_block, .end = cpu_end,
                                  .destroy = cpu_destroy};
    c->row = o->cfg->kv_lora_rank + o->cfg->qk_rope_head_dim;
    pdb_status s = pdb_pool_create(o->exec.threads, &c->pool);
    if (!s) s = pdb_v2_qweights_load(&c->ew, o->cfg, o->engine, 0);
    if (!s) s = pdb_v2_qweights_load(&c->dw, o->cfg, o->decoder, 1);
    if (!s) {
        int64_t mc = c->ew.max_cols > c->dw.max_cols ? c->ew.max_cols : c->dw.max_cols;
        c->rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(pdb_pool_threads(c->pool), mc));
        if (!c->rowbuf) s = pdb_err_set(PDB_NOMEM, "prefill cpu backend");
    }
    if (s) { cpu_destroy(&c->be); return s; }
    *out = &c->be;
    return PDB_OK;
}
