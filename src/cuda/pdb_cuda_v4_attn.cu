/* pdb_cuda_v4_attn: DeepSeek-V4's window + compressed attention with its sink
 * (pdb_cuda_v4_kernels.h; the contract is pdb_v4_attn_desc's, src/model/deepseek_v4/pdb_v4.h).
 * V4 attention is MQA-like: every head of token t attends over the same key list (K = V = one
 * row of hd f32 values per key): its window rows, then its compressed entries (CSA: sel, HCA:
 * 0 .. (p + 1) / rate - 1). Three kernels:
 *   k_v4_attn_f32: CUDA cores, f32 throughout: a block per (token, group of G heads); the key
 *     row pointers, the queries and every score of the group in shared memory (sized from the
 *     launch's longest key list); scores by a warp per key (lane partials over d = lane + 32 j
 *     in j order, then a fixed xor tree), the sink softmax by a warp per head (lane-strided
 *     partials, fixed xor tree; den = exp(sink - max) + sum), o[d] = sum_i P_i k_i[d] by one
 *     thread per (column, head) accumulating with fmaf in i order.
 *   k_v4_attn_tc: bf16 tensor cores (mma.sync m16n8k16, f32 accumulation), the design of
 *     pdb_cuda_mla_tc.cu: a block = 64 query rows = heads h0 .. h0 + 63 of one token (rows past
 *     nh are zero and never stored), key tiles of 64 taken from the token's key list in order
 *     (window then compressed), each row converted f32 -> bf16 on its way into shared memory;
 *     V is the same tile over all hd dims. Masked columns (past the list's end) have -inf
 *     scores and zero rows. The sink is the softmax's initial state: running max m = sink[h],
 *     denominator l = 1 (= exp(sink - m)); every later rescale multiplies it like the rest, so
 *     at the end l = exp(sink - m_final) + sum of the (bf16-rounded) P. P is rounded to bf16
 *     before P V and l sums the rounded values.
 *   k_v4_attn_tc16: k_v4_attn_tc's math on bf16 copies of the key rows (the engine's mirrors),
 *     except that its running max moves only past e^8 (the same softmax, other roundings),
 *     streamed into shared memory by cp.async with two tile buffers (the next tile's copy
 *     overlaps this tile's compute), ldmatrix fragments, S split over hd halves in 32 x 32 warp
 *     tiles, O by column pairs over all 64 rows per warp (its own comment below).
 * Invariants: a (token, head)'s result depends only on its q row, its key list and the sink: the
 * order of every sum is fixed by the key index and the dimension, never by how many tokens or
 * heads the launch (or block) holds, so chunked = one shot. Nothing here allocates. */
#include <cuda_bf16.h>
#include <math.h>

#include "pdb_cuda_mma.h"
#include "pdb_cuda_v4_kernels.h"
#include "pdb_cuda_wgmma.h"

/* ------------------------------------------------------------------ the key list of a token */

/* KT: the key rows' element type (float, or __nv_bfloat16 for the bf16-mirror entry point). */
template <class KT> struct v4_klist_t {
    const KT *keys, *comp;
    const int32_t *sel, *nsel;
    int64_t lo, K, rate, pos0, W;
};
typedef v4_klist_t<float> v4_klist;
typedef v4_klist_t<__nv_bfloat16> v4_klist16;

/* Token t's list: nw window rows from keys row wrow0, then nc compressed entries. */
template <class KT>
static __device__ __forceinline__ void v4_list(const v4_klist_t<KT> &L, int64_t t, int64_t &wrow0, int64_t &nw,
                                               int64_t &nc) {
    int64_t p = L.pos0 + t, wlo = p - L.W + 1 > L.lo ? p - L.W + 1 : L.lo;
    wrow0 = wlo - L.lo;
    nw = p - wlo + 1;
    nc = L.sel ? (int64_t)L.nsel[t] : L.rate > 0 ? (p + 1) / L.rate : 0;
    if (L.sel && nc > L.K) nc = L.K; /* the contract's nsel <= K; the shared arrays are sized by it */
}

/* The row of key i of token t (i < nw + nc). */
template <class KT>
static __device__ __forceinline__ const KT *v4_row(const v4_klist_t<KT> &L, int64_t t, int64_t i, int64_t wrow0,
                                                   int64_t nw, int hd) {
    if (i < nw) return L.keys + (wrow0 + i) * hd;
    int64_t e = L.sel ? (int64_t)L.sel[t * L.K + (i - nw)] : i - nw;
    return L.comp + e * hd;
}

/* The bf16 kernels' first row pointers (threads tid < 64 of the block): rowq[tid] = head h0 + tid's q
 * row of token t (NULL past nh), rowk[tid] and rowk[64 + tid] = key tid and 64 + tid of its list
 * (NULL past nk): the first two tiles. */
static __device__ __forceinline__ void v4_rows_first(const v4_klist16 &L, const __nv_bfloat16 *q, int64_t t, int64_t h0,
                                                     int64_t nh, int hd, int64_t wrow0, int64_t nw, int64_t nk,
                                                     const __nv_bfloat16 **rowq, const __nv_bfloat16 **rowk) {
    const int tid = threadIdx.x;
    if (tid >= 64) return;
    const int64_t h = h0 + tid;
    rowq[tid] = h < nh ? q + (t * nh + h) * hd : NULL;
    rowk[tid] = tid < nk ? v4_row(L, t, tid, wrow0, nw, hd) : NULL;
    rowk[64 + tid] = 64 + tid < nk ? v4_row(L, t, 64 + tid, wrow0, nw, hd) : NULL;
}

/* Key ni's row (NULL past nk) with its sel entry ne already loaded (ni >= nw on a CSA list): v4_row
 * split so that the load can be issued early and used later. */
static __device__ __forceinline__ const __nv_bfloat16 *v4_row_loaded(const v4_klist16 &L, int64_t ni, int64_t nk,
                                                                    int64_t wrow0, int64_t nw, int32_t ne, int hd) {
    return ni >= nk ? NULL : ni < nw ? L.keys + (wrow0 + ni) * hd : L.comp + (L.sel ? (int64_t)ne : ni - nw) * hd;
}

/* ------------------------------------------------------------------ f32 on CUDA cores */

enum { F32_THREADS = 256, F32_HPT = 8 };

/* CPT: columns per thread in the output pass (hd <= 256 * CPT); hd / 32 <= 8 * CPT key values
 * per lane in the score pass. Block (t = blockIdx.x, heads h0 = blockIdx.y * G ..), G = nsub *
 * hpt: thread tid owns column(s) tid % ncolt + 256 c and heads tid / ncolt + nsub j. */
template <int CPT>
__global__ void __launch_bounds__(F32_THREADS)
    k_v4_attn_f32(v4_klist L, const float *q, int64_t nh, int hd, int G, int hpt, int nsub, int sstride,
                  const float *sinks, float scale, float *o) {
    extern __shared__ uint4 smem_f32[];
    const float **rows = (const float **)smem_f32;
    const int64_t t = blockIdx.x, h0 = (int64_t)blockIdx.y * G;
    int64_t wrow0, nw, nc;
    v4_list(L, t, wrow0, nw, nc);
    const int nk = (int)(nw + nc);
    float *qs = (float *)(rows + sstride), *ss = qs + (size_t)G * hd;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gc = nh - h0 < G ? (int)(nh - h0) : G;
    for (int i = tid; i < nk; i += F32_THREADS) rows[i] = v4_row(L, t, i, wrow0, nw, hd);
    const float *qt = q + (t * nh + h0) * hd;
    for (int e = tid; e < gc * hd; e += F32_THREADS) qs[e] = qt[e];
    __syncthreads();
    /* scores: a warp per key */
    for (int i = warp; i < nk; i += F32_THREADS / 32) {
        const float *kr = rows[i];
        float kd[8 * CPT];
#pragma unroll
        for (int j = 0; j < 8 * CPT; j++) kd[j] = lane + 32 * j < hd ? kr[lane + 32 * j] : 0.0f;
        for (int h = 0; h < gc; h++) {
            const float *qh = qs + h * hd;
            float part = 0.0f;
#pragma unroll
            for (int j = 0; j < 8 * CPT; j++)
                if (lane + 32 * j < hd) part = fmaf(qh[lane + 32 * j], kd[j], part);
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) part += __shfl_xor_sync(0xffffffffu, part, m);
            if (lane == 0) ss[h * sstride + i] = part * scale;
        }
    }
    __syncthreads();
    /* the sink softmax: a warp per head */
    for (int h = warp; h < gc; h += F32_THREADS / 32) {
        float *sh = ss + h * sstride;
        const float sink = sinks[h0 + h];
        float mx = sink;
        for (int i = lane; i < nk; i += 32) mx = fmaxf(mx, sh[i]);
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
        float sum = 0.0f;
        for (int i = lane; i < nk; i += 32) {
            float e = expf(sh[i] - mx);
            sh[i] = e;
            sum += e;
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
        const float den = expf(sink - mx) + sum;
        for (int i = lane; i < nk; i += 32) sh[i] = sh[i] / den;
    }
    __syncthreads();
    /* o = sum_i P_i k_i, in i order */
    const int ncolt = hd < F32_THREADS ? hd : F32_THREADS, sub = tid / ncolt, d0 = tid % ncolt;
    if (sub >= nsub) return;
    float acc[CPT][F32_HPT];
#pragma unroll
    for (int c = 0; c < CPT; c++)
#pragma unroll
        for (int j = 0; j < F32_HPT; j++) acc[c][j] = 0.0f;
    for (int i = 0; i < nk; i++) {
        const float *kr = rows[i];
        float kv[CPT];
#pragma unroll
        for (int c = 0; c < CPT; c++) kv[c] = d0 + F32_THREADS * c < hd ? kr[d0 + F32_THREADS * c] : 0.0f;
#pragma unroll
        for (int j = 0; j < F32_HPT; j++) {
            int h = sub + nsub * j;
            if (j < hpt && h < gc) {
                float pr = ss[h * sstride + i];
#pragma unroll
                for (int c = 0; c < CPT; c++) acc[c][j] = fmaf(pr, kv[c], acc[c][j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < F32_HPT; j++) {
        int h = sub + nsub * j;
        if (j >= hpt || h >= gc) continue;
        float *oh = o + (t * nh + h0 + h) * hd;
#pragma unroll
        for (int c = 0; c < CPT; c++)
            if (d0 + F32_THREADS * c < hd) oh[d0 + F32_THREADS * c] = acc[c][j];
    }
}

static int max_optin_smem(void) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
}

/* The longest key list of the launch: the window plus K (CSA) or the last token's entries (HCA). */
static int64_t launch_nmax(const int32_t *sel, int64_t K, int64_t rate, int64_t n, int64_t pos0, int64_t W) {
    return W + (sel ? K : rate > 0 ? (pos0 + n) / rate : 0);
}

template <int CPT>
static pdb_status launch_f32(cudaStream_t s, const v4_klist &L, const float *q, int64_t n, int64_t nh, int64_t hd,
                             int64_t nmax, const float *sinks, float scale, float *o) {
    const int ncolt = hd < F32_THREADS ? (int)hd : F32_THREADS, nsub = F32_THREADS / ncolt;
    int64_t sstride = (nmax + 3) / 4 * 4;
    int hpt = (int)((nh + nsub - 1) / nsub);
    hpt = hpt > F32_HPT ? F32_HPT : hpt;
    const int limit = max_optin_smem();
    size_t smem = 0;
    for (;; hpt--) {
        int64_t G = (int64_t)nsub * hpt;
        smem = sizeof(float *) * (size_t)sstride + sizeof(float) * (size_t)(G * hd + G * sstride);
        if (smem <= (size_t)limit || hpt == 1) break;
    }
    if (smem > (size_t)limit || sstride > INT32_MAX)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (f32): %lld keys per token need %zu bytes of shared memory "
                           "(%d available)", (long long)nmax, smem, limit);
    const int G = nsub * hpt;
    if (smem > 48 * 1024) PDB_CU(cudaFuncSetAttribute(k_v4_attn_f32<CPT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)n, (unsigned)((nh + G - 1) / G));
    k_v4_attn_f32<CPT><<<grid, F32_THREADS, smem, s>>>(L, q, nh, (int)hd, G, hpt, nsub, (int)sstride, sinks, scale, o);
    PDB_CU_LAUNCH("v4 attention (f32)");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_attention(cudaStream_t s, const float *q, const float *keys, int64_t lo, const float *comp,
                                 const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate, int64_t n, int64_t nh,
                                 int64_t hd, int64_t pos0, int64_t W, const float *sinks, float scale, float *o) {
    if (n <= 0 || nh <= 0) return PDB_OK;
    if (hd <= 0 || hd > 4 * F32_THREADS || n > INT32_MAX || W <= 0 || pos0 < lo)
        return pdb_err_set(PDB_INVALID, "v4 attention (f32): bad shapes (hd %lld <= %d, n %lld, W %lld, pos0 %lld >= lo %lld)",
                           (long long)hd, 4 * F32_THREADS, (long long)n, (long long)W, (long long)pos0, (long long)lo);
    const v4_klist L = {keys, comp, sel, nsel, lo, K, rate, pos0, W};
    const int64_t nmax = launch_nmax(sel, K, rate, n, pos0, W);
    if (hd <= F32_THREADS) return launch_f32<1>(s, L, q, n, nh, hd, nmax, sinks, scale, o);
    if (hd <= 2 * F32_THREADS) return launch_f32<2>(s, L, q, n, nh, hd, nmax, sinks, scale, o);
    return launch_f32<4>(s, L, q, n, nh, hd, nmax, sinks, scale, o);
}

/* ------------------------------------------------------------------ bf16 on the tensor cores */

enum { TC_Q = 64, TC_K = 64, TC_THREADS = 256, TC_SLD = TC_K + 4, TC_PLD = TC_K + 8, TC_MAX_HD = 512, TC_LB = 8 };

static size_t v4tc_smem(int64_t hd) {
    int64_t ld = hd + 8;
    return sizeof(__nv_bfloat16) * (size_t)((TC_Q + TC_K) * ld + TC_Q * TC_PLD) +
           sizeof(float) * (size_t)(TC_Q * TC_SLD + 3 * TC_Q) + sizeof(float *) * TC_K;
}

static __device__ __forceinline__ uint2 bf16x4(float4 v) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    return make_uint2(*(uint32_t *)&a, *(uint32_t *)&b);
}

/* 64 rows of hd f32 values (row r at src[r], NULL: zeros) -> bf16 dst [64, ld]; batches of
 * TC_LB 16-byte loads per thread in flight (the load is latency-bound: one block per SM). */
static __device__ __forceinline__ void tc_load_rows(__nv_bfloat16 *dst, int ld, const float *const *src, int hd) {
    const int h4 = hd / 4, per = TC_K * h4;
    for (int base = threadIdx.x; base < per; base += TC_THREADS * TC_LB) {
        float4 v[TC_LB];
#pragma unroll
        for (int u = 0; u < TC_LB; u++) {
            int i = base + u * TC_THREADS;
            v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (i < per) {
                const float *r = src[i / h4];
                if (r) v[u] = __ldg((const float4 *)(r + (i % h4) * 4));
            }
        }
#pragma unroll
        for (int u = 0; u < TC_LB; u++) {
            int i = base + u * TC_THREADS;
            if (i < per) *(uint2 *)(dst + (i / h4) * ld + (i % h4) * 4) = bf16x4(v[u]);
        }
    }
}

/* NT: n8 tiles of the output each warp holds (hd / 16, rounded up to the instantiation). Warp w
 * owns query rows 16 (w % 4) .. +15; for S the score columns 32 (w / 4) .. +31, for O the columns
 * (w / 4) hd/2 .. +hd/2-1. Softmax: 4 threads per query row, 16 columns each. */
template <int NT>
__global__ void __launch_bounds__(TC_THREADS, 1)
    k_v4_attn_tc(v4_klist L, const float *q, int64_t nh, int hd, const float *sinks, float scale, float *o) {
    extern __shared__ uint4 smem_tc[];
    const int ld = hd + 8;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_tc, *Ks = Qs + TC_Q * ld;
    float *Ss = (float *)(Ks + TC_K * ld);
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(Ss + TC_Q * TC_SLD);
    float *m_s = (float *)(Ps + TC_Q * TC_PLD), *l_s = m_s + TC_Q, *c_s = l_s + TC_Q;
    const float **rowp = (const float **)(c_s + TC_Q);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int wr = warp & 3, wh = warp >> 2, ntile = hd / 16, ocol0 = wh * (hd / 2);
    const int64_t t = blockIdx.x, h0 = (int64_t)blockIdx.y * TC_Q;
    int64_t wrow0, nw, nc;
    v4_list(L, t, wrow0, nw, nc);
    const int64_t nk = nw + nc;
    /* Q rows: heads h0 + r (zero past nh) */
    if (tid < TC_Q) {
        int64_t h = h0 + tid;
        rowp[tid] = h < nh ? q + (t * nh + h) * hd : NULL;
        float sk = h < nh ? sinks[h] : 0.0f;
        m_s[tid] = sk;
        l_s[tid] = sk == -INFINITY ? 0.0f : 1.0f;
    }
    __syncthreads();
    tc_load_rows(Qs, ld, rowp, hd);
    const int srow = tid >> 2, spart = tid & 3;
    float oacc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.0f;
    for (int64_t kb = 0; kb < nk; kb += TC_K) {
        __syncthreads(); /* Q's load / the previous tile's P V is done with rowp, Ks and Ps */
        if (tid < TC_K) rowp[tid] = kb + tid < nk ? v4_row(L, t, kb + tid, wrow0, nw, hd) : NULL;
        __syncthreads();
        tc_load_rows(Ks, ld, rowp, hd);
        __syncthreads();
        /* S [16 rows of this warp, 32 columns] = Q K^T */
        float sacc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
        const __nv_bfloat16 *qa = Qs + (16 * wr + g) * ld + 2 * t4, *qb = qa + 8 * ld;
        for (int k0 = 0; k0 < hd; k0 += 16) {
            uint32_t a0 = ld32(qa + k0), a1 = ld32(qb + k0), a2 = ld32(qa + k0 + 8), a3 = ld32(qb + k0 + 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const __nv_bfloat16 *kr = Ks + (32 * wh + 8 * j + g) * ld + k0 + 2 * t4;
                mma16816(sacc[j], a0, a1, a2, a3, ld32(kr), ld32(kr + 8));
            }
        }
        tc_store_scores(Ss, TC_SLD, sacc, wr, wh, g, t4, scale);
        __syncthreads();
        tc_softmax_tile(Ss, TC_SLD, Ps, TC_PLD, m_s, l_s, c_s, srow, spart, nk - kb);
        __syncthreads();
        /* O = O * corr + P V */
        const float c_lo = c_s[16 * wr + g], c_hi = c_s[16 * wr + g + 8];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            oacc[j][0] *= c_lo; oacc[j][1] *= c_lo; oacc[j][2] *= c_hi; oacc[j][3] *= c_hi;
        }
        const __nv_bfloat16 *pa = Ps + (16 * wr + g) * TC_PLD + 2 * t4, *pb = pa + 8 * TC_PLD;
#pragma unroll
        for (int k0 = 0; k0 < TC_K; k0 += 16) {
            uint32_t a0 = ld32(pa + k0), a1 = ld32(pb + k0), a2 = ld32(pa + k0 + 8), a3 = ld32(pb + k0 + 8);
            const __nv_bfloat16 *vrow = Ks + (k0 + (lane & 15)) * ld + ocol0;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (j < ntile) {
                    uint32_t b0, b1;
                    ldm_x2_trans(vrow + 8 * j, b0, b1);
                    mma16816(oacc[j], a0, a1, a2, a3, b0, b1);
                }
            }
        }
    }
    __syncthreads();
    const int r_lo = 16 * wr + g;
    const int64_t hlo = h0 + r_lo, hhi = hlo + 8;
    const float inv_lo = 1.0f / l_s[r_lo], inv_hi = 1.0f / l_s[r_lo + 8];
    float *olo = o + (t * nh + hlo) * hd, *ohi = olo + 8 * (int64_t)hd;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        if (j >= ntile) continue;
        int col = ocol0 + 8 * j + 2 * t4;
        if (hlo < nh) *(float2 *)(olo + col) = make_float2(oacc[j][0] * inv_lo, oacc[j][1] * inv_lo);
        if (hhi < nh) *(float2 *)(ohi + col) = make_float2(oacc[j][2] * inv_hi, oacc[j][3] * inv_hi);
    }
}

int pdb_cuda_v4_attention_tc_fits(int64_t hd) {
    if (hd <= 0 || hd % 16 || hd > TC_MAX_HD) return 0;
    return v4tc_smem(hd) <= (size_t)max_optin_smem();
}

template <int NT>
static pdb_status launch_tc(cudaStream_t s, const v4_klist &L, const float *q, int64_t n, int64_t nh, int64_t hd,
                            const float *sinks, float scale, float *o) {
    size_t smem = v4tc_smem(hd);
    PDB_CU(cudaFuncSetAttribute(k_v4_attn_tc<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)n, (unsigned)((nh + TC_Q - 1) / TC_Q));
    k_v4_attn_tc<NT><<<grid, TC_THREADS, smem, s>>>(L, q, nh, (int)hd, sinks, scale, o);
    PDB_CU_LAUNCH("v4 attention (tensor cores)");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_attention_tc(cudaStream_t s, const float *q, const float *keys, int64_t lo, const float *comp,
                                    const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate, int64_t n,
                                    int64_t nh, int64_t hd, int64_t pos0, int64_t W, const float *sinks, float scale,
                                    float *o) {
    if (n <= 0 || nh <= 0) return PDB_OK;
    if (!pdb_cuda_v4_attention_tc_fits(hd))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (tensor cores): head_dim %% 16 == 0 and <= %d with its shared "
                           "memory (%zu bytes) available required (got %lld)", TC_MAX_HD, v4tc_smem(hd > 0 ? hd : 0),
                           (long long)hd);
    if (((uintptr_t)q | (uintptr_t)keys | (uintptr_t)comp) % 16 || (uintptr_t)o % 8)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (tensor cores): q, keys and comp must be 16-byte aligned, "
                           "o 8-byte aligned");
    if (n > INT32_MAX || (nh + TC_Q - 1) / TC_Q > 65535 || W <= 0 || pos0 < lo)
        return pdb_err_set(PDB_INVALID, "v4 attention (tensor cores): bad shapes (n %lld, nh %lld, W %lld, pos0 %lld, "
                           "lo %lld)", (long long)n, (long long)nh, (long long)W, (long long)pos0, (long long)lo);
    const v4_klist L = {keys, comp, sel, nsel, lo, K, rate, pos0, W};
    const int nt = (int)(hd / 16);
    if (nt <= 4) return launch_tc<4>(s, L, q, n, nh, hd, sinks, scale, o);
    if (nt <= 8) return launch_tc<8>(s, L, q, n, nh, hd, sinks, scale, o);
    if (nt <= 16) return launch_tc<16>(s, L, q, n, nh, hd, sinks, scale, o);
    return launch_tc<32>(s, L, q, n, nh, hd, sinks, scale, o);
}

/* ------------------------------------------------------------------ bf16 key mirrors, cp.async double buffered
 * k_v4_attn_tc16: the same block as k_v4_attn_tc (64 query rows = heads h0 .. h0 + 63 of one
 * token, key tiles of 64 in list order, 8 warps). S = Q K^T is split over hd: warp w = (qd = w % 4,
 * wk = w / 4) computes the 32 x 32 quadrant qd (rows 32 (qd % 2), columns 32 (qd / 2)) over the
 * k-steps of half wk (a 32 x 32 warp tile: 2/3 of the fragment traffic of 16 x 32 tiles); the two
 * halves are added through shared memory so that warp w ends with rows 16 wr .. +15 (wr = 2 (qd %
 * 2) + wk) and columns 32 wh .. +31 (wh = qd / 2) for the softmax. The key rows are bf16 already
 * (the engine's mirrors) and stream into shared memory by cp.async, two tile buffers: tile i + 1's
 * copies are issued before tile i's S = Q K^T and land while tile i's S, softmax and P V run. For
 * O warp w owns all 64 rows and the 16-column pairs w, w + 8, .. of hd (each V fragment feeds 4
 * row tiles: half the shared-memory traffic of a 16-row warp tile). Fragments by ldmatrix (Q, K,
 * P: x4; V: x4.trans). The softmax state: m (running max, starts at the sink; it moves only when a
 * tile's row maximum exceeds it by more than T16_LAZY, so P <= e^T16_LAZY and the correction is
 * exactly 1, its products skipped, while it stays: D46) in registers, the
 * same in the two warps of a row group (both take the max of the same shared partials); the
 * correction factors through shared memory to the O warps; l kept per thread over its own
 * columns (the sink's 1 in the thread of wh 0, t4 0), summed at the end in a fixed order (xor over
 * t4, then wh 0 + wh 1). Per tile: 4 barriers (tile landed / S halves / row maxima / P). Per (token, head)
 * the order of every sum is fixed by key index and dimension alone. */

enum { T16_PLD = TC_K + 8, T16_XS = 8 * 16 * 32 /* the S halves' exchange: 16 values per lane per warp */ };
/* How far (natural log) a tile's row maximum may exceed the running one before the running one moves. */
constexpr float T16_LAZY = 8.0f;

static size_t v4tc16_smem(int64_t hd) {
    int64_t ld = hd + 8;
    return sizeof(__nv_bfloat16) * (size_t)((TC_Q + 2 * TC_K) * ld + TC_Q * T16_PLD) +
           sizeof(float) * (size_t)(6 * TC_Q + T16_XS) + sizeof(void *) * (size_t)(TC_Q + 2 * TC_K);
}

/* cp.async of 64 bf16 rows (row r at src[r], NULL: zero-filled, dummy is read from instead and
 * reads nothing) into dst [64, ld]: warp w takes rows w, w + 8, .., a lane 16-byte chunks lane,
 * lane + 32, .. (a row's chunks are contiguous in global memory: coalesced). */
static __device__ __forceinline__ void t16_issue(__nv_bfloat16 *dst, int ld, const __nv_bfloat16 *const *src, int hd,
                                                 const __nv_bfloat16 *dummy) {
    const int c8 = hd / 8, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < TC_K; r += TC_THREADS / 32) {
        const __nv_bfloat16 *row = src[r];
        for (int c = lane; c < c8; c += 32) cp16(dst + r * ld + c * 8, row ? row + c * 8 : dummy, row != NULL);
    }
}

/* O's store: f32, or bf16 rounded to nearest even (pdb_cuda_convert's bits of the f32 value). */
static __device__ __forceinline__ void st_pair(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
static __device__ __forceinline__ void st_pair(__nv_bfloat16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}

/* One accumulator fragment's O store: a[0..1] row lo, a[2..3] row hi, columns col, col + 1 of a head,
 * divided by the rows' denominators (inv_lo, inv_hi); cs_t != NULL (token t's cs row): a column pair
 * among the trailing rd of hd rotated back first (heads_norm_rope's mode 0, sign -1: the same products);
 * stored where the row's head exists. */
template <typename OT>
static __device__ __forceinline__ void o_store(OT *olo, OT *ohi, bool lo_ok, bool hi_ok, int col, const float *a, float inv_lo,
                                               float inv_hi, const float *cs_t, int hd, int rd) {
    float v[4] = {a[0] * inv_lo, a[1] * inv_lo, a[2] * inv_hi, a[3] * inv_hi};
    if (cs_t && col >= hd - rd) { /* the pair (col, col + 1) is rope pair (col - (hd - rd)) / 2 */
        const float *c = cs_t + (col - (hd - rd));
        const float cn = c[0], sn = -c[1];
        rot_pair(v, cn, sn);
        rot_pair(v + 2, cn, sn);
    }
    if (lo_ok) st_pair(olo + col, v[0], v[1]);
    if (hi_ok) st_pair(ohi + col, v[2], v[3]);
}

/* NP: the 16-column pairs of O per warp (hd / 16 pairs over 8 warps, rounded up to the instantiation).
 * OT: O's element type; cs != NULL: each head's trailing rd dims of O rotated back by cs row L.pos0 + t
 * before the store (heads_norm_rope's mode 0, sign -1: the same products in the same order). */
static_assert(TC_Q == TC_K, "Q rows are issued as one key tile");
template <int NP, typename OT>
__global__ void __launch_bounds__(TC_THREADS, 1)
    k_v4_attn_tc16(v4_klist16 L, const __nv_bfloat16 *q, int64_t nh, int hd, const float *sinks, float scale, OT *o,
                   const float *cs, int rd) {
    extern __shared__ uint4 smem_t16[];
    const int ld = hd + 8;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_t16, *Kb = Qs + TC_Q * ld, *Ps = Kb + 2 * TC_K * ld;
    float *mx_s = (float *)(Ps + TC_Q * T16_PLD), *l_s = mx_s + 2 * TC_Q; /* [wh][row] each */
    float *c_s = l_s + 2 * TC_Q;                                          /* [row]: this tile's correction */
    float *xs = c_s + 2 * TC_Q;                                           /* [warp][16][lane] */
    const __nv_bfloat16 **rowq = (const __nv_bfloat16 **)(xs + T16_XS);
    const __nv_bfloat16 **rowk = rowq + TC_Q; /* [buffer][64] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int qd = warp & 3, wk = warp >> 2, wr = 2 * (qd & 1) + wk, wh = qd >> 1, npair = hd / 16, r_lo = 16 * wr + g;
    const int ksteps = hd / 16, kbeg = wk ? ksteps / 2 : 0, kend = wk ? ksteps : ksteps / 2; /* S's k half */
    const int64_t t = blockIdx.x, h0 = (int64_t)blockIdx.y * TC_Q;
    int64_t wrow0, nw, nc;
    v4_list(L, t, wrow0, nw, nc);
    const int64_t nk = nw + nc; /* >= 1: the window holds position p itself */
    v4_rows_first(L, q, t, h0, nh, hd, wrow0, nw, nk, rowq, rowk);
    const float sk_lo = h0 + r_lo < nh ? sinks[h0 + r_lo] : 0.0f, sk_hi = h0 + r_lo + 8 < nh ? sinks[h0 + r_lo + 8] : 0.0f;
    float m_lo = sk_lo, m_hi = sk_hi;
    float l_lo = wh == 0 && t4 == 0 && sk_lo != -INFINITY ? 1.0f : 0.0f;
    float l_hi = wh == 0 && t4 == 0 && sk_hi != -INFINITY ? 1.0f : 0.0f;
    __syncthreads();
    t16_issue(Qs, ld, rowq, hd, L.keys);
    t16_issue(Kb, ld, rowk, hd, L.keys);
    cp_commit();
    /* per-lane ldmatrix offsets: Q / P (rows lane & 15, k 8 (lane >> 4)); K for S (keys lane & 7 +
     * 8 (lane >> 4), d 8 ((lane >> 3) & 1)); V (keys lane & 15, columns 8 (lane >> 4) of pair warp) */
    const int qoff = (32 * (qd & 1) + (lane & 15)) * ld + (lane >> 4) * 8;
    const int poff = (lane & 15) * T16_PLD + (lane >> 4) * 8;
    const int koff = (32 * wh + (lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8;
    const int voff = (lane & 15) * ld + 16 * warp + (lane >> 4) * 8;
    /* oacc[mi][2u + jj]: rows 16 mi + g (+ 8), columns 16 (warp + 8 u) + 8 jj + 2 t4 (+ 1) */
    float oacc[4][2 * NP][4];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int j = 0; j < 2 * NP; j++) oacc[mi][j][0] = oacc[mi][j][1] = oacc[mi][j][2] = oacc[mi][j][3] = 0.0f;
    int buf = 0;
    for (int64_t kb = 0; kb < nk; kb += TC_K, buf ^= 1) {
        cp_wait<0>();
        __syncthreads(); /* A: tile kb landed (and Qs written); everyone is done with the other buffer, Ps, mx_s */
        const __nv_bfloat16 *Ks = Kb + buf * TC_K * ld;
        if (kb + TC_K < nk) t16_issue(Kb + (buf ^ 1) * TC_K * ld, ld, rowk + (buf ^ 1) * TC_K, hd, L.keys);
        cp_commit();
        /* tile kb + 2 TC_K's row of thread tid (< TC_K): its sel entry loaded now, used after S */
        const int64_t ni = kb + 2 * TC_K + tid;
        int32_t ne = 0;
        if (tid < TC_K && L.sel && ni >= nw && ni < nk) ne = L.sel[t * L.K + (ni - nw)];
        /* the quadrant's half-hd partial of S = Q K^T: hacc[mi][nj], rows 32 (qd % 2) + 16 mi, columns 32 wh + 8 nj */
        float hacc[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int j = 0; j < 4; j++) hacc[mi][j][0] = hacc[mi][j][1] = hacc[mi][j][2] = hacc[mi][j][3] = 0.0f;
#pragma unroll 2
        for (int k0 = 16 * kbeg; k0 < 16 * kend; k0 += 16) {
            uint32_t a0[4], a1[4], b0[4], b1[4];
            ldm_x4(Qs + qoff + k0, a0);
            ldm_x4(Qs + qoff + 16 * ld + k0, a1);
            ldm_x4(Ks + koff + k0, b0);
            ldm_x4(Ks + koff + 16 * ld + k0, b1);
            mma16816(hacc[0][0], a0[0], a0[1], a0[2], a0[3], b0[0], b0[1]);
            mma16816(hacc[0][1], a0[0], a0[1], a0[2], a0[3], b0[2], b0[3]);
            mma16816(hacc[0][2], a0[0], a0[1], a0[2], a0[3], b1[0], b1[1]);
            mma16816(hacc[0][3], a0[0], a0[1], a0[2], a0[3], b1[2], b1[3]);
            mma16816(hacc[1][0], a1[0], a1[1], a1[2], a1[3], b0[0], b0[1]);
            mma16816(hacc[1][1], a1[0], a1[1], a1[2], a1[3], b0[2], b0[3]);
            mma16816(hacc[1][2], a1[0], a1[1], a1[2], a1[3], b1[0], b1[1]);
            mma16816(hacc[1][3], a1[0], a1[1], a1[2], a1[3], b1[2], b1[3]);
        }
        /* the partner warp (qd, 1 - wk) gets row tile 1 - wk, this warp keeps row tile wk = its rows 16 wr */
        float sacc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                xs[(warp * 16 + 4 * j + e) * 32 + lane] = wk ? hacc[0][j][e] : hacc[1][j][e];
                sacc[j][e] = wk ? hacc[1][j][e] : hacc[0][j][e];
            }
        if (tid < TC_K)
            rowk[buf * TC_K + tid] = v4_row_loaded(L, ni, nk, wrow0, nw, ne, hd);
        __syncthreads(); /* X: the S halves are exchanged */
        {
            const float *px = xs + ((warp ^ 4) * 16) * 32 + lane;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) sacc[j][e] += px[(4 * j + e) * 32]; /* half 0 + half 1 (commutative) */
        }
        /* scale, mask the columns past nk, the warp's row maxima */
        float mlo = -INFINITY, mhi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t col = kb + 32 * wh + 8 * j + 2 * t4;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = col + (e & 1) < nk ? sacc[j][e] * scale : -INFINITY;
                sacc[j][e] = v;
                if (e < 2) mlo = fmaxf(mlo, v);
                else mhi = fmaxf(mhi, v);
            }
        }
        mlo = fmaxf(mlo, __shfl_xor_sync(0xffffffffu, mlo, 1));
        mlo = fmaxf(mlo, __shfl_xor_sync(0xffffffffu, mlo, 2));
        mhi = fmaxf(mhi, __shfl_xor_sync(0xffffffffu, mhi, 1));
        mhi = fmaxf(mhi, __shfl_xor_sync(0xffffffffu, mhi, 2));
        if (t4 == 0) {
            mx_s[wh * TC_Q + r_lo] = mlo;
            mx_s[wh * TC_Q + r_lo + 8] = mhi;
        }
        __syncthreads(); /* B: both halves' row maxima (and rowk of tile kb + 2 TC_K) are in */
        /* the running max moves only when the tile's exceeds it by more than T16_LAZY (then P <= e^T16_LAZY;
         * the softmax does not depend on the reference, and c = 1 exactly while it stays) */
        const float tlo = fmaxf(mx_s[r_lo], mx_s[TC_Q + r_lo]), thi = fmaxf(mx_s[r_lo + 8], mx_s[TC_Q + r_lo + 8]);
        const float nlo = tlo > m_lo + T16_LAZY ? tlo : m_lo, nhi = thi > m_hi + T16_LAZY ? thi : m_hi;
        const float clo = nlo == m_lo ? 1.0f : m_lo == -INFINITY ? 0.0f : expf(m_lo - nlo);
        const float chi = nhi == m_hi ? 1.0f : m_hi == -INFINITY ? 0.0f : expf(m_hi - nhi);
        m_lo = nlo;
        m_hi = nhi;
        float slo = 0.0f, shi = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float p0 = sacc[j][0] == -INFINITY ? 0.0f : expf(sacc[j][0] - nlo);
            const float p1 = sacc[j][1] == -INFINITY ? 0.0f : expf(sacc[j][1] - nlo);
            const float p2 = sacc[j][2] == -INFINITY ? 0.0f : expf(sacc[j][2] - nhi);
            const float p3 = sacc[j][3] == -INFINITY ? 0.0f : expf(sacc[j][3] - nhi);
            const __nv_bfloat162 plo = __floats2bfloat162_rn(p0, p1), phi = __floats2bfloat162_rn(p2, p3);
            const float2 flo = __bfloat1622float2(plo), fhi = __bfloat1622float2(phi);
            slo += flo.x;
            slo += flo.y;
            shi += fhi.x;
            shi += fhi.y;
            const int col = 32 * wh + 8 * j + 2 * t4;
            *(__nv_bfloat162 *)(Ps + r_lo * T16_PLD + col) = plo;
            *(__nv_bfloat162 *)(Ps + (r_lo + 8) * T16_PLD + col) = phi;
        }
        l_lo = l_lo * clo + slo;
        l_hi = l_hi * chi + shi;
        if (wh == 0 && t4 == 0) {
            c_s[r_lo] = clo;
            c_s[r_lo + 8] = chi;
        }
        __syncthreads(); /* C: P of all 64 columns and every row's correction are in */
        /* O = O * corr + P V (V = the same tile, the warp's column pairs, all 64 rows); the products
         * are skipped when every row's correction is exactly 1 (the same values) */
        {
            float cf[4][2];
            bool ones = true;
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                cf[mi][0] = c_s[16 * mi + g];
                cf[mi][1] = c_s[16 * mi + g + 8];
                ones = ones && cf[mi][0] == 1.0f && cf[mi][1] == 1.0f;
            }
            if (!__all_sync(0xffffffffu, ones))
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
#pragma unroll
                    for (int j = 0; j < 2 * NP; j++) {
                        oacc[mi][j][0] *= cf[mi][0]; oacc[mi][j][1] *= cf[mi][0];
                        oacc[mi][j][2] *= cf[mi][1]; oacc[mi][j][3] *= cf[mi][1];
                    }
        }
#pragma unroll
        for (int kk = 0; kk < TC_K / 16; kk++) {
            uint32_t a[4][4];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) ldm_x4(Ps + poff + 16 * mi * T16_PLD + 16 * kk, a[mi]);
            const __nv_bfloat16 *vr = Ks + voff + 16 * kk * ld;
#pragma unroll
            for (int u = 0; u < NP; u++) {
                if (warp + 8 * u < npair) {
                    uint32_t r[4];
                    ldm_x4_trans(vr + 128 * u, r);
#pragma unroll
                    for (int mi = 0; mi < 4; mi++) {
                        mma16816(oacc[mi][2 * u], a[mi][0], a[mi][1], a[mi][2], a[mi][3], r[0], r[1]);
                        mma16816(oacc[mi][2 * u + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], r[2], r[3]);
                    }
                }
            }
        }
    }
    /* l: the row's 4 threads (xor tree), then wh 0 + wh 1 */
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    if (t4 == 0) {
        l_s[wh * TC_Q + r_lo] = l_lo;
        l_s[wh * TC_Q + r_lo + 8] = l_hi;
    }
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
        const int r0 = 16 * mi + g;
        const int64_t hlo = h0 + r0, hhi = hlo + 8;
        const float inv_lo = 1.0f / (l_s[r0] + l_s[TC_Q + r0]), inv_hi = 1.0f / (l_s[r0 + 8] + l_s[TC_Q + r0 + 8]);
        OT *olo = o + (t * nh + hlo) * hd, *ohi = olo + 8 * (int64_t)hd;
#pragma unroll
        for (int u = 0; u < NP; u++) {
            if (warp + 8 * u >= npair) continue;
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
                o_store(olo, ohi, hlo < nh, hhi < nh, 16 * (warp + 8 * u) + 8 * jj + 2 * t4, oacc[mi][2 * u + jj], inv_lo,
                        inv_hi, cs ? cs + (L.pos0 + t) * rd : NULL, hd, rd);
        }
    }
}

int pdb_cuda_v4_attention_tc16_fits(int64_t hd) {
    if (hd <= 0 || hd % 16 || hd > TC_MAX_HD) return 0;
    return v4tc16_smem(hd) <= (size_t)max_optin_smem();
}

template <int NP, typename OT>
static pdb_status launch_tc16(cudaStream_t s, const v4_klist16 &L, const __nv_bfloat16 *q, int64_t n, int64_t nh, int64_t hd,
                              const float *sinks, float scale, OT *o, const float *cs, int64_t rd) {
    size_t smem = v4tc16_smem(hd);
    PDB_CU(cudaFuncSetAttribute(k_v4_attn_tc16<NP, OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)n, (unsigned)((nh + TC_Q - 1) / TC_Q));
    k_v4_attn_tc16<NP, OT><<<grid, TC_THREADS, smem, s>>>(L, q, nh, (int)hd, sinks, scale, o, cs, (int)rd);
    PDB_CU_LAUNCH("v4 attention (tensor cores, bf16 keys)");
    return PDB_OK;
}

template <typename OT>
static pdb_status launch_tc16_np(cudaStream_t s, const v4_klist16 &L, const __nv_bfloat16 *q, int64_t n, int64_t nh,
                                 int64_t hd, const float *sinks, float scale, OT *o, const float *cs, int64_t rd) {
    const int np = (int)((hd / 16 + 7) / 8); /* column pairs per warp */
    if (np <= 1) return launch_tc16<1>(s, L, q, n, nh, hd, sinks, scale, o, cs, rd);
    if (np <= 2) return launch_tc16<2>(s, L, q, n, nh, hd, sinks, scale, o, cs, rd);
    return launch_tc16<4>(s, L, q, n, nh, hd, sinks, scale, o, cs, rd);
}

/* The bf16 entry points' shared argument checks (who: the kernel's name in the message). */
static pdb_status bf16_args(const char *who, const void *q_bf16, const void *keys_bf16, const void *comp_bf16, int64_t n,
                            int64_t nh, int64_t hd, int64_t pos0, int64_t W, int64_t lo, const pdb_cuda_v4_attn_out *out) {
    if (((uintptr_t)q_bf16 | (uintptr_t)keys_bf16 | (uintptr_t)comp_bf16) % 16 || (uintptr_t)out->o % 8 || !keys_bf16)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (%s): q_bf16, keys_bf16 and comp_bf16 must be 16-byte aligned "
                           "(keys_bf16 not NULL), o 8-byte aligned", who);
    if (out->cs && (out->rd < 0 || out->rd > hd || out->rd % 2))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (%s): inverse rope over %lld dims (even, <= head_dim %lld)", who,
                           (long long)out->rd, (long long)hd);
    if (n > INT32_MAX || (nh + TC_Q - 1) / TC_Q > 65535 || W <= 0 || pos0 < lo)
        return pdb_err_set(PDB_INVALID, "v4 attention (%s): bad shapes (n %lld, nh %lld, W %lld, pos0 %lld, lo %lld)", who,
                           (long long)n, (long long)nh, (long long)W, (long long)pos0, (long long)lo);
    return PDB_OK;
}

pdb_status pdb_cuda_v4_attention_tc16(cudaStream_t s, const void *q_bf16, const void *keys_bf16, int64_t lo,
                                      const void *comp_bf16, const int32_t *sel, const int32_t *nsel, int64_t K,
                                      int64_t rate, int64_t n, int64_t nh, int64_t hd, int64_t pos0, int64_t W,
                                      const float *sinks, float scale, const pdb_cuda_v4_attn_out *out) {
    if (n <= 0 || nh <= 0) return PDB_OK;
    if (!pdb_cuda_v4_attention_tc16_fits(hd))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (tensor cores, bf16 keys): head_dim %% 16 == 0 and <= %d with "
                           "its shared memory (%zu bytes) available required (got %lld)", TC_MAX_HD,
                           v4tc16_smem(hd > 0 ? hd : 0), (long long)hd);
    PDB_TRY(bf16_args("tensor cores, bf16 keys", q_bf16, keys_bf16, comp_bf16, n, nh, hd, pos0, W, lo, out));
    const v4_klist16 L = {(const __nv_bfloat16 *)keys_bf16, (const __nv_bfloat16 *)comp_bf16, sel, nsel, lo, K, rate,
                          pos0, W};
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)q_bf16;
    if (out->bf16) return launch_tc16_np(s, L, q, n, nh, hd, sinks, scale, (__nv_bfloat16 *)out->o, out->cs, out->rd);
    return launch_tc16_np(s, L, q, n, nh, hd, sinks, scale, (float *)out->o, out->cs, out->rd);
}

/* ------------------------------------------------------------------ warpgroup MMA (sm_90a), head_dim 512
 * k_v4_attn_wg: tc16's block (64 query rows = heads h0 .. h0 + 63 of one token, key tiles of 64 in
 * list order, bf16 key rows streamed by cp.async into two tile buffers) on Hopper's wgmma, two
 * warpgroups. Q and the key tiles sit in shared memory in the 128B-swizzled layout
 * (pdb_cuda_wgmma.h; 8 regions of 64 rows x 64 dims each, 64 KB a tile). Per tile:
 *   S: warpgroup wg computes the partial Q K^T over dims 256 wg .. + 255 (16 m64n64k16, both
 *     operands from shared memory); the two partials are exchanged through shared memory and
 *     each warpgroup adds them (half 0 + half 1: the same float in both), so both hold the whole
 *     64 x 64 score tile in the same accumulator layout.
 *   softmax: in registers, identically in both warpgroups (a row's 64 columns are the 4 threads of
 *     a quad: its max by two xor shuffles); tc16's lazy running max (T16_LAZY) and sink state; P
 *     rounded to bf16 straight into the A fragments of the next product (the accumulator layout of
 *     S is the register layout of A).
 *   O: warpgroup wg owns O's dims 256 wg .. + 255 (64 x 256 f32, 128 registers a thread) and adds
 *     P V over 4 m64n256k16 (A = P from registers, B = the same key tile, N-major).
 * Two barriers a tile (the tile landed; the S partials exchanged). l: each thread over its own
 * columns, then the quad's xor tree. Per (token, head) every sum's order is fixed by the key index
 * and the dimension, never by the launch: chunked = one shot. */

enum { WG_HD = 512, WG_THREADS = 256, WG_TILE = TC_K * WG_HD * 2 /* bytes: 64 rows, 8 swizzled regions */,
       WG_REGION = TC_K * 128 /* one 64-dim region of a tile */, WG_XS = 32 * 128 /* floats per warpgroup */ };

static_assert(WG_THREADS == 256 && TC_K == 64, "wg_issue: 8 warps, rows w + 8 i of a 64-row tile");

static size_t v4wg_smem(void) {
    return 1024 /* alignment slack */ + 3 * (size_t)WG_TILE + sizeof(float) * 2 * WG_XS + sizeof(void *) * 3 * TC_K;
}

#if PDB_WGMMA_DEVICE
/* The 64 rows src[r] (NULL: zero-filled, dummy is read from instead and reads nothing) of 512 bf16
 * into the swizzled tile dst: warp w takes rows w + 8 i (so r % 8 = w), a lane the 16-byte chunks
 * lane and lane + 32 of each (regions lane / 8 and lane / 8 + 4, chunk lane % 8): one offset per
 * thread plus constants. */
static __device__ __forceinline__ void wg_issue(uint8_t *dst, const __nv_bfloat16 *const *src, const __nv_bfloat16 *dummy) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint8_t *d = dst + (lane >> 3) * WG_REGION + warp * 128 + (((lane & 7) ^ warp) << 4);
#pragma unroll
    for (int i = 0; i < TC_K / 8; i++) {
        const __nv_bfloat16 *row = src[warp + 8 * i];
#pragma unroll
        for (int j = 0; j < 2; j++) cp16(d + i * 1024 + j * 4 * WG_REGION, row ? row + (lane + 32 * j) * 8 : dummy, row != NULL);
    }
}
#endif

template <typename OT>
__global__ void __launch_bounds__(WG_THREADS, 1)
    k_v4_attn_wg(v4_klist16 L, const __nv_bfloat16 *q, int64_t nh, const float *sinks, float scale, OT *o, const float *cs,
                 int rd) {
#if PDB_WGMMA_DEVICE
    extern __shared__ uint8_t smem_wg[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_wg);
    uint8_t *Qs = smem_wg + ((1024 - (raw & 1023)) & 1023), *Kb = Qs + WG_TILE; /* 1024-byte aligned */
    float *xs = (float *)(Kb + 2 * WG_TILE);                                     /* [warpgroup][32][128] */
    const __nv_bfloat16 **rowk = (const __nv_bfloat16 **)(xs + 2 * WG_XS);     /* [buffer][64] */
    const __nv_bfloat16 **rowq = rowk + 2 * TC_K;
    const uint32_t qaddr = (uint32_t)__cvta_generic_to_shared(Qs), kaddr = qaddr + WG_TILE;
    const int tid = threadIdx.x, wg = tid >> 7, wt = tid & 127, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int r_lo = 16 * (wt >> 5) + g; /* this thread's rows: r_lo and r_lo + 8 */
    const int64_t t = blockIdx.x, h0 = (int64_t)blockIdx.y * TC_Q;
    int64_t wrow0, nw, nc;
    v4_list(L, t, wrow0, nw, nc);
    const int64_t nk = nw + nc; /* >= 1: the window holds position p itself */
    v4_rows_first(L, q, t, h0, nh, WG_HD, wrow0, nw, nk, rowq, rowk);
    /* the softmax in base 2: scores and the running max m in units of log2(e) (exp(x) = 2^(x log2 e)) */
    const float scale2 = scale * 1.4426950408889634f, lazy2 = T16_LAZY * 1.4426950408889634f;
    const float sk_lo = h0 + r_lo < nh ? sinks[h0 + r_lo] : 0.0f, sk_hi = h0 + r_lo + 8 < nh ? sinks[h0 + r_lo + 8] : 0.0f;
    float m_lo = sk_lo * 1.4426950408889634f, m_hi = sk_hi * 1.4426950408889634f;
    float l_lo = t4 == 0 && sk_lo != -INFINITY ? 1.0f : 0.0f, l_hi = t4 == 0 && sk_hi != -INFINITY ? 1.0f : 0.0f;
    __syncthreads();
    wg_issue(Qs, rowq, L.keys);
    wg_issue(Kb, rowk, L.keys);
    cp_commit();
    float oacc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) oacc[i] = 0.0f;
    int buf = 0;
    for (int64_t kb = 0; kb < nk; kb += TC_K, buf ^= 1) {
        cp_wait<0>();
        fence_async_shared();
        __syncthreads(); /* A: tile kb landed (and Q); everyone is done with the other buffer and xs */
        const uint32_t ka = kaddr + buf * WG_TILE;
        /* S's partial over dims 256 wg ..: k-step 16 wg + k is region (16 wg + k) / 4, bytes 32 ((16 wg + k) % 4) in;
         * issued first, so that the next tile's copies and the sel load below run beside it */
        float sacc[32];
#pragma unroll
        for (int i = 0; i < 32; i++) sacc[i] = 0.0f;
        wg_fence();
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int ks = 16 * wg + k;
            const uint32_t off = (uint32_t)((ks >> 2) * WG_REGION + (ks & 3) * 32);
            wgmma_64x64_ss(sacc, gmma_desc(qaddr + off, 16, 1024), gmma_desc(ka + off, 16, 1024), 1);
        }
        wg_commit();
        if (kb + TC_K < nk) wg_issue(Kb + (buf ^ 1) * WG_TILE, rowk + (buf ^ 1) * TC_K, L.keys);
        cp_commit();
        /* tile kb + 2 TC_K's row of thread tid (< TC_K) */
        const int64_t ni = kb + 2 * TC_K + tid;
        if (tid < TC_K) {
            int32_t ne = 0;
            if (L.sel && ni >= nw && ni < nk) ne = L.sel[t * L.K + (ni - nw)];
            rowk[buf * TC_K + tid] = v4_row_loaded(L, ni, nk, wrow0, nw, ne, WG_HD);
        }
        wg_wait<0>();
        float4 *mine = (float4 *)(xs + wg * WG_XS), *other = (float4 *)(xs + (wg ^ 1) * WG_XS);
#pragma unroll
        for (int q4 = 0; q4 < 8; q4++) mine[q4 * 128 + wt] = make_float4(sacc[4 * q4], sacc[4 * q4 + 1], sacc[4 * q4 + 2], sacc[4 * q4 + 3]);
        __syncthreads(); /* X: both partials are in (and rowk of tile kb + 2 TC_K) */
        /* half 0 + half 1 (the same float in both warpgroups), scaled; the columns past nk masked */
#pragma unroll
        for (int q4 = 0; q4 < 8; q4++) {
            const float4 x = other[q4 * 128 + wt];
            sacc[4 * q4] = (sacc[4 * q4] + x.x) * scale2;
            sacc[4 * q4 + 1] = (sacc[4 * q4 + 1] + x.y) * scale2;
            sacc[4 * q4 + 2] = (sacc[4 * q4 + 2] + x.z) * scale2;
            sacc[4 * q4 + 3] = (sacc[4 * q4 + 3] + x.w) * scale2;
        }
        if (kb + TC_K > nk)
#pragma unroll
            for (int i = 0; i < 32; i++)
                if (kb + 8 * (i >> 2) + 2 * t4 + (i & 1) >= nk) sacc[i] = -INFINITY;
        /* the rows' maxima (a row = the quad's 64 columns) */
        float mlo = -INFINITY, mhi = -INFINITY;
        tile_row_max(sacc, &mlo, &mhi);
        /* the lazy running max (tc16's rule: it moves only past e^T16_LAZY; then P <= e^T16_LAZY) */
        const float nlo = mlo > m_lo + lazy2 ? mlo : m_lo, nhi = mhi > m_hi + lazy2 ? mhi : m_hi;
        const float clo = nlo == m_lo ? 1.0f : ex2_approx(m_lo - nlo), chi = nhi == m_hi ? 1.0f : ex2_approx(m_hi - nhi);
        m_lo = nlo;
        m_hi = nhi;
        /* P = 2^(s - m) in bf16 as the A fragments (2^-inf = 0): k-step kk = columns 16 kk ..: {lo, hi} of n8
         * tile 2 kk, then of 2 kk + 1 */
        uint32_t pa[4][4];
        float slo = 0.0f, shi = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float *v = sacc + 4 * j;
            const __nv_bfloat162 plo = __floats2bfloat162_rn(ex2_approx(v[0] - nlo), ex2_approx(v[1] - nlo));
            const __nv_bfloat162 phi = __floats2bfloat162_rn(ex2_approx(v[2] - nhi), ex2_approx(v[3] - nhi));
            const float2 flo = __bfloat1622float2(plo), fhi = __bfloat1622float2(phi);
            slo += flo.x;
            slo += flo.y;
            shi += fhi.x;
            shi += fhi.y;
            pa[j >> 1][2 * (j & 1)] = *(const uint32_t *)&plo;
            pa[j >> 1][2 * (j & 1) + 1] = *(const uint32_t *)&phi;
        }
        l_lo = l_lo * clo + slo;
        l_hi = l_hi * chi + shi;
        if (clo != 1.0f || chi != 1.0f)
#pragma unroll
            for (int j = 0; j < 32; j++) {
                oacc[4 * j] *= clo; oacc[4 * j + 1] *= clo; oacc[4 * j + 2] *= chi; oacc[4 * j + 3] *= chi;
            }
        /* O (dims 256 wg ..) += P V: keys 16 kk .. are bytes 2048 kk into the tile's regions 4 wg .. 4 wg + 3 */
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_64x256_rs_tb(oacc, pa[kk], gmma_desc(ka + 4 * wg * WG_REGION + kk * 2048, WG_REGION, 1024), 1);
        wg_commit();
        wg_wait<0>();
    }
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    const int64_t hlo = h0 + r_lo, hhi = hlo + 8;
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
    OT *olo = o + (t * nh + hlo) * WG_HD, *ohi = olo + 8 * (int64_t)WG_HD;
#pragma unroll
    for (int j = 0; j < 32; j++)
        o_store(olo, ohi, hlo < nh, hhi < nh, 256 * wg + 8 * j + 2 * t4, oacc + 4 * j, inv_lo, inv_hi,
                cs ? cs + (L.pos0 + t) * rd : NULL, WG_HD, rd);
#else
    (void)L, (void)q, (void)nh, (void)sinks, (void)scale, (void)o, (void)cs, (void)rd;
    __trap(); /* never launched: pdb_cuda_v4_attention_wg_fits is 0 without sm_90a code */
#endif
}

int pdb_cuda_v4_attention_wg_fits(int64_t hd) {
    return hd == WG_HD && pdb_cuda_wgmma_usable() && v4wg_smem() <= (size_t)max_optin_smem();
}

template <typename OT>
static pdb_status launch_wg(cudaStream_t s, const v4_klist16 &L, const __nv_bfloat16 *q, int64_t n, int64_t nh,
                            const float *sinks, float scale, OT *o, const float *cs, int64_t rd) {
    const size_t smem = v4wg_smem();
    PDB_CU(cudaFuncSetAttribute(k_v4_attn_wg<OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)n, (unsigned)((nh + TC_Q - 1) / TC_Q));
    k_v4_attn_wg<OT><<<grid, WG_THREADS, smem, s>>>(L, q, nh, sinks, scale, o, cs, (int)rd);
    PDB_CU_LAUNCH("v4 attention (warpgroup MMA)");
    return PDB_OK;
}

pdb_status pdb_cuda_v4_attention_wg(cudaStream_t s, const void *q_bf16, const void *keys_bf16, int64_t lo,
                                    const void *comp_bf16, const int32_t *sel, const int32_t *nsel, int64_t K, int64_t rate,
                                    int64_t n, int64_t nh, int64_t hd, int64_t pos0, int64_t W, const float *sinks,
                                    float scale, const pdb_cuda_v4_attn_out *out) {
    if (n <= 0 || nh <= 0) return PDB_OK;
    if (!pdb_cuda_v4_attention_wg_fits(hd))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 attention (warpgroup MMA): head_dim %d (got %lld), an sm_90a build on a "
                           "compute capability 9.0 device and %zu bytes of shared memory required", WG_HD, (long long)hd,
                           v4wg_smem());
    PDB_TRY(bf16_args("warpgroup MMA", q_bf16, keys_bf16, comp_bf16, n, nh, hd, pos0, W, lo, out));
    const v4_klist16 L = {(const __nv_bfloat16 *)keys_bf16, (const __nv_bfloat16 *)comp_bf16, sel, nsel, lo, K, rate,
                          pos0, W};
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)q_bf16;
    if (out->bf16) return launch_wg(s, L, q, n, nh, sinks, scale, (__nv_bfloat16 *)out->o, out->cs, out->rd);
    return launch_wg(s, L, q, n, nh, sinks, scale, (float *)out->o, out->cs, out->rd);
}
