/* pdb_cuda_v4_probe: single pdb_cuda_v4_kernels.h launches on host arrays (pdb_cuda_v4_probe.h).
 * Invariants: every device buffer a probe makes is freed on every path (the arena); each probe is
 * synchronous (copies in, one launch on stream 0, cudaDeviceSynchronize, copies out). */
#include <string.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_v4_kernels.h"
#include "pdb_cuda_v4_probe.h"

namespace {

struct arena {
    void *p[16];
    int n;
};

void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) cudaFree(a->p[i]);
    a->n = 0;
}

/* A device buffer of `bytes` (at least 1), holding h's bytes when h != NULL, else zeros. */
template <typename T> pdb_status up(arena *a, T **d, const void *h, size_t bytes) {
    *d = NULL;
    if (a->n >= 16) return pdb_err_set(PDB_INVALID, "v4 probe: too many buffers");
    void *p = NULL;
    PDB_CU(cudaMalloc(&p, bytes ? bytes : 1));
    a->p[a->n++] = p;
    if (h && bytes) PDB_CU(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    else PDB_CU(cudaMemset(p, 0, bytes ? bytes : 1));
    *d = (T *)p;
    return PDB_OK;
}

pdb_status down(void *h, const void *d, size_t bytes) {
    if (bytes) PDB_CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return PDB_OK;
}

pdb_status start(const char *who) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        cudaGetLastError();
        return pdb_err_set(PDB_CUDA, "%s: no usable GPU (%s)", who, e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    PDB_CU(cudaSetDevice(0));
    return PDB_OK;
}

pdb_status finish(void) {
    PDB_CU(cudaDeviceSynchronize());
    return PDB_OK;
}

template <typename F> pdb_status with_arena(const char *who, F f) {
    PDB_TRY(start(who));
    arena a = {};
    pdb_status s = f(&a);
    if (!s) s = finish();
    arena_free(&a);
    return s;
}

size_t fz(int64_t n) { return sizeof(float) * (size_t)(n > 0 ? n : 0); }

} // namespace

extern "C" pdb_status pdb_cuda_v4_probe_embed_hc(const int32_t *ids, const void *emb, int bf16, int64_t V, int64_t n,
                                                 int64_t hc, int64_t H, float *hs) {
    return with_arena("v4 probe embed_hc", [&](arena *a) -> pdb_status {
        int32_t *dids;
        void *demb;
        float *dhs;
        PDB_TRY(up(a, &dids, ids, sizeof(int32_t) * (size_t)n));
        PDB_TRY(up(a, &demb, emb, (bf16 ? 2 : 4) * (size_t)(V * H)));
        PDB_TRY(up(a, &dhs, NULL, fz(n * hc * H)));
        PDB_TRY(pdb_cuda_v4_embed_hc(0, dids, demb, bf16 ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32, n, hc, H, dhs));
        PDB_TRY(finish());
        return down(hs, dhs, fz(n * hc * H));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_hc_pre(int64_t hc, int64_t H, int iters, float hc_eps, double eps,
                                               const float *hs, int64_t n, const float *fn, const float *base,
                                               const float *scale, const float *norm, float *x, float *post,
                                               float *comb) {
    return with_arena("v4 probe hc_pre", [&](arena *a) -> pdb_status {
        const int64_t nm = (2 + hc) * hc;
        float *dhs, *dfn, *dbase, *dscale, *dnorm, *dx, *dpost, *dcomb;
        PDB_TRY(up(a, &dhs, hs, fz(n * hc * H)));
        PDB_TRY(up(a, &dfn, fn, fz(nm * hc * H)));
        PDB_TRY(up(a, &dbase, base, fz(nm)));
        PDB_TRY(up(a, &dscale, scale, fz(3)));
        PDB_TRY(up(a, &dnorm, norm, fz(H)));
        PDB_TRY(up(a, &dx, NULL, fz(n * H)));
        PDB_TRY(up(a, &dpost, NULL, fz(n * hc)));
        PDB_TRY(up(a, &dcomb, NULL, fz(n * hc * hc)));
        pdb_cuda_v4_hc c = {hc, H, iters, hc_eps, eps};
        PDB_TRY(pdb_cuda_v4_hc_pre(0, &c, dhs, n, dfn, dbase, dscale, dnorm, dx, dpost, dcomb));
        PDB_TRY(finish());
        PDB_TRY(down(x, dx, fz(n * H)));
        PDB_TRY(down(post, dpost, fz(n * hc)));
        return down(comb, dcomb, fz(n * hc * hc));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_hc_pre_mixed(int64_t hc, int64_t H, int iters, float hc_eps, double eps,
                                                     const float *hs, int64_t n, const float *fn, const float *base,
                                                     const float *scale, const float *norm, float *x, uint16_t *x16,
                                                     uint16_t *x16lo, float *post, float *comb) {
    return with_arena("v4 probe hc_pre (mixed)", [&](arena *a) -> pdb_status {
        const int64_t nm = (2 + hc) * hc;
        float *dhs, *dfn, *dbase, *dscale, *dnorm, *dmix, *dx, *dpost, *dcomb;
        uint16_t *dx16, *dx16lo;
        PDB_TRY(up(a, &dhs, hs, fz(n * hc * H)));
        PDB_TRY(up(a, &dfn, fn, fz(nm * hc * H)));
        PDB_TRY(up(a, &dbase, base, fz(nm)));
        PDB_TRY(up(a, &dscale, scale, fz(3)));
        PDB_TRY(up(a, &dnorm, norm, fz(H)));
        PDB_TRY(up(a, &dmix, NULL, fz(n * nm)));
        PDB_TRY(up(a, &dx, NULL, fz(n * H)));
        if (!x) dx = NULL; /* not stored */
        PDB_TRY(up(a, &dx16, NULL, 2 * (size_t)(n * H)));
        PDB_TRY(up(a, &dx16lo, NULL, 2 * (size_t)(n * H)));
        PDB_TRY(up(a, &dpost, NULL, fz(n * hc)));
        PDB_TRY(up(a, &dcomb, NULL, fz(n * hc * hc)));
        pdb_cuda_v4_hc c = {hc, H, iters, hc_eps, eps};
        PDB_TRY(pdb_cuda_v4_hc_mix(0, hc, dhs, n, hc * H, dfn, dmix));
        PDB_TRY(pdb_cuda_v4_hc_pre_mixed(0, &c, dhs, n, dmix, dbase, dscale, dnorm, dx, dx16, dx16lo, dpost, dcomb));
        PDB_TRY(finish());
        if (x) PDB_TRY(down(x, dx, fz(n * H)));
        PDB_TRY(down(x16, dx16, 2 * (size_t)(n * H)));
        PDB_TRY(down(x16lo, dx16lo, 2 * (size_t)(n * H)));
        PDB_TRY(down(post, dpost, fz(n * hc)));
        return down(comb, dcomb, fz(n * hc * hc));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_hc_post(int64_t hc, int64_t H, float *hs, const float *out, const float *post,
                                                const float *comb, int64_t n) {
    return with_arena("v4 probe hc_post", [&](arena *a) -> pdb_status {
        float *dhs, *dout, *dpost, *dcomb;
        PDB_TRY(up(a, &dhs, hs, fz(n * hc * H)));
        PDB_TRY(up(a, &dout, out, fz(n * H)));
        PDB_TRY(up(a, &dpost, post, fz(n * hc)));
        PDB_TRY(up(a, &dcomb, comb, fz(n * hc * hc)));
        pdb_cuda_v4_hc c = {hc, H, 0, 0.0f, 0.0};
        PDB_TRY(pdb_cuda_v4_hc_post(0, &c, dhs, dout, dpost, dcomb, n));
        PDB_TRY(finish());
        return down(hs, dhs, fz(n * hc * H));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_hc_post_moe(int64_t hc, int64_t H, float *hs, const void *ye, int ye_bf16,
                                                    int64_t slots, const int32_t *slot_row, const float *wt,
                                                    const float *shared, int64_t K, const float *post, const float *comb,
                                                    int64_t n) {
    return with_arena("v4 probe hc_post (moe)", [&](arena *a) -> pdb_status {
        float *dhs, *dwt, *dsh = NULL, *dpost, *dcomb, *dout;
        void *dye;
        int32_t *dslot;
        PDB_TRY(up(a, &dhs, hs, fz(n * hc * H)));
        PDB_TRY(up(a, &dye, ye, (ye_bf16 ? 2 : 4) * (size_t)(slots * H)));
        PDB_TRY(up(a, &dslot, slot_row, sizeof(int32_t) * (size_t)(n * K)));
        PDB_TRY(up(a, &dwt, wt, fz(n * K)));
        if (shared) PDB_TRY(up(a, &dsh, shared, fz(n * H)));
        PDB_TRY(up(a, &dpost, post, fz(n * hc)));
        PDB_TRY(up(a, &dcomb, comb, fz(n * hc * hc)));
        PDB_TRY(up(a, &dout, NULL, fz(n * H)));
        pdb_cuda_v4_hc c = {hc, H, 0, 0.0f, 0.0};
        const pdb_cuda_v4_moe_rows m = {dye, ye_bf16 ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32, dslot, dwt, dsh, K};
        PDB_TRY(pdb_cuda_v4_hc_post_moe(0, &c, dhs, &m, dpost, dcomb, n, dout));
        PDB_TRY(finish());
        return down(hs, dhs, fz(n * hc * H));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_hc_head(int64_t hc, int64_t H, float hc_eps, double eps, const float *hs,
                                                int64_t nrows_hs, const int64_t *rows, int64_t n, const float *fn,
                                                const float *base, const float *scale, const float *norm, float *y) {
    return with_arena("v4 probe hc_head", [&](arena *a) -> pdb_status {
        float *dhs, *dfn, *dbase, *dscale, *dnorm, *dy;
        int64_t *drows;
        PDB_TRY(up(a, &dhs, hs, fz(nrows_hs * hc * H)));
        PDB_TRY(up(a, &drows, rows, sizeof(int64_t) * (size_t)n));
        PDB_TRY(up(a, &dfn, fn, fz(hc * hc * H)));
        PDB_TRY(up(a, &dbase, base, fz(hc)));
        PDB_TRY(up(a, &dscale, scale, fz(1)));
        PDB_TRY(up(a, &dnorm, norm, fz(H)));
        PDB_TRY(up(a, &dy, NULL, fz(n * H)));
        pdb_cuda_v4_hc c = {hc, H, 0, hc_eps, eps};
        PDB_TRY(pdb_cuda_v4_hc_head(0, &c, dhs, drows, n, dfn, dbase, dscale, dnorm, dy));
        PDB_TRY(finish());
        return down(y, dy, fz(n * H));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_heads_norm_rope(float *x, int64_t ld, int64_t n, int64_t nh, int64_t hd,
                                                        int64_t rd, int mode, const float *w, const float *cs,
                                                        int64_t pos0, int sign, double eps) {
    return with_arena("v4 probe heads_norm_rope", [&](arena *a) -> pdb_status {
        float *dx, *dw = NULL, *dcs;
        PDB_TRY(up(a, &dx, x, fz(n * ld)));
        if (w) PDB_TRY(up(a, &dw, w, fz(hd)));
        PDB_TRY(up(a, &dcs, cs, fz((pos0 + n) * rd)));
        PDB_TRY(pdb_cuda_v4_heads_norm_rope(0, dx, PDB_CUDA_DT_F32, ld, dx, ld, n, nh, hd, rd, mode, dw, dcs, pos0, sign, eps));
        PDB_TRY(finish());
        return down(x, dx, fz(n * ld));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_heads_norm_rope_in16(const uint16_t *x, int64_t ld, int64_t n, int64_t nh, int64_t hd,
                                                             int64_t rd, int mode, const float *w, const float *cs,
                                                             int64_t pos0, int sign, double eps, int bf16_out, void *y) {
    return with_arena("v4 probe heads_norm_rope (bf16 rows)", [&](arena *a) -> pdb_status {
        uint16_t *dx;
        float *dw = NULL, *dcs;
        void *dy;
        const int64_t ldd = nh * hd;
        const size_t yb = (bf16_out ? 2 : 4) * (size_t)(n * ldd);
        PDB_TRY(up(a, &dx, x, 2 * (size_t)(n * ld)));
        if (w) PDB_TRY(up(a, &dw, w, fz(hd)));
        PDB_TRY(up(a, &dcs, cs, fz((pos0 + n) * rd)));
        PDB_TRY(up(a, &dy, NULL, yb));
        if (bf16_out)
            PDB_TRY(pdb_cuda_v4_heads_norm_rope_bf16(0, dx, PDB_CUDA_DT_BF16, ld, dy, ldd, n, nh, hd, rd, mode, dw, dcs, pos0,
                                                     sign, eps));
        else
            PDB_TRY(pdb_cuda_v4_heads_norm_rope(0, dx, PDB_CUDA_DT_BF16, ld, (float *)dy, ldd, n, nh, hd, rd, mode, dw, dcs, pos0,
                                                sign, eps));
        PDB_TRY(finish());
        return down(y, dy, yb);
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_compress(const float *kv, const float *gate, int64_t nrows, int64_t ld,
                                                 int64_t e0, const float *ape, const float *norm, int64_t r,
                                                 int64_t dim, int coff, int64_t w0, int64_t w1, const float *cs,
                                                 int64_t rd, double eps, float *out) {
    return with_arena("v4 probe compress", [&](arena *a) -> pdb_status {
        float *dkv, *dg, *dape, *dnorm, *dcs, *dout;
        PDB_TRY(up(a, &dkv, kv, fz(nrows * ld)));
        PDB_TRY(up(a, &dg, gate, fz(nrows * ld)));
        PDB_TRY(up(a, &dape, ape, fz(r * coff * dim)));
        PDB_TRY(up(a, &dnorm, norm, fz(dim)));
        PDB_TRY(up(a, &dcs, cs, fz(w1 * r * rd)));
        PDB_TRY(up(a, &dout, out, fz(w1 * dim)));
        PDB_TRY(pdb_cuda_v4_compress(0, dkv, dg, ld, e0, dape, dnorm, r, dim, coff, w0, w1, dcs, rd, eps, dout));
        PDB_TRY(finish());
        return down(out, dout, fz(w1 * dim));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_index_reduce(const float *dots, int64_t ld, const float *wt, int64_t n,
                                                     int64_t nih, int64_t pos0, int64_t r, int64_t K, float sscale,
                                                     float *score, int64_t lds) {
    return with_arena("v4 probe index_reduce", [&](arena *a) -> pdb_status {
        float *dd, *dw, *ds;
        PDB_TRY(up(a, &dd, dots, fz(n * nih * ld)));
        PDB_TRY(up(a, &dw, wt, fz(n * nih)));
        PDB_TRY(up(a, &ds, score, fz(n * lds)));
        PDB_TRY(pdb_cuda_v4_index_reduce(0, dd, ld, dw, n, nih, pos0, r, K, sscale, ds, lds));
        PDB_TRY(finish());
        return down(score, ds, fz(n * lds));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_index_scores_tc(const float *q, const float *wt, const uint16_t *keys,
                                                        int64_t n, int64_t nih, int64_t ihd, int64_t pos0, int64_t r,
                                                        int64_t K, float sscale, float *score, int64_t lds, int mma_sync,
                                                        int reps, double *gpu_ms) {
    if (gpu_ms) *gpu_ms = 0.0;
    if (reps < 1 || r < 1 || n < 0) return pdb_err_set(PDB_INVALID, "v4 probe index_scores_tc: reps %d, r %lld", reps, (long long)r);
    return with_arena("v4 probe index_scores_tc", [&](arena *a) -> pdb_status {
        float *dq, *dw, *ds;
        void *dk;
        const int64_t nv = (pos0 + n) / r;
        PDB_TRY(up(a, &dq, q, fz(n * nih * ihd)));
        PDB_TRY(up(a, &dw, wt, fz(n * nih)));
        PDB_TRY(up(a, &dk, keys, sizeof(uint16_t) * (size_t)(nv * ihd)));
        PDB_TRY(up(a, &ds, score, fz(n * lds)));
        cudaEvent_t e0 = NULL, e1 = NULL;
        PDB_CU(cudaEventCreate(&e0));
        pdb_status st = PDB_OK;
        cudaError_t ce = cudaEventCreate(&e1);
        if (ce != cudaSuccess) st = pdb_err_set(PDB_CUDA, "v4 probe index_scores_tc: cudaEventCreate: %s", cudaGetErrorString(ce));
        if (!st) st = pdb_cuda_v4_index_scores_tc(0, dq, dw, dk, n, nih, ihd, pos0, r, K, sscale, ds, lds, mma_sync); /* warm-up */
        if (!st && cudaEventRecord(e0, 0) != cudaSuccess) st = pdb_err_set(PDB_CUDA, "v4 probe index_scores_tc: event record");
        for (int i = 0; i < reps && !st; i++)
            st = pdb_cuda_v4_index_scores_tc(0, dq, dw, dk, n, nih, ihd, pos0, r, K, sscale, ds, lds, mma_sync);
        if (!st && cudaEventRecord(e1, 0) != cudaSuccess) st = pdb_err_set(PDB_CUDA, "v4 probe index_scores_tc: event record");
        if (!st) st = finish();
        float ms = 0.0f;
        if (!st && cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
            st = pdb_err_set(PDB_CUDA, "v4 probe index_scores_tc: cudaEventElapsedTime");
        cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        if (st) return st;
        if (gpu_ms) *gpu_ms = (double)ms / reps;
        return down(score, ds, fz(n * lds));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_topk(const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r,
                                             int64_t K, int32_t *sel, int32_t *nsel) {
    return with_arena("v4 probe topk", [&](arena *a) -> pdb_status {
        float *ds;
        int32_t *dsel, *dn;
        PDB_TRY(up(a, &ds, score, fz(n * lds)));
        PDB_TRY(up(a, &dsel, sel, sizeof(int32_t) * (size_t)(n * K)));
        PDB_TRY(up(a, &dn, NULL, sizeof(int32_t) * (size_t)n));
        PDB_TRY(pdb_cuda_v4_topk(0, ds, lds, n, pos0, r, K, dsel, dn));
        PDB_TRY(finish());
        PDB_TRY(down(sel, dsel, sizeof(int32_t) * (size_t)(n * K)));
        return down(nsel, dn, sizeof(int32_t) * (size_t)n);
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_route(float *logits, const int32_t *ids, const int32_t *tid2eid, int64_t V,
                                              const float *bias, int64_t n, int E, int K, int scoring, float rsf,
                                              int32_t *idx, float *wt) {
    return with_arena("v4 probe route", [&](arena *a) -> pdb_status {
        float *dl, *db = NULL, *dwt;
        int32_t *dids = NULL, *dt = NULL, *didx;
        PDB_TRY(up(a, &dl, logits, fz(n * E)));
        if (ids) PDB_TRY(up(a, &dids, ids, sizeof(int32_t) * (size_t)n));
        if (tid2eid) PDB_TRY(up(a, &dt, tid2eid, sizeof(int32_t) * (size_t)(V * K)));
        if (bias) PDB_TRY(up(a, &db, bias, fz(E)));
        PDB_TRY(up(a, &didx, NULL, sizeof(int32_t) * (size_t)(n * K)));
        PDB_TRY(up(a, &dwt, NULL, fz(n * K)));
        PDB_TRY(pdb_cuda_v4_route(0, dl, dids, dt, db, n, E, K, scoring, rsf, didx, dwt));
        PDB_TRY(finish());
        PDB_TRY(down(logits, dl, fz(n * E)));
        PDB_TRY(down(idx, didx, sizeof(int32_t) * (size_t)(n * K)));
        return down(wt, dwt, fz(n * K));
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_swiglu(const float *g, const float *u, int64_t count, float limit, int bf16,
                                               void *out) {
    return with_arena("v4 probe swiglu", [&](arena *a) -> pdb_status {
        float *dg, *du;
        void *dout;
        const size_t ob = (bf16 ? 2 : 4) * (size_t)count;
        PDB_TRY(up(a, &dg, g, fz(count)));
        PDB_TRY(up(a, &du, u, fz(count)));
        PDB_TRY(up(a, &dout, NULL, ob));
        PDB_TRY(pdb_cuda_v4_swiglu(0, dg, du, PDB_CUDA_DT_F32, count, limit, bf16 ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32, dout));
        PDB_TRY(finish());
        return down(out, dout, ob);
    });
}

extern "C" pdb_status pdb_cuda_v4_probe_swiglu_in16(const uint16_t *g, const uint16_t *u, int64_t count, float limit,
                                                   int bf16, void *out) {
    return with_arena("v4 probe swiglu (bf16 g, u)", [&](arena *a) -> pdb_status {
        uint16_t *dg, *du;
        void *dout;
        const size_t ob = (bf16 ? 2 : 4) * (size_t)count;
        PDB_TRY(up(a, &dg, g, 2 * (size_t)count));
        PDB_TRY(up(a, &du, u, 2 * (size_t)count));
        PDB_TRY(up(a, &dout, NULL, ob));
        PDB_TRY(pdb_cuda_v4_swiglu(0, dg, du, PDB_CUDA_DT_BF16, count, limit, bf16 ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32, dout));
        PDB_TRY(finish());
        return down(out, dout, ob);
    });
}

/* Fills x[i] with a hash of i in [-1, 1) (the benchmark's operands: any values do). */
__global__ void k_probe_fill(float *x, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = (float)(h >> 8) / 8388608.0f - 1.0f;
    }
}

/* *ne = 1 when some bits of x and y differ. */
__global__ void k_probe_ne(const float *x, const float *y, int64_t n, int *ne) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (__float_as_uint(x[i]) != __float_as_uint(y[i])) *ne = 1;
}

extern "C" pdb_status pdb_cuda_v4_probe_mm_rate(int64_t M, int64_t N, int64_t K, int reps, double *ms, int *same) {
    return with_arena("v4 probe mm_rate", [&](arena *a) -> pdb_status {
        float *A, *W, *C0, *C;
        PDB_TRY(up(a, &A, NULL, fz(M * K)));
        PDB_TRY(up(a, &W, NULL, fz(N * K)));
        PDB_TRY(up(a, &C0, NULL, fz(M * N)));
        PDB_TRY(up(a, &C, NULL, fz(M * N)));
        k_probe_fill<<<1024, 256>>>(A, M * K, 1u);
        k_probe_fill<<<1024, 256>>>(W, N * K, 2u);
        PDB_CU_LAUNCH("probe fill");
        pdb_cuda_blas b;
        PDB_TRY(pdb_cuda_blas_open(&b, 0));
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        pdb_status s = PDB_OK;
        /* t 0: dot32's general kernel, 1: its tiled one, 2: cuBLAS SGEMM, f32 (no TF32) */
        for (int t = 0; !s && t < 3; t++) {
            float *out = t == 0 ? C0 : C;
            for (int r = -1; !s && r < reps; r++) { /* r = -1: warm-up */
                if (r == 0) cudaEventRecord(e0, 0);
                s = t < 2 ? pdb_cuda_dot32_form(0, M, N, K, A, K, 0, W, K, 0, out, N, 0, 1, 0,
                                                t == 0 ? PDB_DOT32_GENERAL : PDB_DOT32_TILED, NULL)
                          : pdb_cuda_gemm(&b, PDB_CUDA_DT_F32, 1, M, N, K, 1.0f, A, K, 0, W, K, 0, 0.0f, out, N, 0, 1);
            }
            if (s) break;
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float f = 0;
            cudaEventElapsedTime(&f, e0, e1);
            ms[t] = f / (reps > 0 ? reps : 1);
            if (t == 1) { /* the same bits as the general kernel's */
                int *d_ne;
                if ((s = up(a, &d_ne, NULL, sizeof(int)))) break;
                k_probe_ne<<<1024, 256>>>(C0, C, M * N, d_ne);
                int ne = 0;
                if ((s = down(&ne, d_ne, sizeof(int)))) break;
                same[t] = ne == 0;
            } else
                same[t] = 1;
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        pdb_cuda_blas_close(&b);
        return s;
    });
}
