/* test_v4_dots: the V4 step's many-chain reductions (pdb_v4_dots) equal, bit for bit, the
 * one-chain loops they replace (a sequential double sum per output, written out here), in their
 * AVX-512 and baseline builds, for row counts and widths around the kernels' blocks (8 keys, 4 and 8
 * heads, 8 columns, 256-row chunks; widths past the AVX-512 forms' stack copies), with and without an
 * index list; the indexer's top-k equals the prefix of a
 * full sort by (score descending, index ascending) on inputs full of ties. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_v4_dots.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
/* values over several binades and both signs, so that the double sums round */
static float rnd(void) {
    float v = (float)(next_u32() % 2000001) / 1000000.0f - 1.0f;
    int e = (int)(next_u32() % 9) - 4;
    for (; e > 0; e--) v *= 3.0f;
    for (; e < 0; e++) v /= 3.0f;
    return v;
}
static void fill(float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = rnd();
}

static float ref_dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

static const int32_t *pick_idx(int use, int64_t m, int64_t rows, int32_t *buf) {
    if (!use) return NULL;
    for (int64_t j = 0; j < m; j++) buf[j] = (int32_t)(next_u32() % rows);
    return buf;
}

static void check_rows(int wide) {
    pdb_v4_dots_use_wide(wide);
    const int64_t ms[] = {1, 2, 3, 7, 8, 9, 17, 24}, ns[] = {1, 31, 128, 1000};
    enum { ROWS = 40, NMAX = 1000 };
    float *w = malloc(sizeof(float) * ROWS * NMAX), x[NMAX], out[64];
    int32_t idx[64];
    fill(w, ROWS * NMAX);
    fill(x, NMAX);
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (int use = 0; use < 2; use++) {
                int64_t m = ms[a], n = ns[b];
                const int32_t *ix = pick_idx(use, m, ROWS, idx);
                pdb_v4_dotd_rows(w, NMAX, ix, m, x, n, out);
                for (int64_t j = 0; j < m; j++) {
                    float r = ref_dot(w + (ix ? ix[j] : j) * NMAX, x, n);
                    assert_memory_equal(&out[j], &r, sizeof r);
                }
            }
    free(w);
}

static void test_dotd_rows(void **st) {
    (void)st;
    check_rows(1);
    check_rows(0);
    pdb_v4_dots_use_wide(1);
}

static void check_keys(int wide) {
    pdb_v4_dots_use_wide(wide);
    const int64_t nqs[] = {1, 3, 4, 5, 8, 9, 16}, msz[] = {1, 7, 8, 9, 33, 300}, nsz[] = {8, 80, 84, 512, 600};
    enum { ROWS = 320, NMAX = 600, QMAX = 16, LDP = 320 };
    float *w = malloc(sizeof(float) * ROWS * NMAX), *q = malloc(sizeof(float) * QMAX * NMAX);
    float *sc = malloc(sizeof(float) * QMAX * LDP), *p = malloc(sizeof(float) * QMAX * LDP);
    double *kt = malloc(sizeof(double) * 8 * NMAX), *acc = malloc(sizeof(double) * QMAX * NMAX);
    double *ref = malloc(sizeof(double) * QMAX * NMAX);
    int32_t idx[LDP];
    fill(w, ROWS * NMAX);
    fill(q, QMAX * NMAX);
    for (size_t a = 0; a < sizeof nqs / sizeof nqs[0]; a++)
        for (size_t b = 0; b < sizeof msz / sizeof msz[0]; b++)
            for (size_t c = 0; c < sizeof nsz / sizeof nsz[0]; c++)
                for (int use = 0; use < 2; use++) {
                    int64_t nq = nqs[a], m = msz[b], n = nsz[c], ldo = LDP;
                    const int32_t *ix = pick_idx(use, m, ROWS, idx);
                    pdb_v4_dotd_keys(q, NMAX, nq, w, NMAX, ix, m, n, sc, ldo, kt);
                    for (int64_t h = 0; h < nq; h++)
                        for (int64_t j = 0; j < m; j++) {
                            float r = ref_dot(q + h * NMAX, w + (ix ? ix[j] : j) * NMAX, n);
                            assert_memory_equal(&sc[h * ldo + j], &r, sizeof r);
                        }
                    /* weighted sums onto a nonzero start */
                    fill(p, QMAX * LDP);
                    for (int64_t i = 0; i < nq * n; i++) acc[i] = ref[i] = (double)rnd();
                    pdb_v4_mixd_keys(acc, p, LDP, nq, w, NMAX, ix, m, n);
                    for (int64_t h = 0; h < nq; h++)
                        for (int64_t e = 0; e < n; e++)
                            for (int64_t j = 0; j < m; j++) ref[h * n + e] += (double)p[h * LDP + j] * w[(ix ? ix[j] : j) * NMAX + e];
                    assert_memory_equal(acc, ref, sizeof(double) * (size_t)(nq * n));
                }
    free(w), free(q), free(sc), free(p), free(kt), free(acc), free(ref);
}

static void test_dotd_keys_mixd_keys(void **st) {
    (void)st;
    check_keys(1);
    check_keys(0);
    pdb_v4_dots_use_wide(1);
}

static float ref_index_score(const float *q, const float *hw, int64_t nih, int64_t ihd, const float *k, float sscale) {
    double s = 0;
    for (int64_t h = 0; h < nih; h++) {
        float dp = ref_dot(q + h * ihd, k, ihd);
        float rl = dp > 0 ? dp * sscale : 0.0f;
        s += (double)(rl * hw[h]);
    }
    return (float)s;
}

static void check_index(int wide) {
    pdb_v4_dots_use_wide(wide);
    const int64_t nihs[] = {1, 3, 4, 5, 64}, ihds[] = {32, 128, 2048};
    const int64_t ranges[][2] = {{0, 1}, {0, 8}, {3, 20}, {5, 6}, {0, 70}};
    enum { KEYS = 70 };
    for (size_t a = 0; a < sizeof nihs / sizeof nihs[0]; a++)
        for (size_t b = 0; b < sizeof ihds / sizeof ihds[0]; b++) {
            int64_t nih = nihs[a], ihd = ihds[b];
            float *q = malloc(sizeof(float) * (size_t)(nih * ihd)), *k = malloc(sizeof(float) * (size_t)(KEYS * ihd));
            float hw[64], out[KEYS];
            fill(q, nih * ihd);
            fill(k, KEYS * ihd);
            fill(hw, 64);
            for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
                int64_t w0 = ranges[r][0], w1 = ranges[r][1];
                pdb_v4_index_scores(q, hw, nih, ihd, k, w0, w1, 0.088388f, out);
                for (int64_t w = w0; w < w1; w++) {
                    float e = ref_index_score(q, hw, nih, ihd, k + w * ihd, 0.088388f);
                    assert_memory_equal(&out[w - w0], &e, sizeof e);
                }
            }
            free(q), free(k);
        }
}

static void test_index_scores(void **st) {
    (void)st;
    check_index(1);
    check_index(0);
    pdb_v4_dots_use_wide(1);
}

typedef struct { float s; int32_t i; } pair;
static int cmp_pair(const void *a, const void *b) {
    const pair *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static void test_topk(void **st) {
    (void)st;
    const int64_t ns[] = {2, 3, 10, 100, 1000, 5000}, ks[] = {1, 2, 4, 7, 64, 512};
    for (int form = 0; form < 4; form++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
                int64_t n = ns[a], k = ks[b];
                if (k >= n) continue;
                float *sc = malloc(sizeof(float) * (size_t)n);
                pair *full = malloc(sizeof(pair) * (size_t)n);
                int32_t *sel = malloc(sizeof(int32_t) * (size_t)k);
                void *tmp = malloc((size_t)pdb_v4_topk_scratch_bytes(n));
                for (int64_t i = 0; i < n; i++) /* few distinct values (ties), ascending, descending, all equal */
                    sc[i] = form == 0 ? (float)(next_u32() % 7) : form == 1 ? (float)i : form == 2 ? (float)-i : 1.0f;
                for (int64_t i = 0; i < n; i++) full[i] = (pair){sc[i], (int32_t)i};
                qsort(full, (size_t)n, sizeof *full, cmp_pair);
                pdb_v4_topk(sc, n, k, sel, tmp);
                for (int64_t i = 0; i < k; i++) assert_int_equal(sel[i], full[i].i);
                free(sc), free(full), free(sel), free(tmp);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dotd_rows),
        cmocka_unit_test(test_dotd_keys_mixd_keys),
        cmocka_unit_test(test_index_scores),
        cmocka_unit_test(test_topk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
