/* pdb_cuda_v4_index_tc: the lightning indexer's scores in one fused bf16 tensor-core kernel
 * (pdb_cuda_v4_kernels.h, pdb_cuda_v4_index_scores_tc): the dots q . key are never written.
 * Design: a block holds BM = 256 (ihd <= 128: 8 warps x 2 m-tiles of 16 rows) or 128 (ihd <= 256:
 * 8 warps x 1 m-tile) rows = TQ = BM / nihp tokens x nihp heads (nihp = nih rounded up to a power of
 * two; padding heads and tokens past n have q = 0, wt = 0 and are never stored). Each thread keeps
 * its rows' Q (f32 -> bf16, round to nearest even) as mma A fragments in registers for the whole
 * launch; the block streams key tiles of 64 keys (bf16, cp.async double buffered, rows padded by 16
 * bytes in shared memory), computes S = Q K^T with mma.sync m16n8k16 (f32 accumulation, k steps in
 * ascending d), then v = wt[h] * relu(S) (f32, __fmul_rn) and the sum over the heads of each token
 * in a FIXED tree that depends only on h (never on n, pos0 or the token's slot in the block):
 *   nihp >= rows per warp (16 MT; "wide"): per lane, rows g and g + 8 of an m-tile are added (row g
 *     first), then (MT 2) m-tile 0 + m-tile 1; then a transposed xor tree over the lane bits
 *     of g (masks 4, 8, 16: h bits 0, 1, 2; each level keeps half the values, so a lane ends with
 *     one key's sum); then, when a token spans several warps, the warps' partials in warp order
 *     through shared memory (((w0 + w1) + w2) + ...), once per key tile.
 *   nihp < 16 MT ("small"): every v goes to shared memory and one thread per (token, key) sums
 *     h = 0 .. nih - 1 in order.
 * score = sscale * sum (f32), stored for keys w < nv_t of tokens with nv_t > K only.
 * A block is (token group blockIdx.x, key chunk blockIdx.y): chunk y takes key tiles y * CH ..
 * up to the group's last token's keys; every key tile of its chunk is loaded once per block.
 * Invariants: a score depends only on its token's q row(s), wt row and the key row (the mma's
 * result for one row and column does not depend on the other rows or columns), so the values are
 * the same whatever n, pos0, the grid split or the token's block: chunked = one shot bit for bit.
 * Nothing here allocates; keys rows past the group's nv are never read (zero-filled). */
#include <cuda_bf16.h>

#include "pdb_cuda_mma.h"
#include "pdb_cuda_v4_kernels.h"

namespace {

constexpr int IX_NT = 256;        /* threads per block: 8 warps */
constexpr int IX_WARPS = IX_NT / 32;
constexpr int IX_BN = 64;         /* keys per tile */
constexpr unsigned IX_FULL = 0xffffffffu;

__host__ __device__ constexpr int ix_bm(int mt) { return IX_WARPS * 16 * mt; }

/* Shared memory of a launch: 2 key tiles [64][ihd + 8] bf16, then the reduction buffer (small:
 * [BM][33] floats per half tile; wide: [8 warps][64] floats, a warp's partial of each key). */
size_t ix_smem(int64_t ihd, int mt, bool small) {
    const size_t keys = 2 * (size_t)IX_BN * (size_t)(ihd + 8) * sizeof(__nv_bfloat16);
    const size_t red = small ? (size_t)ix_bm(mt) * 33 * sizeof(float) : (size_t)IX_WARPS * IX_BN * sizeof(float);
    return keys + red;
}

/* KSM: most k steps (ihd / 16 <= KSM); MT: m-tiles per warp; SMALL: nihp < 16 MT (a warp's rows hold
 * several tokens). */
template <int KSM, int MT, bool SMALL>
__global__ void __launch_bounds__(IX_NT, 2)
    k_v4_index_tc(const float *__restrict__ q, const float *__restrict__ wt, const __nv_bfloat16 *__restrict__ keys,
                  int64_t n, int nih, int nihp, int ihd, int64_t pos0, int64_t r, int64_t K, float sscale,
                  float *__restrict__ score, int64_t lds, int ch) {
    constexpr int RW = 16 * MT;     /* rows per warp */
    constexpr int BM = ix_bm(MT);   /* rows per block */
    extern __shared__ __align__(16) unsigned char ix_sm[];
    const int ldk = ihd + 8;
    __nv_bfloat16 *ks = (__nv_bfloat16 *)ix_sm;
    float *red = (float *)(ix_sm + 2 * (size_t)IX_BN * ldk * sizeof(__nv_bfloat16));

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int tq = BM / nihp; /* tokens per block */
    const int64_t t0 = (int64_t)blockIdx.x * tq;
    const int64_t tl = t0 + tq < n ? t0 + tq : n; /* one past the group's last token */
    const int64_t nvb = (pos0 + tl) / r;           /* keys of the group's last token (the most) */
    if (nvb <= K) return;                          /* no token of the group is scored */
    const int64_t ntile = (nvb + IX_BN - 1) / IX_BN;
    const int64_t it0 = (int64_t)blockIdx.y * ch;
    const int64_t it1 = it0 + ch < ntile ? it0 + ch : ntile;
    if (it0 >= it1) return;
    const int nks = ihd / 16;

    const int cpr = ihd / 8; /* 16-byte chunks per key row */
    auto load = [&](int64_t it, int stage) {
        __nv_bfloat16 *dst = ks + (size_t)stage * IX_BN * ldk;
        for (int i = tid; i < IX_BN * cpr; i += IX_NT) {
            const int kr = i / cpr, cc = i - kr * cpr;
            const int64_t gk = it * IX_BN + kr;
            const bool v = gk < nvb;
            cp16(dst + kr * ldk + cc * 8, keys + (v ? gk * ihd + cc * 8 : 0), v);
        }
    };

    load(it0, 0); /* the first tile's copy overlaps the Q loads below */
    cp_commit();

    /* this thread's rows: m-tile mt, half e (row g or g + 8) */
    uint32_t a[MT][KSM][4];
    float wr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int row = warp * RW + mt * 16 + g + 8 * e;
            const int h = row % nihp;
            const int64_t t = t0 + row / nihp;
            const bool ok = h < nih && t < n;
            const float *qr = q + ((ok ? t : 0) * nih + (ok ? h : 0)) * (int64_t)ihd;
            wr[mt][e] = ok ? wt[t * nih + h] : 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSM; kk++) {
                uint32_t lo = 0, hi = 0;
                if (ok && kk < nks) {
                    const float2 x0 = *(const float2 *)(qr + kk * 16 + 2 * c);
                    const float2 x1 = *(const float2 *)(qr + kk * 16 + 8 + 2 * c);
                    __nv_bfloat162 b0 = __floats2bfloat162_rn(x0.x, x0.y), b1 = __floats2bfloat162_rn(x1.x, x1.y);
                    lo = *(uint32_t *)&b0;
                    hi = *(uint32_t *)&b1;
                }
                a[mt][kk][e] = lo;     /* a0 (row g) / a1 (row g + 8): k 2c, 2c + 1 */
                a[mt][kk][2 + e] = hi; /* a2 / a3: k 2c + 8, 2c + 9 */
            }
        }
    }

    for (int64_t it = it0; it < it1; it++) {
        const int stage = (int)((it - it0) & 1);
        if (it + 1 < it1) load(it + 1, stage ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const __nv_bfloat16 *kt = ks + (size_t)stage * IX_BN * ldk;
        /* ldmatrix row address of this lane: key (lane >> 4) * 8 + (lane & 7), k offset ((lane >> 3) & 1) * 8 */
        const __nv_bfloat16 *kl = kt + ((lane >> 4) * 8 + (lane & 7)) * ldk + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float acc[MT][4][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSM; kk++) {
                if (kk < nks) {
                    uint32_t b[2][4];
#pragma unroll
                    for (int jp = 0; jp < 2; jp++) ldm_x4(kl + (half * 32 + jp * 16) * ldk + kk * 16, b[jp]);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            mma16816(acc[mt][j], a[mt][kk][0], a[mt][kk][1], a[mt][kk][2], a[mt][kk][3],
                                     b[j >> 1][(j & 1) * 2], b[j >> 1][(j & 1) * 2 + 1]);
                }
            }
            /* v = wt * relu(s) */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][j][e] = __fmul_rn(wr[mt][e >> 1], fmaxf(acc[mt][j][e], 0.0f));
            const int64_t wbase = it * IX_BN + half * 32; /* key of this half tile's column 0 */
            if (SMALL) {
                /* every row's 32 values to red [BM][33], then a thread per (token, column) sums h in order */
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            red[(warp * RW + mt * 16 + g + 8 * (e >> 1)) * 33 + j * 8 + 2 * c + (e & 1)] = acc[mt][j][e];
                __syncthreads();
                for (int i = tid; i < tq * 32; i += IX_NT) {
                    const int slot = i >> 5, col = i & 31;
                    const int64_t t = t0 + slot, w = wbase + col, nv = (pos0 + t + 1) / r;
                    if (t >= n || nv <= K || w >= nv) continue;
                    const float *rr = red + slot * nihp * 33 + col;
                    float s = 0.0f;
                    for (int h = 0; h < nih; h++) s = __fadd_rn(s, rr[h * 33]);
                    score[t * lds + w] = __fmul_rn(sscale, s);
                }
                __syncthreads();
            } else {
                /* per lane: rows g + g + 8 of each m-tile, then m-tile 0 + m-tile 1 (the warp's rows are
                 * one token's heads: nihp >= RW); x[idx], idx = j * 2 + column bit */
                float x[8];
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int cb = 0; cb < 2; cb++) {
                        float s0 = __fadd_rn(acc[0][j][cb], acc[0][j][2 + cb]);
                        if (MT == 2) s0 = __fadd_rn(s0, __fadd_rn(acc[MT - 1][j][cb], acc[MT - 1][j][2 + cb]));
                        x[j * 2 + cb] = s0;
                    }
                /* transposed xor tree over g: each level halves the values; a set bit keeps the upper half */
                const int b0 = (lane >> 2) & 1, b1 = (lane >> 3) & 1, b2 = (lane >> 4) & 1;
                float x4[4], x2[2], y;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float send = b0 ? x[i] : x[4 + i], keep = b0 ? x[4 + i] : x[i];
                    x4[i] = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 4));
                }
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const float send = b1 ? x4[i] : x4[2 + i], keep = b1 ? x4[2 + i] : x4[i];
                    x2[i] = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 8));
                }
                {
                    const float send = b2 ? x2[0] : x2[1], keep = b2 ? x2[1] : x2[0];
                    y = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 16));
                }
                /* this lane's column: idx = b0 * 4 + b1 * 2 + b2 = j * 2 + cb */
                const int idx = b0 * 4 + b1 * 2 + b2;
                const int col = (idx >> 1) * 8 + 2 * c + (idx & 1);
                if (nihp == RW) {
                    /* the warp is one token */
                    const int64_t t = t0 + warp, w = wbase + col, nv = (pos0 + t + 1) / r;
                    if (t < n && nv > K && w < nv) score[t * lds + w] = __fmul_rn(sscale, y);
                } else {
                    red[warp * IX_BN + half * 32 + col] = y; /* the warp's partial, summed below */
                }
            }
        }
        if (!SMALL && nihp > RW) {
            /* a token spans wpt warps: their partials [warp][64] summed in warp order */
            __syncthreads();
            const int wpt = nihp / RW;
            for (int i = tid; i < tq * IX_BN; i += IX_NT) {
                const int slot = i / IX_BN, cl = i % IX_BN;
                const int64_t t = t0 + slot, w = it * IX_BN + cl, nv = (pos0 + t + 1) / r;
                if (t < n && nv > K && w < nv) {
                    float s = red[slot * wpt * IX_BN + cl];
                    for (int u = 1; u < wpt; u++) s = __fadd_rn(s, red[(slot * wpt + u) * IX_BN + cl]);
                    score[t * lds + w] = __fmul_rn(sscale, s);
                }
            }
        }
        __syncthreads(); /* the stage is reloaded (and red rewritten) next iteration */
    }
}

/* The kernel and its constants for (nih, ihd); false when unsupported. */
struct ix_cfg {
    void (*fn)(const float *, const float *, const __nv_bfloat16 *, int64_t, int, int, int, int64_t, int64_t, int64_t,
               float, float *, int64_t, int);
    int mt, nihp;
    bool small;
};

bool ix_pick(int64_t nih, int64_t ihd, ix_cfg *c) {
    if (nih < 1 || nih > 128 || ihd < 16 || ihd > 256 || ihd % 16) return false;
    int p = 1;
    while (p < nih) p <<= 1;
    c->nihp = p;
    c->mt = ihd <= 128 ? 2 : 1;
    c->small = p < 16 * c->mt;
    if (ihd <= 64) c->fn = c->small ? k_v4_index_tc<4, 2, true> : k_v4_index_tc<4, 2, false>;
    else if (ihd <= 128) c->fn = c->small ? k_v4_index_tc<8, 2, true> : k_v4_index_tc<8, 2, false>;
    else c->fn = c->small ? k_v4_index_tc<16, 1, true> : k_v4_index_tc<16, 1, false>;
    return true;
}

} // namespace

int pdb_cuda_v4_index_scores_tc_fits(int64_t nih, int64_t ihd) {
    ix_cfg c;
    return ix_pick(nih, ihd, &c) ? 1 : 0;
}

pdb_status pdb_cuda_v4_index_scores_tc(cudaStream_t s, const float *q, const float *wt, const void *keys_bf16,
                                       int64_t n, int64_t nih, int64_t ihd, int64_t pos0, int64_t r, int64_t K,
                                       float sscale, float *score, int64_t lds) {
    ix_cfg c;
    if (!ix_pick(nih, ihd, &c))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: nih %lld, ihd %lld (need nih <= 128, ihd %% 16 == 0, "
                           "ihd <= 256)", (long long)nih, (long long)ihd);
    if (r < 1 || pos0 < 0 || K < 0)
        return pdb_err_set(PDB_INVALID, "v4 index_scores_tc: rate %lld, pos0 %lld, K %lld", (long long)r,
                           (long long)pos0, (long long)K);
    if (n <= 0) return PDB_OK;
    const int64_t nvmax = (pos0 + n) / r;
    if (nvmax <= K) return PDB_OK;
    const int tq = ix_bm(c.mt) / c.nihp;
    const int64_t groups = (n + tq - 1) / tq;
    if (groups > 0x7fffffffLL)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: %lld token groups", (long long)groups);
    int dev = 0, sms = 0, optin = 0;
    PDB_CU(cudaGetDevice(&dev));
    PDB_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PDB_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const size_t smem = ix_smem(ihd, c.mt, c.small);
    if (smem > (size_t)optin)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: %zu bytes of shared memory (device: %d)", smem, optin);
    /* the key tiles split over grid.y so that the launch has about 4 blocks per SM (2 are resident;
     * each extra chunk reloads its group's Q) */
    const int64_t ntile = (nvmax + IX_BN - 1) / IX_BN;
    int64_t ysplit = ((int64_t)sms * 4 + groups - 1) / groups;
    if (ysplit < 1) ysplit = 1;
    if (ysplit > ntile) ysplit = ntile;
    if (ysplit > 65535) ysplit = 65535;
    const int64_t ch = (ntile + ysplit - 1) / ysplit;
    ysplit = (ntile + ch - 1) / ch;
    PDB_CU(cudaFuncSetAttribute(c.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    c.fn<<<dim3((unsigned)groups, (unsigned)ysplit), IX_NT, smem, s>>>(
        q, wt, (const __nv_bfloat16 *)keys_bf16, n, (int)nih, c.nihp, (int)ihd, pos0, r, K, sscale, score, lds, (int)ch);
    PDB_CU_LAUNCH("v4 index_scores_tc");
    return PDB_OK;
}
