/* test_names: the tensor-name tables of pdb_v2_names and pdb_v4_names. Formatting gives the exact
 * names (spelled out here: DeepSeek's, transformers', with and without V4's "model." prefix, in
 * lookup order), the tables are well formed, and on `make-model` checkpoints of both archs every
 * tensor written is found by some role's lookup under the row's saved spelling, every role the
 * config needs at every layer (and expert) is present, and no other role is. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_config.h"
#include "pdb_make_model.h"
#include "pdb_names.h"
#include "pdb_safetensors.h"
#include "pdb_test_util.h"
#include "pdb_v2_names.h"
#include "pdb_v4_names.h"

static void expect(const pdb_names_table *t, int role, int spelling, int64_t l, int64_t e, const char *want) {
    char buf[PDB_NAMES_MAX_LEN];
    assert_string_equal(pdb_names_format(t, role, spelling, l, e, buf), want);
}

static void expect_saved(const pdb_names_table *t, int role, int64_t l, int64_t e, const char *want) {
    char buf[PDB_NAMES_MAX_LEN];
    assert_string_equal(pdb_names_format_saved(t, role, l, e, buf), want);
}

static void test_v2_format(void **st) {
    const pdb_names_table *t = pdb_v2_names();
    assert_ptr_equal(t, &pdb_v2_names_table);
    assert_string_equal(t->arch, "deepseek_v2");
    expect(t, PDB_V2_T_EMBED, 0, -1, 0, "model.embed_tokens.weight");
    expect(t, PDB_V2_T_FINAL_NORM, 0, -1, 0, "model.norm.weight");
    expect(t, PDB_V2_T_LM_HEAD, 0, -1, 0, "lm_head.weight");
    expect(t, PDB_V2_T_KV_A_PROJ, 0, 3, 0, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
    expect(t, PDB_V2_T_Q_A_NORM, 0, 0, 0, "model.layers.0.self_attn.q_a_layernorm.weight");
    expect(t, PDB_V2_T_ATTN_NORM, 0, 26, 0, "model.layers.26.input_layernorm.weight");
    expect(t, PDB_V2_T_ROUTER, 0, 1, 0, "model.layers.1.mlp.gate.weight");
    expect(t, PDB_V2_T_EXPERT_GATE, 0, 2, 17, "model.layers.2.mlp.experts.17.gate_proj.weight");
    expect(t, PDB_V2_T_EXPERT_DOWN, 0, 12, 63, "model.layers.12.mlp.experts.63.down_proj.weight");
    expect(t, PDB_V2_T_SHARED_UP, 0, 4, 0, "model.layers.4.mlp.shared_experts.up_proj.weight");
    expect(t, PDB_V2_T_EXPERTS_GATE_UP, 0, 1, 0, "model.layers.1.mlp.experts.gate_up_proj");
    expect(t, PDB_V2_T_EXPERTS_DOWN, 0, 1, 0, "model.layers.1.mlp.experts.down_proj");
    char buf[PDB_NAMES_MAX_LEN];
    assert_string_equal(pdb_v2_names_format(PDB_V2_T_O_PROJ, 5, 0, buf), "model.layers.5.self_attn.o_proj.weight");
    for (int r = 0; r < PDB_V2_T_COUNT; r++) assert_int_equal(pdb_names_spellings(t, r), 1);
}

static void test_v4_format(void **st) {
    const pdb_names_table *t = pdb_v4_names();
    assert_ptr_equal(t, &pdb_v4_names_table);
    assert_string_equal(t->arch, "deepseek_v4");
    /* lookup order: each suffix under "model." then without it, DeepSeek's suffix first */
    static const char *const kv_norm[] = {"model.layers.5.attn.kv_norm.weight", "layers.5.attn.kv_norm.weight",
                                          "model.layers.5.attn.norm.weight", "layers.5.attn.norm.weight",
                                          "model.layers.5.self_attn.kv_norm.weight", "layers.5.self_attn.kv_norm.weight"};
    assert_int_equal(pdb_names_spellings(t, PDB_V4_T_KV_NORM), 6);
    for (int i = 0; i < 6; i++) expect(t, PDB_V4_T_KV_NORM, i, 5, 0, kv_norm[i]);
    expect(t, PDB_V4_T_EMBED, 0, -1, 0, "model.embed.weight");
    expect(t, PDB_V4_T_EMBED, 1, -1, 0, "embed.weight");
    expect(t, PDB_V4_T_EMBED, 3, -1, 0, "embed_tokens.weight");
    expect(t, PDB_V4_T_WKV, 2, 0, 0, "model.layers.0.self_attn.kv_proj.weight");
    expect(t, PDB_V4_T_HC_ATTN_FN, 1, 2, 0, "layers.2.hc_attn_fn");
    expect(t, PDB_V4_T_HC_FFN_SCALE, 2, 2, 0, "model.layers.2.ffn_hc.scale");
    expect(t, PDB_V4_T_ATTN_SINK, 2, 1, 0, "model.layers.1.self_attn.sinks");
    expect(t, PDB_V4_T_EXPERT_W1, 0, 1, 3, "model.layers.1.ffn.experts.3.w1.weight");
    expect(t, PDB_V4_T_EXPERT_W1, 3, 1, 3, "layers.1.mlp.experts.3.gate_proj.weight");
    expect(t, PDB_V4_T_EXPERT_W2, 2, 0, 7, "model.layers.0.mlp.experts.7.down_proj.weight");
    expect(t, PDB_V4_T_IDX_WPROJ, 2, 2, 0, "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight");
    expect(t, PDB_V4_T_IDX_WPROJ, 4, 2, 0, "model.layers.2.self_attn.compressor.indexer.weights_proj.weight");
    expect(t, PDB_V4_T_GATE_BIAS, 2, 3, 0, "model.layers.3.mlp.gate.e_score_correction_bias");
    expect(t, PDB_V4_T_EXPERTS_GATE_UP, 0, 1, 0, "model.layers.1.mlp.experts.gate_up_proj");
    /* what transformers 5.17 save_pretrained writes, and make-model with it */
    expect_saved(t, PDB_V4_T_EMBED, -1, 0, "model.embed_tokens.weight");
    expect_saved(t, PDB_V4_T_NORM, -1, 0, "model.norm.weight");
    expect_saved(t, PDB_V4_T_HEAD, -1, 0, "head.weight");
    expect_saved(t, PDB_V4_T_HC_HEAD_FN, -1, 0, "model.hc_head.hc_fn");
    expect_saved(t, PDB_V4_T_HC_HEAD_SCALE, -1, 0, "model.hc_head.hc_scale");
    expect_saved(t, PDB_V4_T_KV_NORM, 5, 0, "model.layers.5.attn.norm.weight");
    expect_saved(t, PDB_V4_T_WQ_A, 0, 0, "model.layers.0.attn.wq_a.weight");
    expect_saved(t, PDB_V4_T_HC_ATTN_BASE, 3, 0, "model.layers.3.hc_attn_base");
    expect_saved(t, PDB_V4_T_COMP_APE, 2, 0, "model.layers.2.attn.compressor.ape");
    expect_saved(t, PDB_V4_T_GATE_TID2EID, 0, 0, "model.layers.0.ffn.gate.tid2eid");
    expect_saved(t, PDB_V4_T_EXPERT_W3, 1, 6, "model.layers.1.ffn.experts.6.w3.weight");
    expect_saved(t, PDB_V4_T_SHARED_W2, 3, 0, "model.layers.3.ffn.shared_experts.w2.weight");
}

static void table_well_formed(const pdb_names_table *t, int count) {
    assert_int_equal(t->n_roles, count);
    assert_non_null(t->global_prefix[0]);
    assert_non_null(t->layer_prefix[0]);
    for (int r = 0; r < count; r++) {
        const pdb_names_row *w = &t->rows[r];
        assert_int_equal(w->role, r);
        assert_non_null(w->what);
        assert_non_null(w->suffix[0]);
        assert_true(w->saved >= 0 && w->saved < pdb_names_spellings(t, r));
        /* only expert rows take the expert number */
        assert_true((strstr(w->suffix[0], "%lld") != NULL) == (w->scope == PDB_NAMES_EXPERT));
    }
}

static void test_tables_well_formed(void **st) {
    table_well_formed(pdb_v2_names(), PDB_V2_T_COUNT);
    table_well_formed(pdb_v4_names(), PDB_V4_T_COUNT);
}

typedef int (*required_fn)(const pdb_config *c, int role, int64_t layer);

/* Every role of every layer and expert: present exactly when required, under the saved
 * spelling; and every tensor of the checkpoint is one of them. */
static void check_checkpoint(const pdb_names_table *t, required_fn required, const char *arch, const char *preset,
                             int64_t layers) {
    char *dir = pdb_test_tmpdir("names");
    pdb_make_model_opts o = {.arch = arch, .preset = preset, .seed = 3, .out_dir = dir, .vocab = 300, .layers = layers};
    PDB_TEST_OK(pdb_make_model_write(&o));
    pdb_config c;
    PDB_TEST_OK(pdb_config_load(dir, &c));
    pdb_st *s = NULL;
    PDB_TEST_OK(pdb_st_open(dir, &s));
    int64_t n = pdb_st_count(s);
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    for (int r = 0; r < t->n_roles; r++) {
        pdb_names_scope sc = t->rows[r].scope;
        for (int64_t l = sc == PDB_NAMES_GLOBAL ? -1 : 0; l < (sc == PDB_NAMES_GLOBAL ? 0 : c.num_layers); l++)
            for (int64_t e = 0; e < (sc == PDB_NAMES_EXPERT ? c.n_routed_experts : 1); e++) {
                char buf[PDB_NAMES_MAX_LEN], saved[PDB_NAMES_MAX_LEN];
                const pdb_tensor_view *v = pdb_names_find(t, s, r, l, e, buf);
                int want = required(&c, r, l);
                if (want != (v != NULL))
                    fail_msg("%s %s: role %s layer %lld expert %lld: %s", arch, preset, t->rows[r].what, (long long)l,
                             (long long)e, v ? "present but not required" : "required but missing");
                if (!v) continue;
                assert_string_equal(buf, pdb_names_format_saved(t, r, l, e, saved));
                for (int64_t i = 0; i < n; i++)
                    if (pdb_st_at(s, i) == v) seen[i]++;
            }
    }
    for (int64_t i = 0; i < n; i++)
        if (seen[i] != 1) fail_msg("%s %s: tensor %s found by %d lookups", arch, preset, pdb_st_at(s, i)->name, seen[i]);
    free(seen);
    pdb_st_close(s);
    pdb_test_rmrf(dir);
    free(dir);
}

static void test_v2_checkpoints(void **st) {
    check_checkpoint(pdb_v2_names(), pdb_v2_names_required, "deepseek_v2", "tiny", 0);  /* q_proj, dense + MoE */
    check_checkpoint(pdb_v2_names(), pdb_v2_names_required, "deepseek_v2", "small", 2); /* q_a/q_b (q_lora_rank) */
}

static void test_v4_checkpoints(void **st) {
    /* sliding, CSA (indexer), HCA, hash and biased routing */
    check_checkpoint(pdb_v4_names(), pdb_v4_names_required, "deepseek_v4", "tiny", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_format), cmocka_unit_test(test_v4_format), cmocka_unit_test(test_tables_well_formed),
        cmocka_unit_test(test_v2_checkpoints), cmocka_unit_test(test_v4_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
