/* test_block_compare: pdb_block_compare's definitions: identical means byte-identical; ulp
 * distances per dtype (adjacent values 1 apart, across zero too, +0/-0 differ at 0 ulps, NaN
 * infinitely far); F32 distances also in bf16 ulps; two block files written by the store's own
 * writer at different times compare identical (created_at ignored) unless strict; a changed
 * value, a changed shape/dtype or a tensor present on one side only is reported as such. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "pdb_block_compare.h"
#include "pdb_safetensors.h"
#include "pdb_store.h"
#include "pdb_test_util.h"

static float f32_next(float x, int k) { /* k steps up on the f32 line */
    for (int i = 0; i < k; i++) x = nextafterf(x, INFINITY);
    return x;
}

static void test_f32_ulps(void **st) {
    float a[6] = {1.0f, -2.5f, 0.0f, 3.0f, 7.0f, 1e-30f};
    float b[6] = {1.0f, -2.5f, -0.0f, f32_next(3.0f, 5), 7.0f, -1e-30f};
    pdb_block_cmp_stats s = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, a, b, 6, &s));
    assert_int_equal(s.n, 6);
    assert_int_equal(s.n_diff, 3); /* +0/-0, 5 ulps, sign flip */
    /* 1e-30 vs -1e-30: 2 * its distance from zero on the ulp line */
    uint32_t u;
    memcpy(&u, &a[5], 4);
    assert_true(s.worst_ulps == 2.0 * (double)u);
    assert_true(s.worst_bf16_ulps == s.worst_ulps / 65536.0);
    assert_true(fabs(s.worst_rel - 2.0) < 1e-12);
    assert_int_equal(s.n_beyond_bf16, 1); /* only the sign flip is more than one bf16 step away */
    /* only the 5-ulp step */
    pdb_block_cmp_stats s5 = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, a + 3, b + 3, 1, &s5));
    assert_true(s5.worst_ulps == 5.0);
    assert_true(s5.worst_abs == (double)(b[3] - a[3]));
    /* +0 vs -0: bytes differ, distance 0 */
    pdb_block_cmp_stats sz = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, a + 2, b + 2, 1, &sz));
    assert_int_equal(sz.n_diff, 1);
    assert_true(sz.worst_ulps == 0.0);
    /* adjacent across zero: smallest positive and smallest negative denormal are 2 apart */
    float dp = nextafterf(0.0f, 1.0f), dn = -dp;
    pdb_block_cmp_stats sd = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, &dp, &dn, 1, &sd));
    assert_true(sd.worst_ulps == 2.0);
    /* NaN against a number */
    float nan_ = NAN, one = 1.0f;
    pdb_block_cmp_stats sn = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, &nan_, &one, 1, &sn));
    assert_true(isinf(sn.worst_ulps));
    /* identical arrays */
    pdb_block_cmp_stats si = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, a, a, 6, &si));
    assert_int_equal(si.n_diff, 0);
    assert_true(si.worst_ulps == 0 && si.worst_abs == 0);
}

static void test_other_dtypes(void **st) {
    /* bf16: 1.0 = 0x3F80; next = 0x3F81; one bf16 ulp = 65536 f32 ulps */
    uint16_t ha[2] = {0x3F80, 0xBF80}, hb[2] = {0x3F83, 0xBF80};
    pdb_block_cmp_stats s = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_BF16, ha, hb, 2, &s));
    assert_int_equal(s.n_diff, 1);
    assert_true(s.worst_ulps == 3.0);
    assert_true(s.worst_bf16_ulps == 0.0); /* only reported for F32 */
    float fa = 1.0f, fb = pdb_bf16_to_f32(0x3F81);
    pdb_block_cmp_stats s2 = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, &fa, &fb, 1, &s2));
    assert_true(s2.worst_bf16_ulps == 1.0);
    /* i32: units */
    int32_t ia[3] = {5, -7, 100}, ib[3] = {5, 7, 90};
    pdb_block_cmp_stats s3 = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_I32, ia, ib, 3, &s3));
    assert_int_equal(s3.n_diff, 2);
    assert_true(s3.worst_ulps == 14.0 && s3.worst_abs == 14.0);
    /* e4m3: sign-magnitude bytes; 0x38 = 1.0, 0x3A two steps up */
    uint8_t ea = 0x38, eb = 0x3A;
    pdb_block_cmp_stats s4 = {0};
    PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F8_E4M3, &ea, &eb, 1, &s4));
    assert_true(s4.worst_ulps == 2.0);
    /* merge keeps sums and maxima */
    pdb_block_cmp_stats m = {0};
    pdb_block_compare_merge_stats(&m, &s3);
    pdb_block_compare_merge_stats(&m, &s4);
    assert_int_equal(m.n, 4);
    assert_int_equal(m.n_diff, 3);
    assert_true(m.worst_ulps == 14.0);
}

/* ---- files written by the store's own block writer ------------------------------------------- */
enum { BS = 128, NL = 2, W = 8 };
static const pdb_store_pool pool = {.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = NL, .stride = 1, .width = W,
                                    .dtype = PDB_DT_F32};
static const pdb_store_layout layout = {1, &pool};

static void write_block(const char *dir, const float *data, const int32_t *tokens, char path[1024]) {
    uint8_t fp[32] = {7};
    pdb_store *s;
    PDB_TEST_OK(pdb_store_open(dir, &layout, fp, BS, 0, &s));
    pdb_store_stream *w;
    PDB_TEST_OK(pdb_store_stream_begin(s, tokens, BS, &w));
    const void *pd[1] = {data};
    PDB_TEST_OK(pdb_store_stream_put(w, 0, pd));
    char hx[65];
    pdb_store_hash_hex(pdb_store_stream_hash(w, 0), hx);
    snprintf(path, 1024, "%s/%.2s/%s.pdbblk", dir, hx, hx);
    PDB_TEST_OK(pdb_store_stream_finish(w));
    pdb_store_close(s);
}

static void test_block_files(void **st) {
    char *root = pdb_test_tmpdir("bcmp"), da[300], db[300], pa[1024], pb[1024];
    snprintf(da, sizeof da, "%s/a", root);
    snprintf(db, sizeof db, "%s/b", root);
    static int32_t tok[BS];
    static float x[NL * BS * W];
    for (int i = 0; i < BS; i++) tok[i] = i * 3;
    for (int i = 0; i < NL * BS * W; i++) x[i] = sinf((float)i);
    write_block(da, x, tok, pa);
    sleep(1); /* another created_at second */
    write_block(db, x, tok, pb);
    pdb_block_cmp_report r;
    PDB_TEST_OK(pdb_block_compare_files(pa, pb, 0, &r));
    assert_true(r.identical);
    assert_int_equal(r.n_tensors, 2);
    assert_int_equal(r.total.n, BS + NL * BS * W);
    pdb_block_compare_free_report(&r);
    PDB_TEST_OK(pdb_block_compare_files(pa, pb, 1, &r)); /* strict: created_at differs */
    assert_false(r.identical);
    assert_int_equal(r.n_meta_diff, 1);
    assert_string_equal(r.first_meta_diff, "created_at");
    pdb_block_compare_free_report(&r);
    /* one value changed by 2 ulps, rewritten through the writer (a valid block) */
    x[300] = f32_next(x[300], 2);
    pdb_test_rmrf(db);
    write_block(db, x, tok, pb);
    PDB_TEST_OK(pdb_block_compare_files(pa, pb, 0, &r));
    assert_false(r.identical);
    int seen = 0;
    for (int i = 0; i < r.n_tensors; i++) {
        if (!strcmp(r.tensors[i].name, "latent")) {
            seen = 1;
            assert_int_equal(r.tensors[i].kind, PDB_BLOCK_CMP_VALUES);
            assert_int_equal(r.tensors[i].stats.n_diff, 1);
            assert_true(r.tensors[i].stats.worst_ulps == 2.0);
        } else {
            assert_int_equal(r.tensors[i].kind, PDB_BLOCK_CMP_SAME);
        }
    }
    assert_true(seen);
    pdb_block_compare_free_report(&r);
    /* another dtype/shape and a tensor on one side only: plain safetensors files */
    char s1[512], s2[512];
    snprintf(s1, sizeof s1, "%s/s1.safetensors", root);
    snprintf(s2, sizeof s2, "%s/s2.safetensors", root);
    float v4[4] = {1, 2, 3, 4};
    int64_t sh4[1] = {4}, sh22[2] = {2, 2};
    pdb_st_writer *w;
    PDB_TEST_OK(pdb_st_writer_init(&w));
    PDB_TEST_OK(pdb_st_writer_add(w, "a", PDB_DT_F32, 1, sh4, v4));
    PDB_TEST_OK(pdb_st_writer_add(w, "b", PDB_DT_F32, 1, sh4, v4));
    PDB_TEST_OK(pdb_st_writer_add(w, "c", PDB_DT_F32, 1, sh4, v4));
    PDB_TEST_OK(pdb_st_writer_finish(w, s1));
    pdb_st_writer_free(w);
    PDB_TEST_OK(pdb_st_writer_init(&w));
    PDB_TEST_OK(pdb_st_writer_add(w, "a", PDB_DT_F32, 2, sh22, v4));
    PDB_TEST_OK(pdb_st_writer_add(w, "b", PDB_DT_I32, 1, sh4, v4));
    PDB_TEST_OK(pdb_st_writer_add(w, "d", PDB_DT_F32, 1, sh4, v4));
    PDB_TEST_OK(pdb_st_writer_finish(w, s2));
    pdb_st_writer_free(w);
    PDB_TEST_OK(pdb_block_compare_files(s1, s2, 0, &r));
    assert_false(r.identical);
    assert_int_equal(r.n_tensors, 4);
    int kinds[6] = {0};
    for (int i = 0; i < r.n_tensors; i++) kinds[r.tensors[i].kind]++;
    assert_int_equal(kinds[PDB_BLOCK_CMP_SHAPE], 1);
    assert_int_equal(kinds[PDB_BLOCK_CMP_DTYPE], 1);
    assert_int_equal(kinds[PDB_BLOCK_CMP_ONLY_A], 1);
    assert_int_equal(kinds[PDB_BLOCK_CMP_ONLY_B], 1);
    pdb_block_compare_free_report(&r);
    /* unreadable files are errors naming the file, not differences */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.pdbblk", root);
    assert_int_equal(pdb_block_compare_files(pa, missing, 0, &r), PDB_NOT_FOUND);
    assert_non_null(strstr(pdb_err_msg(), "nope.pdbblk"));
    FILE *f = fopen(missing, "wb");
    fputs("garbage", f);
    fclose(f);
    assert_int_equal(pdb_block_compare_files(missing, pa, 0, &r), PDB_CORRUPT);
    pdb_test_rmrf(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_ulps),
        cmocka_unit_test(test_other_dtypes),
        cmocka_unit_test(test_block_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
