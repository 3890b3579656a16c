/* test_cuda_v4_index: the fused bf16 tensor-core indexer scores (pdb_cuda_v4_index_scores_tc,
 * src/cuda/pdb_cuda_v4_index_tc.cu, through pdb_cuda_v4_probe_index_scores_tc) against a C
 * reference of the same math written here from pdb_cuda_v4_kernels.h's spec: q and keys rounded to
 * bf16 (nearest even), dots, wt * relu and the head sum in double. Shapes: nih 8 / ihd 64 / K 4,
 * nih 1 (padded rows), nih 3 / ihd 48 (padded heads, ihd not a power of two), the wide reductions
 * (nih 16, 32, 64; nih 64 with ihd 256), pos0 > 0, n not a multiple of a block's token count, and
 * V4-Flash size (nih 64, ihd 128, K 512, n 512 at pos0 16384; a sample of rows checked) with its GPU
 * time and TFLOP/s, plus the four n = 8192 launches of a 32K-token prompt (timed; a few rows
 * checked). Scores: |gpu - ref| <= 1e-4 max|ref| per case; entries the kernel must not touch
 * (tokens with nv_t <= K, keys w >= nv_t) stay exactly as given. Chunk invariance: a launch of
 * n = 37 rows equals the same rows inside a launch of n = 300, bit for bit. Every case runs in both forms
 * (the mma.sync kernel and the default, the warpgroup kernel on sm_90a at nih 33..64 / ihd 128), each checked,
 * their times side by side and their bits compared (printed). Without a GPU the
 * probe must fail with a message and the GPU checks print "skipped: no GPU" and pass; unsupported
 * shapes (ihd 40, nih 128) fail with PDB_UNSUPPORTED and write nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_cuda.h"
#include "pdb_cuda_v4_probe.h"
#include "pdb_dtype.h"
#include "pdb_test_cuda.h"
#include "pdb_test_util.h"

static uint32_t rng = 777u;
static float frand(void) { /* [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}


static const float UNTOUCHED = 42.0f;

typedef struct icase {
    int64_t n, nih, ihd, pos0, r, K;
} icase;

typedef struct idata {
    float *q, *wt, *score, *kf; /* kf: the keys' bf16 values as f32 */
    uint16_t *keys;
    int64_t nv, lds;
} idata;

static void make(const icase *c, idata *d) {
    d->nv = (c->pos0 + c->n) / c->r;
    d->lds = d->nv + 5;
    d->q = malloc(sizeof(float) * (size_t)(c->n * c->nih * c->ihd + 1));
    d->wt = malloc(sizeof(float) * (size_t)(c->n * c->nih + 1));
    d->score = malloc(sizeof(float) * (size_t)(c->n * d->lds + 1));
    d->keys = malloc(sizeof(uint16_t) * (size_t)(d->nv * c->ihd + 1));
    d->kf = malloc(sizeof(float) * (size_t)(d->nv * c->ihd + 1));
    for (int64_t i = 0; i < c->n * c->nih * c->ihd; i++) d->q[i] = frand();
    for (int64_t i = 0; i < c->n * c->nih; i++) d->wt[i] = frand() * 0.125f;
    for (int64_t i = 0; i < d->nv * c->ihd; i++) {
        d->keys[i] = pdb_f32_to_bf16(frand());
        d->kf[i] = pdb_bf16_to_f32(d->keys[i]);
    }
    for (int64_t i = 0; i < c->n * d->lds; i++) d->score[i] = UNTOUCHED;
}

static void drop(idata *d) { free(d->q), free(d->wt), free(d->score), free(d->keys), free(d->kf); }

/* The reference scores of token t, keys 0 .. nv_t - 1, into ref (double); qb [nih * ihd] scratch. */
static void ref_row(const icase *c, const idata *d, float sscale, int64_t t, int64_t nvt, float *qb, double *ref) {
    for (int64_t i = 0; i < c->nih * c->ihd; i++) qb[i] = pdb_bf16_to_f32(pdb_f32_to_bf16(d->q[t * c->nih * c->ihd + i]));
    for (int64_t w = 0; w < nvt; w++) {
        const float *kr = d->kf + w * c->ihd;
        double acc = 0.0;
        for (int64_t h = 0; h < c->nih; h++) {
            double dot = 0.0;
            for (int64_t k = 0; k < c->ihd; k++) dot += (double)qb[h * c->ihd + k] * (double)kr[k];
            acc += (double)d->wt[t * c->nih + h] * (dot > 0 ? dot : 0.0);
        }
        ref[w] = (double)sscale * acc;
    }
}

/* Checks rows t % stride == 0 and the last row (stride 1: all): scored entries within 1e-4 of
 * max|ref| (over the checked rows), the others untouched. */
static void check_rows(const char *what, const icase *c, const idata *d, float sscale, int64_t stride) {
    float *qb = malloc(sizeof(float) * (size_t)(c->nih * c->ihd));
    int64_t nrows = 0;
    for (int64_t t = 0; t < c->n; t++) nrows += !(t % stride) || t == c->n - 1;
    double *ref = malloc(sizeof(double) * (size_t)(nrows * d->lds + 1));
    double mx = 0, worst = 0;
    int64_t bad = 0, touched = 0, checked = 0, k = 0;
    for (int64_t t = 0; t < c->n; t++) {
        if (t % stride && t != c->n - 1) continue;
        const int64_t nvt = (c->pos0 + t + 1) / c->r;
        double *rr = ref + k++ * d->lds;
        if (nvt > c->K) {
            ref_row(c, d, sscale, t, nvt, qb, rr);
            for (int64_t w = 0; w < nvt; w++) mx = fmax(mx, fabs(rr[w]));
        }
    }
    if (mx == 0) mx = 1;
    k = 0;
    for (int64_t t = 0; t < c->n; t++) {
        if (t % stride && t != c->n - 1) continue;
        const int64_t nvt = (c->pos0 + t + 1) / c->r;
        const float *row = d->score + t * d->lds;
        const double *rr = ref + k++ * d->lds;
        for (int64_t w = 0; w < d->lds; w++) {
            if (!(nvt > c->K && w < nvt)) {
                touched += row[w] != UNTOUCHED;
                continue;
            }
            const double e = fabs((double)row[w] - rr[w]);
            worst = fmax(worst, e);
            checked++;
            if (!(e <= 1e-4 * mx)) bad++;
        }
    }
    printf("  %-44s checked %9lld  max|ref| %.3g  max abs err %.3g (%.2g of max)  bad %lld  touched %lld\n", what,
           (long long)checked, mx, worst, worst / mx, (long long)bad, (long long)touched);
    free(qb), free(ref);
    assert_int_equal(bad, 0);
    assert_int_equal(touched, 0);
}

static double flops(const icase *c) {
    double f = 0;
    for (int64_t t = 0; t < c->n; t++) {
        const int64_t nvt = (c->pos0 + t + 1) / c->r;
        if (nvt > c->K) f += 2.0 * (double)c->nih * (double)c->ihd * (double)nvt;
    }
    return f;
}

/* One case in both forms (the mma.sync kernel, then the default: the warpgroup one where it runs): each
 * launch checked (rows t % stride == 0), reps timed launches when reps > 1, and the two forms' scores
 * compared bit for bit (printed: where the warpgroup form runs its dots may round otherwise). Returns
 * the default form's time. */
static double run_case(const icase *c, int64_t stride, int reps) {
    idata d;
    make(c, &d);
    const float sscale = 1.0f / sqrtf((float)c->ihd);
    double ms[2] = {0, 0};
    float *first = malloc(sizeof(float) * (size_t)(c->n * d.lds));
    assert_non_null(first);
    for (int form = 0; form < 2; form++) {
        for (int64_t i = 0; i < c->n * d.lds; i++) d.score[i] = UNTOUCHED;
        PDB_TEST_OK(pdb_cuda_v4_probe_index_scores_tc(d.q, d.wt, d.keys, c->n, c->nih, c->ihd, c->pos0, c->r, c->K, sscale,
                                                      d.score, d.lds, form == 0, reps, &ms[form]));
        char what[128];
        snprintf(what, sizeof what, "%s n%lld nih%lld ihd%lld pos0 %lld r%lld K%lld", form ? "default" : "mma.sync",
                 (long long)c->n, (long long)c->nih, (long long)c->ihd, (long long)c->pos0, (long long)c->r, (long long)c->K);
        check_rows(what, c, &d, sscale, stride);
        if (form == 0) memcpy(first, d.score, sizeof(float) * (size_t)(c->n * d.lds));
    }
    int64_t same = 0;
    for (int64_t i = 0; i < c->n * d.lds; i++) same += !memcmp(first + i, d.score + i, sizeof(float));
    printf("    forms: %lld of %lld values identical\n", (long long)same, (long long)(c->n * d.lds));
    if (reps > 1)
        printf("    GPU ms per launch: mma.sync %.3f, default %.3f; %.1f / %.1f TFLOP/s-equivalent (%.3g FLOP)\n", ms[0], ms[1],
               flops(c) / (ms[0] * 1e-3) / 1e12, flops(c) / (ms[1] * 1e-3) / 1e12, flops(c));
    free(first);
    drop(&d);
    return ms[1];
}

/* ---------------------------------------- tests ---------------------------------------- */

static void test_without_gpu(void **st) {
    (void)st;
    if (pdb_test_have_gpu()) {
        printf("a GPU is present: the no-GPU error paths are not exercised\n");
        return;
    }
    float q[64] = {0}, wt[1] = {1}, score[8] = {0};
    uint16_t keys[128] = {0};
    double ms = -1;
    pdb_status s = pdb_cuda_v4_probe_index_scores_tc(q, wt, keys, 1, 1, 64, 7, 4, 0, 1.0f, score, 8, 0, 1, &ms);
    printf("probe without a GPU: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_not_equal(s, PDB_OK);
    assert_int_equal(s, pdb_cuda_built() ? PDB_CUDA : PDB_UNSUPPORTED);
    assert_true(strlen(pdb_err_msg()) > 10);
    assert_true(score[0] == 0.0f);
    printf("skipped: no GPU (GPU checks of this test)\n");
}

static void test_small(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const icase cs[] = {
        {37, 8, 64, 0, 4, 4},      /* nih 8: 32 tokens a block, n not a multiple */
        {45, 8, 64, 1000, 4, 4},   /* pos0 > 0 */
        {300, 1, 64, 100, 1, 4},   /* nih 1: 255 padding rows of 256 per head */
        {70, 3, 48, 50, 2, 8},     /* padded heads, 3 k steps */
        {41, 16, 128, 300, 4, 20}, /* two tokens per warp */
        {23, 32, 128, 700, 4, 64}, /* a token a warp */
        {9, 64, 128, 2000, 4, 512},
        {33, 48, 128, 1200, 4, 40},  /* warpgroup form: 16 padding heads, n not a multiple of 4 */
        {5, 64, 256, 1500, 4, 100},  /* ihd 256: 16 k steps */
        {7, 20, 192, 900, 4, 30},
        {260, 2, 16, 0, 1, 0},       /* K 0: every key of every token */
        {50, 4, 256, 10, 1, 5},      /* few heads, one m-tile a warp */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i], 1, 1);
}

static void test_unsupported(void **st) {
    (void)st;
    if (!pdb_test_have_gpu()) {
        printf("skipped: no GPU (%s)\n", __func__);
        return;
    }
    /* unsupported shapes fail with PDB_UNSUPPORTED and write nothing */
    float q[8 * 40] = {0}, wt[8] = {0}, score[16];
    uint16_t keys[8 * 40] = {0};
    for (int i = 0; i < 16; i++) score[i] = UNTOUCHED;
    pdb_status s = pdb_cuda_v4_probe_index_scores_tc(q, wt, keys, 1, 1, 40, 7, 1, 0, 1.0f, score, 16, 0, 1, NULL);
    printf("ihd 40: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_equal(s, PDB_UNSUPPORTED);
    assert_true(score[0] == UNTOUCHED);
    float q2[128 * 16] = {0}, wt2[128] = {0};
    uint16_t keys2[8 * 16] = {0};
    s = pdb_cuda_v4_probe_index_scores_tc(q2, wt2, keys2, 1, 128, 16, 7, 1, 0, 1.0f, score, 16, 0, 1, NULL);
    printf("nih 128: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_equal(s, PDB_UNSUPPORTED);
    assert_true(score[0] == UNTOUCHED);
}

static void test_flash(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const icase c = {512, 64, 128, 16384, 4, 512};
    run_case(&c, 16, 20);
    /* a 32K-token prompt's indexer: four launches of 8192 tokens */
    double total = 0, fl = 0;
    for (int64_t p = 0; p < 32768; p += 8192) {
        const icase cp = {8192, 64, 128, p, 4, 512};
        total += run_case(&cp, 2731, 3);
        fl += flops(&cp);
    }
    printf("  32K-token prompt, one CSA layer's indexer: %.2f ms (%.1f TFLOP/s-equivalent)\n", total,
           fl / (total * 1e-3) / 1e12);
}

/* The rows of a launch of n = 37 at pos0 equal the same rows of a launch of n = 300 (bitwise). */
static void test_chunk_invariance(void **st) {
    (void)st;
    PDB_TEST_NEED_GPU();
    const int64_t shapes[3][4] = {/* nih, ihd, r, K */ {64, 128, 4, 16}, {8, 64, 4, 4}, {1, 64, 1, 4}};
    for (int s = 0; s < 6; s++) {
        const int mma_sync = s >= 3; /* the default forms, then the mma.sync ones */
        const int64_t nih = shapes[s % 3][0], ihd = shapes[s % 3][1], r = shapes[s % 3][2], K = shapes[s % 3][3];
        const int64_t P0 = 2000, off = 101, nb = 37;
        icase big = {300, nih, ihd, P0, r, K};
        idata d;
        make(&big, &d);
        const float sscale = 1.0f / sqrtf((float)ihd);
        PDB_TEST_OK(pdb_cuda_v4_probe_index_scores_tc(d.q, d.wt, d.keys, big.n, nih, ihd, P0, r, K, sscale, d.score,
                                                      d.lds, mma_sync, 1, NULL));
        const int64_t nvs = (P0 + off + nb) / r;
        float *sc = malloc(sizeof(float) * (size_t)(nb * d.lds));
        for (int64_t i = 0; i < nb * d.lds; i++) sc[i] = UNTOUCHED;
        PDB_TEST_OK(pdb_cuda_v4_probe_index_scores_tc(d.q + off * nih * ihd, d.wt + off * nih, d.keys, nb, nih, ihd,
                                                      P0 + off, r, K, sscale, sc, d.lds, mma_sync, 1, NULL));
        int64_t diff = 0;
        for (int64_t t = 0; t < nb; t++)
            if (memcmp(sc + t * d.lds, d.score + (off + t) * d.lds, sizeof(float) * (size_t)d.lds)) diff++;
        printf("  chunk invariance (%s) nih%lld ihd%lld: rows %lld .. %lld (nv <= %lld) differing: %lld\n", mma_sync ? "mma.sync" : "default", (long long)nih,
               (long long)ihd, (long long)off, (long long)(off + nb - 1), (long long)nvs, (long long)diff);
        assert_int_equal(diff, 0);
        free(sc);
        drop(&d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_gpu), cmocka_unit_test(test_unsupported),  cmocka_unit_test(test_small),
        cmocka_unit_test(test_chunk_invariance), cmocka_unit_test(test_flash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
