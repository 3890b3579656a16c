/* pdb_v2_arch: DeepSeek-V2's facts for the registry (pdb_arch.h). The decoder caches, per token
 * and layer, one latent row [RMSNorm(c_kv) | RoPE(k_pe)] (kv_lora_rank + qk_rope_head_dim f32):
 * one APPEND pool "latent" of stride 1, no state. A row is a pure function of the layer's
 * attention input, the decoder's kv_a_proj_with_mqa / kv_a_layernorm and the position
 * (pdb_v2_ops_latent_rows), so blocks of any size that is a multiple of 128 work. */
#include <stdlib.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_config_json.h"
#include "pdb_make_model.h"
#include "pdb_v2_names.h"
#include "pdb_v2.h"

static pdb_status v2_layout(const pdb_config *cfg, int sem, pdb_arch_layout *out) {
    (void)sem; /* one semantics */
    memset(out, 0, sizeof *out);
    out->pools[0] = (pdb_store_pool){.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = cfg->num_layers,
                                     .stride = 1, .width = cfg->kv_lora_rank + cfg->qk_rope_head_dim, .dtype = PDB_DT_F32};
    out->layout = (pdb_store_layout){.n_pools = 1, .pools = out->pools};
    return PDB_OK;
}

static pdb_status v2_check_block_size(const pdb_config *cfg, int64_t bs) { return pdb_arch_check_block_128(bs); }

/* The fields a latent row depends on (the engine may differ elsewhere, e.g. in its MoE). */
static int v2_same_cache(const pdb_config *a, const pdb_config *b) {
    return a->arch == b->arch && a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->kv_lora_rank == b->kv_lora_rank &&
           a->qk_rope_head_dim == b->qk_rope_head_dim && a->qk_nope_head_dim == b->qk_nope_head_dim &&
           a->v_head_dim == b->v_head_dim && a->rope.type == b->rope.type && a->rope.theta == b->rope.theta &&
           a->rope.factor == b->rope.factor && a->rms_norm_eps == b->rms_norm_eps;
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* Routed experts MXFP4; attention projections, dense and shared-expert MLPs and lm_head MXFP8;
 * embeddings, norms and the router as they are. */
static pdb_arch_quant v2_quant_kind(const char *name) {
    if (has(name, "embed_tokens") || has(name, "layernorm")) return PDB_ARCH_Q_KEEP;
    size_t n = strlen(name);
    if (n >= 15 && !strcmp(name + n - 15, "mlp.gate.weight")) return PDB_ARCH_Q_KEEP;
    if (has(name, ".mlp.experts.")) return PDB_ARCH_Q_MXFP4;
    if (has(name, "self_attn.") || has(name, ".mlp.") || !strcmp(name, "lm_head.weight")) return PDB_ARCH_Q_MXFP8;
    return PDB_ARCH_Q_KEEP;
}

/* The reference forward (pdb_v2.c) on one sequence. */
typedef struct v2_ref { pdb_v2_model *m; pdb_v2_cache c; } v2_ref;

static void v2_ref_close(void *r) {
    v2_ref *v = r;
    if (!v) return;
    pdb_v2_cache_free(&v->c);
    pdb_v2_free(v->m);
    free(v);
}

static pdb_status v2_ref_open(const char *dir, int sem, int64_t cap, void **out) {
    v2_ref *v = calloc(1, sizeof *v);
    if (!v) return pdb_err_set(PDB_NOMEM, "reference forward");
    pdb_status s = pdb_v2_load(dir, &v->m);
    if (!s) s = pdb_v2_cache_init(&v->c, v->m, cap);
    if (s) { v2_ref_close(v); return s; }
    *out = v;
    return PDB_OK;
}

static pdb_status v2_ref_forward(void *r, const int32_t *ids, int64_t n, float *logits) {
    v2_ref *v = r;
    return pdb_v2_forward(v->m, &v->c, ids, n, 1, logits);
}

static const pdb_arch_semantics V2_SEMANTICS[] = {{"latent", "deepseek_v2/latent-f32/v1"}};

const pdb_arch_def pdb_arch_deepseek_v2 = {
    .name = "deepseek_v2", .id = PDB_ARCH_DEEPSEEK_V2,
    .names = &pdb_v2_names_table,
    .demo = {.title = "DeepSeek-V2", .preset = "small", .dir_name = "v2-small", .vocab = 0, .tokens = 6000},
    .semantics = V2_SEMANTICS, .n_semantics = 1, .semantics_key = NULL,
    .block_size_rule = "a positive multiple of 128",
    .config_parse = pdb_v2_config_parse, .config_to_json = pdb_v2_config_to_json,
    .layout = v2_layout, .check_block_size = v2_check_block_size,
    .check_semantics = NULL, .same_cache = v2_same_cache, .quant_kind = v2_quant_kind,
    .make_preset = pdb_v2_make_preset, .make_layers = pdb_v2_make_layers, .make_tensors = pdb_v2_make_tensors,
    .ref_open = v2_ref_open, .ref_forward = v2_ref_forward, .ref_close = v2_ref_close,
};
