/* test_cuda_v4_attn: the V4 attention kernels (pdb_cuda_v4_attention, f32 on CUDA cores,
 * pdb_cuda_v4_attention_tc, bf16 tensor cores, pdb_cuda_v4_attention_tc16, the same on bf16
 * key rows (the probe rounds the keys), and pdb_cuda_v4_attention_wg, tc16's math on warpgroup MMA
 * (hd 512 on sm_90a, else "unsupported"); src/cuda/pdb_cuda_v4_attn.cu) against the CPU
 * contract pdb_v4_attn_ref, through pdb_cuda_v4_attn_probe, on seeded random inputs of the three
 * layer kinds: sliding only, CSA (sel with random distinct entries, nsel varying incl. 0 and < K)
 * and HCA (rate 4 / 8), on small shapes (nh 4, 16, 64, 80; hd 64, 80, 128, 512; W 8, 40, 70;
 * key lists of 1 to 4 tiles of 64; lo > 0; pos0 > 0) and one V4-Flash-sized CSA case (nh 64,
 * hd 512, W 128, K 512, T 256, pos0 4096: 10 tiles). Asserted: max |o_gpu - o_ref| / max |o_ref|
 * <= 1e-5 (f32) and <= 1e-2 (the bf16 tensor-core paths; the host emulation, tests/cuda/emu,
 * gives <= 1e-6 and <= 3.6e-3 on its shapes, tc16's error = tc's to 4 digits); a chunked run (two launches
 * at p0 and p0 + T1) bit-identical to the one-shot run for every kernel; tc16's and wg's fused store (O's
 * rope dims rotated back, then f32 or bf16: the engine's wo_a operand) bit-identical to f32 O, then
 * heads_norm_rope (sign -1), then pdb_cuda_convert, on four shapes. Prints
 * "v4attn-metric ..." lines (errors, the V4-Flash case's GPU ms and TFLOP/s = 4 nh hd keys T / s
 * for tc, tc16 and wg, and their ratios).
 * Without a GPU (pdb_cuda_device_count() == 0) each GPU test prints "skipped: no GPU" and passes;
 * test_harness_cpu (the chunk split, on the reference alone) runs everywhere. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_cuda.h"
#include "pdb_cuda_v4_attn_probe.h"
#include "pdb_test_util.h"
#include "pdb_v4.h"

static int have_gpu(void) {
    char name[256];
    int n = pdb_cuda_device_count(name, sizeof name);
    if (n > 0) printf("cuda device: %s\n", name);
    else printf("skipped: no GPU\n");
    return n > 0;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
/* uniform in [a, b) */
static float rng_f(uint64_t *s, float a, float b) { return a + (b - a) * (float)rng_next(s) / 2147483648.0f; }

enum { KIND_SLIDING = 0, KIND_CSA = 1, KIND_HCA = 2 };

typedef struct v4case {
    pdb_v4_attn_desc d;
    float *q, *keys, *comp, *sinks, *o;
    int32_t *sel;
    int64_t *nsel;
} v4case;

static void case_make(v4case *c, int kind, int64_t nh, int64_t hd, int64_t W, int64_t K, int64_t rate, int64_t lo,
                      int64_t p0, int64_t T, uint64_t seed, int full_sel) {
    memset(c, 0, sizeof *c);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    int64_t nkeys = p0 - lo + T, ncomp = 0;
    if (kind == KIND_CSA) ncomp = (p0 + T) / 4 > 2 * K ? (p0 + T) / 4 : 2 * K;
    if (kind == KIND_HCA) ncomp = (p0 + T) / rate;
    c->q = malloc(sizeof(float) * (size_t)(T * nh * hd));
    c->keys = malloc(sizeof(float) * (size_t)(nkeys * hd));
    c->comp = malloc(sizeof(float) * (size_t)((ncomp > 0 ? ncomp : 1) * hd));
    c->sinks = malloc(sizeof(float) * (size_t)nh);
    c->o = calloc((size_t)(T * nh * hd), sizeof(float));
    assert_true(c->q && c->keys && c->comp && c->sinks && c->o);
    for (int64_t i = 0; i < T * nh * hd; i++) c->q[i] = rng_f(&s, -2.0f, 2.0f);
    for (int64_t i = 0; i < nkeys * hd; i++) c->keys[i] = rng_f(&s, -1.0f, 1.0f);
    for (int64_t i = 0; i < ncomp * hd; i++) c->comp[i] = rng_f(&s, -1.0f, 1.0f);
    for (int64_t h = 0; h < nh; h++) c->sinks[h] = rng_f(&s, -1.0f, 3.0f);
    if (kind == KIND_CSA) {
        c->sel = malloc(sizeof(int32_t) * (size_t)(T * K));
        c->nsel = malloc(sizeof(int64_t) * (size_t)T);
        int *used = calloc((size_t)ncomp, sizeof(int));
        assert_true(c->sel && c->nsel && used);
        for (int64_t t = 0; t < T; t++) {
            int64_t ns = full_sel ? K : t % 5 == 0 ? K : t % 7 == 3 ? 0 : (int64_t)(rng_next(&s) % (uint64_t)(K + 1));
            c->nsel[t] = ns;
            memset(used, 0, sizeof(int) * (size_t)ncomp);
            for (int64_t i = 0; i < K; i++) {
                int64_t e;
                do e = (int64_t)(rng_next(&s) % (uint64_t)ncomp); while (used[e]);
                used[e] = 1;
                c->sel[t * K + i] = (int32_t)e;
            }
        }
        free(used);
    }
    c->d = (pdb_v4_attn_desc){.T = T, .nh = nh, .hd = hd, .p0 = p0, .lo = lo, .W = W, .q = c->q, .keys = c->keys,
                              .comp = c->comp, .n_comp = ncomp, .rate = kind == KIND_HCA ? rate : 0, .sel = c->sel,
                              .nsel = c->nsel, .K = kind == KIND_CSA ? K : 0, .sinks = c->sinks,
                              .scale = 1.0f / sqrtf((float)hd), .o = c->o};
}

static void case_free(v4case *c) {
    free(c->q); free(c->keys); free(c->comp); free(c->sinks); free(c->o); free(c->sel); free(c->nsel);
}

/* max |a - b| / max |ref| */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double mx = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        mx = e > mx || isnan(e) ? e : mx;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    return mr > 0 ? mx / mr : mx;
}

/* d on the CPU reference (tc < 0) or a kernel (0 f32, 1 tensor cores, 2 tensor cores on bf16 keys). */
static void run_desc(const pdb_v4_attn_desc *d, int tc) {
    if (tc < 0) PDB_TEST_OK(pdb_v4_attn_ref(d, NULL));
    else PDB_TEST_OK(pdb_cuda_v4_attn_probe(d, tc, NULL));
}

/* c in two runs (tokens 0..T1-1, then T1..T-1) into out. */
static void run_chunked(const v4case *c, int tc, int64_t T1, float *out) {
    pdb_v4_attn_desc a = c->d, b = c->d;
    int64_t row = c->d.nh * c->d.hd;
    a.T = T1;
    a.o = out;
    b.T = c->d.T - T1;
    b.p0 = c->d.p0 + T1;
    b.q = c->d.q + T1 * row;
    b.o = out + T1 * row;
    if (c->sel) { b.sel = c->sel + T1 * c->d.K; b.nsel = c->nsel + T1; }
    run_desc(&a, tc);
    run_desc(&b, tc);
}

static const char *const kname[4] = {"f32", "tc", "tc16", "wg"};

/* ref vs f32 vs tc vs tc16 vs wg (the tensor-core paths when they fit), the chunked runs bit-identical
 * to the one-shot; returns the kernels' ms through tc_ms[0..3] when asked (0: unsupported). */
static void check_case(const char *name, v4case *c, double *tc_ms, int chunk_check) {
    int64_t n = c->d.T * c->d.nh * c->d.hd;
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    float *chk = malloc(sizeof(float) * (size_t)n);
    assert_true(ref && got && chk);
    pdb_v4_attn_desc d = c->d;
    d.o = ref;
    PDB_TEST_OK(pdb_v4_attn_ref(&d, NULL));
    for (int tc = 0; tc < 4; tc++) {
        d = c->d;
        d.o = got;
        double ms = 0;
        pdb_status st = pdb_cuda_v4_attn_probe(&d, tc, &ms);
        if (tc && st == PDB_UNSUPPORTED) {
            printf("v4attn-metric %s %s: unsupported (%s)\n", name, kname[tc], pdb_err_msg());
            continue;
        }
        if (st) fail_msg("%s %s: %s: %s", name, kname[tc], pdb_status_str(st), pdb_err_msg());
        double e = rel_err(got, ref, n);
        printf("v4attn-metric %s %s: max_rel_err %.3e gpu_ms %.4f\n", name, kname[tc], e, ms);
        if (tc_ms) tc_ms[tc] = ms;
        if (tc) assert_true(e <= 1e-2);
        else assert_true(e <= 1e-5);
        if (chunk_check) {
            run_chunked(c, tc, c->d.T / 3 + 1, chk);
            int64_t diff = 0;
            for (int64_t i = 0; i < n; i++) diff += memcmp(chk + i, got + i, 4) != 0;
            printf("v4attn-metric %s %s: chunked vs one-shot differing %lld\n", name, kname[tc], (long long)diff);
            assert_int_equal(diff, 0);
        }
    }
    free(ref);
    free(got);
    free(chk);
}

/* Without a GPU too: the harness's chunk split is right (the reference chunked = one shot). */
static void test_harness_cpu(void **state) {
    (void)state;
    const int kinds[3] = {KIND_SLIDING, KIND_CSA, KIND_HCA};
    for (int k = 0; k < 3; k++) {
        v4case c;
        case_make(&c, kinds[k], 16, 64, 8, 6, 4, 3, 21, 40, 41 + (uint64_t)k, 0);
        int64_t n = c.d.T * c.d.nh * c.d.hd;
        float *chk = malloc(sizeof(float) * (size_t)n);
        assert_true(chk != NULL);
        run_desc(&c.d, -1);
        run_chunked(&c, -1, 14, chk);
        assert_memory_equal(chk, c.o, sizeof(float) * (size_t)n);
        free(chk);
        case_free(&c);
    }
}

static void test_sliding(void **state) {
    (void)state;
    if (!have_gpu()) return;
    v4case c;
    case_make(&c, KIND_SLIDING, 4, 64, 8, 0, 0, 0, 5, 40, 1, 0);
    check_case("sliding nh4 hd64 lo0", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_SLIDING, 16, 128, 8, 0, 0, 13, 20, 41, 2, 0);
    check_case("sliding nh16 hd128 lo13", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_SLIDING, 80, 64, 8, 0, 0, 2, 6, 37, 3, 0);
    check_case("sliding nh80 hd64 lo2", &c, NULL, 1);
    case_free(&c);
    /* hd 512 (the warpgroup kernel's): two head blocks, one partial; a window of 3 tiles */
    case_make(&c, KIND_SLIDING, 96, 512, 150, 0, 0, 9, 170, 30, 4, 0);
    check_case("sliding nh96 hd512 W150 lo9", &c, NULL, 1);
    case_free(&c);
}

static void test_csa(void **state) {
    (void)state;
    if (!have_gpu()) return;
    v4case c;
    case_make(&c, KIND_CSA, 4, 64, 8, 4, 0, 0, 9, 40, 11, 0);
    check_case("csa nh4 hd64 K4", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_CSA, 16, 128, 8, 16, 0, 7, 30, 40, 12, 0);
    check_case("csa nh16 hd128 K16 lo7", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_CSA, 16, 64, 8, 13, 0, 1, 3, 39, 13, 0);
    check_case("csa nh16 hd64 K13 lo1", &c, NULL, 1);
    case_free(&c);
    /* several key tiles (the tc paths' pipelines) with nsel varying, and hd 512 over two head blocks */
    case_make(&c, KIND_CSA, 64, 128, 40, 200, 0, 3, 90, 40, 14, 0);
    check_case("csa nh64 hd128 W40 K200 lo3", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_CSA, 80, 512, 70, 150, 0, 5, 200, 24, 15, 0);
    check_case("csa nh80 hd512 W70 K150 lo5", &c, NULL, 1);
    case_free(&c);
}

static void test_hca(void **state) {
    (void)state;
    if (!have_gpu()) return;
    v4case c;
    case_make(&c, KIND_HCA, 4, 64, 8, 0, 4, 0, 17, 40, 21, 0);
    check_case("hca nh4 hd64 r4", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_HCA, 16, 128, 8, 0, 8, 5, 100, 40, 22, 0);
    check_case("hca nh16 hd128 r8 lo5", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_HCA, 80, 128, 8, 0, 4, 3, 400, 40, 23, 0);
    check_case("hca nh80 hd128 r4 lo3", &c, NULL, 1);
    case_free(&c);
    /* hd 80: an odd number of n8 output tiles per warp, 10 16-byte chunks per key row */
    case_make(&c, KIND_HCA, 16, 80, 8, 0, 4, 3, 300, 40, 24, 0);
    check_case("hca nh16 hd80 r4 lo3", &c, NULL, 1);
    case_free(&c);
    case_make(&c, KIND_HCA, 64, 512, 20, 0, 4, 2, 500, 33, 25, 0);
    check_case("hca nh64 hd512 W20 r4 lo2", &c, NULL, 1);
    case_free(&c);
}

/* tc16's and wg's fused store (inverse RoPE then f32 or bf16) = f32 O, heads_norm_rope (sign -1), convert: bit for
 * bit (wg: the hd 512 cases). */
static void test_rope_out(void **state) {
    (void)state;
    if (!have_gpu()) return;
    struct { int kind; int64_t nh, hd, W, K, rate, lo, p0, T, rd; } cases[] = {
        {KIND_SLIDING, 16, 128, 8, 0, 0, 13, 20, 41, 64},
        {KIND_CSA, 80, 512, 70, 150, 0, 5, 200, 24, 64},
        {KIND_HCA, 16, 80, 8, 0, 4, 3, 300, 40, 16},
        {KIND_HCA, 64, 512, 20, 0, 4, 2, 500, 33, 64},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        v4case c;
        case_make(&c, cases[k].kind, cases[k].nh, cases[k].hd, cases[k].W, cases[k].K, cases[k].rate, cases[k].lo, cases[k].p0,
                  cases[k].T, 51 + (uint64_t)k, 0);
        const int64_t rd = cases[k].rd, P = c.d.p0 + c.d.T;
        float *cs = malloc(sizeof(float) * (size_t)(P * rd));
        assert_true(cs != NULL);
        for (int64_t p = 0; p < P; p++)
            for (int64_t i = 0; i < rd / 2; i++) {
                double a = (double)p * pow(10000.0, -2.0 * (double)i / (double)rd);
                cs[p * rd + 2 * i] = (float)cos(a);
                cs[p * rd + 2 * i + 1] = (float)sin(a);
            }
        for (int tc = 2; tc < 4; tc++) {
            int64_t d16 = -1, d32 = -1;
            pdb_status st = pdb_cuda_v4_attn_probe_rope_out(&c.d, tc, cs, rd, &d16, &d32);
            if (tc == 3 && st == PDB_UNSUPPORTED) {
                printf("v4attn-metric rope-out case %zu wg: unsupported (%s)\n", k, pdb_err_msg());
                continue;
            }
            PDB_TEST_OK(st);
            printf("v4attn-metric rope-out case %zu %s: differing bf16 %lld f32 %lld of %lld\n", k, kname[tc], (long long)d16,
                   (long long)d32, (long long)(c.d.T * c.d.nh * c.d.hd));
            assert_int_equal(d16, 0);
            assert_int_equal(d32, 0);
        }
        free(cs);
        case_free(&c);
    }
}

static void test_v4_flash_size(void **state) {
    (void)state;
    if (!have_gpu()) return;
    v4case c;
    const int64_t nh = 64, hd = 512, W = 128, K = 512, T = 256, p0 = 4096;
    case_make(&c, KIND_CSA, nh, hd, W, K, 0, 0, p0, T, 31, 1);
    double ms[4] = {0, 0, 0, 0};
    check_case("v4flash nh64 hd512 W128 K512 T256", &c, ms, 1);
    const double flop = 4.0 * (double)nh * (double)hd * (double)(W + K) * (double)T;
    for (int k = 1; k < 4; k++)
        if (ms[k] > 0)
            printf("v4attn-metric v4flash %s: %.4f ms, %.1f TFLOP/s\n", kname[k], ms[k], flop / (ms[k] * 1e-3) / 1e12);
    if (ms[1] > 0 && ms[2] > 0) printf("v4attn-metric v4flash tc16 / tc speedup %.2fx\n", ms[1] / ms[2]);
    if (ms[2] > 0 && ms[3] > 0) printf("v4attn-metric v4flash wg / tc16 speedup %.2fx\n", ms[2] / ms[3]);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness_cpu),
        cmocka_unit_test(test_sliding),
        cmocka_unit_test(test_csa),
        cmocka_unit_test(test_hca),
        cmocka_unit_test(test_rope_out),
        cmocka_unit_test(test_v4_flash_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
