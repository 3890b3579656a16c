/* test_dacc: pdb_dacc's vector kernels equal the sequential double sums they are defined by, bit
 * for bit: dots and mix against the plain loops (written out here), for sizes with and without
 * tails of the kernels' tiles (m not a multiple of 8 or 16, n not of 6, e not of 16, odd k),
 * strided outputs, values spanning 32 binades with two cancelling leading terms (so a changed
 * order shows), with the vector kernels on and off. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_dacc.h"

static uint32_t rng = 2024;

static double rnd(void) { /* an f32 value (24-bit mantissa) over 32 binades, as a double: the sums
                             * cancel and round, so a changed order changes the floats */
    rng = rng * 1664525u + 1013904223u;
    uint32_t m = rng >> 8;
    rng = rng * 1664525u + 1013904223u;
    return ldexp((double)((float)m / 16777216.0f - 0.5f), (int)(rng >> 27) - 28);
}

static void dots_case(int64_t M, int64_t N, int64_t K) {
    int64_t ldat = M + 3, ldm = 1, ldn = M + 5;
    double *at = malloc(sizeof(double) * (size_t)(K * ldat)), *bb = malloc(sizeof(double) * (size_t)(N * (K + 1)));
    const double **b = malloc(sizeof(double *) * (size_t)N);
    float *ref = malloc(sizeof(float) * (size_t)(N * ldn)), *got = malloc(sizeof(float) * (size_t)(N * ldn));
    for (int64_t i = 0; i < K * ldat; i++) at[i] = rnd();
    for (int64_t i = 0; i < N * (K + 1); i++) bb[i] = rnd();
    for (int64_t n = 0; n < N; n++) b[n] = bb + ((n * 7) % N) * (K + 1); /* rows in no particular order */
    if (K >= 2) /* terms 0 and 1 are +-2^40 and cancel: in k order the rest add up exactly, in another they lose bits */
        for (int64_t m = 0; m < M; m++) {
            at[m] = 0x1p20, at[ldat + m] = -0x1p20;
            for (int64_t n = 0; n < N; n++) bb[n * (K + 1)] = bb[n * (K + 1) + 1] = 0x1p20;
        }
    memset(ref, 0, sizeof(float) * (size_t)(N * ldn));
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += at[k * ldat + m] * b[n][k];
            ref[n * ldn + m * ldm] = (float)s;
        }
    for (int simd = 1; simd >= 0; simd--) {
        int old = pdb_dacc_use_simd(simd);
        memset(got, 0, sizeof(float) * (size_t)(N * ldn));
        pdb_dacc_dots(at, ldat, M, b, N, K, got, ldm, ldn);
        pdb_dacc_use_simd(old);
        if (memcmp(ref, got, sizeof(float) * (size_t)(N * ldn)))
            fail_msg("dots M=%lld N=%lld K=%lld simd=%d: differs from the sequential sums", (long long)M, (long long)N, (long long)K, simd);
    }
    free(at), free(bb), free(b), free(ref), free(got);
}

static void mix_case(int64_t M, int64_t N, int64_t E) {
    int64_t ldp = N + 2, ldo = E + 3;
    double *p = malloc(sizeof(double) * (size_t)(M * ldp + 1)), *xx = malloc(sizeof(double) * (size_t)((N + 1) * E + 1));
    const double **x = malloc(sizeof(double *) * (size_t)(N + 1));
    float *ref = malloc(sizeof(float) * (size_t)(M * ldo)), *got = malloc(sizeof(float) * (size_t)(M * ldo));
    for (int64_t i = 0; i < M * ldp; i++) p[i] = rnd();
    for (int64_t i = 0; i < (N + 1) * E; i++) xx[i] = rnd();
    for (int64_t i = 0; i < N; i++) x[i] = xx + ((i * 5 + 1) % (N + 1)) * E;
    if (N >= 2) /* terms 0 and 1 cancel (as in dots_case) */
        for (int64_t m = 0; m < M; m++) {
            p[m * ldp] = 0x1p20, p[m * ldp + 1] = -0x1p20;
            for (int64_t e = 0; e < E; e++) xx[1 * E + e] = xx[((1 * 5 + 1) % (N + 1)) * E + e] = 0x1p20;
        }
    memset(ref, 0, sizeof(float) * (size_t)(M * ldo));
    for (int64_t m = 0; m < M; m++)
        for (int64_t e = 0; e < E; e++) {
            double s = 0;
            for (int64_t i = 0; i < N; i++) s += p[m * ldp + i] * x[i][e];
            ref[m * ldo + e] = (float)s;
        }
    for (int simd = 1; simd >= 0; simd--) {
        int old = pdb_dacc_use_simd(simd);
        memset(got, 0, sizeof(float) * (size_t)(M * ldo));
        pdb_dacc_mix(p, ldp, M, x, N, E, got, ldo);
        pdb_dacc_use_simd(old);
        if (memcmp(ref, got, sizeof(float) * (size_t)(M * ldo)))
            fail_msg("mix M=%lld N=%lld E=%lld simd=%d: differs from the sequential sums", (long long)M, (long long)N, (long long)E, simd);
    }
    free(p), free(xx), free(x), free(ref), free(got);
}

static void test_dots(void **st) {
    const int64_t Ms[] = {1, 4, 7, 16, 20, 64}, Ns[] = {1, 5, 6, 13, 37}, Ks[] = {1, 31, 128, 133};
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 4; c++) dots_case(Ms[a], Ns[b], Ks[c]);
}

static void test_mix(void **st) {
    const int64_t Ms[] = {1, 5, 6, 13, 64}, Ns[] = {0, 1, 9, 140}, Es[] = {1, 8, 15, 16, 72, 512};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 6; c++) mix_case(Ms[a], Ns[b], Es[c]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dots), cmocka_unit_test(test_mix)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
