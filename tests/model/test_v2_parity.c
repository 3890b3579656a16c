/* test_v2_parity: `pdb_v2_forward` against transformers 5.17 goldens (tools/gen_v2_parity.py):
 * for every case under tests/golden/v2/, prefill logits and the greedy cached decode (tokens
 * and logits) must agree to max |dlogit| <= 1e-3. A missing golden set fails, never skips. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_math.h"
#include "pdb_safetensors.h"
#include "pdb_test_util.h"
#include "pdb_v2.h"

#define TOL 1e-3f

static float check_case(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    pdb_st *g = NULL;
    PDB_TEST_OK(pdb_st_open(path, &g));
    pdb_v2_model *m = NULL;
    PDB_TEST_OK(pdb_v2_load(dir, &m));
    int64_t V = m->cfg.vocab_size;
    const pdb_tensor_view *ids_v = pdb_st_find(g, "input_ids"), *pl_v = pdb_st_find(g, "prefill_logits");
    const pdb_tensor_view *dt_v = pdb_st_find(g, "decode_tokens"), *dl_v = pdb_st_find(g, "decode_logits");
    assert_non_null(ids_v); assert_non_null(pl_v); assert_non_null(dt_v); assert_non_null(dl_v);
    assert_int_equal(ids_v->dtype, PDB_DT_I32);
    int64_t T = ids_v->numel, N = dt_v->numel;
    assert_int_equal(pl_v->numel, T * V);
    assert_int_equal(dl_v->numel, N * V);
    const float *gpl = pl_v->data, *gdl = dl_v->data;
    const int32_t *gdt = dt_v->data;
    float *pl = malloc(sizeof(float) * T * V), *dl = malloc(sizeof(float) * V);
    pdb_v2_cache c;
    PDB_TEST_OK(pdb_v2_cache_init(&c, m, T + N));
    PDB_TEST_OK(pdb_v2_forward(m, &c, ids_v->data, T, 1, pl));
    float worst = 0, worst_dec = 0;
    for (int64_t i = 0; i < T * V; i++) worst = fmaxf(worst, fabsf(pl[i] - gpl[i]));
    const float *last = pl + (T - 1) * V;
    int32_t tok;
    for (int64_t i = 0; i < N; i++) {
        tok = (int32_t)pdb_math_argmax(last, V);
        if (tok != gdt[i]) fail_msg("%s: decode step %lld: greedy token %d, transformers %d", dir, (long long)i, tok, gdt[i]);
        PDB_TEST_OK(pdb_v2_forward(m, &c, &tok, 1, 1, dl));
        for (int64_t j = 0; j < V; j++) worst_dec = fmaxf(worst_dec, fabsf(dl[j] - gdl[i * V + j]));
        memcpy(pl, dl, sizeof(float) * V);
        last = pl;
    }
    printf("  %-40s T=%lld N=%lld  max|dlogit| prefill %.3g decode %.3g\n", dir, (long long)T, (long long)N, worst, worst_dec);
    if (worst > TOL || worst_dec > TOL) fail_msg("%s: max |dlogit| prefill %g decode %g > %g", dir, worst, worst_dec, TOL);
    pdb_v2_cache_free(&c);
    free(pl);
    free(dl);
    pdb_v2_free(m);
    pdb_st_close(g);
    return fmaxf(worst, worst_dec);
}

static void test_parity_all_cases(void **st) {
    const char *root = "tests/golden/v2";
    DIR *d = opendir(root);
    if (!d) fail_msg("%s: missing golden data (generate with tools/gen_v2_parity.py)", root);
    struct dirent *e;
    char names[64][256];
    int n = 0;
    while ((e = readdir(d)) && n < 64)
        if (e->d_name[0] != '.' && e->d_type == DT_DIR) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    if (n < 4) fail_msg("%s: %d cases, want >= 4", root, n);
    for (int i = 0; i < n; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        check_case(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parity_all_cases)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
