/* pdb_cuda_v4_ops: the DeepSeek-V4 engine's kernels other than attention (pdb_cuda_v4_kernels.h):
 * the embedding into the hc streams, the hyper-connection sites (pre, post, head), the per-head
 * norms + RoPE, the compressors, the indexer's reduce and top-k, routing and the clipped SwiGLU.
 * Invariants: (1) every row's (token's, entry's, head's) result is computed by one block or warp
 * from that row's inputs in an order fixed by the block size alone (never by the launch's row
 * count), so chunked = one shot; (2) f32 arithmetic that mirrors pdb_v4.c uses the _rn
 * intrinsics (nvcc cannot contract it), sums named "double" in the header are double sums
 * (block reductions of fixed shape: a butterfly per warp, then the warps' partials in order);
 * (3) exponentials follow pdb_v4.c: pdb_math_exp's (float)exp(double) where the CPU calls it,
 * expf where the CPU calls expf; (4) every launcher checks its sizes (PDB_UNSUPPORTED / PDB_INVALID
 * naming the limit) and its launch (PDB_CUDA). */
#include <cuda_bf16.h>
#include <math.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"
#include "pdb_cuda_v4_kernels.h"

namespace {

constexpr unsigned FULL = 0xffffffffu;

inline unsigned grid1(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

/* pdb_math_exp: the double exponential rounded to float. */
__device__ __forceinline__ float dev_exp(float x) { return (float)exp((double)x); }
/* pdb_v4.c's sigmoidf: 1 / (1 + expf(-x)) in f32. */
__device__ __forceinline__ float dev_sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* Sum of v over a block of NT threads (NT a multiple of 32), every thread gets the same total:
 * a butterfly per warp (both partners add the same two values, so every lane agrees), then the
 * warps' sums in warp order. red: NT / 32 doubles of shared memory; safe to call repeatedly. */
template <int NT> __device__ __forceinline__ double block_sum_d(double v, double *red) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    __syncthreads(); /* the previous call's readers are done with red */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0;
#pragma unroll
    for (int i = 0; i < NT / 32; i++) s += red[i];
    return s;
}

/* ======================================== embedding ======================================== */

template <typename T> __device__ __forceinline__ float ld_f(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld_f<float>(const float *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld_f<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}

template <typename T> __global__ void k_embed_hc(const int32_t *ids, const T *emb, int64_t hc, int64_t H, float *hs) {
    const int64_t t = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (d >= H) return;
    const float v = ld_f(emb + (int64_t)ids[t] * H, d);
    for (int64_t k = 0; k < hc; k++) hs[(t * hc + k) * H + d] = v;
}

/* ==================================== hyper-connections ==================================== */

constexpr int HC_NT = 512;  /* threads per token */
constexpr int HC_MAX = 8;   /* streams */
constexpr int HC_MJ = 8;    /* mixing rows per pass over the streams */

constexpr int HC_LD = 8;    /* loads a thread has in flight in each pass over the token's values */
constexpr int HC_XR = 8;    /* x values a thread keeps in registers between the sum and the norm (H <= 4096) */

/* The comb matrix's serial form, in place on cb (hc x hc, pre-softmax values in): each row
 * pdb_math_softmax + hc_eps, then iters Sinkhorn steps (rows from the second step on, then columns),
 * every sum a double sum in index order. HCT: hc fixed at compile time (registers), 0: hc_ at run time. */
template <int HCT> __device__ __forceinline__ void comb_sinkhorn(float *cb, int hc_, int iters, float hc_eps) {
    const int hc = HCT ? HCT : hc_;
#pragma unroll
    for (int i = 0; i < hc; i++) { /* rows: pdb_math_softmax, then + hc_eps */
        float *rw = cb + i * hc, m = -INFINITY;
#pragma unroll
        for (int j = 0; j < hc; j++) m = rw[j] > m ? rw[j] : m;
        double s = 0;
#pragma unroll
        for (int j = 0; j < hc; j++) {
            rw[j] = dev_exp(__fsub_rn(rw[j], m));
            s += rw[j];
        }
        const float inv = (float)(1.0 / s);
#pragma unroll
        for (int j = 0; j < hc; j++) rw[j] = __fadd_rn(__fmul_rn(rw[j], inv), hc_eps);
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
#pragma unroll
            for (int i = 0; i < hc; i++) {
                double s = 0;
#pragma unroll
                for (int j = 0; j < hc; j++) s += cb[i * hc + j];
                const float dn = __fadd_rn((float)s, hc_eps);
#pragma unroll
                for (int j = 0; j < hc; j++) cb[i * hc + j] = __fdiv_rn(cb[i * hc + j], dn);
            }
#pragma unroll
        for (int j = 0; j < hc; j++) {
            double s = 0;
#pragma unroll
            for (int i = 0; i < hc; i++) s += cb[i * hc + j];
            const float dn = __fadd_rn((float)s, hc_eps);
#pragma unroll
            for (int i = 0; i < hc; i++) cb[i * hc + j] = __fdiv_rn(cb[i * hc + j], dn);
        }
    }
}

/* One token's site (a block): head == 0: hc_pre (all (2+hc)*hc mixes, Sinkhorn, post / comb out);
 * head == 1: hc_head (hc mixes, pre only). Rows: token blockIdx.x of hs is rows[b] (rows != NULL) or b;
 * x row b. MIXED: the mixes come as rawmix (the engine's GEMM), so the fn loop is compiled out and the
 * block fits 3 to an SM. Every value a thread sums is the same element in the same order whatever
 * the batching of its loads (HC_LD at a time, then summed in index order). */
template <bool MIXED>
__global__ void __launch_bounds__(HC_NT, MIXED ? 3 : 1)
    k_hc_site(int hc, int64_t H, int iters, float hc_eps, double eps, const float *hs, const int64_t *rows,
              const float *fn, const float *rawmix, int nm, const float *base, const float *scale, const float *norm,
              float *x, float *post, float *comb, int head) {
    __shared__ double red[HC_NT / 32 * HC_MJ];
    __shared__ float mix[(2 + HC_MAX) * HC_MAX], pre[HC_MAX];
    const int64_t b = blockIdx.x, row = rows ? rows[b] : b, N = (int64_t)hc * H;
    const float *h = hs + row * N;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* tmp = h * r (pdb_v4.c unweighted_norm) */
    double ss = 0;
    for (int64_t i0 = tid; i0 < N; i0 += HC_LD * HC_NT) {
        float v[HC_LD];
#pragma unroll
        for (int q = 0; q < HC_LD; q++) v[q] = i0 + q * HC_NT < N ? h[i0 + q * HC_NT] : 0.0f;
#pragma unroll
        for (int q = 0; q < HC_LD; q++)
            if (i0 + q * HC_NT < N) ss += (double)v[q] * (double)v[q];
    }
    ss = block_sum_d<HC_NT>(ss, red);
    const float r = (float)(1.0 / sqrt(ss / (double)N + eps));
    /* mixes[j] = fn[j] . tmp in double, HC_MJ rows per pass (tmp recomputed identically each pass);
     * or, given rawmix = fn . h (the engine's GEMM), r * rawmix */
    if (MIXED && tid < nm) mix[tid] = (float)((double)rawmix[b * nm + tid] * (double)r);
    for (int j0 = 0; !MIXED && j0 < nm; j0 += HC_MJ) {
        double acc[HC_MJ];
#pragma unroll
        for (int q = 0; q < HC_MJ; q++) acc[q] = 0;
        for (int64_t i = tid; i < N; i += HC_NT) {
            const double tv = (double)__fmul_rn(h[i], r);
#pragma unroll
            for (int q = 0; q < HC_MJ; q++)
                if (j0 + q < nm) acc[q] += (double)fn[(int64_t)(j0 + q) * N + i] * tv;
        }
#pragma unroll
        for (int q = 0; q < HC_MJ; q++)
#pragma unroll
            for (int o = 16; o; o >>= 1) acc[q] += __shfl_xor_sync(FULL, acc[q], o);
        __syncthreads();
        if (lane == 0)
#pragma unroll
            for (int q = 0; q < HC_MJ; q++) red[warp * HC_MJ + q] = acc[q];
        __syncthreads();
        if (tid < HC_MJ && j0 + tid < nm) {
            double s = 0;
            for (int w = 0; w < HC_NT / 32; w++) s += red[w * HC_MJ + tid];
            mix[j0 + tid] = (float)s;
        }
    }
    __syncthreads();
    /* pdb_v4.c hc_finish / hc_head: the weights, a lane each (pre on warp 1, post on warp 2, comb on warp 0) */
    if (warp == 1 && lane < hc) pre[lane] = __fadd_rn(dev_sigmoid(__fadd_rn(__fmul_rn(mix[lane], scale[0]), base[lane])), hc_eps);
    if (!head && warp == 2 && lane < hc)
        post[b * hc + lane] = __fmul_rn(2.0f, dev_sigmoid(__fadd_rn(__fmul_rn(mix[hc + lane], scale[1]), base[hc + lane])));
    if (!head && warp == 0 && hc * hc <= 32) {
        /* comb on warp 0, lane i * hc + j holding element (i, j): every row / column sum is one lane's
         * sequential double sum over shuffled values in j / i order, so the arithmetic is comb_sinkhorn's
         * (the serial form), operation for operation, without its local-memory chain */
        const int i = lane / hc, j = lane % hc, live = lane < hc * hc;
        float v = live ? __fadd_rn(__fmul_rn(mix[2 * hc + lane], scale[2]), base[2 * hc + lane]) : 0.0f;
        float m = -INFINITY; /* row softmax (pdb_math_softmax), then + hc_eps */
        for (int q = 0; q < hc; q++) {
            const float u = __shfl_sync(FULL, v, (i * hc + q) & 31);
            m = u > m ? u : m;
        }
        v = live ? dev_exp(__fsub_rn(v, m)) : 0.0f;
        double sr = 0;
        for (int q = 0; q < hc; q++) sr += __shfl_sync(FULL, v, (i * hc + q) & 31);
        v = __fadd_rn(__fmul_rn(v, (float)(1.0 / sr)), hc_eps);
        for (int it = 0; it < iters; it++) {
            if (it > 0) {
                double s = 0;
                for (int q = 0; q < hc; q++) s += __shfl_sync(FULL, v, (i * hc + q) & 31);
                v = __fdiv_rn(v, __fadd_rn((float)s, hc_eps));
            }
            double s = 0;
            for (int q = 0; q < hc; q++) s += __shfl_sync(FULL, v, (q * hc + j) & 31);
            v = __fdiv_rn(v, __fadd_rn((float)s, hc_eps));
        }
        if (live) comb[b * hc * hc + lane] = v;
    } else if (!head && tid == 0) {
        float cb[HC_MAX * HC_MAX];
        for (int i = 0; i < hc * hc; i++) cb[i] = __fadd_rn(__fmul_rn(mix[2 * hc + i], scale[2]), base[2 * hc + i]);
        comb_sinkhorn<0>(cb, hc, iters, hc_eps);
        for (int i = 0; i < hc * hc; i++) comb[b * hc * hc + i] = cb[i];
    }
    __syncthreads();
    /* x = sum_k pre[k] h[k] (double), then RMSNorm(x) * norm (pdb_math_rmsnorm) */
    float *xo = x + b * H, pw[HC_MAX], xr[HC_XR];
#pragma unroll
    for (int k = 0; k < HC_MAX; k++) pw[k] = k < hc ? pre[k] : 0.0f;
    double s2 = 0;
#pragma unroll
    for (int q = 0; q < HC_XR; q++) { /* d = tid + q * HC_NT: its hc values loaded together, x kept in xr */
        const int64_t d = tid + (int64_t)q * HC_NT;
        float v[HC_MAX];
#pragma unroll
        for (int k = 0; k < HC_MAX; k++) v[k] = d < H && k < hc ? h[k * H + d] : 0.0f;
        double s = 0;
#pragma unroll
        for (int k = 0; k < HC_MAX; k++)
            if (k < hc) s += (double)pw[k] * (double)v[k];
        xr[q] = (float)s;
        if (d < H) s2 += (double)xr[q] * (double)xr[q];
    }
    for (int64_t d = tid + (int64_t)HC_XR * HC_NT; d < H; d += HC_NT) { /* H > HC_XR * HC_NT: through xo */
        double s = 0;
        for (int k = 0; k < hc; k++) s += (double)pw[k] * (double)h[k * H + d];
        const float xv = (float)s;
        xo[d] = xv;
        s2 += (double)xv * (double)xv;
    }
    s2 = block_sum_d<HC_NT>(s2, red);
    const float r2 = (float)(1.0 / sqrt(s2 / (double)H + eps));
#pragma unroll
    for (int q = 0; q < HC_XR; q++) {
        const int64_t d = tid + (int64_t)q * HC_NT;
        if (d < H) xo[d] = __fmul_rn(norm[d], __fmul_rn(xr[q], r2));
    }
    for (int64_t d = tid + (int64_t)HC_XR * HC_NT; d < H; d += HC_NT) xo[d] = __fmul_rn(norm[d], __fmul_rn(xo[d], r2)); /* own d's */
}

/* The engine's pre-site for V4's shape (hc = 4, H = 512 * QH), in two kernels. k_hc_pre4: a block per
 * token whose threads keep the token's N = 4 * H values in registers (thread tid holds element
 * tid + 512 q, which is also every element its x columns d = tid + 512 q' read: q = q' + QH k), so
 * the values are read from memory once; the norm factor, the mixes from rawmix, pre and post as in
 * k_hc_site<true>, and the comb's pre-softmax values into comb for k_hc_comb4, which finishes the
 * softmax and the Sinkhorn with a thread per token (comb_sinkhorn, the serial form whose operations
 * k_hc_site's warp form repeats in the same order: nothing waits on a one-warp Sinkhorn inside the memory-bound
 * block). Same values, bit for bit, as k_hc_site<true>. */
template <int QH>
__global__ void __launch_bounds__(HC_NT, 2)
    k_hc_pre4(int64_t H, float hc_eps, double eps, const float *__restrict__ hs, const float *__restrict__ rawmix,
              const float *base, const float *scale, const float *norm, float *__restrict__ x, __nv_bfloat16 *__restrict__ x16,
              __nv_bfloat16 *__restrict__ x16lo, float *post, float *comb) {
    constexpr int HC = 4, NM = (2 + HC) * HC, QN = HC * QH;
    __shared__ double red[HC_NT / 32];
    __shared__ float mix[NM], pre[HC];
    const int64_t b = blockIdx.x, N = (int64_t)HC * H;
    const float *h = hs + b * N;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float v[QN];
#pragma unroll
    for (int q = 0; q < QN; q++) v[q] = h[tid + q * HC_NT];
    double ss = 0;
#pragma unroll
    for (int q = 0; q < QN; q++) ss += (double)v[q] * (double)v[q];
    ss = block_sum_d<HC_NT>(ss, red);
    const float r = (float)(1.0 / sqrt(ss / (double)N + eps));
    if (tid < NM) mix[tid] = (float)((double)rawmix[b * NM + tid] * (double)r);
    __syncthreads();
    if (warp == 1 && lane < HC) pre[lane] = __fadd_rn(dev_sigmoid(__fadd_rn(__fmul_rn(mix[lane], scale[0]), base[lane])), hc_eps);
    if (warp == 2 && lane < HC)
        post[b * HC + lane] = __fmul_rn(2.0f, dev_sigmoid(__fadd_rn(__fmul_rn(mix[HC + lane], scale[1]), base[HC + lane])));
    if (warp == 0 && lane < HC * HC) comb[b * HC * HC + lane] = __fadd_rn(__fmul_rn(mix[2 * HC + lane], scale[2]), base[2 * HC + lane]);
    __syncthreads();
    float pw[HC], xr[QH];
#pragma unroll
    for (int k = 0; k < HC; k++) pw[k] = pre[k];
    double s2 = 0;
#pragma unroll
    for (int q = 0; q < QH; q++) {
        double s = 0;
#pragma unroll
        for (int k = 0; k < HC; k++) s += (double)pw[k] * (double)v[q + QH * k];
        xr[q] = (float)s;
        s2 += (double)xr[q] * (double)xr[q];
    }
    s2 = block_sum_d<HC_NT>(s2, red);
    const float r2 = (float)(1.0 / sqrt(s2 / (double)H + eps));
#pragma unroll
    for (int q = 0; q < QH; q++) xr[q] = __fmul_rn(norm[tid + q * HC_NT], __fmul_rn(xr[q], r2));
    if (x) {
        float *xo = x + b * H;
#pragma unroll
        for (int q = 0; q < QH; q++) xo[tid + q * HC_NT] = xr[q];
    }
    if (x16) {
        __nv_bfloat16 *xo16 = x16 + b * H;
#pragma unroll
        for (int q = 0; q < QH; q++) xo16[tid + q * HC_NT] = __float2bfloat16_rn(xr[q]);
    }
    if (x16lo) { /* pdb_cuda_split_bf16's lo */
        __nv_bfloat16 *xl = x16lo + b * H;
#pragma unroll
        for (int q = 0; q < QH; q++)
            xl[tid + q * HC_NT] = __float2bfloat16_rn(__fsub_rn(xr[q], __bfloat162float(__float2bfloat16_rn(xr[q]))));
    }
}

/* The pre-sites' mixing products rawmix [n, NM] = hs [n, N] . fn [NM, N]^T in f32 (NM = 8 JU: hc 2 or 4),
 * a block per MX_BM tokens streaming K in chunks of MX_BK through a 3-stage cp.async pipeline.
 * Thread (ti, tj) (tj = lane % 8, ti = 4 warp + lane / 8) owns tokens ti + 16 u (u < MX_TPT) and mixes
 * tj + 8 m: per chunk each of its sums starts at 0 and adds its k in order by fused multiply-adds,
 * then joins the running total in chunk order. Every value therefore depends on its token's row
 * alone, in an order fixed by k (M-invariant: chunked = one shot). A thread's 4 tokens x JU mixes
 * take 4 + JU float4 reads of shared memory per 4 k (the kernel is bound by those reads, not by
 * DRAM); smem rows padded by 4 floats so that a warp's 4 consecutive token rows and 8 mix rows fall
 * in distinct banks. (32 tokens a block, 2 a thread, twice the blocks and warps an SM, ran 1.14x
 * slower: D48.) */
constexpr int MX_BM = 64, MX_BK = 64, MX_LD = MX_BK + 4, MX_ST = 3, MX_NT = 128, MX_TPT = MX_BM / 16;

template <int JU>
__global__ void __launch_bounds__(MX_NT, 3)
    k_hc_mix(int64_t n, int64_t N, const float *__restrict__ hs, const float *__restrict__ fn, float *__restrict__ out) {
    constexpr int NM = 8 * JU, STAGE = (MX_BM + NM) * MX_LD, C4 = MX_BK / 4;
    static_assert(MX_NT == 128 && MX_BM == 16 * MX_TPT, "16 token groups x 8 mix groups");
    extern __shared__ float4 smx[];
    float *S = (float *)smx;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, tj = lane & 7, ti = warp * 4 + (lane >> 3);
    const int64_t t0 = (int64_t)blockIdx.x * MX_BM, nchunk = N / MX_BK;
    auto issue = [&](int64_t c) {
        float *hsS = S + (c % MX_ST) * STAGE, *fnS = hsS + MX_BM * MX_LD;
        const int64_t k0 = c * MX_BK;
        for (int i = tid; i < MX_BM * C4; i += MX_NT) {
            const int r = i / C4, q = i % C4;
            const bool ok = t0 + r < n;
            cp16(hsS + r * MX_LD + 4 * q, ok ? hs + (t0 + r) * N + k0 + 4 * q : hs, ok);
        }
        for (int i = tid; i < NM * C4; i += MX_NT) {
            const int r = i / C4, q = i % C4;
            cp16(fnS + r * MX_LD + 4 * q, fn + r * N + k0 + 4 * q, true);
        }
    };
    float tot[MX_TPT][JU];
#pragma unroll
    for (int u = 0; u < MX_TPT; u++)
#pragma unroll
        for (int m = 0; m < JU; m++) tot[u][m] = 0.0f;
    issue(0);
    cp_commit();
    if (nchunk > 1) issue(1);
    cp_commit();
    for (int64_t c = 0; c < nchunk; c++) {
        cp_wait<1>();
        __syncthreads(); /* chunk c landed; every thread is done with chunk c - 1's stage, which c + 2 reuses */
        if (c + 2 < nchunk) issue(c + 2);
        cp_commit();
        const float *hsS = S + (c % MX_ST) * STAGE, *fnS = hsS + MX_BM * MX_LD;
        const float *ap = hsS + ti * MX_LD;
        float acc[MX_TPT][JU];
#pragma unroll
        for (int u = 0; u < MX_TPT; u++)
#pragma unroll
            for (int m = 0; m < JU; m++) acc[u][m] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < MX_BK; k += 4) {
            float4 a[MX_TPT], b[JU];
#pragma unroll
            for (int u = 0; u < MX_TPT; u++) a[u] = *(const float4 *)(ap + 16 * u * MX_LD + k);
#pragma unroll
            for (int m = 0; m < JU; m++) b[m] = *(const float4 *)(fnS + (tj + 8 * m) * MX_LD + k);
#pragma unroll
            for (int u = 0; u < MX_TPT; u++)
#pragma unroll
                for (int m = 0; m < JU; m++) {
                    acc[u][m] = fmaf(a[u].x, b[m].x, acc[u][m]);
                    acc[u][m] = fmaf(a[u].y, b[m].y, acc[u][m]);
                    acc[u][m] = fmaf(a[u].z, b[m].z, acc[u][m]);
                    acc[u][m] = fmaf(a[u].w, b[m].w, acc[u][m]);
                }
        }
#pragma unroll
        for (int u = 0; u < MX_TPT; u++)
#pragma unroll
            for (int m = 0; m < JU; m++) tot[u][m] = __fadd_rn(tot[u][m], acc[u][m]);
    }
#pragma unroll
    for (int u = 0; u < MX_TPT; u++) {
        const int64_t t = t0 + ti + 16 * u;
        if (t < n)
#pragma unroll
            for (int m = 0; m < JU; m++) out[t * NM + tj + 8 * m] = tot[u][m];
    }
}

/* comb[t] (4 x 4, pre-softmax values from k_hc_pre4) -> the row softmax + hc_eps, then the Sinkhorn. */
__global__ void k_hc_comb4(int64_t n, int iters, float hc_eps, float *comb) {
    constexpr int HC = 4;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float cb[HC * HC];
#pragma unroll
    for (int i = 0; i < HC * HC; i++) cb[i] = comb[t * HC * HC + i];
    comb_sinkhorn<HC>(cb, HC, iters, hc_eps);
#pragma unroll
    for (int i = 0; i < HC * HC; i++) comb[t * HC * HC + i] = cb[i];
}

/* hs[t, k, d] = post[t, k] * out[t, d] + sum_j comb[t, j, k] * old[j] (double). Any hc: a thread per
 * (t, d). */
__global__ void k_hc_post(int hc, int64_t H, float *hs, const float *out, const float *post, const float *comb) {
    const int64_t t = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (d >= H) return;
    float *h = hs + t * hc * H;
    const float *cb = comb + t * hc * hc;
    float old[HC_MAX];
    for (int j = 0; j < hc; j++) old[j] = h[j * H + d];
    const double o = (double)out[t * H + d];
    for (int k = 0; k < hc; k++) {
        double s = (double)post[t * hc + k] * o;
        for (int j = 0; j < hc; j++) s += (double)cb[j * hc + k] * (double)old[j];
        h[k * H + d] = (float)s;
    }
}

/* The same for hc == HC (compile time) and H % 4 == 0: a thread owns 4 consecutive d's (16-byte loads
 * and stores) and holds the token's post and comb in registers before its first store (the pointers
 * are __restrict__: nothing it writes is read again), so all its loads are in flight at once; each
 * element is the same expression in the same order as k_hc_post's. */
/* MOE: out's row is not read but made here as pdb_cuda_moe_combine makes it into a zeroed row
 * (0 + (sum_k ye[slot_k] * wt_k in order, + shared), every step rounded as there: the same bits),
 * so the MoE site's output never goes through DRAM. YT: ye's type (float, or __nv_bfloat16 widened
 * exactly: the f32 rows of the same values give the same bits). */
__device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld4(const __nv_bfloat16 *p) {
    const uint2 v = *(const uint2 *)p;
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

template <int HC, bool MOE, typename YT = float>
__global__ void __launch_bounds__(256)
    k_hc_post4(int64_t H, float *__restrict__ hs, const float *__restrict__ out, const float *__restrict__ post,
               const float *__restrict__ comb, pdb_cuda_v4_moe_rows m) {
    const int64_t t = blockIdx.x, d0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * 4;
    if (d0 >= H) return;
    float *h = hs + t * HC * H;
    float pw[HC], cb[HC][HC], old[HC][4], o[4];
#pragma unroll
    for (int k = 0; k < HC; k++) pw[k] = post[t * HC + k];
#pragma unroll
    for (int j = 0; j < HC; j++)
#pragma unroll
        for (int k = 0; k < HC; k++) cb[j][k] = comb[(t * HC + j) * HC + k];
#pragma unroll
    for (int j = 0; j < HC; j++) *(float4 *)old[j] = *(const float4 *)(h + j * H + d0);
    if (MOE) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t k = 0; k < m.K; k++) {
            const float w = m.wt[t * m.K + k];
            const float4 y = ld4((const YT *)m.ye + (int64_t)m.slot_row[t * m.K + k] * H + d0);
            acc[0] = __fadd_rn(acc[0], __fmul_rn(y.x, w));
            acc[1] = __fadd_rn(acc[1], __fmul_rn(y.y, w));
            acc[2] = __fadd_rn(acc[2], __fmul_rn(y.z, w));
            acc[3] = __fadd_rn(acc[3], __fmul_rn(y.w, w));
        }
        if (m.shared) {
            const float4 sv = *(const float4 *)(m.shared + t * H + d0);
            acc[0] = __fadd_rn(acc[0], sv.x), acc[1] = __fadd_rn(acc[1], sv.y);
            acc[2] = __fadd_rn(acc[2], sv.z), acc[3] = __fadd_rn(acc[3], sv.w);
        }
#pragma unroll
        for (int v = 0; v < 4; v++) o[v] = __fadd_rn(0.0f, acc[v]);
    } else
        *(float4 *)o = *(const float4 *)(out + t * H + d0);
#pragma unroll
    for (int k = 0; k < HC; k++) {
        float r[4];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            double s = (double)pw[k] * (double)o[v];
#pragma unroll
            for (int j = 0; j < HC; j++) s += (double)cb[j][k] * (double)old[j][v];
            r[v] = (float)s;
        }
        *(float4 *)(h + k * H + d0) = *(const float4 *)r;
    }
}

static pdb_status hc_check(const pdb_cuda_v4_hc *c, const char *who) {
    if (c->hc < 1 || c->hc > HC_MAX || c->H < 1)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: hc = %lld streams (1 .. %d supported), H = %lld", who, (long long)c->hc,
                           HC_MAX, (long long)c->H);
    return PDB_OK;
}

/* ====================================== heads: norm + RoPE ====================================== */

constexpr int HN_WARPS = 4;
constexpr int HN_MAXD = 1024;

static __device__ __forceinline__ void st_val(float *p, float v) { *p = v; }
static __device__ __forceinline__ void st_val(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* 8 consecutive values (16-byte aligned) to or from f32 in shared memory. */
__device__ __forceinline__ void ld8(const float *p, float *b) {
    *(float4 *)b = *(const float4 *)p;
    *(float4 *)(b + 4) = *(const float4 *)(p + 4);
}
__device__ __forceinline__ void ld8(const __nv_bfloat16 *p, float *b) {
    const uint4 v = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
    for (int j = 0; j < 4; j++) *(float2 *)(b + 2 * j) = __bfloat1622float2(h[j]);
}
__device__ __forceinline__ void st8(float *p, const float *b) {
    *(float4 *)p = *(const float4 *)b;
    *(float4 *)(p + 4) = *(const float4 *)(b + 4);
}
__device__ __forceinline__ void st8(__nv_bfloat16 *p, const float *b) {
    uint4 v;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&v;
#pragma unroll
    for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(b[2 * j], b[2 * j + 1]);
    *(uint4 *)p = v;
}

/* A warp per (token, head): v into the warp's shared row (IT float, or __nv_bfloat16 widened to
 * f32 there: the f32 math from then on), its norm, then the rotation of its trailing rd dims,
 * written to dst (OT float, or __nv_bfloat16: each value rounded to nearest even, the bits
 * pdb_cuda_convert gives the f32 row). Reads of v finish (into shared) before any write, so
 * dst == src is safe (same types). V8 (hd % 256 == 0, rows 16-byte aligned): the row is read and
 * written 8 values a lane in 16-byte pieces; the norm's sum still takes lane l's values l, l + 32, ..
 * in order (the same bits). */
template <typename IT, typename OT, bool V8>
__global__ void __launch_bounds__(HN_WARPS * 32)
    k_heads_norm_rope(const IT *src, int64_t ld, OT *dst, int64_t ldd, int64_t n, int64_t nh, int hd, int rd,
                      int mode, const float *w, const float *cs, int64_t pos0, int sign, double eps) {
    __shared__ __align__(16) float buf[HN_WARPS][HN_MAXD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t task = (int64_t)blockIdx.x * HN_WARPS + warp;
    if (task >= n * nh) return;
    const int64_t t = task / nh, hh = task % nh;
    const IT *v = src + t * ld + hh * hd;
    OT *o = dst + t * ldd + hh * hd;
    float *b = buf[warp];
    double ss = 0;
    if (V8) {
        for (int i = 8 * lane; i < hd; i += 256) ld8(v + i, b + i);
        __syncwarp();
        for (int i = lane; i < hd; i += 32) ss += (double)b[i] * (double)b[i];
    } else
        for (int i = lane; i < hd; i += 32) {
            b[i] = ld_f(v, i);
            ss += (double)b[i] * (double)b[i];
        }
    if (mode) {
#pragma unroll
        for (int k = 16; k; k >>= 1) ss += __shfl_xor_sync(FULL, ss, k);
        const float r = (float)(1.0 / sqrt(ss / (double)hd + eps));
        for (int i = lane; i < hd; i += 32) b[i] = mode == 2 ? __fmul_rn(w[i], __fmul_rn(b[i], r)) : __fmul_rn(b[i], r);
    }
    __syncwarp();
    const float *c = cs + (pos0 + t) * rd;
    for (int i = lane; i < rd / 2; i += 32) {
        const float sn = sign < 0 ? -c[2 * i + 1] : c[2 * i + 1];
        rot_pair(b + hd - rd + 2 * i, c[2 * i], sn);
    }
    __syncwarp();
    if (V8)
        for (int i = 8 * lane; i < hd; i += 256) st8(o + i, b + i);
    else
        for (int i = lane; i < hd; i += 32) st_val(o + i, b[i]);
}

/* ======================================== compressor ======================================== */

constexpr int CP_NT = 256;
constexpr int CP_MAXD = 4096;

/* A block per entry w = w0 + blockIdx.x (pdb_v4.c compress_tokens, one window): per dim d the
 * softmax-weighted sum over the slots (CSA, w > 0: window w-1's first halves and window w's second
 * halves, interleaved by slot j as the CPU adds them), the entry's RMSNorm and rope at w * r. */
__global__ void __launch_bounds__(CP_NT)
    k_compress(const float *kv, const float *gate, int64_t ld, int64_t e0, const float *ape, const float *norm, int64_t r,
               int dim, int coff, int64_t w0, const float *cs, int rd, double eps, float *out) {
    extern __shared__ float e[]; /* [dim] */
    __shared__ double red[CP_NT / 32];
    const int64_t w = w0 + blockIdx.x, D = (int64_t)coff * dim;
    const int overlap = coff == 2, prev = overlap && w > 0;
    const int64_t off = overlap ? dim : 0;
    double ss = 0;
    for (int d = threadIdx.x; d < dim; d += CP_NT) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < r; j++) {
            if (prev) {
                const int64_t p = (w - 1) * r + j;
                mx = fmaxf(mx, __fadd_rn(gate[(p - e0) * ld + d], ape[(p % r) * D + d]));
            }
            const int64_t p = w * r + j;
            mx = fmaxf(mx, __fadd_rn(gate[(p - e0) * ld + off + d], ape[(p % r) * D + off + d]));
        }
        double den = 0, num = 0;
        for (int64_t j = 0; j < r; j++) {
            if (prev) {
                const int64_t p = (w - 1) * r + j;
                const double ex = exp((double)__fadd_rn(gate[(p - e0) * ld + d], ape[(p % r) * D + d]) - (double)mx);
                den += ex;
                num += ex * (double)kv[(p - e0) * ld + d];
            }
            const int64_t p = w * r + j;
            const double ex = exp((double)__fadd_rn(gate[(p - e0) * ld + off + d], ape[(p % r) * D + off + d]) - (double)mx);
            den += ex;
            num += ex * (double)kv[(p - e0) * ld + off + d];
        }
        const float ev = (float)(num / den);
        e[d] = ev;
        ss += (double)ev * (double)ev;
    }
    ss = block_sum_d<CP_NT>(ss, red);
    const float rr = (float)(1.0 / sqrt(ss / (double)dim + eps));
    for (int d = threadIdx.x; d < dim; d += CP_NT) e[d] = __fmul_rn(norm[d], __fmul_rn(e[d], rr));
    __syncthreads();
    const float *c = cs + w * r * rd;
    for (int i = threadIdx.x; i < rd / 2; i += CP_NT) rot_pair(e + dim - rd + 2 * i, c[2 * i], c[2 * i + 1]);
    __syncthreads();
    for (int d = threadIdx.x; d < dim; d += CP_NT) out[w * dim + d] = e[d];
}

/* ========================================= indexer ========================================= */

__global__ void k_index_reduce(const float *dots, int64_t ld, const float *wt, int64_t nih, int64_t pos0, int64_t r,
                               int64_t K, float sscale, float *score, int64_t lds) {
    const int64_t t = blockIdx.x, w = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const int64_t nv = (pos0 + t + 1) / r;
    if (nv <= K || w >= nv) return;
    const float *dt = dots + t * nih * ld + w, *wh = wt + t * nih;
    float acc = 0.0f;
    for (int64_t h = 0; h < nih; h++) acc = __fadd_rn(acc, __fmul_rn(wh[h], fmaxf(dt[h * ld], 0.0f)));
    score[t * lds + w] = __fmul_rn(sscale, acc);
}

constexpr int TK_NT = 1024, TK_WARPS = TK_NT / 32, TK_BINS = 2048, TK_HIST = TK_BINS + 32;

/* Order-preserving key of a float (no NaN; -0 as +0, so equal floats get equal keys). */
__device__ __forceinline__ uint32_t fkey(float f) {
    if (f == 0.0f) f = 0.0f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The radix select's digits: 11, 11 and 10 bits from the top. */
__device__ __forceinline__ int tk_shift(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }
__device__ __forceinline__ int tk_bins(int pass) { return pass == 2 ? 1024 : 2048; }
/* A bin's slot: one pad word after every nb / 32 bins, so that tk_pick's lanes (nb / 32 bins apart)
 * read distinct banks. */
__device__ __forceinline__ int tk_slot(int d, int nb) { return d + d / (nb / 32); }

/* Inclusive prefix sum of v over the warp's lanes (lane 0 first). */
__device__ __forceinline__ uint32_t warp_incl_scan(uint32_t v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

/* Warp 0: the digit d of the need-th largest key among the histogram's nb bins (hist at tk_slot; from the top:
 * the first d, descending, with hist[nb - 1] + .. + hist[d] >= need; 0 when none) and need minus the
 * count of the bins above d. Lane l sums bins nb - 1 - per l .. down, an inclusive shuffle scan over the
 * lanes finds the lane where the running count reaches need, that lane walks its own bins. */
__device__ __forceinline__ void tk_pick(const uint32_t *hist, int nb, uint32_t need, uint32_t *digit, uint32_t *rest) {
    const int lane = threadIdx.x & 31, per = nb / 32, hi = nb - 1 - per * lane;
    uint32_t s = 0;
    for (int i = 0; i < per; i++) s += hist[tk_slot(hi - i, nb)];
    const uint32_t p = warp_incl_scan(s);
    const unsigned hit = __ballot_sync(FULL, p >= need);
    if (!hit) { /* fewer matching keys than need (never, by the caller's invariant): digit 0 */
        if (lane == 31) *digit = 0, *rest = need - (p - hist[tk_slot(0, nb)]);
        return;
    }
    if (lane == __ffs(hit) - 1) {
        uint32_t above = p - s;
        int d = hi;
        for (; d > hi - per + 1; d--) {
            const uint32_t h = hist[tk_slot(d, nb)];
            if (above + h >= need) break;
            above += h;
        }
        *digit = (uint32_t)d;
        *rest = need - above;
    }
}

/* A block per token: the K-th largest key T by an 11 + 11 + 10-bit radix select, then in ascending w
 * every w with key > T and the first `need` with key == T (deterministic). CACHE: the row's keys are
 * read once into dynamic shared memory (nv <= the launch's cache size) as the first histogram is
 * counted, else every pass re-reads the scores. A warp's lanes that hold lane 0's digit add once
 * (the top digit is shared by many keys of a row; in the later passes few keys match the prefix and
 * most lanes hold none), the others each on their own: a shuffle and a ballot a step instead of a
 * __match_any_sync (D49: 31.4 -> 26.3 ms of top-k in a 128K prompt). The placement: warp j
 * takes the contiguous keys [j seg, (j + 1) seg) and counts its keys > T and == T (ballots), a scan
 * over the warps gives each its offsets, and a second walk places w at (keys > T before w) +
 * min(keys == T before w, need). */
template <bool CACHE>
__global__ void __launch_bounds__(TK_NT)
    k_topk(const float *__restrict__ score, int64_t lds, int64_t pos0, int64_t r, int64_t K, int32_t *sel, int32_t *nsel) {
    extern __shared__ uint32_t kc[]; /* CACHE: [nv] keys */
    __shared__ uint32_t hist[TK_HIST];
    __shared__ uint32_t gcnt[TK_WARPS], ecnt[TK_WARPS];
    __shared__ uint32_t sh_digit, sh_need;
    const int64_t t = blockIdx.x, nv = (pos0 + t + 1) / r;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t *out = sel + t * K;
    if (nv <= K) {
        for (int64_t i = threadIdx.x; i < nv; i += TK_NT) out[i] = (int32_t)i;
        if (threadIdx.x == 0) nsel[t] = (int32_t)nv;
        return;
    }
    const float *sc = score + t * lds;
    uint32_t prefix = 0, mask = 0, need = (uint32_t)K; /* need: rank of T among keys matching the prefix */
    for (int pass = 0; pass < 3; pass++) {
        const int shift = tk_shift(pass), nb = tk_bins(pass);
        for (int i = threadIdx.x; i < TK_HIST; i += TK_NT) hist[i] = 0;
        __syncthreads();
        constexpr int U = 4; /* keys per thread per step: U loads in flight */
        for (int64_t base = 0; base < nv; base += U * TK_NT) { /* whole warps: every lane reaches the match */
            uint32_t k[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t w = base + u * TK_NT + threadIdx.x;
                k[u] = w < nv ? (CACHE && pass ? kc[w] : fkey(sc[w])) : 0;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t w = base + u * TK_NT + threadIdx.x;
                uint32_t dg = TK_BINS; /* none */
                if (w < nv) {
                    if (CACHE && !pass) kc[w] = k[u];
                    if ((k[u] & mask) == prefix) dg = (k[u] >> shift) & (uint32_t)(nb - 1);
                }
                /* the lanes with lane 0's digit add once (lane 0), every other lane on its own */
                const uint32_t d0 = __shfl_sync(FULL, dg, 0);
                const unsigned same = __ballot_sync(FULL, dg == d0);
                if (dg < TK_BINS && (dg != d0 || lane == 0))
                    atomicAdd(&hist[tk_slot((int)dg, nb)], dg == d0 ? (uint32_t)__popc(same) : 1u);
            }
        }
        __syncthreads();
        if (warp == 0) tk_pick(hist, nb, need, &sh_digit, &sh_need);
        __syncthreads();
        prefix |= sh_digit << shift;
        mask |= (uint32_t)(nb - 1) << shift;
        need = sh_need;
    }
    /* prefix is T; need = how many w with key == T are taken (the lowest ones) */
    const int64_t seg = (nv + 32 * TK_WARPS - 1) / (32 * TK_WARPS) * 32, w0 = warp * seg,
                  w1 = w0 + seg < nv ? w0 + seg : nv;
    const unsigned below = (1u << lane) - 1u;
    auto seg_key = [&](int64_t w) -> uint32_t { return w < w1 ? (CACHE ? kc[w] : fkey(sc[w])) : 0; };
    uint32_t ng = 0, ne = 0;
    for (int64_t base = w0; base < w1; base += 32) {
        const int64_t w = base + lane;
        const uint32_t k = seg_key(w);
        ng += __popc(__ballot_sync(FULL, w < w1 && k > prefix));
        ne += __popc(__ballot_sync(FULL, w < w1 && k == prefix));
    }
    if (lane == 0) gcnt[warp] = ng, ecnt[warp] = ne;
    __syncthreads();
    if (warp == 0) { /* exclusive scans of the warps' counts */
        const uint32_t g = gcnt[lane], e = ecnt[lane];
        gcnt[lane] = warp_incl_scan(g) - g;
        ecnt[lane] = warp_incl_scan(e) - e;
    }
    __syncthreads();
    uint32_t gb = gcnt[warp], eb = ecnt[warp];
    for (int64_t base = w0; base < w1; base += 32) {
        const int64_t w = base + lane;
        const uint32_t k = seg_key(w);
        const bool gt = w < w1 && k > prefix, eq = w < w1 && k == prefix;
        const unsigned bg = __ballot_sync(FULL, gt), be = __ballot_sync(FULL, eq);
        const uint32_t g_before = gb + __popc(bg & below), e_before = eb + __popc(be & below);
        if (gt || (eq && e_before < need)) out[g_before + (e_before < need ? e_before : need)] = (int32_t)w;
        gb += __popc(bg);
        eb += __popc(be);
    }
    if (threadIdx.x == 0) nsel[t] = (int32_t)K;
}

/* ========================================= routing ========================================= */

constexpr int RT_NT = 256;
constexpr int RT_MAXE = 1024;
constexpr int RT_MAXK = 16;

__global__ void __launch_bounds__(RT_NT)
    k_route(float *logits, const int32_t *ids, const int32_t *tid2eid, const float *bias, int E, int K, int scoring,
            float rsf, int32_t *idx, float *wt) {
    __shared__ float sc[RT_MAXE];
    __shared__ unsigned char taken[RT_MAXE];
    __shared__ double red[RT_NT / 32];
    __shared__ float rv[RT_NT / 32];
    __shared__ int ri[RT_NT / 32];
    __shared__ int pick[RT_MAXK];
    const int64_t t = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *lg = logits + t * E;
    if (scoring == 1) { /* pdb_math_softmax */
        float m = -INFINITY;
        for (int e = tid; e < E; e += RT_NT) m = fmaxf(m, lg[e]);
#pragma unroll
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
        if (lane == 0) rv[warp] = m;
        __syncthreads();
        m = rv[0];
        for (int i = 1; i < RT_NT / 32; i++) m = fmaxf(m, rv[i]);
        double s = 0;
        for (int e = tid; e < E; e += RT_NT) {
            sc[e] = dev_exp(__fsub_rn(lg[e], m));
            s += sc[e];
        }
        s = block_sum_d<RT_NT>(s, red);
        const float inv = (float)(1.0 / s);
        for (int e = tid; e < E; e += RT_NT) sc[e] = __fmul_rn(sc[e], inv);
    } else
        for (int e = tid; e < E; e += RT_NT) {
            const float l = lg[e];
            sc[e] = scoring == 2 ? dev_sigmoid(l) : __fsqrt_rn(l > 20.0f ? l : (float)log1p((double)expf(l)));
        }
    for (int e = tid; e < E; e += RT_NT) {
        lg[e] = sc[e];
        taken[e] = 0;
    }
    __syncthreads();
    if (tid2eid) {
        if (tid < K) pick[tid] = tid2eid[(int64_t)ids[t] * K + tid];
    } else
        for (int k = 0; k < K; k++) { /* argmax of score + bias over the untaken, ties to the lower index */
            float bv = -INFINITY;
            int be = -1;
            for (int e = tid; e < E; e += RT_NT) {
                if (taken[e]) continue;
                const float v = bias ? __fadd_rn(sc[e], bias[e]) : sc[e];
                if (be < 0 || v > bv) { bv = v; be = e; } /* e ascends: a later equal value never wins */
            }
#pragma unroll
            for (int o = 16; o; o >>= 1) {
                const float ov = __shfl_xor_sync(FULL, bv, o);
                const int oe = __shfl_xor_sync(FULL, be, o);
                if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) { bv = ov; be = oe; }
            }
            if (lane == 0) { rv[warp] = bv; ri[warp] = be; }
            __syncthreads();
            if (tid == 0) {
                float b = rv[0];
                int bi = ri[0];
                for (int i = 1; i < RT_NT / 32; i++)
                    if (ri[i] >= 0 && (bi < 0 || rv[i] > b || (rv[i] == b && ri[i] < bi))) { b = rv[i]; bi = ri[i]; }
                pick[k] = bi;
                taken[bi] = 1;
            }
            __syncthreads();
        }
    __syncthreads();
    if (tid == 0) {
        double s = 0;
        for (int k = 0; k < K; k++) s += sc[pick[k]];
        const float den = __fadd_rn((float)s, 1e-20f);
        for (int k = 0; k < K; k++) {
            idx[t * K + k] = pick[k];
            wt[t * K + k] = __fmul_rn(__fdiv_rn(sc[pick[k]], den), rsf);
        }
    }
}

/* ========================================= SwiGLU ========================================= */

template <typename T> __device__ __forceinline__ void st_f(T *p, int64_t i, float v);
template <> __device__ __forceinline__ void st_f<float>(float *p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void st_f<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

/* silu(min(a, limit)) * clamp(b, +-limit) (limit <= 0: no clamps), every step rounded in f32. */
__device__ __forceinline__ float swiglu1(float a, float b, float limit) {
    if (limit > 0) {
        a = fminf(a, limit);
        b = fminf(fmaxf(b, -limit), limit);
    }
    return __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, expf(-a))), b);
}

/* IT: g's and u's type (float, or __nv_bfloat16 widened to f32 in registers); T: out's. */
template <typename IT, typename T>
__global__ void k_swiglu(const IT *g, const IT *u, int64_t count, float limit, T *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        st_f(out, i, swiglu1(ld_f(g, i), ld_f(u, i), limit));
}

/* bf16 g, u, out, 8 values a thread (16-byte loads and stores; count % 8 == 0, 16-byte aligned, out
 * not overlapping g or u): the values k_swiglu gives. */
__global__ void __launch_bounds__(256) k_swiglu8(const uint4 *__restrict__ g, const uint4 *__restrict__ u, int64_t count8,
                                                 float limit, uint4 *__restrict__ out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count8; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = bf16x8_map2(g[i], u[i], [limit](float a, float b) { return swiglu1(a, b, limit); });
    }
}

} // namespace

/* ======================================== launchers ======================================== */

pdb_status pdb_cuda_v4_embed_hc(cudaStream_t s, const int32_t *ids, const void *emb, pdb_cuda_dt dt, int64_t n,
                                int64_t hc, int64_t H, float *hs) {
    if (n <= 0 || H <= 0 || hc <= 0) return PDB_OK;
    if (H > 65535LL * 256) return pdb_err_set(PDB_UNSUPPORTED, "v4 embed_hc: H = %lld (at most 65535 * 256)", (long long)H);
    dim3 g((unsigned)n, grid1(H, 256));
    if (dt == PDB_CUDA_DT_BF16) k_embed_hc<<<g, 256, 0, s>>>(ids, (const __nv_bfloat16 *)emb, hc, H, hs);
    else k_embed_hc<<<g, 256, 0, s>>>(ids, (const float *)emb, hc, H, hs);
    PDB_CU_LAUNCH("v4 embed_hc");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_hc_pre(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, int64_t n, const float *fn,
                              const float *base, const float *scale, const float *norm, float *x, float *post,
                              float *comb) {
    PDB_TRY(hc_check(c, "v4 hc_pre"));
    if (n <= 0) return PDB_OK;
    const int hc = (int)c->hc;
    k_hc_site<false><<<(unsigned)n, HC_NT, 0, s>>>(hc, c->H, c->iters, c->hc_eps, c->eps, hs, NULL, fn, NULL, (2 + hc) * hc, base,
                                            scale, norm, x, post, comb, 0);
    PDB_CU_LAUNCH("v4 hc_pre");
    return PDB_OK;
}

int pdb_cuda_v4_hc_mix_fits(int64_t hc, int64_t N) { return (hc == 2 || hc == 4) && N > 0 && N % MX_BK == 0; }

pdb_status pdb_cuda_v4_hc_mix(cudaStream_t s, int64_t hc, const float *hs, int64_t n, int64_t N, const float *fn, float *rawmix) {
    if (!pdb_cuda_v4_hc_mix_fits(hc, N) || ((uintptr_t)hs | (uintptr_t)fn) % 16)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 hc_mix: hc %lld (2 or 4), N %lld (a multiple of %d), hs and fn 16-byte aligned",
                           (long long)hc, (long long)N, MX_BK);
    if (n <= 0) return PDB_OK;
    const unsigned grid = (unsigned)((n + MX_BM - 1) / MX_BM);
    if (hc == 4) {
        const size_t smem = sizeof(float) * (size_t)(MX_ST * (MX_BM + 24) * MX_LD);
        PDB_CU(cudaFuncSetAttribute(k_hc_mix<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_hc_mix<3><<<grid, MX_NT, smem, s>>>(n, N, hs, fn, rawmix);
    } else {
        const size_t smem = sizeof(float) * (size_t)(MX_ST * (MX_BM + 8) * MX_LD);
        PDB_CU(cudaFuncSetAttribute(k_hc_mix<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_hc_mix<1><<<grid, MX_NT, smem, s>>>(n, N, hs, fn, rawmix);
    }
    PDB_CU_LAUNCH("v4 hc_mix");
    return PDB_OK;
}

int pdb_cuda_v4_hc_pre_x_optional(const pdb_cuda_v4_hc *c) { return c->hc == 4 && c->H == 8 * HC_NT; }

pdb_status pdb_cuda_v4_hc_pre_mixed(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, int64_t n, const float *rawmix,
                                    const float *base, const float *scale, const float *norm, float *x, void *x16, void *x16lo,
                                    float *post, float *comb) {
    PDB_TRY(hc_check(c, "v4 hc_pre"));
    if (x16lo && !x16) return pdb_err_set(PDB_INVALID, "v4 hc_pre: x's bf16 low half without its high half");
    if (!x && (!x16 || !pdb_cuda_v4_hc_pre_x_optional(c)))
        return pdb_err_set(PDB_INVALID, "v4 hc_pre: x left out without its bf16 copy or outside hc 4, H %d", 8 * HC_NT);
    if (n <= 0) return PDB_OK;
    const int hc = (int)c->hc;
    if (pdb_cuda_v4_hc_pre_x_optional(c)) { /* V4-Flash's shape */
        k_hc_pre4<8><<<(unsigned)n, HC_NT, 0, s>>>(c->H, c->hc_eps, c->eps, hs, rawmix, base, scale, norm, x,
                                                   (__nv_bfloat16 *)x16, (__nv_bfloat16 *)x16lo, post, comb);
        PDB_CU_LAUNCH("v4 hc_pre (mixed, hc 4)");
        k_hc_comb4<<<grid1(n, 128), 128, 0, s>>>(n, c->iters, c->hc_eps, comb);
        PDB_CU_LAUNCH("v4 hc_pre (mixed, comb)");
        return PDB_OK;
    }
    k_hc_site<true><<<(unsigned)n, HC_NT, 0, s>>>(hc, c->H, c->iters, c->hc_eps, c->eps, hs, NULL, NULL, rawmix, (2 + hc) * hc, base,
                                                   scale, norm, x, post, comb, 0);
    PDB_CU_LAUNCH("v4 hc_pre (mixed)");
    if (x16lo) return pdb_cuda_split_bf16(s, x, n * c->H, x16, x16lo, NULL);
    return x16 ? pdb_cuda_convert(s, x, n * c->H, PDB_CUDA_DT_BF16, x16) : PDB_OK;
}

pdb_status pdb_cuda_v4_hc_post(cudaStream_t s, const pdb_cuda_v4_hc *c, float *hs, const float *out, const float *post,
                               const float *comb, int64_t n) {
    PDB_TRY(hc_check(c, "v4 hc_post"));
    if (n <= 0) return PDB_OK;
    if (c->H > 65535LL * 256) return pdb_err_set(PDB_UNSUPPORTED, "v4 hc_post: H = %lld (at most 65535 * 256)", (long long)c->H);
    if (c->hc == 4 && c->H % 4 == 0 && ((uintptr_t)hs | (uintptr_t)out) % 16 == 0)
        k_hc_post4<4, false><<<dim3((unsigned)n, grid1(c->H / 4, 256)), 256, 0, s>>>(c->H, hs, out, post, comb,
                                                                                      pdb_cuda_v4_moe_rows{});
    else k_hc_post<<<dim3((unsigned)n, grid1(c->H, 256)), 256, 0, s>>>((int)c->hc, c->H, hs, out, post, comb);
    PDB_CU_LAUNCH("v4 hc_post");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_hc_post_moe(cudaStream_t s, const pdb_cuda_v4_hc *c, float *hs, const pdb_cuda_v4_moe_rows *m,
                                   const float *post, const float *comb, int64_t n, float *out) {
    PDB_TRY(hc_check(c, "v4 hc_post (moe)"));
    if (n <= 0) return PDB_OK;
    const bool y16 = m->ydt == PDB_CUDA_DT_BF16;
    if (c->hc == 4 && c->H % 4 == 0 && c->H <= 65535LL * 256 &&
        ((uintptr_t)hs | (uintptr_t)m->ye | (uintptr_t)m->shared) % 16 == 0) {
        const dim3 g((unsigned)n, grid1(c->H / 4, 256));
        if (y16) k_hc_post4<4, true, __nv_bfloat16><<<g, 256, 0, s>>>(c->H, hs, NULL, post, comb, *m);
        else k_hc_post4<4, true><<<g, 256, 0, s>>>(c->H, hs, NULL, post, comb, *m);
        PDB_CU_LAUNCH("v4 hc_post (moe)");
        return PDB_OK;
    }
    if (y16) return pdb_err_set(PDB_UNSUPPORTED, "v4 hc_post (moe): bf16 expert rows outside hc 4 with aligned rows");
    PDB_CU(cudaMemsetAsync(out, 0, sizeof(float) * (size_t)(n * c->H), s));
    PDB_TRY(pdb_cuda_moe_combine(s, (const float *)m->ye, m->slot_row, m->wt, m->shared, n, m->K, c->H, out));
    return pdb_cuda_v4_hc_post(s, c, hs, out, post, comb, n);
}

pdb_status pdb_cuda_v4_hc_head(cudaStream_t s, const pdb_cuda_v4_hc *c, const float *hs, const int64_t *rows, int64_t n,
                               const float *fn, const float *base, const float *scale, const float *norm, float *y) {
    PDB_TRY(hc_check(c, "v4 hc_head"));
    if (n <= 0) return PDB_OK;
    k_hc_site<false><<<(unsigned)n, HC_NT, 0, s>>>((int)c->hc, c->H, 0, c->hc_eps, c->eps, hs, rows, fn, NULL, (int)c->hc, base,
                                            scale, norm, y, NULL, NULL, 1);
    PDB_CU_LAUNCH("v4 hc_head");
    return PDB_OK;
}

template <typename OT>
static pdb_status heads_norm_rope(cudaStream_t s, const void *src, pdb_cuda_dt sdt, int64_t ld, OT *dst, int64_t ldd,
                                  int64_t n, int64_t nh, int64_t hd, int64_t rd, int mode, const float *w, const float *cs,
                                  int64_t pos0, int sign, double eps) {
    if (hd < 1 || hd > HN_MAXD || rd < 0 || rd > hd || rd % 2 || mode < 0 || mode > 2 || (mode == 2 && !w))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 heads_norm_rope: hd %lld (1 .. %d), rd %lld (even, <= hd), mode %d (0 .. 2, "
                           "2 needs w)", (long long)hd, HN_MAXD, (long long)rd, mode);
    if (n <= 0 || nh <= 0) return PDB_OK;
    const bool v8 = hd % 256 == 0 && ld % 8 == 0 && ldd % 8 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 16 == 0;
    const unsigned g = grid1(n * nh, HN_WARPS);
    if (sdt == PDB_CUDA_DT_BF16) {
        const __nv_bfloat16 *sb = (const __nv_bfloat16 *)src;
        if (v8) k_heads_norm_rope<__nv_bfloat16, OT, true><<<g, HN_WARPS * 32, 0, s>>>(sb, ld, dst, ldd, n, nh, (int)hd, (int)rd, mode, w, cs, pos0, sign, eps);
        else k_heads_norm_rope<__nv_bfloat16, OT, false><<<g, HN_WARPS * 32, 0, s>>>(sb, ld, dst, ldd, n, nh, (int)hd, (int)rd, mode, w, cs, pos0, sign, eps);
    } else {
        const float *sf = (const float *)src;
        if (v8) k_heads_norm_rope<float, OT, true><<<g, HN_WARPS * 32, 0, s>>>(sf, ld, dst, ldd, n, nh, (int)hd, (int)rd, mode, w, cs, pos0, sign, eps);
        else k_heads_norm_rope<float, OT, false><<<g, HN_WARPS * 32, 0, s>>>(sf, ld, dst, ldd, n, nh, (int)hd, (int)rd, mode, w, cs, pos0, sign, eps);
    }
    PDB_CU_LAUNCH("v4 heads_norm_rope");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_heads_norm_rope(cudaStream_t s, const void *src, pdb_cuda_dt sdt, int64_t ld, float *dst, int64_t ldd,
                                       int64_t n, int64_t nh, int64_t hd, int64_t rd, int mode, const float *w,
                                       const float *cs, int64_t pos0, int sign, double eps) {
    return heads_norm_rope(s, src, sdt, ld, dst, ldd, n, nh, hd, rd, mode, w, cs, pos0, sign, eps);
}

pdb_status pdb_cuda_v4_heads_norm_rope_bf16(cudaStream_t s, const void *src, pdb_cuda_dt sdt, int64_t ld, void *dst,
                                            int64_t ldd, int64_t n, int64_t nh, int64_t hd, int64_t rd, int mode,
                                            const float *w, const float *cs, int64_t pos0, int sign, double eps) {
    return heads_norm_rope(s, src, sdt, ld, (__nv_bfloat16 *)dst, ldd, n, nh, hd, rd, mode, w, cs, pos0, sign, eps);
}

pdb_status pdb_cuda_v4_compress(cudaStream_t s, const float *kv, const float *gate, int64_t ld, int64_t e0,
                                const float *ape, const float *norm, int64_t r, int64_t dim, int coff, int64_t w0,
                                int64_t w1, const float *cs, int64_t rd, double eps, float *out) {
    if (dim < 1 || dim > CP_MAXD || (coff != 1 && coff != 2) || r < 1 || rd < 0 || rd > dim || rd % 2)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 compress: dim %lld (1 .. %d), coff %d (1 or 2), rate %lld, rd %lld (even, "
                           "<= dim)", (long long)dim, CP_MAXD, coff, (long long)r, (long long)rd);
    if (w1 <= w0) return PDB_OK;
    const int64_t first = coff == 2 && w0 > 0 ? (w0 - 1) * r : w0 * r;
    if (w0 < 0 || first < e0)
        return pdb_err_set(PDB_INVALID, "v4 compress: entry %lld reads position %lld, before the rows' first position %lld",
                           (long long)w0, (long long)first, (long long)e0);
    k_compress<<<(unsigned)(w1 - w0), CP_NT, sizeof(float) * (size_t)dim, s>>>(kv, gate, ld, e0, ape, norm, r, (int)dim,
                                                                              coff, w0, cs, (int)rd, eps, out);
    PDB_CU_LAUNCH("v4 compress");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_index_reduce(cudaStream_t s, const float *dots, int64_t ld, const float *wt, int64_t n,
                                    int64_t nih, int64_t pos0, int64_t r, int64_t K, float sscale, float *score,
                                    int64_t lds) {
    if (r < 1) return pdb_err_set(PDB_INVALID, "v4 index_reduce: rate %lld", (long long)r);
    if (n <= 0) return PDB_OK;
    const int64_t nvmax = (pos0 + n) / r;
    if (nvmax <= K) return PDB_OK;
    if (nvmax > 65535LL * 256)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_reduce: %lld keys (at most 65535 * 256)", (long long)nvmax);
    k_index_reduce<<<dim3((unsigned)n, grid1(nvmax, 256)), 256, 0, s>>>(dots, ld, wt, nih, pos0, r, K, sscale, score, lds);
    PDB_CU_LAUNCH("v4 index_reduce");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_topk(cudaStream_t s, const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r,
                            int64_t K, int32_t *sel, int32_t *nsel) {
    if (r < 1 || K < 1 || K > INT32_MAX)
        return pdb_err_set(PDB_INVALID, "v4 topk: rate %lld, K %lld", (long long)r, (long long)K);
    if (n <= 0) return PDB_OK;
    if ((pos0 + n) / r > INT32_MAX)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 topk: %lld keys (at most 2^31 - 1)", (long long)((pos0 + n) / r));
    /* the keys in shared memory when the longest row's fit beside the static arrays */
    const int64_t nvmax = (pos0 + n) / r;
    int dev = 0, optin = 0;
    PDB_CU(cudaGetDevice(&dev));
    PDB_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa;
    PDB_CU(cudaFuncGetAttributes(&fa, k_topk<true>));
    const size_t cache = sizeof(uint32_t) * (size_t)nvmax;
    if (nvmax > K && cache + fa.sharedSizeBytes <= (size_t)optin) {
        PDB_CU(cudaFuncSetAttribute(k_topk<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cache));
        k_topk<true><<<(unsigned)n, TK_NT, cache, s>>>(score, lds, pos0, r, K, sel, nsel);
    } else
        k_topk<false><<<(unsigned)n, TK_NT, 0, s>>>(score, lds, pos0, r, K, sel, nsel);
    PDB_CU_LAUNCH("v4 topk");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_route(cudaStream_t s, float *logits, const int32_t *ids, const int32_t *tid2eid,
                             const float *bias, int64_t n, int E, int K, int scoring, float rsf, int32_t *idx,
                             float *wt) {
    if (E < 1 || E > RT_MAXE || K < 1 || K > RT_MAXK || (!tid2eid && K > E) || scoring < 0 || scoring > 2 ||
        (tid2eid && !ids))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 route: E %d (1 .. %d), K %d (1 .. %d, <= E), scoring %d (0 .. 2)%s", E,
                           RT_MAXE, K, RT_MAXK, scoring, tid2eid && !ids ? ", a hash layer without token ids" : "");
    if (n <= 0) return PDB_OK;
    k_route<<<(unsigned)n, RT_NT, 0, s>>>(logits, ids, tid2eid, bias, E, K, scoring, rsf, idx, wt);
    PDB_CU_LAUNCH("v4 route");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_swiglu(cudaStream_t s, const void *g, const void *u, pdb_cuda_dt gdt, int64_t count, float limit,
                              pdb_cuda_dt dt, void *out) {
    if (count <= 0) return PDB_OK;
    unsigned gr = grid1(count, 256);
    if (gr > 65535u * 16) gr = 65535u * 16;
    const float *gf = (const float *)g, *uf = (const float *)u;
    const __nv_bfloat16 *gb = (const __nv_bfloat16 *)g, *ub = (const __nv_bfloat16 *)u;
    const bool v8 = count % 8 == 0 && ((uintptr_t)g | (uintptr_t)u | (uintptr_t)out) % 16 == 0 && out != g && out != u;
    if (gdt == PDB_CUDA_DT_BF16 && dt == PDB_CUDA_DT_BF16 && v8) {
        unsigned g8 = grid1(count / 8, 256);
        k_swiglu8<<<g8 > 65535u * 16 ? 65535u * 16 : g8, 256, 0, s>>>((const uint4 *)g, (const uint4 *)u, count / 8, limit, (uint4 *)out);
    } else if (gdt == PDB_CUDA_DT_BF16 && dt == PDB_CUDA_DT_BF16) k_swiglu<<<gr, 256, 0, s>>>(gb, ub, count, limit, (__nv_bfloat16 *)out);
    else if (gdt == PDB_CUDA_DT_BF16) k_swiglu<<<gr, 256, 0, s>>>(gb, ub, count, limit, (float *)out);
    else if (dt == PDB_CUDA_DT_BF16) k_swiglu<<<gr, 256, 0, s>>>(gf, uf, count, limit, (__nv_bfloat16 *)out);
    else k_swiglu<<<gr, 256, 0, s>>>(gf, uf, count, limit, (float *)out);
    PDB_CU_LAUNCH("v4 swiglu");
    return PDB_OK;
}
