/* test_v4_rows: the compact V4 cache rows and the indexer's scores on them.
 * (1) FP8 K=V rows and FP4 indexer keys: encode then decode gives back, bit for bit (signed zeros
 * too), every row the official path produces (pdb_v4_qsim's roundings of random rows over many
 * binades, with zero blocks, values below the FP8 floor, huge values and rounding ties); the row
 * sizes are the documented ones (V4-Flash: 712 and 68 bytes); a row the rounding did not produce
 * is reported (the check can fail).
 * (2) pdb_v4_iscore on FP4 rows equals pdb_v4_index_scores on the same keys as f32, bit for bit,
 * with the VNNI kernel, the scalar one and the f32 tiles, for index_head_dim 32..256, head counts around the
 * kernels' groups of 4, key ranges around the 16-key tiles and offsets, keys whose block exponents
 * span more than the exact bound (those take the f32 path: counted) and f32 (exact) rows. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_v4_dots.h"
#include "pdb_v4_iscore.h"
#include "pdb_v4_qsim.h"
#include "pdb_v4_rows.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rnd(void) { /* several binades, both signs */
    float v = (float)(next_u32() % 2000001) / 1000000.0f - 1.0f;
    int e = (int)(next_u32() % 13) - 6;
    for (; e > 0; e--) v *= 3.0f;
    for (; e < 0; e++) v /= 3.0f;
    return v;
}

static int bits_equal(const float *a, const float *b, int64_t n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

static pdb_config cfg_of(int64_t hd, int64_t rope, int64_t ihd) {
    pdb_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = hd;
    c.qk_rope_head_dim = rope;
    c.index_head_dim = ihd;
    return c;
}

/* a row of n values: random, and block by block one of the awkward cases */
static void awkward_row(float *x, int64_t n, int64_t block) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd();
    for (int64_t b = 0; b < n / block; b++) {
        float *xb = x + b * block;
        switch (next_u32() % 7) {
        case 0: memset(xb, 0, sizeof(float) * (size_t)block); break;             /* an all-zero block */
        case 1: for (int64_t i = 0; i < block; i++) xb[i] *= 1e-7f; break;        /* below the FP8 floor 1e-4 */
        case 2: for (int64_t i = 0; i < block; i++) xb[i] *= 1e30f; break;        /* huge */
        case 3: for (int64_t i = 0; i < block; i++) xb[i] = (float)((int)(next_u32() % 25) - 12) * 0.25f; break; /* ties */
        case 4: xb[next_u32() % block] = -0.0f; break;
        default: break;
        }
    }
}

static void test_kv_rows(void **st) {
    const int64_t shapes[][2] = {{512, 64}, {128, 64}, {80, 16}, {192, 0}};
    for (int s = 0; s < 4; s++) {
        pdb_config c = cfg_of(shapes[s][0], shapes[s][1], 128);
        pdb_v4_row r = pdb_v4_row_kv(&c, 0), e = pdb_v4_row_kv(&c, 1);
        int64_t hd = c.head_dim, n = hd - c.qk_rope_head_dim;
        assert_int_equal(e.fmt, PDB_V4_ROW_F32);
        assert_int_equal(e.bytes, 4 * hd);
        assert_int_equal(r.fmt, PDB_V4_ROW_FP8);
        assert_int_equal(r.bytes % 4, 0);
        assert_int_equal(r.bytes, (4 * c.qk_rope_head_dim + n + n / 64 + 3) / 4 * 4);
        if (hd == 512) assert_int_equal(r.bytes, 712);
        float *x = malloc(sizeof(float) * (size_t)hd), *y = malloc(sizeof(float) * (size_t)hd);
        uint8_t *row = malloc((size_t)e.bytes); /* the larger of the two */
        for (int it = 0; it < 3000; it++) {
            awkward_row(x, hd, 64);
            pdb_v4_qsim_fp8(x, n); /* what the official path caches: rotary dims untouched */
            assert_int_equal(pdb_v4_row_encode(&r, x, row), 0);
            pdb_v4_row_decode(&r, row, y);
            if (!bits_equal(x, y, hd)) fail_msg("FP8 row %d of head_dim %lld not reproduced", it, (long long)hd);
            assert_int_equal(pdb_v4_row_encode(&e, x, row), 0);
            pdb_v4_row_decode(&e, row, y);
            assert_true(bits_equal(x, y, hd));
        }
        /* a row the rounding did not produce cannot be held: reported */
        for (int64_t i = 0; i < hd; i++) x[i] = 1.0f + (float)i * 1e-3f;
        assert_true(pdb_v4_row_encode(&r, x, row) > 0);
        free(x), free(y), free(row);
    }
}

static void test_ikey_rows(void **st) {
    const int64_t dims[] = {32, 64, 128, 256, 2048};
    for (int s = 0; s < 5; s++) {
        pdb_config c = cfg_of(512, 64, dims[s]);
        pdb_v4_row r = pdb_v4_row_ikey(&c, 0);
        int64_t d = dims[s];
        assert_int_equal(r.fmt, PDB_V4_ROW_FP4);
        assert_int_equal(r.bytes, (d / 2 + d / 32 + 3) / 4 * 4);
        if (d == 128) assert_int_equal(r.bytes, 68);
        float *x = malloc(sizeof(float) * (size_t)d), *y = malloc(sizeof(float) * (size_t)d);
        uint8_t *row = malloc((size_t)r.bytes);
        for (int it = 0; it < 2000; it++) {
            awkward_row(x, d, 32);
            if (it & 1) pdb_v4_qsim_hadamard(x, d);
            pdb_v4_qsim_fp4(x, d);
            assert_int_equal(pdb_v4_row_encode(&r, x, row), 0);
            pdb_v4_row_decode(&r, row, y);
            if (!bits_equal(x, y, d)) fail_msg("FP4 row %d of dim %lld not reproduced", it, (long long)d);
        }
        for (int64_t i = 0; i < d; i++) x[i] = 0.3f + (float)i;
        assert_true(pdb_v4_row_encode(&r, x, row) > 0);
        free(x), free(y), free(row);
    }
}

/* one official indexer row: random, rotated, FP4; spread: scale one block by 2^40 (beyond the bound) */
static void fp4_row(float *x, int64_t d, int spread) {
    for (int64_t i = 0; i < d; i++) x[i] = rnd();
    pdb_v4_qsim_hadamard(x, d);
    if (spread)
        for (int64_t i = 0; i < 32; i++) x[i] *= 0x1p40f;
    pdb_v4_qsim_fp4(x, d);
}

static void test_iscore(void **st) {
    const int64_t dims[] = {32, 64, 128, 256};
    const int64_t heads[] = {1, 3, 4, 8, 17, 64};
    int64_t int0, f320, int1, f321;
    pdb_v4_iscore_counts(&int0, &f320);
    for (int di = 0; di < 4; di++)
        for (int hi = 0; hi < 6; hi++) {
            int64_t d = dims[di], nih = heads[hi], nv = 300;
            pdb_config c = cfg_of(512, 64, d);
            pdb_v4_row r = pdb_v4_row_ikey(&c, 0), rf = pdb_v4_row_ikey(&c, 1);
            float *q = malloc(sizeof(float) * (size_t)(nih * d)), *hw = malloc(sizeof(float) * (size_t)nih);
            float *kf = malloc(sizeof(float) * (size_t)(nv * d)), *ref = malloc(sizeof(float) * (size_t)nv),
                  *got = malloc(sizeof(float) * (size_t)nv);
            uint8_t *keys = malloc((size_t)(nv * r.bytes));
            void *iq = malloc((size_t)pdb_v4_iscore_query_bytes(nih, d));
            for (int64_t h = 0; h < nih; h++) fp4_row(q + h * d, d, 0);
            for (int64_t h = 0; h < nih; h++) hw[h] = rnd();
            for (int64_t w = 0; w < nv; w++) {
                fp4_row(kf + w * d, d, w % 97 == 5);
                assert_int_equal(pdb_v4_row_encode(&r, kf + w * d, keys + w * r.bytes), 0);
            }
            float sscale = (float)(1.0 / sqrt((double)d));
            const int64_t ranges[][2] = {{0, 300}, {0, 1}, {0, 15}, {0, 16}, {0, 17}, {5, 38}, {123, 300}, {257, 258}};
            for (int ri = 0; ri < 8; ri++) {
                int64_t w0 = ranges[ri][0], w1 = ranges[ri][1];
                pdb_v4_index_scores(q, hw, nih, d, kf, w0, w1, sscale, ref);
                for (int vn = 0; vn < 3; vn++) {
                    if (vn == PDB_V4_ISCORE_VNNI && !pdb_v4_iscore_has_vnni()) continue;
                    int old = pdb_v4_iscore_kernel(vn);
                    pdb_v4_iscore_prepare(&r, q, hw, nih, sscale, iq);
                    memset(got, 0xff, sizeof(float) * (size_t)nv);
                    pdb_v4_iscore(iq, keys, w0, w1, got);
                    pdb_v4_iscore_kernel(old);
                    for (int64_t w = 0; w < w1 - w0; w++)
                        if (memcmp(&got[w], &ref[w], 4))
                            fail_msg("dim %lld heads %lld keys [%lld,%lld) %s: key %lld: %.9g vs %.9g", (long long)d,
                                     (long long)nih, (long long)w0, (long long)w1, vn == 2 ? "vnni" : vn ? "scalar" : "f32 tiles",
                                     (long long)(w0 + w),
                                     got[w], ref[w]);
                }
                /* the exact semantics' f32 rows: the same function */
                pdb_v4_iscore_prepare(&rf, q, hw, nih, sscale, iq);
                pdb_v4_iscore(iq, (const uint8_t *)kf, w0, w1, got);
                assert_true(bits_equal(got, ref, w1 - w0));
            }
            free(q), free(hw), free(kf), free(ref), free(got), free(keys), free(iq);
        }
    pdb_v4_iscore_counts(&int1, &f321);
    printf("  FP4 key scores = f32 reference bit for bit (VNNI kernel %s): %lld keys by the integer kernels, %lld (wide exponent spread) by "
           "the f32 path\n", pdb_v4_iscore_has_vnni() ? "run" : "absent: not run", (long long)(int1 - int0), (long long)(f321 - f320));
    assert_true(int1 - int0 > 4 * (f321 - f320)); /* the integer kernels did the work (a wide key sends its 16-key tile to f32) */
    assert_true(f321 > f320);                        /* and the bound was exercised */
}

/* At the exponent bound: queries whose blocks share one exponent, keys whose blocks span exactly the
 * bound (38 for dim 128: one block 2^38 above the others) and one more (39): the first take the
 * integer kernels, the second the f32 path, and both equal the reference bit for bit, with the
 * largest products (every value +-6) where a rounding would show. */
static void test_iscore_bound(void **st) {
    enum { D = 128, NIH = 8, NV = 64 };
    pdb_config c = cfg_of(512, 64, D);
    pdb_v4_row r = pdb_v4_row_ikey(&c, 0);
    float q[NIH * D], hw[NIH], kf[NV * D], ref[NV], got[NV];
    uint8_t keys[NV * 68];
    void *iq = malloc((size_t)pdb_v4_iscore_query_bytes(NIH, D));
    for (int i = 0; i < NIH * D; i++) q[i] = (next_u32() & 1) ? 6.0f : -6.0f;
    for (int i = 0; i < NIH; i++) hw[i] = rnd();
    for (int w = 0; w < NV; w++) {
        int spread = w < NV / 2 ? 38 : 39;
        for (int i = 0; i < D; i++) {
            float v = (next_u32() % 3) ? ((next_u32() & 1) ? 6.0f : -6.0f) : (float)((int)(next_u32() % 25) - 12) * 0.5f;
            if (i % 32 == 0) v = 6.0f; /* every block's max is 6: its exponent is exactly the scale's */
            kf[w * D + i] = i < 32 ? ldexpf(v, spread) : v;
        }
        pdb_v4_qsim_fp4(kf + w * D, D);
        assert_int_equal(pdb_v4_row_encode(&r, kf + w * D, keys + w * r.bytes), 0);
    }
    float sscale = (float)(1.0 / sqrt((double)D));
    pdb_v4_index_scores(q, hw, NIH, D, kf, 0, NV, sscale, ref);
    for (int k = 1; k < 3; k++) {
        if (k == PDB_V4_ISCORE_VNNI && !pdb_v4_iscore_has_vnni()) continue;
        int old = pdb_v4_iscore_kernel(k);
        int64_t i0, f0, i1, f1;
        pdb_v4_iscore_counts(&i0, &f0);
        pdb_v4_iscore_prepare(&r, q, hw, NIH, sscale, iq);
        pdb_v4_iscore(iq, keys, 0, NV / 2, got);
        pdb_v4_iscore_counts(&i1, &f1);
        assert_int_equal(i1 - i0, NV / 2); /* spread 38: the integer kernel */
        assert_int_equal(f1 - f0, 0);
        pdb_v4_iscore(iq, keys, NV / 2, NV, got + NV / 2);
        pdb_v4_iscore_counts(&i0, &f0);
        assert_int_equal(f0 - f1, NV / 2); /* spread 39: the f32 path */
        pdb_v4_iscore_kernel(old);
        assert_true(bits_equal(got, ref, NV));
    }
    free(iq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_rows),
        cmocka_unit_test(test_ikey_rows),
        cmocka_unit_test(test_iscore),
        cmocka_unit_test(test_iscore_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
