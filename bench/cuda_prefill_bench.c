/* cuda_prefill_bench: CUDA prefill throughput (tokens/s) at several prompt lengths on a
 * V2-Lite-shaped random checkpoint (make-model preset v2-lite with fewer layers/experts/vocab),
 * with and without the capture hook (its overhead). Prints one "cuda-bench ..." line per run.
 * Invariant: every number printed was measured in this process; a run whose predecessor took
 * longer than the time budget is skipped and printed as skipped. Built by tools/cuda_validate.sh.
 * Usage: cuda_prefill_bench [MODEL_DIR [LAYERS [EXPERTS [CHUNK [BUDGET_S [GEMM_ROWS [PRECISION [T,T,... [FLAGS]]]]]]]]]
 * (GEMM_ROWS: 0 the default M-invariant tiles, -1 one cuBLAS call per product, N tiles of N rows;
 * PRECISION: bf16 (the MHA-form tensor-core attention), bf16-absorbed (the absorbed form on the
 * tensor cores), bf16-cudacores (the absorbed f32 CUDA-core kernel on the same bf16 cache), f32,
 * exact; T: prompt lengths, default 4096,16384,65536; FLAGS: comma-separated, "profile" prints each
 * run's device time per stage (CUDA events), "moe-cublas" runs the routed experts as per-expert
 * cuBLAS calls and "moe-kernel" on the own grouped tensor-core GEMM instead of cuBLAS row-tile products
 * over the device layout (the default), "kv-recompute" expands the MHA form's K and V
 * of every key again at each pass instead of keeping every layer's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdb_clock.h"
#include "pdb_config.h"
#include "pdb_cuda.h"
#include "pdb_make_model.h"
#include "pdb_prefill_cuda.h"
#include "pdb_safetensors.h"

static int die(const char *what) {
    fprintf(stderr, "cuda_prefill_bench: %s: %s\n", what, pdb_err_msg());
    return 1;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp/pdb-cuda-bench-model";
    int64_t layers = argc > 2 ? atoll(argv[2]) : 4, experts = argc > 3 ? atoll(argv[3]) : 16;
    int64_t chunk = argc > 4 ? atoll(argv[4]) : 8192;
    double budget = argc > 5 ? atof(argv[5]) : 150.0; /* seconds one run may take before longer ones are skipped */
    int64_t Ts[8] = {4096, 16384, 65536}, nT = 3;
    if (argc > 8) {
        nT = 0;
        for (char *p = argv[8]; *p && nT < 8; p += strspn(p, ",")) Ts[nT++] = strtoll(p, &p, 10);
    }
    int64_t Tmax = 0;
    for (int64_t k = 0; k < nT; k++) Tmax = Ts[k] > Tmax ? Ts[k] : Tmax;
    char name[256];
    if (!pdb_cuda_device_count(name, sizeof name)) { printf("cuda-bench skipped: no GPU\n"); return 0; }
    printf("cuda-bench device=\"%s\" layers=%lld experts=%lld chunk=%lld gemm_rows=%lld precision=%s\n", name,
           (long long)layers, (long long)experts, (long long)chunk, (long long)(argc > 6 ? atoll(argv[6]) : 0),
           argc > 7 ? argv[7] : "bf16");
    char cfgp[600];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    struct stat sb;
    double t0 = pdb_clock_now();
    if (stat(cfgp, &sb)) {
        pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "v2-lite", .seed = 3, .layers = layers,
                                 .experts = experts, .vocab = 32000, .out_dir = dir};
        if (pdb_make_model_write(&o)) return die("make-model");
    }
    pdb_config cfg;
    pdb_st *st = NULL;
    if (pdb_config_load(dir, &cfg) || pdb_st_open(dir, &st)) return die("open model");
    printf("cuda-bench model ready in %.1f s (hidden %lld, layers %lld, experts %lld top-%lld, vocab %lld)\n",
           pdb_clock_now() - t0, (long long)cfg.hidden_size, (long long)cfg.num_layers, (long long)cfg.n_routed_experts,
           (long long)cfg.num_experts_per_tok, (long long)cfg.vocab_size);
    pdb_prefill_backend_opts o = {.cfg = &cfg, .engine = st, .decoder = st};
    int64_t gemm_rows = argc > 6 ? atoll(argv[6]) : 0; /* 0 default M-invariant tiles, -1 one call per product */
    const char *prec = argc > 7 ? argv[7] : "bf16", *flags = argc > 9 ? argv[9] : "";
    pdb_cuda_prefill_opts co = {.prec = !strcmp(prec, "exact") ? PDB_CUDA_PREC_EXACT
                                        : !strcmp(prec, "f32") ? PDB_CUDA_PREC_F32 : PDB_CUDA_PREC_BF16,
                                .sub_chunk = chunk, .page_tokens = 64, .gemm_rows = gemm_rows,
                                .attn = !strcmp(prec, "bf16-cudacores")  ? PDB_CUDA_ATTN_CUDA_CORES
                                        : !strcmp(prec, "bf16-absorbed") ? PDB_CUDA_ATTN_ABSORBED_TC
                                                                         : PDB_CUDA_ATTN_AUTO,
                                .moe_cublas = strstr(flags, "moe-cublas") != NULL,
                                .moe_kernel = strstr(flags, "moe-kernel") != NULL,
                                .mha_kv_recompute = strstr(flags, "kv-recompute") != NULL,
                                .profile = strstr(flags, "profile") != NULL};
    printf("cuda-bench flags=\"%s\"\n", flags);
    pdb_prefill_backend *be = NULL;
    t0 = pdb_clock_now();
    if (pdb_prefill_cuda_create(&o, &co, &be)) return die("create");
    printf("cuda-bench weights uploaded in %.1f s\n", pdb_clock_now() - t0);
    int64_t V = cfg.vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)Tmax);
    if (!logits || !ids) { fprintf(stderr, "out of memory\n"); return 1; }
    uint32_t seed = 1;
    for (int64_t i = 0; i < Tmax; i++) { seed = seed * 1664525u + 1013904223u; ids[i] = (int32_t)((seed >> 8) % V); }
    /* warm-up: kernels, cuBLAS heuristics */
    if (be->begin(be, 1024, 1024) || be->forward_chunk(be, ids, 0, 1024, 1, logits)) return die("warm-up");
    be->end(be);
    char drop[1024];
    pdb_prefill_cuda_profile_take(be, drop, sizeof drop); /* the warm-up's stages are not reported */
    double last = 0;
    for (int64_t k = 0; k < nT; k++) {
        int64_t T = Ts[k];
        double dt[2] = {0, 0};
        for (int withcap = 1; withcap >= 0; withcap--) {
            double ratio = k ? (double)T / (double)Ts[k - 1] : 1.0; /* attention grows ~T^2 */
            if (last * ratio * ratio > budget) {
                printf("cuda-bench T=%lld capture=%s skipped (time budget)\n", (long long)T, withcap ? "on" : "off");
                continue;
            }
            if (be->begin(be, T, chunk)) return die("begin"); /* one chunk per block: the hook keeps one block of rows */
            double s0 = pdb_clock_now();
            for (int64_t p = 0; p < T; p += chunk) {
                int64_t n = T - p < chunk ? T - p : chunk;
                if (be->forward_chunk(be, ids + p, p, n, withcap, p + n == T ? logits : NULL))
                    return die("forward");
            }
            dt[withcap] = pdb_clock_now() - s0;
            be->end(be);
            printf("cuda-bench T=%lld capture=%s time=%.3f s tokens_per_s=%.0f\n", (long long)T, withcap ? "on" : "off",
                   dt[withcap], (double)T / dt[withcap]);
            char prof[1024];
            pdb_prefill_cuda_profile_take(be, prof, sizeof prof);
            if (prof[0]) printf("cuda-bench T=%lld capture=%s profile_ms %s\n", (long long)T, withcap ? "on" : "off", prof);
            fflush(stdout);
            if (withcap) last = dt[withcap];
        }
        if (dt[0] > 0 && dt[1] > 0)
            printf("cuda-bench T=%lld capture_overhead=%.1f%%\n", (long long)T, 100.0 * (dt[1] - dt[0]) / dt[0]);
    }
    be->destroy(be);
    pdb_st_close(st);
    free(logits);
    free(ids);
    return 0;
}
