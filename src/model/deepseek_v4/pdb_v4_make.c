/* pdb_v4_make: DeepSeek-V4's make-model presets (tiny, v4-long-tiny, v4-flash), the layer schedule continued
 * past a preset's layers, and its tensor list, named by the V4 tensor-name table's saved
 * spellings, for the registry. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_make_model.h"
#include "pdb_v4_names.h"

/* DeepSeek-V4 presets. "v4-flash" is V4-Flash's architecture exactly (attention, indexer,
 * compressors, hyper-connections, layer schedule, rope); only the expert count may be changed
 * (--experts; 8 gives V4-Flash's active compute in ~15B parameters). "tiny" keeps every path
 * (sliding, CSA with its indexer, HCA, hash routing) on short prompts: window 8, HCA rate 16.
 * "v4-long-tiny" keeps every path at the full 1,048,576-token window on a 2-core CPU: the real
 * tokenizer's vocabulary, one head, one index head, and compression rates 256 (CSA) / 1024 (HCA)
 * instead of 4 / 128, so that the indexer's per-token scoring (p / rate entries, sorted) and the
 * HCA attention (p / rate entries) stay affordable at p = 1M (block sizes: multiples of 1024); its
 * window is 1,048,576 + 4,096 so that a prompt of 2^20 tokens still has room for its answer. */
pdb_status pdb_v4_make_preset(const char *preset, pdb_config *c) {
    pdb_make_model_defaults(c, PDB_ARCH_DEEPSEEK_V4, "deepseek_v4");
    c->num_kv_heads = 1;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6;
    c->swiglu_limit = 10.0;
    c->scoring_func = PDB_V4_SCORE_SQRTSOFTPLUS;
    c->norm_topk_prob = 1;
    c->routed_scaling_factor = 1.5;
    c->num_nextn_predict_layers = 0;
    c->max_position_embeddings = 1048576;
    c->rope.type = PDB_ROPE_DEFAULT;
    c->rope.theta = 10000;
    c->rope.attention_factor = -1;
    c->rope.truncate = 1;
    c->rope_compress.type = PDB_ROPE_YARN;
    c->rope_compress.theta = 160000;
    c->rope_compress.factor = 16;
    c->rope_compress.original_max_pos = 65536;
    c->rope_compress.beta_fast = 32;
    c->rope_compress.beta_slow = 1;
    c->rope_compress.attention_factor = 1.0;
    c->rope_compress.truncate = 1;
    c->compress_rate_csa = 4;
    c->compress_rate_hca = 128;
    c->n_shared_experts = 1;
    int64_t nhash = 3;
    if (!strcmp(preset, "tiny")) {
        c->vocab_size = 1000; c->hidden_size = 64; c->num_layers = 4; c->num_heads = 4; c->head_dim = 128;
        c->q_lora_rank = 32; c->o_groups = 2; c->o_lora_rank = 32; c->sliding_window = 8; c->hc_mult = 4;
        c->index_n_heads = 8; c->index_head_dim = 64; c->index_topk = 4; c->n_routed_experts = 8;
        c->num_experts_per_tok = 2; c->moe_intermediate_size = 32; c->compress_rate_hca = 16; nhash = 1;
    } else if (!strcmp(preset, "v4-long-tiny")) {
        c->vocab_size = 129280; c->hidden_size = 64; c->num_layers = 4; c->num_heads = 1; c->head_dim = 128;
        c->q_lora_rank = 32; c->o_groups = 1; c->o_lora_rank = 32; c->sliding_window = 8; c->hc_mult = 4;
        c->index_n_heads = 1; c->index_head_dim = 64; c->index_topk = 4; c->n_routed_experts = 8;
        c->num_experts_per_tok = 2; c->moe_intermediate_size = 32; c->compress_rate_csa = 256;
        c->compress_rate_hca = 1024; nhash = 1;
        c->max_position_embeddings = 1048576 + 4096; /* a 1,048,576-token prompt and its answer */
    } else if (!strcmp(preset, "v4-flash")) {
        c->vocab_size = 129280; c->hidden_size = 4096; c->num_layers = 43; c->num_heads = 64; c->head_dim = 512;
        c->q_lora_rank = 1024; c->o_groups = 8; c->o_lora_rank = 1024; c->sliding_window = 128; c->hc_mult = 4;
        c->index_n_heads = 64; c->index_head_dim = 128; c->index_topk = 512; c->n_routed_experts = 256;
        c->num_experts_per_tok = 6; c->moe_intermediate_size = 2048;
    } else {
        return pdb_err_set(PDB_NOT_FOUND, "make-model: unknown deepseek_v4 preset '%s' (tiny, v4-long-tiny, v4-flash)", preset);
    }
    c->intermediate_size = c->moe_intermediate_size;
    c->partial_rotary_factor = 64.0 / (double)c->head_dim;
    c->qk_rope_head_dim = 64;
    for (int64_t l = 0; l < c->num_layers; l++) {
        c->v4_attn[l] = l < 2 ? PDB_V4_ATTN_SLIDING : (l % 2 ? PDB_V4_ATTN_HCA : PDB_V4_ATTN_CSA);
        c->v4_hash_moe[l] = l < nhash;
    }
    return PDB_OK;
}

pdb_status pdb_v4_make_layers(pdb_config *c, int64_t layers) {
    if (layers > PDB_CONFIG_MAX_LAYERS)
        return pdb_err_set(PDB_TOO_LARGE, "make-model: --layers %lld exceeds %d", (long long)layers, PDB_CONFIG_MAX_LAYERS);
    c->num_layers = layers;
    for (int64_t l = 0; l < c->num_layers; l++) /* the preset's schedule, continued */
        c->v4_attn[l] = l < 2 ? PDB_V4_ATTN_SLIDING : (l % 2 ? PDB_V4_ATTN_HCA : PDB_V4_ATTN_CSA);
    return PDB_OK;
}

/* V4 tensors, named as transformers 5.17 save_pretrained writes them (DeepSeek's names under
 * "model.", the main kv_norm as attn.norm, model.embed_tokens, head): pdb_v4_names' saved spellings. */
pdb_status pdb_v4_make_tensors(pdb_make_ctx *x, const pdb_config *c) {
    char n[PDB_NAMES_MAX_LEN];
    int64_t H = c->hidden_size, nh = c->num_heads, hd = c->head_dim, hc = c->hc_mult, mix = (2 + hc) * hc;
    int64_t qlr = c->q_lora_rank, G = c->o_groups, olr = c->o_lora_rank, E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size, nih = c->index_n_heads, ihd = c->index_head_dim;
#define N(role) pdb_names_format_saved(&pdb_v4_names_table, PDB_V4_T_##role, l, e, n)
#define NR(role) pdb_names_format_saved(&pdb_v4_names_table, role, l, e, n)
    int64_t l = -1, e = 0;
    PDB_TRY(pdb_make_model_normal(x, N(EMBED), c->vocab_size, H, 0, 1));
    PDB_TRY(pdb_make_model_norm(x, N(NORM), H));
    PDB_TRY(pdb_make_model_linear(x, N(HEAD), c->vocab_size, H));
    PDB_TRY(pdb_make_model_linear(x, N(HC_HEAD_FN), hc, hc * H));
    PDB_TRY(pdb_make_model_normal(x, N(HC_HEAD_BASE), hc, 0, 0, 0.1));
    PDB_TRY(pdb_make_model_normal(x, N(HC_HEAD_SCALE), 1, 0, 1, 0.05));
    for (l = 0; l < c->num_layers; l++) {
        PDB_TRY(pdb_make_model_norm(x, N(ATTN_NORM), H));
        PDB_TRY(pdb_make_model_norm(x, N(FFN_NORM), H));
        const int site[2][3] = {{PDB_V4_T_HC_ATTN_FN, PDB_V4_T_HC_ATTN_BASE, PDB_V4_T_HC_ATTN_SCALE},
                                {PDB_V4_T_HC_FFN_FN, PDB_V4_T_HC_FFN_BASE, PDB_V4_T_HC_FFN_SCALE}};
        for (int i = 0; i < 2; i++) {
            PDB_TRY(pdb_make_model_linear(x, NR(site[i][0]), mix, hc * H));
            PDB_TRY(pdb_make_model_normal(x, NR(site[i][1]), mix, 0, 0, 0.1));
            PDB_TRY(pdb_make_model_normal(x, NR(site[i][2]), 3, 0, 1, 0.05));
        }
        PDB_TRY(pdb_make_model_linear(x, N(WQ_A), qlr, H));
        PDB_TRY(pdb_make_model_norm(x, N(Q_NORM), qlr));
        PDB_TRY(pdb_make_model_linear(x, N(WQ_B), nh * hd, qlr));
        PDB_TRY(pdb_make_model_linear(x, N(WKV), hd, H));
        PDB_TRY(pdb_make_model_norm(x, N(KV_NORM), hd));
        PDB_TRY(pdb_make_model_linear(x, N(WO_A), G * olr, nh * hd / G));
        PDB_TRY(pdb_make_model_linear(x, N(WO_B), H, G * olr));
        PDB_TRY(pdb_make_model_normal(x, N(ATTN_SINK), nh, 0, 0, 0.5));
        pdb_v4_attn at = (pdb_v4_attn)c->v4_attn[l];
        if (at != PDB_V4_ATTN_SLIDING) {
            int64_t r = pdb_config_v4_rate(c, l), coff = at == PDB_V4_ATTN_CSA ? 2 : 1;
            PDB_TRY(pdb_make_model_linear(x, N(COMP_WKV), coff * hd, H));
            PDB_TRY(pdb_make_model_linear(x, N(COMP_WGATE), coff * hd, H));
            PDB_TRY(pdb_make_model_normal(x, N(COMP_APE), r, coff * hd, 0, 0.1));
            PDB_TRY(pdb_make_model_norm(x, N(COMP_NORM), hd));
            if (at == PDB_V4_ATTN_CSA) {
                PDB_TRY(pdb_make_model_linear(x, N(IDX_WQ_B), nih * ihd, qlr));
                PDB_TRY(pdb_make_model_linear(x, N(IDX_WPROJ), nih, H));
                PDB_TRY(pdb_make_model_linear(x, N(IDX_COMP_WKV), 2 * ihd, H));
                PDB_TRY(pdb_make_model_linear(x, N(IDX_COMP_WGATE), 2 * ihd, H));
                PDB_TRY(pdb_make_model_normal(x, N(IDX_COMP_APE), r, 2 * ihd, 0, 0.1));
                PDB_TRY(pdb_make_model_norm(x, N(IDX_COMP_NORM), ihd));
            }
        }
        PDB_TRY(pdb_make_model_linear(x, N(GATE), E, H));
        if (c->v4_hash_moe[l]) PDB_TRY(pdb_make_model_picks(x, N(GATE_TID2EID), c->vocab_size, c->num_experts_per_tok, E));
        else PDB_TRY(pdb_make_model_normal(x, N(GATE_BIAS), E, 0, 0, 0.01));
        for (e = 0; e < E; e++) {
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_W1), I, H));
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_W2), H, I));
            PDB_TRY(pdb_make_model_linear(x, N(EXPERT_W3), I, H));
        }
        if (c->n_shared_experts) {
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_W1), I, H));
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_W2), H, I));
            PDB_TRY(pdb_make_model_linear(x, N(SHARED_W3), I, H));
        }
    }
#undef NR
#undef N
    return PDB_OK;
}
