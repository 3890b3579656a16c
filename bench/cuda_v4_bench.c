/* cuda_v4_bench: prefill throughput of the device-resident DeepSeek-V4 engine (pdb_cuda_v4_engine)
 * at several prompt lengths, on weights seeded on the device (make-model's bf16 stream of a preset:
 * V4-Flash-shaped models with all 256 experts, no checkpoint on disk) or loaded from a checkpoint
 * (the same file a peer runs). Prints one "cuda-v4-bench ..." line per run with tok/s and the
 * model's GFLOP per token at that length (counted from the config: every matrix product, the
 * attention's scores and values over the keys each position reads, the indexer's scores), and
 * with "profile" the device time per stage; device_gb is the device memory in use after the pass
 * (before the sequence's buffers are freed), engine_gb that minus what was in use before the engine.
 * Invariant: every number printed was measured (or counted) in this process; a run whose
 * predecessor took longer than the time budget is printed as skipped.
 * Usage: cuda_v4_bench seeded PRESET LAYERS EXPERTS SEED | model DIR
 *                      [T,T,...] [PRECISION bf16|f32] [BUDGET_S] [FLAGS: profile,hook,moe-kernel]
 *        cuda_v4_bench mm M,N,K [REPS]  (the hook's exact-order product's kernels beside cuBLAS SGEMM)
 *        cuda_v4_bench gemm [REPS]      (cuBLAS's speed and bits for the engine's product forms: tiles in sequence,
 *                                        on several streams, batched; the experts' tiles per call or per expert)
 * (hook: a hook that takes every layer's copy; hook-feed: the capture hook's products on the device with the
 * model's own hook weights (pdb_cuda_v4_engine_set_hook), and with a checkpoint (model DIR) the decoder's steps on the
 * host's cores into a pdb_v4_cache of official semantics, as the bridge runs them (seeded: the products' copies only);
 * moe-kernel: the routed experts on pdb_cuda_moe_gemm instead of
 * cuBLAS row-tile products; rows=N: the M-invariant GEMM tile, default 512, -1 one call per product;
 * attn-f32-keys: the attention kernel reading the f32 key rows instead of their bf16 mirrors; attn-mma-sync: the
 * mma.sync kernel on the bf16 mirrors (tc16) instead of the warpgroup one where that fits; tiles-seq: every
 * M-invariant tile its own cuBLAS call instead of the checked batched form; chunk=N: passes of at most N tokens
 * instead of the engine's default bound). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_clock.h"
#include "pdb_config.h"
#include "pdb_cuda.h"
#include "pdb_cuda_gemm_probe.h"
#include "pdb_cuda_v4_engine.h"
#include "pdb_cuda_v4_probe.h"
#include "pdb_make_model.h"
#include "pdb_pool.h"
#include "pdb_v4.h"

/* FNV-1a 64 over the logits' bytes: two builds' runs on the same weights compare bit for bit. */
static uint64_t logits_fnv(const float *v, int64_t n) {
    const unsigned char *b = (const unsigned char *)v;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < sizeof(float) * (size_t)n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int die(const char *what) {
    fprintf(stderr, "cuda_v4_bench: %s: %s\n", what, pdb_err_msg());
    return 1;
}

/* The model's FLOPs per token averaged over a prompt of T positions (the model's own formulation;
 * the LM head is left out: a prefill computes the last position's logits only). */
static double gflop_per_token(const pdb_config *c, int64_t T) {
    double H = (double)c->hidden_size, nh = (double)c->num_heads, hd = (double)c->head_dim, qlr = (double)c->q_lora_rank;
    double olr = (double)c->o_lora_rank, G = (double)c->o_groups, nih = (double)c->index_n_heads, ihd = (double)c->index_head_dim;
    double hc = (double)c->hc_mult, E = (double)c->n_routed_experts, I = (double)c->moe_intermediate_size;
    double Kx = (double)c->num_experts_per_tok + (double)c->n_shared_experts;
    double total = 0;
    for (int64_t l = 0; l < c->num_layers; l++) {
        int kind = (int)c->v4_attn[l];
        double r = kind == PDB_V4_ATTN_SLIDING ? 0 : (double)pdb_config_v4_rate(c, l), coff = kind == PDB_V4_ATTN_CSA ? 2 : 1;
        double f = 2 * 2 * (2 + hc) * hc * hc * H;                     /* two hyper-connection sites' mixes */
        f += 2 * H * qlr + 2 * qlr * nh * hd + 2 * H * hd + 2 * nh * hd * olr + 2 * G * olr * H;
        if (r > 0) f += 2 * 2 * H * coff * hd;                          /* compressor */
        if (kind == PDB_V4_ATTN_CSA) f += 2 * 2 * H * 2 * ihd + 2 * qlr * nih * ihd + 2 * H * nih;
        double keys = 0, iscore = 0;                                    /* averaged over positions */
        for (int64_t p = 0; p < T; p++) {
            double win = (double)(p + 1 < c->sliding_window ? p + 1 : c->sliding_window), comp = 0;
            if (r > 0) {
                double nv = (double)((p + 1) / (int64_t)r);
                if (kind == PDB_V4_ATTN_CSA) {
                    comp = nv < (double)c->index_topk ? nv : (double)c->index_topk;
                    if (nv > (double)c->index_topk) iscore += 2 * nih * ihd * nv;
                } else
                    comp = nv;
            }
            keys += win + comp;
        }
        f += (4 * nh * hd * keys + iscore) / (double)T;                 /* scores + values; the indexer */
        f += 2 * H * E + Kx * 3 * 2 * H * I;                            /* router, routed + shared experts */
        total += f;
    }
    return total / 1e9;
}

static pdb_status null_hook(void *user, int64_t layer, const float *x, int64_t n, int64_t p0) {
    (void)layer, (void)p0;
    volatile float *sink = user; /* touch the copy as a consumer would */
    *sink = x[n - 1];
    return PDB_OK;
}

/* hook-feed: the device's products into the decoder's cache (with a host model), else touched. */
typedef struct feed_ctx { const pdb_v4_model *m; pdb_v4_cache c; float sink; } feed_ctx;

static pdb_status feed_hook(void *user, int64_t layer, const pdb_v4_feed_rows *r, int64_t n, int64_t p0) {
    feed_ctx *f = user;
    (void)p0;
    if (!f->m) {
        volatile float *sink = &f->sink;
        *sink = r->kv[n - 1] + r->kvp[0];
        return PDB_OK;
    }
    PDB_TRY(pdb_v4_cache_feed_rows(f->m, &f->c, layer, r, n));
    if (layer == f->m->cfg.num_layers - 1) f->c.len += n;
    return PDB_OK;
}

/* mm M,N,K [REPS]: the capture hook's exact-order f32 product (pdb_cuda_v4_mm_exact = pdb_cuda_dot32), its
 * general and tiled kernels, beside cuBLAS's f32 SGEMM of the same shape in the same process. */
static int bench_mm(int argc, char **argv) {
    int64_t d[3] = {8192, 3072, 4096};
    char *p = argv[2];
    for (int i = 0; i < 3 && *p; i++, p += strspn(p, ",")) d[i] = strtoll(p, &p, 10);
    int reps = argc > 3 ? atoi(argv[3]) : 10;
    double ms[3] = {0};
    int same[3] = {0};
    if (pdb_cuda_v4_probe_mm_rate(d[0], d[1], d[2], reps, ms, same)) return die("mm");
    double gf = 2.0 * (double)d[0] * (double)d[1] * (double)d[2] / 1e9;
    static const char *const names[3] = {"dot32-general", "dot32-tiled", "cublas-sgemm"};
    for (int t = 0; t < 3; t++)
        printf("cuda-v4-bench mm M=%lld N=%lld K=%lld kernel=%s ms=%.3f tflops=%.2f same_bits=%s\n", (long long)d[0],
               (long long)d[1], (long long)d[2], names[t], ms[t], gf / ms[t], t == 2 ? "n/a" : same[t] ? "yes" : "NO");
    return 0;
}

/* gemm [REPS]: pdb_cuda_probe_gemm_forms, one line per form. */
static int bench_gemm(int argc, char **argv) {
    pdb_gemm_form_row rows[48];
    int n = 0;
    pdb_status s = pdb_cuda_probe_gemm_forms(argc > 2 ? atoi(argv[2]) : 10, rows, 48, &n);
    for (int i = 0; i < n; i++)
        printf("cuda-v4-bench gemm %s M=%lld N=%lld K=%lld calls=%lld ms=%.3f tflops=%.1f same_bits=%s\n", rows[i].name,
               (long long)rows[i].M, (long long)rows[i].N, (long long)rows[i].K, (long long)rows[i].calls, rows[i].ms,
               rows[i].tflops, rows[i].same ? "yes" : "NO");
    return s ? die("gemm") : 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "mm")) return bench_mm(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "gemm")) return bench_gemm(argc, argv);
    if (argc < 3 || (strcmp(argv[1], "seeded") && strcmp(argv[1], "model"))) {
        fprintf(stderr, "usage: cuda_v4_bench seeded PRESET LAYERS EXPERTS SEED | model DIR [T,T,...] [bf16|f32] [BUDGET_S] "
                        "[profile,hook] | mm M,N,K [REPS] | gemm [REPS]\n");
        return 2;
    }
    int seeded = !strcmp(argv[1], "seeded");
    int a = seeded ? 6 : 3;
    if (seeded && argc < 6) return die("seeded needs PRESET LAYERS EXPERTS SEED");
    int64_t Ts[8] = {8192, 32768}, nT = 2;
    if (argc > a) {
        nT = 0;
        for (char *p = argv[a]; *p && nT < 8; p += strspn(p, ",")) Ts[nT++] = strtoll(p, &p, 10);
    }
    const char *prec = argc > a + 1 ? argv[a + 1] : "bf16";
    double budget = argc > a + 2 ? atof(argv[a + 2]) : 200.0;
    const char *flags = argc > a + 3 ? argv[a + 3] : "";
    int profile = strstr(flags, "profile") != NULL, hook_feed = strstr(flags, "hook-feed") != NULL;
    int hook = !hook_feed && strstr(flags, "hook") != NULL;
    int moe_kernel = strstr(flags, "moe-kernel") != NULL, f32_keys = strstr(flags, "attn-f32-keys") != NULL;
    int mma_sync = strstr(flags, "attn-mma-sync") != NULL;
    int tiles_seq = strstr(flags, "tiles-seq") != NULL;
    const char *chunk = strstr(flags, "chunk=");
    int64_t sub_chunk = chunk ? atoll(chunk + 6) : 0;
    const char *rows = strstr(flags, "rows=");
    int64_t gemm_rows = rows ? atoll(rows + 5) : 0;
    char name[256];
    if (!pdb_cuda_device_count(name, sizeof name)) { printf("cuda-v4-bench skipped: no GPU\n"); return 0; }
    long long used0 = 0, used = 0, total = 0;
    pdb_cuda_memory_used(&used0, &total); /* the context (and any other process's) before the engine */
    int64_t Tmax = 0;
    for (int64_t k = 0; k < nT; k++) Tmax = Ts[k] > Tmax ? Ts[k] : Tmax;
    pdb_cuda_v4_engine_opts o = {.prec = !strcmp(prec, "f32") ? PDB_CUDA_PREC_F32 : PDB_CUDA_PREC_BF16, .profile = profile,
                                 .moe_kernel = moe_kernel, .gemm_rows = gemm_rows, .attn_f32_keys = f32_keys,
                                 .attn_mma_sync = mma_sync, .gemm_tiles_sequential = tiles_seq, .sub_chunk = sub_chunk,
                                 .hookless = !hook && !hook_feed};
    pdb_cuda_v4_engine *e = NULL;
    pdb_v4_model *hm = NULL; /* hook-feed with a checkpoint: the decoder's model on the host */
    pdb_pool *pool = NULL;
    pdb_config cfg;
    double t0 = pdb_clock_now();
    if (seeded) {
        if (pdb_make_model_preset("deepseek_v4", argv[2], &cfg)) return die("preset");
        if (pdb_v4_make_layers(&cfg, atoll(argv[3]))) return die("layers");
        cfg.n_routed_experts = atoll(argv[4]);
        if (pdb_cuda_v4_engine_create_seeded(&cfg, (uint64_t)atoll(argv[5]), 0, &o, &e)) return die("create (seeded)");
    } else {
        pdb_v4_model *m = NULL;
        if (pdb_v4_load(argv[2], &m)) return die("load");
        cfg = m->cfg;
        pdb_status s = pdb_cuda_v4_engine_create(m, 0, &o, &e);
        if (hook_feed) hm = m;
        else pdb_v4_free(m);
        if (s) return die("create");
    }
    if (hook_feed && (pdb_cuda_v4_engine_set_hook(e, hm) || pdb_pool_create(0, &pool))) return die("hook-feed");
    printf("cuda-v4-bench device=\"%s\" weights=%s layers=%lld experts=%lld precision=%s hook=%s experts_on=%s weight_gb=%.2f "
           "gemm_rows=%lld tiles=%s pass_bound=%lld attn_keys=%s create_s=%.1f\n", name, seeded ? "seeded" : argv[2], (long long)cfg.num_layers, (long long)cfg.n_routed_experts, prec,
           hook ? "copy" : hook_feed ? (hm ? "feed" : "products") : "none", moe_kernel ? "moe_gemm" : "cublas_tiles",
           pdb_cuda_v4_engine_weight_bytes(e) / 1e9, (long long)(gemm_rows ? gemm_rows : PDB_CUDA_V4_GEMM_ROWS_DEFAULT),
           tiles_seq ? "sequential" : "batched_checked", (long long)(sub_chunk > 0 ? sub_chunk : PDB_CUDA_V4_PASS_DEFAULT), f32_keys ? "f32" : mma_sync ? "bf16_mma_sync" : "bf16",
           pdb_clock_now() - t0);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)Tmax);
    if (!ids) return die("ids");
    uint32_t x = 12345;
    for (int64_t i = 0; i < Tmax; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)cfg.vocab_size);
    }
    float *logits = malloc(sizeof(float) * (size_t)cfg.vocab_size), sink = 0;
    pdb_v4_hook h = {null_hook, &sink, NULL};
    feed_ctx fc = {.m = hm};
    pdb_v4_hook hf = {NULL, &fc, feed_hook};
    /* untimed first: one pass of every length the timed prompts run (module loading, cuBLAS's first
     * calls, the batched product forms' one-time checks, which depend on a pass's tile count) */
    if (pdb_cuda_v4_engine_begin(e, Tmax)) return die("warm-up (begin)");
    const int64_t bound = pdb_cuda_v4_engine_pass_tokens(e);
    pdb_cuda_v4_engine_end(e);
    int64_t warm[16], nw = 0;
    for (int64_t k = 0; k < nT; k++) {
        int64_t len[2] = {Ts[k] < bound ? Ts[k] : bound, Ts[k] > bound ? Ts[k] % bound : 0};
        for (int j = 0; j < 2; j++) {
            int seen = len[j] <= 0;
            for (int64_t w = 0; w < nw && !seen; w++) seen = warm[w] == len[j];
            if (!seen) warm[nw++] = len[j];
        }
    }
    for (int64_t w = 0; w < nw; w++)
        if (pdb_cuda_v4_engine_begin(e, warm[w]) || pdb_cuda_v4_engine_forward(e, ids, warm[w], NULL, logits)) return die("warm-up");
    pdb_cuda_v4_engine_end(e);
    int64_t checked = 0, rejected = 0;
    pdb_cuda_v4_engine_gemm_forms(e, &checked, &rejected);
    printf("cuda-v4-bench warm-up passes=%lld gemm_forms_checked=%lld rejected=%lld\n", (long long)nw, (long long)checked,
           (long long)rejected);
    double last = 0;
    for (int64_t k = 0; k < nT; k++) {
        int64_t T = Ts[k];
        double gf = gflop_per_token(&cfg, T);
        if (last > budget) {
            printf("cuda-v4-bench T=%lld skipped (the previous run took %.0f s, budget %.0f s) model_gflop_per_token=%.3f\n",
                   (long long)T, last, budget, gf);
            continue;
        }
        if (pdb_cuda_v4_engine_begin(e, T)) return die("begin");
        const int64_t pass = pdb_cuda_v4_engine_pass_tokens(e);
        if (hm) {
            if (pdb_v4_cache_init(&fc.c, hm, T, PDB_V4_SEM_OFFICIAL)) return die("hook cache");
            fc.c.exec.pool = pool;
        }
        char prof[1024] = "";
        if (profile) pdb_cuda_v4_engine_profile_take(e, prof, sizeof prof); /* reset */
        double s = pdb_clock_now();
        if (pdb_cuda_v4_engine_forward(e, ids, T, hook ? &h : hook_feed ? &hf : NULL, logits)) return die("forward");
        last = pdb_clock_now() - s;
        if (profile) pdb_cuda_v4_engine_profile_take(e, prof, sizeof prof);
        pdb_cuda_memory_used(&used, &total);
        pdb_cuda_v4_engine_end(e);
        if (hm) pdb_v4_cache_free(&fc.c);
        printf("cuda-v4-bench T=%lld time=%.3f tokens_per_s=%.0f model_gflop_per_token=%.3f tflops=%.1f logit0=%.6g "
               "logits_fnv=%016llx pass_tokens=%lld device_gb=%.2f engine_gb=%.2f of %.2f\n", (long long)T, last, T / last, gf,
               gf * T / last / 1e3, logits[0], (unsigned long long)logits_fnv(logits, cfg.vocab_size), (long long)pass,
               used / 1e9, (used - used0) / 1e9, total / 1e9);
        if (profile) printf("cuda-v4-bench T=%lld profile_ms %s\n", (long long)T, prof);
        fflush(stdout);
    }
    pdb_cuda_v4_engine_free(e);
    pdb_v4_free(hm);
    pdb_pool_destroy(pool);
    free(ids);
    free(logits);
    return 0;
}
