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
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int col = 32 * wh + 8 * j + 2 * t, r = 16 * wr + g;
            Ss[r * TC_SLD + col] = sacc[j][0] * scale;
            Ss[r * TC_SLD + col + 1] = sacc[j][1] * scale;
            Ss[(r + 8) * TC_SLD + col] = sacc[j][2] * scale;
            Ss[(r + 8) * TC_SLD + col + 1] = sacc[j][3] * scale;
        }
        __syncthreads();
        /* online softmax of row srow over this tile's 64 columns */
        float sv[16], mloc = -INFINITY;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int col = spart * 16 + c;
            sv[c] = kb + col <= spos ? Ss[srow * TC_SLD + col] : -INFINITY;
            mloc = fmaxf(mloc, sv[c]);
        }
        mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 1));
        mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 2));
        const float mold = m_s[srow], mnew = fmaxf(mold, mloc);
        float psum = 0.0f;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            float p = sv[c] == -INFINITY ? 0.0f : expf(sv[c] - mnew);
            __nv_bfloat16 pb = __float2bfloat16_rn(p);
            Ps[srow * TC_PLD + spart * 16 + c] = pb;
            psum += __bfloat162float(pb);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        if (spart == 0) {
            float corr = mold == -INFINITY ? 0.0f : expf(mold - mnew);
            m_s[srow] = mnew;
            l_s[srow] = l_s[srow] * corr + psum;
            c_s[srow] = corr;
        }
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

/* ============================ MHA form (prefill: fewer FLOPs) ============================ */
/* The same attention computed the way the model is written rather than absorbed: per head,
 * K = [k_nope_h | k_rope] and V = v_h expanded from the cached latent rows by kv_b (a cuBLAS
 * product, in M-invariant tiles, recomputed for every key at each chunk), Q = [q_nope_h |
 * roped q_rope_h]. Scores cost qk_nope + qk_rope and values v_head_dim per key and head instead
 * of kv_lora_rank + qk_rope and kv_lora_rank (V2-Lite: 320 vs 1088 per key and head), and the
 * output is attn [t, h, v] directly (no W_UV product after). Tiles: a block is one head x 64
 * query tokens, 4 warps of 16 tokens; keys in tiles of 64 from position 0; scores stay in
 * registers (each thread holds rows g and g + 8 of its warp's 16, columns 8 j + 2 t, + 1), the
 * softmax reduces over the 4 threads of a row in a fixed shuffle order, and P goes from the
 * score registers straight into the P V product's A fragments. Same invariants as above: a
 * token's result depends on its own row and keys 0..its position only. */

enum { MH_K = 64 };

/* Qb [nh, qstride, dqp] bf16: q_nope of c->q [n, nh, qk] then the roped q_rope of qlat [n, nh, row] (at kvl), zero pad.
 * A block per token, blockIdx.y the head, threads over d (no 64-bit division per element). */
__global__ void k_mha_pack_q(const float *q, const float *qlat, int64_t nh, int nope, int rope, int qk, int kvl, int row,
                             int dqp, int64_t qstride, __nv_bfloat16 *Qb) {
    const int64_t t = blockIdx.x, h = blockIdx.y, th = t * nh + h;
    const float *qn = q + th * qk, *qr = qlat + th * row + kvl;
    __nv_bfloat16 *dst = Qb + (h * qstride + t) * dqp;
    for (int d = threadIdx.x; d < dqp; d += blockDim.x)
        dst[d] = __float2bfloat16_rn(d < nope ? qn[d] : d < nope + rope ? qr[d - nope] : 0.0f);
}

/* Kb [nh, kstride, dqp], Vb [nh, kstride, dv] for keys s0..s0+m-1 from kvx [m, nh*(nope+dv)] f32 and the cache rows'
 * rope part. A block per key, blockIdx.y the head. */
__global__ void k_mha_pack_kv(const float *kvx, const __nv_bfloat16 *base, int64_t rowpad, int64_t s0, int64_t nh,
                              int nope, int dv, int kvl, int rope, int dqp, int64_t kstride, __nv_bfloat16 *Kb,
                              __nv_bfloat16 *Vb) {
    const int64_t r = blockIdx.x, h = blockIdx.y, p = s0 + r;
    const float *src = kvx + r * nh * (nope + dv) + h * (nope + dv);
    const __nv_bfloat16 *kr = base + p * rowpad + kvl;
    __nv_bfloat16 *kd = Kb + (h * kstride + p) * dqp, *vd = Vb + (h * kstride + p) * dv;
    for (int d = threadIdx.x; d < dqp; d += blockDim.x)
        kd[d] = d < nope ? __float2bfloat16_rn(src[d]) : d < nope + rope ? kr[d - nope] : __float2bfloat16_rn(0.0f);
    for (int d = threadIdx.x; d < dv; d += blockDim.x) vd[d] = __float2bfloat16_rn(src[nope + d]);
}

static __device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    __nv_bfloat162 v = __halves2bfloat162(lo, hi);
    return *(uint32_t *)&v;
}

/* A block is WARPS warps of 16 query tokens (MH_Q = 16 WARPS) of one head. Key/value tiles are
 * pipelined STAGES deep (cp.async groups): with 2, the copies of tile i + 1 are in flight while
 * tile i is multiplied; with 3, tiles i + 1 and i + 2, the third buffer being the query tile's
 * shared memory, free once every warp holds its query fragments in registers. DQPM is dqp rounded
 * up to a multiple of 64 (a compile-time bound: the k loop is unrolled and steps past dqp are
 * skipped, so the products are the same as a loop to dqp). A warp skips a key tile that lies
 * wholly past its last query position: such a tile is fully masked and would leave the warp's
 * state bit-identical, so neither WARPS, STAGES nor the skip changes any output bit. */
template <int DQPM, int NTV, int WARPS, int STAGES>
__global__ void __launch_bounds__(32 * WARPS)
    k_mha_tc(const __nv_bfloat16 *Qb, const __nv_bfloat16 *Kb, const __nv_bfloat16 *Vb, int64_t qstride,
             int64_t kstride, int64_t pos0, int64_t n, int dqp, int dv, float scale, float *out, int64_t nh) {
    constexpr int MH_Q = 16 * WARPS, MH_THREADS = 32 * WARPS;
    extern __shared__ uint4 smem_mh[];
    const int ldq = dqp + 8, ldv = dv + 8, kvsz = MH_K * (ldq + ldv);
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_mh, *KV0 = Qs + MH_Q * ldq;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, ntv = dv / 8;
    /* the longest query tiles (most keys) first, so the causal tail of the grid is the short ones */
    const int64_t h = blockIdx.y, t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * MH_Q;
    const float scale2 = scale * 1.4426950408889634f; /* softmax in base 2: exp(x s) = 2^(x s log2 e) */
    const int q8 = dqp / 8, v8 = dv / 8;
    const __nv_bfloat16 *Kh = Kb + h * kstride * dqp, *Vh = Vb + h * kstride * dv;
    const int64_t tlast = t0 + MH_Q - 1 < n ? t0 + MH_Q - 1 : n - 1, kmax = pos0 + tlast;
    /* buffer b of the pipeline: 0 .. 1 after the query tile, 2 the query tile itself */
    auto kv_buf = [&](int b) { return b < 2 ? KV0 + b * kvsz : Qs; };
    for (int i = tid; i < MH_Q * q8; i += MH_THREADS) {
        int r = i / q8, c8 = (i % q8) * 8;
        bool ok = t0 + r < n;
        cp16(Qs + r * ldq + c8, ok ? Qb + (h * qstride + t0 + r) * dqp + c8 : Qb, ok);
    }
    /* tile at kb into buffer b: K rows then V rows, keys past kmax zero-filled. A thread's pieces
     * (row r, 16-byte column c of the q8 + v8 per key) are the same in every tile: the first from
     * its index, the next ones by a fixed step of MH_THREADS pieces (no division in the loop). */
    const int w8 = q8 + v8, r_first = tid / w8, c_first = tid % w8, r_step = MH_THREADS / w8, c_step = MH_THREADS % w8;
    auto load_tile = [&](int64_t kb, int b) {
        __nv_bfloat16 *Ks = kv_buf(b), *Vs = Ks + MH_K * ldq;
        for (int r = r_first, c = c_first; r < MH_K;) {
            int64_t p = kb + r;
            bool ok = p <= kmax;
            if (c < q8) cp16(Ks + r * ldq + c * 8, ok ? Kh + p * dqp + c * 8 : Kh, ok);
            else cp16(Vs + r * ldv + (c - q8) * 8, ok ? Vh + p * dv + (c - q8) * 8 : Vh, ok);
            r += r_step;
            c += c_step;
            if (c >= w8) { c -= w8; r++; }
        }
    };
    cp_commit(); /* the query tile is its own group: waited for alone, before the first key tile */
    load_tile(0, 0);
    cp_commit();
    if (STAGES == 3) {
        if (MH_K <= kmax) load_tile(MH_K, 1);
        cp_commit(); /* possibly empty: the group count per step stays fixed */
        cp_wait<2>();
    } else {
        cp_wait<1>();
    }
    __syncthreads();
    const int rlo = 16 * warp + g;
    /* the warp's query fragments (rows rlo, rlo + 8; k pairs 2t, 2t + 8 of each 16), kept in registers */
    uint32_t qf[DQPM / 16][4];
    {
        const __nv_bfloat16 *qa = Qs + rlo * ldq + 2 * t, *qb = qa + 8 * ldq;
#pragma unroll
        for (int ks = 0; ks < DQPM / 16; ks++) {
            if (16 * ks < dqp) {
                qf[ks][0] = ld32(qa + 16 * ks); qf[ks][1] = ld32(qb + 16 * ks);
                qf[ks][2] = ld32(qa + 16 * ks + 8); qf[ks][3] = ld32(qb + 16 * ks + 8);
            } else {
                qf[ks][0] = qf[ks][1] = qf[ks][2] = qf[ks][3] = 0u;
            }
        }
    }
    const int64_t qp_lo = t0 + rlo < n ? pos0 + t0 + rlo : -1, qp_hi = t0 + rlo + 8 < n ? pos0 + t0 + rlo + 8 : -1;
    /* the warp's last query position: key tiles past it are skipped */
    const int64_t wlast = t0 + 16 * warp >= n ? -1 : pos0 + (t0 + 16 * warp + 15 < n ? t0 + 16 * warp + 15 : n - 1);
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f, o[NTV][4];
#pragma unroll
    for (int j = 0; j < NTV; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    if (STAGES == 3) __syncthreads(); /* every warp holds its query fragments: the query tile is buffer 2 now */
    int buf = 0;
    for (int64_t kb = 0; kb <= kmax; kb += MH_K) {
        if (kb > 0) __syncthreads(); /* every thread is done with the buffer the next copies refill */
        if (STAGES == 3) {
            if (kb + 2 * MH_K <= kmax) load_tile(kb + 2 * MH_K, buf == 0 ? 2 : buf - 1);
            cp_commit();
            cp_wait<2>();
        } else if (kb + MH_K <= kmax) {
            load_tile(kb + MH_K, buf ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *Ks = kv_buf(buf), *Vs = Ks + MH_K * ldq;
        buf = STAGES == 3 ? (buf == 2 ? 0 : buf + 1) : buf ^ 1;
        if (kb > wlast) continue; /* wholly masked for this warp (warp-uniform) */
        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        /* K fragments by ldmatrix, two key tiles of 8 per load: matrices (keys 0-7, d 0-7), (keys 0-7,
         * d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15) */
        const __nv_bfloat16 *kl = Ks + ((lane & 7) + ((lane >> 4) << 3)) * ldq + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int ks = 0; ks < DQPM / 16; ks++) {
            if (16 * ks < dqp) {
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    uint32_t r[4];
                    ldm_x4(kl + 16 * jj * ldq + 16 * ks, r);
                    mma16816(s[2 * jj], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], r[0], r[1]);
                    mma16816(s[2 * jj + 1], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], r[2], r[3]);
                }
            }
        }
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
        /* the rows' last visible key relative to the tile, in 32 bits (-1: none, 64: all) */
        const int rl_lo = qp_lo - kb < -1 ? -1 : qp_lo - kb > MH_K ? MH_K : (int)(qp_lo - kb);
        const int rl_hi = qp_hi - kb < -1 ? -1 : qp_hi - kb > MH_K ? MH_K : (int)(qp_hi - kb);
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int p = 8 * j + 2 * t + (e & 1);
                s[j][e] = p <= (e < 2 ? rl_lo : rl_hi) ? s[j][e] * scale2 : -INFINITY;
            }
            mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
        }
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
        const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
        const float c_lo = m_lo == -INFINITY ? 0.0f : exp2f(m_lo - mn_lo), c_hi = m_hi == -INFINITY ? 0.0f : exp2f(m_hi - mn_hi);
        uint32_t pa[8][2];
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            __nv_bfloat16 b[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float mn = e < 2 ? mn_lo : mn_hi;
                b[e] = __float2bfloat16_rn(s[j][e] == -INFINITY ? 0.0f : exp2f(s[j][e] - mn));
            }
            sum_lo += __bfloat162float(b[0]) + __bfloat162float(b[1]);
            sum_hi += __bfloat162float(b[2]) + __bfloat162float(b[3]);
            pa[j][0] = pack_bf16(b[0], b[1]);
            pa[j][1] = pack_bf16(b[2], b[3]);
        }
        sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, 1);
        sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, 2);
        sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, 1);
        sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, 2);
        l_lo = l_lo * c_lo + sum_lo;
        l_hi = l_hi * c_hi + sum_hi;
        m_lo = mn_lo;
        m_hi = mn_hi;
#pragma unroll
        for (int j = 0; j < NTV; j++) {
            o[j][0] *= c_lo; o[j][1] *= c_lo; o[j][2] *= c_hi; o[j][3] *= c_hi;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const __nv_bfloat16 *vrow = Vs + (16 * kk + (lane & 15)) * ldv;
#pragma unroll
            for (int j = 0; j < NTV; j++) {
                if (j < ntv) {
                    uint32_t b0, b1;
                    ldm_x2_trans(vrow + 8 * j, b0, b1);
                    mma16816(o[j], pa[2 * kk][0], pa[2 * kk][1], pa[2 * kk + 1][0], pa[2 * kk + 1][1], b0, b1);
                }
            }
        }
    }
    const float i_lo = 1.0f / l_lo, i_hi = 1.0f / l_hi;
#pragma unroll
    for (int j = 0; j < NTV; j++) {
        if (j >= ntv) continue;
        int col = 8 * j + 2 * t;
        if (qp_lo >= 0) {
            float *d = out + ((t0 + rlo) * nh + h) * dv + col;
            d[0] = o[j][0] * i_lo; d[1] = o[j][1] * i_lo;
        }
        if (qp_hi >= 0) {
            float *d = out + ((t0 + rlo + 8) * nh + h) * dv + col;
            d[0] = o[j][2] * i_hi; d[1] = o[j][3] * i_hi;
        }
    }
}

int pdb_cuda_mha_tc_fits(int64_t nope, int64_t rope, int64_t dv) {
    int64_t dqp = (nope + rope + 15) / 16 * 16;
    return nope > 0 && dv > 0 && dv % 16 == 0 && dv <= 256 && dqp <= 256;
}

pdb_status pdb_cuda_mha_pack_q(cudaStream_t s, const float *q, const float *qlat, int64_t n, int64_t nh, int64_t nope,
                               int64_t rope, int64_t kvl, int64_t row, int64_t qstride, void *Qb) {
    if (n <= 0) return PDB_OK;
    if (n > INT32_MAX || nh > 65535) return pdb_err_set(PDB_UNSUPPORTED, "mha pack q: %lld tokens x %lld heads", (long long)n, (long long)nh);
    int dqp = (int)((nope + rope + 15) / 16 * 16);
    k_mha_pack_q<<<dim3((unsigned)n, (unsigned)nh), 64, 0, s>>>(q, qlat, nh, (int)nope, (int)rope, (int)(nope + rope),
                                                                (int)kvl, (int)row, dqp, qstride, (__nv_bfloat16 *)Qb);
    PDB_CU_LAUNCH("mha pack q");
    return PDB_OK;
}

pdb_status pdb_cuda_mha_pack_kv(cudaStream_t s, const float *kvx, const pdb_cuda_pages *pg, int64_t s0, int64_t m,
                                int64_t nh, int64_t nope, int64_t dv, int64_t kvl, int64_t rope, int64_t kstride,
                                void *Kb, void *Vb) {
    if (m <= 0) return PDB_OK;
    if (pg->dt != PDB_CUDA_DT_BF16) return pdb_err_set(PDB_UNSUPPORTED, "mha pack: bf16 cache required");
    if (m > INT32_MAX || nh > 65535) return pdb_err_set(PDB_UNSUPPORTED, "mha pack kv: %lld keys x %lld heads", (long long)m, (long long)nh);
    int dqp = (int)((nope + rope + 15) / 16 * 16);
    /* one sequence: the page table is the identity, so position p's row is base + p * rowpad */
    k_mha_pack_kv<<<dim3((unsigned)m, (unsigned)nh), 64, 0, s>>>(kvx, (const __nv_bfloat16 *)pg->base, pg->rowpad, s0, nh,
                                                                 (int)nope, (int)dv, (int)kvl, (int)rope, dqp, kstride,
                                                                 (__nv_bfloat16 *)Kb, (__nv_bfloat16 *)Vb);
    PDB_CU_LAUNCH("mha pack kv");
    return PDB_OK;
}

template <int DQPM, int NTV, int WARPS, int STAGES>
static pdb_status launch_mha(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                             int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int dqp, int dv, float scale,
                             float *out) {
    const size_t qsz = (size_t)16 * WARPS * (dqp + 8), kvsz = (size_t)MH_K * (dqp + 8 + dv + 8);
    if (STAGES == 3 && qsz < kvsz) /* the query tile cannot hold a key/value tile: two stages */
        return launch_mha<DQPM, NTV, WARPS, 2>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, dv, scale, out);
    size_t smem = sizeof(__nv_bfloat16) * (qsz + 2 * kvsz);
    PDB_CU(cudaFuncSetAttribute(k_mha_tc<DQPM, NTV, WARPS, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((n + 16 * WARPS - 1) / (16 * WARPS)), (unsigned)nh);
    k_mha_tc<DQPM, NTV, WARPS, STAGES><<<grid, 32 * WARPS, smem, s>>>(
        (const __nv_bfloat16 *)Qb, (const __nv_bfloat16 *)Kb, (const __nv_bfloat16 *)Vb, qstride, kstride, pos0, n, dqp,
        dv, scale, out, nh);
    PDB_CU_LAUNCH("attention (MHA form, tensor cores)");
    return PDB_OK;
}

/* dqp up to the next multiple of 64, v_head_dim / 8 up to the next power of two from 4 */
template <int DQPM>
static pdb_status launch_mha_dv(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int dqp, int dv, float scale,
                                float *out) {
    enum { W = PDB_CUDA_MHA_WARPS, S = PDB_CUDA_MHA_STAGES };
    int nt = dv / 8;
    if (nt <= 4) return launch_mha<DQPM, 4, W, S>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, dv, scale, out);
    if (nt <= 8) return launch_mha<DQPM, 8, W, S>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, dv, scale, out);
    if (nt <= 16) return launch_mha<DQPM, 16, W, S>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, dv, scale, out);
    return launch_mha<DQPM, 32, W, S>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, dv, scale, out);
}

pdb_status pdb_cuda_attention_mha_tiles(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb,
                                        int64_t qstride, int64_t kstride, int64_t pos0, int64_t n, int64_t nh,
                                        int64_t nope, int64_t rope, int64_t dv, float scale, float *out, int warps,
                                        int stages) {
    int dqp = (int)((nope + rope + 15) / 16 * 16);
    if (n <= 0) return PDB_OK;
    if (dqp == 192 && dv == 128) {
        if (warps == 4 && stages == 2)
            return launch_mha<192, 16, 4, 2>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
        if (warps == 8 && stages == 2)
            return launch_mha<192, 16, 8, 2>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
        if (warps == 8 && stages == 3)
            return launch_mha<192, 16, 8, 3>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
    }
    return pdb_err_set(PDB_UNSUPPORTED, "attention (MHA form): tiles of %d warps x %d stages for dqp %d, dv %lld not built",
                       warps, stages, dqp, (long long)dv);
}

pdb_status pdb_cuda_attention_mha(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                  int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int64_t nope, int64_t rope,
                                  int64_t dv, float scale, float *out) {
    if (n <= 0) return PDB_OK;
    if (!pdb_cuda_mha_tc_fits(nope, rope, dv))
        return pdb_err_set(PDB_UNSUPPORTED, "attention (MHA form): v_head_dim %lld must be a multiple of 16 <= 256",
                           (long long)dv);
    int dqp = (int)((nope + rope + 15) / 16 * 16);
    if (dqp <= 64) return launch_mha_dv<64>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
    if (dqp <= 128) return launch_mha_dv<128>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
    if (dqp <= 192) return launch_mha_dv<192>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
    return launch_mha_dv<256>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, dqp, (int)dv, scale, out);
}
