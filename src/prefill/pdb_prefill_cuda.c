/* pdb_prefill_cuda: the pdb_prefill_backend of the CUDA DeepSeek-V2 engine (see
 * pdb_prefill_cuda.h). State: the backend struct and the engine it owns (destroy frees both). */
#include "pdb_prefill_cuda.h"

#include <stdlib.h>

typedef struct cuda_backend {
    pdb_prefill_backend be;
    pdb_cuda_prefill *c;
} cuda_backend;

static pdb_cuda_prefill *engine_of(pdb_prefill_backend *be) { return ((cuda_backend *)be->impl)->c; }

static pdb_status cb_begin(pdb_prefill_backend *be, int64_t max_tokens, int64_t block_size) {
    return pdb_cuda_prefill_begin(engine_of(be), max_tokens, block_size);
}

static pdb_status cb_forward(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                             float *logits_last) {
    return pdb_cuda_prefill_forward(engine_of(be), ids, pos0, n, capture, logits_last);
}

static pdb_status cb_hook_chunk(pdb_prefill_backend *be, const float *xn, int64_t pos0, int64_t n) {
    return pdb_cuda_prefill_hook_chunk(engine_of(be), xn, pos0, n);
}

static pdb_status cb_get_block(pdb_prefill_backend *be, int64_t b, void *buf) {
    return pdb_cuda_prefill_get_block(engine_of(be), b, buf);
}

static void cb_end(pdb_prefill_backend *be) { pdb_cuda_prefill_end(engine_of(be)); }

static void cb_destroy(pdb_prefill_backend *be) {
    if (!be) return;
    pdb_cuda_prefill_free(engine_of(be));
    free(be->impl);
}

pdb_status pdb_prefill_cuda_create(const pdb_prefill_backend_opts *o, const pdb_cuda_prefill_opts *co,
                                   pdb_prefill_backend **out) {
    *out = NULL;
    /* without the engine's options: the backend options' precision and the engine's defaults */
    pdb_cuda_prefill_opts dflt = {.prec = o ? o->precision : PDB_CUDA_PREC_BF16};
    pdb_cuda_prefill *c = NULL;
    PDB_TRY(pdb_cuda_prefill_create(o ? o->cfg : NULL, o ? o->engine : NULL, o ? o->decoder : NULL, o ? o->exec.device : 0,
                                    co ? co : &dflt, &c));
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) {
        pdb_cuda_prefill_free(c);
        return pdb_err_set(PDB_NOMEM, "cuda backend");
    }
    b->c = c;
    b->be = (pdb_prefill_backend){.name = "cuda", .exact = pdb_cuda_prefill_exact(c), .impl = b, .semantics = o->semantics, .begin = cb_begin,
                                  .forward_chunk = cb_forward, .hook_chunk = cb_hook_chunk, .get_block = cb_get_block,
                                  .end = cb_end, .destroy = cb_destroy};
    *out = &b->be;
    return PDB_OK;
}

void pdb_prefill_cuda_profile_take(pdb_prefill_backend *be, char *buf, size_t n) {
    pdb_cuda_prefill_profile_take(engine_of(be), buf, n);
}

pdb_status pdb_prefill_backend_cuda_v2_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    return pdb_prefill_cuda_create(o, NULL, out);
}
