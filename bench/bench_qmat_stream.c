/* bench_qmat_stream: the decode kernels streamed from memory. One token (T = 1) through
 * pdb_qmat_matmul on the thread pool, for each weight format (bf16, MXFP8, MXFP4) and each vector
 * ISA this CPU has (forced with pdb_qmat_isa_set), over a matrix of several times the last-level
 * cache, against a plain read probe of the SAME bytes (codes + scales; the stronger of a read of every
 * word and of one word per cache line) on the same pool, in one
 * run: rounds of (probe, every ISA's matmul; the ISA order reversed every other round), so a
 * machine whose speed moves within seconds moves both. GB/s counts the matrix's bytes (codes +
 * scales) per pass. Per format and ISA it prints the best and the median GB/s and the median
 * over rounds of (kernel GB/s / the probe of the same round): the fraction of the memory's read
 * bandwidth the kernel streams at. The outputs of the ISAs are checked bit-identical (exit 1
 * otherwise). Wall time (the pool's threads), so a loaded machine shows as a low probe; the
 * output gives the load average before and after.
 * Usage: bench_qmat_stream [--mb N] [--threads N] [--rounds N] [--cols N] [--scalar]
 *   --mb       MB of codes per matrix (default: 8 x the L3 as sysfs gives it, 256 to 4096)
 *   --threads  pool threads (default: the online CPUs)
 *   --rounds   rounds (default 7)
 *   --cols     matrix width (default 4096, V4-Flash's hidden size; a multiple of 32)
 *   --scalar   also the scalar kernels (slow: a few passes only are worth it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_mem.h"
#include "pdb_pool.h"
#include "pdb_qmat.h"
#include "pdb_sys.h"

enum { MAX_ROUNDS = 64, N_ISA = 4 };

typedef struct { const uint64_t *p; size_t n; uint64_t sums[256]; int tasks; } probe_ctx;

static void probe_task(void *vc, int64_t task, int thread) { /* eight independent sums, one load per 8 bytes */
    probe_ctx *c = vc;
    size_t per = c->n / (size_t)c->tasks, a = (size_t)task * per, e = task == c->tasks - 1 ? c->n : a + per;
    uint64_t s[8] = {0};
    size_t i = a;
    for (; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; k++) s[k] += c->p[i + k];
    for (; i < e; i++) s[0] += c->p[i];
    c->sums[task] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* One load per 64-byte line, eight sums (bench_decode's second form): only the memory limits it. */
static void probe_line_task(void *vc, int64_t task, int thread) {
    probe_ctx *c = vc;
    size_t per = c->n / (size_t)c->tasks, a = (size_t)task * per, e = task == c->tasks - 1 ? c->n : a + per;
    uint64_t s[8] = {0};
    for (size_t i = a; i + 64 <= e; i += 64)
        for (int k = 0; k < 8; k++) s[k] += c->p[i + 8 * k];
    c->sums[task] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* The read probe: the stronger of the two forms (every word; one word per line), GB/s of the bytes. */
static double probe(pdb_pool *pool, const uint8_t *buf, size_t bytes) {
    double best = 0;
    for (int form = 0; form < 2; form++) {
        probe_ctx c = {(const uint64_t *)buf, bytes / 8, {0}, 64};
        double t0 = pdb_clock_now();
        pdb_pool_run(pool, c.tasks, form ? probe_line_task : probe_task, &c);
        double gbs = (double)bytes / (pdb_clock_now() - t0) / 1e9;
        volatile uint64_t sink = 0;
        for (int i = 0; i < c.tasks; i++) sink += c.sums[i];
        (void)sink;
        if (gbs > best) best = gbs;
    }
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static void loadavg(char *out, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    out[0] = 0;
    if (!f) return;
    if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

int main(int argc, char **argv) {
    long mb = 0, threads = sysconf(_SC_NPROCESSORS_ONLN), rounds = 7, cols = 4096;
    int scalar = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atol(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) cols = atol(argv[++i]);
        else if (!strcmp(argv[i], "--scalar")) scalar = 1;
        else {
            fprintf(stderr, "usage: bench_qmat_stream [--mb N] [--threads N] [--rounds N] [--cols N] [--scalar]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || threads < 1 || threads > 256 || cols < 32 || cols % 32) {
        fprintf(stderr, "bench_qmat_stream: --rounds 1..%d, --threads 1..256, --cols a multiple of 32\n", MAX_ROUNDS);
        return 2;
    }
    long l3 = pdb_sys_l3_bytes_sysfs();
    if (!mb) mb = l3 > 0 ? 8 * l3 / (1 << 20) : 256;
    if (mb < 256) mb = 256;
    if (mb > 4096) mb = 4096;
    pdb_pool *pool;
    if (pdb_pool_create((int)threads, &pool) != PDB_OK) return 1;
    pdb_qmat_isa isas[N_ISA];
    int n_isa = 0;
    for (int i = PDB_ISA_NEON; i >= PDB_ISA_SCALAR; i--) /* widest first */
        if (pdb_qmat_isa_supported((pdb_qmat_isa)i) && (i != PDB_ISA_SCALAR || scalar)) isas[n_isa++] = (pdb_qmat_isa)i;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    char la[128];
    loadavg(la, sizeof la);
    printf("bench_qmat_stream: %ld MB of codes per matrix (L3 %.1f MB), %ld cols, %ld threads, %ld rounds of (read probe, each ISA);"
           " load average before: %s\n", mb, l3 / 1048576.0, cols, threads, rounds, la);
    printf("%-6s %-9s %9s %9s %9s %12s  %s\n", "format", "isa", "best GB/s", "med GB/s", "probe med", "med kern/probe", "bits");
    static const pdb_qfmt fmts[] = {PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4};
    static const char *names[] = {"bf16", "mxfp8", "mxfp4"};
    int status = 0;
    for (int f = 0; f < 3; f++) {
        pdb_qfmt fmt = fmts[f];
        double per_w = fmt == PDB_QF_BF16 ? 2 : fmt == PDB_QF_MXFP8 ? 1 : 0.5; /* code bytes per weight */
        int64_t rows = (int64_t)((double)mb * 1048576.0 / per_w / (double)cols) / 4 * 4;
        size_t nq = (size_t)((double)rows * (double)cols * per_w), ns = fmt == PDB_QF_BF16 ? 0 : (size_t)(rows * cols / 32);
        size_t total = (nq + ns + 63) / 64 * 64; /* codes, then scales, in one mapping: the probe reads both */
        uint8_t *buf = pdb_mem_map(total, 1);
        float *x = malloc(sizeof(float) * (size_t)cols), *y[N_ISA], *rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(threads, cols));
        if (!buf || !x || !rowbuf) return 1;
        for (int i = 0; i < n_isa; i++) y[i] = malloc(sizeof(float) * (size_t)rows);
        uint32_t r = 12345u + (uint32_t)f;
        for (size_t i = 0; i < nq; i++) {
            r = r * 1664525u + 1013904223u;
            uint8_t b = (uint8_t)(r >> 24);
            if (fmt == PDB_QF_MXFP8 && (b & 0x7F) == 0x7F) b ^= 1;                  /* the quantizer writes no NaN */
            if (fmt == PDB_QF_BF16 && (i & 1)) b = (uint8_t)((b & 0x80) | (0x3C + (b & 3))); /* finite, |w| ~ 2^-7..2^0 */
            buf[i] = b;
        }
        for (size_t i = 0; i < ns; i++) {
            r = r * 1664525u + 1013904223u;
            buf[nq + i] = (uint8_t)(112 + (r >> 29)); /* trained weights' block scales: ~2^-15 .. 2^-8 */
        }
        memset(buf + nq + ns, 0, total - nq - ns);
        for (int64_t i = 0; i < cols; i++) {
            r = r * 1664525u + 1013904223u;
            x[i] = (float)((int)(r >> 16) - 32768) / 32768.0f;
        }
        pdb_qmat w = {fmt, rows, cols, buf, ns ? buf + nq : NULL, 0};
        pdb_qmat_scan_nan(&w);
        double gbs[N_ISA][MAX_ROUNDS], frac[N_ISA][MAX_ROUNDS], pr[MAX_ROUNDS];
        pdb_qmat_matmul(pool, &w, x, cols, 1, y[0], rows, rowbuf); /* pages touched, caches warm */
        for (int rd = 0; rd < rounds; rd++) {
            pr[rd] = probe(pool, buf, nq + ns);
            for (int k = 0; k < n_isa; k++) {
                int i = rd % 2 ? n_isa - 1 - k : k;
                pdb_qmat_isa_set(isas[i]);
                double t0 = pdb_clock_now();
                pdb_qmat_matmul(pool, &w, x, cols, 1, y[i], rows, rowbuf);
                gbs[i][rd] = (double)(nq + ns) / (pdb_clock_now() - t0) / 1e9;
                frac[i][rd] = gbs[i][rd] / pr[rd];
            }
        }
        pdb_qmat_isa_set(best);
        for (int i = 0; i < n_isa; i++) {
            double b = 0;
            for (int rd = 0; rd < rounds; rd++) b = gbs[i][rd] > b ? gbs[i][rd] : b;
            int same = !memcmp(y[i], y[0], sizeof(float) * (size_t)rows);
            if (!same) status = 1;
            printf("%-6s %-9s %9.2f %9.2f %9.2f %11.1f%%  %s\n", names[f], pdb_qmat_isa_name(isas[i]), b, median(gbs[i], (int)rounds),
                   median(pr, (int)rounds), 100 * median(frac[i], (int)rounds), i == 0 ? "reference" : same ? "identical" : "DIFFER");
        }
        printf("  (%s: %lld x %ld, %.1f MB codes + %.1f MB scales; probes per round:", names[f], (long long)rows, cols, nq / 1048576.0,
               ns / 1048576.0);
        for (int rd = 0; rd < rounds; rd++) printf(" %.1f", pr[rd]);
        printf(")\n");
        for (int i = 0; i < n_isa; i++) free(y[i]);
        free(x), free(rowbuf);
        pdb_mem_unmap(buf, total);
    }
    loadavg(la, sizeof la);
    printf("load average after: %s\n", la);
    pdb_pool_destroy(pool);
    return status;
}
