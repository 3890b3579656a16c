/* test_v2: the DeepSeek-V2 reference forward on random checkpoints: chunked prefill equals
 * one-shot (logits and latent cache), cached decode equals a full forward, the latent row is
 * exactly RMSNorm(c_kv) | RoPE(k_pe), and make-model is deterministic. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_make_model.h"
#include "pdb_math.h"
#include "pdb_safetensors.h"
#include "pdb_dtype.h"
#include "pdb_test_util.h"
#include "pdb_rope.h"
#include "pdb_v2.h"

static char *dir;
static pdb_v2_model *model;

static int setup(void **st) {
    dir = pdb_test_tmpdir("v2");
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 7, .out_dir = dir};
    if (pdb_make_model_write(&o) || pdb_v2_load(dir, &model)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **st) {
    pdb_v2_free(model);
    pdb_test_rmrf(dir);
    free(dir);
    return 0;
}

static float max_abs_diff(const float *a, const float *b, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void test_chunked_equals_one_shot(void **st) {
    enum { T = 150 };
    int64_t V = model->cfg.vocab_size;
    int32_t ids[T];
    pdb_test_ids(ids, T, V, 1);
    float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
    pdb_v2_cache ca, cb;
    PDB_TEST_OK(pdb_v2_cache_init(&ca, model, T));
    PDB_TEST_OK(pdb_v2_cache_init(&cb, model, T));
    PDB_TEST_OK(pdb_v2_forward(model, &ca, ids, T, 1, a));
    int64_t chunks[] = {1, 7, 64};
    for (size_t k = 0; k < 3; k++) {
        cb.len = 0;
        for (int64_t p = 0; p < T; p += chunks[k]) {
            int64_t n = T - p < chunks[k] ? T - p : chunks[k];
            PDB_TEST_OK(pdb_v2_forward(model, &cb, ids + p, n, 1, b + p * V));
        }
        float dl = max_abs_diff(a, b, T * V);
        float dc = max_abs_diff(ca.latent, cb.latent, model->cfg.num_layers * T * ca.row);
        if (dl > 1e-4f || dc > 1e-5f) fail_msg("chunk %lld: max |dlogit| %g, max |dlatent| %g", (long long)chunks[k], dl, dc);
    }
    pdb_v2_cache_free(&ca);
    pdb_v2_cache_free(&cb);
    free(a);
    free(b);
}

static void test_decode_equals_full_forward(void **st) {
    enum { T = 40, N = 6 };
    int64_t V = model->cfg.vocab_size;
    int32_t ids[T + N];
    pdb_test_ids(ids, T, V, 2);
    float *full = malloc(sizeof(float) * (T + N) * V), *step = malloc(sizeof(float) * V), *pre = malloc(sizeof(float) * V);
    pdb_v2_cache c;
    PDB_TEST_OK(pdb_v2_cache_init(&c, model, T + N));
    PDB_TEST_OK(pdb_v2_forward(model, &c, ids, T, 0, pre));
    const float *last = pre;
    for (int i = 0; i < N; i++) {
        ids[T + i] = (int32_t)pdb_math_argmax(last, V);
        PDB_TEST_OK(pdb_v2_forward(model, &c, &ids[T + i], 1, 1, step));
        memcpy(pre, step, sizeof(float) * V);
        last = pre;
        /* compare after the loop */
    }
    pdb_v2_cache c2;
    PDB_TEST_OK(pdb_v2_cache_init(&c2, model, T + N));
    PDB_TEST_OK(pdb_v2_forward(model, &c2, ids, T + N, 1, full));
    float d = max_abs_diff(step, full + (T + N - 1) * V, V);
    if (d > 1e-4f) fail_msg("decode vs full forward: max |dlogit| %g", d);
    float dc = max_abs_diff(c.latent, c2.latent, model->cfg.num_layers * (T + N) * c.row);
    if (dc > 1e-5f) fail_msg("decode vs full forward: max |dlatent| %g", dc);
    pdb_v2_cache_free(&c);
    pdb_v2_cache_free(&c2);
    free(full);
    free(step);
    free(pre);
}

static void test_bad_token_and_capacity(void **st) {
    pdb_v2_cache c;
    PDB_TEST_OK(pdb_v2_cache_init(&c, model, 4));
    int32_t bad[2] = {1, (int32_t)model->cfg.vocab_size};
    assert_int_equal(pdb_v2_forward(model, &c, bad, 2, 0, NULL), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "vocabulary"));
    int32_t ok[5] = {1, 2, 3, 4, 5};
    assert_int_equal(pdb_v2_forward(model, &c, ok, 5, 0, NULL), PDB_TOO_LARGE);
    assert_int_equal(c.len, 0);
    pdb_v2_cache_free(&c);
}

static void test_make_model_deterministic(void **st) {
    char *d2 = pdb_test_tmpdir("v2b");
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 7, .out_dir = d2};
    PDB_TEST_OK(pdb_make_model_write(&o));
    char a[512], b[512], cmd[1200];
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", d2);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    assert_int_equal(system(cmd), 0);
    /* the embedding (64000 values: several of make-model's parallel chunks) is the sequential
     * definition: splitmix64 seeded with FNV-1a(name) ^ seed, Box-Muller pairs, bf16 */
    pdb_st *sf;
    PDB_TEST_OK(pdb_st_open(b, &sf));
    const pdb_tensor_view *v = pdb_st_find(sf, "model.embed_tokens.weight");
    assert_non_null(v);
    uint64_t h = 1469598103934665603ull ^ 7, z, s0;
    for (const char *c = "model.embed_tokens.weight"; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    s0 = h;
    double u[2];
    for (int64_t i = 0; i < v->numel; i += 2) {
        for (int k = 0; k < 2; k++) {
            z = (s0 += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            u[k] = ((double)((z ^ (z >> 31)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        double rad = sqrt(-2 * log(u[0]));
        uint16_t want[2] = {pdb_f32_to_bf16((float)(rad * cos(2 * M_PI * u[1]))), pdb_f32_to_bf16((float)(rad * sin(2 * M_PI * u[1])))};
        if (memcmp((const uint16_t *)v->data + i, want, sizeof want)) fail_msg("make-model: embedding value %lld differs from the sequential stream", (long long)i);
    }
    pdb_st_close(sf);
    o.seed = 8;
    PDB_TEST_OK(pdb_make_model_write(&o));
    assert_int_not_equal(system(cmd), 0);
    pdb_test_rmrf(d2);
    free(d2);
}

/* pdb_rope_apply_cs with pdb_rope_angles' factors rotates exactly as pdb_rope_apply (default and
 * YaRN tables, positions up to 2^20) */
static void test_rope_factors_equal_apply(void **st) {
    for (int yarn = 0; yarn < 2; yarn++) {
        pdb_rope_params p = {.type = yarn ? PDB_ROPE_YARN : PDB_ROPE_DEFAULT, .theta = 10000, .factor = 40, .original_max_pos = 4096,
                             .beta_fast = 32, .beta_slow = 1, .mscale = 1, .mscale_all_dim = 1, .attention_factor = -1, .truncate = 1};
        pdb_rope r;
        PDB_TEST_OK(pdb_rope_init(&r, &p, 64));
        float a[64], b[64], cs[64];
        for (int64_t pos = 0; pos < (1 << 20); pos = pos * 3 + 1) {
            for (int i = 0; i < 64; i++) a[i] = b[i] = (float)((i * 29 + pos) % 37) / 9.0f - 2.0f;
            pdb_rope_apply(&r, a, pos);
            pdb_rope_angles(&r, pos, cs);
            pdb_rope_apply_cs(&r, cs, b);
            if (memcmp(a, b, sizeof a)) fail_msg("%s rope at position %lld: factors differ from apply", yarn ? "yarn" : "default", (long long)pos);
        }
        pdb_rope_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_equals_one_shot), cmocka_unit_test(test_decode_equals_full_forward),
        cmocka_unit_test(test_bad_token_and_capacity), cmocka_unit_test(test_make_model_deterministic),
        cmocka_unit_test(test_rope_factors_equal_apply),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
