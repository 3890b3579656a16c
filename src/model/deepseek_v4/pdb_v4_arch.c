/* pdb_v4_arch: DeepSeek-V4's facts for the registry (pdb_arch.h). The decoder's cache is the
 * pools of pdb_v4_pools.c (window, compressed entries, indexer keys, overlap halves), fed by
 * pdb_v4_cache_feed; they depend on the whole history of every layer's attention inputs, so a
 * block carries end-of-block state and must end where the compressors' buffers are empty (a
 * multiple of every compression rate). Two cache semantics (docs/v4.md): official (DeepSeek's
 * FP8 / FP4 simulations, the default) and exact (transformers' math). */
#include <stdlib.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_config_json.h"
#include "pdb_make_model.h"
#include "pdb_v4_names.h"
#include "pdb_v4.h"

static pdb_status v4_check_block_size(const pdb_config *c, int64_t bs) {
    int64_t r[2] = {c->compress_rate_csa, c->compress_rate_hca};
    PDB_TRY(pdb_arch_check_block_128(bs));
    for (int i = 0; i < 2; i++)
        if (r[i] > 0 && bs % r[i])
            return pdb_err_set(PDB_INVALID, "block size %lld is not a multiple of the compression rate %lld (a V4 block must end "
                               "with empty compressor buffers)", (long long)bs, (long long)r[i]);
    return PDB_OK;
}

static pdb_status v4_check_semantics(const pdb_config *cfg, int sem) {
    return pdb_v4_check_semantics(cfg, (pdb_v4_semantics)sem);
}

/* Every field matters to the pools (window, rates, indexer, ropes, hyper-connections). */
static int v4_same_cache(const pdb_config *a, const pdb_config *b) {
    char *ja = NULL, *jb = NULL;
    int same = a->arch == b->arch && !pdb_config_to_json(a, &ja) && !pdb_config_to_json(b, &jb) && !strcmp(ja, jb);
    free(ja);
    free(jb);
    return same;
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* DeepSeek's and transformers' names: routed experts MXFP4; the attention projections (incl.
 * the compressors' and the indexer's, under attn. / self_attn.), the shared expert and the head
 * MXFP8. Norms (*norm*), the router (ffn.gate / mlp.gate), hash tables, sinks, hc mixing and
 * compressor position biases stay as they are. make-model --format deepseek follows this rule:
 * V4-Flash's split (experts FP4, attention and shared expert FP8), except the head (FP8 here,
 * bf16 in DeepSeek's checkpoint). */
static pdb_arch_quant v4_quant_kind(const char *name) {
    if (has(name, "norm")) return PDB_ARCH_Q_KEEP;
    if (has(name, ".experts.")) return PDB_ARCH_Q_MXFP4;
    if (has(name, "attn.") || has(name, "shared_experts.") || !strcmp(name, "head.weight") ||
        !strcmp(name, "lm_head.weight") || !strcmp(name, "model.head.weight"))
        return PDB_ARCH_Q_MXFP8;
    return PDB_ARCH_Q_KEEP;
}

/* The reference forward (pdb_v4.c) on one sequence, on the calling thread. */
typedef struct v4_ref { pdb_v4_model *m; pdb_v4_cache c; } v4_ref;

static void v4_ref_close(void *r) {
    v4_ref *v = r;
    if (!v) return;
    pdb_v4_cache_free(&v->c);
    pdb_v4_free(v->m);
    free(v);
}

static pdb_status v4_ref_open(const char *dir, int sem, int64_t cap, void **out) {
    v4_ref *v = calloc(1, sizeof *v);
    if (!v) return pdb_err_set(PDB_NOMEM, "reference forward");
    pdb_status s = pdb_v4_load(dir, &v->m);
    if (!s) s = pdb_v4_cache_init(&v->c, v->m, cap, (pdb_v4_semantics)sem);
    if (s) { v4_ref_close(v); return s; }
    *out = v;
    return PDB_OK;
}

static pdb_status v4_ref_forward(void *r, const int32_t *ids, int64_t n, float *logits) {
    v4_ref *v = r;
    return pdb_v4_forward(v->m, &v->c, ids, n, 1, logits);
}

/* Indices are pdb_v4_semantics values. v2: the products in pdb_qmat's order (D24; v1 summed 8 partial sums), so a
 * store or prefill server of the v1 math never matches a v2 decoder. official v3: the K=V rows and indexer keys
 * stored as FP8 / FP4 rows (D36; the same numbers, other bytes), so an f32-pool block never hits a compact decoder;
 * exact's pools did not change. */
static const pdb_arch_semantics V4_SEMANTICS[] = {
    [PDB_V4_SEM_OFFICIAL] = {"official", "deepseek_v4/official/pools-fp8-fp4/v3"},
    [PDB_V4_SEM_EXACT] = {"exact", "deepseek_v4/exact/pools-f32/v2"},
};

const pdb_arch_def pdb_arch_deepseek_v4 = {
    .name = "deepseek_v4", .id = PDB_ARCH_DEEPSEEK_V4,
    .names = &pdb_v4_names_table,
    .demo = {.title = "DeepSeek-V4", .preset = "tiny", .dir_name = "v4-tiny", .vocab = 129280, .tokens = 3000},
    .semantics = V4_SEMANTICS, .n_semantics = 2, .semantics_key = "v4_semantics",
    .block_size_rule = "a positive multiple of 128 and of every compression rate",
    .config_parse = pdb_v4_config_parse, .config_to_json = pdb_v4_config_to_json,
    .layout = pdb_v4_pools_layout, .pool_decode = pdb_v4_pools_decode, .check_block_size = v4_check_block_size,
    .check_semantics = v4_check_semantics, .same_cache = v4_same_cache, .quant_kind = v4_quant_kind,
    .make_preset = pdb_v4_make_preset, .make_layers = pdb_v4_make_layers, .make_tensors = pdb_v4_make_tensors,
    .ref_open = v4_ref_open, .ref_forward = v4_ref_forward, .ref_close = v4_ref_close,
};
