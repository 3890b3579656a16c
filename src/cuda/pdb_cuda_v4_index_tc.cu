/* pdb_cuda_v4_index_tc: the lightning indexer's scores in one fused bf16 tensor-core kernel
 * (pdb_cuda_v4_kernels.h, pdb_cuda_v4_index_scores_tc): the dots q . key are never written.
 * Design (D46): a block holds TQ = 4 tokens; their queries, f32 -> bf16 (round to nearest even),
 * sit in shared memory as NHP = nih rounded up to 16, 32 or 64 rows a token (padding rows zero) for
 * the whole launch. The block streams key tiles of 64 keys (bf16, cp.async double buffered, rows
 * padded by 16 bytes in shared memory). 8 warps: warp w takes token slot w % 4 and the tile's keys
 * 32 (w / 4) .. + 31, and computes S^T = K Q^T for them (mma.sync m16n8k16, keys as A, the token's
 * heads as B, f32 accumulation in ascending d): 2 m-tiles x NHP / 8 n-tiles, so a warp holds all of
 * its token's heads for its keys and the head sum never leaves the warp (one barrier a tile). Per
 * key row the sum over h is in a FIXED order that depends only on h:
 *   per lane (lane bits c = lane & 3), s = fma(wt[h], relu(S[h]), s) from s = 0 over its heads
 *   h = 8 j + 2 c + b in (j, b) order; then the quad's four partials as (c0 + c1) + (c2 + c3)
 *   (a transposed xor tree: each level keeps half of the rows; IEEE addition is commutative).
 * score = sscale * sum (f32), stored for keys w < nv_t of tokens with nv_t > K only.
 * A block is (token group blockIdx.x, key chunk blockIdx.y): chunk y takes key tiles y * CH ..
 * up to the group's last token's keys; every key tile of its chunk is loaded once per block.
 * Invariants: a score depends only on its token's q rows, wt row and the key row (the mma's result
 * for one row and column does not depend on the other rows or columns), so the values are the same
 * whatever n, pos0, the grid split or the token's block: chunked = one shot bit for bit.
 * Nothing here allocates; key rows past the group's nv are never read (zero-filled). */
#include <cuda_bf16.h>

#include "pdb_cuda_mma.h"
#include "pdb_cuda_v4_kernels.h"
#include "pdb_cuda_wgmma.h"

namespace {

constexpr int IX_NT = 256;  /* threads per block: 8 warps */
constexpr int IX_TQ = 4;    /* tokens per block */
constexpr int IX_BN = 64;   /* keys per tile */
constexpr unsigned IX_FULL = 0xffffffffu;

/* 8 consecutive f32 (16-byte aligned) as 8 bf16 (nearest even) in one uint4: a query chunk's shared-memory form. */
__device__ __forceinline__ uint4 bf16x8(const float *p) {
    const float4 x0 = ((const float4 *)p)[0], x1 = ((const float4 *)p)[1];
    __nv_bfloat162 b0 = __floats2bfloat162_rn(x0.x, x0.y), b1 = __floats2bfloat162_rn(x0.z, x0.w);
    __nv_bfloat162 b2 = __floats2bfloat162_rn(x1.x, x1.y), b3 = __floats2bfloat162_rn(x1.z, x1.w);
    return make_uint4(*(uint32_t *)&b0, *(uint32_t *)&b1, *(uint32_t *)&b2, *(uint32_t *)&b3);
}

/* Shared memory of a launch: the queries [TQ * nhp][ihd + 8] bf16, then 2 key tiles [64][ihd + 8]. */
size_t ix_smem(int64_t ihd, int nhp) {
    return sizeof(__nv_bfloat16) * (size_t)(ihd + 8) * (size_t)(IX_TQ * nhp + 2 * IX_BN);
}

/* NT: n-tiles (8 heads) per token (nhp = 8 NT); KS: most k steps (ihd / 16 <= KS); EX: ihd == 16 KS
 * (the k loop has no bound to test: its fragment loads can be issued ahead). */
template <int NT, int KS, bool EX>
__global__ void __launch_bounds__(IX_NT, 2)
    k_v4_index_tc(const float *__restrict__ q, const float *__restrict__ wt, const __nv_bfloat16 *__restrict__ keys,
                  int64_t n, int nih, int ihd, int64_t pos0, int64_t r, int64_t K, float sscale,
                  float *__restrict__ score, int64_t lds, int ch) {
    constexpr int NHP = 8 * NT;
    extern __shared__ __align__(16) unsigned char ix_sm[];
    const int ld = ihd + 8;
    __nv_bfloat16 *qs = (__nv_bfloat16 *)ix_sm, *ks = qs + IX_TQ * NHP * ld;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int slot = warp % IX_TQ, kh = warp / IX_TQ;
    const int64_t t0 = (int64_t)blockIdx.x * IX_TQ;
    const int64_t tl = t0 + IX_TQ < n ? t0 + IX_TQ : n; /* one past the group's last token */
    const int64_t nvb = (pos0 + tl) / r;                 /* keys of the group's last token (the most) */
    if (nvb <= K) return;                                /* no token of the group is scored */
    const int64_t ntile = (nvb + IX_BN - 1) / IX_BN;
    const int64_t it0 = (int64_t)blockIdx.y * ch;
    const int64_t it1 = it0 + ch < ntile ? it0 + ch : ntile;
    if (it0 >= it1) return;
    const int nks = ihd / 16, cpr = ihd / 8; /* k steps; 16-byte chunks per row */

    auto load = [&](int64_t it, int stage) {
        __nv_bfloat16 *dst = ks + (size_t)stage * IX_BN * ld;
        for (int i = tid; i < IX_BN * cpr; i += IX_NT) {
            const int kr = i / cpr, cc = i - kr * cpr;
            const int64_t gk = it * IX_BN + kr;
            const bool v = gk < nvb;
            cp16(dst + kr * ld + cc * 8, keys + (v ? gk * ihd + cc * 8 : 0), v);
        }
    };
    load(it0, 0); /* the first tile's copy overlaps the queries' conversion below */
    cp_commit();

    /* the group's queries -> shared bf16 rows (slot * NHP + h), zero for padding heads and tokens */
    for (int i = tid; i < IX_TQ * NHP * cpr; i += IX_NT) {
        const int row = i / cpr, cc = i - row * cpr, h = row % NHP;
        const int64_t t = t0 + row / NHP;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (h < nih && t < n) {
            v = bf16x8(q + (t * nih + h) * (int64_t)ihd + cc * 8);
        }
        *(uint4 *)(qs + row * ld + cc * 8) = v;
    }

    /* this warp's token and this lane's heads' weights: h = 8 j + 2 c + b */
    const int64_t t = t0 + slot, nvt = (pos0 + t + 1) / r;
    const bool scored = t < n && nvt > K;
    float wv[NT][2];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int b = 0; b < 2; b++) {
            const int h = 8 * j + 2 * c + b;
            wv[j][b] = scored && h < nih ? wt[t * nih + h] : 0.0f;
        }
    /* ldmatrix row addresses: A (keys, rows lane & 15, k 8 (lane >> 4)); B (heads (lane & 7) +
     * 8 (lane >> 4), k 8 ((lane >> 3) & 1)) */
    const int aoff = (32 * kh + (lane & 15)) * ld + (lane >> 4) * 8;
    const __nv_bfloat16 *qb = qs + (slot * NHP + (lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8;

    for (int64_t it = it0; it < it1; it++) {
        const int stage = (int)((it - it0) & 1);
        cp_wait<0>();
        __syncthreads(); /* tile it landed (and the queries are in); everyone is done with the other stage */
        if (it + 1 < it1) load(it + 1, stage ^ 1);
        cp_commit();
        const int64_t wlo = it * IX_BN + 32 * kh; /* this warp's first key */
        if (!scored || wlo >= nvt) continue;        /* warp-uniform: nothing of this warp's is stored */
        const __nv_bfloat16 *kt = ks + (size_t)stage * IX_BN * ld + aoff;
        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            if (EX || kk < nks) {
                uint32_t a[2][4], b[NT / 2][4];
                ldm_x4(kt + kk * 16, a[0]);
                ldm_x4(kt + 16 * ld + kk * 16, a[1]);
#pragma unroll
                for (int jp = 0; jp < NT / 2; jp++) ldm_x4(qb + 16 * jp * ld + kk * 16, b[jp]);
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma16816(acc[mt][j], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[j >> 1][(j & 1) * 2],
                                 b[j >> 1][(j & 1) * 2 + 1]);
            }
        }
        /* per row (mt, e: key 16 mt + g + 8 e of the warp's 32) this lane's heads in (j, b) order */
        float v[4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int b = 0; b < 2; b++) s = fmaf(wv[j][b], fmaxf(acc[mt][j][2 * e + b], 0.0f), s);
                v[2 * mt + e] = s;
            }
        /* the quad's partials: level c bit 0 keeps rows (mt = bit), level c bit 1 keeps e = bit */
        const int b0 = c & 1, b1 = c >> 1;
        float x2[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float send = b0 ? v[i] : v[2 + i], keep = b0 ? v[2 + i] : v[i];
            x2[i] = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 1));
        }
        const float send = b1 ? x2[0] : x2[1], keep = b1 ? x2[1] : x2[0];
        const float y = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 2));
        const int64_t w = wlo + 16 * b0 + g + 8 * b1;
        if (w < nvt) score[t * lds + w] = __fmul_rn(sscale, y);
    }
}

/* ---- the warpgroup form (sm_90a; nih 33 .. 64 padded to 64 heads, ihd 128: V4-Flash's indexer) ----
 * A block is one warpgroup (128 threads) and the same (token group of WX_TQ = 4, key chunk) as above.
 * The group's queries sit in shared memory as B = [4 tokens x 64 heads = 256 rows, 128 dims], the key
 * tiles of 64 as A = [64 keys, 128 dims], both bf16 in the 128B-swizzled K-major layout
 * (pdb_cuda_wgmma.h: 64-dim regions side by side), the tiles cp.async double buffered. Per tile 8
 * wgmma m64n256k16 (k 16 at a time in ascending d) give S^T [64 keys, 256 columns] in registers: thread
 * (warp w, lane 4 g + c) holds keys 16 w + g (+ 8) and, for token u, heads 8 j + 2 c + b (j < 8, b < 2)
 * in columns 64 u + 8 j + 2 c + b: the heads a lane of k_v4_index_tc holds, so the head sum is the same
 * FIXED order (s = fma(wt[h], relu(dot), s) from 0 over (j, b), then the quad's (s_0 + s_1) + (s_2 + s_3)
 * by two xor levels over the lane's 8 (token, key) partials). The weights of the group's heads sit in
 * shared memory (zero for padding heads and unscored tokens). Invariants as k_v4_index_tc's: a score
 * depends on its token's q rows, wt row and the key row alone. */
constexpr int WX_NT = 128, WX_TQ = 4, WX_BN = 64, WX_HD = 128, WX_NH = 64;
constexpr int WX_QREG = WX_TQ * WX_NH * 128; /* bytes of one 64-dim region of the queries (256 rows) */
constexpr int WX_KREG = WX_BN * 128;         /* of a key tile's region (64 rows) */
static_assert(IX_TQ == WX_TQ && IX_BN == WX_BN, "both forms split the grid alike");

size_t wx_smem() { return 1024 + 2 * WX_QREG + 2 * 2 * WX_KREG + sizeof(float) * WX_TQ * WX_NH; }

__global__ void __launch_bounds__(WX_NT, 2)
    k_v4_index_wg(const float *__restrict__ q, const float *__restrict__ wt, const __nv_bfloat16 *__restrict__ keys,
                  int64_t n, int nih, int64_t pos0, int64_t r, int64_t K, float sscale, float *__restrict__ score,
                  int64_t lds, int ch) {
#if PDB_WGMMA_DEVICE
    extern __shared__ uint8_t ix_wg[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(ix_wg);
    uint8_t *Qs = ix_wg + ((1024 - (raw & 1023)) & 1023), *Kb = Qs + 2 * WX_QREG; /* 1024-byte aligned */
    float *ws = (float *)(Kb + 2 * 2 * WX_KREG);
    const uint32_t qaddr = (uint32_t)__cvta_generic_to_shared(Qs), kaddr = qaddr + 2 * WX_QREG;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int64_t t0 = (int64_t)blockIdx.x * WX_TQ;
    const int64_t tl = t0 + WX_TQ < n ? t0 + WX_TQ : n;
    const int64_t nvb = (pos0 + tl) / r;
    if (nvb <= K) return;
    const int64_t ntile = (nvb + WX_BN - 1) / WX_BN, it0 = (int64_t)blockIdx.y * ch;
    const int64_t it1 = it0 + ch < ntile ? it0 + ch : ntile;
    if (it0 >= it1) return;
    auto load = [&](int64_t it, int stage) {
        uint8_t *dst = Kb + stage * 2 * WX_KREG;
        for (int i = tid; i < WX_BN * (WX_HD / 8); i += WX_NT) {
            const int kr = i >> 4, cc = i & 15;
            const int64_t gk = it * WX_BN + kr;
            const bool v = gk < nvb;
            cp16(dst + sw128_off(kr, cc * 8, WX_BN), keys + (v ? gk * WX_HD + cc * 8 : 0), v);
        }
    };
    load(it0, 0);
    cp_commit();
    for (int i = tid; i < WX_TQ * WX_NH * (WX_HD / 8); i += WX_NT) {
        const int row = i >> 4, cc = i & 15, h = row & (WX_NH - 1);
        const int64_t t = t0 + (row >> 6);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (h < nih && t < n) {
            v = bf16x8(q + (t * nih + h) * (int64_t)WX_HD + cc * 8);
        }
        *(uint4 *)(Qs + sw128_off(row, cc * 8, WX_TQ * WX_NH)) = v;
    }
    for (int i = tid; i < WX_TQ * WX_NH; i += WX_NT) {
        const int64_t t = t0 + (i >> 6);
        const int h = i & (WX_NH - 1);
        ws[i] = t < n && (pos0 + t + 1) / r > K && h < nih ? wt[t * nih + h] : 0.0f;
    }
    /* after the two xor levels lane c holds token u = 2 (c & 1) + (c >> 1), keys g and g + 8 of its warp's 16 */
    const int u_out = 2 * (c & 1) + (c >> 1);
    const int64_t t_out = t0 + u_out, nv_out = (pos0 + t_out + 1) / r;
    const bool st_out = t_out < n && nv_out > K;
    for (int64_t it = it0; it < it1; it++) {
        const int stage = (int)((it - it0) & 1);
        cp_wait<0>();
        fence_async_shared();
        __syncthreads(); /* tile it landed (and the queries, weights); everyone is done with the other stage */
        if (it + 1 < it1) load(it + 1, stage ^ 1);
        cp_commit();
        const uint32_t ka = kaddr + stage * 2 * WX_KREG;
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; i++) acc[i] = 0.0f;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WX_HD / 16; kk++) {
            const uint32_t in = (uint32_t)((kk & 3) * 32);
            wgmma_64x256_ss(acc, gmma_desc(ka + (kk >> 2) * WX_KREG + in, 16, 1024),
                            gmma_desc(qaddr + (kk >> 2) * WX_QREG + in, 16, 1024), 1);
        }
        wg_commit();
        wg_wait<0>();
        float v[2 * WX_TQ]; /* [u][e]: token u, key g + 8 e */
#pragma unroll
        for (int u = 0; u < WX_TQ; u++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float2 w2 = *(const float2 *)(ws + u * WX_NH + 8 * j + 2 * c);
                    s = fmaf(w2.x, fmaxf(acc[4 * (8 * u + j) + 2 * e], 0.0f), s);
                    s = fmaf(w2.y, fmaxf(acc[4 * (8 * u + j) + 2 * e + 1], 0.0f), s);
                }
                v[2 * u + e] = s;
            }
        const int b0 = c & 1, b1 = c >> 1;
        float x4[4], y[2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float send = b0 ? v[i] : v[4 + i], keep = b0 ? v[4 + i] : v[i];
            x4[i] = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 1));
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float send = b1 ? x4[i] : x4[2 + i], keep = b1 ? x4[2 + i] : x4[i];
            y[i] = __fadd_rn(keep, __shfl_xor_sync(IX_FULL, send, 2));
        }
        if (st_out)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t w = it * WX_BN + 16 * warp + g + 8 * e;
                if (w < nv_out) score[t_out * lds + w] = __fmul_rn(sscale, y[e]);
            }
    }
#else
    (void)q, (void)wt, (void)keys, (void)n, (void)nih, (void)pos0, (void)r, (void)K, (void)sscale, (void)score, (void)lds, (void)ch;
    __trap(); /* never launched: wx_fits is false without sm_90a code */
#endif
}

bool wx_fits(int64_t nih, int64_t ihd, int optin) {
    return ihd == WX_HD && nih > 32 && nih <= WX_NH && pdb_cuda_wgmma_usable() && wx_smem() <= (size_t)optin;
}

/* The kernel and its head padding for (nih, ihd); false when unsupported. */
struct ix_cfg {
    void (*fn)(const float *, const float *, const __nv_bfloat16 *, int64_t, int, int, int64_t, int64_t, int64_t, float,
               float *, int64_t, int);
    int nhp;
};

template <int NT> void ix_pick_ks(int64_t ihd, ix_cfg *c) {
    c->nhp = 8 * NT;
    if (ihd == 64) c->fn = k_v4_index_tc<NT, 4, true>;
    else if (ihd == 128) c->fn = k_v4_index_tc<NT, 8, true>;
    else if (ihd == 256) c->fn = k_v4_index_tc<NT, 16, true>;
    else c->fn = ihd < 64 ? k_v4_index_tc<NT, 4, false> : ihd < 128 ? k_v4_index_tc<NT, 8, false> : k_v4_index_tc<NT, 16, false>;
}

bool ix_pick(int64_t nih, int64_t ihd, ix_cfg *c) {
    if (nih < 1 || nih > 64 || ihd < 16 || ihd > 256 || ihd % 16) return false;
    if (nih <= 16) ix_pick_ks<2>(ihd, c);
    else if (nih <= 32) ix_pick_ks<4>(ihd, c);
    else ix_pick_ks<8>(ihd, c);
    return true;
}

} // namespace

int pdb_cuda_v4_index_scores_tc_fits(int64_t nih, int64_t ihd) {
    ix_cfg c;
    return ix_pick(nih, ihd, &c) ? 1 : 0;
}

pdb_status pdb_cuda_v4_index_scores_tc(cudaStream_t s, const float *q, const float *wt, const void *keys_bf16,
                                       int64_t n, int64_t nih, int64_t ihd, int64_t pos0, int64_t r, int64_t K,
                                       float sscale, float *score, int64_t lds, int mma_sync) {
    ix_cfg c;
    if (!ix_pick(nih, ihd, &c))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: nih %lld, ihd %lld (need nih <= 64, ihd %% 16 == 0, "
                           "16 <= ihd <= 256)", (long long)nih, (long long)ihd);
    if (r < 1 || pos0 < 0 || K < 0)
        return pdb_err_set(PDB_INVALID, "v4 index_scores_tc: rate %lld, pos0 %lld, K %lld", (long long)r,
                           (long long)pos0, (long long)K);
    if (((uintptr_t)q | (uintptr_t)keys_bf16) % 16)
        return pdb_err_set(PDB_INVALID, "v4 index_scores_tc: q and keys must be 16-byte aligned");
    if (n <= 0) return PDB_OK;
    const int64_t nvmax = (pos0 + n) / r;
    if (nvmax <= K) return PDB_OK;
    const int64_t groups = (n + IX_TQ - 1) / IX_TQ;
    if (groups > 0x7fffffffLL)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: %lld token groups", (long long)groups);
    int dev = 0, sms = 0, optin = 0;
    PDB_CU(cudaGetDevice(&dev));
    PDB_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PDB_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const bool wg = !mma_sync && wx_fits(nih, ihd, optin);
    const size_t smem = wg ? wx_smem() : ix_smem(ihd, c.nhp);
    if (smem > (size_t)optin)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 index_scores_tc: %zu bytes of shared memory (device: %d)", smem, optin);
    /* the key tiles split over grid.y so that the launch has about 4 blocks per SM (2 are resident;
     * each extra chunk reloads its group's queries) */
    const int64_t ntile = (nvmax + IX_BN - 1) / IX_BN;
    int64_t ysplit = ((int64_t)sms * 4 + groups - 1) / groups;
    if (ysplit < 1) ysplit = 1;
    if (ysplit > ntile) ysplit = ntile;
    if (ysplit > 65535) ysplit = 65535;
    const int64_t ch = (ntile + ysplit - 1) / ysplit;
    ysplit = (ntile + ch - 1) / ch;
    if (wg) {
        PDB_CU(cudaFuncSetAttribute(k_v4_index_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_v4_index_wg<<<dim3((unsigned)groups, (unsigned)ysplit), WX_NT, smem, s>>>(
            q, wt, (const __nv_bfloat16 *)keys_bf16, n, (int)nih, pos0, r, K, sscale, score, lds, (int)ch);
    } else {
        PDB_CU(cudaFuncSetAttribute(c.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        c.fn<<<dim3((unsigned)groups, (unsigned)ysplit), IX_NT, smem, s>>>(
            q, wt, (const __nv_bfloat16 *)keys_bf16, n, (int)nih, (int)ihd, pos0, r, K, sscale, score, lds, (int)ch);
    }
    PDB_CU_LAUNCH("v4 index_scores_tc");
    return PDB_OK;
}
