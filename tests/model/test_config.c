/* test_config: config.json parsing for deepseek_v2: both rope forms, defaults, and every kind of
 * bad input answered with a status and a message naming the file and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_config.h"

#define BASE "\"model_type\":\"deepseek_v2\",\"vocab_size\":300,\"hidden_size\":64,\"intermediate_size\":100," \
             "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16," \
             "\"qk_rope_head_dim\":8,\"v_head_dim\":12,\"n_routed_experts\":4,\"num_experts_per_tok\":2," \
             "\"moe_intermediate_size\":16,\"n_shared_experts\":1,\"first_k_dense_replace\":1"

static void test_rope_parameters_form(void **st) {
    pdb_config c;
    const char *j = "{" BASE ",\"q_lora_rank\":null,\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":5000,"
                    "\"factor\":8,\"original_max_position_embeddings\":64,\"mscale\":0.707,\"mscale_all_dim\":0.707}}";
    assert_int_equal(pdb_config_parse(j, "t.json", &c), PDB_OK);
    assert_int_equal(c.rope.type, PDB_ROPE_YARN);
    assert_true(c.rope.theta == 5000 && c.rope.factor == 8 && c.rope.original_max_pos == 64);
    assert_true(c.rope.beta_fast == 32 && c.rope.beta_slow == 1);
    assert_int_equal(c.q_lora_rank, 0);
    assert_false(pdb_config_layer_is_moe(&c, 0));
    assert_true(pdb_config_layer_is_moe(&c, 1));
    /* softmax scale carries mscale(8, 0.707)^2 */
    double m = 0.1 * 0.707 * log(8.0) + 1.0;
    assert_true(fabs(pdb_config_softmax_scale(&c) - m * m / sqrt(24.0)) < 1e-12);
}

static void test_legacy_rope_scaling_form(void **st) {
    pdb_config c;
    const char *j = "{" BASE ",\"q_lora_rank\":20,\"rope_theta\":777,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,"
                    "\"original_max_position_embeddings\":32,\"beta_fast\":16}}";
    assert_int_equal(pdb_config_parse(j, "t.json", &c), PDB_OK);
    assert_int_equal(c.rope.type, PDB_ROPE_YARN);
    assert_true(c.rope.theta == 777 && c.rope.beta_fast == 16 && c.q_lora_rank == 20);
    const char *d = "{" BASE "}";
    assert_int_equal(pdb_config_parse(d, "t.json", &c), PDB_OK);
    assert_int_equal(c.rope.type, PDB_ROPE_DEFAULT);
    assert_true(c.rope.theta == 10000);
    assert_true(fabs(pdb_config_softmax_scale(&c) - 1 / sqrt(24.0)) < 1e-12);
}

static void expect_error(const char *json, pdb_status want, const char *needle) {
    pdb_config c;
    pdb_status s = pdb_config_parse(json, "bad.json", &c);
    if (s != want || !strstr(pdb_err_msg(), needle) || !strstr(pdb_err_msg(), "bad.json"))
        fail_msg("want status %d with '%s', got %d: %s", want, needle, s, pdb_err_msg());
}

static void test_bad_configs(void **st) {
    expect_error("{", PDB_CORRUPT, "line");
    expect_error("[1]", PDB_CORRUPT, "object");
    expect_error("{\"vocab_size\":3}", PDB_INVALID, "model_type");
    expect_error("{\"model_type\":\"llama\"}", PDB_UNSUPPORTED, "llama");
    expect_error("{\"model_type\":\"deepseek_v2\"}", PDB_INVALID, "vocab_size");
    expect_error("{" BASE ",\"hidden_size\":-5}", PDB_INVALID, "hidden_size");
    expect_error("{" BASE ",\"num_attention_heads\":\"four\"}", PDB_INVALID, "num_attention_heads");
    expect_error("{" BASE ",\"qk_rope_head_dim\":7}", PDB_INVALID, "qk_rope_head_dim");
    expect_error("{" BASE ",\"num_experts_per_tok\":9}", PDB_INVALID, "num_experts_per_tok");
    expect_error("{" BASE ",\"rms_norm_eps\":0}", PDB_INVALID, "rms_norm_eps");
    expect_error("{" BASE ",\"rope_parameters\":{\"rope_type\":\"longrope\"}}", PDB_UNSUPPORTED, "longrope");
    expect_error("{" BASE ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":-1,\"original_max_position_embeddings\":4}}",
                 PDB_INVALID, "factor");
    expect_error("{" BASE ",\"hidden_act\":\"gelu\"}", PDB_UNSUPPORTED, "gelu");
    expect_error("{" BASE ",\"topk_method\":\"noaux_tc\"}", PDB_UNSUPPORTED, "noaux_tc");
    expect_error("{" BASE ",\"topk_method\":\"group_limited_greedy\",\"n_group\":3,\"topk_group\":1}", PDB_INVALID,
                 "group_limited_greedy");
    expect_error("{" BASE ",\"eos_token_id\":300}", PDB_INVALID, "vocabulary");
}

static void test_round_trip(void **st) {
    pdb_config a, b;
    const char *j = "{" BASE ",\"q_lora_rank\":24,\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":5000,"
                    "\"factor\":8,\"original_max_position_embeddings\":64,\"mscale\":1.0,\"mscale_all_dim\":0.8}}";
    assert_int_equal(pdb_config_parse(j, "t.json", &a), PDB_OK);
    char *out = NULL;
    assert_int_equal(pdb_config_to_json(&a, &out), PDB_OK);
    assert_int_equal(pdb_config_parse(out, "out.json", &b), PDB_OK);
    free(out);
    assert_true(a.hidden_size == b.hidden_size && a.q_lora_rank == b.q_lora_rank && a.rope.factor == b.rope.factor &&
                a.rope.mscale_all_dim == b.rope.mscale_all_dim && a.n_routed_experts == b.n_routed_experts &&
                a.first_k_dense_replace == b.first_k_dense_replace && a.v_head_dim == b.v_head_dim);
}

static void test_missing_file(void **st) {
    pdb_config c;
    assert_int_equal(pdb_config_load("/nonexistent/dir", &c), PDB_IO);
    assert_non_null(strstr(pdb_err_msg(), "/nonexistent/dir/config.json"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_parameters_form), cmocka_unit_test(test_legacy_rope_scaling_form),
        cmocka_unit_test(test_bad_configs), cmocka_unit_test(test_round_trip), cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
