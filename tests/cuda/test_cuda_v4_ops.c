/* test_cuda_v4_ops: the DeepSeek-V4 engine's non-attention kernels (src/cuda/pdb_cuda_v4_ops.cu,
 * through the host-array probes of pdb_cuda_v4_probe.h) against plain C references written here
 * from pdb_cuda_v4_kernels.h's spec (routing: the CPU's own pdb_v4_route), on seeded random
 * inputs of small and V4-Flash-like sizes: embed_hc (bf16 / f32), hc_pre (hc 2 / 4, H 64 / 4096,
 * Sinkhorn 1 / 20 iterations; and the engine's form, hc_mix then hc_pre_mixed, over 1 to 3 blocks of 64
 * tokens, its bf16 copy of x exactly x rounded and its low half x - x16 rounded), hc_post, hc_head,
 * heads_norm_rope (every mode, both signs, padded rows; nh 64, hd 512, rd 64; bf16 rows in, f32 or bf16 out: bit for bit the f32 rows' results, rounded for
 * bf16), compress (CSA r 4 coff 2, HCA r 128 coff 1, dims 32 / 128 / 512),
 * index_reduce (untouched rows included), topk (ties at the threshold, nv <= K rows, nv 3000 / K
 * 512, a 128K prompt's rows (32K keys) and 50,000 in shared memory,
 * one row of 262144 keys from global memory), route (each scoring, bias, hash) and swiglu (clipped or not, f32 /
 * bf16; bf16 g, u in: bit for bit the f32 inputs' results on the same values). Floats: |gpu - ref| <= rtol |ref| + atol max|ref| per array; integers exactly. Without a
 * GPU (pdb_cuda_device_count() == 0) each probe must fail with a message, and the GPU checks print
 * "skipped: no GPU" and pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_config.h"
#include "pdb_cuda.h"
#include "pdb_cuda_v4_probe.h"
#include "pdb_test_cuda.h"
#include "pdb_test_util.h"
#include "pdb_v4.h"

/* ---------------------------------------- helpers ---------------------------------------- */

static uint32_t rng = 12345u;
static float frand(void) { /* [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}
static uint32_t urand(uint32_t n) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
}
static float *frandv(int64_t n, float scale) {
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}
static float *fzero(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* |g - w| <= rtol |w| + atol * max|w| for every element; prints the worst errors. */
static void check_close(const char *what, const float *g, const float *w, int64_t n, double rtol, double atol) {
    double mx = 0, worst_abs = 0, worst_rel = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)w[i]));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - (double)w[i]);
        if (!(d <= rtol * fabs((double)w[i]) + atol * mx)) {
            if (first < 0) first = i;
            bad++;
        }
        worst_abs = fmax(worst_abs, d);
        if (w[i] != 0) worst_rel = fmax(worst_rel, d / fabs((double)w[i]));
    }
    printf("  %-40s n %8lld  max|ref| %.3g  max abs err %.3g  max rel err %.3g  bad %lld\n", what, (long long)n, mx,
           worst_abs, worst_rel, (long long)bad);
    if (bad) fail_msg("%s: %lld of %lld values off (first at %lld: gpu %.9g, ref %.9g)", what, (long long)bad, (long long)n,
                      (long long)first, (double)g[first], (double)w[first]);
}

static void check_int_eq(const char *what, const int32_t *g, const int32_t *w, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (g[i] != w[i]) fail_msg("%s: element %lld: gpu %d, ref %d", what, (long long)i, g[i], w[i]);
    printf("  %-40s n %8lld  exact\n", what, (long long)n);
}

static float ref_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* RoPE table cs [P, rd] (any values of the interleaved (cos, sin) form, attention factor 0.9). */
static float *rope_table(int64_t P, int64_t rd) {
    float *cs = malloc(sizeof(float) * (size_t)(P * rd > 0 ? P * rd : 1));
    for (int64_t p = 0; p < P; p++)
        for (int64_t i = 0; i < rd / 2; i++) {
            float f = powf(10000.0f, -2.0f * (float)i / (float)rd), a = f * (float)p;
            cs[p * rd + 2 * i] = cosf(a) * 0.9f;
            cs[p * rd + 2 * i + 1] = sinf(a) * 0.9f;
        }
    return cs;
}

static void ref_rope(float *v, const float *c, int64_t rd, int sign) {
    for (int64_t i = 0; i < rd / 2; i++) {
        float a = v[2 * i], b = v[2 * i + 1], co = c[2 * i], sn = sign < 0 ? -c[2 * i + 1] : c[2 * i + 1];
        v[2 * i] = a * co - b * sn;
        v[2 * i + 1] = a * sn + b * co;
    }
}

static void ref_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w ? w[i] * (x[i] * r) : x[i] * r;
}

static void ref_softmax(float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) { x[i] = (float)exp((double)(x[i] - m)); s += x[i]; }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static uint16_t f2bf(float f) {
    union { float f; uint32_t u; } v = {f};
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}
static float bf2f(uint16_t b) {
    union { uint32_t u; float f; } v = {(uint32_t)b << 16};
    return v.f;
}

/* ---------------------------------------- no GPU ---------------------------------------- */

static void test_without_gpu(void **st) {
    (void)st;
    if (pdb_test_have_gpu()) { printf("a GPU is present: the no-GPU error paths are not exercised\n"); return; }
    float g[4] = {1, 2, 3, 4}, u[4] = {1, 1, 1, 1}, o[4] = {0};
    pdb_status s = pdb_cuda_v4_probe_swiglu(g, u, 4, 0.0f, 0, o);
    printf("probe without a GPU: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_not_equal(s, PDB_OK);
    assert_int_equal(s, pdb_cuda_built() ? PDB_CUDA : PDB_UNSUPPORTED);
    assert_true(strlen(pdb_err_msg()) > 10);
    assert_true(o[0] == 0.0f);
    printf("skipped: no GPU (GPU checks of this test)\n");
}

/* ---------------------------------------- embed ---------------------------------------- */

static void test_embed_hc(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    for (int bf = 0; bf < 2; bf++) {
        const int64_t V = 50, H = 300, hc = 4, n = 7;
        float *embf = frandv(V * H, 2.0f);
        uint16_t *embb = malloc(sizeof(uint16_t) * (size_t)(V * H));
        for (int64_t i = 0; i < V * H; i++) embb[i] = f2bf(embf[i]);
        int32_t ids[7];
        pdb_test_ids(ids, n, V, 77u);
        float *hs = fzero(n * hc * H), *ref = fzero(n * hc * H);
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < hc; k++)
                for (int64_t d = 0; d < H; d++)
                    ref[(t * hc + k) * H + d] = bf ? bf2f(embb[ids[t] * H + d]) : embf[ids[t] * H + d];
        PDB_TEST_OK(pdb_cuda_v4_probe_embed_hc(ids, bf ? (const void *)embb : (const void *)embf, bf, V, n, hc, H, hs));
        check_close(bf ? "embed_hc bf16" : "embed_hc f32", hs, ref, n * hc * H, 0, 0);
        free(embf), free(embb), free(hs), free(ref);
    }
}

/* ---------------------------------------- hyper-connections ---------------------------------------- */

/* The header's hc_pre (pdb_v4.c hc_norm / hc_mixes / hc_finish + the sub-block's norm) for one token. */
static void ref_hc_pre1(int64_t hc, int64_t H, int iters, float hc_eps, double eps, const float *hs, const float *fn,
                        const float *base, const float *scale, const float *norm, float *x, float *post, float *comb) {
    int64_t N = hc * H, nm = (2 + hc) * hc;
    float *tmp = fzero(N), mix[80], pre[8];
    ref_rmsnorm(tmp, hs, NULL, N, eps);
    for (int64_t j = 0; j < nm; j++) {
        double s = 0;
        for (int64_t i = 0; i < N; i++) s += (double)fn[j * N + i] * tmp[i];
        mix[j] = (float)s;
    }
    for (int64_t k = 0; k < hc; k++) {
        pre[k] = ref_sigmoid(mix[k] * scale[0] + base[k]) + hc_eps;
        if (post) post[k] = 2.0f * ref_sigmoid(mix[hc + k] * scale[1] + base[hc + k]);
    }
    if (comb) {
        for (int64_t i = 0; i < hc; i++) {
            for (int64_t j = 0; j < hc; j++) comb[i * hc + j] = mix[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
            ref_softmax(comb + i * hc, hc);
            for (int64_t j = 0; j < hc; j++) comb[i * hc + j] += hc_eps;
        }
        for (int it = 0; it < iters; it++) {
            if (it > 0)
                for (int64_t i = 0; i < hc; i++) {
                    double s = 0;
                    for (int64_t j = 0; j < hc; j++) s += comb[i * hc + j];
                    float d = (float)s + hc_eps;
                    for (int64_t j = 0; j < hc; j++) comb[i * hc + j] /= d;
                }
            for (int64_t j = 0; j < hc; j++) {
                double s = 0;
                for (int64_t i = 0; i < hc; i++) s += comb[i * hc + j];
                float d = (float)s + hc_eps;
                for (int64_t i = 0; i < hc; i++) comb[i * hc + j] /= d;
            }
        }
    }
    for (int64_t d = 0; d < H; d++) {
        double s = 0;
        for (int64_t k = 0; k < hc; k++) s += (double)pre[k] * hs[k * H + d];
        x[d] = (float)s;
    }
    ref_rmsnorm(x, x, norm, H, eps);
    free(tmp);
}

/* mixed 0: the header's hc_pre; 1: the engine's form (pdb_cuda_v4_hc_mix, then hc_pre_mixed with x's bf16
 * copy and its low half), whose x16 must be x rounded to nearest even bit for bit and x16lo x - x16 so
 * rounded. */
static void run_hc_pre(int64_t hc, int64_t H, int iters, int64_t n, int mixed) {
    const int64_t N = hc * H, nm = (2 + hc) * hc;
    const float hc_eps = 1e-6f;
    const double eps = 1e-6;
    float *hs = frandv(n * N, 2.0f), *fn = frandv(nm * N, 0.05f), *base = frandv(nm, 1.0f), *norm = frandv(H, 1.0f);
    float scale[3] = {0.7f, 0.4f, 1.3f};
    float *x = fzero(n * H), *post = fzero(n * hc), *comb = fzero(n * hc * hc);
    float *rx = fzero(n * H), *rpost = fzero(n * hc), *rcomb = fzero(n * hc * hc);
    uint16_t *x16 = calloc((size_t)(n * H), sizeof(uint16_t)), *x16lo = calloc((size_t)(n * H), sizeof(uint16_t));
    assert_non_null(x16);
    assert_non_null(x16lo);
    for (int64_t t = 0; t < n; t++)
        ref_hc_pre1(hc, H, iters, hc_eps, eps, hs + t * N, fn, base, scale, norm, rx + t * H, rpost + t * hc,
                    rcomb + t * hc * hc);
    if (mixed)
        PDB_TEST_OK(pdb_cuda_v4_probe_hc_pre_mixed(hc, H, iters, hc_eps, eps, hs, n, fn, base, scale, norm, x, x16, x16lo, post, comb));
    else PDB_TEST_OK(pdb_cuda_v4_probe_hc_pre(hc, H, iters, hc_eps, eps, hs, n, fn, base, scale, norm, x, post, comb));
    const char *form = mixed ? "hc_pre (mixed)" : "hc_pre";
    char what[96];
    printf(" %s hc %lld H %lld iters %d n %lld\n", form, (long long)hc, (long long)H, iters, (long long)n);
    snprintf(what, sizeof what, "%s x", form);
    check_close(what, x, rx, n * H, 2e-5, 2e-6);
    snprintf(what, sizeof what, "%s post", form);
    check_close(what, post, rpost, n * hc, 2e-5, 1e-6);
    snprintf(what, sizeof what, "%s comb", form);
    check_close(what, comb, rcomb, n * hc * hc, 2e-5, 1e-6);
    if (mixed) {
        int64_t bad = 0, badlo = 0, lo_nonzero = 0;
        for (int64_t i = 0; i < n * H; i++) {
            bad += x16[i] != f2bf(x[i]);
            badlo += x16lo[i] != f2bf(x[i] - bf2f(x16[i])); /* the difference is exact in f32 */
            lo_nonzero += x16lo[i] != 0;
        }
        printf(" hc_pre (mixed) x16 %lld and x16lo %lld of %lld values off; %lld low halves not zero\n", (long long)bad,
               (long long)badlo, (long long)(n * H), (long long)lo_nonzero);
        assert_int_equal(bad, 0);
        assert_int_equal(badlo, 0);
        assert_true(lo_nonzero > 0);
        /* f32 x left out (the bf16 engine's MoE site): the same bf16 halves, post and comb at V4-Flash's shape,
         * refused elsewhere */
        uint16_t *y16 = calloc((size_t)(n * H), sizeof(uint16_t)), *y16lo = calloc((size_t)(n * H), sizeof(uint16_t));
        float *ypost = fzero(n * hc), *ycomb = fzero(n * hc * hc);
        assert_non_null(y16), assert_non_null(y16lo);
        pdb_status sx = pdb_cuda_v4_probe_hc_pre_mixed(hc, H, iters, hc_eps, eps, hs, n, fn, base, scale, norm, NULL, y16, y16lo,
                                                       ypost, ycomb);
        if (hc == 4 && H == 4096) {
            PDB_TEST_OK(sx);
            assert_memory_equal(y16, x16, sizeof(uint16_t) * (size_t)(n * H));
            assert_memory_equal(y16lo, x16lo, sizeof(uint16_t) * (size_t)(n * H));
            assert_memory_equal(ypost, post, sizeof(float) * (size_t)(n * hc));
            assert_memory_equal(ycomb, comb, sizeof(float) * (size_t)(n * hc * hc));
            printf(" hc_pre (mixed) without f32 x: the same bf16 halves, post and comb\n");
        } else
            assert_int_equal(sx, PDB_INVALID);
        free(y16), free(y16lo), free(ypost), free(ycomb);
    }
    free(hs), free(fn), free(base), free(norm), free(x), free(post), free(comb), free(rx), free(rpost), free(rcomb);
    free(x16), free(x16lo);
}

static void test_hc_pre(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    run_hc_pre(2, 64, 1, 3, 0);
    run_hc_pre(3, 100, 5, 2, 0);
    run_hc_pre(4, 4096, 20, 4, 0);
    run_hc_pre(8, 512, 20, 2, 0);
    run_hc_pre(2, 64, 5, 3, 1);
    run_hc_pre(4, 64, 20, 70, 1);
    run_hc_pre(4, 4096, 20, 131, 1);
}

static void test_hc_post(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t cases[2][3] = {{2, 70, 3}, {4, 4096, 5}};
    for (int c = 0; c < 2; c++) {
        int64_t hc = cases[c][0], H = cases[c][1], n = cases[c][2];
        float *hs = frandv(n * hc * H, 2.0f), *out = frandv(n * H, 1.0f), *post = frandv(n * hc, 1.0f);
        float *comb = frandv(n * hc * hc, 1.0f), *ref = fzero(n * hc * H);
        for (int64_t t = 0; t < n; t++)
            for (int64_t d = 0; d < H; d++)
                for (int64_t k = 0; k < hc; k++) {
                    double s = (double)post[t * hc + k] * out[t * H + d];
                    for (int64_t j = 0; j < hc; j++) s += (double)comb[(t * hc + j) * hc + k] * hs[(t * hc + j) * H + d];
                    ref[(t * hc + k) * H + d] = (float)s;
                }
        PDB_TEST_OK(pdb_cuda_v4_probe_hc_post(hc, H, hs, out, post, comb, n));
        printf(" hc_post hc %lld H %lld n %lld\n", (long long)hc, (long long)H, (long long)n);
        check_close("hc_post hs", hs, ref, n * hc * H, 1e-6, 1e-7);
        free(hs), free(out), free(post), free(comb), free(ref);
    }
}

/* The MoE post-site (combine inside): against the combine then hc_post on the host; bf16 ye rows give the
 * bits of f32 rows holding the same values; bf16 rows outside the hc-4 form are refused. */
static void test_hc_post_moe(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t cases[2][3] = {{4, 4096, 5}, {2, 70, 3}};
    for (int c = 0; c < 2; c++) {
        const int64_t hc = cases[c][0], H = cases[c][1], n = cases[c][2], K = 3, slots = n * K + 4;
        float *hs = frandv(n * hc * H, 2.0f), *ye = frandv(slots * H, 1.0f), *wt = frandv(n * K, 1.0f);
        float *sh = frandv(n * H, 1.0f), *post = frandv(n * hc, 1.0f), *comb = frandv(n * hc * hc, 1.0f);
        float *ref = fzero(n * hc * H), *h32 = fzero(n * hc * H), *h16 = fzero(n * hc * H);
        uint16_t *ye16 = malloc(sizeof(uint16_t) * (size_t)(slots * H));
        int32_t *slot = malloc(sizeof(int32_t) * (size_t)(n * K));
        assert_non_null(ye16), assert_non_null(slot);
        for (int64_t i = 0; i < slots * H; i++) ye[i] = bf2f(ye16[i] = f2bf(ye[i])); /* bf16-valued rows */
        for (int64_t i = 0; i < n * K; i++) slot[i] = (int32_t)((i * 7 + 3) % slots);
        for (int64_t t = 0; t < n; t++)
            for (int64_t d = 0; d < H; d++) {
                float o = 0.0f;
                for (int64_t k = 0; k < K; k++) o += ye[(int64_t)slot[t * K + k] * H + d] * wt[t * K + k];
                o += sh[t * H + d];
                for (int64_t k = 0; k < hc; k++) {
                    double s = (double)post[t * hc + k] * o;
                    for (int64_t j = 0; j < hc; j++) s += (double)comb[(t * hc + j) * hc + k] * hs[(t * hc + j) * H + d];
                    ref[(t * hc + k) * H + d] = (float)s;
                }
            }
        memcpy(h32, hs, sizeof(float) * (size_t)(n * hc * H));
        memcpy(h16, hs, sizeof(float) * (size_t)(n * hc * H));
        PDB_TEST_OK(pdb_cuda_v4_probe_hc_post_moe(hc, H, h32, ye, 0, slots, slot, wt, sh, K, post, comb, n));
        check_close("hc_post (moe) hs", h32, ref, n * hc * H, 1e-5, 1e-6);
        pdb_status s16 = pdb_cuda_v4_probe_hc_post_moe(hc, H, h16, ye16, 1, slots, slot, wt, sh, K, post, comb, n);
        if (hc == 4) {
            PDB_TEST_OK(s16);
            assert_memory_equal(h16, h32, sizeof(float) * (size_t)(n * hc * H));
        } else
            assert_int_equal(s16, PDB_UNSUPPORTED);
        printf(" hc_post (moe) hc %lld H %lld n %lld: bf16 rows %s\n", (long long)hc, (long long)H, (long long)n,
               hc == 4 ? "identical to f32 rows of the same values" : "refused outside hc 4");
        free(hs), free(ye), free(wt), free(sh), free(post), free(comb), free(ref), free(h32), free(h16), free(ye16), free(slot);
    }
}

static void test_hc_head(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t cases[2][2] = {{2, 64}, {4, 4096}};
    for (int c = 0; c < 2; c++) {
        int64_t hc = cases[c][0], H = cases[c][1], N = hc * H, nrows = 3, n = 2, rows[2] = {2, 0};
        float *hs = frandv(nrows * N, 2.0f), *fn = frandv(hc * N, 0.05f), *base = frandv(hc, 1.0f), *norm = frandv(H, 1.0f);
        float scale[1] = {0.8f}, *y = fzero(n * H), *ref = fzero(n * H);
        for (int64_t i = 0; i < n; i++) { /* hc_pre's pre and x with only the first hc mixes (hc_head) */
            const float *h = hs + rows[i] * N;
            float *tmp = fzero(N), pre[8];
            ref_rmsnorm(tmp, h, NULL, N, 1e-6);
            for (int64_t k = 0; k < hc; k++) {
                double s = 0;
                for (int64_t j = 0; j < N; j++) s += (double)fn[k * N + j] * tmp[j];
                pre[k] = ref_sigmoid((float)s * scale[0] + base[k]) + 1e-6f;
            }
            for (int64_t d = 0; d < H; d++) {
                double s = 0;
                for (int64_t k = 0; k < hc; k++) s += (double)pre[k] * h[k * H + d];
                ref[i * H + d] = (float)s;
            }
            ref_rmsnorm(ref + i * H, ref + i * H, norm, H, 1e-6);
            free(tmp);
        }
        PDB_TEST_OK(pdb_cuda_v4_probe_hc_head(hc, H, 1e-6f, 1e-6, hs, nrows, rows, n, fn, base, scale, norm, y));
        printf(" hc_head hc %lld H %lld\n", (long long)hc, (long long)H);
        check_close("hc_head y", y, ref, n * H, 2e-5, 2e-6);
        free(hs), free(fn), free(base), free(norm), free(y), free(ref);
    }
}

/* ---------------------------------------- heads ---------------------------------------- */

static void run_heads(int64_t n, int64_t nh, int64_t hd, int64_t rd, int64_t pad, int mode, int sign, int64_t pos0) {
    const int64_t ld = nh * hd + pad;
    const double eps = 1e-6;
    float *x = frandv(n * ld, 3.0f), *ref = malloc(sizeof(float) * (size_t)(n * ld)), *w = frandv(hd, 1.5f);
    float *cs = rope_table(pos0 + n, rd);
    memcpy(ref, x, sizeof(float) * (size_t)(n * ld));
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            float *v = ref + t * ld + h * hd;
            if (mode) ref_rmsnorm(v, v, mode == 2 ? w : NULL, hd, eps);
            ref_rope(v + hd - rd, cs + (pos0 + t) * rd, rd, sign);
        }
    PDB_TEST_OK(pdb_cuda_v4_probe_heads_norm_rope(x, ld, n, nh, hd, rd, mode, mode == 2 ? w : NULL, cs, pos0, sign, eps));
    char what[96];
    snprintf(what, sizeof what, "heads n%lld nh%lld hd%lld rd%lld m%d s%+d", (long long)n, (long long)nh, (long long)hd,
             (long long)rd, mode, sign);
    check_close(what, x, ref, n * ld, 1e-5, 1e-6);
    free(x), free(ref), free(w), free(cs);
}

/* bf16 rows in (the bf16 engine's q_b products): the f32 path on the same (bf16-representable) values,
 * bit for bit, into packed heads; the bf16 output is those f32 results rounded to nearest even. */
static void run_heads16(int64_t n, int64_t nh, int64_t hd, int64_t rd, int64_t pad, int mode, int sign, int64_t pos0) {
    const int64_t ld = nh * hd + pad, ldd = nh * hd;
    const double eps = 1e-6;
    float *x = frandv(n * ld, 3.0f), *w = frandv(hd, 1.5f), *cs = rope_table(pos0 + n, rd), *y = fzero(n * ldd);
    uint16_t *x16 = malloc(sizeof(uint16_t) * (size_t)(n * ld)), *y16 = malloc(sizeof(uint16_t) * (size_t)(n * ldd));
    assert_non_null(x16), assert_non_null(y16);
    for (int64_t i = 0; i < n * ld; i++) x[i] = bf2f(x16[i] = f2bf(x[i]));
    PDB_TEST_OK(pdb_cuda_v4_probe_heads_norm_rope_in16(x16, ld, n, nh, hd, rd, mode, mode == 2 ? w : NULL, cs, pos0, sign, eps,
                                                       0, y));
    PDB_TEST_OK(pdb_cuda_v4_probe_heads_norm_rope_in16(x16, ld, n, nh, hd, rd, mode, mode == 2 ? w : NULL, cs, pos0, sign, eps,
                                                       1, y16));
    PDB_TEST_OK(pdb_cuda_v4_probe_heads_norm_rope(x, ld, n, nh, hd, rd, mode, mode == 2 ? w : NULL, cs, pos0, sign, eps));
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < ldd; j++) {
            const float f = x[t * ld + j], g = y[t * ldd + j];
            if (memcmp(&f, &g, sizeof f))
                fail_msg("heads bf16 in m%d s%+d (%lld, %lld): %.9g, f32 rows %.9g", mode, sign, (long long)t, (long long)j,
                         (double)g, (double)f);
            if (y16[t * ldd + j] != f2bf(f))
                fail_msg("heads bf16 in/out m%d s%+d (%lld, %lld): %04x, f32 rows rounded %04x", mode, sign, (long long)t,
                         (long long)j, y16[t * ldd + j], f2bf(f));
        }
    if (hd % 256 == 0) { /* those ran 8 values a lane; f32 rows one value apart (ld + 1: one value a lane) give the same bits */
        const int64_t ld1 = ld + 1;
        float *x1 = fzero(n * ld1);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < ld; j++) x1[t * ld1 + j] = bf2f(x16[t * ld + j]);
        PDB_TEST_OK(pdb_cuda_v4_probe_heads_norm_rope(x1, ld1, n, nh, hd, rd, mode, mode == 2 ? w : NULL, cs, pos0, sign, eps));
        for (int64_t t = 0; t < n; t++)
            assert_memory_equal(x1 + t * ld1, y + t * ldd, sizeof(float) * (size_t)ldd);
        printf(" heads hd %lld: 16-byte rows and one value a lane identical\n", (long long)hd);
        free(x1);
    }
    free(x), free(w), free(cs), free(y), free(x16), free(y16);
}

static void test_heads_norm_rope(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    for (int mode = 0; mode < 3; mode++)
        for (int sign = -1; sign <= 1; sign += 2) {
            run_heads(5, 3, 64, 16, 0, mode, sign, 7);
            run_heads(3, 2, 40, 10, 5, mode, sign, 0); /* padded rows, rd not a multiple of 32 */
            run_heads16(3, 2, 40, 10, 5, mode, sign, 0);
        }
    run_heads(4, 64, 512, 64, 0, 1, 1, 1000);
    run_heads(4, 64, 512, 64, 0, 0, -1, 1000);
    run_heads(2, 64, 512, 64, 0, 2, 1, 33);
    run_heads16(4, 64, 512, 64, 8192, 1, 1, 1000); /* the engine's q heads: rows of q_b with the indexer's part beside */
    run_heads16(4, 64, 128, 64, 0, 0, 1, 1000);    /* the indexer's heads */
    run_heads16(3, 4, 256, 64, 0, 2, -1, 5);       /* 16-byte rows with the weighted norm and the inverse rotation */
}

/* ---------------------------------------- compress ---------------------------------------- */

static void ref_compress(const float *kv, const float *gate, int64_t ld, int64_t e0, const float *ape, const float *norm,
                         int64_t r, int64_t dim, int coff, int64_t w0, int64_t w1, const float *cs, int64_t rd, double eps,
                         float *out) {
    int64_t D = coff * dim;
    float *e = fzero(dim);
    for (int64_t w = w0; w < w1; w++) {
        for (int64_t d = 0; d < dim; d++) {
            /* the slots' (gate + ape, kv) in the order of the header: window w-1's first halves
             * then window w's second halves (CSA, w > 0), interleaved by slot j as pdb_v4.c adds them */
            int prev = coff == 2 && w > 0;
            int64_t off = coff == 2 ? dim : 0;
            float mx = -INFINITY;
            for (int64_t j = 0; j < r; j++) {
                if (prev) {
                    int64_t p = (w - 1) * r + j;
                    mx = fmaxf(mx, gate[(p - e0) * ld + d] + ape[(p % r) * D + d]);
                }
                int64_t p = w * r + j;
                mx = fmaxf(mx, gate[(p - e0) * ld + off + d] + ape[(p % r) * D + off + d]);
            }
            double den = 0, num = 0;
            for (int64_t j = 0; j < r; j++) {
                if (prev) {
                    int64_t p = (w - 1) * r + j;
                    double ex = exp((double)(gate[(p - e0) * ld + d] + ape[(p % r) * D + d]) - mx);
                    den += ex;
                    num += ex * kv[(p - e0) * ld + d];
                }
                int64_t p = w * r + j;
                double ex = exp((double)(gate[(p - e0) * ld + off + d] + ape[(p % r) * D + off + d]) - mx);
                den += ex;
                num += ex * kv[(p - e0) * ld + off + d];
            }
            e[d] = (float)(num / den);
        }
        ref_rmsnorm(e, e, norm, dim, eps);
        ref_rope(e + dim - rd, cs + w * r * rd, rd, 1);
        memcpy(out + w * dim, e, sizeof(float) * (size_t)dim);
    }
    free(e);
}

static void run_compress(int64_t r, int64_t dim, int coff, int64_t w0, int64_t w1, int64_t rd, int64_t pad) {
    const int64_t D = coff * dim, ld = D + pad, e0 = coff == 2 && w0 > 0 ? (w0 - 1) * r : w0 * r, nrows = w1 * r - e0;
    float *kv = frandv(nrows * ld, 2.0f), *gate = frandv(nrows * ld, 3.0f), *ape = frandv(r * D, 1.0f);
    float *norm = frandv(dim, 1.5f), *cs = rope_table(w1 * r, rd);
    float *out = fzero(w1 * dim), *ref = fzero(w1 * dim);
    ref_compress(kv, gate, ld, e0, ape, norm, r, dim, coff, w0, w1, cs, rd, 1e-6, ref);
    PDB_TEST_OK(pdb_cuda_v4_probe_compress(kv, gate, nrows, ld, e0, ape, norm, r, dim, coff, w0, w1, cs, rd, 1e-6, out));
    char what[96];
    snprintf(what, sizeof what, "compress r%lld dim%lld coff%d w %lld..%lld", (long long)r, (long long)dim, coff,
             (long long)w0, (long long)w1);
    check_close(what, out, ref, w1 * dim, 2e-5, 2e-6); /* rows < w0 stay 0 in both */
    free(kv), free(gate), free(ape), free(norm), free(cs), free(out), free(ref);
}

static void test_compress(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    run_compress(4, 32, 2, 0, 5, 8, 0);   /* entry 0: no previous window */
    run_compress(4, 32, 2, 3, 9, 8, 3);
    run_compress(4, 32, 1, 2, 6, 8, 0);
    run_compress(4, 512, 2, 5, 40, 64, 0); /* CSA, head_dim */
    run_compress(4, 128, 2, 1, 30, 64, 0); /* CSA's indexer keys */
    run_compress(128, 512, 1, 0, 3, 64, 0); /* HCA */
    run_compress(128, 512, 1, 2, 4, 64, 0);
}

/* ---------------------------------------- indexer ---------------------------------------- */

static void test_index_reduce(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t cases[3][6] = {/* n, nih, pos0, r, K, pad */ {6, 4, 0, 1, 3, 2}, {5, 64, 11995, 4, 512, 7},
                                 {3, 64, 1000, 4, 2048, 0}};
    for (int c = 0; c < 3; c++) {
        int64_t n = cases[c][0], nih = cases[c][1], pos0 = cases[c][2], r = cases[c][3], K = cases[c][4];
        int64_t nvmax = (pos0 + n) / r, ld = nvmax + cases[c][5], lds = nvmax + 3;
        float *dots = frandv(n * nih * ld, 2.0f), *wt = frandv(n * nih, 0.125f), *score = fzero(n * lds), *ref = fzero(n * lds);
        for (int64_t i = 0; i < n * lds; i++) score[i] = ref[i] = 42.0f; /* untouched where nv_t <= K */
        float sscale = 1.0f / sqrtf(128.0f);
        for (int64_t t = 0; t < n; t++) {
            int64_t nv = (pos0 + t + 1) / r;
            if (nv <= K) continue;
            for (int64_t w = 0; w < nv; w++) {
                float acc = 0.0f;
                for (int64_t h = 0; h < nih; h++) {
                    float dv = dots[(t * nih + h) * ld + w];
                    acc += wt[t * nih + h] * (dv > 0 ? dv : 0.0f);
                }
                ref[t * lds + w] = sscale * acc;
            }
        }
        PDB_TEST_OK(pdb_cuda_v4_probe_index_reduce(dots, ld, wt, n, nih, pos0, r, K, sscale, score, lds));
        char what[96];
        snprintf(what, sizeof what, "index_reduce n%lld nih%lld nv<=%lld K%lld", (long long)n, (long long)nih,
                 (long long)nvmax, (long long)K);
        check_close(what, score, ref, n * lds, 1e-5, 1e-6);
        free(dots), free(wt), free(score), free(ref);
    }
}

static const float *cmp_sc;
static int cmp_best(const void *a, const void *b) { /* score descending, then index ascending */
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (cmp_sc[i] != cmp_sc[j]) return cmp_sc[i] > cmp_sc[j] ? -1 : 1;
    return (i > j) - (i < j);
}
static int cmp_i32(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return (i > j) - (i < j);
}

static void ref_topk(const float *score, int64_t lds, int64_t n, int64_t pos0, int64_t r, int64_t K, int32_t *sel,
                     int32_t *nsel) {
    for (int64_t t = 0; t < n; t++) {
        int64_t nv = (pos0 + t + 1) / r;
        if (nv <= K) {
            for (int64_t i = 0; i < nv; i++) sel[t * K + i] = (int32_t)i;
            nsel[t] = (int32_t)nv;
            continue;
        }
        int32_t *all = malloc(sizeof(int32_t) * (size_t)nv);
        for (int64_t i = 0; i < nv; i++) all[i] = (int32_t)i;
        cmp_sc = score + t * lds;
        qsort(all, (size_t)nv, sizeof(int32_t), cmp_best);
        qsort(all, (size_t)K, sizeof(int32_t), cmp_i32);
        memcpy(sel + t * K, all, sizeof(int32_t) * (size_t)K);
        nsel[t] = (int32_t)K;
        free(all);
    }
}

/* kind 0: random floats; 1: few distinct values (ties at the threshold), with -0 and +0; 2: all equal. */
static void run_topk(int64_t n, int64_t pos0, int64_t r, int64_t K, int kind) {
    int64_t nvmax = (pos0 + n) / r, lds = nvmax + 1;
    float *score = fzero(n * lds);
    for (int64_t i = 0; i < n * lds; i++) {
        if (kind == 0) score[i] = frand() * 10.0f;
        else if (kind == 1) {
            int q = (int)urand(9) - 4; /* -1 .. 1 in steps of 0.25 */
            score[i] = q == 0 ? (urand(2) ? 0.0f : -0.0f) : (float)q * 0.25f;
        } else score[i] = 1.5f;
    }
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)(n * K)), *rsel = malloc(sizeof(int32_t) * (size_t)(n * K));
    int32_t *nsel = malloc(sizeof(int32_t) * (size_t)n), *rn = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n * K; i++) sel[i] = rsel[i] = -7;
    ref_topk(score, lds, n, pos0, r, K, rsel, rn);
    PDB_TEST_OK(pdb_cuda_v4_probe_topk(score, lds, n, pos0, r, K, sel, nsel));
    char what[96];
    snprintf(what, sizeof what, "topk n%lld nv<=%lld K%lld kind%d nsel", (long long)n, (long long)nvmax, (long long)K, kind);
    check_int_eq(what, nsel, rn, n);
    snprintf(what, sizeof what, "topk n%lld nv<=%lld K%lld kind%d sel", (long long)n, (long long)nvmax, (long long)K, kind);
    check_int_eq(what, sel, rsel, n * K);
    free(score), free(sel), free(rsel), free(nsel), free(rn);
}

static void test_topk(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    for (int kind = 0; kind < 3; kind++) {
        run_topk(20, 0, 1, 8, kind);          /* rows with nv <= K and nv > K */
        run_topk(8, 11992, 4, 512, kind);     /* nv 2998 .. 3000 (V4-Flash: K 512) */
        run_topk(3, 4 * 5000, 4, 2048, kind); /* K 2048 */
    }
    run_topk(16, 131072 - 16, 4, 512, 0); /* a 128K prompt's last rows: 32K keys in shared memory */
    run_topk(16, 131072 - 16, 4, 512, 1);
    run_topk(4, 4 * 50000, 4, 512, 0);    /* 200 KB of keys in shared memory */
    run_topk(1, 262143, 1, 512, 0); /* one row of 262144 keys (read from global memory) */
    run_topk(1, 262143, 1, 512, 1);
}

/* ---------------------------------------- route ---------------------------------------- */

static void run_route(int E, int K, int scoring, int hash, int with_bias, int64_t n) {
    const int64_t V = 100;
    pdb_config cf;
    memset(&cf, 0, sizeof cf);
    cf.n_routed_experts = E;
    cf.num_experts_per_tok = K;
    cf.scoring_func = (pdb_v4_score)scoring;
    cf.routed_scaling_factor = 1.5;
    pdb_v4_layer ly;
    memset(&ly, 0, sizeof ly);
    float *lg = fzero(n * E), *ref = fzero(n * E), *bias = with_bias ? fzero(E) : NULL;
    int32_t *tid2eid = hash ? malloc(sizeof(int32_t) * (size_t)(V * K)) : NULL, ids[64];
    pdb_test_ids(ids, n, V, 99u);
    for (int64_t i = 0; i < n * E; i++) lg[i] = ref[i] = (float)((int)urand(64) - 32) / 8.0f; /* ties */
    for (int64_t e = 0; bias && e < E; e++) bias[e] = (float)((int)urand(8) - 4) / 16.0f;
    for (int64_t i = 0; hash && i < V * K; i++) tid2eid[i] = (int32_t)urand((uint32_t)E);
    ly.hash = hash;
    ly.tid2eid = tid2eid;
    ly.gate_bias = bias;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n * K)), *ridx = malloc(sizeof(int32_t) * (size_t)(n * K));
    float *wt = fzero(n * K), *rwt = fzero(n * K);
    int64_t i64[16];
    for (int64_t t = 0; t < n; t++) {
        pdb_v4_route(&cf, &ly, ids[t], ref + t * E, i64, rwt + t * K);
        for (int k = 0; k < K; k++) ridx[t * K + k] = (int32_t)i64[k];
    }
    PDB_TEST_OK(pdb_cuda_v4_probe_route(lg, ids, tid2eid, V, bias, n, E, K, scoring, 1.5f, idx, wt));
    char what[96];
    snprintf(what, sizeof what, "route E%d K%d scoring%d hash%d bias%d idx", E, K, scoring, hash, with_bias);
    check_int_eq(what, idx, ridx, n * K);
    snprintf(what, sizeof what, "route E%d K%d scoring%d hash%d bias%d scores", E, K, scoring, hash, with_bias);
    check_close(what, lg, ref, n * E, 1e-5, 1e-7);
    snprintf(what, sizeof what, "route E%d K%d scoring%d hash%d bias%d wt", E, K, scoring, hash, with_bias);
    check_close(what, wt, rwt, n * K, 1e-5, 1e-7);
    free(lg), free(ref), free(bias), free(tid2eid), free(idx), free(ridx), free(wt), free(rwt);
}

static void test_route(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    for (int scoring = 0; scoring < 3; scoring++) {
        run_route(256, 6, scoring, 0, 1, 9);
        run_route(256, 6, scoring, 0, 0, 9);
        run_route(256, 6, scoring, 1, 0, 9);
        run_route(1024, 16, scoring, 0, 1, 3);
        run_route(5, 2, scoring, 0, 1, 4);
    }
}

/* ---------------------------------------- swiglu ---------------------------------------- */

static void test_swiglu(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t n = 100003;
    float *g = frandv(n, 12.0f), *u = frandv(n, 12.0f), *ref = fzero(n), *out = fzero(n);
    uint16_t *ob = malloc(sizeof(uint16_t) * (size_t)n);
    for (int li = 0; li < 2; li++) {
        float limit = li ? 7.0f : 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float a = g[i], b = u[i];
            if (limit > 0) {
                a = fminf(a, limit);
                b = fminf(fmaxf(b, -limit), limit);
            }
            ref[i] = a / (1.0f + expf(-a)) * b;
        }
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu(g, u, n, limit, 0, out));
        check_close(li ? "swiglu f32 limit 7" : "swiglu f32", out, ref, n, 2e-6, 1e-8);
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu(g, u, n, limit, 1, ob));
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++) {
            int d = (int)ob[i] - (int)f2bf(ref[i]);
            if (d < -1 || d > 1) fail_msg("swiglu bf16 %lld: gpu %04x ref %04x", (long long)i, ob[i], f2bf(ref[i]));
            diff += d != 0;
        }
        printf("  swiglu bf16 limit %g: %lld of %lld differ by one ulp\n", limit, (long long)diff, (long long)n);
        assert_true(diff * 1000 <= n); /* only where the f32 value sits on a rounding boundary */
    }
    /* bf16 g, u (the bf16 engine's products): the f32 inputs' results on the same values, bit for bit */
    uint16_t *g16 = malloc(sizeof(uint16_t) * (size_t)n), *u16 = malloc(sizeof(uint16_t) * (size_t)n);
    uint16_t *ob16 = malloc(sizeof(uint16_t) * (size_t)n);
    float *out16 = fzero(n);
    assert_non_null(g16), assert_non_null(u16), assert_non_null(ob16);
    for (int64_t i = 0; i < n; i++) g[i] = bf2f(g16[i] = f2bf(g[i])), u[i] = bf2f(u16[i] = f2bf(u[i]));
    for (int li = 0; li < 2; li++) {
        float limit = li ? 7.0f : 0.0f;
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu(g, u, n, limit, 0, out));
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu(g, u, n, limit, 1, ob));
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu_in16(g16, u16, n, limit, 0, out16));
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu_in16(g16, u16, n, limit, 1, ob16));
        assert_memory_equal(out16, out, sizeof(float) * (size_t)n);
        assert_memory_equal(ob16, ob, sizeof(uint16_t) * (size_t)n);
        /* a count of 8s (the 16-byte kernel, k_swiglu8): the same bits */
        const int64_t n8 = n / 8 * 8;
        memset(ob16, 0, sizeof(uint16_t) * (size_t)n);
        PDB_TEST_OK(pdb_cuda_v4_probe_swiglu_in16(g16, u16, n8, limit, 1, ob16));
        assert_memory_equal(ob16, ob, sizeof(uint16_t) * (size_t)n8);
        printf("  swiglu bf16 g, u limit %g: f32 and bf16 outputs identical to the f32 inputs' (count %lld and %lld)\n", limit,
               (long long)n, (long long)n8);
    }
    free(g), free(u), free(ref), free(out), free(ob), free(g16), free(u16), free(ob16), free(out16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_gpu), cmocka_unit_test(test_embed_hc),  cmocka_unit_test(test_hc_pre),
        cmocka_unit_test(test_hc_post),     cmocka_unit_test(test_hc_post_moe), cmocka_unit_test(test_hc_head),   cmocka_unit_test(test_heads_norm_rope),
        cmocka_unit_test(test_compress),    cmocka_unit_test(test_index_reduce), cmocka_unit_test(test_topk),
        cmocka_unit_test(test_route),       cmocka_unit_test(test_swiglu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
