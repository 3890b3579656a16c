/* test_math: pdb_math_argmax (AVX-512 on x86 when present, NEON on aarch64, else scalar) gives the
 * index the plain scan defines: the first index of the largest non-NaN value, 0 when every value
 * is NaN; ties keep the first, -0 and +0 tie, -inf counts as a value. Checked on edge vectors of
 * every length 1..70 (vector bodies and tails) and on seeded random ones with NaNs mixed in. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_math.h"

static int64_t ref_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

static void check(const float *x, int64_t n, const char *what) {
    int64_t got = pdb_math_argmax(x, n), want = ref_argmax(x, n);
    if (got != want) fail_msg("%s, n=%lld: argmax %lld, the scan says %lld", what, (long long)n, (long long)got, (long long)want);
}

static void test_argmax_edges(void **st) {
    (void)st;
    float x[70];
    for (int n = 1; n <= 70; n++) {
        for (int i = 0; i < n; i++) x[i] = NAN;
        check(x, n, "all NaN");
        x[n - 1] = -INFINITY;
        check(x, n, "NaNs then -inf last");
        for (int i = 0; i < n; i++) x[i] = i % 2 ? 0.0f : -0.0f;
        check(x, n, "-0 and +0");
        for (int i = 0; i < n; i++) x[i] = (float)(i % 7);
        check(x, n, "ties of the maximum");
        x[0] = NAN;
        check(x, n, "NaN first");
        for (int i = 0; i < n; i++) x[i] = -INFINITY;
        check(x, n, "all -inf");
        x[n / 2] = NAN;
        x[n - 1] = -1.0f;
        check(x, n, "one number among -inf and a NaN");
    }
}

static void test_argmax_random(void **st) {
    (void)st;
    uint32_t r = 99;
    float x[1000];
    for (int round = 0; round < 200; round++) {
        int64_t n = 1 + round * 5 % 1000;
        for (int64_t i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            x[i] = (r >> 28) == 0 ? NAN : (float)((int32_t)(r >> 8) % 200) * 0.25f; /* ties are common */
        }
        check(x, n, "random");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_argmax_edges), cmocka_unit_test(test_argmax_random)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
