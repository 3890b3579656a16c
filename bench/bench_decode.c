/* bench_decode: decode tokens/s of the decode engine and the fraction of the memory-bandwidth
 * roofline, side by side in one run. The roofline is (bytes of weights touched per token) /
 * (bandwidth measured by a read probe in the same process); touched bytes count every matrix a
 * decode step reads: attention projections, router, shared experts, the routed experts actually
 * selected, lm_head and one embedding row. It also counts the pool dispatches per token
 * (pdb_pool_runs). Only deepseek_v2 decoders: another architecture's checkpoint is refused
 * (exit 1, naming its model_type).
 *
 * The decode runs in rounds, each after a probe: the median over rounds of (decode rate / the
 * probe just before it) is the paired figure; all steps over the best probe of the run is the
 * conservative one. Both are printed.
 *
 * Usage: bench_decode DEC_DIR [tokens] [threads] [--context N] [--rounds N] [--probe-mb N] [--attn tasks|stages|split]
 *                     [--ab tasks|stages|split] [--classes] [--phases] [--profile] [--daz] [--weights mmap|resident]
 *                     [--probe-pages huge|small] [--trace]
 * The probe runs on every online CPU (the machine's bandwidth) even when the decode uses fewer,
 * over a buffer in transparent huge pages by default; the output says how much of the probe
 * buffer and of the weights sit in huge pages.
 *   --context  prefill N tokens (default 64) before the timed decode steps
 *   --rounds   probes and shares of the steps, alternated (default 8)
 *   --probe-mb a smaller probe (smoke tests; the figure is then no memory roofline)
 *   --attn     force one of the three attention forms (default: by context length and threads, pdb_v2_ops.h)
 *   --ab FORM  odd steps take attention FORM, even steps --attn's (or auto), each step timed: the
 *              two forms compared step against step in one run, which a host whose speed moves
 *              by tens of percent within seconds cannot skew (the tokens are the same either way)
 *   --classes  also streams the decode step's matrices alone, grouped into the same dispatches,
 *              and reports GB/s per class (attention projections, dense MLP, shared experts,
 *              routed experts, lm_head) and the time of the step that is not matrix products
 *   --profile  samples the program counter of every running thread (SIGPROF, 1 ms of CPU)
 *              during the decode and prints the hottest functions (dladdr; static functions
 *              as executable offsets: resolve them with addr2line -f -e bench_decode)
 *   --phases   runs the same steps through the pdb_v2_ops calls of the decoder's forward with a
 *              clock around each, and the stages inside attention and FFN (pdb_v2_ops_opts.stage_s)
 *   --weights  the checkpoint mapped, or read into huge-page memory (the decoder's default, D18)
 *   --probe-pages  the probe buffer in 4 KB pages instead (to compare)
 *   --trace    times every thread in the last round's pool runs: how much of the threads' time in
 *              dispatches is work, waiting for the run to reach them, and waiting for the others
 *   --daz      a diagnosis only: decode with denormals-are-zero / flush-to-zero on every thread
 *              (changes results where denormals occur; tells what denormal assists cost) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#if defined(__linux__) /* the profiler reads the program counter from it (uc_pc) */
#include <ucontext.h>
#endif
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_dec_model.h"
#include "pdb_math.h"
#include "pdb_mem.h"
#include "pdb_pool.h"
#include "pdb_sys.h"
#include "pdb_v2_ops.h"

static double cpu_s(void) { /* user + system CPU time of the process, all threads */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* Bytes of the mappings overlapping [p, p + n) and how many of them sit in transparent huge pages
 * (/proc/self/smaps: Size and AnonHugePages, kB); -1 when smaps cannot be read. */
static double huge_share(const void *p, size_t n, double *mapped) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    double huge = 0;
    *mapped = 0;
    uintptr_t a = (uintptr_t)p, b = a + n;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = lo < b && hi > a;
        else if (in && sscanf(line, "Size: %lu kB", &kb) == 1) *mapped += kb * 1024.0;
        else if (in && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) huge += kb * 1024.0;
    }
    fclose(f);
    return huge;
}

typedef struct { const float *p; size_t n; double *sums; } probe_ctx;

static void probe_task(void *vc, int64_t task, int thread) {
    probe_ctx *c = vc;
    size_t per = c->n / 64, a = (size_t)task * per;
    double s = 0;
    for (size_t i = a; i < a + per; i += 16) s += c->p[i] + c->p[i + 8]; /* one load per 32-byte half line */
    c->sums[task] = s;
}

/* One load per 64-byte line, eight independent sums: nothing but the memory system limits it. */
static void probe_line_task(void *vc, int64_t task, int thread) {
    probe_ctx *c = vc;
    size_t per = c->n / 64, a = (size_t)task * per;
    float s[8] = {0};
    for (size_t i = a; i + 128 <= a + per; i += 128)
        for (int k = 0; k < 8; k++) s[k] += c->p[i + 16 * k];
    c->sums[task] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Read bandwidth of this machine with the same thread pool (GB/s, best of 5 per form): the
 * stronger of two read loops (one load per half line in one chain; one per line in eight). */
/* The read probe over buf [n floats]: best of `reps` passes of each loop form. */
static double bandwidth_probe(pdb_pool *pool, float *buf, size_t n, int reps, double *half_line, double *per_line) {
    double sums[64], best = 0;
    probe_ctx c = {buf, n, sums};
    for (int form = 0; form < 2; form++) {
        double b = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = pdb_clock_now();
            pdb_pool_run(pool, 64, form ? probe_line_task : probe_task, &c);
            double gbs = n * sizeof(float) / (pdb_clock_now() - t0) / 1e9;
            if (gbs > b) b = gbs;
        }
        *(form ? per_line : half_line) = b;
        if (b > best) best = b;
    }
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double s[64];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* --trace: where the threads' time goes in the traced runs (pdb_pool_trace records) */
static void trace_report(const double *rec, int64_t nrec, int n, int steps) {
    enum { NB = 3 };
    static const char *bname[NB] = {"under 20 us", "20-100 us", "over 100 us"};
    double wall[NB] = {0}, busy[NB] = {0}, start[NB] = {0}, end[NB] = {0}, cnt[NB] = {0}, last_start[NB] = {0}, spread[NB] = {0};
    for (int64_t k = 0; k < nrec; k++) {
        const double *r = rec + k * (2 + 2 * (int64_t)n);
        double d = r[1] - r[0], first_leave = r[1], last_leave = r[0], ls = 0;
        int b = d < 20e-6 ? 0 : d < 100e-6 ? 1 : 2;
        for (int i = 0; i < n; i++) {
            double en = r[2 + 2 * i], lv = r[3 + 2 * i];
            busy[b] += lv - en, start[b] += en - r[0], end[b] += r[1] - lv;
            ls = en - r[0] > ls ? en - r[0] : ls;
            first_leave = lv < first_leave ? lv : first_leave, last_leave = lv > last_leave ? lv : last_leave;
        }
        wall[b] += d, cnt[b]++, last_start[b] += ls, spread[b] += last_leave - first_leave;
    }
    printf("trace: %lld dispatches over %d steps; per step, by dispatch length (thread time = threads x wall):\n", (long long)nrec, steps);
    for (int b = 0; b < NB; b++) {
        if (!cnt[b]) continue;
        double tt = wall[b] * n;
        printf("  %-12s %6.1f runs %7.3f ms wall: threads busy %5.1f%%, waiting to start %5.1f%%, done and waiting %5.1f%%;"
               " mean last start %.1f us, mean finish spread %.1f us\n", bname[b], cnt[b] / steps, 1e3 * wall[b] / steps,
               100 * busy[b] / tt, 100 * start[b] / tt, 100 * end[b] / tt, 1e6 * last_start[b] / cnt[b], 1e6 * spread[b] / cnt[b]);
    }
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


/* ---- --daz: MXCSR is per thread, so every pool thread sets it (one task each: a task waits
 * until all have started, so no thread can take two) ---- */
typedef struct { atomic_int started; int n; } daz_ctx;

static void daz_task(void *vc, int64_t task, int thread) {
    daz_ctx *c = vc;
    (void)task, (void)thread;
#if defined(__x86_64__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* DAZ (bit 6) | FTZ (bit 15) */
#elif defined(__aarch64__)
    uint64_t fpcr; /* FPCR.FZ (bit 24): denormal inputs and results flushed to zero, DAZ + FTZ in one */
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ __volatile__("msr fpcr, %0" ::"r"(fpcr | (1ull << 24)));
#endif
    atomic_fetch_add(&c->started, 1);
    while (atomic_load(&c->started) < c->n) pdb_sys_cpu_relax();
}

/* ---- --profile: a SIGPROF program-counter sampler (no perf needed) ---- */
enum { PROF_MAX = 1 << 20 };
static uintptr_t prof_pc[PROF_MAX];
static atomic_int prof_n;

static uintptr_t uc_pc(void *uc) { /* the interrupted program counter (0 where unknown: no sample is attributed) */
#if defined(__linux__) && defined(__x86_64__)
    return (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__linux__) && defined(__aarch64__)
    return (uintptr_t)((ucontext_t *)uc)->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

static void prof_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)si;
    int i = atomic_fetch_add_explicit(&prof_n, 1, memory_order_relaxed);
    if (i < PROF_MAX) prof_pc[i] = uc_pc(uc);
}

static void prof_set(int on) {
    if (on) {
        struct sigaction sa = {0};
        sa.sa_sigaction = prof_handler;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigaction(SIGPROF, &sa, NULL);
    }
    struct itimerval it = {{0, on ? 1000 : 0}, {0, on ? 1000 : 0}};
    setitimer(ITIMER_PROF, &it, NULL);
}

typedef struct { char name[160]; int n; } prof_row;

static int prof_cmp(const void *a, const void *b) { return ((const prof_row *)b)->n - ((const prof_row *)a)->n; }

static void prof_report(void) {
    int n = atomic_load(&prof_n) < PROF_MAX ? atomic_load(&prof_n) : PROF_MAX, nr = 0;
    prof_row *rows = calloc((size_t)n + 1, sizeof *rows);
    for (int i = 0; i < n; i++) {
        Dl_info di;
        char name[160];
        if (dladdr((void *)prof_pc[i], &di) && di.dli_sname) snprintf(name, sizeof name, "%s", di.dli_sname);
        else if (dladdr((void *)prof_pc[i], &di) && di.dli_fname) /* a static function: its 256-byte page */
            snprintf(name, sizeof name, "%s+0x%lx", strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname,
                     (unsigned long)((prof_pc[i] - (uintptr_t)di.dli_fbase) & ~(uintptr_t)255));
        else snprintf(name, sizeof name, "?");
        int k = 0;
        while (k < nr && strcmp(rows[k].name, name)) k++;
        if (k == nr) snprintf(rows[nr++].name, sizeof rows[0].name, "%s", name);
        rows[k].n++;
    }
    qsort(rows, (size_t)nr, sizeof *rows, prof_cmp);
    printf("profile: %d samples (1 ms of CPU each, all threads)\n", n);
    for (int k = 0; k < nr && k < 40; k++) printf("  %5.1f%%  %s\n", 100.0 * rows[k].n / n, rows[k].name);
    free(rows);
}

/* ---- --classes: the step's matrix products alone, in its dispatch groups ---- */
enum { CL_ATTN, CL_DENSE, CL_SHARED, CL_ROUTED, CL_ROUTER, CL_HEAD, CL_N };
static const char *cl_name[CL_N] = {"attention projections", "dense MLP", "shared experts", "routed experts (top-k)",
                                    "router", "lm_head"};

typedef struct { double s[CL_N]; uint64_t bytes[CL_N]; } cl_stat;

static void cl_run(pdb_pool *pool, pdb_qmat_job *jobs, int n, int cls, float *rowbuf, cl_stat *st) {
    double t0 = pdb_clock_now();
    pdb_qmat_matmul_multi(pool, jobs, n, rowbuf);
    st->s[cls] += pdb_clock_now() - t0;
    for (int i = 0; i < n; i++) st->bytes[cls] += qbytes(jobs[i].w);
}

/* One decode step's products (x: one token's inputs, any values; y: scratch), per class. */
static void cl_step(pdb_pool *pool, const pdb_config *c, const pdb_v2_qweights *w, const float *x, float *y, float *rowbuf,
                    cl_stat *st) {
    int64_t H = c->hidden_size, K = c->num_experts_per_tok;
    pdb_qmat_job j[64];
    for (int64_t l = 0; l < c->num_layers; l++) {
        const pdb_v2_qlayer *L = &w->layers[l];
        int n = 0;
        j[n++] = (pdb_qmat_job){c->q_lora_rank ? &L->q_a : &L->q_proj, x, H, 1, y, 0};
        j[n++] = (pdb_qmat_job){&L->kv_a, x, H, 1, y + (1 << 16), 0};
        cl_run(pool, j, n, CL_ATTN, rowbuf, st);
        if (c->q_lora_rank) cl_run(pool, &(pdb_qmat_job){&L->q_b, x, L->q_b.cols, 1, y, 0}, 1, CL_ATTN, rowbuf, st);
        cl_run(pool, &(pdb_qmat_job){&L->o_proj, x, L->o_proj.cols, 1, y, 0}, 1, CL_ATTN, rowbuf, st);
        if (!L->is_moe) {
            j[0] = (pdb_qmat_job){&L->gate, x, H, 1, y, 0};
            j[1] = (pdb_qmat_job){&L->up, x, H, 1, y + (1 << 16), 0};
            cl_run(pool, j, 2, CL_DENSE, rowbuf, st);
            cl_run(pool, &(pdb_qmat_job){&L->down, x, L->down.cols, 1, y, 0}, 1, CL_DENSE, rowbuf, st);
            continue;
        }
        cl_run(pool, &(pdb_qmat_job){&L->router, x, H, 1, y, 0}, 1, CL_ROUTER, rowbuf, st);
        /* gate/up of K experts (spread over the layer's experts) and the shared ones in one
         * dispatch, as the decoder does; the two classes are timed apart (one dispatch each) */
        n = 0;
        for (int64_t k = 0; k < K; k++) {
            int64_t e = k * c->n_routed_experts / K;
            j[n] = (pdb_qmat_job){&L->eg[e], x, H, 1, y + n * (1 << 13), 0}; /* slot n's own output (n++ apart: */
            n++;                                                                /* reading n in the same expression */
            j[n] = (pdb_qmat_job){&L->eu[e], x, H, 1, y + n * (1 << 13), 0};  /* was unsequenced, clang warns) */
            n++;
        }
        cl_run(pool, j, n, CL_ROUTED, rowbuf, st);
        n = 0;
        for (int64_t k = 0; k < K; k++, n++) j[n] = (pdb_qmat_job){&L->ed[k * c->n_routed_experts / K], x, L->ed[0].cols, 1, y + n * (1 << 13), 0};
        cl_run(pool, j, n, CL_ROUTED, rowbuf, st);
        if (c->n_shared_experts > 0) {
            j[0] = (pdb_qmat_job){&L->sg, x, H, 1, y, 0};
            j[1] = (pdb_qmat_job){&L->su, x, H, 1, y + (1 << 16), 0};
            cl_run(pool, j, 2, CL_SHARED, rowbuf, st);
            cl_run(pool, &(pdb_qmat_job){&L->sd, x, L->sd.cols, 1, y, 0}, 1, CL_SHARED, rowbuf, st);
        }
    }
    cl_run(pool, &(pdb_qmat_job){&w->lm_head, x, H, 1, y, 0}, 1, CL_HEAD, rowbuf, st);
}

/* ---- --phases: one-token steps through the forward's own calls, timed per call ---- */
/* The steps start after the decode's prompt: its first `context` cache rows (computed by the
 * decoder's prefill in `s`) are copied in, so the stage times are at the decode's context length. */
static pdb_status phases(pdb_pool *pool, const pdb_config *c, const pdb_v2_qweights *w, int ntok, const pdb_dec_seq *s,
                         int context) {
    int64_t row = c->kv_lora_rank + c->qk_rope_head_dim, cap = context + ntok + 4, L = c->num_layers;
    float *lat = malloc(sizeof(float) * (size_t)(L * cap * row)), *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    pdb_v2_batch b;
    if (!lat || !logits || pdb_v2_batch_init(&b, w, pool, 1, cap)) return PDB_NOMEM;
    for (int64_t l = 0; l < L; l++) memcpy(lat + l * cap * row, s->lat + l * s->cap * row, sizeof(float) * (size_t)(context * row));
    enum { P_EMBED, P_NORM, P_ATTN, P_ATTN_MOE, P_FFN_DENSE, P_FFN_MOE, P_LOGITS, P_ARGMAX, P_N };
    static const char *nm[P_N] = {"embed", "attention norms", "attention (dense layers)", "attention (MoE layers)", "FFN (dense layers)",
                                  "FFN (MoE layers)", "final norm + lm_head", "argmax"};
    double t[P_N] = {0}, total = 0, st[PDB_V2_ST_N] = {0}, warm[PDB_V2_ST_N];
    int32_t tok = 1;
    for (int p = context - 1; p < context + ntok; p++) { /* a warm-up step at the prompt's last position, then ntok */
        int on = p >= context;
        w->opts->stage_s = on ? st : warm;
        double t0 = pdb_clock_now(), t1;
        b.cache[0] = (pdb_v2_rowcache){lat, cap * row, row, 0};
        b.pos[0] = p;
        pdb_v2_ops_embed(&b, 0, tok);
        t1 = pdb_clock_now(), t[P_EMBED] += on * (t1 - t0), t0 = t1;
        for (int64_t l = 0; l < L; l++) {
            int moe = w->layers[l].is_moe;
            pdb_v2_ops_attn_norm(&b, l);
            t1 = pdb_clock_now(), t[P_NORM] += on * (t1 - t0), t0 = t1;
            pdb_v2_ops_attention(&b, l);
            t1 = pdb_clock_now(), t[moe ? P_ATTN_MOE : P_ATTN] += on * (t1 - t0), t0 = t1;
            pdb_v2_ops_ffn(&b, l);
            t1 = pdb_clock_now(), t[moe ? P_FFN_MOE : P_FFN_DENSE] += on * (t1 - t0), t0 = t1;
        }
        pdb_v2_ops_logits(&b, 0, logits);
        t1 = pdb_clock_now(), t[P_LOGITS] += on * (t1 - t0), t0 = t1;
        tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
        t1 = pdb_clock_now(), t[P_ARGMAX] += on * (t1 - t0);
    }
    for (int k = 0; k < P_N; k++) total += t[k];
    printf("phases: %d one-token steps through pdb_v2_ops, %.3f ms per step\n", ntok, 1e3 * total / ntok);
    for (int k = 0; k < P_N; k++) printf("  %-26s %8.3f ms %5.1f%%\n", nm[k], 1e3 * t[k] / ntok, 100 * t[k] / total);
    w->opts->stage_s = NULL;
    printf("stages of attention and FFN, all layers (pdb_v2_ops_opts.stage_s):\n");
    for (int k = 0; k < PDB_V2_ST_N; k++) printf("  %-26s %8.3f ms %5.1f%%\n", pdb_v2_ops_stage_names[k], 1e3 * st[k] / ntok, 100 * st[k] / total);
    pdb_v2_batch_free(&b);
    free(lat), free(logits);
    return PDB_OK;
}

/* Fraction of e4m3 codes with a zero exponent field and nonzero mantissa (f32 denormals in the
 * kernels' first step), over every MXFP8 matrix of the model. */
static double subnormal_fraction(const pdb_config *c, const pdb_v2_qweights *w) {
    uint64_t sub = 0, all = 0;
    const pdb_qmat *q[16];
    for (int64_t l = 0; l <= c->num_layers; l++) {
        int n = 0;
        if (l == c->num_layers) q[n++] = &w->lm_head;
        else {
            const pdb_v2_qlayer *L = &w->layers[l];
            const pdb_qmat *all_q[] = {&L->q_proj, &L->q_a, &L->q_b, &L->kv_a, &L->o_proj, &L->gate, &L->up, &L->down, &L->sg, &L->su, &L->sd};
            for (size_t i = 0; i < sizeof all_q / sizeof *all_q; i++) q[n++] = all_q[i];
        }
        for (int i = 0; i < n; i++) {
            if (!q[i]->data || q[i]->fmt != PDB_QF_MXFP8) continue;
            const uint8_t *p = q[i]->data;
            uint64_t m = (uint64_t)(q[i]->rows * q[i]->cols);
            for (uint64_t k = 0; k < m; k++) sub += (p[k] & 0x78) == 0 && (p[k] & 7) != 0;
            all += m;
        }
    }
    return all ? (double)sub / all : 0;
}

/* attention forms by name (--attn, --ab): -1 for an unknown one */
static int attn_form_arg(const char *a) {
    return !strcmp(a, "tasks") ? PDB_V2_ATTN_TASKS : !strcmp(a, "stages") ? PDB_V2_ATTN_STAGES : !strcmp(a, "split") ? PDB_V2_ATTN_SPLIT : -1;
}

static const char *attn_form_name(int f) {
    return f == PDB_V2_ATTN_TASKS ? "tasks (forced)" : f == PDB_V2_ATTN_STAGES ? "stages (forced)" : f == PDB_V2_ATTN_SPLIT ? "split tasks (forced)" : "auto";
}

int main(int argc, char **argv) {
    int classes = 0, profile = 0, daz = 0, do_phases = 0, npos = 0, context = 64, rounds = 8;
    int st_flags = PDB_DEC_WEIGHTS_DEFAULT, probe_huge = 1, trace = 0, ab = -1, attn = PDB_V2_ATTN_AUTO;
    long probe_mb = 0;
    const char *pos[3] = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--classes")) classes = 1;
        else if (!strcmp(argv[i], "--profile")) profile = 1;
        else if (!strcmp(argv[i], "--daz")) daz = 1;
        else if (!strcmp(argv[i], "--trace")) trace = 1;
        else if (!strcmp(argv[i], "--phases")) do_phases = 1;
        else if (!strcmp(argv[i], "--context") && i + 1 < argc) context = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--probe-mb") && i + 1 < argc) {
            probe_mb = atol(argv[++i]);
            if (probe_mb < 1) npos = -9;
        }
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            const char *a = argv[++i];
            st_flags = !strcmp(a, "resident") ? PDB_ST_RESIDENT : !strcmp(a, "mmap") ? 0 : -1;
            if (st_flags < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--probe-pages") && i + 1 < argc) {
            const char *a = argv[++i];
            probe_huge = !strcmp(a, "huge") ? 1 : !strcmp(a, "small") ? 0 : -1;
            if (probe_huge < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--attn") && i + 1 < argc) {
            const char *a = argv[++i];
            attn = attn_form_arg(a);
            if (attn < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--ab") && i + 1 < argc) {
            ab = attn_form_arg(argv[++i]);
            if (ab < 0) npos = -9;
        }
        else if (argv[i][0] != '-' && npos < 3) pos[npos++] = argv[i];
        else npos = -9;
    }
    int help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (help || npos < 1 || context < 1 || rounds < 1 || rounds > 64) {
        fprintf(help ? stdout : stderr, "usage: bench_decode DEC_DIR [tokens] [threads] [--context N] [--rounds N] [--probe-mb N] [--attn tasks|stages|split] [--ab tasks|stages|split]"
                        " [--classes] [--phases] [--profile] [--daz] [--weights mmap|resident] [--probe-pages huge|small] [--trace]\n"
                        "  --context N: prefill N tokens before the timed steps (default 64)\n"
                        "  --rounds N: alternate N probes and N shares of the decode steps (default 8, at most 64)\n"
                        "  --probe-mb N: probe N MB instead of 8x the last-level cache (smoke tests; not a memory roofline)\n"
                        "  --attn: force one attention form (default: chosen by context length and threads, pdb_v2_ops.h)\n"
                        "  --ab FORM: odd steps take attention FORM, even ones --attn's (or auto): both timed step by step, same tokens\n"
                        "  --weights: mmap the checkpoint, or read it into huge-page memory (default: the decoder's)\n"
                        "  --probe-pages: the probe buffer in transparent huge pages (default) or in 4 KB pages\n"
                        "  --trace: time every thread in the last round's dispatches (start, work, end)\n"
                        "  --classes: the step's matrix products alone, per class; --phases: a stage clock;\n"
                        "  --profile: sample the program counter of every thread; --daz: decode with denormals flushed\n");
        return help ? 0 : 2;
    }
    int ntok = pos[1] ? atoi(pos[1]) : 32, threads = pos[2] ? atoi(pos[2]) : 0;
    pdb_pool *pool;
    pdb_dec_model *m;
    if (pdb_pool_create(threads, &pool) || pdb_dec_model_open_flags(pos[0], pool, st_flags, &m)) {
        fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
        return 1;
    }
    const pdb_config *c = pdb_dec_model_config(m);
    const pdb_v2_qweights *w = pdb_dec_model_weights(m, "deepseek_v2");
    if (!w) { /* the bytes a step touches are counted from V2's weights: no other family is measured (yet) */
        fprintf(stderr, "bench_decode: %s is a %s checkpoint; this benchmark measures deepseek_v2 decoders only\n", pos[0],
                c->model_type);
        pdb_dec_model_close(m);
        pdb_pool_destroy(pool);
        return 1;
    }
    w->opts->attn_path = attn;
    /* bytes touched per decode token */
    uint64_t fixed = qbytes(&w->lm_head) + (uint64_t)c->hidden_size * 2, expert = 0;
    for (int64_t l = 0; l < c->num_layers; l++) {
        const pdb_v2_qlayer *L = &w->layers[l];
        fixed += qbytes(&L->q_proj) + qbytes(&L->q_a) + qbytes(&L->q_b) + qbytes(&L->kv_a) + qbytes(&L->o_proj);
        /* attention: W_UK^T (bf16 or f32) and the W_UV rows of kv_b */
        fixed += qbytes(&L->uk_t) + qbytes(&L->kv_b) / (uint64_t)(c->qk_nope_head_dim + c->v_head_dim) * (uint64_t)c->v_head_dim;
        if (L->is_moe) {
            fixed += qbytes(&L->router) + qbytes(&L->sg) + qbytes(&L->su) + qbytes(&L->sd);
            expert += (qbytes(&L->eg[0]) + qbytes(&L->eu[0]) + qbytes(&L->ed[0])) * (uint64_t)c->num_experts_per_tok;
        } else {
            fixed += qbytes(&L->gate) + qbytes(&L->up) + qbytes(&L->down);
        }
    }
    uint64_t per_tok = fixed + expert;
    /* the probe reads at least 8x the last-level cache (1 GiB at least), so that it measures memory */
    long l3 = pdb_sys_l3_bytes();
    size_t probe_bytes = l3 > 0 && (size_t)l3 * 8 > ((size_t)1 << 30) ? (size_t)l3 * 8 : (size_t)1 << 30;
    if (probe_mb) {
        probe_bytes = (size_t)probe_mb << 20 < (size_t)1 << 19 ? (size_t)1 << 19 : (size_t)probe_mb << 20;
        printf("probe size set to %ld MB: with less than 8x the last-level cache it is no memory roofline\n", probe_mb);
    }
    size_t probe_n = probe_bytes / sizeof(float) / 8192 * 8192; /* 64 tasks of whole 128-float steps */
    float *probe_buf = pdb_mem_map(probe_n * sizeof(float), probe_huge);
    /* the probe measures the machine: every online CPU, whatever the decode's thread count */
    pdb_pool *probe_pool = pool;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu > pdb_pool_threads(pool) && pdb_pool_create((int)ncpu, &probe_pool)) probe_pool = pool;
    if (!probe_buf) { fprintf(stderr, "bench_decode: out of memory for the probe\n"); return 1; }
    for (size_t i = 0; i < probe_n; i++) probe_buf[i] = (float)(i & 7);
    double bw_half = 0, bw_line = 0, bw = 0;
    pdb_dec_seq s;
    if (pdb_dec_seq_init(&s, m, context + ntok + 4)) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)context);
    if (!logits || !ids) { fprintf(stderr, "bench_decode: out of memory\n"); return 1; }
    for (int i = 0; i < context; i++) ids[i] = (int32_t)(((int64_t)i * 7919) % c->vocab_size);
    pdb_dec_seg sg = {&s, ids, context, logits};
    pdb_dec_forward(m, &sg, 1);
    int32_t tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
    for (int i = 0; i < 2; i++) { /* warm-up */
        sg = (pdb_dec_seg){&s, &tok, 1, logits};
        pdb_dec_forward(m, &sg, 1);
        tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
    }
    if (daz) {
        daz_ctx dc = {0, pdb_pool_threads(pool)};
        pdb_pool_run(pool, dc.n, daz_task, &dc);
    }
    /* rounds: a probe, then a share of the steps; the fraction of each round pairs a decode rate with
     * the bandwidth measured just before it (a shared machine's bandwidth moves by tens of percent
     * within seconds); the totals pair all steps with the best probe of the run (conservative) */
    if (rounds > ntok) rounds = ntok;
    if (ab >= 0 && rounds > ntok / 2) rounds = ntok / 2 > 0 ? ntok / 2 : 1; /* each round times both forms */
    int attn_base = w->opts->attn_path;
    double ab_sum[2] = {0, 0}, r_ab[64];
    int64_t ab_n[2] = {0, 0};
    double dt = 0, dc = 0, r_frac[64], r_probe[64], r_tps[64], *trace_buf = NULL;
    int64_t trace_cap = 0, trace_n = 0;
    int trace_steps = 0;
    uint64_t runs = 0;
    for (int r = 0, done = 0; r < rounds; r++) {
        double h = 0, l = 0, p = bandwidth_probe(probe_pool, probe_buf, probe_n, r ? 3 : 5, &h, &l);
        bw = p > bw ? p : bw, bw_half = h > bw_half ? h : bw_half, bw_line = l > bw_line ? l : bw_line;
        int n = (int)((int64_t)ntok * (r + 1) / rounds) - done;
        if (profile) prof_set(1);
        if (trace && r == rounds - 1) {
            trace_cap = (int64_t)n * 4096;
            trace_buf = malloc(sizeof(double) * (size_t)(trace_cap * (2 + 2 * pdb_pool_threads(pool))));
            if (trace_buf) pdb_pool_trace(pool, trace_buf, trace_cap, &trace_n), trace_steps = n;
        }
        uint64_t runs0 = pdb_pool_runs(pool);
        double t0 = pdb_clock_now(), c0 = cpu_s();
        double ab_t[2] = {0, 0};
        for (int i = 0; i < n; i++) {
            double ts = ab >= 0 ? pdb_clock_now() : 0;
            if (ab >= 0) w->opts->attn_path = i & 1 ? ab : attn_base;
            sg = (pdb_dec_seg){&s, &tok, 1, logits};
            if (pdb_dec_forward(m, &sg, 1)) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); return 1; }
            tok = (int32_t)pdb_math_argmax(logits, c->vocab_size);
            if (ab >= 0) ab_t[i & 1] += pdb_clock_now() - ts;
        }
        if (ab >= 0) ab_sum[0] += ab_t[0], ab_sum[1] += ab_t[1], ab_n[0] += (n + 1) / 2, ab_n[1] += n / 2,
                     r_ab[r] = (n / 2) / ab_t[1] / (((n + 1) / 2) / ab_t[0]);
        double d = pdb_clock_now() - t0;
        if (profile) prof_set(0);
        pdb_pool_trace(pool, NULL, 0, NULL);
        dt += d, dc += cpu_s() - c0, runs += pdb_pool_runs(pool) - runs0, done += n;
        r_probe[r] = p, r_tps[r] = n / d, r_frac[r] = per_tok * r_tps[r] / 1e9 / p;
    }
    w->opts->attn_path = attn_base;
    int probe_threads = pdb_pool_threads(probe_pool);
    if (probe_pool != pool) pdb_pool_destroy(probe_pool);
    double probe_map = 0, probe_hp = huge_share(probe_buf, probe_n * sizeof(float), &probe_map);
    double w_map = 0, w_hp = huge_share(w->lm_head.data, 1, &w_map);
    pdb_mem_unmap(probe_buf, probe_n * sizeof(float));
    double tps = ntok / dt, eff = per_tok * tps / 1e9;
    printf("model %s (scheme %s): %lld layers, hidden %lld, %lld experts (top %lld)\n", pos[0], pdb_dec_model_scheme(m),
           (long long)c->num_layers, (long long)c->hidden_size, (long long)c->n_routed_experts, (long long)c->num_experts_per_tok);
    printf("threads %d, kernels %s, context %d + %d steps, attention %s\n", pdb_pool_threads(pool),
           pdb_qmat_isa_name(pdb_qmat_isa_detect()), context, ntok,
           attn_form_name(w->opts->attn_path));
    printf("weights touched per token: %.1f MB (fixed %.1f MB + routed experts %.1f MB)\n", per_tok / 1e6, fixed / 1e6, expert / 1e6);
    printf("last-level cache: %.0f MB; weights touched per token = %.1fx that (a roofline of memory needs several x)\n", l3 / 1e6,
           l3 > 0 ? per_tok / (double)l3 : 0.0);
    printf("bandwidth probe (%d threads): best %.2f GB/s over %.2f GB (one load per half line, one chain: %.2f; one per line, eight chains: %.2f)\n", probe_threads, bw,
           probe_bytes / 1e9, bw_half, bw_line);
    printf("pages: weights %s, %.0f of %.0f MB in huge pages; probe %.0f of %.0f MB in huge pages (asked: %s)\n",
           st_flags & PDB_ST_RESIDENT ? "resident" : "mmap'd", w_hp / 1e6, w_map / 1e6, probe_hp / 1e6, probe_map / 1e6,
           probe_huge ? "huge" : "small");
    printf("e4m3 subnormal codes: %.4f%% of the MXFP8 weights%s\n", 100 * subnormal_fraction(c, w), daz ? "; decode ran with DAZ/FTZ" : "");
    printf("decode: %d tokens in %.2f s = %.2f tok/s -> %.2f GB/s of weights = %.1f%% of the roofline (%.2f tok/s)\n", ntok, dt,
           tps, eff, 100 * eff / bw, bw * 1e9 / per_tok);
    double fmin = r_frac[0], fmax = r_frac[0];
    for (int r = 1; r < rounds; r++) fmin = r_frac[r] < fmin ? r_frac[r] : fmin, fmax = r_frac[r] > fmax ? r_frac[r] : fmax;
    printf("paired rounds: %d x (probe, %d steps): fraction of the roofline per round median %.1f%% (min %.1f%%, max %.1f%%);"
           " probe median %.2f GB/s, decode median %.2f tok/s\n", rounds, ntok / rounds, 100 * median(r_frac, rounds), 100 * fmin,
           100 * fmax, median(r_probe, rounds), median(r_tps, rounds));
    if (ab >= 0 && ab_n[1] > 0) {
        double amin = r_ab[0], amax = r_ab[0];
        for (int r = 1; r < rounds; r++) amin = r_ab[r] < amin ? r_ab[r] : amin, amax = r_ab[r] > amax ? r_ab[r] : amax;
        printf("a/b: attention %s on odd steps %.2f tok/s, %s on even steps %.2f tok/s (%lld and %lld steps); per round"
               " odd/even speed median %.3f (min %.3f, max %.3f)\n", attn_form_name(ab), ab_n[1] / ab_sum[1],
               attn_form_name(attn_base), ab_n[0] / ab_sum[0], (long long)ab_n[1], (long long)ab_n[0], median(r_ab, rounds), amin, amax);
    }
    printf("dispatches: %.1f pool runs per token\n", (double)runs / ntok);
    /* on a shared machine wall time includes time the threads were not running; CPU time does not
     * (but counts the pool's spinning): with one thread, ntok / cpu is the undisturbed speed */
    printf("cpu: %.2f s of CPU over the decode (%.0f%% of threads x wall), %.2f tok per CPU-second\n", dc,
           100 * dc / (dt * pdb_pool_threads(pool)), ntok / dc);
    if (profile) prof_report();
    if (trace_buf) trace_report(trace_buf, trace_n < trace_cap ? trace_n : trace_cap, pdb_pool_threads(pool), trace_steps);
    free(trace_buf);
    if (do_phases && phases(pool, c, w, ntok, &s, context)) { fprintf(stderr, "bench_decode: out of memory for --phases\n"); return 1; }
    if (classes) {
        float *x = malloc(sizeof(float) << 16), *y = malloc(sizeof(float) << 20), *rowbuf;
        size_t rb = (size_t)pdb_pool_threads(pool) * 4 * (1 << 16) * sizeof(float);
        rowbuf = malloc(rb);
        for (int i = 0; i < 1 << 16; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        cl_stat st = {0}, warm = {0};
        cl_step(pool, c, w, x, y, rowbuf, &warm);
        double t1 = pdb_clock_now();
        for (int i = 0; i < ntok; i++) cl_step(pool, c, w, x, y, rowbuf, &st);
        double step = (pdb_clock_now() - t1) / ntok, prod = 0;
        uint64_t bytes = 0;
        printf("classes: the step's matrix products alone (%d steps, same dispatch groups, x arbitrary)\n", ntok);
        for (int k = 0; k < CL_N; k++) {
            if (!st.bytes[k]) continue;
            prod += st.s[k] / ntok;
            bytes += st.bytes[k] / ntok;
            printf("  %-24s %7.1f MB %7.3f ms %7.2f GB/s = %5.1f%% of the probe\n", cl_name[k], st.bytes[k] / ntok / 1e6, 1e3 * st.s[k] / ntok,
                   st.bytes[k] / st.s[k] / 1e9, 100 * st.bytes[k] / st.s[k] / 1e9 / bw);
        }
        printf("  products: %.3f ms per step, %.2f GB/s = %.1f%% of the probe; decode step %.3f ms: %.3f ms (%.1f%%) is not these products\n",
               1e3 * prod, bytes / prod / 1e9, 100 * bytes / prod / 1e9 / bw, 1e3 / tps, 1e3 / tps - 1e3 * step,
               100 * (1 / tps - step) * tps);
        free(x), free(y), free(rowbuf);
    }
    free(logits);
    free(ids);
    pdb_dec_seq_free(&s);
    pdb_dec_model_close(m);
    pdb_pool_destroy(pool);
    return 0;
}
