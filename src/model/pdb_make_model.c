/* pdb_make_model: presets for random DeepSeek-V2 and DeepSeek-V4 checkpoints and the writer. Weights: linear
 * layers ~ N(0, 1/in_features), embeddings ~ N(0, 1), norm weights ~ 1 + N(0, 0.05^2). */
#include "pdb_make_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdb_dtype.h"
#include "pdb_file.h"
#include "pdb_pool.h"
#include "pdb_safetensors.h"
#include "pdb_v2_names.h"
#include "pdb_v4_names.h"

/* DeepSeek-V4 presets. "v4-flash" is V4-Flash's architecture exactly (attention, indexer,
 * compressors, hyper-connections, layer schedule, rope); only the expert count may be changed
 * (--experts; 8 gives V4-Flash's active compute in ~15B parameters). "tiny" keeps every path
 * (sliding, CSA with its indexer, HCA, hash routing) on short prompts: window 8, HCA rate 16. */
static pdb_status v4_preset(const char *preset, pdb_config *c) {
    c->arch = PDB_ARCH_DEEPSEEK_V4;
    snprintf(c->model_type, sizeof c->model_type, "deepseek_v4");
    c->rms_norm_eps = 1e-6;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
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
    } else if (!strcmp(preset, "v4-flash")) {
        c->vocab_size = 129280; c->hidden_size = 4096; c->num_layers = 43; c->num_heads = 64; c->head_dim = 512;
        c->q_lora_rank = 1024; c->o_groups = 8; c->o_lora_rank = 1024; c->sliding_window = 128; c->hc_mult = 4;
        c->index_n_heads = 64; c->index_head_dim = 128; c->index_topk = 512; c->n_routed_experts = 256;
        c->num_experts_per_tok = 6; c->moe_intermediate_size = 2048;
    } else {
        return pdb_err_set(PDB_NOT_FOUND, "make-model: unknown deepseek_v4 preset '%s' (tiny, v4-flash)", preset);
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

pdb_status pdb_make_model_preset(const char *arch, const char *preset, pdb_config *c) {
    memset(c, 0, sizeof *c);
    if (!strcmp(arch, "deepseek_v4")) return v4_preset(preset, c);
    if (strcmp(arch, "deepseek_v2"))
        return pdb_err_set(PDB_UNSUPPORTED, "make-model: architecture '%s' is not supported (deepseek_v2, deepseek_v4)", arch);
    c->arch = PDB_ARCH_DEEPSEEK_V2;
    snprintf(c->model_type, sizeof c->model_type, "deepseek_v2");
    c->rms_norm_eps = 1e-6;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->topk_method = PDB_TOPK_GREEDY;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
    c->rope.type = PDB_ROPE_YARN;
    c->rope.theta = 10000;
    c->rope.beta_fast = 32;
    c->rope.beta_slow = 1;
    c->rope.attention_factor = -1;
    c->rope.truncate = 1;
    if (!strcmp(preset, "tiny")) { /* unit tests: tiny, no tokenizer */
        c->vocab_size = 1000; c->hidden_size = 64; c->num_layers = 3; c->num_heads = 4;
        c->q_lora_rank = 0; c->kv_lora_rank = 32; c->qk_nope_head_dim = 16; c->qk_rope_head_dim = 8;
        c->v_head_dim = 16; c->intermediate_size = 128; c->moe_intermediate_size = 32;
        c->n_routed_experts = 8; c->num_experts_per_tok = 2; c->n_shared_experts = 1; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 16384;
        c->rope.factor = 4; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else if (!strcmp(preset, "small")) { /* demo and end-to-end tests: real tokenizer vocabulary */
        c->vocab_size = 129280; c->hidden_size = 256; c->num_layers = 4; c->num_heads = 4;
        c->q_lora_rank = 96; c->kv_lora_rank = 64; c->qk_nope_head_dim = 32; c->qk_rope_head_dim = 16;
        c->v_head_dim = 32; c->intermediate_size = 512; c->moe_intermediate_size = 128;
        c->n_routed_experts = 16; c->num_experts_per_tok = 4; c->n_shared_experts = 2; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 163840;
        c->rope.factor = 40; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else if (!strcmp(preset, "v2-lite")) { /* DeepSeek-V2-Lite's shapes (15.7B; use overrides) */
        c->vocab_size = 102400; c->hidden_size = 2048; c->num_layers = 27; c->num_heads = 16;
        c->q_lora_rank = 0; c->kv_lora_rank = 512; c->qk_nope_head_dim = 128; c->qk_rope_head_dim = 64;
        c->v_head_dim = 128; c->intermediate_size = 10944; c->moe_intermediate_size = 1408;
        c->n_routed_experts = 64; c->num_experts_per_tok = 6; c->n_shared_experts = 2; c->first_k_dense_replace = 1;
        c->routed_scaling_factor = 1.0; c->max_position_embeddings = 163840; c->bos_token_id = 100000;
        c->eos_token_id = 100001;
        c->rope.factor = 40; c->rope.original_max_pos = 4096; c->rope.mscale = 0.707; c->rope.mscale_all_dim = 0.707;
    } else {
        return pdb_err_set(PDB_NOT_FOUND, "make-model: unknown preset '%s' (tiny, small, v2-lite)", preset);
    }
    return PDB_OK;
}

/* ---- deterministic normal stream per tensor (splitmix64 + Box-Muller) ---------------------- */

typedef struct { uint64_t s; } mm_rng;
static const uint64_t MM_STEP = 0x9E3779B97F4A7C15ull; /* splitmix64's state increment per draw */
static uint64_t mm_next(mm_rng *r) {
    uint64_t z = (r->s += MM_STEP);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double mm_uniform(mm_rng *r) { return ((double)(mm_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static uint64_t mm_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

typedef struct { pdb_st_writer *w; uint16_t **bufs; int n, cap; uint64_t seed, bytes, next_report; pdb_pool *pool; } mm_ctx;

/* A tensor's values in chunks on the pool: element pair p takes draws 2p + 1 and 2p + 2 of its
 * tensor's splitmix64 stream, whose state after k draws is seed + k * increment, so a chunk
 * starting at an even element i0 starts from state seed + i0 * increment and every chunking
 * writes the same bits as one pass. */
enum { MM_CHUNK = 1 << 14 };
typedef struct { uint16_t *b; int64_t n; uint64_t s0; double mean, std; } mm_fill;

static void mm_fill_task(void *vc, int64_t task, int thread) {
    const mm_fill *f = vc;
    int64_t i0 = task * MM_CHUNK, i1 = i0 + MM_CHUNK < f->n ? i0 + MM_CHUNK : f->n;
    mm_rng r = {f->s0 + (uint64_t)i0 * MM_STEP};
    for (int64_t i = i0; i < i1; i += 2) {
        double u1 = mm_uniform(&r), u2 = mm_uniform(&r), rad = sqrt(-2 * log(u1));
        f->b[i] = pdb_f32_to_bf16((float)(f->mean + f->std * rad * cos(2 * M_PI * u2)));
        if (i + 1 < f->n) f->b[i + 1] = pdb_f32_to_bf16((float)(f->mean + f->std * rad * sin(2 * M_PI * u2)));
    }
}

static pdb_status mm_add(mm_ctx *x, const char *name, int64_t d0, int64_t d1, double mean, double std) {
    int64_t n = d0 * (d1 ? d1 : 1);
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n);
    if (!b) return pdb_err_set(PDB_NOMEM, "make-model: tensor %s", name);
    if (x->n == x->cap) {
        int nc = x->cap ? x->cap * 2 : 256;
        uint16_t **nb = realloc(x->bufs, sizeof(*nb) * (size_t)nc);
        if (!nb) { free(b); return pdb_err_set(PDB_NOMEM, "make-model"); }
        x->bufs = nb;
        x->cap = nc;
    }
    x->bufs[x->n++] = b;
    mm_fill f = {b, n, mm_hash(name, x->seed), mean, std};
    pdb_pool_run(x->pool, (n + MM_CHUNK - 1) / MM_CHUNK, mm_fill_task, &f);
    x->bytes += (uint64_t)n * 2;
    if (x->bytes >= x->next_report) { /* progress for the big presets (v2-lite, v4-flash) */
        if (x->next_report) PDB_INFO("make-model: %.1f GB of weights generated", x->bytes / 1e9);
        x->next_report = x->bytes + (1ull << 30);
    }
    int64_t shape[2] = {d0, d1};
    return pdb_st_writer_add(x->w, name, PDB_DT_BF16, d1 ? 2 : 1, shape, b);
}

static pdb_status mm_linear(mm_ctx *x, const char *name, int64_t out, int64_t in) {
    return mm_add(x, name, out, in, 0, 1.0 / sqrt((double)in));
}
static pdb_status mm_norm(mm_ctx *x, const char *name, int64_t n) { return mm_add(x, name, n, 0, 1.0, 0.05); }

static pdb_status mm_tensors(mm_ctx *x, const pdb_config *c) {
    char n[PDB_NAMES_MAX_LEN];
    int64_t H = c->hidden_size, nh = c->num_heads, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
#define N(role) pdb_names_format_saved(&pdb_v2_names_table, PDB_V2_T_##role, l, e, n)
    int64_t l = -1, e = 0;
    PDB_TRY(mm_add(x, N(EMBED), c->vocab_size, H, 0, 1));
    PDB_TRY(mm_norm(x, N(FINAL_NORM), H));
    PDB_TRY(mm_linear(x, N(LM_HEAD), c->vocab_size, H));
    for (l = 0; l < c->num_layers; l++) {
        PDB_TRY(mm_norm(x, N(ATTN_NORM), H));
        PDB_TRY(mm_norm(x, N(FFN_NORM), H));
        if (c->q_lora_rank) {
            PDB_TRY(mm_linear(x, N(Q_A_PROJ), c->q_lora_rank, H));
            PDB_TRY(mm_norm(x, N(Q_A_NORM), c->q_lora_rank));
            PDB_TRY(mm_linear(x, N(Q_B_PROJ), nh * qk, c->q_lora_rank));
        } else {
            PDB_TRY(mm_linear(x, N(Q_PROJ), nh * qk, H));
        }
        PDB_TRY(mm_linear(x, N(KV_A_PROJ), c->kv_lora_rank + c->qk_rope_head_dim, H));
        PDB_TRY(mm_norm(x, N(KV_A_NORM), c->kv_lora_rank));
        PDB_TRY(mm_linear(x, N(KV_B_PROJ), nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank));
        PDB_TRY(mm_linear(x, N(O_PROJ), H, nh * c->v_head_dim));
        if (!pdb_config_layer_is_moe(c, l)) {
            PDB_TRY(mm_linear(x, N(MLP_GATE), c->intermediate_size, H));
            PDB_TRY(mm_linear(x, N(MLP_UP), c->intermediate_size, H));
            PDB_TRY(mm_linear(x, N(MLP_DOWN), H, c->intermediate_size));
            continue;
        }
        int64_t Im = c->moe_intermediate_size;
        PDB_TRY(mm_linear(x, N(ROUTER), c->n_routed_experts, H));
        for (e = 0; e < c->n_routed_experts; e++) {
            PDB_TRY(mm_linear(x, N(EXPERT_GATE), Im, H));
            PDB_TRY(mm_linear(x, N(EXPERT_UP), Im, H));
            PDB_TRY(mm_linear(x, N(EXPERT_DOWN), H, Im));
        }
        if (c->n_shared_experts) {
            int64_t Is = Im * c->n_shared_experts;
            PDB_TRY(mm_linear(x, N(SHARED_GATE), Is, H));
            PDB_TRY(mm_linear(x, N(SHARED_UP), Is, H));
            PDB_TRY(mm_linear(x, N(SHARED_DOWN), H, Is));
        }
    }
#undef N
    return PDB_OK;
}

/* I64 tid2eid [V, K]: K distinct experts per token (partial Fisher-Yates from the tensor's stream). */
static pdb_status mm_tid2eid(mm_ctx *x, const char *name, int64_t V, int64_t K, int64_t E) {
    int64_t *b = malloc(sizeof(int64_t) * (size_t)(V * K));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)E);
    if (!b || !perm || K > E) { free(b); free(perm); return pdb_err_set(PDB_NOMEM, "make-model: tensor %s", name); }
    if (x->n == x->cap) {
        int nc = x->cap ? x->cap * 2 : 256;
        uint16_t **nb = realloc(x->bufs, sizeof(*nb) * (size_t)nc);
        if (!nb) { free(b); free(perm); return pdb_err_set(PDB_NOMEM, "make-model"); }
        x->bufs = nb;
        x->cap = nc;
    }
    x->bufs[x->n++] = (uint16_t *)b;
    mm_rng r = {mm_hash(name, x->seed)};
    for (int64_t v = 0; v < V; v++) {
        for (int64_t e = 0; e < E; e++) perm[e] = e;
        for (int64_t k = 0; k < K; k++) {
            int64_t j = k + (int64_t)(mm_next(&r) % (uint64_t)(E - k)), t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
            b[v * K + k] = perm[k];
        }
    }
    free(perm);
    int64_t shape[2] = {V, K};
    return pdb_st_writer_add(x->w, name, PDB_DT_I64, 2, shape, b);
}

/* V4 tensors, named as transformers 5.17 save_pretrained writes them (DeepSeek's names under
 * "model.", the main kv_norm as attn.norm, model.embed_tokens, head): pdb_v4_names' saved spellings. */
static pdb_status mm_tensors_v4(mm_ctx *x, const pdb_config *c) {
    char n[PDB_NAMES_MAX_LEN];
    int64_t H = c->hidden_size, nh = c->num_heads, hd = c->head_dim, hc = c->hc_mult, mix = (2 + hc) * hc;
    int64_t qlr = c->q_lora_rank, G = c->o_groups, olr = c->o_lora_rank, E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size, nih = c->index_n_heads, ihd = c->index_head_dim;
#define N(role) pdb_names_format_saved(&pdb_v4_names_table, PDB_V4_T_##role, l, e, n)
#define NR(role) pdb_names_format_saved(&pdb_v4_names_table, role, l, e, n)
    int64_t l = -1, e = 0;
    PDB_TRY(mm_add(x, N(EMBED), c->vocab_size, H, 0, 1));
    PDB_TRY(mm_norm(x, N(NORM), H));
    PDB_TRY(mm_linear(x, N(HEAD), c->vocab_size, H));
    PDB_TRY(mm_linear(x, N(HC_HEAD_FN), hc, hc * H));
    PDB_TRY(mm_add(x, N(HC_HEAD_BASE), hc, 0, 0, 0.1));
    PDB_TRY(mm_add(x, N(HC_HEAD_SCALE), 1, 0, 1, 0.05));
    for (l = 0; l < c->num_layers; l++) {
        PDB_TRY(mm_norm(x, N(ATTN_NORM), H));
        PDB_TRY(mm_norm(x, N(FFN_NORM), H));
        const int site[2][3] = {{PDB_V4_T_HC_ATTN_FN, PDB_V4_T_HC_ATTN_BASE, PDB_V4_T_HC_ATTN_SCALE},
                                {PDB_V4_T_HC_FFN_FN, PDB_V4_T_HC_FFN_BASE, PDB_V4_T_HC_FFN_SCALE}};
        for (int i = 0; i < 2; i++) {
            PDB_TRY(mm_linear(x, NR(site[i][0]), mix, hc * H));
            PDB_TRY(mm_add(x, NR(site[i][1]), mix, 0, 0, 0.1));
            PDB_TRY(mm_add(x, NR(site[i][2]), 3, 0, 1, 0.05));
        }
        PDB_TRY(mm_linear(x, N(WQ_A), qlr, H));
        PDB_TRY(mm_norm(x, N(Q_NORM), qlr));
        PDB_TRY(mm_linear(x, N(WQ_B), nh * hd, qlr));
        PDB_TRY(mm_linear(x, N(WKV), hd, H));
        PDB_TRY(mm_norm(x, N(KV_NORM), hd));
        PDB_TRY(mm_linear(x, N(WO_A), G * olr, nh * hd / G));
        PDB_TRY(mm_linear(x, N(WO_B), H, G * olr));
        PDB_TRY(mm_add(x, N(ATTN_SINK), nh, 0, 0, 0.5));
        pdb_v4_attn at = (pdb_v4_attn)c->v4_attn[l];
        if (at != PDB_V4_ATTN_SLIDING) {
            int64_t r = pdb_config_v4_rate(c, l), coff = at == PDB_V4_ATTN_CSA ? 2 : 1;
            PDB_TRY(mm_linear(x, N(COMP_WKV), coff * hd, H));
            PDB_TRY(mm_linear(x, N(COMP_WGATE), coff * hd, H));
            PDB_TRY(mm_add(x, N(COMP_APE), r, coff * hd, 0, 0.1));
            PDB_TRY(mm_norm(x, N(COMP_NORM), hd));
            if (at == PDB_V4_ATTN_CSA) {
                PDB_TRY(mm_linear(x, N(IDX_WQ_B), nih * ihd, qlr));
                PDB_TRY(mm_linear(x, N(IDX_WPROJ), nih, H));
                PDB_TRY(mm_linear(x, N(IDX_COMP_WKV), 2 * ihd, H));
                PDB_TRY(mm_linear(x, N(IDX_COMP_WGATE), 2 * ihd, H));
                PDB_TRY(mm_add(x, N(IDX_COMP_APE), r, 2 * ihd, 0, 0.1));
                PDB_TRY(mm_norm(x, N(IDX_COMP_NORM), ihd));
            }
        }
        PDB_TRY(mm_linear(x, N(GATE), E, H));
        if (c->v4_hash_moe[l]) PDB_TRY(mm_tid2eid(x, N(GATE_TID2EID), c->vocab_size, c->num_experts_per_tok, E));
        else PDB_TRY(mm_add(x, N(GATE_BIAS), E, 0, 0, 0.01));
        for (e = 0; e < E; e++) {
            PDB_TRY(mm_linear(x, N(EXPERT_W1), I, H));
            PDB_TRY(mm_linear(x, N(EXPERT_W2), H, I));
            PDB_TRY(mm_linear(x, N(EXPERT_W3), I, H));
        }
        if (c->n_shared_experts) {
            PDB_TRY(mm_linear(x, N(SHARED_W1), I, H));
            PDB_TRY(mm_linear(x, N(SHARED_W2), H, I));
            PDB_TRY(mm_linear(x, N(SHARED_W3), I, H));
        }
    }
#undef NR
#undef N
    return PDB_OK;
}

pdb_status pdb_make_model_write(const pdb_make_model_opts *o) {
    pdb_config c;
    PDB_TRY(pdb_make_model_preset(o->arch ? o->arch : "deepseek_v2", o->preset ? o->preset : "tiny", &c));
    if (o->layers > 0) {
        if (c.arch == PDB_ARCH_DEEPSEEK_V4 && o->layers > PDB_CONFIG_MAX_LAYERS)
            return pdb_err_set(PDB_TOO_LARGE, "make-model: --layers %lld exceeds %d", (long long)o->layers, PDB_CONFIG_MAX_LAYERS);
        c.num_layers = o->layers;
        if (c.arch == PDB_ARCH_DEEPSEEK_V4) /* the preset's schedule, continued */
            for (int64_t l = 0; l < c.num_layers; l++)
                c.v4_attn[l] = l < 2 ? PDB_V4_ATTN_SLIDING : (l % 2 ? PDB_V4_ATTN_HCA : PDB_V4_ATTN_CSA);
    }
    if (o->experts > 0) { c.n_routed_experts = o->experts; if (c.num_experts_per_tok > o->experts) c.num_experts_per_tok = o->experts; }
    if (o->vocab > 0) c.vocab_size = o->vocab;
    if (o->hidden > 0) c.hidden_size = o->hidden;
    if (c.bos_token_id >= c.vocab_size) c.bos_token_id = 0;
    if (c.eos_token_id >= c.vocab_size) c.eos_token_id = c.vocab_size > 1 ? 1 : 0;
    /* round-trip through the parser so that what we write is what we accept */
    char *json = NULL;
    PDB_TRY(pdb_config_to_json(&c, &json));
    pdb_config check;
    pdb_status s = pdb_config_parse(json, "make-model config", &check);
    if (s) { free(json); return s; }
    if ((s = pdb_file_mkdirs(o->out_dir))) {
        free(json);
        return pdb_err_wrap(s, "make-model");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->out_dir);
    FILE *f = fopen(path, "wb");
    if (!f) { free(json); return pdb_err_set(PDB_IO, "make-model: cannot create %s: %s", path, strerror(errno)); }
    int bad = fputs(json, f) < 0 || fputc('\n', f) < 0;
    bad |= fclose(f) != 0;
    free(json);
    if (bad) return pdb_err_set(PDB_IO, "make-model: writing %s failed", path);

    mm_ctx x = {0};
    x.seed = o->seed;
    if ((s = pdb_pool_create(0, &x.pool))) return s; /* the values are the same on any number of threads */
    if ((s = pdb_st_writer_init(&x.w))) { pdb_pool_destroy(x.pool); return s; }
    char seedbuf[32];
    snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)o->seed);
    if (!(s = pdb_st_writer_meta(x.w, "format", "pt")) && !(s = pdb_st_writer_meta(x.w, "pdbridge_seed", seedbuf)) &&
        !(s = pdb_st_writer_meta(x.w, "pdbridge_preset", o->preset ? o->preset : "tiny")) &&
        !(s = c.arch == PDB_ARCH_DEEPSEEK_V4 ? mm_tensors_v4(&x, &c) : mm_tensors(&x, &c))) {
        snprintf(path, sizeof path, "%s/model.safetensors", o->out_dir);
        s = pdb_st_writer_finish(x.w, path);
    }
    pdb_st_writer_free(x.w);
    pdb_pool_destroy(x.pool);
    for (int i = 0; i < x.n; i++) free(x.bufs[i]);
    free(x.bufs);
    if (s) return s;
    if (o->tokenizer && c.vocab_size >= 129280) {
        snprintf(path, sizeof path, "%s/tokenizer.json", o->out_dir);
        pdb_status cs = pdb_file_copy(o->tokenizer, path);
        if (cs) return pdb_err_wrap(cs, "make-model: tokenizer");
    }
    return PDB_OK;
}
