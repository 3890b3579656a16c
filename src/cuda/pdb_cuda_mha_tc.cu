/* pdb_cuda_mha_tc: the bf16 engine's causal attention in the MHA form on the tensor cores
 * (mma.sync m16n8k16, bf16 operands, f32 accumulation), flash-style: scores never leave registers.
 * The attention is computed the way the model is written rather than absorbed: per head, K =
 * [k_nope_h | k_rope] and V = v_h expanded from the cached latent rows by kv_b (a cuBLAS product in
 * M-invariant tiles, recomputed for every key at each chunk, pdb_cuda_prefill.cu), Q = [q_nope_h |
 * roped q_rope_h]. Scores cost qk_nope + qk_rope and values v_head_dim per key and head instead of
 * kv_lora_rank + qk_rope and kv_lora_rank (V2-Lite: 320 vs 1088), and the output is attn [t, h, v]
 * directly (no W_UV product after).
 * Layout: Qb [nh, qstride, DQ], Kb [nh, kstride, DQ], Vb [nh, kstride, DV], bf16, DQ = qk_nope +
 * qk_rope rounded up to 16 (zero padded), DV = v_head_dim; both are compile-time constants of the
 * kernel (the shapes below), so every shared-memory offset is an immediate.
 * Tiles: a block is WARPS warps of 16 query tokens of one head; keys in tiles of 64 from position 0,
 * double-buffered with cp.async; each thread holds score rows g and g + 8 of its warp (columns 8 j +
 * 2 t, + 1), the softmax in base 2 (ex2.approx) with the scale folded into one FFMA, P rounded to
 * bf16 and passed from the score registers straight into the P V product's A fragments; K's
 * fragments by ldmatrix.x4 (two key groups of 8 per load), V's by ldmatrix.x4.trans (two column
 * groups of 8). A warp skips key tiles wholly past its last query position and masks only the
 * tiles that cross its first one.
 * Invariants: a query row's result depends only on that row and keys 0..its position: key tiles
 * start at absolute position 0 in steps of 64, every reduction has a fixed order (the mma's k loop,
 * a row's running max and sum: per thread over its columns, then over the row's 4 threads by
 * shuffles at the end), and a tile wholly past a row's position leaves the row's state
 * bit-identical, so neither the chunking, the block a row lands in, nor WARPS changes an output
 * bit (tested). The denominator sums the bf16-rounded P that was multiplied. Query rows past n and
 * key rows past the block's last position are zero-filled, never read from global memory. */
#include <cuda_bf16.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"
#include "pdb_cuda_wgmma.h"

enum { MH_K = 64 }; /* k_mha_tc's key tile */

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

/* A thread's two output rows (token rows r and r + 8 of the pass, head h; rows >= n not written): each
 * row's sum l over the quad's 4 threads (two xor shuffles), then O's columns 8 j + 2 t, + 1 (o as the
 * m16n8 accumulators of DV / 8 n8 tiles: o[4 j + e]) times 1 / l into out [n, nh, DV]. */
template <int DV>
static __device__ __forceinline__ void mha_store_rows(const float *o, float l_lo, float l_hi, float *out, int64_t r, int64_t n,
                                                      int64_t nh, int64_t h, int t) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    const float i_lo = 1.0f / l_lo, i_hi = 1.0f / l_hi;
    const bool w_lo = r < n, w_hi = r + 8 < n;
#pragma unroll
    for (int j = 0; j < DV / 8; j++) {
        const int col = 8 * j + 2 * t;
        if (w_lo) *(float2 *)(out + (r * nh + h) * DV + col) = make_float2(o[4 * j] * i_lo, o[4 * j + 1] * i_lo);
        if (w_hi) *(float2 *)(out + ((r + 8) * nh + h) * DV + col) = make_float2(o[4 * j + 2] * i_hi, o[4 * j + 3] * i_hi);
    }
}

template <int DQ, int DV, int WARPS>
__global__ void __launch_bounds__(32 * WARPS)
    k_mha_tc(const __nv_bfloat16 *Qb, const __nv_bfloat16 *Kb, const __nv_bfloat16 *Vb, int64_t qstride,
             int64_t kstride, int64_t pos0, int64_t n, float scale2, float *out, int64_t nh) {
    constexpr int QROWS = 16 * WARPS, THREADS = 32 * WARPS, LDQ = DQ + 8, LDV = DV + 8;
    constexpr int KVSZ = MH_K * (LDQ + LDV), KS = DQ / 16, NTV = DV / 8;
    constexpr int QC = DQ / 8, VC = DV / 8, KCH = MH_K * QC, VCH = MH_K * VC; /* 16-byte pieces */
    extern __shared__ uint4 smem_mh[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smem_mh, *KV0 = Qs + QROWS * LDQ;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    /* the longest query tiles (most keys) first, so the causal tail of the grid is the short ones */
    const int64_t h = blockIdx.y, t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * QROWS;
    const __nv_bfloat16 *Kh = Kb + h * kstride * DQ, *Vh = Vb + h * kstride * DV;
    const int64_t tlast = t0 + QROWS - 1 < n ? t0 + QROWS - 1 : n - 1, kmax = pos0 + tlast;
    {
        const __nv_bfloat16 *qg = Qb + (h * qstride + t0) * DQ;
#pragma unroll
        for (int k = 0; k < (QROWS * QC + THREADS - 1) / THREADS; k++) {
            const int i = tid + k * THREADS, r = i / QC;
            if ((QROWS * QC) % THREADS == 0 || i < QROWS * QC) {
                const bool ok = t0 + r < n;
                cp16(Qs + i * 8 + r * 8, ok ? qg + i * 8 : Qb, ok);
            }
        }
    }
    /* key tile kb into buffer b: piece i of K is row i / QC, at i * 8 in global memory (rows are
     * contiguous) and i * 8 + row * 8 in shared memory (rows padded by 8); keys past kmax are zero */
    auto load_tile = [&](int64_t kb, int b) {
        __nv_bfloat16 *Ks = KV0 + b * KVSZ, *Vs = Ks + MH_K * LDQ;
        const __nv_bfloat16 *kg = Kh + kb * DQ, *vg = Vh + kb * DV;
        const bool full = kb + MH_K - 1 <= kmax;
#pragma unroll
        for (int k = 0; k < (KCH + THREADS - 1) / THREADS; k++) {
            const int i = tid + k * THREADS, r = i / QC;
            if (KCH % THREADS == 0 || i < KCH) {
                const bool ok = full || kb + r <= kmax;
                cp16(Ks + i * 8 + r * 8, ok ? kg + i * 8 : Kh, ok);
            }
        }
#pragma unroll
        for (int k = 0; k < (VCH + THREADS - 1) / THREADS; k++) {
            const int i = tid + k * THREADS, r = i / VC;
            if (VCH % THREADS == 0 || i < VCH) {
                const bool ok = full || kb + r <= kmax;
                cp16(Vs + i * 8 + r * 8, ok ? vg + i * 8 : Vh, ok);
            }
        }
    };
    cp_commit(); /* the query tile is its own group: waited for alone, before the first key tile */
    load_tile(0, 0);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    const int rlo = 16 * warp + g;
    /* the warp's query fragments (rows rlo, rlo + 8; k pairs 2t, 2t + 8 of each 16), kept in registers */
    uint32_t qf[KS][4];
    {
        const __nv_bfloat16 *qa = Qs + rlo * LDQ + 2 * t, *qb = qa + 8 * LDQ;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            qf[ks][0] = ld32(qa + 16 * ks); qf[ks][1] = ld32(qb + 16 * ks);
            qf[ks][2] = ld32(qa + 16 * ks + 8); qf[ks][3] = ld32(qb + 16 * ks + 8);
        }
    }
    /* positions of the thread's two rows and the warp's first and last row (rows past n compute on
     * zero-filled queries and are never written, so they need no mask) */
    const int64_t qp_lo = pos0 + t0 + rlo, qp_hi = qp_lo + 8, wfirst = pos0 + t0 + 16 * warp;
    const int64_t wlast = t0 + 16 * warp >= n ? -1 : pos0 + (t0 + 16 * warp + 15 < n ? t0 + 16 * warp + 15 : n - 1);
    /* per-lane ldmatrix row addresses: K (keys lane & 7 + 8 (lane >> 4), d 8 ((lane >> 3) & 1)), V
     * (keys lane & 15, columns 8 (lane >> 4)) */
    const int koff = ((lane & 7) + ((lane >> 4) << 3)) * LDQ + ((lane >> 3) & 1) * 8;
    const int voff = MH_K * LDQ + (lane & 15) * LDV + (lane >> 4) * 8;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f, o[NTV][4];
#pragma unroll
    for (int j = 0; j < NTV; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    int buf = 0;
    for (int64_t kb = 0; kb <= kmax; kb += MH_K) {
        if (kb > 0) __syncthreads(); /* every thread is done with the buffer the next copies refill */
        if (kb + MH_K <= kmax) {
            load_tile(kb + MH_K, buf ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *KVs = KV0 + buf * KVSZ;
        buf ^= 1;
        if (kb > wlast) continue; /* wholly masked for this warp (warp-uniform) */
        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                uint32_t r[4];
                ldm_x4(KVs + koff + 16 * jj * LDQ + 16 * ks, r);
                mma16816(s[2 * jj], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], r[0], r[1]);
                mma16816(s[2 * jj + 1], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], r[2], r[3]);
            }
        }
        if (kb + MH_K - 1 > wfirst) tile_causal_mask(&s[0][0], kb, qp_lo, qp_hi, t); /* the tile crosses the warp's diagonal */
        /* the running max in raw score units; p = 2^(s scale2 - m scale2), 2^-inf = 0 for masked keys
         * and for the first tile's correction */
        uint32_t pa[8][2];
        float c_lo, c_hi;
        tile_softmax(&s[0][0], scale2, &m_lo, &m_hi, &l_lo, &l_hi, &c_lo, &c_hi, &pa[0][0]);
#pragma unroll
        for (int j = 0; j < NTV; j++) {
            o[j][0] *= c_lo; o[j][1] *= c_lo; o[j][2] *= c_hi; o[j][3] *= c_hi;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
#pragma unroll
            for (int j = 0; j < NTV; j += 2) {
                uint32_t r[4];
                ldm_x4_trans(KVs + voff + 16 * kk * LDV + 8 * j, r);
                mma16816(o[j], pa[2 * kk][0], pa[2 * kk][1], pa[2 * kk + 1][0], pa[2 * kk + 1][1], r[0], r[1]);
                mma16816(o[j + 1], pa[2 * kk][0], pa[2 * kk][1], pa[2 * kk + 1][0], pa[2 * kk + 1][1], r[2], r[3]);
            }
        }
    }
    mha_store_rows<DV>(&o[0][0], l_lo, l_hi, out, t0 + rlo, n, nh, h, t);
}

/* ------------------------------------------------------------------ warpgroup MMA (sm_90a), V2's shape
 * k_mha_wg<KT>: k_mha_tc's contract and math on Hopper's wgmma for DQ 192, DV 128, keys in tiles of KT
 * (64 or 128): a block is two warpgroups, each 64 query rows of one head (128 a block); Q and the key
 * tiles (KT keys from position 0, K and V double-buffered by cp.async) sit in shared memory in the
 * 128B-swizzled layout (pdb_cuda_wgmma.h: Q 3 regions of 128 rows, K 3 and V 2 of KT rows). Per tile a
 * warpgroup computes S = Q K^T over 12 k-steps (m64nKTk16, both operands in shared memory) into one
 * accumulator, in k_mha_tc's layout (a thread's rows g, g + 8 of its warp's 16, columns 8 j + 2 t, + 1),
 * then k_mha_tc's mask, running max, base-2 softmax and bf16 P over the KT keys, and O += P V over KT / 16
 * k-steps (m64n128k16, P from registers as the A fragments, V N-major). O's rescale is skipped where both
 * of a thread's corrections are exactly 1 (the same bits). Without PP a warpgroup skips the tiles wholly
 * past its last row (the block's barriers still run). Invariants as k_mha_tc's: key tiles start at position 0 in
 * steps of KT and every sum has a fixed order (each product's k-steps in order, the row statistics per
 * thread then over the quad at the end), so chunking and the block a row lands in change no bit; KT 64
 * is k_mha_tc's arithmetic (the same bits, tested), KT 128 moves the running max once per 128 keys (other
 * roundings). PP (ping-pong): the warpgroups take turns issuing their products on named barriers (0's S,
 * 1's S, 0's P V, 1's P V), so one warpgroup's softmax runs while the other's product is on the tensor
 * cores instead of both at once; the same operations on every value (the same bits as PP off). */
enum { MW_Q = 128, MW_THREADS = 256, MW_DQ = 192, MW_DV = 128, MW_QREG = MW_Q * 128 };
template <int KT> struct mw_shape {
    static constexpr int KREG = KT * 128, KTILE = 3 * KREG, STAGE = KTILE + 2 * KREG;
};

template <int KT> static size_t mha_wg_smem(void) {
    return 1024 /* alignment slack */ + 3 * (size_t)MW_QREG + 2 * (size_t)mw_shape<KT>::STAGE;
}

#if PDB_WGMMA_DEVICE
/* Rows 0 .. R-1 of src (C bf16 each, contiguous; rows >= ok zero-filled, dummy read instead) into the
 * swizzled regions at dst (R rows each): 16-byte piece c of row r at region c / 8, r * 128 +
 * ((c % 8) ^ (r % 8)) * 16. A thread copies piece tid % 8 of each region for rows tid / 8 + 32 i, so its
 * swizzle is one constant and every address is its first plus an immediate. */
template <int R, int C>
static __device__ __forceinline__ void mw_load(uint8_t *dst, const __nv_bfloat16 *src, int64_t ok, const __nv_bfloat16 *dummy) {
    static_assert(C % 64 == 0 && R % (MW_THREADS / 8) == 0, "whole 64-column regions, whole passes of the block's threads");
    const int c = threadIdx.x & 7, r0 = threadIdx.x >> 3;
    uint8_t *d0 = dst + r0 * 128 + ((c ^ (r0 & 7)) << 4);
    const __nv_bfloat16 *s0 = src + (int64_t)r0 * C + c * 8;
#pragma unroll
    for (int i = 0; i < R / (MW_THREADS / 8); i++) {
        const int r = r0 + i * (MW_THREADS / 8);
        const bool v = r < ok;
#pragma unroll
        for (int q = 0; q < C / 64; q++)
            cp16(d0 + q * R * 128 + i * (MW_THREADS / 8) * 128, v ? s0 + (int64_t)i * (MW_THREADS / 8) * C + q * 64 : dummy, v);
    }
}

/* S (+)= one k-step of Q K^T for KT keys */
template <int KT> static __device__ __forceinline__ void mw_scores(float *s, uint64_t dq, uint64_t dk);
template <> __device__ __forceinline__ void mw_scores<64>(float *s, uint64_t dq, uint64_t dk) { wgmma_64x64_ss(s, dq, dk, 1); }
template <> __device__ __forceinline__ void mw_scores<128>(float *s, uint64_t dq, uint64_t dk) { wgmma_64x128_ss(s, dq, dk, 1); }

/* Named barriers 1 and 2 of the block's 256 threads (MW_THREADS; 0 is __syncthreads'): one warpgroup arrives, the
 * other waits. */
template <int ID> static __device__ __forceinline__ void mw_bar_sync() { asm volatile("bar.sync %0, 256;\n" ::"n"(ID) : "memory"); }
template <int ID> static __device__ __forceinline__ void mw_bar_arrive() { asm volatile("bar.arrive %0, 256;\n" ::"n"(ID) : "memory"); }
#endif

template <int KT, bool PP>
__global__ void __launch_bounds__(MW_THREADS, 1)
    k_mha_wg(const __nv_bfloat16 *Qb, const __nv_bfloat16 *Kb, const __nv_bfloat16 *Vb, int64_t qstride, int64_t kstride,
             int64_t pos0, int64_t n, float scale2, float *out, int64_t nh) {
#if PDB_WGMMA_DEVICE
    using S = mw_shape<KT>;
    constexpr int NJ = KT / 8; /* n8 column tiles of S */
    extern __shared__ uint8_t smem_mw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_mw);
    uint8_t *Qs = smem_mw + ((1024 - (raw & 1023)) & 1023), *KV = Qs + 3 * MW_QREG; /* 1024-byte aligned */
    const uint32_t qaddr = (uint32_t)__cvta_generic_to_shared(Qs), kvaddr = qaddr + 3 * MW_QREG;
    const int tid = threadIdx.x, wg = tid >> 7, wt = tid & 127, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int rlo = 64 * wg + 16 * (wt >> 5) + g; /* this thread's rows in the block: rlo and rlo + 8 */
    /* the longest query tiles (most keys) first, so the causal tail of the grid is the short ones */
    const int64_t h = blockIdx.y, t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * MW_Q;
    const __nv_bfloat16 *Kh = Kb + h * kstride * MW_DQ, *Vh = Vb + h * kstride * MW_DV;
    const int64_t tlast = t0 + MW_Q - 1 < n ? t0 + MW_Q - 1 : n - 1, kmax = pos0 + tlast;
    mw_load<MW_Q, MW_DQ>(Qs, Qb + (h * qstride + t0) * MW_DQ, n - t0, Qb);
    auto load_tile = [&](int64_t kb, int b) { /* keys past kmax zero-filled */
        uint8_t *Ks = KV + b * S::STAGE;
        mw_load<KT, MW_DQ>(Ks, Kh + kb * MW_DQ, kmax - kb + 1, Kh);
        mw_load<KT, MW_DV>(Ks + S::KTILE, Vh + kb * MW_DV, kmax - kb + 1, Vh);
    };
    load_tile(0, 0);
    cp_commit();
    const int64_t qp_lo = pos0 + t0 + rlo, qp_hi = qp_lo + 8, wfirst = pos0 + t0 + 64 * wg;
    const int64_t wlast = t0 + 64 * wg >= n ? -1 : pos0 + (t0 + 64 * wg + 63 < n ? t0 + 64 * wg + 63 : n - 1);
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f, o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    int buf = 0;
    for (int64_t kb = 0; kb <= kmax; kb += KT, buf ^= 1) {
        cp_wait<0>();
        fence_async_shared();
        __syncthreads(); /* tile kb (and Q) landed; everyone is done with the other buffer */
        if (kb + KT <= kmax) load_tile(kb + KT, buf ^ 1);
        cp_commit();
        /* a tile wholly past the warpgroup's last row is skipped (uniform in it) except under PP, where both
         * warpgroups run every tile's barriers and products: such a tile's scores are all masked, so the
         * running max stays, the correction is exactly 1 and P is 0 (the row's state keeps its bits) */
        if (!PP && kb > wlast) continue;
        const uint32_t ka = kvaddr + buf * S::STAGE, va = ka + S::KTILE;
        float s[4 * NJ];
#pragma unroll
        for (int i = 0; i < 4 * NJ; i++) s[i] = 0.0f;
        if (PP && wg == 1) mw_bar_sync<1>(); /* warpgroup 0's S is issued */
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < MW_DQ / 16; ks++) {
            const uint32_t kin = (uint32_t)((ks & 3) * 32);
            mw_scores<KT>(s, gmma_desc(qaddr + (ks >> 2) * MW_QREG + wg * 64 * 128 + kin, 16, 1024),
                          gmma_desc(ka + (ks >> 2) * S::KREG + kin, 16, 1024));
        }
        wg_commit();
        if (PP) { if (wg == 0) mw_bar_arrive<1>(); else mw_bar_arrive<2>(); }
        wg_wait<0>();
        if (kb + KT - 1 > wfirst) tile_causal_mask<NJ>(s, kb, qp_lo, qp_hi, t); /* the tile crosses the warpgroup's diagonal */
        /* P in bf16 as the A fragments of k-step kk (keys 16 kk ..): pa[kk] */
        uint32_t pa[KT / 16][4];
        float c_lo, c_hi;
        tile_softmax<NJ>(s, scale2, &m_lo, &m_hi, &l_lo, &l_hi, &c_lo, &c_hi, &pa[0][0]);
        if (c_lo != 1.0f || c_hi != 1.0f) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                o[4 * j] *= c_lo; o[4 * j + 1] *= c_lo; o[4 * j + 2] *= c_hi; o[4 * j + 3] *= c_hi;
            }
        }
        if (PP) { if (wg == 0) mw_bar_sync<2>(); else mw_bar_sync<1>(); } /* the other's S (for 0) or P V (for 1) is issued */
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KT / 16; kk++) wgmma_64x128_rs_tb(o, pa[kk], gmma_desc(va + kk * 2048, S::KREG, 1024), 1);
        wg_commit();
        if (PP && wg == 0) mw_bar_arrive<1>();
        wg_wait<0>();
    }
    mha_store_rows<MW_DV>(o, l_lo, l_hi, out, t0 + rlo, n, nh, h, t);
#else
    (void)Qb, (void)Kb, (void)Vb, (void)qstride, (void)kstride, (void)pos0, (void)n, (void)scale2, (void)out, (void)nh;
    __trap(); /* never launched: pdb_cuda_mha_wg_fits is 0 without sm_90a code */
#endif
}

int pdb_cuda_mha_wg_fits(int64_t nope, int64_t rope, int64_t dv) {
    int dev = 0, optin = 0;
    if (nope <= 0 || (nope + rope + 15) / 16 * 16 != MW_DQ || dv != MW_DV || !pdb_cuda_wgmma_usable()) return 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return mha_wg_smem<128>() <= (size_t)optin; /* the larger of the two */
}

/* The launch, the shape and device already checked (pdb_cuda_mha_wg_fits); Q rows past n are zero-filled,
 * never read. */
template <int KT, bool PP>
static pdb_status launch_mha_wg(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride, int64_t kstride,
                                int64_t pos0, int64_t n, int64_t nh, float scale, float *out) {
    if (n <= 0) return PDB_OK;
    if (nh > 65535 || (n + MW_Q - 1) / MW_Q > INT32_MAX)
        return pdb_err_set(PDB_UNSUPPORTED, "attention (MHA form, warpgroup MMA): %lld tokens x %lld heads", (long long)n, (long long)nh);
    const size_t smem = mha_wg_smem<KT>();
    PDB_CU(cudaFuncSetAttribute(k_mha_wg<KT, PP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((n + MW_Q - 1) / MW_Q), (unsigned)nh);
    k_mha_wg<KT, PP><<<grid, MW_THREADS, smem, s>>>((const __nv_bfloat16 *)Qb, (const __nv_bfloat16 *)Kb, (const __nv_bfloat16 *)Vb,
                                                    qstride, kstride, pos0, n, scale * 1.4426950408889634f, out, nh);
    PDB_CU_LAUNCH("attention (MHA form, warpgroup MMA)");
    return PDB_OK;
}

/* launch_mha_wg for key_tile (pdb_cuda_attention_mha_wg's argument), the device already checked. */
static pdb_status launch_mha_wg_tile(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                     int64_t kstride, int64_t pos0, int64_t n, int64_t nh, float scale, float *out, int key_tile) {
    const int keys = key_tile & ~PDB_CUDA_MHA_WG_PINGPONG, pp = (key_tile & PDB_CUDA_MHA_WG_PINGPONG) != 0;
    if (keys == 64 && !pp) return launch_mha_wg<64, false>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);
    if (keys == 64 && pp) return launch_mha_wg<64, true>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);
    if (keys == 128 && !pp) return launch_mha_wg<128, false>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);
    if (keys == 128 && pp) return launch_mha_wg<128, true>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);
    return pdb_err_set(PDB_INVALID, "attention (MHA form, warpgroup MMA): key tile %d (built: 64, 128, each with or without "
                       "PDB_CUDA_MHA_WG_PINGPONG)", key_tile);
}

pdb_status pdb_cuda_attention_mha_wg(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                     int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int64_t nope, int64_t rope,
                                     int64_t dv, float scale, float *out, int key_tile) {
    if (n <= 0) return PDB_OK;
    if (!pdb_cuda_mha_wg_fits(nope, rope, dv))
        return pdb_err_set(PDB_UNSUPPORTED, "attention (MHA form, warpgroup MMA): q/k %lld + %lld, v %lld (built: 128 + 64, 128), "
                           "an sm_90a build on a compute capability 9.0 device and %zu bytes of shared memory required",
                           (long long)nope, (long long)rope, (long long)dv, mha_wg_smem<128>());
    return launch_mha_wg_tile(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out, key_tile);
}

/* The shapes built (DQ = qk_nope + qk_rope rounded up to 16, DV): DeepSeek-V2/V2-Lite/V3 (192, 128)
 * and make-model's test presets tiny (32, 16) and small (48, 32). */
#define PDB_MHA_SHAPES(X) X(192, 128) X(32, 16) X(48, 32)

int pdb_cuda_mha_tc_fits(int64_t nope, int64_t rope, int64_t dv) {
    const int64_t dq = (nope + rope + 15) / 16 * 16;
#define PDB_MHA_FITS(D, V) if (nope > 0 && dq == D && dv == V) return 1;
    PDB_MHA_SHAPES(PDB_MHA_FITS)
#undef PDB_MHA_FITS
    return 0;
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

template <int DQ, int DV, int WARPS>
static pdb_status launch_mha(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                             int64_t kstride, int64_t pos0, int64_t n, int64_t nh, float scale, float *out) {
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(16 * WARPS * (DQ + 8) + 2 * MH_K * (DQ + 8 + DV + 8));
    PDB_CU(cudaFuncSetAttribute(k_mha_tc<DQ, DV, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((n + 16 * WARPS - 1) / (16 * WARPS)), (unsigned)nh);
    /* softmax in base 2: exp(x scale) = 2^(x scale log2 e) */
    k_mha_tc<DQ, DV, WARPS><<<grid, 32 * WARPS, smem, s>>>((const __nv_bfloat16 *)Qb, (const __nv_bfloat16 *)Kb,
                                                          (const __nv_bfloat16 *)Vb, qstride, kstride, pos0, n,
                                                          scale * 1.4426950408889634f, out, nh);
    PDB_CU_LAUNCH("attention (MHA form, tensor cores)");
    return PDB_OK;
}

pdb_status pdb_cuda_attention_mha_tiles(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb,
                                        int64_t qstride, int64_t kstride, int64_t pos0, int64_t n, int64_t nh,
                                        int64_t nope, int64_t rope, int64_t dv, float scale, float *out, int warps) {
    if (n <= 0) return PDB_OK;
    if (nh > 65535 || (n + 63) / 64 > INT32_MAX)
        return pdb_err_set(PDB_UNSUPPORTED, "attention (MHA form): %lld tokens x %lld heads", (long long)n, (long long)nh);
    const int64_t dq = (nope + rope + 15) / 16 * 16;
#define PDB_MHA_LAUNCH(D, V)                                                                                    \
    if (nope > 0 && dq == D && dv == V) {                                                                       \
        if (warps == 4) return launch_mha<D, V, 4>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);  \
        if (warps == 8) return launch_mha<D, V, 8>(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out);  \
    }
    PDB_MHA_SHAPES(PDB_MHA_LAUNCH)
#undef PDB_MHA_LAUNCH
    return pdb_err_set(PDB_UNSUPPORTED,
                       "attention (MHA form): no kernel for q/k %lld + %lld, v %lld with %d warps (built: V2's 128 + 64, 128 "
                       "and the test presets'; 4 or 8 warps)",
                       (long long)nope, (long long)rope, (long long)dv, warps);
}

pdb_status pdb_cuda_attention_mha(cudaStream_t s, const void *Qb, const void *Kb, const void *Vb, int64_t qstride,
                                  int64_t kstride, int64_t pos0, int64_t n, int64_t nh, int64_t nope, int64_t rope,
                                  int64_t dv, float scale, float *out) {
    if (pdb_cuda_mha_wg_fits(nope, rope, dv))
        return launch_mha_wg_tile(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, scale, out, PDB_CUDA_MHA_WG_KEYS);
    return pdb_cuda_attention_mha_tiles(s, Qb, Kb, Vb, qstride, kstride, pos0, n, nh, nope, rope, dv, scale, out,
                                        PDB_CUDA_MHA_WARPS);
}
