/* bench_decode: decode tokens/s of the decode engine and the fraction of the memory-bandwidth
 * roofline, side by side in one run. The roofline is (bytes of weights touched per token) /
 * (bandwidth measured by a read probe in the same process); touched bytes count every matrix a
 * decode step reads: attention projections, router, shared experts, the routed experts actually
 * selected, lm_head and one embedding row. It also counts the pool dispatches per token
 * (pdb_pool_runs). deepseek_v2 decoders, and deepseek_v4 ones in the V4 mode below; another
 * architecture's checkpoint is refused (exit 1, naming its model_type), as is an option of the
 * other mode (exit 2).
 *
 * V4 mode (a deepseek_v4 decoder checkpoint): through the generic decoder API only
 * (pdb_dec_model_*, pdb_dec_forward, the sequences' block copies) and the config, so it measures
 * whatever the V4 engine computes on. Bytes per token are counted from the checkpoint's tensors
 * as stored (an own read-only mapping of the same files): each layer's non-expert tensors, k of
 * its E routed experts (every token picks k distinct experts per layer, so for one sequence this
 * is exact, not an expectation), the shared expert, the head, an embedding row; plus the cache rows
 * the token reads, from the store layout's pools (window rows, compressed entries attended: CSA
 * top-k, HCA all; indexer keys scored: all visible). Decode at --context, then at each --ctx
 * (filled by mounting the decoder's own blocks with put_block, or by its prefill), paired with
 * probes as above; batches of --batch sequences per forward with every logit compared bit for bit
 * to the sequence alone (exit 3 and the first differing sequence/step on a difference); the
 * decoder's own prefill rate (--prefill). The decoder API has no stage clock, so steps are timed
 * whole; --profile samples where the CPU time goes, by function.
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

static int cmp_uptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Function names of offsets off[n] into this executable, by one run of binutils' addr2line (the
 * static functions dladdr cannot name); names[i] is left as it is where addr2line is missing or
 * answers "??". */
static void addr2line_names(const uintptr_t *off, int n, char (*names)[160]) {
    char path[] = "/tmp/bench_decode_pcXXXXXX", exe[4096], cmd[8400], fn[512], loc[2048];
    int fd = n > 0 ? mkstemp(path) : -1;
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) { close(fd); unlink(path); return; }
    snprintf(exe, sizeof exe, "/proc/%ld/exe", (long)getpid()); /* this executable even if rebuilt since */
    /* -i: an inlined kernel (an intrinsic, a helper) is charged to the function it was inlined
     * into, the last of the inline chain; each address is followed by the sentinel 0, which
     * answers "??" and so ends that address's chain */
    for (int i = 0; i < n; i++) fprintf(f, "0x%lx\n0x0\n", (unsigned long)off[i]);
    fclose(f);
    snprintf(cmd, sizeof cmd, "addr2line -f -i -e '%s' < '%s' 2>/dev/null", exe, path);
    FILE *p = popen(cmd, "r");
    for (int i = 0; p && i < n; i++) {
        char last[512] = "";
        while (fgets(fn, sizeof fn, p) && fgets(loc, sizeof loc, p)) {
            fn[strcspn(fn, "\n")] = 0;
            if (!strcmp(fn, "??")) break;
            snprintf(last, sizeof last, "%s", fn);
        }
        if (last[0]) snprintf(names[i], sizeof names[i], "%.159s", last);
    }
    if (p) pclose(p);
    unlink(path);
}

/* The samples since the last prof_clear, by function (exported ones by dladdr, this executable's
 * static ones by addr2line; otherwise the library and the 256-byte page), the `top` hottest. */
static void prof_report(int top) {
    int n = atomic_load(&prof_n) < PROF_MAX ? atomic_load(&prof_n) : PROF_MAX, nu = 0, nr = 0, ne = 0;
    uintptr_t *pc = malloc(sizeof(uintptr_t) * (size_t)(n + 1)), *eoff = calloc((size_t)n + 1, sizeof(uintptr_t));
    int *cnt = calloc((size_t)n + 1, sizeof(int)), *eidx = malloc(sizeof(int) * (size_t)(n + 1));
    char (*names)[160] = calloc((size_t)n + 1, sizeof *names), (*enames)[160] = calloc((size_t)n + 1, sizeof *enames);
    prof_row *rows = calloc((size_t)n + 1, sizeof *rows);
    if (!pc || !eoff || !cnt || !eidx || !names || !enames || !rows) {
        printf("profile: out of memory for the report\n");
        goto done;
    }
    memcpy(pc, prof_pc, sizeof(uintptr_t) * (size_t)n);
    qsort(pc, (size_t)n, sizeof *pc, cmp_uptr);
    for (int i = 0; i < n; i++) { /* unique program counters and their counts */
        if (!nu || pc[nu - 1] != pc[i]) pc[nu++] = pc[i];
        cnt[nu - 1]++;
    }
    Dl_info self;
    void *self_base = dladdr((void *)(uintptr_t)prof_handler, &self) ? self.dli_fbase : NULL;
    for (int i = 0; i < nu; i++) {
        Dl_info di;
        if (dladdr((void *)pc[i], &di) && di.dli_sname) snprintf(names[i], sizeof names[i], "%s", di.dli_sname);
        else if (dladdr((void *)pc[i], &di) && di.dli_fname) {
            snprintf(names[i], sizeof names[i], "%s+0x%lx", strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname,
                     (unsigned long)((pc[i] - (uintptr_t)di.dli_fbase) & ~(uintptr_t)255));
            if (di.dli_fbase == self_base) eoff[ne] = pc[i] - (uintptr_t)di.dli_fbase, eidx[ne++] = i;
        } else snprintf(names[i], sizeof names[i], "?");
    }
    for (int j = 0; j < ne; j++) memcpy(enames[j], names[eidx[j]], sizeof enames[j]);
    addr2line_names(eoff, ne, enames);
    for (int j = 0; j < ne; j++) memcpy(names[eidx[j]], enames[j], sizeof enames[j]);
    for (int i = 0; i < nu; i++) {
        int k = 0;
        while (k < nr && strcmp(rows[k].name, names[i])) k++;
        if (k == nr) snprintf(rows[nr++].name, sizeof rows[0].name, "%s", names[i]);
        rows[k].n += cnt[i];
    }
    qsort(rows, (size_t)nr, sizeof *rows, prof_cmp);
    printf("profile: %d samples (1 ms of CPU each, all threads)\n", n);
    for (int k = 0; k < nr && k < top; k++) printf("  %5.1f%%  %s\n", 100.0 * rows[k].n / (n ? n : 1), rows[k].name);
done:
    free(pc), free(eoff), free(cnt), free(eidx), free(names), free(enames), free(rows);
}

static void prof_clear(void) { atomic_store(&prof_n, 0); }

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

/* ======================= V4 mode (deepseek_v4 decoders) ===================================
 * Only the generic decoder API (pdb_dec_model_*, pdb_dec_forward, the sequences' block copies)
 * and the config are used; bytes are counted from the checkpoint's tensors as stored (their
 * names, dtypes and sizes) and from the cache's store layout, never from the engine's structs. */

/* Bytes one decode token reads from the weights, in their stored formats, and the same weights
 * as f32 copies (4 bytes per weight: what an engine that widens every tensor reads). */
typedef struct v4_wbytes {
    double attn;   /* per layer, everything but the experts: attention, compressors, indexer, norms, hc, router */
    double shared; /* shared experts */
    double routed; /* num_experts_per_tok of each layer's routed experts (k / E of them) */
    double head;   /* head (lm_head) */
    double other;  /* final norm, hc_head, one embedding row, one tid2eid row per hash layer */
    double f32;    /* all of the above as f32 copies */
} v4_wbytes;

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Layer index of a tensor name (".layers.N." or a leading "layers.N."), -1 for a global one. */
static int64_t name_layer(const char *name) {
    const char *p = strstr(name, "layers.");
    if (!p || (p != name && p[-1] != '.')) return -1;
    char *e;
    long long v = strtoll(p + 7, &e, 10);
    return e != p + 7 && *e == '.' ? v : -1;
}

/* Whether a tensor is a scale companion (ours "_mx_scale", DeepSeek's "_scale_inv" / ".scale"). */
static int is_scale(const char *name) { return ends_with(name, "_mx_scale") || ends_with(name, "_scale_inv") || ends_with(name, ".scale"); }

/* Weights as f32: scale companions add nothing; a packed FP4 tensor (U8/I8 with a scale companion)
 * holds two weights per byte; integer tables stay as they are. */
static double f32_bytes(const pdb_st *st, const pdb_tensor_view *v) {
    if (is_scale(v->name)) return 0;
    if (v->dtype == PDB_DT_I32 || v->dtype == PDB_DT_I64) return (double)v->nbytes;
    const pdb_tensor_view *q = NULL, *sc = NULL;
    int fp4 = 0;
    if ((v->dtype == PDB_DT_U8 || v->dtype == PDB_DT_I8) && v->ndim == 2 && !pdb_st_get_mx(st, v->name, -1, -1, &q, &sc, &fp4) && q && fp4)
        return 8.0 * (double)v->numel;
    return 4.0 * (double)v->numel;
}

/* Count from the checkpoint in dir: every layer's non-expert tensors whole, k/E of its routed
 * experts (every token picks k distinct experts per layer: top-k, or the hash layers' tid2eid
 * rows, which make-model writes distinct; experts are equal in size), one row of tid2eid and of
 * the embedding, the head and the other globals whole. MTP layers (index >= num_layers) are not run. */
static pdb_status v4_weight_bytes(const char *dir, const pdb_config *c, v4_wbytes *out) {
    pdb_st *st;
    memset(out, 0, sizeof *out);
    PDB_TRY(pdb_st_open_flags(dir, 0, &st));
    double ke = (double)c->num_experts_per_tok / (double)c->n_routed_experts;
    for (int64_t i = 0; i < pdb_st_count(st); i++) {
        const pdb_tensor_view *v = pdb_st_at(st, i);
        int64_t l = name_layer(v->name);
        double b = (double)v->nbytes, f = f32_bytes(st, v);
        if (l >= c->num_layers) continue;
        if (l >= 0 && strstr(v->name, ".experts.")) out->routed += ke * b, f *= ke;    /* routed, per expert or fused */
        else if (l >= 0 && strstr(v->name, "shared_experts.")) out->shared += b;
        else if (l >= 0 && strstr(v->name, "tid2eid") && v->ndim >= 1 && v->shape[0] > 0)
            b /= (double)v->shape[0], f /= (double)v->shape[0], out->other += b; /* the token's row */
        else if (l >= 0) out->attn += b;
        else if (strstr(v->name, "embed") && v->ndim == 2 && v->shape[0] > 0)
            b /= (double)v->shape[0], f /= (double)v->shape[0], out->other += b; /* one row */
        else if (strstr(v->name, "head.weight")) out->head += b;
        else out->other += b;
        out->f32 += f;
    }
    pdb_st_close(st);
    return PDB_OK;
}

static double v4_wtotal(const v4_wbytes *w) { return w->attn + w->shared + w->routed + w->head + w->other; }

/* Cache bytes the decode token at position p reads (its own row included), from the store
 * layout (pool dtypes and widths) and the config (docs/v4.md §2-3): every layer's window rows
 * min(W, p+1) ("win"); CSA layers attend min(visible, index_topk) compressed entries ("comp_csa")
 * and score every visible indexer key ("ikeys"); HCA layers attend every visible entry
 * ("comp_hca"); visible = (p+1) / stride. Not counted: the overlap halves and the compressors'
 * unfinished-window buffers (a few KB, read when a window completes). cb[3]: window, compressed
 * entries, indexer keys. */
static void v4_cache_bytes(const pdb_store_layout *lay, const pdb_config *c, int64_t p, double cb[3], double rows[3]) {
    for (int k = 0; k < 3; k++) cb[k] = rows[k] = 0;
    for (int i = 0; i < lay->n_pools; i++) {
        const pdb_store_pool *q = &lay->pools[i];
        double row = (double)q->width * (double)pdb_dtype_size(q->dtype), n = -1;
        int k = 1;
        if (!strcmp(q->name, "win")) n = (double)(p + 1 < q->rows ? p + 1 : q->rows), k = 0;
        else if (q->kind == PDB_STORE_POOL_APPEND && q->stride > 0) {
            int64_t nv = (p + 1) / q->stride;
            n = !strcmp(q->name, "comp_csa") && nv > c->index_topk ? (double)c->index_topk : (double)nv;
            k = !strcmp(q->name, "ikeys") ? 2 : 1;
        }
        if (n < 0) continue;
        cb[k] += row * n * (double)q->n_layers;
        rows[k] += n * (double)q->n_layers;
    }
}

typedef struct v4_bench {
    pdb_dec_model *m;
    const pdb_config *c;
    pdb_pool *pool, *probe_pool;
    float *probe_buf;
    size_t probe_n;
    double bw_best;
    v4_wbytes w;
    int rounds, profile;
    float *logits; /* [V] */
} v4_bench;

/* Prompt token t of sequence `seq` (spread over the vocabulary; the same prompts every run). */
static int32_t v4_prompt_id(const pdb_config *c, int64_t t, int seq) {
    return (int32_t)((t * 7919 + (int64_t)seq * 104729 + 1) % c->vocab_size);
}

/* The decoder's own prefill of ids [n] into s, in chunks of `chunk` tokens (the service's
 * SVC_CHUNK is 256); logits of the last token into lg (may be NULL). */
static pdb_status v4_prefill_into(v4_bench *b, pdb_dec_seq *s, const int32_t *ids, int64_t n, int64_t chunk, float *lg,
                                  double *first_tps, double *last_tps) {
    double start = pdb_clock_now(), c0 = cpu_s();
    for (int64_t t = 0; t < n; t += chunk) {
        int64_t k = n - t < chunk ? n - t : chunk;
        pdb_dec_seg sg = {s, ids + t, k, t + k == n ? lg : NULL};
        double t0 = pdb_clock_now();
        PDB_TRY(pdb_dec_forward(b->m, &sg, 1));
        double now = pdb_clock_now(), r = k / (now - t0);
        if (first_tps && t == 0) *first_tps = r;
        if (last_tps) *last_tps = r;
        if ((t + k) % 1024 == 0 && t + k < n) /* a long prefill reports as it goes (a run cut short still says something) */
            printf("  prefill so far: %lld of %lld tokens in %.1f s = %.2f tok/s (this chunk %.2f tok/s; %.1f s of CPU)\n",
                   (long long)(t + k), (long long)n, now - start, (t + k) / (now - start), r, cpu_s() - c0);
    }
    return PDB_OK;
}

/* Decode `ntok` greedy steps of s (after one untimed warm-up step) in rounds, each after a
 * probe; prints the rate and the roofline fractions counting weights + cache bytes. */
static pdb_status v4_decode(v4_bench *b, pdb_dec_seq *s, int32_t *tok, int ntok, const char *label, double *ms_step) {
    const pdb_config *c = b->c;
    const pdb_store_layout *lay = pdb_dec_model_layout(b->m);
    pdb_dec_seg sg = {s, tok, 1, b->logits};
    PDB_TRY(pdb_dec_forward(b->m, &sg, 1));
    *tok = (int32_t)pdb_math_argmax(b->logits, c->vocab_size);
    int rounds = b->rounds < ntok ? b->rounds : ntok;
    double dt = 0, cpu = 0, bytes = 0, wb = v4_wtotal(&b->w), cache[3] = {0}, crows[3] = {0}, r_frac[64], r_probe[64], r_tps[64];
    double best = 0;
    int64_t p0 = s->len; /* the first timed step's position (after the warm-up's) */
    if (b->profile) prof_clear();
    for (int r = 0, done = 0; r < rounds; r++) {
        double h, l, p = bandwidth_probe(b->probe_pool, b->probe_buf, b->probe_n, r ? 3 : 5, &h, &l), rb = 0;
        best = p > best ? p : best;
        int n = (int)((int64_t)ntok * (r + 1) / rounds) - done;
        for (int i = 0; i < n; i++) {
            double cb[3], cr[3];
            v4_cache_bytes(lay, c, s->len + i, cb, cr);
            rb += wb + cb[0] + cb[1] + cb[2];
            for (int k = 0; k < 3; k++) cache[k] += cb[k], crows[k] += cr[k];
        }
        if (b->profile) prof_set(1);
        double t0 = pdb_clock_now(), c0 = cpu_s();
        for (int i = 0; i < n; i++) {
            sg = (pdb_dec_seg){s, tok, 1, b->logits};
            PDB_TRY(pdb_dec_forward(b->m, &sg, 1));
            *tok = (int32_t)pdb_math_argmax(b->logits, c->vocab_size);
        }
        double d = pdb_clock_now() - t0;
        if (b->profile) prof_set(0);
        dt += d, cpu += cpu_s() - c0, bytes += rb, done += n;
        r_probe[r] = p, r_tps[r] = n / d, r_frac[r] = rb / d / 1e9 / p;
    }
    b->bw_best = best > b->bw_best ? best : b->bw_best;
    double fmin = r_frac[0], fmax = r_frac[0];
    for (int r = 1; r < rounds; r++) fmin = r_frac[r] < fmin ? r_frac[r] : fmin, fmax = r_frac[r] > fmax ? r_frac[r] : fmax;
    printf("%s: positions %lld..%lld, %d steps in %.2f s = %.3f tok/s (%.1f ms per step; %.2f s of CPU, %.0f%% of threads x wall)\n",
           label, (long long)p0, (long long)(p0 + ntok - 1), ntok, dt, ntok / dt, 1e3 * dt / ntok, cpu,
           100 * cpu / (dt * pdb_pool_threads(b->pool)));
    printf("  bytes per token: %.1f MB = weights %.1f MB + cache %.2f MB (window rows %.2f, compressed entries attended %.2f,"
           " indexer keys scored %.2f)\n", bytes / ntok / 1e6, wb / 1e6, (cache[0] + cache[1] + cache[2]) / ntok / 1e6,
           cache[0] / ntok / 1e6, cache[1] / ntok / 1e6, cache[2] / ntok / 1e6);
    printf("  cache rows read per token, all layers (mean): window %.1f, compressed entries attended %.1f, indexer keys scored %.1f\n",
           crows[0] / ntok, crows[1] / ntok, crows[2] / ntok);
    printf("  roofline: %.2f GB/s read = %.1f%% of the run's best probe (%.2f GB/s); paired rounds %d x (probe, %d steps):"
           " fraction per round median %.1f%% (min %.1f%%, max %.1f%%), probe median %.2f GB/s, decode median %.3f tok/s\n",
           bytes / dt / 1e9, 100 * bytes / dt / 1e9 / best, best, rounds, ntok / rounds, 100 * median(r_frac, rounds), 100 * fmin,
           100 * fmax, median(r_probe, rounds), median(r_tps, rounds));
    if (b->profile) prof_report(30);
    *ms_step = 1e3 * dt / ntok;
    return PDB_OK;
}

/* A sequence holding `ctx` tokens: by the decoder's own prefill (fill 0), or (fill 1) mounting
 * blocks through pdb_dec_seq_put_block: the first `base` tokens are prefilled natively in
 * blocks of bs and copied out (get_block), then block j of the context is base block j mod
 * (base / bs), so every row is one the decoder computed (in range, in its formats) though not
 * at its own position; timing does not depend on the values. base >= ctx: the real cache. */
static pdb_status v4_fill(v4_bench *b, pdb_dec_seq *s, int64_t ctx, int fill, int64_t base, int64_t bs, void **blocks,
                          int64_t *nblocks) {
    const pdb_config *c = b->c;
    if (!fill || ctx % bs) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)ctx);
        if (!ids) return pdb_err_set(PDB_NOMEM, "bench_decode: prompt of %lld tokens", (long long)ctx);
        for (int64_t t = 0; t < ctx; t++) ids[t] = v4_prompt_id(c, t, 0);
        double t0 = pdb_clock_now(), f = 0, l = 0;
        pdb_status st = v4_prefill_into(b, s, ids, ctx, 256, NULL, &f, &l);
        free(ids);
        if (!st) printf("fill %lld: the decoder's own prefill, %.1f s = %.1f tok/s (first chunk %.1f, last %.1f tok/s)\n",
                        (long long)ctx, pdb_clock_now() - t0, ctx / (pdb_clock_now() - t0), f, l);
        return st;
    }
    uint64_t bb = pdb_store_layout_block_bytes(pdb_dec_model_layout(b->m), bs);
    int64_t nb = (base < ctx ? base : ctx) / bs;
    if (nb < 1) nb = 1;
    if (*nblocks < nb) { /* (re)make the base blocks */
        free(*blocks);
        *nblocks = 0;
        *blocks = malloc((size_t)(bb * (uint64_t)nb));
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(nb * bs));
        pdb_dec_seq bs_seq;
        pdb_status st = !*blocks || !ids ? pdb_err_set(PDB_NOMEM, "bench_decode: %lld base blocks", (long long)nb)
                                         : pdb_dec_seq_init(&bs_seq, b->m, nb * bs);
        if (st) { free(ids); return st; }
        for (int64_t t = 0; t < nb * bs; t++) ids[t] = v4_prompt_id(c, t, 0);
        double t0 = pdb_clock_now();
        for (int64_t j = 0; j < nb && !st; j++) {
            pdb_dec_seg sg = {&bs_seq, ids + j * bs, bs, NULL};
            st = pdb_dec_forward(b->m, &sg, 1);
            if (!st) pdb_dec_seq_get_block(&bs_seq, j, bs, (char *)*blocks + (uint64_t)j * bb);
        }
        pdb_dec_seq_free(&bs_seq);
        free(ids);
        PDB_TRY(st);
        *nblocks = nb;
        printf("fill base: %lld tokens prefilled by the decoder (%lld blocks of %lld) in %.1f s, copied out with pdb_dec_seq_get_block\n",
               (long long)(nb * bs), (long long)nb, (long long)bs, pdb_clock_now() - t0);
    }
    double t0 = pdb_clock_now();
    for (int64_t j = 0; j < ctx / bs; j++) pdb_dec_seq_put_block(s, j, bs, (char *)*blocks + (uint64_t)(j % nb) * bb);
    s->len = ctx;
    printf("fill %lld: synthetic, %lld blocks mounted with pdb_dec_seq_put_block (block j = base block j mod %lld) in %.2f s\n",
           (long long)ctx, (long long)(ctx / bs), (long long)nb, pdb_clock_now() - t0);
    return PDB_OK;
}

/* n_max sequences alone, then each batch size of `sizes` through one pdb_dec_forward per step:
 * aggregate tok/s, and every sequence's logits (prompt and each step) compared bit for bit with
 * the same sequence alone. Returns 1 on a difference (named), -1 on an error, 0 when identical.
 * perturb: test only, flips one bit of sequence 1's step-1 logits from the alone run. */
static int v4_batch(v4_bench *b, const int *sizes, int n_sizes, int steps, int64_t prompt, int perturb) {
    const pdb_config *c = b->c;
    int n_max = 1, bad = 0;
    for (int i = 0; i < n_sizes; i++) n_max = sizes[i] > n_max ? sizes[i] : n_max;
    if (perturb && n_max < 2) n_max = 2;
    int64_t V = c->vocab_size, per = (int64_t)(steps + 1) * V;
    float *ref = malloc(sizeof(float) * (size_t)(per * n_max)), *lg = malloc(sizeof(float) * (size_t)(V * n_max));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(prompt * n_max)), *tok = malloc(sizeof(int32_t) * (size_t)n_max);
    pdb_dec_seq *seqs = calloc((size_t)n_max, sizeof *seqs);
    pdb_dec_seg *segs = calloc((size_t)n_max, sizeof *segs);
    if (!ref || !lg || !ids || !tok || !seqs || !segs) {
        fprintf(stderr, "bench_decode: out of memory for %d sequences' logits\n", n_max);
        bad = -1;
        goto done;
    }
    for (int q = 0; q < n_max; q++)
        for (int64_t t = 0; t < prompt; t++) ids[q * prompt + t] = v4_prompt_id(c, t, q + 1);
    double alone = 0;
    for (int q = 0; q < n_max && !bad; q++) { /* each sequence alone: the reference */
        pdb_dec_seq s;
        if (pdb_dec_seq_init(&s, b->m, prompt + steps + 1)) { bad = -1; break; }
        pdb_dec_seg sg = {&s, ids + q * prompt, prompt, ref + q * per};
        if (pdb_dec_forward(b->m, &sg, 1)) bad = -1;
        double t0 = pdb_clock_now();
        for (int k = 1; k <= steps && !bad; k++) {
            int32_t t = (int32_t)pdb_math_argmax(ref + q * per + (k - 1) * V, V);
            sg = (pdb_dec_seg){&s, &t, 1, ref + q * per + k * V};
            if (pdb_dec_forward(b->m, &sg, 1)) bad = -1;
        }
        alone += pdb_clock_now() - t0;
        pdb_dec_seq_free(&s);
    }
    if (bad) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); goto done; }
    if (perturb) ((uint32_t *)(ref + 1 * per + 1 * V))[V / 2] ^= 1u;
    printf("batch: %d sequences of %lld prompt tokens + %d greedy steps each, alone: %.3f tok/s (one sequence at a time)\n", n_max,
           (long long)prompt, steps, n_max * steps / alone);
    for (int z = 0; z < n_sizes && !bad; z++) {
        int n = sizes[z];
        for (int q = 0; q < n && !bad; q++)
            if (pdb_dec_seq_init(&seqs[q], b->m, prompt + steps + 1)) bad = -1;
        for (int q = 0; q < n && !bad; q++) segs[q] = (pdb_dec_seg){&seqs[q], ids + q * prompt, prompt, lg + q * V};
        if (!bad && pdb_dec_forward(b->m, segs, n)) bad = -1;
        int diff_q = -1, diff_k = -1;
        double dt = 0;
        for (int k = 0; k <= steps && !bad; k++) {
            for (int q = 0; q < n && diff_q < 0; q++)
                if (memcmp(lg + q * V, ref + q * per + k * V, sizeof(float) * (size_t)V)) diff_q = q, diff_k = k;
            if (k == steps) break;
            for (int q = 0; q < n; q++) {
                tok[q] = (int32_t)pdb_math_argmax(lg + q * V, V);
                segs[q] = (pdb_dec_seg){&seqs[q], &tok[q], 1, lg + q * V};
            }
            double t0 = pdb_clock_now();
            if (pdb_dec_forward(b->m, segs, n)) bad = -1;
            dt += pdb_clock_now() - t0;
        }
        for (int q = 0; q < n; q++) pdb_dec_seq_free(&seqs[q]);
        if (bad) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); break; }
        printf("batch %2d: %d steps of %d sequences in one pdb_dec_forward each: %.2f s = %.3f tok/s aggregate (%.2fx one alone); ",
               n, steps, n, dt, n * steps / dt, (n * steps / dt) / (n_max * steps / alone));
        if (diff_q < 0) printf("logits identical to each sequence alone (%d sequences x %d forwards)\n", n, steps + 1);
        else {
            printf("logits DIFFER: first at sequence %d, step %d (0: the prompt)\n", diff_q, diff_k);
            bad = 1;
        }
    }
done:
    free(ref), free(lg), free(ids), free(tok), free(seqs), free(segs);
    return bad;
}

/* Comma-separated positive integers into v[max]; the count, or -1 for a bad list. */
static int int_list(const char *a, int *v, int max) {
    int n = 0;
    while (*a) {
        char *e;
        long x = strtol(a, &e, 10);
        if (e == a || x < 1 || x > 1L << 30 || n == max || (*e && *e != ',')) return -1;
        v[n++] = (int)x;
        a = *e ? e + 1 : e;
    }
    return n ? n : -1;
}

typedef struct v4_opts {
    int ntok, context, rounds, profile, daz, probe_huge, st_flags;
    long probe_mb;
    int ctx[16], n_ctx, batch[8], n_batch, batch_steps, batch_prompt, prefill, fill, fill_base, perturb;
} v4_opts;

static int v4_main(const char *dir, pdb_dec_model *m, pdb_pool *pool, const v4_opts *o) {
    v4_bench b = {.m = m, .c = pdb_dec_model_config(m), .pool = pool, .rounds = o->rounds, .profile = o->profile};
    const pdb_config *c = b.c;
    if (v4_weight_bytes(dir, c, &b.w)) { fprintf(stderr, "bench_decode: %s\n", pdb_err_msg()); return 1; }
    int64_t bs = 128; /* the mount's block size: a multiple of 128 and of every compression rate */
    while ((c->compress_rate_csa > 0 && bs % c->compress_rate_csa) || (c->compress_rate_hca > 0 && bs % c->compress_rate_hca)) bs += 128;
    for (int i = 0; i < o->n_ctx; i++)
        if (o->fill && o->ctx[i] % bs) {
            fprintf(stderr, "bench_decode: --ctx %d: a synthetic fill mounts whole blocks of %lld tokens (or use --fill prefill)\n",
                    o->ctx[i], (long long)bs);
            return 2;
        }
    long l3 = pdb_sys_l3_bytes_sysfs();
    size_t probe_bytes = l3 > 0 && (size_t)l3 * 8 > ((size_t)1 << 30) ? (size_t)l3 * 8 : (size_t)1 << 30;
    if (o->probe_mb) {
        probe_bytes = (size_t)o->probe_mb << 20 < (size_t)1 << 19 ? (size_t)1 << 19 : (size_t)o->probe_mb << 20;
        printf("probe size set to %ld MB: with less than 8x the last-level cache it is no memory roofline\n", o->probe_mb);
    }
    b.probe_n = probe_bytes / sizeof(float) / 8192 * 8192;
    b.probe_buf = pdb_mem_map(b.probe_n * sizeof(float), o->probe_huge);
    b.logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    b.probe_pool = pool;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu > pdb_pool_threads(pool) && pdb_pool_create((int)ncpu, &b.probe_pool)) b.probe_pool = pool;
    if (!b.probe_buf || !b.logits) { fprintf(stderr, "bench_decode: out of memory for the probe\n"); return 1; }
    for (size_t i = 0; i < b.probe_n; i++) b.probe_buf[i] = (float)(i & 7);
    if (o->daz) {
        daz_ctx dc = {0, pdb_pool_threads(pool)};
        pdb_pool_run(pool, dc.n, daz_task, &dc);
    }
    int n_csa = 0, n_hca = 0, n_hash = 0;
    for (int64_t l = 0; l < c->num_layers; l++)
        n_csa += c->v4_attn[l] == PDB_V4_ATTN_CSA, n_hca += c->v4_attn[l] == PDB_V4_ATTN_HCA, n_hash += c->v4_hash_moe[l];
    double wt = v4_wtotal(&b.w);
    printf("model %s (deepseek_v4, scheme %s, cache semantics %s): %lld layers (%lld sliding-only, %d CSA, %d HCA; %d hash-routed),"
           " hidden %lld, %lld heads x %lld, window %lld, index top-%lld, %lld experts (top %lld) + %lld shared, vocab %lld\n",
           dir, pdb_dec_model_scheme(m), pdb_dec_model_semantics(m), (long long)c->num_layers,
           (long long)(c->num_layers - n_csa - n_hca), n_csa, n_hca, n_hash, (long long)c->hidden_size, (long long)c->num_heads,
           (long long)c->head_dim, (long long)c->sliding_window, (long long)c->index_topk, (long long)c->n_routed_experts,
           (long long)c->num_experts_per_tok, (long long)c->n_shared_experts, (long long)c->vocab_size);
    printf("threads %d, kernels %s; stage clocks: none (the decoder API exposes whole steps only; --profile samples functions)\n",
           pdb_pool_threads(pool), pdb_qmat_isa_name(pdb_qmat_isa_detect()));
    printf("weights read per token, as stored: %.1f MB = attention side %.1f MB (attention, compressors, indexer, norms,"
           " hyper-connections, router) + shared expert %.1f MB + routed experts %.1f MB (top %lld of %lld per layer) + head %.1f MB"
           " + other %.2f MB (final norm, hc_head, an embedding row, tid2eid rows)\n", wt / 1e6, b.w.attn / 1e6, b.w.shared / 1e6,
           b.w.routed / 1e6, (long long)c->num_experts_per_tok, (long long)c->n_routed_experts, b.w.head / 1e6, b.w.other / 1e6);
    printf("  the same weights as f32 copies: %.1f MB per token (%.2fx)\n", b.w.f32 / 1e6, b.w.f32 / wt);
    printf("last-level cache: %.1f MB (sysfs; sysconf says %.1f MB); weights read per token = %.1fx that (a roofline of memory needs"
           " several x); probe %.2f GB\n", l3 / 1e6, sysconf(_SC_LEVEL3_CACHE_SIZE) / 1e6, l3 > 0 ? wt / (double)l3 : 0.0,
           b.probe_n * sizeof(float) / 1e9);
    int rc = 0;
    double ms_short = 0, ms;
    void *blocks = NULL;
    int64_t nblocks = 0;
    pdb_dec_seq s;
    int32_t tok;
    /* short context */
    if (pdb_dec_seq_init(&s, m, o->context + o->ntok + 2) || v4_fill(&b, &s, o->context, 0, 0, bs, &blocks, &nblocks)) goto fail;
    tok = (int32_t)v4_prompt_id(c, o->context, 0);
    char label[64];
    snprintf(label, sizeof label, "decode at context %d", o->context);
    if (v4_decode(&b, &s, &tok, o->ntok, label, &ms_short)) goto fail;
    pdb_dec_seq_free(&s);
    for (int i = 0; i < o->n_ctx; i++) {
        if (pdb_dec_seq_init(&s, m, (int64_t)o->ctx[i] + o->ntok + 2) ||
            v4_fill(&b, &s, o->ctx[i], o->fill, o->fill_base, bs, &blocks, &nblocks))
            goto fail;
        tok = (int32_t)v4_prompt_id(c, o->ctx[i], 0);
        snprintf(label, sizeof label, "decode at context %d", o->ctx[i]);
        if (v4_decode(&b, &s, &tok, o->ntok, label, &ms)) goto fail;
        printf("  where the time goes: %.1f ms per step = %.1f ms as at context %d + %.1f ms more at context %d (the cache:"
               " window, compressed attention, indexer scores)\n", ms, ms_short, o->context, ms - ms_short, o->ctx[i]);
        pdb_dec_seq_free(&s);
    }
    free(blocks);
    blocks = NULL;
    if (o->n_batch) {
        int r = v4_batch(&b, o->batch, o->n_batch, o->batch_steps, o->batch_prompt, o->perturb);
        if (r) rc = r < 0 ? 1 : 3;
    }
    if (o->prefill) { /* the decoder's native prefill, chunked as its service does */
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->prefill);
        if (!ids || pdb_dec_seq_init(&s, m, o->prefill)) goto fail;
        for (int64_t t = 0; t < o->prefill; t++) ids[t] = v4_prompt_id(c, t, 0);
        double f = 0, l = 0, t0 = pdb_clock_now(), c0 = cpu_s();
        pdb_status st = v4_prefill_into(&b, &s, ids, o->prefill, 256, b.logits, &f, &l);
        double d = pdb_clock_now() - t0;
        free(ids);
        pdb_dec_seq_free(&s);
        if (st) goto fail;
        uint64_t dg = 1469598103934665603ull; /* FNV-1a of the last token's logits: equal digests = the same floats */
        for (int64_t v = 0; v < c->vocab_size; v++) {
            uint32_t u;
            memcpy(&u, &b.logits[v], 4);
            for (int k = 0; k < 4; k++) dg = (dg ^ ((u >> (8 * k)) & 0xFF)) * 1099511628211ull;
        }
        printf("prefill: %d tokens by the decoder's own forward in chunks of 256 (as its service): %.1f s = %.2f tok/s (first chunk"
               " %.2f tok/s, last %.2f; %.1f s of CPU); last token's logits: argmax %lld, FNV-1a %016llx\n", o->prefill, d,
               o->prefill / d, f, l, cpu_s() - c0, (long long)pdb_math_argmax(b.logits, c->vocab_size), (unsigned long long)dg);
    }
    if (b.probe_pool != pool) pdb_pool_destroy(b.probe_pool);
    pdb_mem_unmap(b.probe_buf, b.probe_n * sizeof(float));
    free(b.logits);
    return rc;
fail:
    fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
    free(blocks);
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a long run's lines appear as they are printed, also in a file */
    int classes = 0, profile = 0, daz = 0, do_phases = 0, npos = 0, context = 64, rounds = 8;
    int st_flags = PDB_DEC_WEIGHTS_DEFAULT, probe_huge = 1, trace = 0, ab = -1, attn = PDB_V2_ATTN_AUTO;
    long probe_mb = 0;
    const char *pos[3] = {0};
    v4_opts v4o = {.n_batch = 3, .batch = {1, 4, 16}, .batch_steps = 4, .batch_prompt = 16, .fill = 1, .fill_base = 1024};
    int v4_only = 0, v2_only = 0; /* options that only one mode takes, seen */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            v4o.n_ctx = int_list(argv[++i], v4o.ctx, 16), v4_only = 1;
            if (v4o.n_ctx < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            const char *a = argv[++i];
            v4o.n_batch = !strcmp(a, "none") ? 0 : int_list(a, v4o.batch, 8), v4_only = 1;
            if (v4o.n_batch < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--batch-steps") && i + 1 < argc) {
            v4o.batch_steps = atoi(argv[++i]), v4_only = 1;
            if (v4o.batch_steps < 1 || v4o.batch_steps > 1024) npos = -9;
        }
        else if (!strcmp(argv[i], "--batch-prompt") && i + 1 < argc) {
            v4o.batch_prompt = atoi(argv[++i]), v4_only = 1;
            if (v4o.batch_prompt < 1) npos = -9;
        }
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) {
            v4o.prefill = atoi(argv[++i]), v4_only = 1;
            if (v4o.prefill < 1) npos = -9;
        }
        else if (!strcmp(argv[i], "--fill") && i + 1 < argc) {
            const char *a = argv[++i];
            v4o.fill = !strcmp(a, "synthetic") ? 1 : !strcmp(a, "prefill") ? 0 : -1, v4_only = 1;
            if (v4o.fill < 0) npos = -9;
        }
        else if (!strcmp(argv[i], "--fill-base") && i + 1 < argc) {
            v4o.fill_base = atoi(argv[++i]), v4_only = 1;
            if (v4o.fill_base < 1) npos = -9;
        }
        else if (!strcmp(argv[i], "--perturb-check")) v4o.perturb = 1, v4_only = 1;
        else if (!strcmp(argv[i], "--classes")) classes = 1;
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
                        "  --profile: sample the program counter of every thread; --daz: decode with denormals flushed\n"
                        "V4 mode (a deepseek_v4 checkpoint; --attn, --ab, --classes, --phases, --trace are V2's):\n"
                        "  [--ctx N,N,...] [--fill synthetic|prefill] [--fill-base N] [--batch N,N,...|none] [--batch-steps N] [--batch-prompt N]\n"
                        "  [--prefill N]\n"
                        "  --ctx: also decode at these contexts (default: only --context)\n"
                        "  --fill: fill a --ctx cache by mounting blocks of the decoder's own prefill of --fill-base tokens (default 1024),\n"
                        "          repeated with pdb_dec_seq_put_block (synthetic, the default), or by prefilling all of it\n"
                        "  --batch: aggregate tok/s of N sequences per forward, each checked bit for bit against it alone (default 1,4,16)\n"
                        "  --batch-steps, --batch-prompt: greedy steps and prompt tokens per sequence in --batch (default 4, 16)\n"
                        "  --prefill N: the decoder's own prefill of N tokens, tok/s\n"
                        "  --perturb-check: test only: corrupts one reference logit so the --batch check must report a difference\n");
        return help ? 0 : 2;
    }
    int ntok = pos[1] ? atoi(pos[1]) : 32, threads = pos[2] ? atoi(pos[2]) : 0;
    if (ntok < 1 || threads < 0) {
        fprintf(stderr, "bench_decode: tokens must be >= 1 and threads >= 0 (0: every online CPU)\n");
        return 2;
    }
    v2_only = classes || do_phases || trace || ab >= 0 || attn != PDB_V2_ATTN_AUTO;
    /* the model type first (config.json alone): a mode's options are checked before any weight is read */
    pdb_config cfg;
    if (pdb_config_load(pos[0], &cfg)) {
        fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
        return 1;
    }
    int is_v4 = !strcmp(cfg.model_type, "deepseek_v4");
    if (is_v4 && v2_only) {
        fprintf(stderr, "bench_decode: %s is a deepseek_v4 checkpoint; --attn, --ab, --classes, --phases and --trace measure the"
                        " deepseek_v2 decoder's internals and are not available in the V4 mode\n", pos[0]);
        return 2;
    }
    if (!is_v4 && v4_only) {
        fprintf(stderr, "bench_decode: %s is a %s checkpoint; --ctx, --batch, --batch-steps, --batch-prompt, --prefill, --fill,"
                        " --fill-base and --perturb-check belong to the V4 mode (deepseek_v4 checkpoints)\n", pos[0], cfg.model_type);
        return 2;
    }
    if (strcmp(cfg.model_type, "deepseek_v4") && strcmp(cfg.model_type, "deepseek_v2")) {
        fprintf(stderr, "bench_decode: %s is a %s checkpoint; this benchmark measures deepseek_v2 and deepseek_v4 decoders\n", pos[0],
                cfg.model_type);
        return 1;
    }
    pdb_pool *pool;
    pdb_dec_model *m;
    if (pdb_pool_create(threads, &pool)) {
        fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
        return 1;
    }
    if (pdb_dec_model_open_flags(pos[0], pool, st_flags, &m)) {
        fprintf(stderr, "bench_decode: %s\n", pdb_err_msg());
        pdb_pool_destroy(pool);
        return 1;
    }
    const pdb_config *c = pdb_dec_model_config(m);
    if (is_v4) {
        v4o.ntok = ntok, v4o.context = context, v4o.rounds = rounds, v4o.profile = profile, v4o.daz = daz;
        v4o.probe_huge = probe_huge, v4o.st_flags = st_flags, v4o.probe_mb = probe_mb;
        int rc = v4_main(pos[0], m, pool, &v4o);
        pdb_dec_model_close(m);
        pdb_pool_destroy(pool);
        return rc;
    }
    const pdb_v2_qweights *w = pdb_dec_model_weights(m, "deepseek_v2");
    if (!w) { /* the bytes a step touches are counted from V2's weights */
        fprintf(stderr, "bench_decode: %s (%s) exposes no deepseek_v2 weights to count\n", pos[0], c->model_type);
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
    if (profile) prof_report(40);
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
