/* test_dec_model: the decode engine's forward. With --scheme none it agrees with the reference
 * forward (same greedy tokens, logits within 1e-4); its results are bit-identical across
 * chunkings, batch compositions, thread counts and ISAs (the exactness contract); fingerprints
 * separate schemes and weights. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_dec_model.h"
#include "pdb_make_model.h"
#include "pdb_math.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"
#include "pdb_v2.h"
#include "pdb_v2_ops.h"

static char *root, hf[512], dn[512], dq[512];
static pdb_pool *pool;

static int setup(void **st) {
    root = pdb_test_tmpdir("dec");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dn, sizeof dn, "%s/none", root);
    snprintf(dq, sizeof dq, "%s/mx", root);
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 11, .out_dir = hf};
    if (pdb_make_model_write(&o) || pdb_quantize_model(hf, dn, "none", 0) || pdb_quantize_model(hf, dq, "mx", 0) ||
        pdb_pool_create(2, &pool)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **st) {
    pdb_pool_destroy(pool);
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

/* The V2 decoder's layer options (the attention form the tests force). */
static pdb_v2_ops_opts *v2_opts(const pdb_dec_model *m) {
    return ((const pdb_v2_qweights *)pdb_dec_model_weights(m, "deepseek_v2"))->opts;
}

/* prefill ids in chunks of `chunk`, return last logits and the cache */
static void run_chunked(pdb_dec_model *m, const int32_t *ids, int64_t T, int64_t chunk, pdb_dec_seq *s, float *logits) {
    for (int64_t p = 0; p < T; p += chunk) {
        int64_t n = T - p < chunk ? T - p : chunk;
        pdb_dec_seg sg = {s, ids + p, n, p + n == T ? logits : NULL};
        PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
    }
}

static void test_none_matches_reference(void **st) {
    enum { T = 60, N = 12 };
    pdb_dec_model *m;
    pdb_v2_model *ref;
    PDB_TEST_OK(pdb_dec_model_open(dn, pool, &m));
    PDB_TEST_OK(pdb_v2_load(hf, &ref));
    int64_t V = ref->cfg.vocab_size;
    int32_t ids[T + N], a, b;
    pdb_test_ids(ids, T, V, 3);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    pdb_dec_seq s;
    pdb_v2_cache c;
    PDB_TEST_OK(pdb_dec_seq_init(&s, m, T + N));
    PDB_TEST_OK(pdb_v2_cache_init(&c, ref, T + N));
    run_chunked(m, ids, T, T, &s, la);
    PDB_TEST_OK(pdb_v2_forward(ref, &c, ids, T, 0, lb));
    float worst = 0;
    for (int i = 0; i < N; i++) {
        for (int64_t v = 0; v < V; v++) worst = fmaxf(worst, fabsf(la[v] - lb[v]));
        a = (int32_t)pdb_math_argmax(la, V);
        b = (int32_t)pdb_math_argmax(lb, V);
        if (a != b) fail_msg("step %d: decoder token %d, reference %d", i, a, b);
        pdb_dec_seg sg = {&s, &a, 1, la};
        PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
        PDB_TEST_OK(pdb_v2_forward(ref, &c, &b, 1, 0, lb));
    }
    printf("  decoder(scheme none) vs reference: %d greedy tokens identical, max |dlogit| %.3g\n", N, worst);
    assert_true(worst < 1e-3f);
    pdb_dec_seq_free(&s);
    pdb_v2_cache_free(&c);
    pdb_dec_model_close(m);
    pdb_v2_free(ref);
    free(la);
    free(lb);
}

static const char *const attn_names[] = {"auto", "tasks", "stages", "split tasks"};

static void test_bit_exact_chunking_isa_batch(void **st) {
    enum { T = 130 };
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dq, pool, &m));
    int64_t V = m ? pdb_dec_model_config(m)->vocab_size : 0;
    int32_t ids[T];
    pdb_test_ids(ids, T, V, 9);
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    pdb_dec_seq s0, s1;
    PDB_TEST_OK(pdb_dec_seq_init(&s0, m, T));
    PDB_TEST_OK(pdb_dec_seq_init(&s1, m, T));
    run_chunked(m, ids, T, T, &s0, ref);
    size_t cache_bytes = sizeof(float) * (size_t)(s0.n_layers * T * s0.row);
    int64_t chunks[] = {1, 7, 64, 128};
    for (size_t k = 0; k < 4; k++) {
        s1.len = 0;
        run_chunked(m, ids, T, chunks[k], &s1, got);
        if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
            fail_msg("chunk %lld is not bit-identical to one-shot", (long long)chunks[k]);
    }
    /* every attention form (per-(row, head) tasks, head-parallel stages, split tasks), forced, on
     * calls of one and of seven rows */
    for (int path = PDB_V2_ATTN_TASKS; path <= PDB_V2_ATTN_SPLIT; path++) {
        v2_opts(m)->attn_path = path;
        for (int64_t chunk = 1; chunk <= 7; chunk += 6) {
            s1.len = 0;
            run_chunked(m, ids, T, chunk, &s1, got);
            if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
                fail_msg("attention %s, chunk %lld: not bit-identical to one-shot", attn_names[path], (long long)chunk);
        }
    }
    v2_opts(m)->attn_path = PDB_V2_ATTN_AUTO;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
        if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        s1.len = 0;
        run_chunked(m, ids, T, 33, &s1, got);
        if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
            fail_msg("ISA %s is not bit-identical", pdb_qmat_isa_name((pdb_qmat_isa)isa));
    }
    pdb_qmat_isa_set(best);
    /* batch: two sequences in one forward equal each alone */
    pdb_dec_seq s2;
    PDB_TEST_OK(pdb_dec_seq_init(&s2, m, T));
    int32_t other[40];
    pdb_test_ids(other, 40, V, 77);
    float *lo = malloc(sizeof(float) * V);
    s1.len = 0;
    pdb_dec_seg segs[2] = {{&s1, ids, T, got}, {&s2, other, 40, lo}};
    PDB_TEST_OK(pdb_dec_forward(m, segs, 2));
    if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
        fail_msg("batched with another sequence is not bit-identical");
    /* decode steps of two sequences at different positions in one forward equal each sequence's
     * step alone, in every attention form */
    for (int path = PDB_V2_ATTN_TASKS; path <= PDB_V2_ATTN_SPLIT; path++) {
        v2_opts(m)->attn_path = path;
        pdb_dec_seq a[2], b[2];
        float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *ka = malloc(sizeof(float) * V),
              *kb = malloc(sizeof(float) * V);
        for (int k = 0; k < 2; k++) {
            PDB_TEST_OK(pdb_dec_seq_init(&a[k], m, 40));
            PDB_TEST_OK(pdb_dec_seq_init(&b[k], m, 40));
            run_chunked(m, ids, 30, 30, &a[k], la);
            run_chunked(m, other, 17, 17, &b[k], lb);
        }
        pdb_dec_seg one_a = {&a[0], ids + 30, 1, la}, one_b = {&b[0], other + 17, 1, lb};
        PDB_TEST_OK(pdb_dec_forward(m, &one_a, 1));
        PDB_TEST_OK(pdb_dec_forward(m, &one_b, 1));
        pdb_dec_seg both[2] = {{&a[1], ids + 30, 1, ka}, {&b[1], other + 17, 1, kb}};
        PDB_TEST_OK(pdb_dec_forward(m, both, 2));
        int same = !memcmp(la, ka, sizeof(float) * V) && !memcmp(lb, kb, sizeof(float) * V);
        for (int64_t l = 0; l < a[0].n_layers; l++) /* the rows written (positions 0 .. len-1 of each layer) */
            same &= !memcmp(a[0].lat + l * 40 * a[0].row, a[1].lat + l * 40 * a[0].row, sizeof(float) * (size_t)(a[0].len * a[0].row)) &&
                    !memcmp(b[0].lat + l * 40 * b[0].row, b[1].lat + l * 40 * b[0].row, sizeof(float) * (size_t)(b[0].len * b[0].row));
        if (!same) fail_msg("attention %s: two decode steps in one forward are not bit-identical to each alone", attn_names[path]);
        for (int k = 0; k < 2; k++) pdb_dec_seq_free(&a[k]), pdb_dec_seq_free(&b[k]);
        free(la), free(lb), free(ka), free(kb);
    }
    v2_opts(m)->attn_path = PDB_V2_ATTN_AUTO;
    /* single thread */
    pdb_dec_model *m1;
    PDB_TEST_OK(pdb_dec_model_open(dq, NULL, &m1));
    s1.len = 0;
    run_chunked(m1, ids, T, 50, &s1, got);
    if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
        fail_msg("one thread is not bit-identical to two");
    /* many threads: one-row calls take the split tasks on their own (2 x heads threads) */
    pdb_pool *many;
    PDB_TEST_OK(pdb_pool_create((int)(2 * pdb_dec_model_config(m)->num_heads), &many));
    pdb_dec_model *mm;
    PDB_TEST_OK(pdb_dec_model_open(dq, many, &mm));
    s1.len = 0;
    run_chunked(mm, ids, T, 1, &s1, got);
    if (memcmp(ref, got, sizeof(float) * V) || memcmp(s0.lat, s1.lat, cache_bytes))
        fail_msg("%d threads (split tasks) are not bit-identical to two", pdb_pool_threads(many));
    pdb_dec_model_close(mm);
    pdb_pool_destroy(many);
    printf("  bit-identical: chunks 1/7/64/128, every attention form, ISAs up to %s, batched, two decode steps at once, "
           "1 vs 2 vs 2 x heads threads\n", pdb_qmat_isa_name(best));
    pdb_dec_model_close(m1);
    pdb_dec_seq_free(&s0);
    pdb_dec_seq_free(&s1);
    pdb_dec_seq_free(&s2);
    pdb_dec_model_close(m);
    free(ref);
    free(got);
    free(lo);
}

static void test_fingerprints(void **st) {
    pdb_dec_model *a, *b;
    PDB_TEST_OK(pdb_dec_model_open(dn, NULL, &a));
    PDB_TEST_OK(pdb_dec_model_open(dq, NULL, &b));
    assert_memory_not_equal(pdb_dec_model_fingerprint(a), pdb_dec_model_fingerprint(b), 32);
    assert_string_equal(pdb_dec_model_scheme(b), "mx");
    /* the HF directory itself (no identity file) is scheme none with a computed digest: same as dn */
    pdb_dec_model *c;
    PDB_TEST_OK(pdb_dec_model_open(hf, NULL, &c));
    assert_memory_equal(pdb_dec_model_fingerprint(a), pdb_dec_model_fingerprint(c), 32);
    pdb_dec_model_close(a);
    pdb_dec_model_close(b);
    pdb_dec_model_close(c);
    /* other weights, same config -> other fingerprint */
    char hf2[600];
    snprintf(hf2, sizeof hf2, "%s/hf2", root);
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 12, .out_dir = hf2};
    PDB_TEST_OK(pdb_make_model_write(&o));
    PDB_TEST_OK(pdb_dec_model_open(hf2, NULL, &c));
    PDB_TEST_OK(pdb_dec_model_open(hf, NULL, &a));
    assert_memory_not_equal(pdb_dec_model_fingerprint(a), pdb_dec_model_fingerprint(c), 32);
    pdb_dec_model_close(a);
    pdb_dec_model_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_matches_reference), cmocka_unit_test(test_bit_exact_chunking_isa_batch),
        cmocka_unit_test(test_fingerprints),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
