/* pdb_cuda_wgmma: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the kernels that use it:
 * shared-memory matrix descriptors for the 128-byte-swizzled layout, the fence / commit / wait
 * steps, and the shapes the attention (pdb_cuda_v4_attn.cu: m64n64k16 both operands in shared memory,
 * m64n256k16 with A from registers and B N-major; the V2 MHA form, pdb_cuda_mha_tc.cu: m64n64k16 or m64n128k16 in shared memory and
 * m64n128k16 from registers) and the indexer (pdb_cuda_v4_index_tc.cu: m64n256k16 both
 * in shared memory, K-major) issue. Internal header for .cu files.
 * Invariants: each helper is one PTX instruction (or a fixed sequence); the instructions exist only
 * when the device code is compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL), so every caller guards
 * its body with PDB_WGMMA_DEVICE and the host side with pdb_cuda_wgmma_usable().
 *
 * The shared-memory layout (128B swizzle, bf16): a matrix of R rows x 64 columns is one region of
 * R * 128 bytes, 1024-byte aligned; row r at r * 128, its 16-byte chunk c (columns 8c .. 8c + 7) at
 * ((c ^ (r % 8)) * 16). Wider matrices are such regions side by side (R * 128 bytes apart).
 *   K-major operand (rows = M or N, columns = K): descriptor start = region + 2 k0 bytes (the
 *     k-step's first column k0 within the region), SBO = 1024 (8-row groups), LBO unused (1).
 *   N-major B (rows = K, columns = N; imm-trans-b = 1): start = region + 128 k0 (k0: the first of the
 *     16 K rows), LBO = the bytes between 64-column regions, SBO = 1024 (8-row groups of K). */
#ifndef PDB_CUDA_WGMMA_H
#define PDB_CUDA_WGMMA_H

#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PDB_WGMMA_DEVICE 1
#else
#define PDB_WGMMA_DEVICE 0
#endif

/* The byte offset of (row r, column c) in a 128B-swizzled bf16 region of R rows (R * 128 bytes per 64 columns). */
static __host__ __device__ __forceinline__ uint32_t sw128_off(int r, int c, int R) {
    return (uint32_t)((c >> 6) * R * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2);
}

/* A shared-memory matrix descriptor: 128-byte swizzle (layout type 1 in bits 62-63), start, LBO and
 * SBO in 16-byte units (bits 0-13, 16-29, 32-45), base offset 0 (regions are 1024-byte aligned). */
static __device__ __forceinline__ uint64_t gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

/* The accumulator operands of the wgmma helpers below, in pieces of 32 (an m64n64 accumulator): the
 * PTX operand names (PDB_WG_Rk: %k .. %(k + 31)) and the matching "+f"(d[k]) .. constraints. */
#define PDB_WG_R0 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PDB_WG_R32 \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PDB_WG_R64 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PDB_WG_R96 \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PDB_WG_F8(d, i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define PDB_WG_F32(d, i) PDB_WG_F8(d, i), PDB_WG_F8(d, i + 8), PDB_WG_F8(d, i + 16), PDB_WG_F8(d, i + 24)

#if PDB_WGMMA_DEVICE
/* Orders this thread's register writes (accumulators, A fragments) before the next wgmma reads them. */
static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* Waits until at most N committed groups are pending. */
template <int N> static __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to wgmma's reads. */
static __device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* d (+)= A (64 x 16, K-major, da) . B (16 x 64, K-major, db): the accumulator layout of thread
 * (warp w of the warpgroup, lane 4 g + t): d[4 j + e] = row 16 w + g + 8 (e >> 1), column 8 j + 2 t + (e & 1).
 * accumulate 0: d = A B. */
static __device__ __forceinline__ void wgmma_64x64_ss(float d[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 PDB_WG_R0
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : PDB_WG_F32(d, 0)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d (+)= A (64 x 16, K-major, da) . B (16 x 128, K-major, db), d as wgmma_64x64_ss's with j = 0 .. 15. */
static __device__ __forceinline__ void wgmma_64x128_ss(float d[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 PDB_WG_R0 ", " PDB_WG_R32
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : PDB_WG_F32(d, 0), PDB_WG_F32(d, 32)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d (+)= A (64 x 16, K-major, da) . B (16 x 256, K-major, db), d as wgmma_64x64_ss's with j = 0 .. 31. */
static __device__ __forceinline__ void wgmma_64x256_ss(float d[128], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 PDB_WG_R0 ", " PDB_WG_R32 ", " PDB_WG_R64 ", " PDB_WG_R96
                 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : PDB_WG_F32(d, 0), PDB_WG_F32(d, 32), PDB_WG_F32(d, 64), PDB_WG_F32(d, 96)
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d (+)= A (64 x 16 from registers: a[0..3] = rows g / g + 8, columns 2t, 2t + 1 / + 8, the
 * mma.sync m16n8k16 A fragment of warp w's rows 16 w ..) . B (16 x 256, N-major, db), d as above
 * with j = 0 .. 31. */
static __device__ __forceinline__ void wgmma_64x256_rs_tb(float d[128], const uint32_t a[4], uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 PDB_WG_R0 ", " PDB_WG_R32 ", " PDB_WG_R64 ", " PDB_WG_R96
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : PDB_WG_F32(d, 0), PDB_WG_F32(d, 32), PDB_WG_F32(d, 64), PDB_WG_F32(d, 96)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
/* d (+)= A (64 x 16 from registers, as wgmma_64x256_rs_tb's) . B (16 x 128, N-major, db: two 64-column regions
 * LBO apart), d as wgmma_64x64_ss's with j = 0 .. 15. */
static __device__ __forceinline__ void wgmma_64x128_rs_tb(float d[64], const uint32_t a[4], uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 PDB_WG_R0 ", " PDB_WG_R32
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : PDB_WG_F32(d, 0), PDB_WG_F32(d, 32)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
#endif

#endif
