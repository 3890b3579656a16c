/* bench_decode: decode tokens/s of the decode engine and the fraction of the memory-bandwidth
 * roofline, side by side in one run. The roofline is (bytes of weights touched per token) /
 * (bandwidth measured by a read probe in the same process); touched bytes count every matrix a
 * decode step reads: attention projections, router, shared experts, the routed experts actually
 * selected, lm_head and one embedding row. It also counts the matmul pool dispatches per token
 * (pdb_qmat_pool_runs). Usage: bench_decode DEC_DIR [tokens] [threads]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "pdb_dec_model.h"
#include "pdb_math.h"
#include "pdb_pool.h"
#include "pdb_v2_ops.h"

static double cpu_s(void) { /* user + system CPU time of the process, all threads */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { const float *p; size_t n; double *sums; } probe_ctx;

static void probe_task(void *vc, int64_t task, int thread) {
    probe_ctx *c = vc;
    size_t per = c->n / 64, a = (size_t)task * per;
    double s = 0;
    for (size_t i = a; i < a + per; i += 16) s += c->p[i] + c->p[i + 8]; /* one load per 32-byte half line */
    c->sums[task] = s;
}

/* Read bandwidth of this machine with the same thread pool (GB/s, best of 5). */
static double bandwidth_probe(pdb_pool *pool) {
    size_t n = (size_t)1 << 28; /* 1 GiB of floats */
    float *buf = malloc(n * sizeof(float));
    double sums[64], best = 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    probe_ctx c = {buf, n, sums};
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        pdb_pool_run(pool, 64, probe_task, &c);
        double gbs = n * sizeof(float) / (now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}

static uint64_t qbytes(const pdb_qmat *q) {
    if (!q->data) return 0;
    uint64_t n = (uint64_t)(q->rows * q->cols);
    switch (q->fmt) {
    case PDB_QF_F32: return n * 4;
    case PDB_QF_BF16: return n * 2;
    case PDB_QF_MXFP8: return n + n / 32;
    default: return n / 2 + n / 32;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_decode DEC_DIR [tokens] [threads]\n"); return 2; }
    int ntok = argc > 2 ? atoi(argv[2]) : 32, threads = argc > 3 ? atoi(argv[3]) : 0;
    pdb_pool *pool;
    pdb_dec_model *m;
    if (pdb_pool_create(threads, &pool) || pdb_dec_model_open(argv[1], pool, &m)) {
        fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
        return 1;
    }
    const pdb_config *c = pdb_dec_model_config(m);
    const pdb_v2_qweights *w = pdb_dec_model_weights(m);
    /* bytes touched per decode token */
    uint64_t fixed = qbytes(&w->lm_head) + (uint64_t)c->hidden_size * 2, expert = 0;
    for (int64_t l = 0; l < c->num_layers; l++) {
        const pdb_v2_qlayer *L = &w->layers[l];
        fixed += qbytes(&L->q_proj) + qbytes(&L->q_a) + qbytes(&L->q_b) + qbytes(&L->kv_a) + qbytes(&L->o_proj);
        fixed += (uint64_t)(c->num_heads * c->kv_lora_rank * (c->qk_nope_head_dim + c->v_head_dim)) * 4; /* f32 W_UK^T, W_UV */
        if (L->is_moe) {
            fixed += qbytes(&L->router) + qbytes(&L->sg) + qbytes(&L->su) + qbytes(&L->sd);
            expert += (qbytes(&L->eg[0]) + qbytes(&L->eu[0]) + qbytes(&L->ed[0])) * (uint64_t)c->num_experts_per_tok;
        } else {
            fixed += qbytes(&L->gate) + qbytes(&L->up) + qbytes(&L->down);
        }
    }
    uint64_t per_tok = fixed + expert;
    double bw = bandwidth_probe(pool);
    pdb_dec_seq s;
    if (pdb_dec_seq_init(&s, m, 64 + ntok + 4)) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (int32_t)((i * 7919) % c->vocab_size);
    pdb_dec_seg sg = {&s, ids, 64, logits};
    pdb_dec_forward(m, &sg, 1);
    int32_t tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
    for (int i = 0; i < 2; i++) { /* warm-up */
        sg = (pdb_dec_seg){&s, &tok, 1, logits};
        pdb_dec_forward(m, &sg, 1);
        tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
    }
    uint64_t runs0 = pdb_qmat_pool_runs();
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 0; i < ntok; i++) {
        sg = (pdb_dec_seg){&s, &tok, 1, logits};
        if (pdb_dec_forward(m, &sg, 1)) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); return 1; }
        tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
    }
    uint64_t runs = pdb_qmat_pool_runs() - runs0;
    double dt = now_s() - t0, dc = cpu_s() - c0, tps = ntok / dt, eff = per_tok * tps / 1e9;
    printf("model %s (scheme %s): %lld layers, hidden %lld, %lld experts (top %lld)\n", argv[1], pdb_dec_model_scheme(m),
           (long long)c->num_layers, (long long)c->hidden_size, (long long)c->n_routed_experts, (long long)c->num_experts_per_tok);
    printf("threads %d, kernels %s\n", pdb_pool_threads(pool), pdb_qmat_isa_name(pdb_qmat_isa_detect()));
    printf("weights touched per token: %.1f MB (fixed %.1f MB + routed experts %.1f MB)\n", per_tok / 1e6, fixed / 1e6, expert / 1e6);
    printf("bandwidth probe: %.2f GB/s\n", bw);
    printf("decode: %d tokens in %.2f s = %.2f tok/s -> %.2f GB/s of weights = %.1f%% of the roofline (%.2f tok/s)\n", ntok, dt,
           tps, eff, 100 * eff / bw, bw * 1e9 / per_tok);
    /* matmul dispatches (pool runs started by pdb_qmat); the attention adds one run per layer */
    printf("dispatches: %.1f matmul pool runs per token (+ %lld attention runs)\n", (double)runs / ntok, (long long)c->num_layers);
    /* on a shared machine wall time includes time the threads were not running; CPU time does not
     * (but counts the pool's spinning): with one thread, ntok / cpu is the undisturbed speed */
    printf("cpu: %.2f s of CPU over the decode (%.0f%% of threads x wall), %.2f tok per CPU-second\n", dc,
           100 * dc / (dt * pdb_pool_threads(pool)), ntok / dc);
    free(logits);
    pdb_dec_seq_free(&s);
    pdb_dec_model_close(m);
    pdb_pool_destroy(pool);
    return 0;
}
