/* pdb_prefill_cpu_v4: the prefill engine's CPU backend for DeepSeek-V4. The engine runs the
 * shared V4 math (pdb_v4_forward_hooked) on its own weights with its own pdb_v4_cache; the
 * capture hook (a block hook, pdb_prefill_backend.h) receives every layer's attention input and
 * feeds it, with the DECODER's weights, into a second pdb_v4_cache through pdb_v4_cache_feed
 * (the decoder's own definition of its pools: K=V rows, window, compressed entries, indexer keys,
 * overlap halves); get_block copies a finished block out with pdb_v4_pools_get_block, the
 * function the decoder uses for its own blocks. Both caches run on one execution context (the
 * backend's threads, and on CUDA the device's provider), held by the caches, not the weights.
 * The decoder's model is loaded with PDB_V4_PART_HOOK: only the tensors pdb_v4_cache_feed reads
 * (the same qmat views of the decoder checkpoint's stored bytes a full load makes, so the pools
 * are the same), not the decoder's experts or the rest of its forward (issue 17 item 4); the
 * engine's own model computes on its checkpoint's formats as stored (bf16 stays bf16).
 * Invariants: the hook cache's len equals the engine cache's len between chunks (the hook's
 * pools need every chunk from position 0, so it runs whatever `capture` says); with the same
 * weights on both sides (--scheme none) every block equals the decoder's own bit for bit, for
 * any chunking (chunks never cross a block boundary: the engine clips them). On CUDA with
 * precision bf16 or f32 (the default is bf16) the engine is the device-resident one
 * (pdb_cuda_v4_engine: not the decoder's math, so the blocks are the decoder's pools of the
 * device's attention inputs, be->exact = 0), and the hook's products (wkv and the compressors'
 * projections of each attention input, with the decoder's weights in f32) run on the device too,
 * the decoder's steps (norm, RoPE, rounding, pooling, row encoding) here on the pool's threads,
 * hook_chunk included; precision exact keeps the CPU engine and the host hook on the provider
 * (bit-identical blocks). */
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_v4.h"
#include "pdb_cuda_v4_engine.h"
#include "pdb_prefill_backend.h"
#include "pdb_v4.h"

typedef struct v4_impl {
    pdb_v4_model *em;     /* engine weights */
    pdb_v4_model *dm;     /* decoder weights: the hook's part only (PDB_V4_PART_HOOK: wkv, kv_norm, compressors) */
    pdb_v4_cache ec, dc;  /* engine cache / the decoder's pools */
    pdb_v4_semantics sem;
    int64_t bs;           /* block size of the sequence */
    pdb_pool *pool;       /* matmul threads of both models */
    pdb_v4_mm_provider *mm; /* cuda: where both models' products run (owned) */
    pdb_cuda_v4_engine *dev; /* cuda, precision bf16 / f32: the device-resident engine in place of em and ec (owned),
                                with the hook's products (set_hook with dm) */
} v4_impl;

static pdb_status v4_hook(void *user, int64_t l, const float *x, int64_t T, int64_t p0) {
    v4_impl *v = user;
    if (v->dc.len != p0) return pdb_err_set(PDB_INVALID, "prefill v4 hook: at position %lld, the hook is at %lld", (long long)p0,
                                            (long long)v->dc.len);
    PDB_TRY(pdb_v4_cache_feed(v->dm, &v->dc, l, x, T, NULL));
    if (l == v->dm->cfg.num_layers - 1) v->dc.len += T; /* every layer of these positions is fed */
    return PDB_OK;
}

/* The device engine's hook: layer l's feed products, computed on the device with the decoder's hook
 * weights (pdb_cuda_v4_engine_set_hook), through the decoder's own steps. */
static pdb_status v4_hook_rows(void *user, int64_t l, const pdb_v4_feed_rows *r, int64_t T, int64_t p0) {
    v4_impl *v = user;
    if (v->dc.len != p0) return pdb_err_set(PDB_INVALID, "prefill v4 hook: at position %lld, the hook is at %lld", (long long)p0,
                                            (long long)v->dc.len);
    PDB_TRY(pdb_v4_cache_feed_rows(v->dm, &v->dc, l, r, T));
    if (l == v->dm->cfg.num_layers - 1) v->dc.len += T;
    return PDB_OK;
}

static void v4_end(pdb_prefill_backend *be) {
    v4_impl *v = be->impl;
    pdb_v4_cache_free(&v->ec);
    pdb_v4_cache_free(&v->dc);
    if (v->dev) pdb_cuda_v4_engine_end(v->dev);
}

static pdb_status v4_begin(pdb_prefill_backend *be, int64_t max_tokens, int64_t bs) {
    v4_impl *v = be->impl;
    v4_end(be);
    pdb_status s = v->dev ? pdb_cuda_v4_engine_begin(v->dev, max_tokens) : pdb_v4_cache_init(&v->ec, v->em, max_tokens, v->sem);
    if (!s) s = pdb_v4_cache_init(&v->dc, v->dm, max_tokens, v->sem);
    if (s) { v4_end(be); return s; }
    v->ec.exec = v->dc.exec = (pdb_v4_exec){.pool = v->pool, .mm = v->mm};
    v->bs = bs;
    return PDB_OK;
}

static pdb_status v4_forward_chunk(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                                   float *logits_last) {
    v4_impl *v = be->impl;
    (void)capture; /* the hook's pools need every chunk from position 0 */
    int64_t len = v->dev ? pdb_cuda_v4_engine_len(v->dev) : v->ec.len;
    if (!v->dc.layers || pos0 != len)
        return pdb_err_set(PDB_INVALID, "prefill v4: chunk at %lld, the sequence is at %lld", (long long)pos0, (long long)len);
    if (v->dc.len != pos0) return pdb_err_set(PDB_INVALID, "prefill v4: the hook must run on every chunk from position 0");
    pdb_v4_hook hook = {v4_hook, v, v->dev ? v4_hook_rows : NULL};
    if (v->dev) return pdb_cuda_v4_engine_forward(v->dev, ids, n, &hook, logits_last);
    return pdb_v4_forward_hooked(v->em, &v->ec, ids, n, 0, logits_last, &hook);
}

/* The hook alone: each layer's given inputs fed into the decoder's pools (the engine's cache is
 * left behind: a sequence uses forward_chunk or hook_chunk, not both). */
static pdb_status v4_hook_chunk(pdb_prefill_backend *be, const float *xn, int64_t pos0, int64_t n) {
    v4_impl *v = be->impl;
    if (!v->dc.layers || pos0 != v->dc.len || pos0 + n > v->dc.cap)
        return pdb_err_set(PDB_INVALID, "prefill v4: hook chunk at %lld, the hook is at %lld", (long long)pos0, (long long)v->dc.len);
    const int64_t H = v->dm->cfg.hidden_size, L = v->dm->cfg.num_layers;
    if (!v->dev) {
        for (int64_t l = 0; l < L; l++) PDB_TRY(pdb_v4_cache_feed(v->dm, &v->dc, l, xn + l * n * H, n, NULL));
        v->dc.len += n;
        return PDB_OK;
    }
    /* the device's products of the given inputs, a pass at a time, through the decoder's steps */
    const int64_t S = pdb_cuda_v4_engine_pass_tokens(v->dev);
    if (S <= 0) return pdb_err_set(PDB_INVALID, "prefill v4: hook chunk before the device engine's sequence began");
    for (int64_t t0 = 0; t0 < n; t0 += S) {
        int64_t tn = n - t0 < S ? n - t0 : S;
        for (int64_t l = 0; l < L; l++) {
            pdb_v4_feed_rows r;
            PDB_TRY(pdb_cuda_v4_engine_hook_products(v->dev, l, xn + (l * n + t0) * H, tn, &r));
            PDB_TRY(pdb_v4_cache_feed_rows(v->dm, &v->dc, l, &r, tn));
        }
        v->dc.len += tn;
    }
    return PDB_OK;
}

static pdb_status v4_get_block(pdb_prefill_backend *be, int64_t b, void *buf) {
    v4_impl *v = be->impl;
    if (v->dc.len != (b + 1) * v->bs)
        return pdb_err_set(PDB_INVALID, "prefill v4: block %lld asked at position %lld (its end is %lld)", (long long)b,
                           (long long)v->dc.len, (long long)((b + 1) * v->bs));
    pdb_v4_pools_get_block(&v->dm->cfg, &v->dc, b, v->bs, buf);
    return PDB_OK;
}

static void v4_destroy(pdb_prefill_backend *be) {
    if (!be) return;
    v4_impl *v = be->impl;
    if (v) {
        v4_end(be);
        pdb_cuda_v4_engine_free(v->dev);
        pdb_v4_free(v->em);
        pdb_v4_free(v->dm);
        pdb_pool_destroy(v->pool);
        if (v->mm) v->mm->destroy(v->mm->ctx);
        free(v);
    }
    free(be);
}

/* The CPU backend, with both models' products on `mm` when given (taken over, also on failure);
 * with `device_engine` the engine's forward runs on the device-resident engine instead (its weights
 * uploaded from the engine checkpoint, which is then closed here), the hook still on mm. */
static pdb_status v4_create(const pdb_prefill_backend_opts *o, pdb_v4_mm_provider *mm, int device_engine,
                            pdb_prefill_backend **out) {
    pdb_prefill_backend *be = calloc(1, sizeof *be);
    v4_impl *v = calloc(1, sizeof *v);
    if (!be || !v) {
        free(be);
        free(v);
        if (mm) mm->destroy(mm->ctx);
        return pdb_err_set(PDB_NOMEM, "prefill cpu v4 backend");
    }
    v->mm = mm;
    be->name = mm ? mm->name : "cpu";
    be->semantics = o->semantics;
    be->exact = !device_engine;
    be->impl = v;
    be->begin = v4_begin;
    be->forward_chunk = v4_forward_chunk;
    be->hook_chunk = v4_hook_chunk;
    be->get_block = v4_get_block;
    be->end = v4_end;
    be->destroy = v4_destroy;
    v->sem = (pdb_v4_semantics)o->semantics;
    pdb_status s = pdb_v4_check_semantics(o->cfg, v->sem);
    if (!s) s = pdb_v4_load_from(o->cfg, o->engine, &v->em);
    if (!s) s = pdb_v4_load_part(o->cfg, o->decoder, PDB_V4_PART_HOOK, &v->dm);
    if (!s) s = pdb_pool_create(o->exec.threads, &v->pool);
    if (!s && device_engine) {
        pdb_cuda_v4_engine_opts eo = {.prec = o->precision};
        s = pdb_cuda_v4_engine_create(v->em, o->exec.device, &eo, &v->dev);
        pdb_v4_free(v->em); /* on the device now */
        v->em = NULL;
        if (!s) s = pdb_cuda_v4_engine_set_hook(v->dev, v->dm); /* the hook's products on the device too */
    }
    if (s) { v4_destroy(be); return s; }
    *out = be;
    return PDB_OK;
}

pdb_status pdb_prefill_backend_cpu_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    return v4_create(o, NULL, 0, out);
}

pdb_status pdb_prefill_backend_cuda_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    *out = NULL;
    pdb_v4_mm_provider *mm = NULL;
    PDB_TRY(pdb_cuda_v4_mm_create(o->exec.device, &mm));
    return v4_create(o, mm, o->precision != PDB_CUDA_PREC_EXACT, out);
}
