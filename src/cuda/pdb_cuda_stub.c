/* pdb_cuda_stub: the CUDA probe for builds without nvcc: no devices. */
#include "pdb_cuda.h"
#ifndef PDB_HAVE_CUDA
int pdb_cuda_built(void) { return 0; }
int pdb_cuda_device_count(char *name, int name_len) { if (name && name_len > 0) name[0] = 0; return 0; }
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_prefill.h"
/* Builds without nvcc (-DPDB_NO_CUDA=ON or no toolkit) still link the prefill's "cuda" backend
 * (src/prefill/pdb_prefill_cuda.c) and its test, which asks for a GPU before it runs one: create
 * fails, so the others are never reached with an engine. */
pdb_status pdb_cuda_prefill_create(const pdb_config *cfg, const pdb_st *engine, const pdb_st *decoder, int device,
                                   const pdb_cuda_prefill_opts *co, pdb_cuda_prefill **out) {
    (void)cfg;
    (void)engine;
    (void)decoder;
    (void)device;
    (void)co;
    *out = NULL;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
pdb_status pdb_cuda_prefill_begin(pdb_cuda_prefill *c, int64_t max_tokens, int64_t block_size) {
    (void)c, (void)max_tokens, (void)block_size;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_prefill_forward(pdb_cuda_prefill *c, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                                    float *logits_last) {
    (void)c, (void)ids, (void)pos0, (void)n, (void)capture, (void)logits_last;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_prefill_hook_chunk(pdb_cuda_prefill *c, const float *xn, int64_t pos0, int64_t n) {
    (void)c, (void)xn, (void)pos0, (void)n;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_prefill_get_block(pdb_cuda_prefill *c, int64_t b, void *buf) {
    (void)c, (void)b, (void)buf;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
int pdb_cuda_prefill_exact(const pdb_cuda_prefill *c) { (void)c; return 0; }
void pdb_cuda_prefill_profile_take(pdb_cuda_prefill *c, char *buf, size_t n) {
    (void)c;
    if (buf && n) buf[0] = 0;
}
void pdb_cuda_prefill_end(pdb_cuda_prefill *c) { (void)c; }
void pdb_cuda_prefill_free(pdb_cuda_prefill *c) { (void)c; }
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_v4.h"
pdb_status pdb_cuda_v4_mm_create(int device, pdb_v4_mm_provider **out) {
    (void)device;
    *out = NULL;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
void pdb_cuda_v4_mm_free(pdb_v4_mm_provider *p) { (void)p; }
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_attn_probe.h"
pdb_status pdb_cuda_attn_probe_run(const pdb_cuda_attn_probe_opts *o, pdb_cuda_attn_probe_row *rows, int nrows) {
    (void)o, (void)rows, (void)nrows;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_v4_attn_probe.h"
pdb_status pdb_cuda_v4_attn_probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms) {
    (void)d, (void)tc, (void)gpu_ms;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
#endif
