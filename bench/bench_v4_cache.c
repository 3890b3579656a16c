/* bench_v4_cache: the DeepSeek-V4 decoder cache stored compactly under `official` (D36), on
 * make-model's v4-flash preset (V4-Flash's attention exactly), before / after in one run:
 *  (1) cache bytes per token: the store layout of official semantics (K=V rows and compressed
 *      entries FP8 rows, indexer keys FP4 rows) against the f32 pools official held before (the
 *      same shapes in f32, which is also exact's layout today), per pool and in all, for 2048-token
 *      blocks; and the decoder's memory per token of context (the append rows; the window is a
 *      fixed state per sequence).
 *  (2) the lightning indexer's scores of one decode step at 32K and 128K context: one query (all
 *      index heads) against ctx/4 compressed keys of one CSA layer, on one thread: before =
 *      pdb_v4_index_scores on f32 keys (the decoder's path before D36), after = pdb_v4_iscore on the
 *      FP4 rows (the AVX-512 VNNI kernel where present, and the portable scalar kernel), the three
 *      run alternately in each round (a busy machine slows all alike), thread CPU time and wall
 *      time, every round's scores checked bit-identical to before's. Per step = per layer x the
 *      preset's CSA layers (the decoder splits one query's keys over its threads in chunks of 256).
 * Usage: bench_v4_cache [rounds] (default 9). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_arch.h"
#include "pdb_v4.h"
#include "pdb_v4_dots.h"
#include "pdb_v4_iscore.h"
#include "pdb_v4_qsim.h"
#include "pdb_v4_rows.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static double unif(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif())); }

/* an official indexer row: normal values, rotated, FP4 per 32 */
static void fp4_row(float *x, int64_t d) {
    for (int64_t i = 0; i < d; i++) x[i] = normal();
    pdb_v4_qsim_hadamard(x, d);
    pdb_v4_qsim_fp4(x, d);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    if (rounds < 1) rounds = 1;
    pdb_config cfg;
    if (pdb_arch_deepseek_v4.make_preset("v4-flash", &cfg)) {
        fprintf(stderr, "bench_v4_cache: %s\n", pdb_err_msg());
        return 1;
    }
    int64_t bs = 2048, n_csa = 0, n_hca = 0;
    for (int64_t l = 0; l < cfg.num_layers; l++) {
        n_csa += cfg.v4_attn[l] == PDB_V4_ATTN_CSA;
        n_hca += cfg.v4_attn[l] == PDB_V4_ATTN_HCA;
    }
    printf("preset v4-flash: %lld layers (%lld CSA, %lld HCA), head_dim %lld (rotary %lld), index %lld x %lld, window %lld, "
           "rates %lld / %lld, block %lld tokens\n",
           (long long)cfg.num_layers, (long long)n_csa, (long long)n_hca, (long long)cfg.head_dim, (long long)cfg.qk_rope_head_dim,
           (long long)cfg.index_n_heads, (long long)cfg.index_head_dim, (long long)cfg.sliding_window,
           (long long)cfg.compress_rate_csa, (long long)cfg.compress_rate_hca, (long long)bs);

    /* (1) bytes */
    pdb_arch_layout before, after;
    if (pdb_arch_layout_of(&cfg, PDB_V4_SEM_EXACT, &before) || pdb_arch_layout_of(&cfg, PDB_V4_SEM_OFFICIAL, &after)) {
        fprintf(stderr, "bench_v4_cache: %s\n", pdb_err_msg());
        return 1;
    }
    pdb_v4_row kv = pdb_v4_row_kv(&cfg, 0), ik = pdb_v4_row_ikey(&cfg, 0);
    printf("\nrow bytes: K=V row / compressed entry %lld (f32 %lld), indexer key %lld (f32 %lld)\n", (long long)kv.bytes,
           (long long)(4 * cfg.head_dim), (long long)ik.bytes, (long long)(4 * cfg.index_head_dim));
    printf("%-10s %-6s %14s %14s %8s\n", "pool", "kind", "f32 B/block", "compact B/block", "ratio");
    uint64_t tb = 0, ta = 0, appb = 0, appa = 0;
    for (int p = 0; p < after.layout.n_pools; p++) {
        const pdb_store_pool *a = &after.layout.pools[p], *b = &before.layout.pools[p];
        uint64_t xb = pdb_store_pool_bytes(b, bs), xa = pdb_store_pool_bytes(a, bs);
        tb += xb, ta += xa;
        if (a->kind == PDB_STORE_POOL_APPEND) appb += xb, appa += xa;
        printf("%-10s %-6s %14llu %14llu %8.3f\n", a->name, a->kind == PDB_STORE_POOL_APPEND ? "append" : "state",
               (unsigned long long)xb, (unsigned long long)xa, (double)xa / (double)xb);
    }
    printf("%-10s %-6s %14llu %14llu %8.3f\n", "all", "", (unsigned long long)tb, (unsigned long long)ta, (double)ta / (double)tb);
    printf("store bytes per token (block / %lld): before %.1f, after %.1f (%.3fx)\n", (long long)bs, (double)tb / bs,
           (double)ta / bs, (double)ta / (double)tb);
    printf("decoder memory per token of context (append rows): before %.1f, after %.1f (%.3fx); window state per sequence: "
           "before %lld, after %lld bytes\n",
           (double)appb / bs, (double)appa / bs, (double)appa / (double)appb,
           (long long)(cfg.num_layers * cfg.sliding_window * 4 * cfg.head_dim), (long long)(cfg.num_layers * cfg.sliding_window * kv.bytes));

    /* (2) indexer scores per step */
    int64_t nih = cfg.index_n_heads, d = cfg.index_head_dim;
    const int64_t ctxs[] = {32768, 131072};
    printf("\nindexer scores of one decode step, one CSA layer, one thread (%d rounds, before / vnni / f32 tiles / scalar "
           "alternating; VNNI kernel %s)\n", rounds, pdb_v4_iscore_has_vnni() ? "present" : "ABSENT (its row is the f32 tiles)");
    printf("%-8s %-7s %-10s %10s %10s %10s %10s %12s\n", "ctx", "keys", "path", "cpu_med_ms", "cpu_min_ms", "wall_med_ms", "x_before",
           "step_ms(x" "CSA)");
    for (int ci = 0; ci < 2; ci++) {
        int64_t ctx = ctxs[ci], nv = ctx / cfg.compress_rate_csa;
        float *q = malloc(sizeof(float) * (size_t)(nih * d)), *hw = malloc(sizeof(float) * (size_t)nih);
        float *kf = malloc(sizeof(float) * (size_t)(nv * d)), *ref = malloc(sizeof(float) * (size_t)nv),
              *got = malloc(sizeof(float) * (size_t)nv);
        uint8_t *keys = malloc((size_t)(nv * ik.bytes));
        void *iq = malloc((size_t)pdb_v4_iscore_query_bytes(nih, d));
        if (!q || !hw || !kf || !ref || !got || !keys || !iq) { fprintf(stderr, "bench_v4_cache: out of memory\n"); return 1; }
        for (int64_t h = 0; h < nih; h++) fp4_row(q + h * d, d);
        for (int64_t h = 0; h < nih; h++) hw[h] = normal() / sqrtf((float)nih);
        for (int64_t w = 0; w < nv; w++) {
            fp4_row(kf + w * d, d);
            if (pdb_v4_row_encode(&ik, kf + w * d, keys + w * ik.bytes)) { fprintf(stderr, "bench_v4_cache: row not exact\n"); return 1; }
        }
        float sscale = (float)(1.0 / sqrt((double)d));
        double tc[4][64], tw[4][64];
        int64_t i0, f0, i1, f1;
        pdb_v4_iscore_counts(&i0, &f0);
        for (int r = 0; r < rounds && r < 64; r++)
            for (int k = 0; k < 4; k++) {
                static const int kern[4] = {-1, PDB_V4_ISCORE_VNNI, PDB_V4_ISCORE_F32, PDB_V4_ISCORE_SCALAR};
                double c0 = cpu_s(), w0 = wall_s();
                if (k == 0) pdb_v4_index_scores(q, hw, nih, d, kf, 0, nv, sscale, ref);
                else {
                    int old = pdb_v4_iscore_kernel(kern[k]);
                    pdb_v4_iscore_prepare(&ik, q, hw, nih, sscale, iq);
                    pdb_v4_iscore(iq, keys, 0, nv, got);
                    pdb_v4_iscore_kernel(old);
                }
                tc[k][r] = cpu_s() - c0;
                tw[k][r] = wall_s() - w0;
                if (k && memcmp(got, ref, sizeof(float) * (size_t)nv)) {
                    fprintf(stderr, "bench_v4_cache: scores differ from before's (ctx %lld, path %d)\n", (long long)ctx, k);
                    return 1;
                }
            }
        pdb_v4_iscore_counts(&i1, &f1);
        int n = rounds < 64 ? rounds : 64;
        double med[4];
        const char *names[4] = {"before", "fp4-vnni", "fp4-f32tile", "fp4-scalar"};
        for (int k = 0; k < 4; k++) {
            double c[64], w[64];
            memcpy(c, tc[k], sizeof(double) * (size_t)n);
            memcpy(w, tw[k], sizeof(double) * (size_t)n);
            qsort(c, (size_t)n, sizeof(double), cmp_d);
            qsort(w, (size_t)n, sizeof(double), cmp_d);
            med[k] = c[n / 2];
            printf("%-8lld %-7lld %-10s %10.3f %10.3f %10.3f %10.2f %12.1f\n", (long long)ctx, (long long)nv, names[k], 1e3 * c[n / 2],
                   1e3 * c[0], 1e3 * w[n / 2], med[0] / med[k], 1e3 * c[n / 2] * (double)n_csa);
        }
        printf("  scores bit-identical to before's in every round; keys by the integer kernels %lld, by the f32 path %lld; "
               "key bytes read: f32 %.1f MB, fp4 %.1f MB\n",
               (long long)(i1 - i0), (long long)(f1 - f0), 4.0 * (double)(nv * d) / 1e6, (double)(nv * ik.bytes) / 1e6);
        free(q), free(hw), free(kf), free(ref), free(got), free(keys), free(iq);
    }
    return 0;
}
