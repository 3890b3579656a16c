/* pdb_cuda_v4: the V4 matrix-product provider on CUDA. State: one stream, a table of uploaded
 * weights (the qmat's (data pointer, format, rows, cols) -> an f32 device copy), growable device
 * buffers for A and C. Invariants: (1) every element is pdb_v4_mm_ref's order, pdb_qmat's: the
 * weight row dequantized exactly (at upload, by pdb_qmat_row_f32 on the host), 32 lane
 * accumulators (lane j takes k = j mod 32) with fused multiply-adds in k order starting from
 * 0, folded 32->16->8->4->2->1 as lane i + lane i + half; (2) a weight's device copy is made once
 * and reused while the provider lives; (3) every CUDA call is checked and a failure is PDB_CUDA
 * naming the call. */
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"
#include "pdb_cuda_util.h"
#include "pdb_cuda_v4_kernels.h"

extern "C" {
#include "pdb_cuda_v4.h"
#include "pdb_qmat.h"
}

/* One uploaded weight: the qmat it came from (data pointer, format and shape: a row view shares
 * its parent's data pointer with fewer rows) and its f32 device copy [rows, cols]. */
typedef struct v4w { const void *host; int fmt; int64_t rows, cols; float *dev; } v4w;

typedef struct cu_v4 {
    pdb_v4_mm_provider p;
    int device;
    cudaStream_t s;
    int have_stream;
    v4w *w;             /* open addressing, cap a power of two */
    size_t wn, wcap;
    float *dA, *dC, *hW;
    size_t capA, capC, caphW; /* bytes */
    /* attention: q, keys, comp, sinks, scores/probabilities, output; sel, nsel */
    float *aq, *ak, *ac, *ask, *aS, *aO;
    int32_t *asel;
    int64_t *ansel;
    size_t capq, capk, capc, capsk, capS, capO, capsel, capnsel;
} cu_v4;

/* ===================================== exact-order product ===================================== */

/* V4's name for V2's pdb_cuda_dot32 (one kernel for both, D50): W's rows K apart, no batch, no accumulate. */
pdb_status pdb_cuda_v4_mm_exact(cudaStream_t s, const float *A, int64_t lda, const float *W, float *C, int64_t ldc,
                                int64_t M, int64_t N, int64_t K) {
    return pdb_cuda_dot32(s, M, N, K, A, lda, 0, W, K, 0, C, ldc, 0, 1, 0);
}

/* ===================================== attention kernels ===================================== */
/* pdb_v4_attn_ref's contract (pdb_v4.h) in three kernels: scores (one thread per score, d in
 * order), the sink softmax (a warp per (token, head); the denominator summed by one lane in key
 * order), the weighted sum (one thread per output dim, keys in order). Every double product is
 * of two floats, so __fma_rn(a, b, s) == s + a*b with the product exact: the CPU's sums. */

typedef struct v4_att {
    const float *q, *keys, *comp, *sinks;
    const int32_t *sel;
    const int64_t *nsel;
    float *S, *o;
    int64_t T, nh, hd, p0, lo, W, rate, K, ns; /* ns: S's row stride (max keys of a token) */
    float scale;
} v4_att;

/* Token t's window start (relative to keys row 0), window rows and compressed entries. */
__device__ __forceinline__ void att_counts(const v4_att &a, int64_t t, int64_t *w0, int64_t *nw, int64_t *nc) {
    int64_t p = a.p0 + t, wlo = p - a.W + 1 > a.lo ? p - a.W + 1 : a.lo;
    *w0 = wlo - a.lo;
    *nw = p - wlo + 1;
    *nc = a.sel ? a.nsel[t] : a.rate > 0 ? (p + 1) / a.rate : 0;
}

/* Key i of token t (its row in keys or comp). */
__device__ __forceinline__ const float *att_key(const v4_att &a, int64_t t, int64_t w0, int64_t nw, int64_t i) {
    if (i < nw) return a.keys + (w0 + i) * a.hd;
    int64_t e = a.sel ? (int64_t)a.sel[t * a.K + (i - nw)] : i - nw;
    return a.comp + e * a.hd;
}

/* Scores: a block is 32 keys x 32 heads of one token; thread (tx, ty) owns key tx and heads ty,
 * ty+8, ty+16, ty+24; d is walked in chunks of 32 staged in shared memory, each thread's sum in
 * d order. */
enum { AT_KB = 32, AT_HB = 32, AT_DC = 32 };

__global__ void __launch_bounds__(256) k_v4_att_scores(v4_att a) {
    __shared__ float Qs[AT_HB][AT_DC + 1], Ks[AT_KB][AT_DC + 1];
    __shared__ const float *rows[AT_KB];
    int64_t t = blockIdx.z, i0 = (int64_t)blockIdx.x * AT_KB, h0 = (int64_t)blockIdx.y * AT_HB;
    int64_t w0, nw, nc;
    att_counts(a, t, &w0, &nw, &nc);
    int64_t n = nw + nc;
    if (i0 >= n) return; /* the whole block: no barrier skipped by only some threads */
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
    if (tid < AT_KB) rows[tid] = i0 + tid < n ? att_key(a, t, w0, nw, i0 + tid) : NULL;
    __syncthreads();
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    const float *qt = a.q + t * a.nh * a.hd;
    for (int64_t d0 = 0; d0 < a.hd; d0 += AT_DC) {
        int dn = a.hd - d0 < AT_DC ? (int)(a.hd - d0) : AT_DC;
        for (int j = tid; j < AT_HB * AT_DC; j += 256) {
            int r = j / AT_DC, c = j % AT_DC;
            int64_t h = h0 + r;
            Qs[r][c] = h < a.nh && c < dn ? qt[h * a.hd + d0 + c] : 0.0f;
            Ks[r][c] = rows[r] && c < dn ? rows[r][d0 + c] : 0.0f;
        }
        __syncthreads();
        for (int c = 0; c < dn; c++) {
            double k = (double)Ks[tx][c];
#pragma unroll
            for (int r = 0; r < 4; r++) acc[r] = __fma_rn((double)Qs[ty + 8 * r][c], k, acc[r]);
        }
        __syncthreads();
    }
    int64_t i = i0 + tx;
    if (i >= n) return;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        int64_t h = h0 + ty + 8 * r;
        if (h < a.nh) a.S[(t * a.nh + h) * a.ns + i] = __fmul_rn(__double2float_rn(acc[r]), a.scale);
    }
}

/* The sink softmax of one (token, head) row per warp, in place in S. */
__global__ void __launch_bounds__(256) k_v4_att_softmax(v4_att a) {
    int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= a.T * a.nh) return; /* whole warps */
    int64_t t = row / a.nh, h = row % a.nh, w0, nw, nc;
    att_counts(a, t, &w0, &nw, &nc);
    int64_t n = nw + nc;
    float *s = a.S + row * a.ns, sink = a.sinks[h];
    float mx = sink; /* fmaxf is exact: any order gives the CPU's max */
    for (int64_t i = lane; i < n; i += 32) mx = fmaxf(mx, s[i]);
    for (int off = 16; off; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    for (int64_t i = lane; i < n; i += 32) s[i] = __double2float_rn(exp((double)__fsub_rn(s[i], mx)));
    __syncwarp();
    double den = 0.0;
    if (lane == 0) {
        den = (double)__double2float_rn(exp((double)__fsub_rn(sink, mx)));
        for (int64_t i = 0; i < n; i++) den = __dadd_rn(den, (double)s[i]);
    }
    den = __shfl_sync(0xffffffffu, den, 0);
    for (int64_t i = lane; i < n; i += 32) s[i] = __double2float_rn(__ddiv_rn((double)s[i], den));
}

/* The weighted sum: a block is one token and AT_OH heads; thread tid owns dims d0 + tid and
 * d0 + tid + 256 of each head; keys are walked in order in tiles of 128 (probabilities and row
 * pointers staged in shared memory). */
enum { AT_OH = 4, AT_OT = 128 };

__global__ void __launch_bounds__(256) k_v4_att_out(v4_att a) {
    __shared__ float P[AT_OH][AT_OT];
    __shared__ const float *rows[AT_OT];
    int64_t t = blockIdx.y, h0 = (int64_t)blockIdx.x * AT_OH, w0, nw, nc;
    att_counts(a, t, &w0, &nw, &nc);
    int64_t n = nw + nc;
    int tid = threadIdx.x;
    for (int64_t d0 = 0; d0 < a.hd; d0 += 512) {
        double acc[AT_OH][2];
#pragma unroll
        for (int r = 0; r < AT_OH; r++) acc[r][0] = acc[r][1] = 0.0;
        int64_t da = d0 + tid, db = d0 + tid + 256;
        for (int64_t i0 = 0; i0 < n; i0 += AT_OT) {
            int m = n - i0 < AT_OT ? (int)(n - i0) : AT_OT;
            for (int j = tid; j < AT_OH * AT_OT; j += 256) {
                int r = j / AT_OT, c = j % AT_OT;
                P[r][c] = h0 + r < a.nh && c < m ? a.S[((t * a.nh) + h0 + r) * a.ns + i0 + c] : 0.0f;
            }
            if (tid < AT_OT) rows[tid] = tid < m ? att_key(a, t, w0, nw, i0 + tid) : NULL;
            __syncthreads();
            for (int c = 0; c < m; c++) {
                double ka = da < a.hd ? (double)rows[c][da] : 0.0, kb = db < a.hd ? (double)rows[c][db] : 0.0;
#pragma unroll
                for (int r = 0; r < AT_OH; r++) {
                    double pr = (double)P[r][c];
                    acc[r][0] = __fma_rn(pr, ka, acc[r][0]);
                    acc[r][1] = __fma_rn(pr, kb, acc[r][1]);
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < AT_OH; r++) {
            int64_t h = h0 + r;
            if (h >= a.nh) continue;
            float *oh = a.o + (t * a.nh + h) * a.hd;
            if (da < a.hd) oh[da] = __double2float_rn(acc[r][0]);
            if (db < a.hd) oh[db] = __double2float_rn(acc[r][1]);
        }
    }
}

/* ======================================= buffers ============================================ */

static size_t slot_of(const cu_v4 *c, const void *host, int64_t rows) {
    size_t h = ((size_t)((uintptr_t)host >> 4) ^ (size_t)rows * 0x51ED27ull) * 0x9E3779B97F4A7C15ull;
    return h & (c->wcap - 1);
}

static int same_w(const v4w *e, const pdb_qmat *W) {
    return e->host == W->data && e->fmt == (int)W->fmt && e->rows == W->rows && e->cols == W->cols;
}

static pdb_status table_grow(cu_v4 *c) {
    size_t ncap = c->wcap ? c->wcap * 2 : 1024;
    v4w *nw = (v4w *)calloc(ncap, sizeof(v4w)), *old = c->w;
    if (!nw) return pdb_err_set(PDB_NOMEM, "cuda v4: weight table");
    size_t ocap = c->wcap;
    c->w = nw;
    c->wcap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].host) {
            size_t k = slot_of(c, old[i].host, old[i].rows);
            while (c->w[k].host) k = (k + 1) & (c->wcap - 1);
            c->w[k] = old[i];
        }
    free(old);
    return PDB_OK;
}

/* The f32 device copy of weight W, made on first use: every row dequantized exactly on the host
 * (pdb_qmat_row_f32, the CPU kernels' own values) and uploaded. */
static pdb_status weight(cu_v4 *c, const pdb_qmat *W, const float **dev) {
    if ((c->wn + 1) * 2 > c->wcap) PDB_TRY(table_grow(c));
    size_t k = slot_of(c, W->data, W->rows);
    while (c->w[k].host && !same_w(&c->w[k], W)) k = (k + 1) & (c->wcap - 1);
    v4w *e = &c->w[k];
    if (e->host) { *dev = e->dev; return PDB_OK; }
    size_t bytes = sizeof(float) * (size_t)(W->rows * W->cols);
    if (c->caphW < bytes) {
        float *nh = (float *)realloc(c->hW, bytes);
        if (!nh) return pdb_err_set(PDB_NOMEM, "cuda v4: %zu bytes of weight staging", bytes);
        c->hW = nh;
        c->caphW = bytes;
    }
    for (int64_t r = 0; r < W->rows; r++) pdb_qmat_row_f32(W, r, c->hW + r * W->cols);
    float *d = NULL;
    cudaError_t er = cudaMalloc((void **)&d, bytes);
    if (er != cudaSuccess) {
        cudaGetLastError();
        return pdb_err_set(PDB_CUDA, "cuda v4: cudaMalloc(%zu bytes) for a weight: %s", bytes, cudaGetErrorString(er));
    }
    pdb_status s = pdb_cuda_to_device(d, c->hW, bytes, "cuda v4 weight");
    if (s) { cudaFree(d); return s; }
    *e = (v4w){W->data, (int)W->fmt, W->rows, W->cols, d};
    c->wn++;
    *dev = d;
    return PDB_OK;
}

/* ======================================= provider =========================================== */

static pdb_status v4_mm(void *ctx, int64_t M, const float *A, int64_t lda, const pdb_qmat *W, float *C, int64_t ldc) {
    cu_v4 *c = (cu_v4 *)ctx;
    int64_t N = W->rows, K = W->cols;
    if (M <= 0 || N <= 0) return PDB_OK;
    PDB_CU(cudaSetDevice(c->device));
    size_t a_bytes = sizeof(float) * (size_t)((M - 1) * lda + K), c_bytes = sizeof(float) * (size_t)(M * N);
    const float *dW;
    PDB_TRY(weight(c, W, &dW));
    PDB_TRY(pdb_cuda_reserve((void **)&c->dA, &c->capA, a_bytes));
    PDB_TRY(pdb_cuda_reserve((void **)&c->dC, &c->capC, c_bytes));
    PDB_CU(cudaMemcpyAsync(c->dA, A, a_bytes, cudaMemcpyHostToDevice, c->s));
    PDB_TRY(pdb_cuda_v4_mm_exact(c->s, c->dA, lda, dW, c->dC, N, M, N, K));
    PDB_CU(cudaMemcpy2DAsync(C, sizeof(float) * (size_t)ldc, c->dC, sizeof(float) * (size_t)N, sizeof(float) * (size_t)N,
                             (size_t)M, cudaMemcpyDeviceToHost, c->s));
    PDB_CU(cudaStreamSynchronize(c->s));
    return PDB_OK;
}


/* pdb_v4_attn_ref's contract on the device: inputs copied per call (pageable), buffers reused. */
static pdb_status v4_attn(void *ctx, const pdb_v4_attn_desc *d) {
    cu_v4 *c = (cu_v4 *)ctx;
    if (d->T <= 0 || d->nh <= 0) return PDB_OK;
    if (d->T > 65535) return pdb_err_set(PDB_TOO_LARGE, "cuda v4 attention: %lld tokens in one call (max 65535)", (long long)d->T);
    int64_t T = d->T, nh = d->nh, hd = d->hd, nold = d->p0 - d->lo;
    int64_t ns = d->W + (d->sel ? d->K : d->rate > 0 ? (d->p0 + T) / d->rate : 0);
    if (ns < 1) ns = 1;
    size_t qb = sizeof(float) * (size_t)(T * nh * hd), kb = sizeof(float) * (size_t)((nold + T) * hd);
    size_t cb = sizeof(float) * (size_t)(d->n_comp * hd), skb = sizeof(float) * (size_t)nh;
    size_t Sb = sizeof(float) * (size_t)(T * nh * ns);
    PDB_CU(cudaSetDevice(c->device));
    PDB_TRY(pdb_cuda_reserve((void **)&c->aq, &c->capq, qb));
    PDB_TRY(pdb_cuda_reserve((void **)&c->ak, &c->capk, kb));
    PDB_TRY(pdb_cuda_reserve((void **)&c->ac, &c->capc, cb > 0 ? cb : sizeof(float)));
    PDB_TRY(pdb_cuda_reserve((void **)&c->ask, &c->capsk, skb));
    PDB_TRY(pdb_cuda_reserve((void **)&c->aS, &c->capS, Sb));
    PDB_TRY(pdb_cuda_reserve((void **)&c->aO, &c->capO, qb));
    PDB_CU(cudaMemcpyAsync(c->aq, d->q, qb, cudaMemcpyHostToDevice, c->s));
    PDB_CU(cudaMemcpyAsync(c->ak, d->keys, kb, cudaMemcpyHostToDevice, c->s));
    if (cb) PDB_CU(cudaMemcpyAsync(c->ac, d->comp, cb, cudaMemcpyHostToDevice, c->s));
    PDB_CU(cudaMemcpyAsync(c->ask, d->sinks, skb, cudaMemcpyHostToDevice, c->s));
    v4_att a;
    memset(&a, 0, sizeof a);
    if (d->sel) {
        size_t sb = sizeof(int32_t) * (size_t)(T * d->K), nb = sizeof(int64_t) * (size_t)T;
        PDB_TRY(pdb_cuda_reserve((void **)&c->asel, &c->capsel, sb > 0 ? sb : sizeof(int32_t)));
        PDB_TRY(pdb_cuda_reserve((void **)&c->ansel, &c->capnsel, nb));
        if (sb) PDB_CU(cudaMemcpyAsync(c->asel, d->sel, sb, cudaMemcpyHostToDevice, c->s));
        PDB_CU(cudaMemcpyAsync(c->ansel, d->nsel, nb, cudaMemcpyHostToDevice, c->s));
        a.sel = c->asel;
        a.nsel = c->ansel;
    }
    a.q = c->aq;
    a.keys = c->ak;
    a.comp = c->ac;
    a.sinks = c->ask;
    a.S = c->aS;
    a.o = c->aO;
    a.T = T;
    a.nh = nh;
    a.hd = hd;
    a.p0 = d->p0;
    a.lo = d->lo;
    a.W = d->W;
    a.rate = d->sel ? 0 : d->rate;
    a.K = d->K;
    a.ns = ns;
    a.scale = d->scale;
    dim3 gs((unsigned)((ns + AT_KB - 1) / AT_KB), (unsigned)((nh + AT_HB - 1) / AT_HB), (unsigned)T), bs(32, 8);
    k_v4_att_scores<<<gs, bs, 0, c->s>>>(a);
    PDB_CU_LAUNCH("v4_att_scores");
    k_v4_att_softmax<<<(unsigned)((T * nh + 7) / 8), 256, 0, c->s>>>(a);
    PDB_CU_LAUNCH("v4_att_softmax");
    dim3 go((unsigned)((nh + AT_OH - 1) / AT_OH), (unsigned)T);
    k_v4_att_out<<<go, 256, 0, c->s>>>(a);
    PDB_CU_LAUNCH("v4_att_out");
    PDB_CU(cudaMemcpyAsync(d->o, c->aO, qb, cudaMemcpyDeviceToHost, c->s));
    PDB_CU(cudaStreamSynchronize(c->s));
    return PDB_OK;
}

extern "C" void pdb_cuda_v4_mm_free(pdb_v4_mm_provider *p) {
    if (!p) return;
    cu_v4 *c = (cu_v4 *)p->ctx;
    if (c) {
        cudaSetDevice(c->device);
        if (c->have_stream) cudaStreamSynchronize(c->s);
        for (size_t i = 0; i < c->wcap; i++)
            if (c->w[i].dev) cudaFree(c->w[i].dev);
        free(c->w);
        if (c->dA) cudaFree(c->dA);
        if (c->dC) cudaFree(c->dC);
        void *ab[] = {c->aq, c->ak, c->ac, c->ask, c->aS, c->aO, c->asel, c->ansel};
        for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++)
            if (ab[i]) cudaFree(ab[i]);
        free(c->hW);
        if (c->have_stream) cudaStreamDestroy(c->s);
        cudaGetLastError();
        free(c);
    }
}

static void v4_destroy(void *ctx) {
    cu_v4 *c = (cu_v4 *)ctx;
    if (c) pdb_cuda_v4_mm_free(&c->p);
}

extern "C" pdb_status pdb_cuda_v4_mm_create(int device, pdb_v4_mm_provider **out) {
    *out = NULL;
    PDB_TRY(pdb_cuda_use_device(device, "cuda v4"));
    cu_v4 *c = (cu_v4 *)calloc(1, sizeof *c);
    if (!c) return pdb_err_set(PDB_NOMEM, "cuda v4 provider");
    c->device = device;
    c->p.name = "cuda";
    c->p.mm = v4_mm;
    c->p.attn = v4_attn;
    c->p.ctx = c;
    c->p.destroy = v4_destroy;
    pdb_status s = PDB_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        s = pdb_err_set(PDB_CUDA, "cuda v4: device %d: %s", device, cudaGetErrorString(e));
    } else {
        c->have_stream = 1;
        s = table_grow(c);
    }
    if (s) { pdb_cuda_v4_mm_free(&c->p); return s; }
    *out = &c->p;
    return PDB_OK;
}
