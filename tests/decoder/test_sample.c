/* test_sample: the sampler: greedy ties go to the lowest index, same seed -> same tokens,
 * top_k / top_p never pick outside their set, temperature shapes the distribution as softmax;
 * pdb_math_argmax (vector form where the CPU has one) equals the one-scan definition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "pdb_math.h"
#include "pdb_sample.h"

static void test_greedy(void **state) {
    (void)state;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, NAN};
    pdb_sample_params p = {0};
    pdb_sample_rng r, r0;
    pdb_sample_rng_init(&r, 1);
    r0 = r;
    assert_int_equal(pdb_sample_next_token(l, 6, &p, &r), 1);
    assert_memory_equal(&r, &r0, sizeof r); /* greedy draws nothing */
    float all_nan[3] = {NAN, NAN, NAN};
    assert_int_equal(pdb_sample_next_token(all_nan, 3, &p, &r), 0);
    float one[1] = {3};
    p.temperature = 0.7f;
    assert_int_equal(pdb_sample_next_token(one, 1, &p, &r), 0);
}

/* the definition: one scan that moves on a larger value or off a NaN */
static int64_t argmax_ref(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

static void test_argmax_matches_scan(void **state) {
    (void)state;
    static const float pick[] = {NAN, 0.0f, -0.0f, 1.0f, -1.0f, 3.5f, -INFINITY, INFINITY, 2.0f, 2.0f};
    float x[300];
    uint32_t r = 7;
    int cases = 0;
    for (int n = 1; n <= 300; n += (n < 40 ? 1 : 13))
        for (int trial = 0; trial < 40; trial++, cases++) {
            int mode = trial % 4; /* 0: spread values, 1: few values (ties, zeros, NaN), 2: all NaN, 3: NaN head */
            for (int i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                x[i] = mode == 0 ? (float)(int)(r >> 8) / 65536.0f - 128.0f : pick[(r >> 24) % (mode == 1 ? 10 : 7)];
                if (mode == 2) x[i] = NAN;
                if (mode == 3 && i < n / 2) x[i] = NAN;
            }
            assert_int_equal(pdb_math_argmax(x, n), argmax_ref(x, n));
        }
    assert_true(cases > 1000);
}

static void fill(float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)sin(i * 1.7) * 3.0f;
}

static void test_deterministic(void **state) {
    (void)state;
    enum { N = 1000, T = 200 };
    float l[N];
    int32_t a[T], b[T];
    pdb_sample_params cases[4] = {{0.8f, 1.0f, 0, 0}, {1.0f, 0.9f, 0, 0}, {1.3f, 1.0f, 50, 0}, {1.0f, 0.7f, 20, 0}};
    for (int c = 0; c < 4; c++) {
        pdb_sample_rng r1, r2;
        pdb_sample_rng_init(&r1, 42);
        pdb_sample_rng_init(&r2, 42);
        for (int t = 0; t < T; t++) { fill(l, N); a[t] = pdb_sample_next_token(l, N, &cases[c], &r1); }
        for (int t = 0; t < T; t++) { fill(l, N); b[t] = pdb_sample_next_token(l, N, &cases[c], &r2); }
        assert_memory_equal(a, b, sizeof a);
        int distinct = 0;
        for (int t = 1; t < T; t++) distinct += a[t] != a[0];
        assert_true(distinct > 0); /* it does sample */
    }
    pdb_sample_rng r1, r2;
    pdb_sample_rng_init(&r1, 1);
    pdb_sample_rng_init(&r2, 2);
    assert_true(memcmp(&r1, &r2, sizeof r1) != 0);
}

static void test_top_k_top_p_sets(void **state) {
    (void)state;
    enum { N = 64 };
    float l[N];
    pdb_sample_rng r;
    pdb_sample_rng_init(&r, 9);
    /* top_k = 3: only the three largest logits (ids 10, 20, 30) */
    pdb_sample_params pk = {1.0f, 1.0f, 3, 0};
    for (int t = 0; t < 500; t++) {
        for (int i = 0; i < N; i++) l[i] = 0;
        l[10] = 5; l[20] = 5.5f; l[30] = 4.5f;
        int32_t id = pdb_sample_next_token(l, N, &pk, &r);
        assert_true(id == 10 || id == 20 || id == 30);
    }
    /* top_p: probs 0.5, 0.3, 0.2 (rest ~0): top_p 0.75 keeps the first two */
    pdb_sample_params pp = {1.0f, 0.75f, 0, 0};
    int seen[N] = {0};
    for (int t = 0; t < 2000; t++) {
        for (int i = 0; i < N; i++) l[i] = -1e9f;
        l[3] = logf(0.5f); l[7] = logf(0.3f); l[1] = logf(0.2f);
        seen[pdb_sample_next_token(l, N, &pp, &r)]++;
    }
    assert_int_equal(seen[3] + seen[7], 2000);
    assert_true(seen[3] > 1100 && seen[3] < 1400); /* 0.5 / 0.8 = 0.625 */
    /* top_k with ties keeps the lowest ids */
    pdb_sample_params pt = {1.0f, 1.0f, 2, 0};
    for (int t = 0; t < 200; t++) {
        for (int i = 0; i < N; i++) l[i] = 1.0f;
        int32_t id = pdb_sample_next_token(l, N, &pt, &r);
        assert_true(id == 0 || id == 1);
    }
}

static void test_temperature_distribution(void **state) {
    (void)state;
    float l[2];
    pdb_sample_rng r;
    pdb_sample_rng_init(&r, 5);
    pdb_sample_params p = {2.0f, 1.0f, 0, 0};
    int c1 = 0;
    for (int t = 0; t < 20000; t++) {
        l[0] = 0; l[1] = 2.0f * logf(3.0f); /* at T=2: odds 3:1 */
        c1 += pdb_sample_next_token(l, 2, &p, &r) == 1;
    }
    assert_true(c1 > 14600 && c1 < 15400);
}

/* log-softmax in double, index order: exact against a direct computation; the alternatives are
 * descending with ties by lowest id; -inf logits give -inf; equal logits give equal numbers. */
static void test_logprobs(void **state) {
    (void)state;
    float l[6] = {1.0f, 3.0f, -INFINITY, 3.0f, 0.5f, -2.0f};
    double sum = 0;
    for (int i = 0; i < 6; i++) if (isfinite(l[i])) sum += exp((double)l[i] - 3.0);
    double lse = 3.0 + log(sum), lp;
    int32_t ids[4];
    double tl[4];
    pdb_sample_logprobs(l, 6, 4, 4, &lp, ids, tl);
    assert_true(lp == 0.5 - lse);
    assert_int_equal(ids[0], 1); /* tie of 3.0: the lower id first */
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 0);
    assert_int_equal(ids[3], 4);
    assert_true(tl[0] == tl[1] && tl[0] == 3.0 - lse && tl[2] == 1.0 - lse);
    pdb_sample_logprobs(l, 6, 2, 0, &lp, NULL, NULL);
    assert_true(isinf(lp) && lp < 0);
    double p = 0;
    for (int i = 0; i < 6; i++) { pdb_sample_logprobs(l, 6, i, 0, &lp, NULL, NULL); p += exp(lp); }
    assert_true(fabs(p - 1.0) < 1e-12);
}

/* frequency loses c * f, presence once; the sampler's input changes only at the generated ids. */
static void test_penalties(void **state) {
    (void)state;
    float l[5] = {1, 1, 1, 1, 1};
    int32_t gen[5] = {3, 1, 3, 3, 9}; /* 9 is outside the vocabulary: ignored */
    pdb_sample_apply_penalties(l, 5, gen, 5, 0.5f, 0.25f);
    assert_true(l[0] == 1 && l[2] == 1 && l[4] == 1);
    assert_true(l[1] == 1 - 0.5f - 0.25f);
    assert_true(l[3] == 1 - 1.5f - 0.25f);
    pdb_sample_apply_penalties(l, 5, gen, 5, 0, 0); /* no-op */
    assert_true(l[3] == 1 - 1.5f - 0.25f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy), cmocka_unit_test(test_deterministic), cmocka_unit_test(test_top_k_top_p_sets),
        cmocka_unit_test(test_temperature_distribution), cmocka_unit_test(test_argmax_matches_scan),
        cmocka_unit_test(test_logprobs), cmocka_unit_test(test_penalties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
