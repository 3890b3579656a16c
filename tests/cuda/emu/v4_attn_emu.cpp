// v4_attn_emu: a host emulation of the V4 attention kernels of src/cuda/pdb_cuda_v4_attn.cu, for
// checking them on a machine without a GPU (not part of the build or the test suite; run.sh here
// extracts the kernels, builds this with g++ and runs shapes of tests/cuda/test_cuda_v4_attn.c).
// A block is 256 OS threads; __syncthreads and the warp collectives (__shfl_xor_sync, mma.sync
// m16n8k16, ldmatrix .x2.trans / .x4 / .x4.trans) are barriers over shared scratch, with the PTX
// fragment layouts; cp.async is a synchronous copy at issue (so a write-after-read race on a tile
// buffer would show, a read before cp_wait would not); bf16 rounding is emulated (nearest even).
// It compares the three kernels (f32, tc, tc16 on bf16-rounded keys) with a double-precision
// reference of the pdb_v4_attn_desc contract and prints max |o - ref| / max |ref|.
// Usage: v4_attn_emu KIND(0 sliding, 1 CSA, 2 HCA) nh hd W K rate lo p0 T
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
struct dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static float2 make_float2(float a, float b) { return {a, b}; }
static uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
template <class T> static T __ldg(const T *p) { return *p; }
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t b; memcpy(&b, &f, 4);
    __nv_bfloat16 r; r.x = (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16); return r;
}
static float __bfloat162float(__nv_bfloat16 h) { uint32_t b = (uint32_t)h.x << 16; float f; memcpy(&f, &b, 4); return f; }
static __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
static float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }

uint4 smem_tc[65536], smem_f32[65536], smem_t16[65536];
static std::barrier<> *blockbar;
static std::barrier<> *wbar[8];
static void __syncthreads() { blockbar->arrive_and_wait(); }
struct WS { float f[32]; uint32_t a[32][4], b[32][2]; const void *addr[32]; } ws[8];
static float __shfl_xor_sync(unsigned, float v, int m) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    ws[w].f[l] = v; wbar[w]->arrive_and_wait();
    float r = ws[w].f[l ^ m]; wbar[w]->arrive_and_wait();
    return r;
}
static uint32_t ld32(const __nv_bfloat16 *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static float lo(uint32_t v) { __nv_bfloat16 h{(uint16_t)(v & 0xFFFF)}; return __bfloat162float(h); }
static float hi(uint32_t v) { __nv_bfloat16 h{(uint16_t)(v >> 16)}; return __bfloat162float(h); }
static void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    ws[w].a[l][0] = a0; ws[w].a[l][1] = a1; ws[w].a[l][2] = a2; ws[w].a[l][3] = a3; ws[w].b[l][0] = b0; ws[w].b[l][1] = b1;
    wbar[w]->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int k = 0; k < 32; k++) {
        int g = k >> 2, t = k & 3;
        uint32_t *a = ws[w].a[k], *b = ws[w].b[k];
        A[g][2 * t] = lo(a[0]); A[g][2 * t + 1] = hi(a[0]);
        A[g + 8][2 * t] = lo(a[1]); A[g + 8][2 * t + 1] = hi(a[1]);
        A[g][2 * t + 8] = lo(a[2]); A[g][2 * t + 9] = hi(a[2]);
        A[g + 8][2 * t + 8] = lo(a[3]); A[g + 8][2 * t + 9] = hi(a[3]);
        B[2 * t][g] = lo(b[0]); B[2 * t + 1][g] = hi(b[0]);
        B[2 * t + 8][g] = lo(b[1]); B[2 * t + 9][g] = hi(b[1]);
    }
    wbar[w]->arrive_and_wait();
    int g = l >> 2, t = l & 3;
    for (int k = 0; k < 16; k++) {
        c[0] += A[g][k] * B[k][2 * t]; c[1] += A[g][k] * B[k][2 * t + 1];
        c[2] += A[g + 8][k] * B[k][2 * t]; c[3] += A[g + 8][k] * B[k][2 * t + 1];
    }
}
static void ldm_x2_trans(const __nv_bfloat16 *row_addr, uint32_t &b0, uint32_t &b1) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    ws[w].addr[l] = row_addr; wbar[w]->arrive_and_wait();
    int g = l >> 2, t = l & 3;
    const __nv_bfloat16 *r0 = (const __nv_bfloat16 *)ws[w].addr[2 * t], *r1 = (const __nv_bfloat16 *)ws[w].addr[2 * t + 1];
    const __nv_bfloat16 *s0 = (const __nv_bfloat16 *)ws[w].addr[8 + 2 * t], *s1 = (const __nv_bfloat16 *)ws[w].addr[8 + 2 * t + 1];
    b0 = (uint32_t)r0[g].x | (uint32_t)r1[g].x << 16;
    b1 = (uint32_t)s0[g].x | (uint32_t)s1[g].x << 16;
    wbar[w]->arrive_and_wait();
}
static void ldm_x4_any(const __nv_bfloat16 *row_addr, uint32_t r[4], bool trans) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    ws[w].addr[l] = row_addr; wbar[w]->arrive_and_wait();
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            const __nv_bfloat16 *row = (const __nv_bfloat16 *)ws[w].addr[8 * i + g];
            r[i] = (uint32_t)row[2 * t].x | (uint32_t)row[2 * t + 1].x << 16;
        } else {
            const __nv_bfloat16 *r0 = (const __nv_bfloat16 *)ws[w].addr[8 * i + 2 * t], *r1 = (const __nv_bfloat16 *)ws[w].addr[8 * i + 2 * t + 1];
            r[i] = (uint32_t)r0[g].x | (uint32_t)r1[g].x << 16;
        }
    }
    wbar[w]->arrive_and_wait();
}
static void ldm_x4(const __nv_bfloat16 *a, uint32_t r[4]) { ldm_x4_any(a, r, false); }
static void ldm_x4_trans(const __nv_bfloat16 *a, uint32_t r[4]) { ldm_x4_any(a, r, true); }
static void cp16(void *dst, const void *src, bool valid) { if (valid) memcpy(dst, src, 16); else memset(dst, 0, 16); }
static void cp_commit() {}
template <int N> static void cp_wait() {}
#include "kern.inc"

template <class F> static void run_grid(unsigned gx, unsigned gy, F f) {
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            std::barrier<> bb(256); blockbar = &bb;
            std::vector<std::barrier<> *> wb;
            for (int w = 0; w < 8; w++) wbar[w] = new std::barrier<>(32);
            std::vector<std::thread> th;
            for (int i = 0; i < 256; i++)
                th.emplace_back([=] { threadIdx.x = i; blockIdx.x = bx; blockIdx.y = by; f(); });
            for (auto &x : th) x.join();
            for (int w = 0; w < 8; w++) delete wbar[w];
        }
}

static uint64_t S = 1;
static float rf(float a, float b) { S = S * 6364136223846793005ull + 1442695040888963407ull; return a + (b - a) * (float)(S >> 40) / 16777216.0f; }

int main(int argc, char **argv) {
    int kind = atoi(argv[1]); // 0 sliding 1 csa 2 hca
    int64_t nh = atoll(argv[2]), hd = atoll(argv[3]), W = atoll(argv[4]), K = atoll(argv[5]), rate = atoll(argv[6]);
    int64_t lo = atoll(argv[7]), p0 = atoll(argv[8]), T = atoll(argv[9]);
    int64_t nkeys = p0 - lo + T, ncomp = kind == 1 ? std::max((p0 + T) / 4, 2 * K) : kind == 2 ? (p0 + T) / rate : 1;
    std::vector<float> q(T * nh * hd), keys(nkeys * hd), comp(ncomp * hd), sinks(nh), o1(T * nh * hd), o2(T * nh * hd), ref(T * nh * hd);
    for (auto &v : q) v = rf(-2, 2);
    for (auto &v : keys) v = rf(-1, 1);
    for (auto &v : comp) v = rf(-1, 1);
    for (auto &v : sinks) v = rf(-1, 3);
    std::vector<int32_t> sel(kind == 1 ? T * K : 1), nsel(T);
    if (kind == 1)
        for (int64_t t = 0; t < T; t++) {
            nsel[t] = t % 5 == 0 ? K : t % 7 == 3 ? 0 : (int)(rf(0, 1) * (K + 1)) % (K + 1);
            std::vector<int> perm(ncomp); for (int i = 0; i < ncomp; i++) perm[i] = i;
            for (int i = 0; i < K; i++) { int j = i + (int)(rf(0, 1) * (ncomp - i)) % (ncomp - i); std::swap(perm[i], perm[j]); sel[t * K + i] = perm[i]; }
        }
    float scale = 1.0f / sqrtf((float)hd);
    if (kind != 2) rate = 0;
    // reference (contract, double)
    for (int64_t t = 0; t < T; t++) {
        int64_t p = p0 + t, wlo = std::max(p - W + 1, lo), nw = p - wlo + 1, nc = kind == 1 ? nsel[t] : rate ? (p + 1) / rate : 0;
        for (int64_t h = 0; h < nh; h++) {
            std::vector<double> s(nw + nc);
            auto row = [&](int64_t i) { return i < nw ? &keys[(wlo - lo + i) * hd] : &comp[(kind == 1 ? sel[t * K + i - nw] : i - nw) * hd]; };
            double mx = sinks[h];
            for (int64_t i = 0; i < nw + nc; i++) { double a = 0; const float *k = row(i); for (int d = 0; d < hd; d++) a += (double)q[(t * nh + h) * hd + d] * k[d]; s[i] = a * scale; mx = std::max(mx, s[i]); }
            double den = exp(sinks[h] - mx);
            for (auto &v : s) { v = exp(v - mx); den += v; }
            for (int d = 0; d < hd; d++) { double a = 0; for (int64_t i = 0; i < nw + nc; i++) a += s[i] / den * row(i)[d]; ref[(t * nh + h) * hd + d] = (float)a; }
        }
    }
    v4_klist L = {keys.data(), comp.data(), kind == 1 ? sel.data() : nullptr, kind == 1 ? nsel.data() : nullptr, lo, K, rate, p0, W};
    // f32 launch params as launch_f32 computes them
    int64_t nmax = W + (kind == 1 ? K : rate > 0 ? (p0 + T) / rate : 0);
    int ncolt = hd < 256 ? (int)hd : 256, nsub = 256 / ncolt, sstride = (int)((nmax + 3) / 4 * 4);
    int hpt = (int)std::min<int64_t>(8, (nh + nsub - 1) / nsub), G = nsub * hpt;
    if (hd <= 256) run_grid((unsigned)T, (unsigned)((nh + G - 1) / G), [&] { k_v4_attn_f32<1>(L, q.data(), nh, (int)hd, G, hpt, nsub, sstride, sinks.data(), scale, o1.data()); });
    else run_grid((unsigned)T, (unsigned)((nh + G - 1) / G), [&] { k_v4_attn_f32<2>(L, q.data(), nh, (int)hd, G, hpt, nsub, sstride, sinks.data(), scale, o1.data()); });
    int nt = (int)(hd / 16);
    auto tc = [&](auto NTc) { constexpr int NT = decltype(NTc)::value; run_grid((unsigned)T, (unsigned)((nh + 63) / 64), [&] { k_v4_attn_tc<NT>(L, q.data(), nh, (int)hd, sinks.data(), scale, o2.data()); }); };
    if (nt <= 4) tc(std::integral_constant<int, 4>()); else if (nt <= 8) tc(std::integral_constant<int, 8>()); else if (nt <= 16) tc(std::integral_constant<int, 16>()); else tc(std::integral_constant<int, 32>());
    std::vector<__nv_bfloat16> k16(keys.size()), c16(comp.size());
    for (size_t i = 0; i < keys.size(); i++) k16[i] = __float2bfloat16_rn(keys[i]);
    for (size_t i = 0; i < comp.size(); i++) c16[i] = __float2bfloat16_rn(comp[i]);
    v4_klist16 L16 = {k16.data(), c16.data(), L.sel, L.nsel, lo, K, rate, p0, W};
    std::vector<float> o3(T * nh * hd);
    auto tc16 = [&](auto NTc) { constexpr int NT = decltype(NTc)::value; run_grid((unsigned)T, (unsigned)((nh + 63) / 64), [&] { k_v4_attn_tc16<NT>(L16, q.data(), nh, (int)hd, sinks.data(), scale, o3.data()); }); };
    if (nt <= 4) tc16(std::integral_constant<int, 4>()); else if (nt <= 8) tc16(std::integral_constant<int, 8>()); else if (nt <= 16) tc16(std::integral_constant<int, 16>()); else tc16(std::integral_constant<int, 32>());
    double e3 = 0;
    for (size_t i = 0; i < ref.size(); i++) { e3 = std::max(e3, (double)fabs(o3[i] - ref[i])); if (std::isnan(o3[i])) e3 = 1e9; }
    double mr = 0, e1 = 0, e2 = 0;
    for (size_t i = 0; i < ref.size(); i++) { mr = std::max(mr, (double)fabs(ref[i])); e1 = std::max(e1, (double)fabs(o1[i] - ref[i])); e2 = std::max(e2, (double)fabs(o2[i] - ref[i])); if (std::isnan(o1[i]) || std::isnan(o2[i])) e1 = e2 = 1e9; }
    printf("kind %d nh %lld hd %lld: f32 rel %.3e  tc rel %.3e  tc16 rel %.3e  (max|o| %.3f)\n", kind, (long long)nh, (long long)hd, e1 / mr, e2 / mr, e3 / mr, mr);
}
