/* pdb_cuda_moe_tc: the bf16 engine's routed experts as one grouped GEMM per product on the tensor
 * cores (mma.sync m16n8k16, bf16 operands, f32 accumulation), over a gathered row layout in which
 * every expert's rows start at a multiple of PDB_CUDA_MOE_TILE (padding rows are zero on input and
 * never read on output), plus the gather and the SiLU-mul that feed it.
 * Layout: tile i = rows i*TILE .. i*TILE+TILE-1 of A and C, all of one expert, tile_e[i] (-1: no
 * tile; the GEMM's blocks for it return at once), laid out on the device (pdb_cuda_moe_layout).
 * Invariants: an output element is one thread's sum over k in a fixed order (k tiles of 32 in
 * increasing k, two mma k-steps each), whatever the row count, the tile's neighbours or how many
 * tiles a launch holds, so a token's expert output does not depend on the chunking (the property
 * the cuBLAS path gets from its fixed-size row tiles); K is read in 16-byte pieces, so K % 8 == 0
 * (checked); a k or n past the matrix is zero-filled in shared memory and never stored. */
#include <cuda_bf16.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_mma.h"

/* Block tile 128 x 128 (rows x outputs), k tiles of 32, 3 stages of cp.async; 8 warps as 2 x 4,
 * each warp 64 rows x 32 outputs (4 x 4 mma tiles). Rows of a stage are padded to 40 elements (80
 * bytes), so ldmatrix's 8 row reads of a matrix hit distinct banks. */
enum { MG_BM = PDB_CUDA_MOE_TILE, MG_BN = 128, MG_BK = 32, MG_ST = 3, MG_LD = MG_BK + 8, MG_THREADS = 256 };

__global__ void __launch_bounds__(MG_THREADS)
    k_moe_gemm(const __nv_bfloat16 *A, const __nv_bfloat16 *W, float *C, const int32_t *tile_e, int64_t N, int64_t K) {
    extern __shared__ uint4 smem_mg[];
    __nv_bfloat16 *As = (__nv_bfloat16 *)smem_mg, *Bs = As + MG_ST * MG_BM * MG_LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
    const int64_t r0 = (int64_t)blockIdx.y * MG_BM, n0 = (int64_t)blockIdx.x * MG_BN;
    const int32_t e = tile_e[blockIdx.y];
    if (e < 0) return; /* past the layout's last tile (a launch sized for the most tiles a pass can have) */
    const __nv_bfloat16 *Ab = A + r0 * K, *Wb = W + (int64_t)e * N * K;
    auto load = [&](int st, int64_t k0) {
        __nv_bfloat16 *as = As + st * MG_BM * MG_LD, *bs = Bs + st * MG_BN * MG_LD;
        for (int i = tid; i < MG_BM * (MG_BK / 8); i += MG_THREADS) {
            int r = i / (MG_BK / 8), c = (i % (MG_BK / 8)) * 8;
            bool okk = k0 + c < K;
            cp16(as + r * MG_LD + c, okk ? Ab + r * K + k0 + c : Ab, okk);
            bool okb = okk && n0 + r < N;
            cp16(bs + r * MG_LD + c, okb ? Wb + (n0 + r) * K + k0 + c : Wb, okb);
        }
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const int nk = (int)((K + MG_BK - 1) / MG_BK);
#pragma unroll
    for (int st = 0; st < MG_ST - 1; st++) {
        if (st < nk) load(st, (int64_t)st * MG_BK);
        cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<MG_ST - 2>();
        __syncthreads(); /* tile kt landed for every thread; everyone is done with tile kt - 1's buffer */
        if (kt + MG_ST - 1 < nk) load((kt + MG_ST - 1) % MG_ST, (int64_t)(kt + MG_ST - 1) * MG_BK);
        cp_commit();
        const __nv_bfloat16 *as = As + (kt % MG_ST) * MG_BM * MG_LD, *bs = Bs + (kt % MG_ST) * MG_BN * MG_LD;
#pragma unroll
        for (int kk = 0; kk < MG_BK; kk += 16) {
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
                ldm_x4(as + (wm * 64 + mi * 16 + (lane & 15)) * MG_LD + kk + (lane >> 4) * 8, a[mi]);
#pragma unroll
            for (int nj = 0; nj < 2; nj++) { /* matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) */
                uint32_t r[4];
                ldm_x4(bs + (wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * MG_LD + kk + ((lane >> 3) & 1) * 8, r);
                b[2 * nj][0] = r[0];
                b[2 * nj][1] = r[1];
                b[2 * nj + 1][0] = r[2];
                b[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    mma16816(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
        }
    }
    cp_wait<0>();
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            int64_t n = n0 + wn * 32 + ni * 8 + 2 * t, r = r0 + wm * 64 + mi * 16 + g;
            float *c0 = C + r * N + n, *c1 = c0 + 8 * N;
            if (n < N) { c0[0] = acc[mi][ni][0]; c1[0] = acc[mi][ni][2]; }
            if (n + 1 < N) { c0[1] = acc[mi][ni][1]; c1[1] = acc[mi][ni][3]; }
        }
}

/* ================= the layout of the gathered rows, on the device (no host round trip) =================
 * The host version's layout exactly: expert e's rows start at T * (tiles of the experts before e),
 * its slots in slot order (a slot's rank among the slots routed to e), padding rows -1. Three
 * launches: ranks (a block per expert), the tile prefix (one thread, E steps), the placement (a
 * thread per slot). */
/* Ranks of expert blockIdx.x's slots: the slots split into RK_WARPS contiguous segments (a warp
 * each, a multiple of 32 long); a warp counts its segment's matches (ballots), the block takes the
 * exclusive prefix of the counts, and each warp scans its segment again writing base + running
 * count. The rank is a pure function of topk (the slot's place among e's slots in slot order). */
enum { RK_WARPS = 32 };
__global__ void __launch_bounds__(RK_WARPS * 32) k_moe_rank(const int32_t *topk, int64_t S, int32_t *rank, int32_t *cnt) {
    __shared__ int32_t base[RK_WARPS + 1];
    const int e = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t seg = (S + 32 * RK_WARPS - 1) / (32 * RK_WARPS) * 32, b0 = w * seg, b1 = b0 + seg < S ? b0 + seg : S;
    int32_t run = 0;
#pragma unroll 4
    for (int64_t b = b0; b < b1; b += 32) run += __popc(__ballot_sync(0xffffffffu, b + lane < b1 && topk[b + lane] == e));
    if (lane == 0) base[w + 1] = run;
    __syncthreads();
    if (threadIdx.x == 0) {
        base[0] = 0;
        for (int i = 1; i <= RK_WARPS; i++) base[i] += base[i - 1];
    }
    __syncthreads();
    run = base[w];
#pragma unroll 4
    for (int64_t b = b0; b < b1; b += 32) {
        const int64_t sl = b + lane;
        const bool mine = sl < b1 && topk[sl] == e;
        const unsigned m = __ballot_sync(0xffffffffu, mine);
        if (mine) rank[sl] = run + __popc(m & ((1u << lane) - 1u));
        run += __popc(m);
    }
    if (threadIdx.x == 0) cnt[e] = base[RK_WARPS];
}

__global__ void k_moe_tiles(const int32_t *cnt, int E, int T, int64_t ntmax, int32_t *start, int32_t *tile_e) {
    int64_t nt = 0;
    for (int e = 0; e < E; e++) {
        start[e] = (int32_t)(nt * T);
        for (int64_t i = 0, tiles = (cnt[e] + T - 1) / T; i < tiles; i++) tile_e[nt++] = e;
    }
    for (; nt < ntmax; nt++) tile_e[nt] = -1;
}

__global__ void k_moe_place(const int32_t *topk, const int32_t *rank, const int32_t *start, int64_t S, int K,
                            int32_t *row_src, int32_t *slot_row) {
    const int64_t sl = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (sl >= S) return;
    const int32_t r = start[topk[sl]] + rank[sl];
    row_src[r] = (int32_t)(sl / K);
    slot_row[sl] = r;
}

/* dst [R, H] bf16: row r = src row src_row[r] rounded to bf16, or zeros where src_row[r] < 0. */
__global__ void k_moe_gather_bf16(const float *src, const int32_t *src_row, int64_t R, int64_t H, __nv_bfloat16 *dst) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= R * H) return;
    int64_t r = i / H, c = i % H;
    int32_t s = src_row[r];
    dst[i] = __float2bfloat16_rn(s >= 0 ? src[(int64_t)s * H + c] : 0.0f);
}

/* The same with a block per row and 4 columns a thread (H % 4 == 0, 16-byte aligned rows). */
__global__ void __launch_bounds__(256) k_moe_gather_bf16_v4(const float *src, const int32_t *src_row, int64_t H, __nv_bfloat16 *dst) {
    const int64_t r = blockIdx.x;
    const int32_t s = src_row[r];
    for (int64_t c = threadIdx.x * 4; c < H; c += 4 * blockDim.x) {
        const float4 v = s >= 0 ? *(const float4 *)(src + (int64_t)s * H + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __nv_bfloat162 q[2] = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
        *(uint2 *)(dst + r * H + c) = *(const uint2 *)q;
    }
}

/* dst [R, H] bf16: row r = bf16 row src_row[r] of src as is, or zeros where src_row[r] < 0; a block per
 * row, 8 values (16 bytes) a thread when W8 (H % 8 == 0, 16-byte aligned rows), else one. */
template <bool W8>
__global__ void __launch_bounds__(256) k_moe_gather_rows16(const __nv_bfloat16 *src, const int32_t *src_row, int64_t H,
                                                           __nv_bfloat16 *dst) {
    const int64_t r = blockIdx.x;
    const int32_t s = src_row[r];
    if (W8) {
        for (int64_t c = threadIdx.x * 8; c < H; c += 8 * blockDim.x)
            *(uint4 *)(dst + r * H + c) = s >= 0 ? *(const uint4 *)(src + (int64_t)s * H + c) : make_uint4(0, 0, 0, 0);
    } else
        for (int64_t c = threadIdx.x; c < H; c += blockDim.x) dst[r * H + c] = s >= 0 ? src[(int64_t)s * H + c] : __float2bfloat16_rn(0.0f);
}

/* silu(x) * u with pdb_cuda_silu_mul's formula (the exponential in double). */
__device__ __forceinline__ float silu_mul1(float x, float u) {
    return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, (float)exp(-(double)x))), u);
}

/* out [count] bf16 = silu(g) * u, rounded once to bf16. */
__global__ void k_silu_mul_bf16(const float *g, const float *u, __nv_bfloat16 *out, int64_t count) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= count) return;
    out[i] = __float2bfloat16_rn(silu_mul1(g[i], u[i]));
}

/* The same of bf16 g, u; V8: 8 values a thread in 16-byte pieces (count8 = count / 8, aligned). */
template <bool V8>
__global__ void k_silu_mul16(const __nv_bfloat16 *__restrict__ g, const __nv_bfloat16 *__restrict__ u, __nv_bfloat16 *__restrict__ out,
                             int64_t count) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (!V8) {
        if (i < count) out[i] = __float2bfloat16_rn(silu_mul1(__bfloat162float(g[i]), __bfloat162float(u[i])));
        return;
    }
    if (i >= count) return;
    ((uint4 *)out)[i] = bf16x8_map2(((const uint4 *)g)[i], ((const uint4 *)u)[i], silu_mul1);
}

int pdb_cuda_moe_tc_fits(int64_t H, int64_t Im) { return H > 0 && Im > 0 && H % 8 == 0 && Im % 8 == 0; }

pdb_status pdb_cuda_moe_gemm(cudaStream_t s, const void *A, const void *W, float *C, const int32_t *tile_e,
                             int64_t ntiles, int64_t N, int64_t K) {
    if (ntiles <= 0) return PDB_OK;
    if (K % 8 || N <= 0 || ntiles > 65535)
        return pdb_err_set(PDB_UNSUPPORTED, "moe gemm: K %lld not a multiple of 8, N %lld or %lld row tiles (max 65535)",
                           (long long)K, (long long)N, (long long)ntiles);
    size_t smem = sizeof(__nv_bfloat16) * (size_t)(MG_ST * (MG_BM + MG_BN) * MG_LD);
    PDB_CU(cudaFuncSetAttribute(k_moe_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((N + MG_BN - 1) / MG_BN), (unsigned)ntiles);
    k_moe_gemm<<<grid, MG_THREADS, smem, s>>>((const __nv_bfloat16 *)A, (const __nv_bfloat16 *)W, C, tile_e, N, K);
    PDB_CU_LAUNCH("moe grouped gemm");
    return PDB_OK;
}

int64_t pdb_cuda_moe_max_tiles(int64_t slots, int64_t E) {
    return (slots + E * (PDB_CUDA_MOE_TILE - 1)) / PDB_CUDA_MOE_TILE;
}

pdb_status pdb_cuda_moe_layout(cudaStream_t s, const int32_t *topk, int64_t n, int64_t K, int64_t E, int32_t *scratch,
                               int32_t *row_src, int32_t *slot_row, int32_t *tile_e) {
    const int64_t S = n * K, ntmax = pdb_cuda_moe_max_tiles(S, E);
    if (S <= 0) return PDB_OK;
    if (S > INT32_MAX / 2 || E > 65535) return pdb_err_set(PDB_UNSUPPORTED, "moe layout: %lld slots, %lld experts", (long long)S, (long long)E);
    int32_t *rank = scratch, *cnt = scratch + S, *start = cnt + E;
    PDB_CU(cudaMemsetAsync(row_src, 0xff, sizeof(int32_t) * (size_t)(ntmax * PDB_CUDA_MOE_TILE), s)); /* -1: padding */
    k_moe_rank<<<(unsigned)E, RK_WARPS * 32, 0, s>>>(topk, S, rank, cnt);
    PDB_CU_LAUNCH("moe layout (ranks)");
    k_moe_tiles<<<1, 1, 0, s>>>(cnt, (int)E, PDB_CUDA_MOE_TILE, ntmax, start, tile_e);
    PDB_CU_LAUNCH("moe layout (tiles)");
    k_moe_place<<<(unsigned)((S + 255) / 256), 256, 0, s>>>(topk, rank, start, S, (int)K, row_src, slot_row);
    PDB_CU_LAUNCH("moe layout (rows)");
    return PDB_OK;
}

pdb_status pdb_cuda_moe_gather_bf16(cudaStream_t s, const float *src, const int32_t *src_row, int64_t R, int64_t H,
                                    void *dst) {
    if (R <= 0) return PDB_OK;
    if (H % 4 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 16 == 0 && R <= INT32_MAX)
        k_moe_gather_bf16_v4<<<(unsigned)R, 256, 0, s>>>(src, src_row, H, (__nv_bfloat16 *)dst);
    else k_moe_gather_bf16<<<(unsigned)((R * H + 255) / 256), 256, 0, s>>>(src, src_row, R, H, (__nv_bfloat16 *)dst);
    PDB_CU_LAUNCH("moe gather (bf16)");
    return PDB_OK;
}

pdb_status pdb_cuda_moe_gather_rows16(cudaStream_t s, const void *src, const int32_t *src_row, int64_t R, int64_t H, void *dst) {
    if (R <= 0) return PDB_OK;
    if (R > INT32_MAX) return pdb_err_set(PDB_UNSUPPORTED, "moe gather (bf16 rows): %lld rows", (long long)R);
    if (H % 8 == 0 && ((uintptr_t)src | (uintptr_t)dst) % 16 == 0)
        k_moe_gather_rows16<true><<<(unsigned)R, 256, 0, s>>>((const __nv_bfloat16 *)src, src_row, H, (__nv_bfloat16 *)dst);
    else k_moe_gather_rows16<false><<<(unsigned)R, 256, 0, s>>>((const __nv_bfloat16 *)src, src_row, H, (__nv_bfloat16 *)dst);
    PDB_CU_LAUNCH("moe gather (bf16 rows)");
    return PDB_OK;
}

pdb_status pdb_cuda_silu_mul_bf16in(cudaStream_t s, const void *g, const void *u, void *out, int64_t count) {
    if (count <= 0) return PDB_OK;
    const __nv_bfloat16 *gb = (const __nv_bfloat16 *)g, *ub = (const __nv_bfloat16 *)u;
    __nv_bfloat16 *ob = (__nv_bfloat16 *)out;
    if (count % 8 == 0 && ((uintptr_t)g | (uintptr_t)u | (uintptr_t)out) % 16 == 0)
        k_silu_mul16<true><<<(unsigned)((count / 8 + 255) / 256), 256, 0, s>>>(gb, ub, ob, count / 8);
    else k_silu_mul16<false><<<(unsigned)((count + 255) / 256), 256, 0, s>>>(gb, ub, ob, count);
    PDB_CU_LAUNCH("silu mul (bf16 in)");
    return PDB_OK;
}

pdb_status pdb_cuda_silu_mul_bf16(cudaStream_t s, const float *g, const float *u, void *out, int64_t count) {
    if (count <= 0) return PDB_OK;
    k_silu_mul_bf16<<<(unsigned)((count + 255) / 256), 256, 0, s>>>(g, u, (__nv_bfloat16 *)out, count);
    PDB_CU_LAUNCH("silu mul (bf16)");
    return PDB_OK;
}
