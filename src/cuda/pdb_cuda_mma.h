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

/* Eight bf16 pairs from two 16-byte pieces through f (float, float -> float), each result rounded to
 * nearest even: lane k of the result = bf16(f(a_k, b_k)). The 8-wide elementwise kernels share it. */
template <class F> static __device__ __forceinline__ uint4 bf16x8_map2(uint4 av, uint4 bv, F f) {
    const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&av, *b2 = (const __nv_bfloat162 *)&bv;
    uint4 ov;
    __nv_bfloat162 *o2 = (__nv_bfloat162 *)&ov;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 a = __bfloat1622float2(a2[j]), b = __bfloat1622float2(b2[j]);
        o2[j] = __floats2bfloat162_rn(f(a.x, b.x), f(a.y, b.y));
    }
    return ov;
}

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

/* The maxima of a thread's two rows over a key tile of 8 NJ keys (s as tile_softmax's) and the quad's
 * other threads, each folded into *mx_lo / *mx_hi from the value it holds (in order: its columns, then
 * the quad by two xor shuffles). */
template <int NJ = 8> static __device__ __forceinline__ void tile_row_max(const float *s, float *mx_lo, float *mx_hi) {
    float lo = *mx_lo, hi = *mx_hi;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        lo = fmaxf(lo, fmaxf(s[4 * j], s[4 * j + 1]));
        hi = fmaxf(hi, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    lo = fmaxf(lo, __shfl_xor_sync(0xffffffffu, lo, 1));
    lo = fmaxf(lo, __shfl_xor_sync(0xffffffffu, lo, 2));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, 1));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, 2));
    *mx_lo = lo;
    *mx_hi = hi;
}

/* Keys past each row's position set to -inf in a thread's scores of a tile of 8 NJ keys from key kb (s
 * as tile_softmax's; rows at positions qp_lo, qp_hi; t = lane % 4). */
template <int NJ = 8>
static __device__ __forceinline__ void tile_causal_mask(float *s, int64_t kb, int64_t qp_lo, int64_t qp_hi, int t) {
    const int rl_lo = qp_lo - kb > 8 * NJ ? 8 * NJ : (int)(qp_lo - kb), rl_hi = qp_hi - kb > 8 * NJ ? 8 * NJ : (int)(qp_hi - kb);
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (8 * j + 2 * t + (e & 1) > (e < 2 ? rl_lo : rl_hi)) s[4 * j + e] = -INFINITY;
}

/* One key tile's step (8 NJ keys) of the causal softmax (base 2) for a thread's two rows lo (g) and hi (g + 8) of
 * the m16n8 accumulator layout: s[4 j + e] (j < NJ n8 tiles; e 0, 1 row lo, 2, 3 row hi, columns 2t,
 * 2t + 1; masked keys -inf, raw score units). The rows' maxima over the quad; the correction c of the
 * running max m (1 exactly when it does not move; 2^-inf = 0 on the first tile); P = 2^(s scale2 -
 * m scale2) rounded to bf16 into p[2 j] (lo) and p[2 j + 1] (hi), which are the m16n8k16 A fragments of
 * the P V product (k-step kk = p[4 kk] .. p[4 kk + 3]); l = l c + this thread's sum of those bf16 P
 * (the quad's sum is taken once, at the end). */
template <int NJ = 8>
static __device__ __forceinline__ void tile_softmax(const float *s, float scale2, float *m_lo, float *m_hi, float *l_lo,
                                                    float *l_hi, float *c_lo, float *c_hi, uint32_t *p) {
    float mx_lo = *m_lo, mx_hi = *m_hi;
    tile_row_max<NJ>(s, &mx_lo, &mx_hi);
    *c_lo = mx_lo == *m_lo ? 1.0f : ex2_approx((*m_lo - mx_lo) * scale2);
    *c_hi = mx_hi == *m_hi ? 1.0f : ex2_approx((*m_hi - mx_hi) * scale2);
    const float b_lo = -mx_lo * scale2, b_hi = -mx_hi * scale2;
    *m_lo = mx_lo;
    *m_hi = mx_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const float *v = s + 4 * j;
        __nv_bfloat162 plo = __floats2bfloat162_rn(ex2_approx(fmaf(v[0], scale2, b_lo)), ex2_approx(fmaf(v[1], scale2, b_lo)));
        __nv_bfloat162 phi = __floats2bfloat162_rn(ex2_approx(fmaf(v[2], scale2, b_hi)), ex2_approx(fmaf(v[3], scale2, b_hi)));
        const float2 flo = __bfloat1622float2(plo), fhi = __bfloat1622float2(phi);
        sum_lo += flo.x + flo.y;
        sum_hi += fhi.x + fhi.y;
        p[2 * j] = *(uint32_t *)&plo;
        p[2 * j + 1] = *(uint32_t *)&phi;
    }
    *l_lo = *l_lo * *c_lo + sum_lo;
    *l_hi = *l_hi * *c_hi + sum_hi;
}

#endif
