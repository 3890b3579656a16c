/* pdb_cuda_mma: the tensor-core building blocks the bf16 kernels share (mma.sync m16n8k16 with
 * bf16 operands and f32 accumulation, ldmatrix fragment loads, cp.async 16-byte copies).
 * Internal header for .cu files. Invariant: each helper is one PTX instruction (or a fixed
 * sequence); none reorders or fuses arithmetic, so a kernel's order is the order it issues them. */
#ifndef PDB_CUDA_MMA_H
#define PDB_CUDA_MMA_H

#include <cuda_bf16.h>
#include <stdint.h>

static __device__ __forceinline__ uint32_t ld32(const __nv_bfloat16 *p) { return *(const uint32_t *)p; }

/* c += A (16x16, row) . B (16x8, col): a0..a3 and b0, b1 in the PTX fragment layout. */
static __device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Two 8x8 bf16 matrices loaded transposed (lanes 0..15 give the row addresses). */
static __device__ __forceinline__ void ldm_x2_trans(const __nv_bfloat16 *row_addr, uint32_t &b0, uint32_t &b1) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(a));
}

/* Four 8x8 bf16 matrices loaded transposed (lanes 8i..8i+7 give matrix i's row addresses). */
static __device__ __forceinline__ void ldm_x4_trans(const __nv_bfloat16 *row_addr, uint32_t r[4]) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* 2^x by the multi-function unit (ex2.approx.ftz: 2 ulp, subnormals flushed, 2^-inf = +0). */
static __device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Four 8x8 bf16 matrices (lanes 8i..8i+7 give matrix i's row addresses). */
static __device__ __forceinline__ void ldm_x4(const __nv_bfloat16 *row_addr, uint32_t r[4]) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Asynchronous 16-byte global -> shared copy (zero-filled when !valid: no bytes are read). */
static __device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
}
/* The same for 4 bytes (any float: no alignment beyond the element's). */
static __device__ __forceinline__ void cp4(void *dst, const void *src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n));
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* The two steps of one 64-key tile that the 64 x 64 tensor-core attention kernels share
 * (pdb_cuda_mla_tc.cu's k_mla_tc, pdb_cuda_v4_attn.cu's k_v4_attn_tc; 8 warps, warp w holding query
 * rows 16 (w % 4) .. +15 and score columns 32 (w / 4) .. +31 in sacc, lane = 4 g + t).
 * tc_store_scores: sacc * scale into Ss (row stride sld). */
static __device__ __forceinline__ void tc_store_scores(float *Ss, int sld, const float sacc[4][4], int wr, int wh, int g,
                                                       int t, float scale) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int col = 32 * wh + 8 * j + 2 * t, r = 16 * wr + g;
        Ss[r * sld + col] = sacc[j][0] * scale;
        Ss[r * sld + col + 1] = sacc[j][1] * scale;
        Ss[(r + 8) * sld + col] = sacc[j][2] * scale;
        Ss[(r + 8) * sld + col + 1] = sacc[j][3] * scale;
    }
}

/* tc_softmax_tile: the online softmax of query row srow over the tile's 64 columns, 4 threads per
 * row (part spart: columns 16 spart .. +15, combined by shuffles of lanes 1 and 2); columns >= lim
 * are masked (-inf, p = 0). P is rounded to bf16 into Ps (row stride pld) and the row sum adds the
 * rounded values, so O / l normalises exactly what is multiplied; part 0 updates the running max
 * m_s and sum l_s and leaves the rescale factor in c_s (0 while the row had no score; a fully
 * masked tile gives corr = exp(0) = 1 and p = 0: a live row's state stays bit-identical). */
static __device__ __forceinline__ void tc_softmax_tile(const float *Ss, int sld, __nv_bfloat16 *Ps, int pld, float *m_s,
                                                       float *l_s, float *c_s, int srow, int spart, int64_t lim) {
    float sv[16], mloc = -INFINITY;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        int col = spart * 16 + c;
        sv[c] = col < lim ? Ss[srow * sld + col] : -INFINITY;
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
        Ps[srow * pld + spart * 16 + c] = pb;
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
}

#endif
