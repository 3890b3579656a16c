/* pdb_cuda_kernels: the CUDA backend's own kernels. Reading order: elementwise -> norms ->
 * latent rows -> attention -> MoE -> capture hook. Invariants: arithmetic that must match the
 * CPU uses explicit round-to-nearest intrinsics (__fmaf_rn, __fadd_rn, __fmul_rn) so nvcc's
 * contraction cannot change it; reductions have a fixed order per row. */
#include <cuda_bf16.h>
#include <math.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"

static inline unsigned grid1(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

/* pdb_math_exp's expression: the double exponential rounded to float (same float as glibc's). */
__device__ __forceinline__ float dev_exp(float x) { return (float)exp((double)x); }

/* pdb_qmat_dot's order on a warp: lane j accumulates k = j, j + 32, ... with a fused multiply-add
 * from +0, then the lanes fold as l[i] = l[i] + l[i + off] for off = 16, 8, 4, 2, 1; every lane
 * returns the result. */
__device__ __forceinline__ float warp_dot32(const float *a, const float *b, int64_t n, int lane) {
    float v = 0.0f;
    for (int64_t k = lane; k < n; k += 32) v = __fmaf_rn(a[k], b[k], v);
    for (int off = 16; off >= 1; off /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, off));
    return __shfl_sync(0xffffffffu, v, 0);
}

template <typename T> __device__ __forceinline__ float ld_f(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld_f<float>(const float *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld_f<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ void st_f(T *p, int64_t i, float v);
template <> __device__ __forceinline__ void st_f<float>(float *p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void st_f<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

/* ======================================= elementwise ======================================== */

template <typename T> __global__ void k_embed(const int32_t *ids, const T *emb, int64_t n, int64_t H, float *h) {
    int64_t t = blockIdx.x;
    const T *src = emb + (int64_t)ids[t] * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) h[t * H + j] = ld_f(src, j);
}

pdb_status pdb_cuda_embed(cudaStream_t s, const int32_t *ids, const void *emb, pdb_cuda_dt dt, int64_t n, int64_t H,
                          float *h) {
    if (n <= 0) return PDB_OK;
    if (dt == PDB_CUDA_DT_BF16) k_embed<<<(unsigned)n, 256, 0, s>>>(ids, (const __nv_bfloat16 *)emb, n, H, h);
    else k_embed<<<(unsigned)n, 256, 0, s>>>(ids, (const float *)emb, n, H, h);
    PDB_CU_LAUNCH("embed");
    return PDB_OK;
}

__global__ void k_to_bf16(const float *src, int64_t count, __nv_bfloat16 *dst) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* The same, 4 values a thread (count % 4 == 0, both arrays 16-byte aligned). */
__global__ void k_to_bf16_v4(const float4 *src, int64_t count4, uint2 *dst) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = src[i];
        __nv_bfloat162 q[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
        dst[i] = *(const uint2 *)q;
    }
}

pdb_status pdb_cuda_convert(cudaStream_t s, const float *src, int64_t count, pdb_cuda_dt dt, void *dst) {
    if (count <= 0 || dt == PDB_CUDA_DT_F32) return PDB_OK;
    const bool v4 = count % 4 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 16 == 0;
    unsigned g = grid1(v4 ? count / 4 : count, 256);
    if (g > 65535u * 16) g = 65535u * 16;
    if (v4) k_to_bf16_v4<<<g, 256, 0, s>>>((const float4 *)src, count / 4, (uint2 *)dst);
    else k_to_bf16<<<g, 256, 0, s>>>(src, count, (__nv_bfloat16 *)dst);
    PDB_CU_LAUNCH("convert");
    return PDB_OK;
}

/* hi = bf16(x), lo = bf16(x - hi) (both nearest even; hi NULL: not written): x = hi + lo to ~2^-16 of |x|.
 * *lo_nonzero (NULL: not kept) becomes 1 if any lo is not zero. */
__global__ void k_split_bf16(const float *src, int64_t count, __nv_bfloat16 *hi, __nv_bfloat16 *lo, int *lo_nonzero) {
    int nz = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = src[i];
        const __nv_bfloat16 h = __float2bfloat16_rn(v), l = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(h)));
        if (hi) hi[i] = h;
        lo[i] = l;
        nz |= __bfloat162float(l) != 0.0f;
    }
    if (lo_nonzero && __syncthreads_or(nz) && threadIdx.x == 0) atomicOr(lo_nonzero, 1);
}

pdb_status pdb_cuda_split_bf16(cudaStream_t s, const float *src, int64_t count, void *hi, void *lo, int *lo_nonzero) {
    if (count <= 0) return PDB_OK;
    unsigned g = grid1(count, 256);
    if (g > 65535u * 16) g = 65535u * 16;
    k_split_bf16<<<g, 256, 0, s>>>(src, count, (__nv_bfloat16 *)hi, (__nv_bfloat16 *)lo, lo_nonzero);
    PDB_CU_LAUNCH("split_bf16");
    return PDB_OK;
}

__global__ void k_silu_mul(const float *g, const float *u, float *out, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        float x = g[i];
        out[i] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, dev_exp(-x))), u[i]);
    }
}

pdb_status pdb_cuda_silu_mul(cudaStream_t s, const float *g, const float *u, float *out, int64_t count) {
    if (count <= 0) return PDB_OK;
    unsigned gr = grid1(count, 256);
    if (gr > 65535u * 16) gr = 65535u * 16;
    k_silu_mul<<<gr, 256, 0, s>>>(g, u, out, count);
    PDB_CU_LAUNCH("silu_mul");
    return PDB_OK;
}

/* ======================================= norms ============================================== */

/* Double sum of squares of x[0..C) in index order (pdb_math_rmsnorm's order: thread 0 adds,
 * the product of two floats is exact in double); every thread gets the total. */
__device__ double block_sumsq(const float *x, int64_t C, double *red) {
    if (threadIdx.x == 0) {
        double ss = 0;
#pragma unroll 8
        for (int64_t j = 0; j < C; j++) ss += (double)x[j] * (double)x[j];
        red[0] = ss;
    }
    __syncthreads();
    return red[0];
}

/* A block normalizes RN_ROWS rows: thread i of the first RN_ROWS sums row i's squares alone, in
 * index order (block_sumsq's order and its double arithmetic; rows in parallel instead of a block
 * per row with one adding thread), then the whole block scales the rows, coalesced. In place is
 * safe: every sum of the block is done before the first write. */
enum { RN_ROWS = 64, RN_THREADS = 256 };

__global__ void __launch_bounds__(RN_THREADS)
    k_rmsnorm(const float *x, int64_t ldx, const float *w, float *y, int64_t ldy, int64_t n, int64_t C, double eps) {
    __shared__ float rs[RN_ROWS];
    const int64_t r0 = (int64_t)blockIdx.x * RN_ROWS;
    const int rows = n - r0 < RN_ROWS ? (int)(n - r0) : RN_ROWS;
    if ((int)threadIdx.x < rows) {
        const float *xr = x + (r0 + threadIdx.x) * ldx;
        double ss = 0;
#pragma unroll 8
        for (int64_t j = 0; j < C; j++) ss += (double)xr[j] * (double)xr[j];
        rs[threadIdx.x] = (float)(1.0 / sqrt(ss / (double)C + eps));
    }
    __syncthreads();
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (r0 + i) * ldx;
        float *yr = y + (r0 + i) * ldy, r = rs[i];
        for (int64_t j = threadIdx.x; j < C; j += RN_THREADS) yr[j] = __fmul_rn(w[j], __fmul_rn(xr[j], r));
    }
}

pdb_status pdb_cuda_rmsnorm(cudaStream_t s, const float *x, int64_t ldx, const float *w, float *y, int64_t ldy,
                            int64_t n, int64_t C, double eps) {
    if (n <= 0) return PDB_OK;
    k_rmsnorm<<<grid1(n, RN_ROWS), RN_THREADS, 0, s>>>(x, ldx, w, y, ldy, n, C, eps);
    PDB_CU_LAUNCH("rmsnorm");
    return PDB_OK;
}

/* A warp per row, 8 rows per block. The butterfly leaves every lane the same total (each step adds
 * two equal partial sums' partners commutatively), so every lane scales by the same factor. */
__global__ void __launch_bounds__(256)
    k_rmsnorm_warp(const float *x, int64_t ldx, const float *w, float *y, int64_t ldy, int64_t n, int64_t C, double eps) {
    const int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= n) return;
    const float *xr = x + r * ldx;
    float *yr = y + r * ldy;
    double ss = 0;
    for (int64_t j = lane; j < C; j += 32) ss += (double)xr[j] * (double)xr[j];
#pragma unroll
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = (float)(1.0 / sqrt(ss / (double)C + eps));
    for (int64_t j = lane; j < C; j += 32) yr[j] = __fmul_rn(w[j], __fmul_rn(xr[j], rs));
}

pdb_status pdb_cuda_rmsnorm_warp(cudaStream_t s, const float *x, int64_t ldx, const float *w, float *y, int64_t ldy,
                                 int64_t n, int64_t C, double eps) {
    if (n <= 0) return PDB_OK;
    k_rmsnorm_warp<<<grid1(n, 8), 256, 0, s>>>(x, ldx, w, y, ldy, n, C, eps);
    PDB_CU_LAUNCH("rmsnorm (warp per row)");
    return PDB_OK;
}

/* ======================================= latent rows ======================================== */

__device__ __forceinline__ void rope_pair(float a, float b, float c, float sn, float *o0, float *o1) {
    *o0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
    *o1 = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c));
}

template <typename T>
__global__ void k_latent(const float *kva, const float *norm, const float *cs, T *base, const int32_t *ptab,
                         int64_t page, int64_t rowpad, int64_t pos0, int64_t kvl, int64_t rope, const float *q,
                         int64_t nh, int64_t nope, float *qlat, double eps) {
    __shared__ double red[32];
    int64_t t = blockIdx.x, row = kvl + rope, p = pos0 + t, half = rope / 2;
    const float *src = kva + t * row, *c = cs + t * rope, *sn = c + half;
    T *dst = base + ((int64_t)ptab[p / page] * page + p % page) * rowpad;
    double ss = block_sumsq(src, kvl, red);
    float r = (float)(1.0 / sqrt(ss / (double)kvl + eps));
    for (int64_t j = threadIdx.x; j < kvl; j += blockDim.x) st_f(dst, j, __fmul_rn(norm[j], __fmul_rn(src[j], r)));
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        float o0, o1;
        rope_pair(src[kvl + 2 * i], src[kvl + 2 * i + 1], c[i], sn[i], &o0, &o1);
        st_f(dst, kvl + 2 * i, o0);
        st_f(dst, kvl + 2 * i + 1, o1);
    }
    int64_t qk = nope + rope;
    for (int64_t k = threadIdx.x; k < nh * half; k += blockDim.x) {
        int64_t h = k / half, i = k % half;
        const float *qh = q + (t * nh + h) * qk + nope;
        float *out = qlat + (t * nh + h) * row + kvl;
        rope_pair(qh[2 * i], qh[2 * i + 1], c[i], sn[i], &out[2 * i], &out[2 * i + 1]);
    }
}

pdb_status pdb_cuda_latent_write(cudaStream_t s, const float *kva, const float *norm, const float *cs,
                                 const pdb_cuda_pages *pg, int64_t pos0, int64_t n, int64_t kvl, int64_t rope,
                                 const float *q, int64_t nh, int64_t nope, float *qlat, double eps) {
    if (n <= 0) return PDB_OK;
    if (pg->dt == PDB_CUDA_DT_BF16)
        k_latent<<<(unsigned)n, 256, 0, s>>>(kva, norm, cs, (__nv_bfloat16 *)pg->base, pg->ptab, pg->page, pg->rowpad,
                                             pos0, kvl, rope, q, nh, nope, qlat, eps);
    else
        k_latent<<<(unsigned)n, 256, 0, s>>>(kva, norm, cs, (float *)pg->base, pg->ptab, pg->page, pg->rowpad, pos0,
                                             kvl, rope, q, nh, nope, qlat, eps);
    PDB_CU_LAUNCH("latent_write");
    return PDB_OK;
}

/* ======================================= attention ========================================== */

/* Block: 8 warps x 4 query rows = 32 query rows (row index = token * nh + head), one tile of 32
 * cache rows at a time in shared memory as f32 (stride row + 4: float4 reads by 8 lanes touch
 * distinct banks). Score phase: lane j owns cache row j of the tile; P.V phase: lane owns latent
 * columns lane + 32 i. Online softmax per query row: running max m, sum l, output o. */
enum { AT_WARPS = 8, AT_QW = 4, AT_BQ = AT_WARPS * AT_QW, AT_BK = 32, AT_CI = PDB_CUDA_MAX_KVL / 32 };

template <typename T>
__global__ void __launch_bounds__(AT_WARPS * 32)
    k_attn(const float *qlat, const T *base, const int32_t *ptab, int64_t page, int64_t rowpad, int64_t pos0, int64_t n,
           int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    extern __shared__ float4 smem4[];
    float *sm = (float *)smem4;
    int64_t rs = row + 4;
    float *Qs = sm, *Ks = sm + AT_BQ * rs;
    int64_t q0 = (int64_t)blockIdx.x * AT_BQ, nq = n * nh;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int64_t i = threadIdx.x; i < AT_BQ * row; i += blockDim.x) {
        int64_t r = i / row, c = i % row;
        Qs[r * rs + c] = q0 + r < nq ? qlat[(q0 + r) * row + c] : 0.0f;
    }
    int64_t qlast = q0 + AT_BQ - 1 < nq ? q0 + AT_BQ - 1 : nq - 1;
    int64_t kmax = pos0 + qlast / nh; /* last cache row any query of the block sees */
    int64_t qpos[AT_QW];
    float m[AT_QW], l[AT_QW], o[AT_QW][AT_CI];
#pragma unroll
    for (int a = 0; a < AT_QW; a++) {
        int64_t qi = q0 + warp * AT_QW + a;
        qpos[a] = qi < nq ? pos0 + qi / nh : -1;
        m[a] = -INFINITY;
        l[a] = 0;
#pragma unroll
        for (int i = 0; i < AT_CI; i++) o[a][i] = 0;
    }
    for (int64_t kb = 0; kb <= kmax; kb += AT_BK) {
        __syncthreads();
        for (int64_t i = threadIdx.x; i < AT_BK * (row / 2); i += blockDim.x) {
            int64_t r = i / (row / 2), c = 2 * (i % (row / 2)), p = kb + r;
            float v0 = 0, v1 = 0;
            if (p <= kmax) {
                const T *src = base + ((int64_t)ptab[p / page] * page + p % page) * rowpad;
                v0 = ld_f(src, c);
                v1 = ld_f(src, c + 1);
            }
            Ks[r * rs + c] = v0;
            Ks[r * rs + c + 1] = v1;
        }
        __syncthreads();
        /* scores: lane j against cache row kb + j */
        float sc[AT_QW] = {0, 0, 0, 0};
        const float *kr = Ks + lane * rs;
        for (int64_t d = 0; d < row; d += 4) {
            float4 kv = *(const float4 *)(kr + d);
#pragma unroll
            for (int a = 0; a < AT_QW; a++) {
                float4 qv = *(const float4 *)(Qs + (warp * AT_QW + a) * rs + d);
                sc[a] = fmaf(qv.x, kv.x, sc[a]);
                sc[a] = fmaf(qv.y, kv.y, sc[a]);
                sc[a] = fmaf(qv.z, kv.z, sc[a]);
                sc[a] = fmaf(qv.w, kv.w, sc[a]);
            }
        }
        float p[AT_QW];
#pragma unroll
        for (int a = 0; a < AT_QW; a++) {
            float s = kb + lane <= qpos[a] ? sc[a] * scale : -INFINITY;
            float mt = s;
            for (int off = 16; off >= 1; off /= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            float mn = fmaxf(m[a], mt);
            p[a] = mn == -INFINITY ? 0.0f : expf(s - mn);
            float corr = m[a] == -INFINITY ? 0.0f : expf(m[a] - mn);
            float ps = p[a];
            for (int off = 16; off >= 1; off /= 2) ps += __shfl_xor_sync(0xffffffffu, ps, off);
            l[a] = l[a] * corr + ps;
            m[a] = mn;
#pragma unroll
            for (int i = 0; i < AT_CI; i++) o[a][i] *= corr;
        }
        /* o += p . rows[:, :kvl] */
        for (int j = 0; j < AT_BK; j++) {
            float pj[AT_QW];
#pragma unroll
            for (int a = 0; a < AT_QW; a++) pj[a] = __shfl_sync(0xffffffffu, p[a], j);
            const float *kr2 = Ks + j * rs;
#pragma unroll
            for (int i = 0; i < AT_CI; i++) {
                int64_t c = lane + 32 * i;
                if (c < kvl) {
                    float v = kr2[c];
#pragma unroll
                    for (int a = 0; a < AT_QW; a++) o[a][i] = fmaf(pj[a], v, o[a][i]);
                }
            }
        }
    }
#pragma unroll
    for (int a = 0; a < AT_QW; a++) {
        int64_t qi = q0 + warp * AT_QW + a;
        if (qi >= nq) continue;
        float inv = 1.0f / l[a];
#pragma unroll
        for (int i = 0; i < AT_CI; i++) {
            int64_t c = lane + 32 * i;
            if (c < kvl) olat[qi * kvl + c] = o[a][i] * inv;
        }
    }
}

pdb_status pdb_cuda_attention(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0, int64_t n,
                              int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    if (n <= 0) return PDB_OK;
    if (kvl > PDB_CUDA_MAX_KVL || row > PDB_CUDA_MAX_ROW || row % 4)
        return pdb_err_set(PDB_UNSUPPORTED, "attention: kv_lora_rank %lld / row %lld outside the kernel's limits",
                           (long long)kvl, (long long)row);
    size_t smem = sizeof(float) * (size_t)(AT_BQ + AT_BK) * (size_t)(row + 4);
    unsigned g = grid1(n * nh, AT_BQ);
    if (pg->dt == PDB_CUDA_DT_BF16) {
        PDB_CU(cudaFuncSetAttribute(k_attn<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_attn<__nv_bfloat16><<<g, AT_WARPS * 32, smem, s>>>(qlat, (const __nv_bfloat16 *)pg->base, pg->ptab, pg->page,
                                                             pg->rowpad, pos0, n, nh, kvl, row, scale, olat);
    } else {
        PDB_CU(cudaFuncSetAttribute(k_attn<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_attn<float><<<g, AT_WARPS * 32, smem, s>>>(qlat, (const float *)pg->base, pg->ptab, pg->page, pg->rowpad,
                                                     pos0, n, nh, kvl, row, scale, olat);
    }
    PDB_CU_LAUNCH("attention");
    return PDB_OK;
}

/* ======================================= MoE ================================================ */

/* One thread per token, pdb_v2_route step by step: softmax (max, expf, double sum, multiply by
 * the f32 inverse), group-limited mask, greedy top-k with ties to the lower index, weights. */
__global__ void k_route(float *probs, float *scratch, int32_t *idx, float *wt, int64_t n, pdb_cuda_route_cfg rc) {
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= n) return;
    int E = rc.E, K = rc.K;
    float *x = probs + t * E, *sc = scratch + t * E;
    int32_t *ix = idx + t * K;
    float *w = wt + t * K;
    float mx = -INFINITY;
    for (int i = 0; i < E; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < E; i++) { x[i] = dev_exp(x[i] - mx); sum += x[i]; }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < E; i++) { x[i] = x[i] * inv; sc[i] = x[i]; }
    if (rc.group_limited) {
        int G = rc.n_group, per = E / G;
        unsigned keep[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* G <= 256 */
        for (int k = 0; k < rc.topk_group; k++) {
            int b = -1;
            float bs = 0;
            for (int g = 0; g < G; g++) {
                if (keep[g / 32] >> (g % 32) & 1u) continue;
                float gs = -INFINITY;
                for (int j = 0; j < per; j++) gs = fmaxf(gs, x[g * per + j]);
                if (b < 0 || gs > bs) { b = g; bs = gs; }
            }
            keep[b / 32] |= 1u << (b % 32);
        }
        for (int g = 0; g < G; g++)
            if (!(keep[g / 32] >> (g % 32) & 1u))
                for (int j = 0; j < per; j++) sc[g * per + j] = 0.0f;
    }
    for (int k = 0; k < K; k++) {
        int b = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= ix[q] == e;
            if (!taken && (b < 0 || sc[e] > sc[b])) b = e;
        }
        ix[k] = b;
        w[k] = sc[b];
    }
    if (K > 1 && rc.norm_topk_prob) {
        double s = 1e-20;
        for (int k = 0; k < K; k++) s += w[k];
        for (int k = 0; k < K; k++) w[k] = (float)(w[k] / s);
    } else {
        for (int k = 0; k < K; k++) w[k] *= rc.routed_scaling_factor;
    }
}

pdb_status pdb_cuda_route(cudaStream_t s, float *probs, float *scratch, int32_t *idx, float *wt, int64_t n,
                          const pdb_cuda_route_cfg *rc) {
    if (n <= 0) return PDB_OK;
    if (rc->E > PDB_CUDA_MAX_EXPERTS || rc->n_group > 256 || rc->n_group < 1 || rc->K > rc->E)
        return pdb_err_set(PDB_UNSUPPORTED, "route: %d experts / %d groups / top-%d outside the kernel's limits", rc->E,
                           rc->n_group, rc->K);
    k_route<<<grid1(n, 64), 64, 0, s>>>(probs, scratch, idx, wt, n, *rc);
    PDB_CU_LAUNCH("route");
    return PDB_OK;
}

__global__ void k_gather(const float *src, const int32_t *src_row, int64_t H, float *dst) {
    int64_t r = blockIdx.x;
    const float *s = src + (int64_t)src_row[r] * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) dst[r * H + j] = s[j];
}

pdb_status pdb_cuda_gather(cudaStream_t s, const float *src, const int32_t *src_row, int64_t M, int64_t H, float *dst) {
    if (M <= 0) return PDB_OK;
    k_gather<<<(unsigned)M, 256, 0, s>>>(src, src_row, H, dst);
    PDB_CU_LAUNCH("gather");
    return PDB_OK;
}

__global__ void k_combine(const float *ye, const int32_t *slot_row, const float *wt, const float *shared, int64_t K,
                          int64_t H, float *h) {
    int64_t t = blockIdx.x;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        float acc = 0;
        for (int64_t k = 0; k < K; k++) /* the CPU's acc + y * w, two roundings */
            acc = __fadd_rn(acc, __fmul_rn(ye[(int64_t)slot_row[t * K + k] * H + j], wt[t * K + k]));
        if (shared) acc = __fadd_rn(acc, shared[t * H + j]);
        h[t * H + j] = __fadd_rn(h[t * H + j], acc);
    }
}

pdb_status pdb_cuda_moe_combine(cudaStream_t s, const float *ye, const int32_t *slot_row, const float *wt,
                                const float *shared, int64_t n, int64_t K, int64_t H, float *h) {
    if (n <= 0) return PDB_OK;
    k_combine<<<(unsigned)n, 256, 0, s>>>(ye, slot_row, wt, shared, K, H, h);
    PDB_CU_LAUNCH("moe_combine");
    return PDB_OK;
}

/* ======================================= exact products ===================================== */

/* A warp computes an 8 x 8 tile (rows x outputs); each of its 64 elements is one pdb_qmat_dot
 * (warp_dot32's order, unrolled over the tile). The tile only shares loads; it never mixes
 * elements. blockIdx.y is the batch (strides sa, sw, sc). acc: C = C + dot, else C = dot.
 * The general form (any K, any alignment); k_dot32_tiled below runs the aligned ones. */
enum { HK_T = 8, HK_O = 8, HK_WARPS = 8 };

__global__ void __launch_bounds__(HK_WARPS * 32)
    k_dot32(const float *A, int64_t lda, int64_t sa, const float *W, int64_t ldw, int64_t sw, float *C, int64_t ldc,
            int64_t sc, int64_t M, int64_t N, int64_t K, int acc_c) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    A += blockIdx.y * sa;
    W += blockIdx.y * sw;
    C += blockIdx.y * sc;
    int64_t tiles_o = (N + HK_O - 1) / HK_O;
    int64_t tile = (int64_t)blockIdx.x * HK_WARPS + warp;
    int64_t t0 = (tile / tiles_o) * HK_T, o0 = (tile % tiles_o) * HK_O;
    if (t0 >= M) return;
    const float *xr[HK_T], *wr[HK_O];
#pragma unroll
    for (int a = 0; a < HK_T; a++) xr[a] = A + (t0 + a < M ? t0 + a : M - 1) * lda;
#pragma unroll
    for (int b = 0; b < HK_O; b++) wr[b] = W + (o0 + b < N ? o0 + b : N - 1) * ldw;
    float acc[HK_T][HK_O];
#pragma unroll
    for (int a = 0; a < HK_T; a++)
#pragma unroll
        for (int b = 0; b < HK_O; b++) acc[a][b] = 0.0f;
    for (int64_t k = lane; k < K; k += 32) {
        float xv[HK_T], wv[HK_O];
#pragma unroll
        for (int a = 0; a < HK_T; a++) xv[a] = xr[a][k];
#pragma unroll
        for (int b = 0; b < HK_O; b++) wv[b] = wr[b][k];
#pragma unroll
        for (int a = 0; a < HK_T; a++)
#pragma unroll
            for (int b = 0; b < HK_O; b++) acc[a][b] = __fmaf_rn(xv[a], wv[b], acc[a][b]);
    }
#pragma unroll
    for (int a = 0; a < HK_T; a++)
#pragma unroll
        for (int b = 0; b < HK_O; b++) {
            float v = acc[a][b];
            for (int off = 16; off >= 1; off /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, off));
            if (lane == 0 && t0 + a < M && o0 + b < N) {
                float *d = C + (t0 + a) * ldc + o0 + b;
                *d = acc_c ? __fadd_rn(*d, v) : v;
            }
        }
}

/* The same products from shared memory (K % 32 == 0; A, W, lda, ldw and, batched, sa, sw on
 * 16-byte boundaries). Layout: 256 threads = 8 warps as DT_WR x DT_WC; warp (wr, wc) owns the
 * DT_TR x DT_TO tile rows t0 + DT_TR wr .., outputs o0 + DT_TO wc .., so a block covers DT_BR x
 * DT_BO; lane j holds the tile's lane-j partial sums in registers (DT_TR * DT_TO accumulators).
 * k runs in chunks of DT_KC (DT_KC / 32 k-steps): the chunk's A rows and W rows are staged by
 * 16-byte cp.async copies into one of DT_STAGES shared buffers ([DT_BR + DT_BO][DT_KC] floats,
 * A rows first), filled DT_STAGES - 1 chunks ahead; rows past M or N are zero-filled (no bytes
 * read) and their elements never stored. Step s of a chunk at k0: lane j reads As[r][32 s + j]
 * (consecutive words: no bank conflict) and Ws[o][32 s + j], i.e. k = k0 + 32 s + j, and does
 * acc = fma(a, w, acc). Why this is pdb_qmat_dot's order: each accumulator gets exactly one fma
 * per k-step, steps in increasing k across chunks, so lane j's chain is k = j, j + 32, ..., K - 32
 * + j from +0, the same as k_dot32 (a chunk past K is never computed: fewer steps in the last one,
 * no fma on padding, which could turn a -0 partial into +0). The fold is k_dot32's shfl_down tree
 * (l[i] + l[i + off], off = 16 .. 1, the sum in lane 0); its result is then broadcast so that lane
 * q % 32 stores tile element q (coalesced, and acc's C loads issued before the folds). */
enum { DT_WR = 2, DT_WC = 4, DT_THREADS = DT_WR * DT_WC * 32, DT_TR = 16, DT_TO = 8, DT_BR = DT_WR * DT_TR,
       DT_BO = DT_WC * DT_TO, DT_KC = 128, DT_STAGES = 3 };
static const size_t DT_SMEM = sizeof(float) * DT_STAGES * (DT_BR + DT_BO) * DT_KC;
static_assert(DT_THREADS == 256 && DT_BR % 8 == 0 && DT_BO % 8 == 0, "a chunk's copies: row warp + 8 u of 8 warps");
static_assert(DT_KC == 32 * 4 && (DT_TR * DT_TO) % 32 == 0, "a row's copy: 16 bytes a lane; the tile's stores: whole lanes");

/* One k-step of a warp's tile: a[i] = As[i][32 s + lane], w[j] = Ws[j][32 s + lane]. */
static __device__ __forceinline__ void dt_step(float acc[DT_TR][DT_TO], const float *as, const float *ws, int s) {
    float a[DT_TR], w[DT_TO];
#pragma unroll
    for (int i = 0; i < DT_TR; i++) a[i] = as[i * DT_KC + 32 * s];
#pragma unroll
    for (int j = 0; j < DT_TO; j++) w[j] = ws[j * DT_KC + 32 * s];
#pragma unroll
    for (int i = 0; i < DT_TR; i++)
#pragma unroll
        for (int j = 0; j < DT_TO; j++) acc[i][j] = __fmaf_rn(a[i], w[j], acc[i][j]);
}

__global__ void __launch_bounds__(DT_THREADS, 1)
    k_dot32_tiled(const float *__restrict__ A, int64_t lda, int64_t sa, const float *__restrict__ W, int64_t ldw,
                  int64_t sw, float *C, int64_t ldc, int64_t sc, int64_t M, int64_t N, int64_t K, int acc_c) {
    extern __shared__ __align__(16) float dt_sm[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wr = warp / DT_WC, wc = warp % DT_WC;
    A += blockIdx.y * sa;
    W += blockIdx.y * sw;
    C += blockIdx.y * sc;
    const int64_t tiles_o = (N + DT_BO - 1) / DT_BO;
    const int64_t t0 = (int64_t)(blockIdx.x / tiles_o) * DT_BR, o0 = (int64_t)(blockIdx.x % tiles_o) * DT_BO;
    /* This thread's copies of a chunk: 16 bytes at k0 + 4 lane of the A rows warp + 8 u (u < DT_BR / 8)
     * and of the W rows warp + 8 u (u < DT_BO / 8); a warp copies 512 contiguous bytes of one row. */
    const float *arow = A + (t0 + warp) * lda + 4 * lane, *wrow = W + (o0 + warp) * ldw + 4 * lane;
    const int nch = (int)((K + DT_KC - 1) / DT_KC);
    auto issue = [&](int ch) {
        float *st = dt_sm + (ch % DT_STAGES) * ((DT_BR + DT_BO) * DT_KC) + warp * DT_KC + 4 * lane;
        const int64_t k0 = (int64_t)ch * DT_KC;
        const bool kin = k0 + 4 * lane < K; /* K % 32 == 0: a 16-byte group is all in or all out */
#pragma unroll
        for (int u = 0; u < DT_BR / 8; u++) {
            bool ok = kin && t0 + warp + 8 * u < M;
            cp16(st + 8 * u * DT_KC, ok ? arow + 8 * u * lda + k0 : A, ok);
        }
#pragma unroll
        for (int u = 0; u < DT_BO / 8; u++) {
            bool ok = kin && o0 + warp + 8 * u < N;
            cp16(st + (DT_BR + 8 * u) * DT_KC, ok ? wrow + 8 * u * ldw + k0 : W, ok);
        }
    };
    float acc[DT_TR][DT_TO];
#pragma unroll
    for (int i = 0; i < DT_TR; i++)
#pragma unroll
        for (int j = 0; j < DT_TO; j++) acc[i][j] = 0.0f;
#pragma unroll
    for (int p = 0; p < DT_STAGES - 1; p++) {
        if (p < nch) issue(p);
        cp_commit(); /* one group per chunk slot, empty or not, so the wait below counts chunks */
    }
    for (int ch = 0; ch < nch; ch++) {
        cp_wait<DT_STAGES - 2>(); /* this thread's copies of chunk ch have landed */
        __syncthreads();          /* everyone's have, and chunk ch - 1's buffer is no longer read */
        if (ch + DT_STAGES - 1 < nch) issue(ch + DT_STAGES - 1);
        cp_commit();
        const float *st = dt_sm + (ch % DT_STAGES) * ((DT_BR + DT_BO) * DT_KC);
        const float *as = st + (wr * DT_TR) * DT_KC + lane, *ws = st + (DT_BR + wc * DT_TO) * DT_KC + lane;
        const int64_t steps = (K - (int64_t)ch * DT_KC) / 32;
        if (steps >= DT_KC / 32) {
#pragma unroll
            for (int s = 0; s < DT_KC / 32; s++) dt_step(acc, as, ws, s);
        } else {
            for (int s = 0; s < (int)steps; s++) dt_step(acc, as, ws, s);
        }
    }
    cp_wait<0>();
    /* lane q % 32 stores element q = i DT_TO + j of the tile (PL of them a lane) */
    enum { PL = DT_TR * DT_TO / 32 };
    float cv[PL], res[PL];
    bool ok[PL];
    float *dst[PL];
#pragma unroll
    for (int u = 0; u < PL; u++) {
        const int q = lane + 32 * u, i = q / DT_TO, j = q % DT_TO;
        const int64_t r = t0 + wr * DT_TR + i, o = o0 + wc * DT_TO + j;
        ok[u] = r < M && o < N;
        dst[u] = C + (ok[u] ? r * ldc + o : 0);
        cv[u] = acc_c && ok[u] ? *dst[u] : 0.0f;
        res[u] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < DT_TR; i++)
#pragma unroll
        for (int j = 0; j < DT_TO; j++) {
            float v = acc[i][j];
#pragma unroll
            for (int off = 16; off >= 1; off /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, off));
            v = __shfl_sync(0xffffffffu, v, 0);
            const int q = i * DT_TO + j;
            if (lane == q % 32) res[q / 32] = v;
        }
#pragma unroll
    for (int u = 0; u < PL; u++)
        if (ok[u]) *dst[u] = acc_c ? __fadd_rn(cv[u], res[u]) : res[u];
}

/* Whether k_dot32_tiled may run this product (K % 32 == 0 and every copied row 16-byte aligned). */
static int dot32_tiled_fits(int64_t K, const float *A, int64_t lda, int64_t sa, const float *W, int64_t ldw,
                            int64_t sw, int64_t batch) {
    if (K <= 0 || K % 32 || lda % 4 || ldw % 4) return 0;
    if ((uintptr_t)A % 16 || (uintptr_t)W % 16) return 0;
    if (batch > 1 && (sa % 4 || sw % 4)) return 0;
    return 1;
}

pdb_status pdb_cuda_dot32_form(cudaStream_t s, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               int64_t sa, const float *W, int64_t ldw, int64_t sw, float *C, int64_t ldc, int64_t sc,
                               int64_t batch, int accumulate, int form, int *tiled) {
    if (tiled) *tiled = 0;
    if (M <= 0 || N <= 0 || batch <= 0) return PDB_OK;
    if (batch > 65535) return pdb_err_set(PDB_UNSUPPORTED, "dot32: %lld batches (max 65535)", (long long)batch);
    int fits = dot32_tiled_fits(K, A, lda, sa, W, ldw, sw, batch);
    if (form == PDB_DOT32_TILED && !fits)
        return pdb_err_set(PDB_UNSUPPORTED, "dot32: the tiled form needs K %% 32 == 0 and 16-byte rows (K %lld, lda %lld, ldw %lld)",
                           (long long)K, (long long)lda, (long long)ldw);
    if (fits && form != PDB_DOT32_GENERAL) {
        int64_t tiles = ((M + DT_BR - 1) / DT_BR) * ((N + DT_BO - 1) / DT_BO);
        if (tiles > 0x7fffffff) return pdb_err_set(PDB_UNSUPPORTED, "dot32: %lld tiles", (long long)tiles);
        static bool opted = false; /* above 48 KB a kernel asks for its shared memory (once: one device a process) */
        if (!opted) {
            PDB_CU(cudaFuncSetAttribute(k_dot32_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)DT_SMEM));
            opted = true;
        }
        k_dot32_tiled<<<dim3((unsigned)tiles, (unsigned)batch), DT_THREADS, DT_SMEM, s>>>(A, lda, sa, W, ldw, sw, C, ldc,
                                                                                       sc, M, N, K, accumulate);
        PDB_CU_LAUNCH("dot32 tiled");
        if (tiled) *tiled = 1;
        return PDB_OK;
    }
    int64_t tiles = ((M + HK_T - 1) / HK_T) * ((N + HK_O - 1) / HK_O);
    dim3 grid(grid1(tiles, HK_WARPS), (unsigned)batch);
    k_dot32<<<grid, HK_WARPS * 32, 0, s>>>(A, lda, sa, W, ldw, sw, C, ldc, sc, M, N, K, accumulate);
    PDB_CU_LAUNCH("dot32");
    return PDB_OK;
}

pdb_status pdb_cuda_dot32(cudaStream_t s, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int64_t sa,
                          const float *W, int64_t ldw, int64_t sw, float *C, int64_t ldc, int64_t sc, int64_t batch,
                          int accumulate) {
    return pdb_cuda_dot32_form(s, M, N, K, A, lda, sa, W, ldw, sw, C, ldc, sc, batch, accumulate, PDB_DOT32_AUTO, NULL);
}

/* The CPU's attention task (pdb_v2_ops attn_task) for one (token, head) per warp, in its order:
 * s_j = dot32(qlat, row_j) * scale for j <= pos; m = max; e_j = exp(s_j - m) summed in double in
 * j order; p_j = e_j * (float)(1 / sum); o = fma(p_j, row_j[:kvl], o) in j order. Scores are
 * recomputed per pass (three passes) instead of stored, so any length runs in fixed memory. */
enum { AX_WARPS = 4 };

__global__ void __launch_bounds__(AX_WARPS * 32)
    k_attn_exact(const float *qlat, const float *base, const int32_t *ptab, int64_t page, int64_t rowpad, int64_t pos0,
                 int64_t n, int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    int lane = threadIdx.x % 32;
    int64_t q = (int64_t)blockIdx.x * AX_WARPS + threadIdx.x / 32;
    if (q >= n * nh) return;
    int64_t pos = pos0 + q / nh;
    const float *qr = qlat + q * row;
#define AX_ROW(p) (base + ((int64_t)ptab[(p) / page] * page + (p) % page) * rowpad)
    float m = -INFINITY;
    for (int64_t j = 0; j <= pos; j++) {
        float sj = __fmul_rn(warp_dot32(qr, AX_ROW(j), row, lane), scale);
        m = sj > m ? sj : m;
    }
    double sum = 0;
    for (int64_t j = 0; j <= pos; j++) sum += (double)dev_exp(__fsub_rn(__fmul_rn(warp_dot32(qr, AX_ROW(j), row, lane), scale), m));
    float inv = (float)(1.0 / sum);
    float o[AT_CI];
#pragma unroll
    for (int i = 0; i < AT_CI; i++) o[i] = 0.0f;
    for (int64_t j = 0; j <= pos; j++) {
        const float *rj = AX_ROW(j);
        float p = __fmul_rn(dev_exp(__fsub_rn(__fmul_rn(warp_dot32(qr, rj, row, lane), scale), m)), inv);
#pragma unroll
        for (int i = 0; i < AT_CI; i++) {
            int64_t c = lane + 32 * i;
            if (c < kvl) o[i] = __fmaf_rn(p, rj[c], o[i]);
        }
    }
#undef AX_ROW
#pragma unroll
    for (int i = 0; i < AT_CI; i++) {
        int64_t c = lane + 32 * i;
        if (c < kvl) olat[q * kvl + c] = o[i];
    }
}

pdb_status pdb_cuda_attention_exact(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0,
                                    int64_t n, int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    if (n <= 0) return PDB_OK;
    if (pg->dt != PDB_CUDA_DT_F32 || kvl > PDB_CUDA_MAX_KVL)
        return pdb_err_set(PDB_UNSUPPORTED, "exact attention: needs an f32 cache and kv_lora_rank <= %d",
                           PDB_CUDA_MAX_KVL);
    k_attn_exact<<<grid1(n * nh, AX_WARPS), AX_WARPS * 32, 0, s>>>(qlat, (const float *)pg->base, pg->ptab, pg->page,
                                                                   pg->rowpad, pos0, n, nh, kvl, row, scale, olat);
    PDB_CU_LAUNCH("attention_exact");
    return PDB_OK;
}

/* ======================================= capture hook ======================================= */

/* One thread per row, hook_rows' arithmetic operation by operation on the host's roundings:
 * pdb_math_rmsnorm (a sequential double sum of products, then 1 / sqrt in double, rounded to
 * f32; y = w * (x * r)) and the rotation of pdb_rope_apply_cs. The _rn intrinsics keep nvcc
 * from fusing a multiply and an add (the host is built with -ffp-contract=off). */
__global__ void k_hook_finish(float *rows, int64_t n, int row, int kvl, int rope, const float *norm, const float *cs,
                              double eps) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float *x = rows + i * row;
    double ss = 0.0;
#pragma unroll 8
    for (int k = 0; k < kvl; k++) {
        double v = (double)x[k];
        ss = __dadd_rn(ss, __dmul_rn(v, v));
    }
    float r = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)kvl), eps))));
    for (int k = 0; k < kvl; k++) x[k] = __fmul_rn(norm[k], __fmul_rn(x[k], r));
    const float *c = cs + i * rope;
    for (int j = 0; j < rope / 2; j++) {
        float a = x[kvl + 2 * j], b = x[kvl + 2 * j + 1], co = c[2 * j], si = c[2 * j + 1];
        x[kvl + 2 * j] = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
        x[kvl + 2 * j + 1] = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
    }
}

pdb_status pdb_cuda_hook_finish(cudaStream_t s, float *rows, int64_t n, int64_t row, int64_t kvl, int64_t rope,
                                const float *norm, const float *cs, double eps) {
    if (n <= 0) return PDB_OK;
    k_hook_finish<<<(unsigned)((n + 127) / 128), 128, 0, s>>>(rows, n, (int)row, (int)kvl, (int)rope, norm, cs, eps);
    PDB_CU_LAUNCH("hook rows");
    return PDB_OK;
}

pdb_status pdb_cuda_hook_dot(cudaStream_t s, const float *x, const float *W, int64_t n, int64_t R, int64_t H,
                             float *out) {
    return pdb_cuda_dot32(s, n, R, H, x, H, 0, W, H, 0, out, R, 0, 1, 0);
}
