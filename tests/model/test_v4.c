/* test_v4: DeepSeek-V4 config forms (transformers 5.17 layout, legacy compress_ratios /
 * num_hash_layers / qk_rope_head_dim / flat rope_scaling, defaults, errors naming file and field),
 * the quantization simulations (FP8/FP4 round-trips, ties, power-of-two scales, Hadamard), and
 * the reference forward on a random `make-model --arch deepseek_v4 --preset tiny` checkpoint:
 * chunked prefill (chunks not aligned to 4 or 16) equals one shot bit for bit, pools included, and cached
 * decode equals one full forward, in both semantics; the attention of a chunk (every head of a
 * token at once) equals one token at a time bit for bit; the capture hook's part of the checkpoint
 * (PDB_V4_PART_HOOK) fills the same pools bit for bit, holds a small share of the bytes, and
 * refuses a forward. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <sys/wait.h>

#include "pdb_safetensors.h"

#include "pdb_arch.h"
#include "pdb_config.h"
#include "pdb_dtype.h"
#include "pdb_file.h"
#include "pdb_limits.h"
#include "pdb_make_model.h"
#include "pdb_test_util.h"
#include "pdb_pool.h"
#include "pdb_qmat_st.h"
#include "pdb_v4.h"
#include "pdb_v4_qsim.h"

/* ---- config ----------------------------------------------------------------------------- */

static void test_config_transformers_form(void **st) {
    pdb_config c;
    PDB_TEST_OK(pdb_config_load("tests/golden/v4/a_hc3_csa_hca8", &c));
    assert_int_equal(c.arch, PDB_ARCH_DEEPSEEK_V4);
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.head_dim, 80);
    assert_int_equal(c.qk_rope_head_dim, 16);
    assert_int_equal(c.hc_mult, 3);
    assert_int_equal(c.sliding_window, 6);
    assert_int_equal(c.compress_rate_csa, 4);
    assert_int_equal(c.compress_rate_hca, 8);
    assert_int_equal(c.v4_attn[0], PDB_V4_ATTN_SLIDING);
    assert_int_equal(c.v4_attn[1], PDB_V4_ATTN_CSA);
    assert_int_equal(c.v4_attn[2], PDB_V4_ATTN_HCA);
    assert_int_equal(c.v4_hash_moe[0], 1);
    assert_int_equal(c.v4_hash_moe[1], 0);
    assert_int_equal(c.rope.type, PDB_ROPE_DEFAULT);
    assert_int_equal(c.rope_compress.type, PDB_ROPE_YARN);
    assert_true(c.rope_compress.theta == 160000.0 && c.rope_compress.factor == 4.0 && c.rope_compress.attention_factor == 1.0);
    assert_int_equal(c.index_topk, 4);
    assert_int_equal(pdb_config_v4_rate(&c, 2), 8);
    assert_true(c.swiglu_limit == 1.5);
    /* serialise and parse back */
    char *js = NULL;
    PDB_TEST_OK(pdb_config_to_json(&c, &js));
    pdb_config d;
    PDB_TEST_OK(pdb_config_parse(js, "roundtrip", &d));
    free(js);
    assert_memory_equal(c.v4_attn, d.v4_attn, (size_t)c.num_layers);
    assert_memory_equal(c.v4_hash_moe, d.v4_hash_moe, (size_t)c.num_layers);
    assert_int_equal(d.qk_rope_head_dim, 16);
    assert_true(d.rope_compress.attention_factor == 1.0 && d.rope_compress.original_max_pos == 64);
}

static void test_config_legacy_form(void **st) {
    const char *js =
        "{\"model_type\": \"deepseek_v4\", \"vocab_size\": 100, \"hidden_size\": 32, \"num_hidden_layers\": 5,"
        " \"num_attention_heads\": 2, \"head_dim\": 128, \"qk_rope_head_dim\": 64, \"q_lora_rank\": 16,"
        " \"moe_intermediate_size\": 8, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"o_groups\": 2,"
        " \"o_lora_rank\": 8, \"index_n_heads\": 4, \"index_head_dim\": 64, \"index_topk\": 8,"
        " \"compress_ratios\": [0, 0, 4, 128, 4, 0], \"num_hash_layers\": 2, \"rope_theta\": 10000,"
        " \"compress_rope_theta\": 160000, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16,"
        " \"original_max_position_embeddings\": 65536, \"beta_fast\": 32, \"beta_slow\": 1}}";
    pdb_config c;
    PDB_TEST_OK(pdb_config_parse(js, "legacy.json", &c));
    assert_int_equal(c.qk_rope_head_dim, 64);
    uint8_t want[5] = {PDB_V4_ATTN_SLIDING, PDB_V4_ATTN_SLIDING, PDB_V4_ATTN_CSA, PDB_V4_ATTN_HCA, PDB_V4_ATTN_CSA};
    assert_memory_equal(c.v4_attn, want, 5);
    assert_int_equal(c.v4_hash_moe[1], 1);
    assert_int_equal(c.v4_hash_moe[2], 0);
    assert_int_equal(c.rope.type, PDB_ROPE_DEFAULT);
    assert_true(c.rope.theta == 10000.0);
    assert_int_equal(c.rope_compress.type, PDB_ROPE_YARN);
    assert_true(c.rope_compress.theta == 160000.0 && c.rope_compress.factor == 16.0);
    assert_true(c.rope_compress.attention_factor == 1.0); /* transformers injects 1.0 for the flat form */
    assert_int_equal(c.compress_rate_hca, 128);
    assert_int_equal(c.hc_mult, 4);       /* class defaults */
    assert_int_equal(c.sliding_window, 128);
    assert_int_equal(c.scoring_func, PDB_V4_SCORE_SQRTSOFTPLUS);
}

static void test_config_defaults_schedule(void **st) {
    const char *js = "{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 6}";
    pdb_config c;
    PDB_TEST_OK(pdb_config_parse(js, "defaults.json", &c));
    uint8_t want[6] = {PDB_V4_ATTN_HCA, PDB_V4_ATTN_HCA, PDB_V4_ATTN_HCA, PDB_V4_ATTN_CSA, PDB_V4_ATTN_HCA, PDB_V4_ATTN_CSA};
    assert_memory_equal(c.v4_attn, want, 6);
    assert_int_equal(c.v4_hash_moe[2], 1);
    assert_int_equal(c.v4_hash_moe[3], 0);
    assert_int_equal(c.head_dim, 512);
    assert_int_equal(c.qk_rope_head_dim, 64);
    assert_int_equal(c.hidden_size, 4096);
}

static void test_config_flash_preset(void **st) {
    pdb_config c, d;
    PDB_TEST_OK(pdb_make_model_preset("deepseek_v4", "v4-flash", &c));
    char *js = NULL;
    PDB_TEST_OK(pdb_config_to_json(&c, &js));
    PDB_TEST_OK(pdb_config_parse(js, "flash", &d));
    free(js);
    assert_int_equal(d.num_layers, 43);
    assert_int_equal(d.head_dim, 512);
    assert_int_equal(d.qk_rope_head_dim, 64);
    assert_int_equal(d.sliding_window, 128);
    assert_int_equal(d.index_topk, 512);
    assert_int_equal(d.o_groups * d.o_lora_rank, 8192);
    assert_int_equal(d.v4_attn[0], PDB_V4_ATTN_SLIDING);
    assert_int_equal(d.v4_attn[1], PDB_V4_ATTN_SLIDING);
    assert_int_equal(d.v4_attn[2], PDB_V4_ATTN_CSA);
    assert_int_equal(d.v4_attn[3], PDB_V4_ATTN_HCA);
    assert_int_equal(d.v4_attn[42], PDB_V4_ATTN_CSA);
    assert_int_equal(d.v4_hash_moe[2], 1);
    assert_int_equal(d.v4_hash_moe[3], 0);
    assert_true(d.rope_compress.type == PDB_ROPE_YARN && d.rope_compress.factor == 16 &&
                d.rope_compress.original_max_pos == 65536 && d.rope_compress.theta == 160000 &&
                d.rope_compress.attention_factor == 1.0);
    assert_true(d.rope.type == PDB_ROPE_DEFAULT && d.rope.theta == 10000);
    PDB_TEST_OK(pdb_v4_check_semantics(&d, PDB_V4_SEM_OFFICIAL));
}

/* v4-long-tiny: the 1M-token preset. Its window holds a 2^20-token prompt and a 4,096-token answer
 * (the limits derived from it say so), it keeps every attention path (sliding, CSA with its indexer,
 * HCA) with the rates that make 1M affordable on a CPU, the real tokenizer's vocabulary, and the
 * block-size rule follows the rates (2048 served, 512 and 1536 refused). */
static void test_config_long_tiny_preset(void **st) {
    (void)st;
    pdb_config c, d;
    PDB_TEST_OK(pdb_make_model_preset("deepseek_v4", "v4-long-tiny", &c));
    char *js = NULL;
    PDB_TEST_OK(pdb_config_to_json(&c, &js));
    PDB_TEST_OK(pdb_config_parse(js, "long-tiny", &d));
    free(js);
    assert_int_equal(d.max_position_embeddings, 1048576 + 4096);
    assert_int_equal(d.vocab_size, 129280);
    assert_int_equal(d.num_heads, 1);
    assert_int_equal(d.index_n_heads, 1);
    assert_int_equal(d.compress_rate_csa, 256);
    assert_int_equal(d.compress_rate_hca, 1024);
    assert_int_equal(d.v4_attn[0], PDB_V4_ATTN_SLIDING);
    assert_int_equal(d.v4_attn[1], PDB_V4_ATTN_SLIDING);
    assert_int_equal(d.v4_attn[2], PDB_V4_ATTN_CSA);
    assert_int_equal(d.v4_attn[3], PDB_V4_ATTN_HCA);
    assert_true(d.index_topk < 1048576 / d.compress_rate_csa); /* the indexer selects at 1M */
    PDB_TEST_OK(pdb_v4_check_semantics(&d, PDB_V4_SEM_OFFICIAL));
    PDB_TEST_OK(pdb_arch_check_block_size(&d, 2048));
    assert_int_not_equal(pdb_arch_check_block_size(&d, 512), PDB_OK);
    assert_int_not_equal(pdb_arch_check_block_size(&d, 1536), PDB_OK);
    pdb_limits_in in = {.model_window = d.max_position_embeddings, .block_size = 2048, .vocab_size = d.vocab_size,
                        .block_bytes = 1};
    pdb_limits l;
    PDB_TEST_OK(pdb_limits_derive(&in, &l));
    assert_true(l.max_prompt_tokens >= 1048576 + 16); /* a 2^20-token prompt and bench-cold's 16 tokens */
    assert_true(l.prefill_max_tokens >= 1048576 + 16);
}

static void expect_error(const char *js, const char *field) {
    pdb_config c;
    pdb_status s = pdb_config_parse(js, "bad.json", &c);
    if (s == PDB_OK) fail_msg("accepted a config with a bad '%s'", field);
    if (!strstr(pdb_err_msg(), "bad.json") || !strstr(pdb_err_msg(), field))
        fail_msg("error '%s' does not name the file and '%s'", pdb_err_msg(), field);
}

static void test_config_errors(void **st) {
    expect_error("{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 2, \"layer_types\": [\"sliding_attention\"]}",
                 "layer_types");
    expect_error("{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 2, "
                 "\"layer_types\": [\"sliding_attention\", \"full_attention\"]}", "layer_types[1]");
    expect_error("{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 2, \"compress_ratios\": [0, 8]}",
                 "compress_ratios[1]");
    expect_error("{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 2, \"mlp_layer_types\": [\"moe\", \"dense\"]}",
                 "mlp_layer_types[1]");
    expect_error("{\"model_type\": \"deepseek_v4\", \"num_key_value_heads\": 2}", "num_key_value_heads");
    expect_error("{\"model_type\": \"deepseek_v4\", \"scoring_func\": \"relu\"}", "scoring_func");
    expect_error("{\"model_type\": \"deepseek_v4\", \"o_groups\": 7}", "o_groups");
    expect_error("{\"model_type\": \"deepseek_v4\", \"hidden_size\": -4}", "hidden_size");
    expect_error("{\"model_type\": \"deepseek_v4\", \"compress_rates\": {\"compressed_sparse_attention\": 0}}",
                 "compress_rates");
    expect_error("{\"model_type\": \"deepseek_v4\", \"rope_parameters\": {\"main\": {\"rope_type\": \"default\", "
                 "\"rope_theta\": 10000}, \"compress\": {\"rope_type\": \"longrope\"}}}", "compress");
}

/* ---- quantization simulations ----------------------------------------------------------- */

static void test_qsim(void **st) {
    assert_true(pdb_v4_qsim_pow2_ceil(1.0f) == 1.0f);
    assert_true(pdb_v4_qsim_pow2_ceil(1.0000001f) == 2.0f);
    assert_true(pdb_v4_qsim_pow2_ceil(0.75f) == 1.0f);
    assert_true(pdb_v4_qsim_pow2_ceil(0x1p-20f) == 0x1p-20f);
    /* FP4 ties to even at scale 1 (amax 6 -> s = 1) */
    float x[32] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.75f, 0.3f, 2.9f};
    float want[11] = {6.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -1.0f, 0.5f, 3.0f};
    pdb_v4_qsim_fp4(x, 32);
    for (int i = 0; i < 11; i++)
        if (x[i] != want[i]) fail_msg("fp4 element %d: %g, want %g", i, x[i], want[i]);
    /* FP8: amax 448 * 2^-3 -> s = 2^-3; 1.0 is exact, 1.0 + 2^-5 rounds to 1.0 (3 mantissa bits) */
    float y[64] = {56.0f, 1.0f, 1.0f + 0x1p-5f, 1.0f + 0x1p-3f, 0.0f};
    pdb_v4_qsim_fp8(y, 64);
    assert_true(y[0] == 56.0f && y[1] == 1.0f && y[2] == 1.0f && y[3] == 1.125f && y[4] == 0.0f);
    /* tiny blocks use the 1e-4 floor, so small values keep their relative precision */
    float z[64] = {1e-6f};
    pdb_v4_qsim_fp8(z, 64);
    assert_true(fabsf(z[0] - 1e-6f) < 1e-7f);
    /* Hadamard: orthonormal and an involution */
    float h[8] = {1, 0, 0, 0, 0, 0, 0, 0}, v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v0[8];
    memcpy(v0, v, sizeof v);
    pdb_v4_qsim_hadamard(h, 8);
    for (int i = 0; i < 8; i++) assert_true(fabsf(h[i] - 0.35355339f) < 1e-6f);
    pdb_v4_qsim_hadamard(v, 8);
    assert_true(fabsf(v[0] - 36.0f / sqrtf(8.0f)) < 1e-5f && fabsf(v[1] - (-4.0f / sqrtf(8.0f))) < 1e-5f);
    pdb_v4_qsim_hadamard(v, 8);
    for (int i = 0; i < 8; i++) assert_true(fabsf(v[i] - v0[i]) < 1e-5f);
}

/* ---- forward on a random tiny checkpoint --------------------------------------------------- */

static char *g_dir;
static pdb_v4_model *g_m;

static int setup_model(void **st) {
    g_dir = pdb_test_tmpdir("v4");
    pdb_make_model_opts o = {.arch = "deepseek_v4", .preset = "tiny", .seed = 7, .out_dir = g_dir, .vocab = 300};
    if (pdb_make_model_write(&o) || pdb_v4_load(g_dir, &g_m)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    return 0;
}

static int teardown_model(void **st) {
    pdb_v4_free(g_m);
    pdb_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

static void make_ids(int32_t *ids, int64_t n) {
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) { s = s * 1103515245u + 12345u; ids[i] = (int32_t)(2 + (s >> 8) % 290); }
}

static float max_diff(const float *a, const float *b, int64_t n) {
    float w = 0;
    for (int64_t i = 0; i < n; i++) w = fmaxf(w, fabsf(a[i] - b[i]));
    return w;
}

/* max |d| over n rows of format r (decoded exactly) */
static float max_diff_rows(const pdb_v4_row *r, const uint8_t *a, const uint8_t *b, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n * r->dim + 1)), *y = malloc(sizeof(float) * (size_t)(n * r->dim + 1));
    assert_non_null(x);
    assert_non_null(y);
    pdb_v4_row_decode_rows(r, a, NULL, n, x);
    pdb_v4_row_decode_rows(r, b, NULL, n, y);
    float w = max_diff(x, y, n * r->dim);
    free(x);
    free(y);
    return w;
}

/* max |d| over every pool of two caches at the same length */
static float pool_diff(const pdb_v4_model *m, const pdb_v4_cache *a, const pdb_v4_cache *b) {
    const pdb_config *c = &m->cfg;
    int64_t hd = c->head_dim, ihd = c->index_head_dim, W = c->sliding_window;
    float w = 0;
    for (int64_t l = 0; l < c->num_layers; l++) {
        const pdb_v4_layer *L = &m->layers[l];
        const pdb_v4_layer_cache *x = &a->layers[l], *y = &b->layers[l];
        w = fmaxf(w, max_diff_rows(&a->kv_row, x->win, y->win, W));
        if (!L->rate) continue;
        int64_t n = a->len / L->rate, r = L->rate, coff = L->comp.coff;
        w = fmaxf(w, max_diff_rows(&a->kv_row, x->comp, y->comp, n));
        w = fmaxf(w, max_diff(x->buf_kv, y->buf_kv, (a->len % r) * coff * hd));
        w = fmaxf(w, max_diff(x->buf_gate, y->buf_gate, (a->len % r) * coff * hd));
        if (L->attn == PDB_V4_ATTN_CSA) {
            w = fmaxf(w, max_diff_rows(&a->ik_row, x->ikeys, y->ikeys, n));
            w = fmaxf(w, max_diff(x->ov_kv, y->ov_kv, r * hd));
            w = fmaxf(w, max_diff(x->ov_gate, y->ov_gate, r * hd));
            w = fmaxf(w, max_diff(x->iov_kv, y->iov_kv, r * ihd));
        }
    }
    return w;
}

static void chunked_case(pdb_v4_semantics sem) {
    const int64_t T = 75, V = g_m->cfg.vocab_size;
    int32_t ids[75];
    make_ids(ids, T);
    float *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
    pdb_v4_cache c1;
    PDB_TEST_OK(pdb_v4_cache_init(&c1, g_m, T, sem));
    PDB_TEST_OK(pdb_v4_forward(g_m, &c1, ids, T, 1, ref));
    int64_t chunks[] = {1, 3, 7, 33};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        pdb_v4_cache c2;
        PDB_TEST_OK(pdb_v4_cache_init(&c2, g_m, T, sem));
        for (int64_t p = 0; p < T; p += chunks[k]) {
            int64_t n = T - p < chunks[k] ? T - p : chunks[k];
            PDB_TEST_OK(pdb_v4_forward(g_m, &c2, ids + p, n, 1, got + p * V));
        }
        float dl = max_diff(ref, got, T * V), dp = pool_diff(g_m, &c1, &c2);
        printf("  [%s] chunk %lld: max |dlogit| %.3g, max |dpool| %.3g\n", pdb_v4_semantics_name(sem), (long long)chunks[k], dl, dp);
        if (dl != 0.0f || dp != 0.0f)
            fail_msg("[%s] chunk %lld: max |dlogit| %g, max |dpool| %g", pdb_v4_semantics_name(sem), (long long)chunks[k], dl, dp);
        pdb_v4_cache_free(&c2);
    }
    pdb_v4_cache_free(&c1);
    free(ref);
    free(got);
}

static void test_chunked_equals_one_shot(void **st) {
    chunked_case(PDB_V4_SEM_EXACT);
    chunked_case(PDB_V4_SEM_OFFICIAL);
}

static void test_decode_equals_full_forward(void **st) {
    const int64_t T = 37, N = 12, V = g_m->cfg.vocab_size;
    int32_t ids[49];
    make_ids(ids, T + N);
    for (int sem = 0; sem < 2; sem++) {
        float *full = malloc(sizeof(float) * (T + N) * V), *dl = malloc(sizeof(float) * V);
        pdb_v4_cache a, b;
        PDB_TEST_OK(pdb_v4_cache_init(&a, g_m, T + N, (pdb_v4_semantics)sem));
        PDB_TEST_OK(pdb_v4_forward(g_m, &a, ids, T + N, 1, full));
        PDB_TEST_OK(pdb_v4_cache_init(&b, g_m, T + N, (pdb_v4_semantics)sem));
        PDB_TEST_OK(pdb_v4_forward(g_m, &b, ids, T, 0, NULL));
        float w = 0;
        for (int64_t i = 0; i < N; i++) {
            PDB_TEST_OK(pdb_v4_forward(g_m, &b, ids + T + i, 1, 1, dl));
            w = fmaxf(w, max_diff(dl, full + (T + i) * V, V));
        }
        printf("  [%s] cached decode vs full forward: max |dlogit| %.3g\n", pdb_v4_semantics_name((pdb_v4_semantics)sem), w);
        if (w > 1e-4f) fail_msg("cached decode differs from the full forward by %g", w);
        pdb_v4_cache_free(&a);
        pdb_v4_cache_free(&b);
        free(full);
        free(dl);
    }
}

/* Real V4-Flash checkpoints ship routed experts as DeepSeek's packed FP4 (I8 [R, C/2], two e2m1 per
 * byte, plus "<name>.scale" e8m0 [R, C/32]). A copy of the tiny checkpoint with its experts in
 * that form loads and runs bit-identically to a copy holding the same values as f32. */
static void write_experts_as(const char *dir, int fp4) {
    PDB_TEST_OK(pdb_file_mkdirs(dir));
    char src[400], dst[400];
    snprintf(src, sizeof src, "%s/config.json", g_dir);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    PDB_TEST_OK(pdb_file_copy(src, dst));
    pdb_st *in;
    PDB_TEST_OK(pdb_st_open(g_dir, &in));
    pdb_st_writer *w;
    PDB_TEST_OK(pdb_st_writer_init(&w));
    int64_t n = pdb_st_count(in), nkeep = 0;
    void **keep = calloc((size_t)(2 * n), sizeof(void *));
    for (int64_t i = 0; i < n; i++) {
        const pdb_tensor_view *t = pdb_st_at(in, i);
        if (!strstr(t->name, ".ffn.experts.") || t->ndim != 2) {
            PDB_TEST_OK(pdb_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
            continue;
        }
        int64_t R = t->shape[0], C = t->shape[1];
        float *f = NULL;
        PDB_TEST_OK(pdb_st_load_f32(in, t->name, 2, t->shape, &f));
        uint8_t *q = malloc((size_t)(R * C / 2)), *sc = malloc((size_t)(R * C / 32));
        for (int64_t r = 0; r < R; r++) pdb_quant_mxfp4_row(f + r * C, C, q + r * C / 2, sc + r * C / 32);
        if (fp4) {
            char sname[300];
            snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(t->name) - 7), t->name);
            PDB_TEST_OK(pdb_st_writer_add(w, t->name, PDB_DT_I8, 2, (int64_t[]){R, C / 2}, q));
            PDB_TEST_OK(pdb_st_writer_add(w, sname, PDB_DT_F8_E8M0, 2, (int64_t[]){R, C / 32}, sc));
            free(f);
            keep[nkeep++] = q;
            keep[nkeep++] = sc;
        } else { /* the same values, dequantized */
            for (int64_t r = 0; r < R; r++) pdb_dequant_mxfp4_row(q + r * C / 2, sc + r * C / 32, C, f + r * C);
            PDB_TEST_OK(pdb_st_writer_add(w, t->name, PDB_DT_F32, 2, t->shape, f));
            free(q);
            free(sc);
            keep[nkeep++] = f;
        }
    }
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    PDB_TEST_OK(pdb_st_writer_finish(w, dst));
    pdb_st_writer_free(w);
    for (int64_t i = 0; i < nkeep; i++) free(keep[i]);
    free(keep);
    pdb_st_close(in);
}

static void test_deepseek_fp4_experts(void **st) {
    char d4[400], d32[400];
    snprintf(d4, sizeof d4, "%s-fp4", g_dir);
    snprintf(d32, sizeof d32, "%s-f32", g_dir);
    write_experts_as(d4, 1);
    write_experts_as(d32, 0);
    pdb_v4_model *m4, *m32;
    PDB_TEST_OK(pdb_v4_load(d4, &m4));
    PDB_TEST_OK(pdb_v4_load(d32, &m32));
    const int64_t T = 21, V = m4->cfg.vocab_size;
    int32_t ids[21];
    make_ids(ids, T);
    float *l4 = malloc(sizeof(float) * (size_t)(T * V)), *l32 = malloc(sizeof(float) * (size_t)(T * V));
    pdb_v4_cache a, b;
    PDB_TEST_OK(pdb_v4_cache_init(&a, m4, T, PDB_V4_SEM_OFFICIAL));
    PDB_TEST_OK(pdb_v4_cache_init(&b, m32, T, PDB_V4_SEM_OFFICIAL));
    PDB_TEST_OK(pdb_v4_forward(m4, &a, ids, T, 1, l4));
    PDB_TEST_OK(pdb_v4_forward(m32, &b, ids, T, 1, l32));
    assert_memory_equal(l4, l32, sizeof(float) * (size_t)(T * V));
    printf("  DeepSeek FP4 experts (I8 + .scale e8m0): logits of %lld positions identical to f32 experts\n", (long long)T);
    pdb_v4_cache_free(&a);
    pdb_v4_cache_free(&b);
    free(l4);
    free(l32);
    pdb_v4_free(m4);
    pdb_v4_free(m32);
    pdb_test_rmrf(d4);
    pdb_test_rmrf(d32);
}

/* The capture hook's part (PDB_V4_PART_HOOK) of the same checkpoint: fed the same attention inputs,
 * in chunks not aligned to 4 or 16, its pools are bit for bit the full model's in both
 * semantics; a forward on it is refused naming what is missing; it holds far fewer bytes. */
static int layer_pools_equal(const pdb_v4_model *m, const pdb_v4_cache *a, const pdb_v4_cache *b) {
    const pdb_config *c = &m->cfg;
    int64_t hd = c->head_dim, ihd = c->index_head_dim, W = c->sliding_window;
    for (int64_t l = 0; l < c->num_layers; l++) {
        const pdb_v4_layer *L = &m->layers[l];
        const pdb_v4_layer_cache *x = &a->layers[l], *y = &b->layers[l];
        size_t kvb = (size_t)a->kv_row.bytes, ikb = (size_t)a->ik_row.bytes;
        if (a->kv_row.bytes != b->kv_row.bytes || a->ik_row.bytes != b->ik_row.bytes || memcmp(x->win, y->win, kvb * (size_t)W))
            return 0;
        if (!L->rate) continue;
        size_t n = (size_t)(a->cap / L->rate + 1), r = (size_t)L->rate, coff = (size_t)L->comp.coff;
        if (memcmp(x->comp, y->comp, kvb * n) || memcmp(x->buf_kv, y->buf_kv, sizeof(float) * r * coff * hd) ||
            memcmp(x->buf_gate, y->buf_gate, sizeof(float) * r * coff * hd))
            return 0;
        if (L->attn == PDB_V4_ATTN_CSA &&
            (memcmp(x->ov_kv, y->ov_kv, sizeof(float) * r * hd) || memcmp(x->ov_gate, y->ov_gate, sizeof(float) * r * hd) ||
             memcmp(x->ikeys, y->ikeys, ikb * n) || memcmp(x->ibuf_kv, y->ibuf_kv, sizeof(float) * r * 2 * ihd) ||
             memcmp(x->ibuf_gate, y->ibuf_gate, sizeof(float) * r * 2 * ihd) ||
             memcmp(x->iov_kv, y->iov_kv, sizeof(float) * r * ihd) || memcmp(x->iov_gate, y->iov_gate, sizeof(float) * r * ihd)))
            return 0;
    }
    return 1;
}

static void test_hook_part(void **st) {
    pdb_config cfg;
    pdb_st *rd;
    PDB_TEST_OK(pdb_config_load(g_dir, &cfg));
    PDB_TEST_OK(pdb_st_open(g_dir, &rd));
    pdb_v4_model *h = NULL;
    PDB_TEST_OK(pdb_v4_load_part(&cfg, rd, PDB_V4_PART_HOOK, &h));
    const int64_t T = 75, H = cfg.hidden_size, L = cfg.num_layers;
    /* what it holds: the hook's tensors only, a small share of the full model's bytes */
    int64_t hb = pdb_v4_model_bytes(h), fb = pdb_v4_model_bytes(g_m), want = 0;
    for (int64_t l = 0; l < L; l++) {
        const pdb_v4_layer *y = &h->layers[l];
        assert_non_null(y->wkv.data);
        assert_non_null(y->kv_norm);
        assert_null(y->wq_a.data);
        assert_null(y->w1);
        assert_null(y->gate.data);
        assert_null(y->hc_attn_fn);
        want += pdb_qmat_st_bytes(&y->wkv) + cfg.head_dim * (int64_t)sizeof(float);
        const pdb_v4_compressor *cp[2] = {&y->comp, &y->icomp};
        for (int k = 0; k < 2; k++)
            if (cp[k]->wkv.data)
                want += pdb_qmat_st_bytes(&cp[k]->wkv) + pdb_qmat_st_bytes(&cp[k]->wgate) +
                        (cp[k]->coff * cp[k]->dim * cp[k]->rate + cp[k]->dim) * (int64_t)sizeof(float);
    }
    assert_null(h->embed.data);
    assert_null(h->head.data);
    printf("  hook part: %lld bytes of weights, the full model %lld (%.1f%%)\n", (long long)hb, (long long)fb, 100.0 * hb / fb);
    assert_int_equal(hb, want);
    assert_true(hb * 5 < fb);
    /* the same inputs into both models' cache feeds give the same pools, bit for bit */
    float *x = malloc(sizeof(float) * (size_t)(L * T * H));
    assert_non_null(x);
    uint32_t r = 99;
    for (int64_t i = 0; i < L * T * H; i++) { r = r * 1103515245u + 12345u; x[i] = (float)((int32_t)(r >> 8) % 2001 - 1000) / 500.0f; }
    int64_t chunks[] = {1, 7, 33, 75};
    for (int sem = 0; sem < 2; sem++)
        for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
            pdb_v4_cache cf, ch;
            PDB_TEST_OK(pdb_v4_cache_init(&cf, g_m, T, (pdb_v4_semantics)sem));
            PDB_TEST_OK(pdb_v4_cache_init(&ch, h, T, (pdb_v4_semantics)sem));
            for (int64_t p = 0; p < T; p += chunks[k]) {
                int64_t n = T - p < chunks[k] ? T - p : chunks[k];
                for (int64_t l = 0; l < L; l++) {
                    /* layer l's inputs for positions p..p+n-1 */
                    PDB_TEST_OK(pdb_v4_cache_feed(g_m, &cf, l, x + (l * T + p) * H, n, NULL));
                    PDB_TEST_OK(pdb_v4_cache_feed(h, &ch, l, x + (l * T + p) * H, n, NULL));
                }
                cf.len += n;
                ch.len += n;
            }
            if (!layer_pools_equal(g_m, &cf, &ch))
                fail_msg("[%s] chunk %lld: the hook part's pools differ from the full model's", pdb_v4_semantics_name((pdb_v4_semantics)sem),
                         (long long)chunks[k]);
            pdb_v4_cache_free(&cf);
            pdb_v4_cache_free(&ch);
        }
    free(x);
    /* the forward is refused, naming what is missing */
    pdb_v4_cache c;
    PDB_TEST_OK(pdb_v4_cache_init(&c, h, 8, PDB_V4_SEM_OFFICIAL));
    int32_t ids[4] = {2, 3, 4, 5};
    float logits[300];
    assert_int_equal(pdb_v4_forward(h, &c, ids, 4, 0, logits), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "only the capture hook's weights"));
    assert_non_null(strstr(pdb_err_msg(), "experts"));
    assert_int_equal(c.len, 0);
    pdb_v4_cache_free(&c);
    pdb_v4_free(h);
    pdb_st_close(rd);
}

/* pdb_v4_attn_ref on a chunk (T > 1: head groups of many tokens on the pool) equals the same
 * contract one token at a time (T = 1) bit for bit, for the
 * sliding window alone, HCA and CSA's picked entries, with head counts and widths that leave tails
 * of the vector tiles (20 heads, 72 dims), on no pool and on 2 threads. */
static void test_attn_chunk_equals_tokens(void **st) {
    enum { T = 13, NH = 20, HD = 72, W = 8, P0 = 21, K = 5, NCOMP = 40 };
    const int64_t lo = P0 - W + 1, nk = P0 - lo + T;
    float *q = malloc(sizeof(float) * T * NH * HD), *keys = malloc(sizeof(float) * nk * HD), *comp = malloc(sizeof(float) * NCOMP * HD);
    float *o1 = malloc(sizeof(float) * T * NH * HD), *o2 = malloc(sizeof(float) * T * NH * HD), sinks[NH];
    int32_t sel[T * K];
    int64_t nsel[T];
    uint32_t r = 99;
    for (int64_t i = 0; i < T * NH * HD; i++) r = r * 1664525u + 1013904223u, q[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
    for (int64_t i = 0; i < nk * HD; i++) r = r * 1664525u + 1013904223u, keys[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    for (int64_t i = 0; i < NCOMP * HD; i++) r = r * 1664525u + 1013904223u, comp[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    for (int h = 0; h < NH; h++) sinks[h] = 0.1f * (float)(h % 7) - 0.3f;
    for (int t = 0; t < T; t++) {
        nsel[t] = t % 3 ? K : 2;
        for (int k = 0; k < K; k++) sel[t * K + k] = (int32_t)((t * 7 + k * 11) % NCOMP);
    }
    pdb_pool *pool;
    PDB_TEST_OK(pdb_pool_create(2, &pool));
    for (int kind = 0; kind < 3; kind++) /* sliding, HCA (rate 2: every entry so far), CSA (picked entries) */
        for (int th = 0; th < 2; th++) {
            pdb_v4_attn_desc d = {.T = T, .nh = NH, .hd = HD, .p0 = P0, .lo = lo, .W = W, .q = q, .keys = keys, .comp = comp,
                                  .n_comp = kind ? NCOMP : 0, .rate = kind == 1 ? 2 : 0, .sel = kind == 2 ? sel : NULL,
                                  .nsel = kind == 2 ? nsel : NULL, .K = K, .sinks = sinks, .scale = 0.125f, .o = o1};
            memset(o1, 0, sizeof(float) * T * NH * HD);
            PDB_TEST_OK(pdb_v4_attn_ref(&d, th ? pool : NULL));
            for (int64_t t = 0; t < T; t++) { /* token t alone: the same keys rows, its own query, picks and output */
                pdb_v4_attn_desc e = d;
                e.T = 1, e.p0 = P0 + t, e.q = q + t * NH * HD, e.o = o2 + t * NH * HD;
                if (e.sel) e.sel = sel + t * K, e.nsel = nsel + t;
                PDB_TEST_OK(pdb_v4_attn_ref(&e, NULL));
            }
            if (memcmp(o1, o2, sizeof(float) * T * NH * HD))
                fail_msg("attention kind %d, %d thread(s): the chunk's outputs differ from one token at a time", kind, th + 1);
        }
    printf("  attention chunk (T=%d, %d heads x %d) = one token at a time, sliding / HCA / CSA, 1 and 2 threads\n", T, NH, HD);
    pdb_pool_destroy(pool);
    free(q), free(keys), free(comp), free(o1), free(o2);
}

/* A multi-sequence step (pdb_v4_forward_multi): three sequences at different lengths (0, 37 and
 * 130 cached tokens: sliding, CSA with the indexer's top-k and HCA paths), a prefill chunk of
 * each, then decode steps of one token each, together on a pool of 2 threads; every sequence's
 * logits and every pool are bit for bit what pdb_v4_forward gives it alone on the calling thread,
 * in both semantics. */
static void test_multi_sequence(void **st) {
    enum { S = 3, CAP = 200, ROUNDS = 4 };
    const int64_t V = g_m->cfg.vocab_size, pre[S] = {37, 130, 0}, first[S] = {5, 1, 11};
    int32_t ids[CAP];
    make_ids(ids, CAP);
    pdb_pool *pool;
    PDB_TEST_OK(pdb_pool_create(2, &pool));
    float *la = malloc(sizeof(float) * (size_t)(S * V)), *lm = malloc(sizeof(float) * (size_t)(S * V));
    for (int sem = 0; sem < 2; sem++) {
        pdb_v4_cache a[S], b[S];
        for (int i = 0; i < S; i++) {
            PDB_TEST_OK(pdb_v4_cache_init(&a[i], g_m, CAP, (pdb_v4_semantics)sem));
            PDB_TEST_OK(pdb_v4_cache_init(&b[i], g_m, CAP, (pdb_v4_semantics)sem));
            b[i].exec.pool = pool;
            if (pre[i]) {
                PDB_TEST_OK(pdb_v4_forward(g_m, &a[i], ids + 7 * i, pre[i], 0, NULL));
                PDB_TEST_OK(pdb_v4_forward(g_m, &b[i], ids + 7 * i, pre[i], 0, NULL));
            }
        }
        for (int r = 0; r < ROUNDS; r++) {
            pdb_v4_step steps[S];
            for (int i = 0; i < S; i++) {
                int64_t T = r ? 1 : first[i], p = a[i].len;
                const int32_t *x = ids + (p + 11 * i) % (CAP - 16);
                PDB_TEST_OK(pdb_v4_forward(g_m, &a[i], x, T, 0, la + i * V));
                steps[i] = (pdb_v4_step){&b[i], x, T, i == 1 && r == 2 ? NULL : lm + i * V}; /* one step without logits */
            }
            PDB_TEST_OK(pdb_v4_forward_multi(g_m, steps, S));
            for (int i = 0; i < S; i++) {
                assert_int_equal(a[i].len, b[i].len);
                if (steps[i].logits && memcmp(la + i * V, lm + i * V, sizeof(float) * (size_t)V))
                    fail_msg("[%s] round %d sequence %d: logits differ from the sequence alone", pdb_v4_semantics_name((pdb_v4_semantics)sem), r, i);
                if (!layer_pools_equal(g_m, &a[i], &b[i]))
                    fail_msg("[%s] round %d sequence %d: pools differ from the sequence alone", pdb_v4_semantics_name((pdb_v4_semantics)sem), r, i);
            }
        }
        for (int i = 0; i < S; i++) {
            pdb_v4_cache_free(&a[i]);
            pdb_v4_cache_free(&b[i]);
        }
    }
    printf("  multi-sequence step: 3 sequences (0/37/130 cached), %d rounds, logits and pools bit-identical to each alone, "
           "both semantics\n", ROUNDS);
    /* refusals: one cache twice, an empty sequence */
    pdb_v4_cache c;
    PDB_TEST_OK(pdb_v4_cache_init(&c, g_m, CAP, PDB_V4_SEM_EXACT));
    pdb_v4_step two[2] = {{&c, ids, 2, NULL}, {&c, ids, 3, NULL}};
    assert_int_equal(pdb_v4_forward_multi(g_m, two, 2), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "share one cache"));
    two[1].T = 0;
    assert_int_equal(pdb_v4_forward_multi(g_m, two, 2), PDB_INVALID);
    assert_int_equal(c.len, 0);
    pdb_v4_cache_free(&c);
    free(la);
    free(lm);
    pdb_pool_destroy(pool);
}

static void test_bad_inputs(void **st) {
    pdb_v4_cache c;
    PDB_TEST_OK(pdb_v4_cache_init(&c, g_m, 4, PDB_V4_SEM_OFFICIAL));
    int32_t ids[5] = {3, 4, 5, 6, 7}, bad = 100000;
    assert_int_equal(pdb_v4_forward(g_m, &c, ids, 5, 0, NULL), PDB_TOO_LARGE);
    assert_int_equal(pdb_v4_forward(g_m, &c, &bad, 1, 0, NULL), PDB_INVALID);
    pdb_v4_cache_free(&c);
    pdb_config cf = g_m->cfg;
    cf.head_dim = 100; /* 36 non-rotary dims: no FP8 blocks of 64 */
    assert_int_equal(pdb_v4_check_semantics(&cf, PDB_V4_SEM_OFFICIAL), PDB_UNSUPPORTED);
    assert_int_equal(pdb_v4_check_semantics(&cf, PDB_V4_SEM_EXACT), PDB_OK);
    pdb_v4_semantics s;
    assert_int_equal(pdb_v4_semantics_parse("bogus", &s), PDB_INVALID);
}

/* `pdbridge forward` dispatches to V4 by config.json; --v4-semantics is validated. */
static void test_cli_forward(void **st) {
    const char *bin = getenv("PDB_BIN");
    if (!bin) bin = "build/pdbridge";
    FILE *f = fopen(bin, "rb");
    if (!f) fail_msg("%s: pdbridge binary not found (set PDB_BIN)", bin);
    fclose(f);
    char ids[600], out[600], cmd[4096];
    snprintf(ids, sizeof ids, "%s/ids.safetensors", g_dir);
    snprintf(out, sizeof out, "%s/out.safetensors", g_dir);
    pdb_st_writer *w;
    PDB_TEST_OK(pdb_st_writer_init(&w));
    int32_t v[9] = {5, 9, 17, 33, 65, 129, 7, 8, 9};
    int64_t shape[1] = {9};
    PDB_TEST_OK(pdb_st_writer_add(w, "input_ids", PDB_DT_I32, 1, shape, v));
    PDB_TEST_OK(pdb_st_writer_finish(w, ids));
    pdb_st_writer_free(w);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --ids-file '%s' --decode 3 --out '%s' --v4-semantics exact 2>/dev/null",
             bin, g_dir, ids, out);
    assert_int_equal(system(cmd), 0);
    pdb_st *o;
    PDB_TEST_OK(pdb_st_open(out, &o));
    const pdb_tensor_view *pl = pdb_st_find(o, "prefill_logits"), *dt = pdb_st_find(o, "decode_tokens");
    assert_non_null(pl);
    assert_non_null(dt);
    assert_int_equal(pl->numel, 9 * g_m->cfg.vocab_size);
    assert_int_equal(dt->numel, 3);
    assert_string_equal(pdb_st_meta(o, "v4_semantics"), "exact");
    pdb_st_close(o);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --ids-file '%s' --decode 1 --out '%s' --v4-semantics fp8 2>/dev/null",
             bin, g_dir, ids, out);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
}

int main(void) {
    const struct CMUnitTest cfg_tests[] = {
        cmocka_unit_test(test_config_transformers_form), cmocka_unit_test(test_config_legacy_form),
        cmocka_unit_test(test_config_defaults_schedule), cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_config_flash_preset), cmocka_unit_test(test_config_long_tiny_preset),
        cmocka_unit_test(test_qsim),
    };
    const struct CMUnitTest fwd_tests[] = {
        cmocka_unit_test(test_chunked_equals_one_shot), cmocka_unit_test(test_decode_equals_full_forward),
        cmocka_unit_test(test_attn_chunk_equals_tokens),
        cmocka_unit_test(test_deepseek_fp4_experts), cmocka_unit_test(test_hook_part),
        cmocka_unit_test(test_multi_sequence), cmocka_unit_test(test_bad_inputs), cmocka_unit_test(test_cli_forward),
    };
    int rc = cmocka_run_group_tests(cfg_tests, NULL, NULL);
    return rc | cmocka_run_group_tests(fwd_tests, setup_model, teardown_model);
}
