/* pdb_cuda_mla_tc: causal absorbed-MLA attention over a bf16 paged latent cache on the tensor
 * cores (mma.sync m16n8k16, bf16 operands, f32 accumulation), flash-style: scores are never
 * written to global memory.
 * Shapes: query rows are (token, head) pairs, row index q = t * nh + h, all heads of a token
 * sharing the one latent row per position (MLA's keys are shared, MQA-like), so a tile of 64
 * query rows is one [64, row] x [row, 64] product per 64 cache rows (S = Q K^T over the 512
 * latent + 64 rope dims) and one [64, 64] x [64, kvl] product (O += P V over the latent dims).
 * Invariants: a query row's result depends only on that row and the cache rows 0..its position,
 * never on which other rows share its block or how the prompt was chunked: key tiles start at
 * absolute position 0 in steps of 64 and every reduction (the mma's k loop, the 4-thread max and
 * sum of a softmax row, the running rescale) has a fixed order; a tile past a row's position is
 * fully masked and leaves its state bit-identical (corr = exp(0) = 1, p = 0). Padding columns
 * (row rounded up to 16) and cache rows past the block's last position are zero in shared
 * memory, so no uninitialised value reaches a product. P is rounded to bf16 before the P V
 * product and the softmax denominator sums the rounded values, so O / l normalises exactly what
 * was multiplied. */
#include <cuda_bf16.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"

enum { TC_Q = 64, TC_K = 64, TC_THREADS = 256, TC_SLD = TC_K + 4, TC_PLD = TC_K + 8 };

static size_t tc_smem(int64_t rk) {
    int64_t ld = rk + 8;
    return sizeof(__nv_bfloat16) * (size_t)((TC_Q + TC_K) * ld + TC_Q * TC_PLD) + sizeof(float) * (size_t)(TC_Q * TC_SLD + 3 * TC_Q);
}

/* NT: n8 tiles of the output each warp holds (kvl / 16, rounded up to the instantiation). Warp w
 * owns query rows 16 (w % 4) .. +15; for S the score columns 32 (w / 4) .. +31, for O the latent
 * columns (w / 4) kvl/2 .. +kvl/2-1. Softmax: 4 threads per query row, 16 columns each. */
template <int NT>
__global__ void __launch_bounds__(TC_THREADS, 1)
    k_mla_tc(const float *qlat, const __nv_bfloat16 *base, const int32_t *ptab, int64_t page, int64_t rowpad,
             int64_t pos0, int64_t n, int64_t nh, int kvl, int row, int rk, float scale, float *olat) {
    extern __shared__ uint4 smem_tc[];
    const int ld = rk + 8;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_tc, *Ks = Qs + TC_Q * ld;
    float *Ss = (float *)(Ks + TC_K * ld);
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(Ss + TC_Q * TC_SLD);
    float *m_s = (float *)(Ps + TC_Q * TC_PLD), *l_s = m_s + TC_Q, *c_s = l_s + TC_Q;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wr = warp & 3, wh = warp >> 2, ntile = kvl / 16, ocol0 = wh * (kvl / 2);
    const int64_t nq = n * nh, q0 = (int64_t)blockIdx.x * TC_Q;
    for (int i = tid; i < TC_Q * rk; i += TC_THREADS) {
        int r = i / rk, c = i % rk;
        float v = q0 + r < nq && c < row ? qlat[(q0 + r) * row + c] : 0.0f;
        Qs[r * ld + c] = __float2bfloat16_rn(v);
    }
    if (tid < TC_Q) { m_s[tid] = -INFINITY; l_s[tid] = 0.0f; }
    const int64_t qlast = q0 + TC_Q - 1 < nq ? q0 + TC_Q - 1 : nq - 1;
    const int64_t kmax = pos0 + qlast / nh;
    const int srow = tid >> 2, spart = tid & 3;
    const int64_t sq = q0 + srow, spos = sq < nq ? pos0 + sq / nh : -1;
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    const int r8 = rk / 8;
    for (int64_t kb = 0; kb <= kmax; kb += TC_K) {
        __syncthreads(); /* the previous tile's P V is done with Ks and Ps */
        for (int i = tid; i < TC_K * r8; i += TC_THREADS) {
            int r = i / r8, c8 = (i % r8) * 8;
            int64_t p = kb + r;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (p <= kmax && c8 < row) { /* positions < 2^31 (checked at begin): 32-bit division */
                int pi = (int)p, pg32 = (int)page;
                const __nv_bfloat16 *src = base + ((int64_t)ptab[pi / pg32] * page + pi % pg32) * rowpad + c8;
                if (c8 + 8 <= row) v = *(const uint4 *)src;
                else {
                    union { uint4 u; __nv_bfloat16 h[8]; } tmp;
                    for (int e = 0; e < 8; e++) tmp.h[e] = c8 + e < row ? src[e] : __float2bfloat16_rn(0.0f);
                    v = tmp.u;
                }
            }
            *(uint4 *)(Ks + r * ld + c8) = v;
        }
        __syncthreads();
        /* S [16 rows of this warp, 32 columns] = Q K^T */
        float sacc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
        const __nv_bfloat16 *qa = Qs + (16 * wr + g) * ld + 2 * t, *qb = qa + 8 * ld;
        for (int k0 = 0; k0 < rk; k0 += 16) {
            uint32_t a0 = ld32(qa + k0), a1 = ld32(qb + k0), a2 = ld32(qa + k0 + 8), a3 = ld32(qb + k0 + 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const __nv_bfloat16 *kr = Ks + (32 * wh + 8 * j + g) * ld + k0 + 2 * t;
                mma16816(sacc[j], a0, a1, a2, a3, ld32(kr), ld32(kr + 8));
            }
        }
        tc_store_scores(Ss, TC_SLD, sacc, wr, wh, g, t, scale);
        __syncthreads();
        tc_softmax_tile(Ss, TC_SLD, Ps, TC_PLD, m_s, l_s, c_s, srow, spart, spos - kb + 1);
        __syncthreads();
        /* O = O * corr + P V */
        const float c_lo = c_s[16 * wr + g], c_hi = c_s[16 * wr + g + 8];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            o[j][0] *= c_lo; o[j][1] *= c_lo; o[j][2] *= c_hi; o[j][3] *= c_hi;
        }
        const __nv_bfloat16 *pa = Ps + (16 * wr + g) * TC_PLD + 2 * t, *pb = pa + 8 * TC_PLD;
#pragma unroll
        for (int k0 = 0; k0 < TC_K; k0 += 16) {
            uint32_t a0 = ld32(pa + k0), a1 = ld32(pb + k0), a2 = ld32(pa + k0 + 8), a3 = ld32(pb + k0 + 8);
            const __nv_bfloat16 *vrow = Ks + (k0 + (lane & 15)) * ld + ocol0;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (j < ntile) {
                    uint32_t b0, b1;
                    ldm_x2_trans(vrow + 8 * j, b0, b1);
                    mma16816(o[j], a0, a1, a2, a3, b0, b1);
                }
            }
        }
    }
    __syncthreads();
    const int r_lo = 16 * wr + g;
    const int64_t qlo = q0 + r_lo, qhi = qlo + 8;
    const float inv_lo = 1.0f / l_s[r_lo], inv_hi = 1.0f / l_s[r_lo + 8];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        if (j >= ntile) continue;
        int col = ocol0 + 8 * j + 2 * t;
        if (qlo < nq) { olat[qlo * kvl + col] = o[j][0] * inv_lo; olat[qlo * kvl + col + 1] = o[j][1] * inv_lo; }
        if (qhi < nq) { olat[qhi * kvl + col] = o[j][2] * inv_hi; olat[qhi * kvl + col + 1] = o[j][3] * inv_hi; }
    }
}

int pdb_cuda_mla_tc_fits(int64_t kvl, int64_t row) {
    int dev = 0, max_smem = 0;
    if (kvl <= 0 || kvl % 16 || kvl > 16 * 32 || row < kvl || row > PDB_CUDA_MAX_ROW) return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return tc_smem((row + 15) / 16 * 16) <= (size_t)max_smem;
}

template <int NT>
static pdb_status launch_tc(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0, int64_t n,
                            int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    int rk = (int)((row + 15) / 16 * 16);
    size_t smem = tc_smem(rk);
    PDB_CU(cudaFuncSetAttribute(k_mla_tc<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned grid = (unsigned)((n * nh + TC_Q - 1) / TC_Q);
    k_mla_tc<NT><<<grid, TC_THREADS, smem, s>>>(qlat, (const __nv_bfloat16 *)pg->base, pg->ptab, pg->page, pg->rowpad,
                                                pos0, n, nh, (int)kvl, (int)row, rk, scale, olat);
    PDB_CU_LAUNCH("attention (tensor cores)");
    return PDB_OK;
}

pdb_status pdb_cuda_attention_tc(cudaStream_t s, const float *qlat, const pdb_cuda_pages *pg, int64_t pos0, int64_t n,
                                 int64_t nh, int64_t kvl, int64_t row, float scale, float *olat) {
    if (n <= 0) return PDB_OK;
    if (pg->dt != PDB_CUDA_DT_BF16 || pg->rowpad % 8 || !pdb_cuda_mla_tc_fits(kvl, row))
        return pdb_err_set(PDB_UNSUPPORTED, "attention (tensor cores): bf16 cache with kv_lora_rank %% 16 == 0 "
                           "(got %lld) and row <= %d (got %lld) required", (long long)kvl, PDB_CUDA_MAX_ROW, (long long)row);
    int nt = (int)(kvl / 16);
    if (nt <= 4) return launch_tc<4>(s, qlat, pg, pos0, n, nh, kvl, row, scale, olat);
    if (nt <= 8) return launch_tc<8>(s, qlat, pg, pos0, n, nh, kvl, row, scale, olat);
    if (nt <= 16) return launch_tc<16>(s, qlat, pg, pos0, n, nh, kvl, row, scale, olat);
    return launch_tc<32>(s, qlat, pg, pos0, n, nh, kvl, row, scale, olat);
}
