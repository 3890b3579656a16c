/* pdb_cuda_stub: the CUDA probe for builds without nvcc: no devices. */
#include "pdb_cuda.h"
#ifndef PDB_HAVE_CUDA
int pdb_cuda_built(void) { return 0; }
int pdb_cuda_device_count(char *name, int name_len) { if (name && name_len > 0) name[0] = 0; return 0; }
void pdb_cuda_memory_used(long long *used, long long *total) { *used = *total = 0; }
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
int pdb_cuda_attn_probe_wg_fits(const pdb_cuda_attn_probe_opts *o) {
    (void)o;
    return 0;
}
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_dot_probe.h"
pdb_status pdb_cuda_dot_probe_run(const pdb_cuda_dot_probe_opts *o, const float *A, const float *W, float *C,
                                  int *tiled, double *ms) {
    (void)o, (void)A, (void)W, (void)C;
    if (tiled) *tiled = 0;
    if (ms) *ms = 0;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_v4_engine.h"
/* The device-resident V4 engine: create fails, so nothing else is reached with an engine. */
pdb_status pdb_cuda_v4_engine_create(const pdb_v4_model *m, int device, const pdb_cuda_v4_engine_opts *o,
                                     pdb_cuda_v4_engine **out) {
    (void)m, (void)device, (void)o;
    *out = NULL;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
pdb_status pdb_cuda_v4_engine_create_seeded(const pdb_config *cfg, uint64_t seed, int device,
                                            const pdb_cuda_v4_engine_opts *o, pdb_cuda_v4_engine **out) {
    (void)cfg, (void)seed, (void)device, (void)o;
    *out = NULL;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
pdb_status pdb_cuda_v4_engine_begin(pdb_cuda_v4_engine *e, int64_t max_tokens) {
    (void)e, (void)max_tokens;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_v4_engine_forward(pdb_cuda_v4_engine *e, const int32_t *ids, int64_t n, const pdb_v4_hook *hook,
                                      float *logits_last) {
    (void)e, (void)ids, (void)n, (void)hook, (void)logits_last;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_v4_engine_set_hook(pdb_cuda_v4_engine *e, const pdb_v4_model *dm) {
    (void)e, (void)dm;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_v4_engine_hook_products(pdb_cuda_v4_engine *e, int64_t l, const float *x, int64_t n,
                                            pdb_v4_feed_rows *out) {
    (void)e, (void)l, (void)x, (void)n, (void)out;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
int64_t pdb_cuda_v4_engine_pass_tokens(const pdb_cuda_v4_engine *e) { (void)e; return 0; }
int64_t pdb_cuda_v4_engine_len(const pdb_cuda_v4_engine *e) { (void)e; return 0; }
int64_t pdb_cuda_v4_engine_weight_bytes(const pdb_cuda_v4_engine *e) { (void)e; return 0; }
void pdb_cuda_v4_engine_gemm_forms(const pdb_cuda_v4_engine *e, int64_t *checked, int64_t *rejected) {
    (void)e;
    *checked = *rejected = 0;
}
void pdb_cuda_v4_engine_profile_take(pdb_cuda_v4_engine *e, char *buf, size_t n) {
    (void)e;
    if (buf && n) buf[0] = 0;
}
void pdb_cuda_v4_engine_end(pdb_cuda_v4_engine *e) { (void)e; }
void pdb_cuda_v4_engine_free(pdb_cuda_v4_engine *e) { (void)e; }
#include "pdb_cuda_v4_probe.h"
/* The V4 kernels' probes (tests/cuda/test_cuda_v4_ops.c): no kernels in this build. */
#define PDB_V4_PROBE_NONE return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (the v4 kernel probes)")
pdb_status pdb_cuda_v4_probe_embed_hc(const int32_t *ids, const void *emb, int bf16, int64_t V, int64_t n, int64_t hc,
                                      int64_t H, float *hs) {
    (void)ids, (void)emb, (void)bf16, (void)V, (void)n, (void)hc, (void)H, (void)hs;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_hc_pre(int64_t hc, int64_t H, int iters, float hc_eps, double eps, const float *hs,
                                    int64_t n, const float *fn, const float *base, const float *scale, const float *norm,
                                    float *x, float *post, float *comb) {
    (void)hc, (void)H, (void)iters, (void)hc_eps, (void)eps, (void)hs, (void)n, (void)fn, (void)base, (void)scale;
    (void)norm, (void)x, (void)post, (void)comb;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_hc_pre_mixed(int64_t hc, int64_t H, int iters, float hc_eps, double eps, const float *hs,
                                          int64_t n, const float *fn, const float *base, const float *scale,
                                          const float *norm, float *x, uint16_t *x16, uint16_t *x16lo, float *post,
                                          float *comb) {
    (void)hc, (void)H, (void)iters, (void)hc_eps, (void)eps, (void)hs, (void)n, (void)fn, (void)base, (void)scale;
    (void)norm, (void)x, (void)x16, (void)x16lo, (void)post, (void)comb;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_hc_post(int64_t hc, int64_t H, float *hs, const float *out, const float *post,
                                     const float *comb, int64_t n) {
    (void)hc, (void)H, (void)hs, (void)out, (void)post, (void)comb, (void)n;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_hc_post_moe(int64_t hc, int64_t H, float *hs, const void *ye, int ye_bf16, int64_t slots,
                                         const int32_t *slot_row, const float *wt, const float *shared, int64_t K,
                                         const float *post, const float *comb, int64_t n) {
    (void)hc, (void)H, (void)hs, (void)ye, (void)ye_bf16, (void)slots, (void)slot_row, (void)wt, (void)shared, (void)K;
    (void)post, (void)comb, (void)n;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_hc_head(int64_t hc, int64_t H, float hc_eps, double eps, const float *hs,
                                     int64_t nrows_hs, const int64_t *rows, int64_t n, const float *fn,
                                     const float *base, const float *scale, const float *norm, float *y) {
    (void)hc, (void)H, (void)hc_eps, (void)eps, (void)hs, (void)nrows_hs, (void)rows, (void)n, (void)fn, (void)base;
    (void)scale, (void)norm, (void)y;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_heads_norm_rope(float *x, int64_t ld, int64_t n, int64_t nh, int64_t hd, int64_t rd,
                                             int mode, const float *w, const float *cs, int64_t pos0, int sign,
                                             double eps) {
    (void)x, (void)ld, (void)n, (void)nh, (void)hd, (void)rd, (void)mode, (void)w, (void)cs, (void)pos0, (void)sign;
    (void)eps;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_heads_norm_rope_in16(const uint16_t *x, int64_t ld, int64_t n, int64_t nh, int64_t hd,
                                                  int64_t rd, int mode, const float *w, const float *cs, int64_t pos0,
                                                  int sign, double eps, int bf16_out, void *y) {
    (void)x, (void)ld, (void)n, (void)nh, (void)hd, (void)rd, (void)mode, (void)w, (void)cs, (void)pos0, (void)sign;
    (void)eps, (void)bf16_out, (void)y;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_compress(const float *kv, const float *gate, int64_t nrows, int64_t ld, int64_t e0,
                                      const float *ape, const float *norm, int64_t r, int64_t dim, int coff, int64_t w0,
                                      int64_t w1, const float *cs, int64_t rd, double eps, float *out) {
    (void)kv, (void)gate, (void)nrows, (void)ld, (void)e0, (void)ape, (void)norm, (void)r, (void)dim, (void)coff;
    (void)w0, (void)w1, (void)cs, (void)rd, (void)eps, (void)out;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_index_reduce(const float *dots, int64_t ld, const float *wt, int64_t n, int64_t nih,
                                          int64_t pos0, int64_t r, int64_t K, float sscale, float *score, int64_t lds) {
    (void)dots, (void)ld, (void)wt, (void)n, (void)nih, (void)pos0, (void)r, (void)K, (void)sscale, (void)score;
    (void)lds;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_index_scores_tc(const float *q, const float *wt, const uint16_t *keys, int64_t n,
                                             int64_t nih, int64_t ihd, int64_t pos0, int64_t r, int64_t K,
                                             float sscale, float *score, int64_t lds, int mma_sync, int reps,
                                             double *gpu_ms) {
    (void)q, (void)wt, (void)keys, (void)n, (void)nih, (void)ihd, (void)pos0, (void)r, (void)K, (void)sscale, (void)mma_sync;
    (void)score, (void)lds, (void)reps;
    if (gpu_ms) *gpu_ms = 0.0;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_topk(const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r, int64_t K,
                                  int32_t *sel, int32_t *nsel) {
    (void)score, (void)lds, (void)n, (void)pos0, (void)r, (void)K, (void)sel, (void)nsel;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_route(float *logits, const int32_t *ids, const int32_t *tid2eid, int64_t V,
                                   const float *bias, int64_t n, int E, int K, int scoring, float rsf, int32_t *idx,
                                   float *wt) {
    (void)logits, (void)ids, (void)tid2eid, (void)V, (void)bias, (void)n, (void)E, (void)K, (void)scoring, (void)rsf;
    (void)idx, (void)wt;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_swiglu(const float *g, const float *u, int64_t count, float limit, int bf16, void *out) {
    (void)g, (void)u, (void)count, (void)limit, (void)bf16, (void)out;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_swiglu_in16(const uint16_t *g, const uint16_t *u, int64_t count, float limit, int bf16,
                                         void *out) {
    (void)g, (void)u, (void)count, (void)limit, (void)bf16, (void)out;
    PDB_V4_PROBE_NONE;
}
pdb_status pdb_cuda_v4_probe_mm_rate(int64_t M, int64_t N, int64_t K, int reps, double ms[3], int same[3]) {
    (void)M, (void)N, (void)K, (void)reps, (void)ms, (void)same;
    PDB_V4_PROBE_NONE;
}
#include "pdb_cuda_gemm_probe.h"
pdb_status pdb_cuda_probe_gemm_forms(int reps, pdb_gemm_form_row *rows, int cap, int *n) {
    (void)reps, (void)rows, (void)cap;
    *n = 0;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (the gemm probe)");
}
#include "pdb_cuda_v4_attn_probe.h"
pdb_status pdb_cuda_v4_attn_probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms) {
    (void)d, (void)tc, (void)gpu_ms;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
pdb_status pdb_cuda_v4_attn_probe_rope_out(const pdb_v4_attn_desc *d, int tc, const float *cs, int64_t rd,
                                           int64_t *differ_bf16, int64_t *differ_f32) {
    (void)d, (void)tc, (void)cs, (void)rd, (void)differ_bf16, (void)differ_f32;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend");
}
#endif
