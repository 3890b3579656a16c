/* test_v4_parity: `pdb_v4_forward` against the goldens of tools/gen_v4_parity.py (every case
 * under tests/golden/v4/, or $PDB_V4_GOLDEN): `exact` semantics against transformers 5.17 must
 * agree to max |dlogit| <= 1e-3 on the prefill and every cached greedy decode step, with the
 * same greedy tokens; `official` semantics against the official-math goldens must give the same
 * greedy tokens, and the number of logits further than 1e-3 away is reported (an element on an
 * FP8/FP4 rounding boundary may round the other way, and an FP4 flip in an indexer query can change
 * that query's top-k) and must stay at or below 10% of the positions.
 * A missing golden set fails, never skips. */
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
#include "pdb_v4.h"

#define TOL 1e-3f

typedef struct run_stats {
    float worst_pre, worst_dec;
    int64_t over_pre, over_dec;  /* logits with |d| > TOL */
    int64_t rows_over;           /* positions (rows) with any |d| > TOL */
    int64_t positions;           /* T + N */
    int tokens_equal;
} run_stats;

static run_stats run_case(const char *dir, const pdb_v4_model *m, const pdb_st *g, pdb_v4_semantics sem) {
    const char *pre = sem == PDB_V4_SEM_EXACT ? "" : "official_";
    char n1[64], n2[64], n3[64];
    snprintf(n1, sizeof n1, "%sprefill_logits", pre);
    snprintf(n2, sizeof n2, "%sdecode_tokens", pre);
    snprintf(n3, sizeof n3, "%sdecode_logits", pre);
    int64_t V = m->cfg.vocab_size;
    const pdb_tensor_view *ids_v = pdb_st_find(g, "input_ids"), *pl_v = pdb_st_find(g, n1);
    const pdb_tensor_view *dt_v = pdb_st_find(g, n2), *dl_v = pdb_st_find(g, n3);
    if (!ids_v || !pl_v || !dt_v || !dl_v) fail_msg("%s: golden.safetensors lacks %s tensors", dir, pre[0] ? pre : "exact");
    assert_int_equal(ids_v->dtype, PDB_DT_I32);
    int64_t T = ids_v->numel, N = dt_v->numel;
    assert_int_equal(pl_v->numel, T * V);
    assert_int_equal(dl_v->numel, N * V);
    const float *gpl = pl_v->data, *gdl = dl_v->data;
    const int32_t *gdt = dt_v->data;
    float *pl = malloc(sizeof(float) * T * V), *dl = malloc(sizeof(float) * V), *last = malloc(sizeof(float) * V);
    pdb_v4_cache c;
    PDB_TEST_OK(pdb_v4_cache_init(&c, m, T + N, sem));
    PDB_TEST_OK(pdb_v4_forward(m, &c, ids_v->data, T, 1, pl));
    run_stats r = {0, 0, 0, 0, 0, T + N, 1};
    for (int64_t t = 0; t < T; t++) {
        int any = 0;
        float wr = 0;
        for (int64_t j = 0; j < V; j++) {
            float d = fabsf(pl[t * V + j] - gpl[t * V + j]);
            r.worst_pre = fmaxf(r.worst_pre, d);
            wr = fmaxf(wr, d);
            if (d > TOL) { r.over_pre++; any = 1; }
        }
        if (any) printf("    %s [%s] prefill position %lld: max |dlogit| %.3g\n", dir, pdb_v4_semantics_name(sem), (long long)t, wr);
        r.rows_over += any;
    }
    memcpy(last, pl + (T - 1) * V, sizeof(float) * V);
    for (int64_t i = 0; i < N; i++) {
        int32_t tok = (int32_t)pdb_math_argmax(last, V);
        if (tok != gdt[i]) {
            r.tokens_equal = 0;
            printf("  %s [%s] decode step %lld: greedy token %d, golden %d\n", dir, pdb_v4_semantics_name(sem), (long long)i,
                   tok, gdt[i]);
            break;
        }
        PDB_TEST_OK(pdb_v4_forward(m, &c, &tok, 1, 1, dl));
        int any = 0;
        for (int64_t j = 0; j < V; j++) {
            float d = fabsf(dl[j] - gdl[i * V + j]);
            r.worst_dec = fmaxf(r.worst_dec, d);
            if (d > TOL) { r.over_dec++; any = 1; }
        }
        r.rows_over += any;
        memcpy(last, dl, sizeof(float) * V);
    }
    printf("  %-34s %-8s T=%lld N=%lld max|dlogit| prefill %.3g decode %.3g; logits > %.0e: %lld/%lld prefill, "
           "%lld/%lld decode (%lld of %lld positions); tokens %s\n",
           dir, pdb_v4_semantics_name(sem), (long long)T, (long long)N, r.worst_pre, r.worst_dec, TOL,
           (long long)r.over_pre, (long long)(T * V), (long long)r.over_dec, (long long)(N * V), (long long)r.rows_over,
           (long long)(T + N), r.tokens_equal ? "identical" : "DIFFER");
    pdb_v4_cache_free(&c);
    free(pl);
    free(dl);
    free(last);
    return r;
}

static void check_case(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%.1000s/golden.safetensors", dir);
    pdb_st *g = NULL;
    PDB_TEST_OK(pdb_st_open(path, &g));
    pdb_v4_model *m = NULL;
    PDB_TEST_OK(pdb_v4_load(dir, &m));
    run_stats ex = run_case(dir, m, g, PDB_V4_SEM_EXACT);
    run_stats of = run_case(dir, m, g, PDB_V4_SEM_OFFICIAL);
    pdb_v4_free(m);
    pdb_st_close(g);
    if (!ex.tokens_equal || ex.worst_pre > TOL || ex.worst_dec > TOL)
        fail_msg("%s: exact semantics: max |dlogit| prefill %g decode %g (> %g) or greedy tokens differ", dir, ex.worst_pre,
                 ex.worst_dec, TOL);
    if (!of.tokens_equal) fail_msg("%s: official semantics: greedy tokens differ", dir);
    if (of.rows_over * 10 > of.positions)
        fail_msg("%s: official semantics: %lld of %lld positions beyond %g (> 10%%)", dir, (long long)of.rows_over,
                 (long long)of.positions, TOL);
}

static void test_parity_all_cases(void **st) {
    const char *root = getenv("PDB_V4_GOLDEN") ? getenv("PDB_V4_GOLDEN") : "tests/golden/v4";
    DIR *d = opendir(root);
    if (!d) fail_msg("%s: missing golden data (generate with tools/gen_v4_parity.py)", root);
    struct dirent *e;
    char names[64][256];
    int n = 0;
    while ((e = readdir(d)) && n < 64)
        if (e->d_name[0] != '.' && e->d_type == DT_DIR) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    if (n < 3) fail_msg("%s: %d cases, want >= 3", root, n);
    for (int i = 0; i < n; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%.500s/%.255s", root, names[i]);
        check_case(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parity_all_cases)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
