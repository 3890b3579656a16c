/* pdb_prefill_cpu: the prefill engine's CPU backend. Its own cache is position-major f32
 * ([pos][layer][row], unlike the decoder's layer-major sequences); its arithmetic is the shared
 * deterministic V2 layer math (pdb_v2_ops) on the engine's weights, and its capture hook is
 * pdb_v2_ops_latent_rows with the decoder's kv_a_proj_with_mqa / kv_a_layernorm applied to each
 * layer's attention input. Invariant: with the same weights on both sides (--scheme none) every
 * captured row equals the decoder's own row bit for bit, for any chunking. */
#include <stdlib.h>
#include <string.h>

#include "pdb_prefill_backend.h"
#include "pdb_v2_ops.h"

typedef struct cpu_impl {
    pdb_pool *pool;
    pdb_v2_qweights ew;       /* engine weights */
    pdb_v2_qweights dw;       /* decoder weights (kv rows only) */
    float *cache;             /* [cap][L][row] */
    int64_t cap, row;
    float *rowbuf, *kva;      /* hook scratch */
    int64_t kva_rows;
} cpu_impl;

static pdb_status cpu_begin(pdb_prefill_backend *be, int64_t max_tokens) {
    cpu_impl *c = be->impl;
    free(c->cache);
    c->cap = max_tokens;
    c->cache = malloc(sizeof(float) * (size_t)(max_tokens * c->ew.cfg.num_layers * c->row));
    if (!c->cache) return pdb_err_set(PDB_NOMEM, "prefill cpu: cache for %lld tokens", (long long)max_tokens);
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

static pdb_status cpu_capture_rows(pdb_prefill_backend *be, int64_t l, const float *xn, const int64_t *pos, int64_t n,
                                   float *rows) {
    cpu_impl *c = be->impl;
    PDB_TRY(ensure_kva(c, n));
    pdb_v2_rowcache *rc = malloc(sizeof(*rc) * (size_t)n);
    if (!rc) return pdb_err_set(PDB_NOMEM, "prefill cpu: capture");
    for (int64_t i = 0; i < n; i++) rc[i] = (pdb_v2_rowcache){rows + i * c->row, 0, 0, pos[i]};
    pdb_v2_ops_latent_rows(&c->dw, l, c->pool, c->rowbuf, xn, n, pos, rc, c->kva);
    free(rc);
    return PDB_OK;
}

static pdb_status cpu_forward_chunk(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n,
                                    float *capture, float *logits_last) {
    cpu_impl *c = be->impl;
    const pdb_config *cf = &c->ew.cfg;
    int64_t L = cf->num_layers;
    if (!c->cache || pos0 + n > c->cap)
        return pdb_err_set(PDB_TOO_LARGE, "prefill cpu: positions %lld..%lld exceed the sequence (%lld)", (long long)pos0,
                           (long long)(pos0 + n), (long long)c->cap);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cf->vocab_size)
            return pdb_err_set(PDB_INVALID, "prefill: token id %d outside the vocabulary", ids[i]);
    PDB_TRY(ensure_kva(c, n));
    pdb_v2_batch b;
    PDB_TRY(pdb_v2_batch_init(&b, &c->ew, c->pool, n, pos0 + n));
    pdb_v2_rowcache *cap = malloc(sizeof(*cap) * (size_t)n);
    if (!cap) { pdb_v2_batch_free(&b); return pdb_err_set(PDB_NOMEM, "prefill cpu: capture"); }
    for (int64_t i = 0; i < n; i++) {
        b.cache[i] = (pdb_v2_rowcache){c->cache, c->row, L * c->row, 0};
        b.pos[i] = pos0 + i;
        /* capture layout [L, n, row]: row (l, pos) = capture + l*n*row + (pos - pos0)*row */
        cap[i] = (pdb_v2_rowcache){capture, n * c->row, c->row, pos0};
        pdb_v2_ops_embed(&b, i, ids[i]);
    }
    for (int64_t l = 0; l < L; l++) {
        pdb_v2_ops_attn_norm(&b, l);
        if (capture) pdb_v2_ops_latent_rows(&c->dw, l, c->pool, c->rowbuf, b.xn, n, b.pos, cap, c->kva);
        pdb_v2_ops_attention(&b, l);
        pdb_v2_ops_ffn(&b, l);
    }
    if (logits_last) pdb_v2_ops_logits(&b, n - 1, logits_last);
    free(cap);
    pdb_v2_batch_free(&b);
    return PDB_OK;
}

static void cpu_end(pdb_prefill_backend *be) {
    cpu_impl *c = be->impl;
    free(c->cache);
    c->cache = NULL;
    c->cap = 0;
}

static void cpu_destroy(pdb_prefill_backend *be) {
    if (!be) return;
    cpu_impl *c = be->impl;
    if (c) {
        free(c->cache);
        free(c->rowbuf);
        free(c->kva);
        pdb_v2_qweights_free(&c->ew);
        pdb_v2_qweights_free(&c->dw);
        pdb_pool_destroy(c->pool);
        free(c);
    }
    free(be);
}

pdb_status pdb_prefill_backend_cpu_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    if (o->cfg->arch == PDB_ARCH_DEEPSEEK_V4) return pdb_prefill_backend_cpu_v4_create(o, out);
    pdb_prefill_backend *be = calloc(1, sizeof *be);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!be || !c) { free(be); free(c); return pdb_err_set(PDB_NOMEM, "prefill cpu backend"); }
    be->name = "cpu";
    be->impl = c;
    be->begin = cpu_begin;
    be->forward_chunk = cpu_forward_chunk;
    be->capture_rows = cpu_capture_rows;
    be->end = cpu_end;
    be->destroy = cpu_destroy;
    c->row = o->cfg->kv_lora_rank + o->cfg->qk_rope_head_dim;
    pdb_status s = pdb_pool_create(o->threads, &c->pool);
    if (!s) s = pdb_v2_qweights_load(&c->ew, o->cfg, o->engine, 0);
    if (!s) s = pdb_v2_qweights_load(&c->dw, o->cfg, o->decoder, 1);
    if (!s) {
        int64_t mc = c->ew.max_cols > c->dw.max_cols ? c->ew.max_cols : c->dw.max_cols;
        c->rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(pdb_pool_threads(c->pool), mc));
        if (!c->rowbuf) s = pdb_err_set(PDB_NOMEM, "prefill cpu backend");
    }
    if (s) { cpu_destroy(be); return s; }
    *out = be;
    return PDB_OK;
}
